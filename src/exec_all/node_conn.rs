//! One connection a node for its processes (`--nproc-per-node`): the first
//! of a node's process tasks to get there connects and logs in (one login a
//! node, within the run's connect slots); the others wait for it, and each
//! opens its own session channel on it. Everything of a process stays its
//! own (its channel, output, signals, exit); the connection is the node's,
//! and ends with the last of its processes' channels.
//!
//! A node's tasks hold its [`NodeConn`] only while they start: once every
//! one has its channel (or gave up), the connection is held by the
//! channels alone.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::OnceCell;

use super::plan::NodeSpec;
use crate::transport::client::Connection;

/// A node's connection, shared by its processes' tasks while they start.
pub struct NodeConn {
    /// How many processes of the node it serves.
    pub processes: usize,
    /// The connection once made, or why it could not be (every process of
    /// the node is then unreachable for the same reason).
    made: OnceCell<Result<Arc<Connection>, String>>,
}

impl NodeConn {
    pub fn new(processes: usize) -> Self {
        NodeConn {
            processes,
            made: OnceCell::new(),
        }
    }

    /// The node's connection: made by `connect` if no task made it yet (a
    /// task stopped while connecting leaves it to the next one).
    pub async fn get<F>(&self, connect: impl FnOnce() -> F) -> Result<Arc<Connection>, String>
    where
        F: Future<Output = Result<Connection, String>>,
    {
        self.made
            .get_or_init(|| async { connect().await.map(Arc::new) })
            .await
            .clone()
    }
}

/// For each spec, the connection it shares with the other processes of its
/// node (`--nproc-per-node`, a node reached over SSH in-process: an agent
/// or a stock sshd), if any.
pub fn of_specs(specs: &[NodeSpec]) -> Vec<Option<Arc<NodeConn>>> {
    let node = |spec: &NodeSpec| {
        let remote = matches!(
            spec.leg,
            super::leg_kind::LegKind::Agent | super::leg_kind::LegKind::Sshd
        );
        spec.process
            .filter(|_| remote && spec.relay.is_none())
            .map(|p| p.node)
    };
    let mut counts = std::collections::HashMap::<usize, usize>::new();
    for n in specs.iter().filter_map(node) {
        *counts.entry(n).or_default() += 1;
    }
    let conns: std::collections::HashMap<usize, Arc<NodeConn>> = counts
        .into_iter()
        .map(|(n, count)| (n, Arc::new(NodeConn::new(count))))
        .collect();
    specs
        .iter()
        .map(|spec| node(spec).map(|n| conns[&n].clone()))
        .collect()
}
