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
    // A node of one process keeps a connection of its own.
    let conns: std::collections::HashMap<usize, Arc<NodeConn>> = counts
        .into_iter()
        .filter(|&(_, count)| count > 1)
        .map(|(n, count)| (n, Arc::new(NodeConn::new(count))))
        .collect();
    specs
        .iter()
        .map(|spec| node(spec).and_then(|n| conns.get(&n).cloned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::Mode;
    use crate::env::Job;
    use crate::env_map::EnvMap;
    use crate::exec_all::leg_kind::LegKind;
    use crate::exec_all::options::RunOptions;
    use crate::exec_all::plan;
    use crate::exec_all::procs::{PerNode, Procs};
    use crate::exec_all::script::Script;
    use crate::topology::machine::fake::topology;

    fn job(n: usize) -> Job {
        let hosts: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        Job {
            topology: topology("--hosts", &hosts),
            spares: 0,
            rank: 0,
            head_ip: "10.0.0.1".parse().unwrap(),
            local_ip: "10.0.0.1".parse().unwrap(),
            agent_port: 29400,
            wrapper: "mn-ssh".into(),
            rsh_wrapper: "mn-ssh".into(),
            bin: "/usr/bin/multinode".into(),
        }
    }

    fn options(fanout: usize) -> RunOptions {
        RunOptions {
            fanout,
            procs: Some(Procs {
                per_node: PerNode::Counts(vec![3, 3, 1, 2]),
                bind: Mode::None,
                report_bindings: false,
                master_port: 29500,
                head: true,
                store: super::super::job_store::StoreMode::Auto,
                hosted: None,
            }),
            ..RunOptions::new(Script::Inline(b"true".to_vec()))
        }
    }

    /// Who shares a connection: the processes of a remote node of several,
    /// not this node's (run here), not a lone process, not a relay.
    #[test]
    fn the_processes_of_a_remote_node_share_one_connection() {
        let counts = [3, 3, 1, 2];
        let planned = plan::plan(
            &job(4),
            &options(64),
            LegKind::Agent,
            &EnvMap::default(),
            Some(&counts),
        )
        .unwrap();
        let conns = of_specs(&planned.tasks);
        let shared: Vec<Option<usize>> = conns
            .iter()
            .map(|c| c.as_ref().map(|c| c.processes))
            .collect();
        assert_eq!(
            shared,
            [
                None,
                None,
                None,
                Some(3),
                Some(3),
                Some(3),
                None,
                Some(2),
                Some(2)
            ]
        );
        // One per node: node 1's three tasks hold the same.
        assert!(Arc::ptr_eq(
            conns[3].as_ref().unwrap(),
            conns[5].as_ref().unwrap()
        ));
        assert!(!Arc::ptr_eq(
            conns[3].as_ref().unwrap(),
            conns[7].as_ref().unwrap()
        ));
        // Past the fanout, a relay's task is one connection of its own (its
        // exec_all shares its group's).
        let relayed = plan::plan(
            &job(4),
            &options(1),
            LegKind::Agent,
            &EnvMap::default(),
            Some(&counts),
        )
        .unwrap();
        assert!(relayed.tasks.iter().any(|t| t.relay.is_some()));
        assert!(of_specs(&relayed.tasks).iter().all(Option::is_none));
    }
}
