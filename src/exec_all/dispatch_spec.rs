//! What a run's dispatcher is given: what to do (`Dispatch`, from the
//! run's options), its handle on each node task, and the channels it reads.

use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::event::{Event, Order};
use crate::snapshot::run_start::RunStart;
use crate::snapshot::survey::RunNodes;

/// What a run's dispatcher is told to do.
pub struct Dispatch {
    pub fail_fast: bool,
    pub grace: Duration,
    pub timeout: Option<Duration>,
    pub progress: bool,
    /// How to snapshot the run's nodes: on SIGUSR1, and before `--timeout`
    /// ends the run when `snapshot_on_timeout`.
    pub snapshot: Option<RunNodes>,
    pub snapshot_on_timeout: bool,
    /// `--hang-timeout`: no output and no heartbeat from any node for this
    /// long ends the run as hung, after a snapshot of every node.
    pub hang_timeout: Option<Duration>,
    pub progress_seen: std::sync::Arc<super::progress::Progress>,
    /// Say where the start went once every task printed (a run that
    /// passes its output on): on a terminal, or when it took `SLOW_START`.
    pub start_line: bool,
    /// Where the start of each task is, for this machine's agent to show
    /// `top` (`snapshot::run_start::show_start`): told at most every
    /// `TELL_EVERY` while it changes.
    pub show_start: Option<watch::Sender<Option<RunStart>>>,
    /// The run is the health check before an attempt (its start told so).
    pub health_check: bool,
}

/// The dispatcher's handle on one node task: a node, or a relay that runs
/// exec_all for a group of nodes. Events carry the task's rank.
pub struct TaskHandle {
    pub rank: usize,
    pub orders: mpsc::UnboundedSender<Order>,
}

/// The channels a run's dispatcher reads: its tasks' events, and the
/// writer's word that stdout or stderr can no longer be written.
pub struct Channels {
    pub events: mpsc::UnboundedReceiver<(usize, Event)>,
    pub output_closed: mpsc::UnboundedReceiver<()>,
}
