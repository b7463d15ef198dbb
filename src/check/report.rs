//! The report: an aligned table for people (CHECK, STATUS, NODES, FIX, then
//! the details of what is not ok and a count), or a JSON array of
//! `{check, status, nodes, detail, fix}` for programs. Pure.

use super::checks::{CheckResult, Status};
use crate::table::printable_once;
use crate::topology::nodeset::fold;

/// The NODES column is cut to about this many characters (the JSON has them all).
const NODES_WIDTH: usize = 40;

/// `node[01-04]`; when too long for the column, the first nodes that fit
/// and a count: `node[01-09],... (60 nodes)`.
fn nodes_cell(nodes: &[String]) -> String {
    let folded = fold(nodes);
    if folded.chars().count() <= NODES_WIDTH {
        return folded;
    }
    // The longest prefix of the list whose folding fits (folding more
    // hosts never makes the text shorter).
    let (mut lo, mut hi) = (1, nodes.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fold(&nodes[..mid]).chars().count() <= NODES_WIDTH {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    format!("{},... ({} nodes)", fold(&nodes[..lo]), nodes.len())
}

pub(crate) fn render_table(results: &[CheckResult]) -> String {
    let rows: Vec<[String; 4]> = results
        .iter()
        .map(|r| {
            [
                r.check.to_string(),
                r.status.as_str().to_string(),
                if r.nodes.is_empty() {
                    "-".to_string()
                } else {
                    nodes_cell(&r.nodes)
                },
                r.fix.clone().unwrap_or_else(|| "-".to_string()),
            ]
        })
        .collect();
    let header = ["CHECK", "STATUS", "NODES", "FIX"].map(String::from);
    // Hosts' names and what the nodes said are text from outside.
    let rows: Vec<[String; 4]> = rows
        .into_iter()
        .map(|row| row.map(|c| printable_once(&c).into_owned()))
        .collect();
    let lines: Vec<&[String; 4]> = std::iter::once(&header).chain(&rows).collect();
    let mut out = crate::table::render(&lines);
    let not_ok: Vec<&CheckResult> = results.iter().filter(|r| r.status != Status::Ok).collect();
    if !not_ok.is_empty() {
        out.push('\n');
        for r in &not_ok {
            out.push_str(&format!(
                "{} ({}): {}\n",
                r.check,
                r.status.as_str(),
                printable_once(&r.detail)
            ));
        }
    }
    let count = |s: Status| results.iter().filter(|r| r.status == s).count();
    out.push_str(&format!(
        "\n{} checks: {} ok, {} warn, {} fail\n",
        results.len(),
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail)
    ));
    out
}

pub(crate) fn render_json(results: &[CheckResult]) -> String {
    let mut text = serde_json::to_string_pretty(results).unwrap_or_else(|_| "[]".to_string());
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> Vec<CheckResult> {
        vec![
            CheckResult {
                check: "nodes",
                status: Status::Ok,
                nodes: (1..=4).map(|i| format!("node{i:02}")).collect(),
                detail: "4 of 4 nodes answered".into(),
                fix: None,
            },
            CheckResult {
                check: "memlock",
                status: Status::Fail,
                nodes: vec!["node02".into(), "node03".into()],
                detail: "RLIMIT_MEMLOCK 8 MiB (hard 8 MiB): too low for NCCL's RDMA buffers on node[02-03]".into(),
                fix: Some("raise the hard limit".into()),
            },
            CheckResult {
                check: "infiniband",
                status: Status::Warn,
                nodes: vec!["node04".into()],
                detail: "no InfiniBand/RoCE device on node04".into(),
                fix: Some("provision the fabric".into()),
            },
        ]
    }

    #[test]
    fn the_table() {
        assert_eq!(
            render_table(&results()),
            "\
CHECK       STATUS  NODES        FIX
nodes       ok      node[01-04]  -
memlock     fail    node[02-03]  raise the hard limit
infiniband  warn    node04       provision the fabric

memlock (fail): RLIMIT_MEMLOCK 8 MiB (hard 8 MiB): too low for NCCL's RDMA buffers on node[02-03]
infiniband (warn): no InfiniBand/RoCE device on node04

3 checks: 1 ok, 1 warn, 1 fail
"
        );
    }

    #[test]
    fn what_nodes_said_is_escaped() {
        let mut r = results();
        r[1].detail = "node02: \x1b]0;PWNED\x07\x1b[2J\nFAKE \u{202e}".into();
        r[1].nodes = vec!["node\x1b[31m".into()];
        let text = render_table(&r);
        assert!(!text.contains(['\x1b', '\x07', '\u{202e}']), "{text:?}");
        assert!(
            text.contains("memlock (fail): node02: \\e]0;PWNED\\x07\\e[2J\\nFAKE \\u202e\n"),
            "{text}"
        );
    }

    #[test]
    fn an_all_ok_table_has_no_details() {
        let ok = &results()[..1];
        assert_eq!(
            render_table(ok),
            "\
CHECK  STATUS  NODES        FIX
nodes  ok      node[01-04]  -

1 checks: 1 ok, 0 warn, 0 fail
"
        );
    }

    #[test]
    fn long_node_lists_are_cut_with_a_count() {
        let nodes: Vec<String> = (0..60).map(|i| format!("n{}x", i * 7)).collect();
        let cell = nodes_cell(&nodes);
        assert_eq!(
            cell,
            "n[0,7,14,21,28,35,42,49,56,63,70,77,84]x,... (60 nodes)"
        );
        let names: Vec<String> = (0..30)
            .map(|i| format!("host-{}", ["a", "b", "c"][i % 3]).repeat(i % 4 + 1))
            .collect();
        let cell = nodes_cell(&names);
        assert!(cell.ends_with(",... (30 nodes)"), "{cell}");
        assert!(
            cell.chars().count() <= NODES_WIDTH + ",... (30 nodes)".len(),
            "{cell}"
        );
        let many: Vec<String> = (1..=256).map(|i| format!("node{i:03}")).collect();
        assert_eq!(nodes_cell(&many), "node[001-256]");
    }

    #[test]
    fn json_is_an_array_of_objects() {
        let value: serde_json::Value =
            serde_json::from_str(&render_json(&results())).expect("valid JSON");
        assert_eq!(
            value[0],
            serde_json::json!({
                "check": "nodes",
                "status": "ok",
                "nodes": ["node01", "node02", "node03", "node04"],
                "detail": "4 of 4 nodes answered",
                "fix": null,
            })
        );
        assert_eq!(value[1]["status"], "fail");
        assert_eq!(value[1]["fix"], "raise the hard limit");
        assert_eq!(value[2]["nodes"], serde_json::json!(["node04"]));
        assert_eq!(value.as_array().map(Vec::len), Some(3));
    }
}
