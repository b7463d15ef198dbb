//! Every `MULTINODE_*` variable name, and the environment contract's list of
//! names, written once: code names a variable through these constants, never
//! as a literal (the test `tests/integration/layers.rs` holds `src/` to it
//! outside tests). What each means for a user: docs/environment.md. The
//! bottom layer: it imports nothing.

// The contract: what every node's job sees (`env::contract`).

/// `host:slots`, comma separated, in node-rank order.
pub const HOSTLIST: &str = "MULTINODE_HOSTLIST";
/// The hosts of [`HOSTLIST`] alone.
pub const HOSTLIST_NOSLOTS: &str = "MULTINODE_HOSTLIST_NOSLOTS";
/// A file of every node, `host slots=N`, when [`HOSTLIST`] is too long to
/// write out.
pub const HOSTFILE: &str = "MULTINODE_HOSTFILE";
/// The hostlists folded, as a client sends them to an agent, which writes
/// them out for its command (`env::hostlists`).
pub const HOSTLIST_FOLDED: &str = "MULTINODE_HOSTLIST_FOLDED";
/// The sum of the slots.
pub const TOTAL_SLOTS: &str = "MULTINODE_TOTAL_SLOTS";
/// The number of nodes (also a Kubernetes Indexed Job's node count).
pub const NNODES: &str = "MULTINODE_NNODES";
/// Node 0's host, as the hostlist writes it.
pub const HEAD: &str = "MULTINODE_HEAD";
/// The head's address: the rendezvous address.
pub const NODE_IP: &str = "MULTINODE_NODE_IP";
/// This node's own address.
pub const LOCAL_IP: &str = "MULTINODE_LOCAL_IP";
/// This node's rank (not a `MULTINODE_` name: the contract sets it beside
/// [`NODE_RANK`], and many launchers read it).
pub const RANK: &str = "RANK";
/// This node's rank (`--node-rank`).
pub const NODE_RANK: &str = "MULTINODE_NODE_RANK";
/// The port of the per-node agents.
pub const AGENT_PORT: &str = "MULTINODE_AGENT_PORT";
/// The remote-exec wrapper: a platform's, else `mn-ssh`.
pub const SSH_WRAPPER: &str = "MULTINODE_SSH_WRAPPER";
/// A platform's rsh wrapper, else the same as [`SSH_WRAPPER`].
pub const RSH_WRAPPER: &str = "MULTINODE_RSH_WRAPPER";
/// The absolute path of the `multinode` binary.
pub const BIN: &str = "MULTINODE_BIN";
/// How many of the hostlist's last nodes are spares (`--spares`).
pub const SPARES: &str = "MULTINODE_SPARES";
/// The spare nodes, `host:slots`; the lists above leave them out.
pub const SPARE_HOSTLIST: &str = "MULTINODE_SPARE_HOSTLIST";

/// Every name the contract may set for a node, in the order it sets them
/// (the hostlists' names first).
pub const CONTRACT: [&str; 17] = [
    HOSTLIST,
    HOSTLIST_NOSLOTS,
    HOSTFILE,
    HOSTLIST_FOLDED,
    TOTAL_SLOTS,
    NNODES,
    HEAD,
    NODE_IP,
    LOCAL_IP,
    RANK,
    NODE_RANK,
    AGENT_PORT,
    SSH_WRAPPER,
    RSH_WRAPPER,
    BIN,
    SPARES,
    SPARE_HOSTLIST,
];

// Where the topology comes from, beyond the contract's own names.

/// Which interface's address is this machine's (`--iface`).
pub const IFNAME: &str = "MULTINODE_IFNAME";
/// The MPI Operator's hostfile, instead of `/etc/mpi/hostfile`.
pub const MPI_HOSTFILE: &str = "MULTINODE_MPI_HOSTFILE";

// The job secret and how nodes are reached.

/// The job secret.
pub const SECRET: &str = "MULTINODE_SECRET";
/// A file holding the job secret.
pub const SECRET_FILE: &str = "MULTINODE_SECRET_FILE";
/// `agent` or `openssh`: how `mn-ssh` and exec_all reach a node.
pub const TRANSPORT: &str = "MULTINODE_TRANSPORT";
/// The port of the nodes' sshd, for an sshd leg (default 22).
pub const SSH_PORT: &str = "MULTINODE_SSH_PORT";
/// `0`: of an external wrapper's run, only node 0's output is shown.
pub const WRAPPER_FORWARD_STREAMS: &str = "MULTINODE_WRAPPER_FORWARD_STREAMS";
/// The head agent's shared-connection socket, set for JOB.
pub const MUX_SOCKET: &str = "MULTINODE_MUX_SOCKET";
/// How long a silent server may take before it counts as lost.
pub const LOST_AFTER: &str = "MULTINODE_LOST_AFTER";

// What a client and an agent tell each other in a channel's `env` requests.

/// The working directory a command starts in.
pub const CWD: &str = "MULTINODE_CWD";
/// Several variables packed in one `env` request.
pub const ENV_PACK: &str = "MULTINODE_ENV_PACK";
/// A client asks for the facts of a command's end (OOM kills, a core).
pub const EXIT_INFO: &str = "MULTINODE_EXIT_INFO";
/// A client asks for a command's heartbeats.
pub const HEARTBEAT: &str = "MULTINODE_HEARTBEAT";
/// The file a command touches to say it is alive.
pub const HEARTBEAT_FILE: &str = "MULTINODE_HEARTBEAT_FILE";

// exec_all's options, when their flags do not give them.

/// `--fanout`.
pub const FANOUT: &str = "MULTINODE_FANOUT";
/// `--max-restarts`.
pub const MAX_RESTARTS: &str = "MULTINODE_MAX_RESTARTS";
/// An attempt's number, 0 on the first (set for every node of an attempt).
pub const RESTART_COUNT: &str = "MULTINODE_RESTART_COUNT";
/// `--min-nodes`.
pub const MIN_NODES: &str = "MULTINODE_MIN_NODES";
/// `--health-check`.
pub const HEALTH_CHECK: &str = "MULTINODE_HEALTH_CHECK";
/// `--health-timeout`.
pub const HEALTH_TIMEOUT: &str = "MULTINODE_HEALTH_TIMEOUT";
/// `--hang-timeout`.
pub const HANG_TIMEOUT: &str = "MULTINODE_HANG_TIMEOUT";
/// `--nproc-per-node`.
pub const NPROC_PER_NODE: &str = "MULTINODE_NPROC_PER_NODE";
/// `--master-port`.
pub const MASTER_PORT: &str = "MULTINODE_MASTER_PORT";
/// `--store`: who hosts the job's c10d store (`auto`, `off`).
pub const STORE: &str = "MULTINODE_STORE";
/// `--bind` (of `multinode bind` and exec_all).
pub const BIND: &str = "MULTINODE_BIND";

// For tests and special cases.

/// `1`: an agent that is PID 1 does not act as a minimal init.
pub const NO_INIT: &str = "MULTINODE_NO_INIT";
/// For tests only: read sysfs under this folder instead of `/sys`.
pub const SYSFS_ROOT: &str = "MULTINODE_SYSFS_ROOT";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_names_each_once_and_all_but_rank_are_multinode_names() {
        let mut seen = std::collections::BTreeSet::new();
        for name in CONTRACT {
            assert!(seen.insert(name), "{name} twice");
            assert!(name == RANK || name.starts_with("MULTINODE_"), "{name}");
        }
    }
}
