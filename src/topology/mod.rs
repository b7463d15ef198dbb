//! The job's topology: which nodes, how many slots each, which one is this,
//! and the head's address.
//!
//! Parsing is pure (strings in, nodes out) and lives in its own files;
//! resolution against the environment, the file system and the network comes
//! after, through the [`machine::Machine`] trait so that it is tested with fixtures.
//!
//! - `hostlist`: Slurm's `gpu[01-04,07]` syntax, and host name rules.
//! - `host_slots`: one `Node`; `MULTINODE_HOSTLIST` (`host:slots,...`, also `--hosts`) and `_NOSLOTS`.
//! - `job_nodes`: the job's nodes (`Topology`) and their hostlists.
//! - `inputs`: what the command line says (`Inputs`).
//! - `topology_error`: what can be wrong with a topology.
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

mod address;
mod host_slots;
mod hostfile;
mod hostlist;
mod hostlist_fold;
mod hosts;
mod inputs;
mod job_nodes;
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

pub use host_slots::Node;
pub use hosts::cmd_hosts;
pub use inputs::Inputs;
pub use job_nodes::Topology;
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
