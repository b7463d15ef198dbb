//! What the checks look at: every node as the head got it (its facts, or
//! why there are none) and what the head measured itself.

use std::net::IpAddr;

use crate::check::facts::NodeFacts;

/// One node as the head got it: its place in the hostlist and its report,
/// or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeReply {
    pub rank: usize,
    pub host: String,
    pub slots: u32,
    pub facts: Result<NodeFacts, String>,
}

/// What the head knows and measured itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeadContext {
    /// The head's `multinode` version.
    pub version: String,
    /// `MULTINODE_NODE_IP`.
    pub head_ip: IpAddr,
    /// The rendezvous port.
    pub port: u16,
    /// Why the head could not listen on the port, if it could not.
    pub bind_error: Option<String>,
    /// The head's clock (UNIX ms) before asking the nodes, and after the last answer.
    pub started_ms: u64,
    pub finished_ms: u64,
    /// `--nproc-per-node`.
    pub nproc_per_node: Option<u32>,
    /// `--gpu`: the GPU health checks too.
    pub gpu: bool,
}

/// Everything the checks look at. `nodes[i].rank == i`, for every node of the job.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckInputs {
    pub head: HeadContext,
    pub nodes: Vec<NodeReply>,
}

impl CheckInputs {
    /// The nodes that answered, with their facts.
    pub(crate) fn answered(&self) -> impl Iterator<Item = (&NodeReply, &NodeFacts)> {
        self.nodes
            .iter()
            .filter_map(|n| n.facts.as_ref().ok().map(|f| (n, f)))
    }

    /// The head's facts, if it answered.
    pub(crate) fn head_facts(&self) -> Option<&NodeFacts> {
        self.nodes.first().and_then(|n| n.facts.as_ref().ok())
    }

    /// Whether every node is this one machine (a one-node job, the loopback
    /// demo, several "nodes" sharing one network stack): then loopback
    /// addresses reach every node. Known when the hostlist holds loopback
    /// literals only, or every node answered from the same kernel
    /// (`boot_id`) and network namespace.
    pub(crate) fn one_machine(&self) -> bool {
        if self.nodes.len() <= 1 {
            return true;
        }
        if self
            .nodes
            .iter()
            .all(|n| n.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()))
        {
            return true;
        }
        let mut ids = self.nodes.iter().map(|n| {
            n.facts
                .as_ref()
                .ok()
                .and_then(|f| Some((f.machine.boot_id.clone()?, f.machine.netns.clone()?)))
        });
        let Some(Some(first)) = ids.next() else {
            return false;
        };
        ids.all(|id| id.as_ref() == Some(&first))
    }

    /// Whether any node that answered has a GPU.
    pub(crate) fn any_gpu(&self) -> bool {
        self.answered().any(|(_, f)| !f.gpus.devices.is_empty())
    }

    pub(super) fn host(&self, rank: usize) -> &str {
        self.nodes.get(rank).map_or("?", |n| n.host.as_str())
    }
}
