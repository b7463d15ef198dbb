//! The run's report: a table on stderr when the run failed, and `--report
//! FILE` as JSON (written whatever the outcome).

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::record::{CancelReason, ErrorLines, NodeOutcome, NodeRecord, ProcessOf, RunResult};
use super::verdict::{self, Verdict};
use crate::process::{Outcome, signal_name};

/// Above this many nodes, the table lists only those that did not succeed.
const FULL_TABLE_MAX: usize = 32;
/// The table's LAST OUTPUT is cut to this many characters (the report has it whole).
const LAST_OUTPUT_MAX: usize = 80;

/// One node in `--report FILE`.
#[derive(Debug, Serialize, Deserialize)]
pub struct NodeReport {
    pub rank: usize,
    pub host: String,
    /// With `--nproc-per-node`: the process's node and local rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessOf>,
    pub address: Option<String>,
    /// `ok`, `failed`, `killed`, `unreachable`, `lost`, `not-started`.
    pub status: String,
    /// Exit code, when the script exited.
    pub exit: Option<i32>,
    /// Signal name, when the script was killed by one (`SIGTERM`).
    pub signal: Option<String>,
    /// Why a node was unreachable or lost.
    pub error: Option<String>,
    /// Seconds since the UNIX epoch.
    pub started: Option<f64>,
    pub ended: Option<f64>,
    pub duration_s: Option<f64>,
    pub bytes_out: u64,
    pub bytes_err: u64,
    pub last_lines: Vec<String>,
    /// OOM kills the node's cgroup counted while the script ran; `null`:
    /// the node cannot tell (see `exit_info`).
    #[serde(default)]
    pub oom_kills: Option<u64>,
    /// The cgroup file the node read them from.
    #[serde(default)]
    pub cgroup: Option<String>,
    /// A core file written meanwhile, or where cores are piped.
    #[serde(default)]
    pub core: Option<String>,
    /// `program_error`, `nccl_cause`, `nccl_line`.
    #[serde(flatten)]
    pub errors: ErrorLines,
    /// With `--report-bindings`: the process's binding, as it printed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    /// Where its start went: seconds from the run's start to each phase.
    #[serde(default)]
    pub timeline: TimelineReport,
}

/// Seconds from the run's (the attempt's) start to each phase of a node's
/// start; absent where it has none: connect and login only for a node
/// reached on a connection of its own or a process on its node's (shared:
/// `connection_shared_by`), a heartbeat only when it beat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineReport {
    /// How long the node's health check before this attempt took
    /// (`--health-check`): the attempt, which the other phases count
    /// from, starts after the check ends on every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_s: Option<f64>,
    /// `--nproc-per-node`: connect and login are its node's, shared by this
    /// many processes (one login a node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_shared_by: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_output_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_heartbeat_s: Option<f64>,
}

/// `--report FILE`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub exit_code: i32,
    /// Why the run ended early, if it did.
    pub cancelled: Option<CancelReason>,
    pub first_failure: Option<usize>,
    /// The first failure, told in full (see `verdict`).
    #[serde(default)]
    pub verdict: Option<Verdict>,
    pub started: f64,
    pub nodes: Vec<NodeReport>,
    /// What every node was doing when `--timeout` expired (`--snapshot-on-timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<serde_json::Value>,
    /// With restarts or spares: every attempt, the last one's nodes above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptReport>>,
}

/// One attempt in `--report`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptReport {
    /// 0 for the first attempt.
    pub attempt: u32,
    /// The attempt's nodes, by rank.
    pub hosts: Vec<String>,
    /// Nodes that failed the health check before it, excluded.
    #[serde(default)]
    pub health_failed: Vec<String>,
    /// How long the health check before it took on each node (seconds,
    /// by host); empty without `--health-check`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub health_check_s: std::collections::BTreeMap<String, f64>,
    pub exit_code: i32,
    /// How it failed, in a few words (`rank 2 (node3) lost`, `hung ...`);
    /// `null` when it succeeded.
    pub failure: Option<String>,
    pub verdict: Option<Verdict>,
    /// What every node was doing when the attempt was ended as hung.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<serde_json::Value>,
    /// Nodes excluded after it, with why.
    pub excluded: Vec<Excluded>,
    /// From the failure of the attempt before to every node of this one
    /// running its script (seconds); `null` for the first.
    pub restart_s: Option<f64>,
    /// What was decided after it: `restart`, `succeeded`, or why the run stopped.
    pub then: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Excluded {
    pub host: String,
    pub why: String,
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

pub fn build(result: &RunResult) -> Report {
    let nodes = result
        .nodes
        .iter()
        .map(|n| {
            let (exit, signal) = match n.outcome.as_ref().and_then(NodeOutcome::finished) {
                Some(Outcome::Exited(code)) => (Some(*code), None),
                Some(Outcome::Signaled { signal, .. }) => (None, Some(signal_name(*signal))),
                None => (None, None),
            };
            let info = n.evidence.exit_info.as_ref();
            NodeReport {
                rank: n.rank,
                host: n.host.clone(),
                process: n.process,
                address: n.address.clone(),
                status: NodeOutcome::status(n.outcome.as_ref()).to_string(),
                exit,
                signal,
                error: n
                    .outcome
                    .as_ref()
                    .and_then(NodeOutcome::error)
                    .map(str::to_string),
                started: n.started.map(epoch),
                ended: n.ended.map(epoch),
                duration_s: n.duration().map(|d| d.as_secs_f64()),
                bytes_out: n.stats.bytes_out,
                bytes_err: n.stats.bytes_err,
                last_lines: n.evidence.tail.iter().cloned().collect(),
                oom_kills: info.and_then(|i| i.oom_kills),
                cgroup: info.and_then(|i| i.cgroup.clone()),
                core: info.and_then(|i| i.core.clone()),
                errors: n.evidence.errors.clone(),
                binding: n.evidence.binding.clone(),
                timeline: {
                    let since = |t: Option<SystemTime>| {
                        t.map(|t| {
                            t.duration_since(result.started)
                                .unwrap_or_default()
                                .as_secs_f64()
                        })
                    };
                    TimelineReport {
                        health_check_s: None,
                        connect_s: since(n.timeline.connected),
                        login_s: since(n.timeline.logged_in),
                        connection_shared_by: n.timeline.connection_shared_by,
                        spawn_s: since(n.started),
                        first_output_s: since(n.timeline.first_output),
                        first_heartbeat_s: since(n.timeline.first_heartbeat),
                    }
                },
            }
        })
        .collect();
    Report {
        exit_code: result.exit_code,
        cancelled: result.cancelled,
        first_failure: result.first_failure,
        verdict: super::verdict::build(result),
        started: epoch(result.started),
        nodes,
        snapshot: result.snapshot.clone(),
        attempts: None,
    }
}

/// The table printed on stderr when the run failed.
pub fn table(result: &RunResult) -> String {
    let mut out = String::new();
    let total = result.nodes.len();
    let failed = result
        .nodes
        .iter()
        .filter(|n| !n.outcome.as_ref().is_some_and(NodeOutcome::success))
        .count();
    let headline = match (result.cancelled, result.first_failure) {
        (Some(CancelReason::Hung), _) => {
            "hung: no output or heartbeat from any node for --hang-timeout".into()
        }
        (_, Some(rank)) => {
            let node = result.nodes.iter().find(|n| n.rank == rank);
            format!(
                "{} {} first",
                node.map_or_else(|| format!("rank {rank} (?)"), NodeRecord::who),
                node.map(status_cell).unwrap_or_default()
            )
        }
        (Some(CancelReason::Timeout), None) => "--timeout expired".into(),
        (Some(CancelReason::Signal(s)), None) => format!("stopped by {}", signal_name(s)),
        (Some(CancelReason::SecondSignal), None) => "stopped by a second signal (SIGKILL)".into(),
        (Some(CancelReason::OutputClosed), None) => "output could not be written".into(),
        (Some(CancelReason::NodeFailed), None) | (None, None) => "failed".into(),
    };
    let _ = writeln!(
        out,
        "{}: {failed} of {total} {} did not succeed; {headline}; exit code {}",
        crate::logging::program(),
        match result.nodes.iter().any(|n| n.process.is_some()) {
            true => "processes",
            false => "nodes",
        },
        result.exit_code
    );
    let rows: Vec<&NodeRecord> = result
        .nodes
        .iter()
        .filter(|n| {
            total <= FULL_TABLE_MAX || !n.outcome.as_ref().is_some_and(NodeOutcome::success)
        })
        .collect();
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|n| {
            [
                n.rank.to_string(),
                n.host.clone(),
                status_cell(n),
                n.duration()
                    .map(|d| format!("{:.1}s", d.as_secs_f64()))
                    .unwrap_or_else(|| "-".into()),
                n.evidence
                    .tail
                    .back()
                    .map(|l| cut(l, LAST_OUTPUT_MAX))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let header = ["RANK", "HOST", "STATUS", "TIME", "LAST OUTPUT"];
    let header = header.map(String::from);
    // A rank's last line and a host's name are text from outside.
    let cells: Vec<[String; 5]> = cells
        .into_iter()
        .map(|row| row.map(|c| crate::table::printable(&c).into_owned()))
        .collect();
    let lines: Vec<&[String; 5]> = std::iter::once(&header).chain(&cells).collect();
    out.push_str(&crate::table::render(&lines));
    if rows.len() < total {
        let _ = writeln!(
            out,
            "({} nodes succeeded and are not listed)",
            total - rows.len()
        );
    }
    if let Some(verdict) = verdict::build(result) {
        out.push_str(&verdict::render(&verdict));
    }
    out
}

/// The table's STATUS: short (`exit 137 (SIGKILL), OOM-killed`, `lost`);
/// the long story is the verdict's and the report's.
fn status_cell(n: &NodeRecord) -> String {
    let Some(outcome) = &n.outcome else {
        return "not started".into();
    };
    let (how, _, _) = verdict::how(outcome);
    let oom = !outcome.success()
        && n.evidence
            .exit_info
            .as_ref()
            .and_then(|i| i.oom_kills)
            .unwrap_or(0)
            > 0;
    if oom {
        format!("{how}, OOM-killed")
    } else {
        how
    }
}

/// `text` cut to `max` characters, with `...` when it was longer.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(3)).collect();
    s.push_str("...");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(rank: usize, outcome: NodeOutcome, tail: &[&str]) -> NodeRecord {
        let mut n = NodeRecord::new(rank, format!("node{rank}"));
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        n.started = Some(t0);
        n.ended = Some(t0 + Duration::from_millis(1500));
        n.outcome = Some(outcome);
        n.evidence.tail = tail.iter().map(|s| s.to_string()).collect();
        n.stats.bytes_out = 10;
        n
    }

    fn result() -> RunResult {
        RunResult {
            exit_code: 3,
            cancelled: Some(CancelReason::NodeFailed),
            first_failure: Some(1),
            started: UNIX_EPOCH + Duration::from_secs(1_000),
            output_failure: None,
            snapshot: None,
            agents_stay: true,
            nodes: vec![
                record(
                    0,
                    NodeOutcome::Finished(Outcome::Signaled {
                        signal: 15,
                        core_dumped: false,
                    }),
                    &["working"],
                ),
                record(
                    1,
                    NodeOutcome::Finished(Outcome::Exited(3)),
                    &["step 1", "error: disk full"],
                ),
                record(2, NodeOutcome::Lost("connection lost".into()), &[]),
            ],
        }
    }

    #[test]
    fn table_names_the_first_failure_and_every_node() {
        let table = table(&result());
        // The name messages begin with: `multinode` here (no `run.rs` set it).
        assert_eq!(crate::logging::program(), "multinode");
        let expected = "\
multinode: 3 of 3 nodes did not succeed; rank 1 (node1) exit 3 first; exit code 3
RANK  HOST   STATUS             TIME  LAST OUTPUT
0     node0  killed by SIGTERM  1.5s  working
1     node1  exit 3             1.5s  error: disk full
2     node2  lost               1.5s
first failure: rank 1 (node1), 1.50 s into the run (00:16:41.500Z UTC): exit 3
  OOM-killed: unknown (the node cannot tell: no multinode agent there, or no readable cgroup OOM counter)
  last lines:
    step 1
    error: disk full
  the whole job was down 0.00 s after this failure
  shell into it: multinode shell 1
";
        assert_eq!(table, expected);
        // Agents that end with the run (`multinode agent -- JOB`): no way in to name.
        let mut ended = result();
        ended.agents_stay = false;
        let table = super::table(&ended);
        assert!(!table.contains("shell into"), "{table}");
        assert!(table.ends_with("after this failure\n"), "{table}");
    }

    #[test]
    fn what_a_rank_printed_reaches_the_table_and_the_verdict_escaped() {
        let mut result = result();
        let fake = "\x1b]0;PWN\x07\x1b[2J\x1b[Hfake verdict: all ok \u{202e}";
        result.nodes[1].evidence.tail = [fake.to_string()].into_iter().collect();
        result.nodes[1].evidence.errors.program_error = Some(fake.into());
        if let Some(NodeOutcome::Lost(why)) = &mut result.nodes[2].outcome {
            *why = fake.into();
        }
        result.first_failure = Some(2);
        let text = table(&result);
        assert!(!text.contains(['\x1b', '\x07', '\u{202e}']), "{text:?}");
        assert!(
            text.contains("\\e]0;PWN\\x07\\e[2J\\e[Hfake verdict: all ok \\u202e"),
            "{text}"
        );
        result.first_failure = Some(1);
        let text = table(&result);
        assert!(!text.contains(['\x1b', '\x07', '\u{202e}']), "{text:?}");
        assert!(text.contains("  last lines:\n    \\e]0;PWN"), "{text}");
    }

    #[test]
    fn the_verdict_of_an_oom_kill_and_of_a_lost_node() {
        let mut result = result();
        let t0 = result.started;
        let n1 = &mut result.nodes[1];
        n1.outcome = Some(NodeOutcome::Finished(Outcome::Exited(137)));
        n1.evidence.exit_info = Some(crate::exit_info::ExitInfo {
            oom_kills: Some(1),
            cgroup: Some("/sys/fs/cgroup/memory.events".into()),
            core: None,
        });
        n1.evidence.errors.nccl_line = Some("h:1:1 [1] NCCL WARN socket closed".into());
        n1.evidence.tail = ["x".repeat(300)].into_iter().collect();
        result.nodes[0].ended = Some(t0 + Duration::from_millis(2250));
        result.exit_code = 137;
        let text = table(&result);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "multinode: 3 of 3 nodes did not succeed; rank 1 (node1) exit 137 (SIGKILL), OOM-killed first; exit code 137"
        );
        // Long output is cut in the table, whole in the verdict.
        assert_eq!(
            lines[3],
            format!(
                "1     node1  exit 137 (SIGKILL), OOM-killed  1.5s  {}...",
                "x".repeat(77)
            )
        );
        let verdict = lines[5..].join("\n");
        let expected = format!(
            "\
first failure: rank 1 (node1), 1.50 s into the run (00:16:41.500Z UTC): exit 137 (SIGKILL)
  OOM-killed: yes (oom_kill rose in /sys/fs/cgroup/memory.events)
  last NCCL warning/error: h:1:1 [1] NCCL WARN socket closed
  last lines:
    {}
  the whole job was down 0.75 s after this failure
  shell into it: multinode shell 1",
            "x".repeat(300)
        );
        assert_eq!(verdict, expected);
        let report = serde_json::to_value(build(&result)).unwrap();
        assert_eq!(report["verdict"]["oom_killed"], true);
        assert_eq!(report["verdict"]["signal"], "SIGKILL");
        assert_eq!(report["verdict"]["down_after_s"], 0.75);
        assert_eq!(report["verdict"]["shell"], "multinode shell 1");
        assert_eq!(report["nodes"][1]["oom_kills"], 1);

        // A lost node: the table says "lost", the verdict says why.
        result.first_failure = Some(2);
        let text = table(&result);
        assert!(
            text.contains("first failure: rank 2 (node2), 1.50 s into the run (00:16:41.500Z UTC): lost\n  why: connection lost\n"),
            "{text}"
        );
        // Its agent is gone or unreachable: no shell to suggest.
        assert!(!text.contains("shell into"), "{text}");
        assert!(build(&result).verdict.is_some_and(|v| v.shell.is_none()));
    }

    #[test]
    fn the_verdict_names_the_programs_error_and_nccls_cause() {
        let mut result = result();
        let n1 = &mut result.nodes[1];
        n1.evidence.errors.program_error = Some("[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9".into());
        n1.evidence.errors.nccl_cause = Some("[2026-12-03 14:51:53] vm:726:726 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60".into());
        n1.evidence.errors.nccl_line = n1.evidence.errors.program_error.clone();
        let text = table(&result);
        assert!(
            text.contains(
                "\n  OOM-killed: unknown (the node cannot tell: no multinode agent there, or no readable cgroup OOM counter)\n\
                 \x20 program error: [rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n\
                 \x20 NCCL cause: [2026-12-03 14:51:53] vm:726:726 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60\n\
                 \x20 last NCCL warning/error: [rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n\
                 \x20 last lines:\n"
            ),
            "{text}"
        );
        let report = serde_json::to_value(build(&result)).unwrap();
        for v in [&report["verdict"], &report["nodes"][1]] {
            assert!(
                v["program_error"]
                    .as_str()
                    .unwrap()
                    .contains("DistBackendError"),
                "{v}"
            );
            assert!(
                v["nccl_cause"]
                    .as_str()
                    .unwrap()
                    .contains("Duplicate GPU detected"),
                "{v}"
            );
        }
        // A cause that is also the last NCCL line is printed once.
        result.nodes[1].evidence.errors.nccl_cause =
            result.nodes[1].evidence.errors.nccl_line.clone();
        let text = table(&result);
        assert!(!text.contains("NCCL cause:"), "{text}");
        assert_eq!(
            text.matches("last NCCL warning/error:").count(),
            1,
            "{text}"
        );
    }

    #[test]
    fn json_report_has_every_field() {
        let report = serde_json::to_value(build(&result())).unwrap();
        assert_eq!(report["exit_code"], 3);
        assert_eq!(report["cancelled"], "node-failed");
        let n0 = &report["nodes"][0];
        assert_eq!(n0["signal"], "SIGTERM");
        assert_eq!(n0["status"], "killed");
        assert_eq!(n0["exit"], serde_json::Value::Null);
        assert_eq!(report["nodes"][1]["exit"], 3);
        assert_eq!(report["nodes"][2]["status"], "lost");
        assert_eq!(report["nodes"][2]["error"], "connection lost");
        assert_eq!(n0["duration_s"], 1.5);
        assert_eq!(n0["started"], 1000.0);
        assert_eq!(n0["bytes_out"], 10);
    }
}
