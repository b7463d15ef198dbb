//! What a run keeps of each node and how the run ended: the dispatcher's
//! records, a node's outcome and output statistics, the run's result.
//! Read by the report, the verdict and the relay; imports nothing of exec_all.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use crate::protocol::exit_info::ExitInfo;
pub use crate::protocol::relay_record::NodeOutcome;

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

/// What the dispatcher keeps of each node.
#[derive(Debug, Clone)]
pub struct NodeRecord {
    pub rank: usize,
    pub host: String,
    pub address: Option<String>,
    pub started: Option<SystemTime>,
    pub ended: Option<SystemTime>,
    pub outcome: Option<NodeOutcome>,
    pub stats: OutputStats,
    /// What the node saw of its script's end (OOM kills, a core); `None`
    /// when it cannot tell (not an agent) or the script never ran.
    pub exit_info: Option<ExitInfo>,
}

impl NodeRecord {
    pub fn new(rank: usize, host: String) -> Self {
        NodeRecord {
            rank,
            host,
            address: None,
            started: None,
            ended: None,
            outcome: None,
            stats: OutputStats::default(),
            exit_info: None,
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

/// What the report keeps of one node's output.
#[derive(Debug, Clone, Default)]
pub struct OutputStats {
    pub bytes_out: u64,
    pub bytes_err: u64,
    /// The last lines (both streams), oldest first.
    pub tail: VecDeque<String>,
    /// Everything, when the sink captures instead of relaying (up to `output::CAPTURE_MAX`).
    pub captured_out: Vec<u8>,
    pub captured_err: Vec<u8>,
    /// The last line that looks like an NCCL warning or error (`nccl_line`).
    pub nccl_line: Option<String>,
    /// NCCL's cause: its first `NCCL WARN` line, or what PyTorch quotes
    /// after `Last error:` (`nccl_line::Cause`).
    pub nccl_cause: Option<String>,
    /// The program's own error: the last exception line of a Python
    /// traceback, a C++ `terminate called ...`, a CUDA error (`error_line`).
    pub program_error: Option<String>,
    /// Why `--output`'s files of this node stopped being written.
    pub file_failure: Option<String>,
}
