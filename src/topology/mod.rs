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
//! - `route`, `address`: the default route, interface choice, head and local addresses.
//! - `placement`: all of the above for this node; the rows of `multinode hosts`.
//! - `machine`: the I/O behind all of it.
//! - `hosts`: `multinode hosts`.

use std::borrow::Cow;
use std::collections::BTreeMap;

mod address;
mod error;
mod fold;
mod host_slots;
mod hostfile;
mod hostlist;
mod hosts;
mod kubernetes;
pub(crate) mod machine;
mod placement;
mod resolve;
mod route;
mod slots;
mod tasks_per_node;
mod this_node;

pub(crate) use error::shorten;
pub use error::{ParseError, TopologyError};
pub use hosts::cmd_hosts;
pub(crate) use placement::{Placement, resolve_placement};

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
        self.nodes
            .iter()
            .map(|n| format!("{}:{}", n.written(), n.slots))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `host1,host2,[fd00::2]`
    pub fn hostlist_noslots(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.written())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// [`Topology::hostlist`] folded as `nodeset -f` folds: `gpu[01-64]:8`.
    /// It parses back to the same nodes, in the same order.
    pub fn hostlist_folded(&self) -> String {
        fold::fold(&self.nodes, true)
    }

    /// [`Topology::hostlist_noslots`] folded: `gpu[01-64]`.
    pub fn hostlist_noslots_folded(&self) -> String {
        fold::fold(&self.nodes, false)
    }

    /// Parses a `MULTINODE_HOSTLIST` (full or folded) into a topology whose
    /// source is `source`.
    pub fn from_hostlist(list: &str, source: &str) -> Result<Self, ParseError> {
        Ok(Topology {
            nodes: host_slots::parse_host_slots(list)?,
            source: source.to_string(),
        })
    }
}

/// A snapshot of the process environment, so resolution is testable.
///
/// Values that are not UTF-8 are kept apart: [`EnvMap::get`] does not see
/// them (a host list or a port must be text), [`EnvMap::get_bytes`] does
/// (the job secret may be any bytes).
#[derive(Debug, Clone, Default)]
pub struct EnvMap(pub BTreeMap<String, String>, NotUtf8);

/// The variables whose value is not UTF-8; their values never show in `Debug`.
#[derive(Clone, Default)]
struct NotUtf8(BTreeMap<String, Vec<u8>>);

impl std::fmt::Debug for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl EnvMap {
    pub fn from_process() -> Self {
        use std::os::unix::ffi::OsStringExt;
        let mut env = EnvMap::default();
        for (name, value) in std::env::vars_os() {
            let Ok(name) = name.into_string() else {
                continue;
            };
            match value.into_string() {
                Ok(value) => {
                    env.0.insert(name, value);
                }
                Err(value) => {
                    env.1.0.insert(name, value.into_vec());
                }
            }
        }
        env
    }

    /// A variable's bytes, UTF-8 or not; set-but-empty counts as unset.
    pub fn get_bytes(&self, name: &str) -> Option<&[u8]> {
        match self.0.get(name) {
            Some(value) => Some(value.as_bytes()),
            None => self.1.0.get(name).map(Vec::as_slice),
        }
        .filter(|v| !v.is_empty())
    }

    /// A variable's value; set-but-empty counts as unset.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
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
