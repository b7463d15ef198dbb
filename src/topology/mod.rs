//! The job's topology: which nodes, how many slots each, which one is this,
//! and the head's address.
//!
//! Parsing is pure (strings in, nodes out) and lives in its own files;
//! resolution against the environment, the file system and the network comes
//! after, through the [`machine::Machine`] trait so that it is tested with fixtures.
//!
//! - `hostlist`: Slurm's `gpu[01-04,07]` syntax, and host name rules.
//! - `host_slots`: `MULTINODE_HOSTLIST` (`host:slots,...`, also `--hosts`) and `_NOSLOTS`.
//! - `tasks_per_node`: `SLURM_TASKS_PER_NODE` (`2(x3),1`).
//! - `hostfile`: Open MPI, MPICH and plain hostfiles; `LSB_MCPU_HOSTS`.
//! - `slots`: positive counts.
//! - `resolve`: the sources, in order, and the contradictions between them.
//! - `kubernetes`: Indexed Job / JobSet, Kubeflow PyTorchJob, MPI Operator.
//! - `this_node`: which node this machine is.
//! - `kernel_routes`, `address`: the default route, interface choice, head and local addresses.
//! - `placement`: all of the above for this node; the rows of `multinode hosts`.
//! - `machine`: the I/O behind all of it.
//! - `hosts`: `multinode hosts`.

use std::borrow::Cow;

mod address;
mod host_slots;
mod hostfile;
mod hostlist;
mod hostlist_fold;
mod hosts;
mod kernel_routes;
mod kubernetes;
pub(crate) mod machine;
pub(crate) mod nccl;
pub(crate) mod nodeset;
mod placement;
mod resolve;
mod slots;
pub(crate) mod spares;
mod tasks_per_node;
mod this_node;
mod topology_error;

pub use hosts::cmd_hosts;
pub(crate) use placement::{Placement, resolve_placement};
pub use topology_error::TopologyError;
pub(crate) use topology_error::shorten;

/// A topology that is set, parsed and checked against the environment
/// (this machine need not be in it); no topology set is no error.
pub(crate) fn check_topology(
    args: &Inputs,
    env: &crate::env_map::EnvMap,
) -> Result<Option<Topology>, TopologyError> {
    resolve::check_topology(args, env, &machine::System)
}

/// One node of the job, in node-rank order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    /// A host name, or an IP literal (IPv6 without brackets).
    pub host: String,
    pub slots: u32,
}

/// The nodes of the job and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Node 0 is the head. Never empty; no host appears twice.
    pub nodes: Vec<Node>,
    /// Where the hostlist came from, for messages: `--hosts`, `SLURM_JOB_NODELIST`, ...
    pub source: String,
}

impl Node {
    /// The host as the hostlists write it: IPv6 literals in brackets.
    fn written(&self) -> Cow<'_, str> {
        if self.host.contains(':') {
            Cow::Owned(format!("[{}]", self.host))
        } else {
            Cow::Borrowed(&self.host)
        }
    }
}

impl Topology {
    pub fn total_slots(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.slots)).sum()
    }

    /// `host1:2,host2:2,[fd00::2]:2`
    pub fn hostlist(&self) -> String {
        self.render(true)
    }

    /// `host1,host2,[fd00::2]`
    pub fn hostlist_noslots(&self) -> String {
        self.render(false)
    }

    /// Both lists above, written into one buffer (a relay renders them for
    /// thousands of nodes: no string a node).
    fn render(&self, slots: bool) -> String {
        use std::fmt::Write;
        let mut out = String::with_capacity(self.nodes.len() * 16);
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&n.written());
            if slots {
                let _ = write!(out, ":{}", n.slots);
            }
        }
        out
    }

    /// [`Topology::hostlist`] folded as `nodeset -f` folds: `gpu[01-64]:8`.
    /// It parses back to the same nodes, in the same order.
    pub fn hostlist_folded(&self) -> String {
        hostlist_fold::fold(&self.nodes, true)
    }

    /// [`Topology::hostlist_noslots`] folded: `gpu[01-64]`.
    pub fn hostlist_noslots_folded(&self) -> String {
        hostlist_fold::fold(&self.nodes, false)
    }

    /// Parses a `MULTINODE_HOSTLIST` (full or folded) into a topology whose
    /// source is `source`.
    pub fn from_hostlist(list: &str, source: &str) -> Result<Self, topology_error::ParseError> {
        Ok(Topology {
            nodes: host_slots::parse_host_slots(list)?,
            source: source.to_string(),
        })
    }
}

/// What the command line says about the job's topology (`--hosts`,
/// `--hostfile`, `--node-rank`, `--iface`); every field may be unset. A
/// plain type: the clap flags (`cli::TopologyArgs`) are turned into it at the edge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// A hostlist that overrides every other source.
    pub hosts: Option<String>,
    /// A hostfile in Open MPI, MPICH or plain form.
    pub hostfile: Option<std::path::PathBuf>,
    /// This node's rank, when several nodes share one machine.
    pub node_rank: Option<usize>,
    /// The interface whose address is this machine's, in NCCL's syntax.
    pub iface: Option<String>,
    /// How many of the hostlist's last nodes are spares (`--spares`; else
    /// `MULTINODE_SPARES`).
    pub spares: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_bracket_ipv6_literals_so_they_parse_back() {
        let topo = Topology {
            nodes: vec![
                Node {
                    host: "gpu01".into(),
                    slots: 2,
                },
                Node {
                    host: "fd00::2".into(),
                    slots: 3,
                },
            ],
            source: "test".into(),
        };
        assert_eq!(topo.hostlist(), "gpu01:2,[fd00::2]:3");
        assert_eq!(topo.hostlist_noslots(), "gpu01,[fd00::2]");
        assert_eq!(topo.total_slots(), 5);
        assert_eq!(
            host_slots::parse_host_slots(&topo.hostlist()).ok(),
            Some(topo.nodes.clone())
        );
    }
}
