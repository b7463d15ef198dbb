//! What node tasks and the dispatcher tell each other: a task's events
//! (carrying its rank) and the dispatcher's orders.

use std::time::SystemTime;

use super::record::{NodeOutcome, NodeRecord, OutputStats};
use crate::protocol::exit_info::ExitInfo;

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

/// Orders from the dispatcher.
#[derive(Debug, Clone, Copy)]
pub enum Order {
    /// Send this signal to the node's process group.
    Signal(i32),
    /// Give up on the node: close its connection or kill its local group.
    Abandon,
}
