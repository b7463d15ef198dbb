//! The relay: past `--fanout` nodes, the other nodes are cut into runs of
//! consecutive ranks, and the first node of each run (a relay) runs
//! `multinode exec-all --relay-report` for its run. Here: the plan of the
//! groups, the command a relay runs, the report line it ends its stderr
//! with, and that report turned back into one record per node.

use std::time::{SystemTime, UNIX_EPOCH};

use super::event::Subtree;
use super::options::RunOptions;
use super::record::{NodeOutcome, NodeRecord, RunResult};
use super::report;
use super::script::{self, Script};
use crate::process::Outcome;
use crate::sh::quote as sh_quote;
use crate::topology::nodeset::fold_ranks;

/// The line a relay's exec_all ends its stderr with: this marker, then its
/// report as JSON. The head takes it out of the output.
pub const REPORT_MARKER: &str = "\u{1e}multinode-relay-report ";

/// Ends this process's stderr with its report, for the head that runs it as a relay.
pub fn emit_report(result: &RunResult) {
    let report = report::build(result);
    let json = serde_json::to_string(&report).expect("the report serialises");
    crate::stdio::eprint(&format!("{REPORT_MARKER}{json}\n"));
}

/// Whether a partial stderr line may still become the report line (it is
/// then held whole, however slowly it comes).
pub fn may_be_report(partial: &[u8]) -> bool {
    REPORT_MARKER
        .as_bytes()
        .starts_with(&partial[..partial.len().min(REPORT_MARKER.len())])
}

/// Takes the report line out of a relay's stderr block: the rest of the
/// block, and the report's JSON if the block held it.
pub fn take_report(block: Vec<u8>) -> (Vec<u8>, Option<String>) {
    let marker = REPORT_MARKER.as_bytes();
    if memchr::memmem::find(&block, marker).is_none() {
        return (block, None);
    }
    let mut report = None;
    let mut rest = Vec::with_capacity(block.len());
    for line in block.split_inclusive(|b| *b == b'\n') {
        match line.strip_prefix(marker) {
            Some(json) => {
                let json = json.strip_suffix(b"\n").unwrap_or(json);
                report = Some(String::from_utf8_lossy(json).into_owned());
            }
            None => rest.extend_from_slice(line),
        }
    }
    (rest, report)
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

fn from_epoch(secs: f64) -> SystemTime {
    UNIX_EPOCH + std::time::Duration::try_from_secs_f64(secs).unwrap_or_default()
}

/// A node of a relay's report, back as the dispatcher's record.
fn record(n: report::NodeReport) -> NodeRecord {
    let error = n.error.unwrap_or_default();
    let outcome = match n.status.as_str() {
        "ok" | "failed" => NodeOutcome::Finished(Outcome::Exited(n.exit.unwrap_or(1))),
        "killed" => NodeOutcome::Finished(Outcome::Signaled {
            signal: n
                .signal
                .as_deref()
                .and_then(|s| s.parse::<nix::sys::signal::Signal>().ok())
                .map_or(0, |s| s as i32),
            core_dumped: false,
        }),
        "unreachable" => NodeOutcome::Unreachable(error),
        "lost" => NodeOutcome::Lost(error),
        _ => NodeOutcome::NotStarted,
    };
    let mut record = NodeRecord::new(n.rank, n.host);
    record.address = n.address;
    record.started = n.started.map(from_epoch);
    record.ended = n.ended.map(from_epoch);
    record.outcome = Some(outcome);
    record.stats.bytes_out = n.bytes_out;
    record.stats.bytes_err = n.bytes_err;
    record.stats.tail = n.last_lines.into();
    record.stats.nccl_line = n.nccl_line;
    record.stats.nccl_cause = n.nccl_cause;
    record.stats.program_error = n.program_error;
    // The relay's report carries what each node of its group could tell.
    if n.oom_kills.is_some() || n.core.is_some() {
        record.exit_info = Some(crate::protocol::exit_info::ExitInfo {
            oom_kills: n.oom_kills,
            cgroup: n.cgroup,
            core: n.core,
        });
    }
    record
}

/// What a relay's task knows of its group when it ends: the relay's own
/// report, or, when there is none (the relay was lost), every node of the
/// group lost with it.
pub fn subtree(
    group: &[usize],
    host: &str,
    outcome: &NodeOutcome,
    relay_report: Option<&str>,
) -> Subtree {
    let report = relay_report.and_then(|json| serde_json::from_str::<report::Report>(json).ok());
    match report {
        Some(report) => Subtree {
            first_failure: report.first_failure,
            records: report
                .nodes
                .into_iter()
                .filter(|n| group.contains(&n.rank))
                .map(record)
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
                        report::describe(Some(outcome))
                    )));
                    r
                })
                .collect(),
        },
    }
}
