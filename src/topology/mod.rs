//! The job's topology: which nodes, how many slots each, which one is this.
//!
//! Parsing is pure (strings in, [`Topology`] out) and lives in its own files;
//! resolution against the environment, the file system and the network comes
//! after, in [`resolve`].

use std::collections::BTreeMap;

use crate::cli::HostsArgs;
use crate::error::Error;

/// One node of the job, in node-rank order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    pub host: String,
    pub slots: u32,
}

/// The nodes of the job and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<Node>,
    /// Where the hostlist came from, for messages: `--hosts`, `SLURM_JOB_NODELIST`, ...
    pub source: String,
}

impl Topology {
    pub fn total_slots(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.slots)).sum()
    }

    /// `host1:2,host2:2`
    pub fn hostlist(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("{}:{}", n.host, n.slots))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `host1,host2`
    pub fn hostlist_noslots(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.host.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A snapshot of the process environment, so resolution is testable.
#[derive(Debug, Clone, Default)]
pub struct EnvMap(pub BTreeMap<String, String>);

impl EnvMap {
    pub fn from_process() -> Self {
        EnvMap(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        )
    }

    /// A variable's value; set-but-empty counts as unset.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

pub fn cmd_hosts(_args: &HostsArgs) -> Result<i32, Error> {
    Err(Error::usage("`multinode hosts` is not built yet"))
}
