//! `--group`: identical outputs of several nodes printed once, at the end,
//! under the ranks that printed them (as `clush -b` and `dshbak -c` do).
//! Stdout and stderr are grouped apart and go to their own streams; a node
//! that printed nothing on a stream is left out of that stream's groups.

use std::collections::BTreeMap;

/// One node's gathered output.
pub struct NodeOutput<'a> {
    pub rank: usize,
    pub host: &'a str,
    pub bytes: &'a [u8],
    /// The node printed more than was kept.
    pub cut: bool,
}

/// The groups of identical outputs, in the order of their first rank.
pub fn groups<'a>(nodes: &[NodeOutput<'a>]) -> Vec<(Vec<usize>, &'a [u8], bool)> {
    let mut by_output: BTreeMap<(&[u8], bool), Vec<usize>> = BTreeMap::new();
    for n in nodes.iter().filter(|n| !n.bytes.is_empty()) {
        by_output.entry((n.bytes, n.cut)).or_default().push(n.rank);
    }
    let mut groups: Vec<(Vec<usize>, &[u8], bool)> = by_output
        .into_iter()
        .map(|((bytes, cut), mut ranks)| {
            ranks.sort_unstable();
            (ranks, bytes, cut)
        })
        .collect();
    groups.sort_by_key(|(ranks, _, _)| ranks[0]);
    groups
}

/// The text printed for one stream: each group under a header naming its
/// ranks (and the host, for one node).
pub fn render(nodes: &[NodeOutput<'_>], cut_at: usize) -> Vec<u8> {
    let hosts: BTreeMap<usize, &str> = nodes.iter().map(|n| (n.rank, n.host)).collect();
    let mut out = Vec::new();
    for (ranks, bytes, cut) in groups(nodes) {
        let who = match ranks.as_slice() {
            [rank] => format!("rank {rank} ({})", hosts[rank]),
            _ => format!(
                "ranks {} ({} nodes)",
                crate::topology::nodeset::fold_ranks(&ranks),
                ranks.len()
            ),
        };
        let rule = "-".repeat(who.len().clamp(16, 72));
        out.extend_from_slice(format!("{rule}\n{who}\n{rule}\n").as_bytes());
        out.extend_from_slice(bytes);
        if !bytes.ends_with(b"\n") {
            out.push(b'\n');
        }
        if cut {
            out.extend_from_slice(
                format!(
                    "(output cut: only the first {} MiB of each node is kept)\n",
                    cut_at / (1024 * 1024)
                )
                .as_bytes(),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node<'a>(rank: usize, host: &'a str, bytes: &'a [u8]) -> NodeOutput<'a> {
        NodeOutput {
            rank,
            host,
            bytes,
            cut: false,
        }
    }

    #[test]
    fn identical_outputs_are_printed_once_with_their_ranks() {
        let nodes = [
            node(0, "a", b"ok\n"),
            node(1, "b", b"ok\n"),
            node(2, "c", b"disk full\n"),
            node(3, "d", b"ok\n"),
            node(4, "e", b""),
            node(5, "f", b"ok\n"),
        ];
        let text = String::from_utf8(render(&nodes, 4 << 20)).unwrap();
        let expected = "\
----------------------
ranks 0-1,3,5 (4 nodes)
----------------------
ok
----------------
rank 2 (c)
----------------
disk full
";
        // The rule is as long as the header, at least 16.
        assert_eq!(
            text,
            expected.replace("----------------------\n", &format!("{}\n", "-".repeat(23)))
        );
    }

    #[test]
    fn a_last_line_without_its_end_gets_one_and_cut_output_says_so() {
        let nodes = [NodeOutput {
            rank: 7,
            host: "h",
            bytes: b"partial",
            cut: true,
        }];
        let text = String::from_utf8(render(&nodes, 4 << 20)).unwrap();
        assert!(
            text.ends_with("partial\n(output cut: only the first 4 MiB of each node is kept)\n")
        );
    }
}
