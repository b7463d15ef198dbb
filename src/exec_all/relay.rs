//! The relay: past `--fanout` nodes, the other nodes are cut into runs of
//! consecutive ranks, and the first node of each run (a relay) runs
//! `multinode exec-all --relay-report` for its run. Here: the plan of the
//! groups, the command a relay runs, the record it ends its stderr with
//! (`relay_record.rs`: its records, sent as they are), and that record
//! back as the head's.

use super::event::Subtree;
use super::options::RunOptions;
use super::record::{NodeOutcome, NodeRecord, RunResult};
use super::relay_record::RelayRecord;
use super::script::{self, Script};
use crate::sh::quote as sh_quote;
use crate::topology::nodeset::fold_ranks;

/// Ends this process's stderr with its record of its group, for the head
/// that runs it as a relay.
pub fn emit_record(result: &RunResult) {
    let record = RelayRecord {
        first_failure: result.first_failure,
        nodes: result.nodes.clone(),
    };
    let line = String::from_utf8(record.to_line()).expect("JSON is UTF-8");
    crate::stdio::eprint(&line);
}

/// Splits the selected ranks into what this process runs: one group per
/// task, the task's own rank first. This node and, while there are at most
/// `fanout` other nodes, every node is a group of one. Beyond that the other
/// nodes are cut into `fanout` runs of consecutive ranks, and the first node
/// of each run relays to the rest (its exec_all runs the run's nodes).
pub fn plan_groups(selected: &[usize], local: usize, fanout: usize) -> Vec<Vec<usize>> {
    let fanout = fanout.max(1);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    if selected.contains(&local) {
        groups.push(vec![local]);
    }
    let remote: Vec<usize> = selected.iter().copied().filter(|&r| r != local).collect();
    if remote.len() <= fanout {
        groups.extend(remote.into_iter().map(|r| vec![r]));
        return groups;
    }
    let (size, extra) = (remote.len() / fanout, remote.len() % fanout);
    let mut start = 0;
    for i in 0..fanout {
        let len = size + usize::from(i < extra);
        groups.push(remote[start..start + len].to_vec());
        start += len;
    }
    groups
}

/// What a relay runs: this binary's exec_all for its group, with this run's
/// options; it ends its stderr with its report (`--relay-report`). It passes
/// on exactly the variables this process exports (by name: the relay has their
/// values from us), not those of its own agent.
pub fn command(group: &[usize], options: &RunOptions, exported: &[(String, String)]) -> Vec<u8> {
    let mut sorted = group.to_vec();
    sorted.sort_unstable();
    let mut cmd = format!(
        "exec \"${{MULTINODE_BIN:-multinode}}\" exec-all --relay-report --nodes {} --grace {:.3} \
         --connect-timeout {:.3} --fanout {} --max-connecting {} --export ",
        fold_ranks(&sorted),
        options.grace.as_secs_f64(),
        options.connect_timeout.as_secs_f64(),
        options.fanout,
        options.max_connecting,
    )
    .into_bytes();
    let names: Vec<&str> = exported
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| script::is_name(k))
        .collect();
    let export = if names.is_empty() {
        "NONE".to_string()
    } else {
        names.join(",")
    };
    cmd.extend_from_slice(&sh_quote(export.as_bytes()));
    if options.label {
        cmd.extend_from_slice(b" --label");
    }
    if options.timestamps {
        cmd.extend_from_slice(b" --timestamps");
    }
    if let Some(dir) = &options.output_dir {
        cmd.extend_from_slice(b" --output ");
        cmd.extend_from_slice(&sh_quote(std::os::unix::ffi::OsStrExt::as_bytes(
            dir.as_os_str(),
        )));
    }
    if !options.fail_fast {
        cmd.extend_from_slice(b" --no-fail-fast");
    }
    if let Some(procs) = &options.procs {
        // Counted by the head: the relay starts its nodes' share.
        cmd.extend_from_slice(
            format!(
                " --nproc-per-node {} --bind {} --master-port {}",
                procs.per_node, procs.bind, procs.master_port
            )
            .as_bytes(),
        );
        if procs.report_bindings {
            cmd.extend_from_slice(b" --report-bindings");
        }
    }
    match &options.script {
        Script::Stdin(_) => cmd.extend_from_slice(b" -"),
        Script::Inline(text) => {
            cmd.extend_from_slice(b" -c ");
            cmd.extend_from_slice(&sh_quote(text));
        }
    }
    for arg in &options.args {
        cmd.push(b' ');
        cmd.extend_from_slice(&sh_quote(std::os::unix::ffi::OsStrExt::as_bytes(
            arg.as_os_str(),
        )));
    }
    cmd
}

/// What a relay's task knows of its group when it ends: the relay's own
/// report, or, when there is none (the relay was lost), every node of the
/// group lost with it. `group` holds the ranks of its records, its own first.
pub fn subtree(
    group: &[usize],
    host: &str,
    outcome: &NodeOutcome,
    record: Option<RelayRecord>,
) -> Subtree {
    match record {
        Some(record) => Subtree {
            first_failure: record.first_failure,
            records: record
                .nodes
                .into_iter()
                .filter(|n| group.contains(&n.rank))
                .collect(),
        },
        None => Subtree {
            first_failure: None,
            records: group
                .iter()
                .skip(1)
                .map(|&rank| {
                    let mut r = NodeRecord::new(rank, String::new());
                    r.outcome = Some(NodeOutcome::Lost(format!(
                        "its relay, rank {} ({host}), ended without a report ({})",
                        group[0],
                        NodeOutcome::describe(Some(outcome))
                    )));
                    r
                })
                .collect(),
        },
    }
}
