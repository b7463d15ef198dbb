//! What every connection and command of an agent shares ([`Shared`]).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::sftp_bounds::SftpBounds;
use super::{env_limit, forward, keeper, login, pty, running, session_bounds};
use crate::env::hostlists;
use crate::keys::JobKeys;

/// What every connection and command of an agent shares.
pub(crate) struct Shared {
    pub keys: JobKeys,
    /// This program, for `multinode supervise`.
    pub bin: std::path::PathBuf,
    /// Ends the commands' groups if this agent dies.
    pub keeper: keeper::Keeper,
    /// The process groups of the running commands, for snapshots.
    pub running: running::Running,
    /// Where the start of this machine's exec_alls' runs went (`top`).
    pub runs: crate::snapshot::run_start::ShownRuns,
    /// `nvidia-smi`'s loops while `top` asks for the GPUs.
    pub gpus: Arc<crate::nvidia_smi::Watch>,
    /// NCCL's RAS service's last answer, asked one ask at a time.
    pub ras: crate::snapshot::ras::Answers,
    /// Admits connections and holds them to the login deadline.
    pub gate: Arc<login::Gate>,
    /// Between SIGTERM and SIGKILL when a command's group is ended.
    pub grace: Duration,
    /// Variables every command gets on top of the agent's own environment.
    pub base_env: Vec<(String, String)>,
    /// The hostlists of the last command, written out (exec_all sends them folded).
    pub wire: hostlists::WireCache,
    /// Cancelled when the agent ends: every command's group is ended.
    pub shutdown: CancellationToken,
    /// Cancelled when the head released this agent (or, on the head, the job ended).
    pub released: CancellationToken,
    /// Every connection and channel task, so shutdown can wait for them.
    pub tracker: TaskTracker,
    /// The bounds the `sftp` sessions share (handles, file operations at once).
    pub sftp: SftpBounds,
    /// The environment bytes all connections' commands hold together.
    pub env: env_limit::AgentEnv,
    /// The terminals of all connections.
    pub ptys: pty::PtyBounds,
    /// Where `direct-tcpip` channels may go.
    pub destinations: forward::Destinations,
    /// The bound on forwarded channels of all connections together.
    pub forwards: forward::ForwardBounds,
    /// The bound on session channels of all connections together.
    pub sessions: session_bounds::SessionBounds,
    pub host: String,
    pub rank: Option<usize>,
    /// When a client of this job last authenticated (the head pinging a
    /// worker counts): a worker's wait for its head starts from there.
    pub last_contact: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Shared {
    pub(crate) fn touch(&self) {
        *self
            .last_contact
            .lock()
            .expect("not poisoned: no panics while held") = Some(tokio::time::Instant::now());
    }

    pub(crate) fn last_contact(&self) -> Option<tokio::time::Instant> {
        *self
            .last_contact
            .lock()
            .expect("not poisoned: no panics while held")
    }
}
