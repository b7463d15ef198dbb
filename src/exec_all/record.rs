//! What a run keeps of each node and how the run ended: the dispatcher's
//! records (`NodeRecord`, also what a relay sends its head, as it is), a
//! node's outcome and what it means, the evidence of how it ended, output
//! statistics, the run's result. Read by the report, the verdict and the
//! relay; imports nothing of exec_all.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::process::Outcome;
use crate::protocol::exit_info::ExitInfo;
use crate::restart::Cause;
use crate::snapshot::run_start::{self, RankStart};

/// How a node's part of a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeOutcome {
    Finished(Outcome),
    /// Never connected.
    Unreachable(String),
    /// Connected, then lost (keepalive, reset, agent gone) without an exit status.
    Lost(String),
    /// Stopped before it started (the run was already ending).
    NotStarted,
}

impl NodeOutcome {
    pub fn success(&self) -> bool {
        matches!(self, NodeOutcome::Finished(o) if o.success())
    }

    /// The code exec_all exits with when this is the first failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            NodeOutcome::Finished(o) => o.shell_code(),
            NodeOutcome::Unreachable(_) | NodeOutcome::Lost(_) | NodeOutcome::NotStarted => {
                crate::exit_code::CONNECTION_FAILED
            }
        }
    }

    /// Its status word in `--report`: `ok`, `failed`, `killed`,
    /// `unreachable`, `lost`, `not-started` (also a node with no outcome).
    pub fn status(outcome: Option<&NodeOutcome>) -> &'static str {
        match outcome {
            Some(NodeOutcome::Finished(Outcome::Exited(0))) => "ok",
            Some(NodeOutcome::Finished(Outcome::Exited(_))) => "failed",
            Some(NodeOutcome::Finished(Outcome::Signaled { .. })) => "killed",
            Some(NodeOutcome::Unreachable(_)) => "unreachable",
            Some(NodeOutcome::Lost(_)) => "lost",
            Some(NodeOutcome::NotStarted) | None => "not-started",
        }
    }

    /// In a few words for people: `exit 3`, `killed by SIGSEGV`,
    /// `unreachable: WHY`, `lost: WHY`, `not started`.
    pub fn describe(outcome: Option<&NodeOutcome>) -> String {
        match outcome {
            Some(NodeOutcome::Finished(o)) => o.to_string(),
            Some(NodeOutcome::Unreachable(e)) => format!("unreachable: {e}"),
            Some(NodeOutcome::Lost(e)) => format!("lost: {e}"),
            Some(NodeOutcome::NotStarted) | None => "not started".into(),
        }
    }

    /// Why the node was unreachable or lost (the command's own end has none).
    pub fn error(&self) -> Option<&str> {
        match self {
            NodeOutcome::Unreachable(e) | NodeOutcome::Lost(e) => Some(e),
            NodeOutcome::Finished(_) | NodeOutcome::NotStarted => None,
        }
    }

    /// What the restart policy makes of it as a first failure or a loss:
    /// a node never reached, a node lost (also one that never started),
    /// or the program's shell exit code.
    pub fn cause(&self) -> Cause {
        match self {
            NodeOutcome::Unreachable(_) => Cause::Unreachable,
            NodeOutcome::Lost(_) | NodeOutcome::NotStarted => Cause::Lost,
            NodeOutcome::Finished(o) => Cause::Exited(o.shell_code()),
        }
    }

    /// The command's own end: its exit code, or the signal that killed it.
    pub fn finished(&self) -> Option<&Outcome> {
        match self {
            NodeOutcome::Finished(o) => Some(o),
            _ => None,
        }
    }
}

/// Why the run is ending early. Ordered: the most serious reason wins.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum CancelReason {
    /// A node failed and fail-fast is on.
    NodeFailed,
    /// stdout or stderr was closed (`| head`) or could not be written (`/dev/full`).
    OutputClosed,
    /// No node printed anything or beat its heartbeat for `--hang-timeout`.
    Hung,
    /// `--timeout` expired.
    Timeout,
    /// exec_all got this signal, which it passed on.
    Signal(i32),
    /// A second signal: SIGKILL for everyone.
    SecondSignal,
}

/// The run's exit code: 124 for `--timeout`; else the first failure's code;
/// else what ended the run early (128 + the signal; SIGKILL for a second
/// signal; SIGPIPE for closed output); else 0.
pub(super) fn run_exit_code(cancelled: Option<CancelReason>, failure_code: Option<i32>) -> i32 {
    match cancelled {
        Some(CancelReason::Timeout | CancelReason::Hung) => crate::exit_code::TIMEOUT,
        Some(CancelReason::Signal(signo)) => {
            failure_code.unwrap_or(crate::exit_code::from_signal(signo))
        }
        Some(CancelReason::SecondSignal) => {
            failure_code.unwrap_or(crate::exit_code::from_signal(libc::SIGKILL))
        }
        Some(CancelReason::OutputClosed) => {
            failure_code.unwrap_or(crate::exit_code::from_signal(libc::SIGPIPE))
        }
        Some(CancelReason::NodeFailed) | None => failure_code.unwrap_or(crate::exit_code::SUCCESS),
    }
}

/// What the dispatcher keeps of each node; a relay sends its head the
/// records of its group as they are (`relay_record.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node's rank, or with several processes a node the process's
    /// global rank.
    pub rank: usize,
    pub host: String,
    /// With several processes a node (`--nproc-per-node`): its node and
    /// its place there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessOf>,
    pub address: Option<String>,
    pub started: Option<SystemTime>,
    pub ended: Option<SystemTime>,
    pub outcome: Option<NodeOutcome>,
    pub stats: OutputStats,
    pub evidence: Evidence,
    /// When it reached each phase of its start.
    #[serde(default)]
    pub timeline: Timeline,
}

impl NodeRecord {
    pub fn new(rank: usize, host: String) -> Self {
        NodeRecord {
            rank,
            host,
            process: None,
            address: None,
            started: None,
            ended: None,
            outcome: None,
            stats: OutputStats::default(),
            evidence: Evidence::default(),
            timeline: Timeline::default(),
        }
    }

    /// The rank of its node: restarts, spares and exclusions are per node.
    pub fn node_rank(&self) -> usize {
        self.process.map_or(self.rank, |p| p.node)
    }

    /// [`who`]: `rank 5 (gpu2: node 2, local rank 1)`, or `rank 2 (gpu2)`.
    pub fn who(&self) -> String {
        who(self.rank, &self.host, self.process)
    }

    /// Where its start is, in ms after the run's start `run`, as exec_all
    /// shows it to its agent for `top` (`snapshot::run_start`).
    pub fn rank_start(&self, run: SystemTime) -> RankStart {
        let ms = |t: Option<SystemTime>| {
            t.map(|t| t.duration_since(run).unwrap_or_default().as_millis() as u64)
        };
        RankStart {
            rank: self.rank,
            host: self.host.clone(),
            connect_ms: ms(self.timeline.connected),
            login_ms: ms(self.timeline.logged_in),
            spawn_ms: ms(self.started),
            first_output_ms: ms(self.timeline.first_output),
            connection_shared_by: self
                .timeline
                .connection_shared_by
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        }
    }

    pub fn duration(&self) -> Option<Duration> {
        Some(
            self.ended?
                .duration_since(self.started?)
                .unwrap_or_default(),
        )
    }
}

/// `rank 5 (gpu2: node 2, local rank 1)` for a process, `rank 2 (gpu2)` for a node.
pub fn who(rank: usize, host: &str, process: Option<ProcessOf>) -> String {
    match process {
        Some(p) => format!(
            "rank {rank} ({host}: node {}, local rank {})",
            p.node, p.local_rank
        ),
        None => format!("rank {rank} ({host})"),
    }
}

/// A process's node and its place there (`--nproc-per-node`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessOf {
    /// The node's rank.
    pub node: usize,
    pub local_rank: usize,
}

/// When a node reached each phase of its start (the wall clock, as
/// `started`, so that a relay's records read on its head): its TCP
/// connection up and its login done (a node reached over SSH on a
/// connection of its own, or a process on its node's), its first output, its first heartbeat. Its
/// command's spawn is [`NodeRecord::started`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected: Option<SystemTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logged_in: Option<SystemTime>,
    /// How many processes of its node share the connection and login
    /// (`--nproc-per-node`: one a node); `None`: its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_shared_by: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_output: Option<SystemTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_heartbeat: Option<SystemTime>,
}

/// `every node printed within 4.12 s; the last, rank 3 (node4): connect
/// 0.01 s, login 2.31 s, spawn 0.02 s, first line 1.78 s: login the
/// longest`, from the records of a run's tasks (each has printed) and the
/// run's start.
pub fn start_line(nodes: &[&NodeRecord], run: SystemTime) -> Option<String> {
    let since = |t: SystemTime| t.duration_since(run).unwrap_or_default().as_secs_f64();
    let last = nodes
        .iter()
        .filter(|n| n.timeline.first_output.is_some())
        .max_by(|a, b| a.timeline.first_output.cmp(&b.timeline.first_output))?;
    let phases = run_start::told(&last.rank_start(run).phases())?;
    Some(format!(
        "every {} printed within {:.2} s; the last, {}: {phases}",
        match last.process {
            Some(_) => "process",
            None => "node",
        },
        since(last.timeline.first_output?),
        last.who(),
    ))
}

/// How a run ended.
#[derive(Debug)]
pub struct RunResult {
    pub exit_code: i32,
    pub cancelled: Option<CancelReason>,
    /// The rank whose failure decided the exit code.
    pub first_failure: Option<usize>,
    pub nodes: Vec<NodeRecord>,
    pub started: SystemTime,
    /// Why output stopped, when a write failed other than on a closed pipe.
    pub output_failure: Option<String>,
    /// The snapshot taken before `--timeout` ended the run
    /// (`--snapshot-on-timeout`), as `multinode ps --format json` prints it.
    pub snapshot: Option<serde_json::Value>,
    /// The nodes ran under agents that outlive this run (exec-all with the
    /// job's agents, not inside `multinode agent -- JOB`, whose agents end
    /// with JOB): the verdict may name `multinode shell RANK`.
    pub agents_stay: bool,
}

/// How much a node printed, and what became of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputStats {
    pub bytes_out: u64,
    pub bytes_err: u64,
    /// Everything, when the sink captures instead of passing on (up to
    /// `output::CAPTURE_MAX`); a relay never captures, so it sends none.
    #[serde(skip)]
    pub captured_out: Vec<u8>,
    #[serde(skip)]
    pub captured_err: Vec<u8>,
    /// Why `--output`'s files of this node stopped being written (a relay
    /// writes its group's).
    pub file_failure: Option<String>,
}

/// What tells how and why a node's command ended: what the node saw of its
/// end, its last lines, and the lines that name an error. The verdict and
/// the report show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// What the node saw of its script's end (OOM kills, a core); `None`
    /// when it cannot tell (not an agent) or the script never ran.
    pub exit_info: Option<ExitInfo>,
    /// The last lines (both streams), oldest first.
    pub tail: VecDeque<String>,
    #[serde(flatten)]
    pub errors: ErrorLines,
    /// A process's binding as `multinode bind --report-bindings` printed it
    /// first on its stderr (`--nproc-per-node --report-bindings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
}

/// The lines of a node's output that name an error, as `--report` and the
/// verdict carry them (flattened: these are their field names).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorLines {
    /// The program's own error: the last exception line of a Python
    /// traceback (not torchrun's `ChildFailedError`), a C++ `terminate
    /// called ...` with its `what()`, a CUDA error (`error_line`).
    #[serde(default)]
    pub program_error: Option<String>,
    /// NCCL's cause: the node's first `NCCL WARN` line, or the message
    /// PyTorch quotes after `Last error:` (`nccl_line::Cause`).
    #[serde(default)]
    pub nccl_cause: Option<String>,
    /// The node's last line that looks like an NCCL warning or error (`nccl_line`).
    #[serde(default)]
    pub nccl_line: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_cancel_reason_and_the_first_failure() {
        use CancelReason::*;
        assert_eq!(run_exit_code(None, None), 0);
        assert_eq!(run_exit_code(None, Some(3)), 3);
        assert_eq!(run_exit_code(Some(NodeFailed), Some(3)), 3);
        assert_eq!(run_exit_code(Some(Timeout), Some(3)), 124, "timeout wins");
        assert_eq!(run_exit_code(Some(Signal(libc::SIGINT)), None), 130);
        assert_eq!(run_exit_code(Some(Signal(libc::SIGINT)), Some(3)), 3);
        assert_eq!(run_exit_code(Some(SecondSignal), None), 137);
        assert_eq!(run_exit_code(Some(OutputClosed), None), 141);
        assert!(SecondSignal > Signal(1) && Signal(1) > Timeout && Timeout > OutputClosed);
        assert!(OutputClosed > NodeFailed, "the most serious reason wins");
    }
    use std::time::UNIX_EPOCH;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_000_000 + ms)
    }

    fn node(rank: usize, connect: Option<(u64, u64)>, spawned: u64, printed: u64) -> NodeRecord {
        let mut n = NodeRecord::new(rank, format!("node{rank}"));
        n.started = Some(at(spawned));
        n.timeline = Timeline {
            connected: connect.map(|c| at(c.0)),
            logged_in: connect.map(|c| at(c.1)),
            first_output: Some(at(printed)),
            ..Timeline::default()
        };
        n
    }

    #[test]
    fn the_start_line_names_the_last_node_to_print_and_its_longest_phase() {
        let here = node(0, None, 5, 40);
        let quick = node(1, Some((10, 60)), 70, 90);
        // Its login took 2.3 s.
        let slow = node(2, Some((20, 2_320)), 2_340, 4_120);
        let line = start_line(&[&here, &slow, &quick], at(0)).unwrap();
        assert_eq!(
            line,
            "every node printed within 4.12 s; the last, rank 2 (node2): connect 0.02 s, \
             login 2.30 s, spawn 0.02 s, first line 1.78 s: login the longest"
        );
        // A node run here has no connect nor login; a process is named as one.
        let mut proc = node(5, None, 100, 3_000);
        proc.process = Some(ProcessOf {
            node: 1,
            local_rank: 1,
        });
        let line = start_line(&[&here, &proc], at(0)).unwrap();
        assert_eq!(
            line,
            "every process printed within 3.00 s; the last, rank 5 (node5: node 1, local rank 1): \
             spawn 0.10 s, first line 2.90 s: first line the longest"
        );
        // A process on its node's connection: connect and login are the node's.
        let mut shared = node(6, Some((10, 60)), 70, 3_000);
        shared.process = Some(ProcessOf {
            node: 1,
            local_rank: 2,
        });
        shared.timeline.connection_shared_by = Some(4);
        let line = start_line(&[&here, &shared], at(0)).unwrap();
        assert!(
            line.ends_with(
                "node's connect 0.01 s, node's login 0.05 s, spawn 0.01 s, first line 2.93 s: \
                 first line the longest"
            ),
            "{line}"
        );
        assert!(start_line(&[], at(0)).is_none());
    }
}
