//! What the command line says about the job's topology, as plain values.

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
