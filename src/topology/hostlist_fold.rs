//! Folding a list of nodes back into hostlist expressions, as `nodeset -f`
//! does: `gpu-node-0001:8,...,gpu-node-9999:8` → `gpu-node-[0001-9999]:8`.
//!
//! The fold keeps the rank order exactly (a bracket group expands in the
//! order it is written, so `a[3,1]` is `a3 a1`) and parses back, through
//! `host_slots`, to the same nodes. Only the last run of digits of a name is
//! folded; consecutive nodes that share what surrounds it (and the slot
//! count) share one element. Its length depends on how regular the names
//! are, not on how many there are.

use std::fmt::Write;

use super::host_slots::Node;
use super::nodeset::split;

/// One bracket item: `07` or `07-11` (every number printed with the width of
/// the start, as the parser expands it).
struct Item<'a> {
    start: &'a str,
    last: u64,
}

/// Consecutive nodes with the same prefix, suffix and slots.
struct Element<'a> {
    prefix: &'a str,
    suffix: &'a str,
    slots: u32,
    items: Vec<Item<'a>>,
}

impl Element<'_> {
    fn write(&self, out: &mut String, with_slots: bool) {
        out.push_str(self.prefix);
        let single = self.items.len() == 1 && self.items[0].start.parse() == Ok(self.items[0].last);
        if single {
            out.push_str(self.items[0].start);
        } else {
            out.push('[');
            for (i, item) in self.items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(item.start);
                if item.start.parse() != Ok(item.last) {
                    let _ = write!(out, "-{:0width$}", item.last, width = item.start.len());
                }
            }
            out.push(']');
        }
        out.push_str(self.suffix);
        if with_slots {
            let _ = write!(out, ":{}", self.slots);
        }
    }
}

/// The nodes as a `MULTINODE_HOSTLIST` (`with_slots`) or
/// `MULTINODE_HOSTLIST_NOSLOTS` expression, folded.
pub(crate) fn fold(nodes: &[Node], with_slots: bool) -> String {
    let mut out = String::new();
    let mut current: Option<Element<'_>> = None;
    let flush = |out: &mut String, element: Option<Element<'_>>| {
        if let Some(element) = element {
            if !out.is_empty() {
                out.push(',');
            }
            element.write(out, with_slots);
        }
    };
    for node in nodes {
        let slots = if with_slots { node.slots } else { 1 };
        let Some(p) = split(&node.host) else {
            flush(&mut out, current.take());
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(&node.written());
            if with_slots {
                let _ = write!(out, ":{slots}");
            }
            continue;
        };
        let Ok(n) = p.digits.parse::<u64>() else {
            unreachable!("at most 18 digits always parse")
        };
        if let Some(element) = current.as_mut()
            && element.prefix == p.prefix
            && element.suffix == p.suffix
            && element.slots == slots
        {
            let last = element.items.last_mut().expect("an element has an item");
            let width = last.start.len();
            if last.last.checked_add(1) == Some(n) && format!("{n:0width$}") == p.digits {
                last.last = n;
            } else {
                element.items.push(Item {
                    start: p.digits,
                    last: n,
                });
            }
            continue;
        }
        flush(&mut out, current.take());
        current = Some(Element {
            prefix: p.prefix,
            suffix: p.suffix,
            slots,
            items: vec![Item {
                start: p.digits,
                last: n,
            }],
        });
    }
    flush(&mut out, current);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::host_slots::{parse_host_slots, parse_noslots};
    use proptest::prelude::*;

    fn nodes(list: &[(&str, u32)]) -> Vec<Node> {
        list.iter()
            .map(|(h, s)| Node {
                host: (*h).to_string(),
                slots: *s,
            })
            .collect()
    }

    #[test]
    fn folds_as_nodeset_does() {
        let many: Vec<Node> = (1..=9999)
            .map(|i| Node {
                host: format!("gpu-node-{i:04}"),
                slots: 8,
            })
            .collect();
        assert_eq!(fold(&many, true), "gpu-node-[0001-9999]:8");
        assert_eq!(fold(&many, false), "gpu-node-[0001-9999]");
        let mixed = nodes(&[
            ("head", 1),
            ("rack1-node01", 4),
            ("rack1-node02", 4),
            ("rack1-node04", 4),
            ("rack2-node01", 4),
            ("n9", 2),
            ("n10", 2),
            ("n08", 2),
            ("node1-ib", 1),
            ("node2-ib", 1),
            ("10.0.0.1", 1),
            ("10.0.0.2", 1),
            ("fd00::2", 1),
            ("fd00::3", 1),
            ("x1234567890123456789", 1),
        ]);
        assert_eq!(
            fold(&mixed, true),
            "head:1,rack1-node[01-02,04]:4,rack2-node01:4,n[9-10,08]:2,node[1-2]-ib:1,\
             10.0.0.[1-2]:1,[fd00::2]:1,[fd00::3]:1,x1234567890123456789:1"
        );
        assert_eq!(
            fold(&mixed, false),
            "head,rack1-node[01-02,04],rack2-node01,n[9-10,08],node[1-2]-ib,\
             10.0.0.[1-2],[fd00::2],[fd00::3],x1234567890123456789"
        );
        // Widths: 99 → 100 continues a range that starts at 99 or 099, not 0099's.
        let widths = nodes(&[
            ("a99", 1),
            ("a100", 1),
            ("b099", 1),
            ("b100", 1),
            ("c0099", 1),
            ("c0100", 1),
        ]);
        assert_eq!(fold(&widths, false), "a[99-100],b[099-100],c[0099-0100]");
        let odd = nodes(&[("c0099", 1), ("c100", 1)]);
        assert_eq!(fold(&odd, false), "c[0099,100]");
    }

    fn host() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec!["gpu", "n-", "rack1-node", "10.0.0.", "", "ab_"]),
            0u64..130,
            0usize..5,
            prop::sample::select(vec!["", "-ib", ".cluster", "x"]),
        )
            .prop_map(|(prefix, n, width, suffix)| format!("{prefix}{n:0width$}{suffix}"))
            .prop_filter("a name", |h| !h.is_empty() && !h.starts_with('-'))
    }

    proptest! {
        #[test]
        fn a_fold_parses_back_to_the_same_nodes(
            list in prop::collection::vec((host(), 1u32..4), 1..60)
        ) {
            let mut seen = std::collections::HashSet::new();
            let list: Vec<Node> = list
                .into_iter()
                .filter(|(h, _)| seen.insert(h.to_ascii_lowercase()))
                .map(|(host, slots)| Node { host, slots })
                .collect();
            prop_assert_eq!(parse_host_slots(&fold(&list, true)).expect("parses"), list.clone());
            let hosts: Vec<String> = list.iter().map(|n| n.host.clone()).collect();
            prop_assert_eq!(parse_noslots(&fold(&list, false)).expect("parses"), hosts);
        }
    }
}
