//! What node tasks and the dispatcher tell each other: a task's events
//! (carrying its rank) and the dispatcher's orders; and what a task's leg
//! tells it (`LegMsg`, `Closed`).

use std::time::SystemTime;

use bytes::Bytes;

use super::record::{Evidence, NodeOutcome, NodeRecord, OutputStats};
use super::relay_record::RelayRecord;
use crate::process::Outcome;
use crate::protocol::exit_info::ExitInfo;

/// When a task's connection was up and logged in, and how many processes
/// of its node share it (`None`: it is the task's own).
#[derive(Debug, Clone, Copy)]
pub struct Connected {
    pub times: crate::transport::client::ConnectTimes,
    pub shared_by: Option<usize>,
}

/// What a node task tells the dispatcher.
#[derive(Debug)]
pub enum Event {
    /// The connection is up (remote) or the process spawned (local).
    Started {
        address: Option<String>,
        /// When its connection was up and logged in (a connection made
        /// for it, or for its node's processes).
        connect: Option<Connected>,
    },
    /// Its first output came (once a task).
    FirstOutput,
    Ended(Box<End>),
}

#[derive(Debug)]
pub struct End {
    pub outcome: NodeOutcome,
    pub stats: OutputStats,
    /// Its last lines, the errors they name, and what the node saw of the
    /// script's end, when it can tell.
    pub evidence: Evidence,
    pub ended: SystemTime,
    /// When its first heartbeat came, if one did.
    pub first_heartbeat: Option<SystemTime>,
    /// For a relay: what its exec_all reported of each node of its group.
    pub subtree: Option<Subtree>,
}

/// A relay's report of its group.
#[derive(Debug)]
pub struct Subtree {
    pub records: Vec<NodeRecord>,
    pub first_failure: Option<usize>,
}

/// Orders from the dispatcher.
#[derive(Debug, Clone, Copy)]
pub enum Order {
    /// Send this signal to the node's process group.
    Signal(i32),
    /// Give up on the node: close its connection or kill its local group.
    Abandon,
}

/// What a leg yields.
#[derive(Debug)]
pub enum LegMsg {
    Out(Bytes),
    Err(Bytes),
    /// What the node saw of the command's end (OOM kills, a core).
    ExitInfo(ExitInfo),
    Exit(Outcome),
    /// The command touched its heartbeat file: progress without output.
    Heartbeat,
    /// A relay's record of its group, taken out of its stderr.
    RelayRecord(RelayRecord),
}

/// How a leg ended, beyond its messages.
pub struct Closed {
    /// How its command ended, when only closing could tell (a process killed
    /// when abandoned).
    pub status: Option<Outcome>,
    pub exit_info: Option<ExitInfo>,
    /// Why there is no exit status, if there is none.
    pub lost: &'static str,
}
