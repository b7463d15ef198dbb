//! The run's data: what node tasks and the dispatcher tell each other, what
//! the dispatcher keeps of each node, and how a run ended. Every other file
//! of exec_all imports these; this file imports only `script`.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::Semaphore;

use super::script::Script;
use crate::process::Outcome;
use crate::protocol::exit_info::ExitInfo;
use crate::transport::client::{Connector, Target};
use crate::transport::mux::MuxClient;

/// What every node task shares.
pub(crate) struct RunCtx {
    pub script: Script,
    pub args: Vec<OsString>,
    /// What a remote shell runs: `script.agent_command(args)` for agents,
    /// `script.shell_command(args)` for any other server or wrapper.
    pub command: Vec<u8>,
    pub transport: Transport,
    pub port: u16,
    pub user: String,
    /// The head's working directory, for every node.
    pub cwd: String,
    pub grace: Duration,
    /// The `multinode` binary, for `multinode supervise`.
    pub bin: PathBuf,
    /// Bounds the connections being set up at once.
    pub connect_slots: Semaphore,
    /// The head agent's shared connections (inside `multinode agent -- JOB`).
    pub mux: Option<MuxClient>,
    /// This machine's agent of the job, which the node run here is shown to
    /// (`snapshot::survey::show_in_agent`): only when exec_all reaches
    /// agents itself and no agent runs it already.
    pub local_agent: Option<Target>,
}

/// How remote nodes are reached.
pub(crate) enum Transport {
    /// In-process russh sessions: to agents (job secret) or sshd (user keys).
    Native(Connector),
    /// `WRAPPER HOST COMMAND`, one process per node.
    External(String),
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
}

/// What a node task tells the dispatcher.
#[derive(Debug)]
pub enum Event {
    /// The connection is up (remote) or the process spawned (local).
    Started {
        address: Option<String>,
    },
    Ended(Box<End>),
}

#[derive(Debug)]
pub struct End {
    pub outcome: NodeOutcome,
    pub stats: OutputStats,
    pub ended: SystemTime,
    /// For a relay: what its exec_all reported of each node of its group.
    pub subtree: Option<Subtree>,
    /// What the node saw of the script's end, when it can tell.
    pub exit_info: Option<ExitInfo>,
}

/// A relay's report of its group.
#[derive(Debug)]
pub struct Subtree {
    pub records: Vec<NodeRecord>,
    pub first_failure: Option<usize>,
}

/// How a node's part of the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// Orders from the dispatcher.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// Send this signal to the node's process group.
    Signal(i32),
    /// Give up on the node: close its connection or kill its local group.
    Abandon,
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
    /// A relay's report line (see `relay::REPORT_MARKER`), taken out of its stderr.
    pub relay_report: Option<String>,
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
