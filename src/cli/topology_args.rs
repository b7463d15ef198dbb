//! Where the topology comes from (`TopologyArgs`, which most commands take),
//! the output formats, and `multinode env` and `hosts`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EnvFormat {
    /// `export NAME='value'` lines, safe to eval whatever the values hold.
    Sh,
    /// One JSON object.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TableFormat {
    /// An aligned table for people.
    Table,
    /// JSON for programs.
    Json,
}

/// Where the topology comes from, and which node this one is.
#[derive(Debug, Clone, Default, Args)]
pub struct TopologyArgs {
    /// Hostlist: `host1:2,host2:2`, `gpu[01-04]`, `node[1-2]:4` (overrides every other source).
    #[arg(long, value_name = "HOSTLIST")]
    pub hosts: Option<String>,
    /// Hostfile in Open MPI (`host slots=N`), MPICH (`host:N`) or plain form.
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<PathBuf>,
    /// This node's rank, when several nodes share one machine [env: MULTINODE_NODE_RANK].
    #[arg(long, value_name = "N")]
    pub node_rank: Option<usize>,
    /// Interface whose address is this node's (MULTINODE_LOCAL_IP) and, on the head,
    /// the head's (MULTINODE_NODE_IP) [env: MULTINODE_IFNAME, NCCL_SOCKET_IFNAME].
    #[arg(long, value_name = "IFNAME")]
    pub iface: Option<String>,
}

impl TopologyArgs {
    /// The flags as the domain takes them.
    pub fn inputs(&self) -> crate::topology::Inputs {
        crate::topology::Inputs {
            hosts: self.hosts.clone(),
            hostfile: self.hostfile.clone(),
            node_rank: self.node_rank,
            iface: self.iface.clone(),
            spares: None,
        }
    }
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[arg(long, value_enum, default_value_t = EnvFormat::Sh)]
    pub format: EnvFormat,
}

#[derive(Debug, Args)]
pub struct HostsArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
    /// Do not resolve addresses (pure expansion; no DNS).
    #[arg(long)]
    pub no_resolve: bool,
}
