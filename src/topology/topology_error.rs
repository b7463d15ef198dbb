//! What can be wrong with a topology: syntax errors from the pure parsers
//! ([`ParseError`]), and errors found while resolving against the environment,
//! this machine and the network ([`TopologyError`]). Every message is one line
//! that names the input.

use crate::error::Error;
use crate::vars;

pub(crate) use crate::env_map::shorten;

/// A syntax error in a hostlist, a slot count, `SLURM_TASKS_PER_NODE` or a hostfile.
///
/// The pure parsers return it; resolution adds where the text came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("empty hostlist")]
    EmptyList,
    #[error("empty host name at character {pos} of '{expr}'")]
    EmptyElement { expr: String, pos: usize },
    #[error("unmatched '{bracket}' at character {pos} of '{expr}'")]
    Unbalanced {
        expr: String,
        bracket: char,
        pos: usize,
    },
    #[error("nested '[' at character {pos} of '{expr}'")]
    Nested { expr: String, pos: usize },
    #[error("empty item in range '[{group}]' of '{expr}'")]
    EmptyRangeItem { group: String, expr: String },
    #[error("'{item}' in '{expr}' is not a number or a range such as 1-4")]
    NotNumeric { item: String, expr: String },
    #[error("reversed range '{item}' in '{expr}'")]
    Reversed { item: String, expr: String },
    #[error("number '{item}' in '{expr}' is too large")]
    NumberTooLarge { item: String, expr: String },
    #[error("'{expr}' expands to more than {limit} hosts")]
    TooManyHosts { expr: String, limit: usize },
    #[error(
        "host name '{host}' contains {what}; host names hold only letters, digits, '.', '-' and '_'"
    )]
    BadChar { host: String, what: String },
    #[error("'{list}' separates its hosts with {sep}; separate them with ',': host1:2,host2:2")]
    BadSeparator { list: String, sep: String },
    #[error("host name '{host}' starts with '-'; host names start with a letter or a digit")]
    LeadingDash { host: String },
    #[error("host name '{host}' is longer than {limit} characters")]
    TooLong { host: String, limit: usize },
    #[error("duplicate host '{host}' at positions {first} and {second} in '{expr}'")]
    Duplicate {
        host: String,
        first: usize,
        second: usize,
        expr: String,
    },
    #[error("slot count '{value}' for '{host}' is not a positive integer")]
    BadSlots { value: String, host: String },
    #[error("slot count '{value}' for '{host}' is too large (at most {max})", max = u32::MAX)]
    SlotsTooLarge { value: String, host: String },
    #[error(
        "IPv6 address '{text}' must be written in brackets: '[{text}]', or '[{text}]:SLOTS' with a slot count"
    )]
    UnbracketedIpv6 { text: String },
    #[error("'[{text}]' is not an IPv6 address (zone ids such as %eth0 are not supported)")]
    BadIpv6 { text: String },
    #[error("'{entry}' has a slot count, but this list holds host names only")]
    SlotsNotAllowed { entry: String },
    #[error("'{item}' in '{list}' is not a task count such as 2 or 2(x3)")]
    BadTasks { item: String, list: String },
    #[error("'{list}' describes more than {limit} nodes")]
    TooManyTasks { list: String, limit: usize },
    #[error("line {line}: {error}")]
    Line { line: usize, error: Box<ParseError> },
    #[error("duplicate host '{host}' on lines {first} and {second}")]
    DuplicateLine {
        host: String,
        first: usize,
        second: usize,
    },
    #[error(
        "unknown option '{option}' for '{host}'; a hostfile line is 'host', 'host:N' or 'host slots=N [max_slots=M]'"
    )]
    UnknownOption { option: String, host: String },
    #[error("max_slots={max} is less than slots={slots} for '{host}'")]
    MaxBelowSlots { host: String, slots: u32, max: u32 },
    #[error("'{host}' has a slot count twice (':N' and slots=N, or slots= repeated)")]
    TwoSlotCounts { host: String },
    #[error("no hosts in it")]
    NoHosts,
    #[error("host '{host}' has no slot count; the form is 'host1 4 host2 4'")]
    MissingSlots { host: String },
}

/// Why the topology, this node's rank or an address could not be resolved.
///
/// Each is bad input or configuration: `multinode` prints it as one line and
/// exits with code 2.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A syntax error, with where the text came from (`--hosts`, `SLURM_JOB_NODELIST`, ...).
    #[error("{origin}: {error}")]
    Parse { origin: String, error: ParseError },
    #[error("cannot read {origin}: {error}")]
    Read {
        origin: String,
        error: std::io::Error,
    },
    #[error("--hosts and --hostfile both given; use one of them")]
    TwoFlags,
    #[error(
        "{spares} spare node(s) leave no node for the job: the hostlist from {origin} has {nodes} and the first one (the head) always runs it; keep at most {} spare(s)", nodes.saturating_sub(1)
    )]
    TooManySpares {
        spares: usize,
        nodes: usize,
        origin: String,
    },
    #[error(
        "{spare_hostlist} names {host}, which the hostlist from {origin} has too; a spare is not a node of the job: remove it from one of them",
        spare_hostlist = vars::SPARE_HOSTLIST
    )]
    SpareInHostlist { host: String, origin: String },
    #[error(
        "{hostlist_var} names {hostlist} but {noslots_var} names {noslots}; set one of them, or make them agree",
        hostlist_var = vars::HOSTLIST,
        noslots_var = vars::HOSTLIST_NOSLOTS
    )]
    HostlistsDisagree { hostlist: String, noslots: String },
    #[error(transparent)]
    BadVar(#[from] crate::env_map::BadVar),
    #[error(
        "{name}={value} but the hostlist from {origin} gives {actual}; fix or unset {name}, or fix the hostlist"
    )]
    Contradiction {
        name: &'static str,
        value: String,
        actual: String,
        origin: String,
    },
    #[error(
        "SLURM_TASKS_PER_NODE='{tasks}' describes {counts} nodes but {origin} has {nodes}; they must agree"
    )]
    TasksMismatch {
        tasks: String,
        counts: usize,
        origin: String,
        nodes: usize,
    },
    #[error(
        "this machine's host name is unusable ({reason}); set MULTINODE_HOSTLIST or pass --hosts"
    )]
    LocalHostname { reason: String },
    #[error(
        "{name}={rank} but the hostlist from {origin} has {nodes} node(s), ranks 0 to {last}; fix {name}",
        last = nodes.saturating_sub(1)
    )]
    RankOutOfRange {
        name: &'static str,
        rank: usize,
        nodes: usize,
        origin: String,
    },
    #[error("{name}={rank} but RANK={env_rank}; they must agree: unset one of them")]
    RankConflict {
        name: &'static str,
        rank: usize,
        env_rank: usize,
    },
    #[error(
        "this machine ({me}) is not in the hostlist from {origin}; set MULTINODE_NODE_RANK (or --node-rank) to this node's rank"
    )]
    NotInHostlist { me: String, origin: String },
    #[error(
        "this machine matches several hosts of the hostlist from {origin}: {matches}; set MULTINODE_NODE_RANK (or --node-rank) to this node's rank"
    )]
    SeveralMatches { origin: String, matches: String },
    #[error("bad interface list {origin}='{spec}': {reason}")]
    BadIfaceSpec {
        origin: &'static str,
        spec: String,
        reason: String,
    },
    #[error(
        "no interface matches {origin}='{spec}' (this machine has: {have}); name an interface that exists"
    )]
    NoSuchIface {
        origin: &'static str,
        spec: String,
        have: String,
    },
    #[error(
        "interfaces matching {origin}='{spec}' have no usable address (only loopback or link-local); other nodes cannot reach it: choose another interface"
    )]
    NoUsableAddress { origin: &'static str, spec: String },
    #[error(
        "this machine has no default route with a usable address, so its address is unknown; choose an interface with --iface or MULTINODE_IFNAME, or set {var}"
    )]
    NoDefaultRoute { var: &'static str },
    #[error(
        "head host '{host}' resolves only to loopback ({addrs}), which other nodes cannot reach (the /etc/hosts trap: Debian maps the host name to 127.0.1.1); set MULTINODE_NODE_IP to the head's address, or fix /etc/hosts"
    )]
    LoopbackOnly { host: String, addrs: String },
    #[error(
        "cannot resolve head host '{host}': {reason}; set MULTINODE_NODE_IP to the head's address"
    )]
    Unresolvable { host: String, reason: String },
    /// A Kubernetes job shape with a missing or contradicting piece.
    #[error(transparent)]
    Kube(#[from] KubeError),
}

impl From<TopologyError> for Error {
    fn from(e: TopologyError) -> Self {
        Error::Usage(e.to_string())
    }
}

/// A Kubernetes job shape with a piece missing or two pieces that disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    #[error(
        "JOB_COMPLETION_INDEX={index} (a Kubernetes Indexed Job) but the node count is unknown; set MULTINODE_NNODES to the Job's completions"
    )]
    NoNodeCount { index: usize },
    #[error("{name}={value} but {other}={other_value}; they must agree: unset one of them")]
    Disagree {
        name: &'static str,
        value: String,
        other: &'static str,
        other_value: String,
    },
    #[error(
        "JOB_COMPLETION_INDEX={index} but {count_var}={nnodes}, so indexes go from 0 to {last}; set {count_var} to the Job's completions",
        last = nnodes.saturating_sub(1)
    )]
    IndexOutOfRange {
        index: usize,
        count_var: &'static str,
        nnodes: usize,
    },
    #[error(
        "JOB_COMPLETION_INDEX={index} but this pod's host name '{hostname}' does not end in '-{index}' as an Indexed Job's pods do (<job>-<index>); set MULTINODE_HOSTLIST"
    )]
    NotIndexedName { index: usize, hostname: String },
    #[error(
        "JOB_COMPLETION_INDEX={index} but this pod's name '{hostname}' has no domain, so the other pods' names are unknown; give the pod template a subdomain naming a headless Service (docs/kubernetes.md)"
    )]
    NoSubdomain { index: usize, hostname: String },
    #[error(
        "PET_NNODES='{value}' is an elastic range; multinode needs a fixed node count: set PET_NNODES=N or MULTINODE_HOSTLIST"
    )]
    ElasticRange { value: String },
    #[error(
        "PET_NNODES={nnodes} (a Kubeflow PyTorchJob) but MASTER_ADDR is not set; give the job a Master replica, or set MULTINODE_HOSTLIST"
    )]
    NoMaster { nnodes: usize },
    #[error(
        "MASTER_ADDR='{addr}' is not a PyTorchJob master's name (<job>-master-0), so the workers' names are unknown; set MULTINODE_HOSTLIST"
    )]
    NotMasterName { addr: String },
    #[error(
        "WORLD_SIZE={world} but PET_NNODES={nnodes} with PET_NPROC_PER_NODE={nproc}: it must be {one} or {all}; fix or unset WORLD_SIZE",
        one = nnodes,
        all = u64::try_from(*nnodes).unwrap_or(u64::MAX).saturating_mul(u64::from(*nproc))
    )]
    WorldSize {
        world: u64,
        nnodes: usize,
        nproc: u32,
    },
    #[error("{origin}: {what} '{host}' is not a usable host name ({reason})")]
    BadName {
        origin: &'static str,
        what: &'static str,
        host: String,
        reason: String,
    },
    #[error("{name}={nnodes} nodes is more than {limit}; fix {name}")]
    TooMany {
        name: &'static str,
        nnodes: usize,
        limit: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_name_the_input() {
        let e = TopologyError::Parse {
            origin: "SLURM_JOB_NODELIST".into(),
            error: ParseError::Reversed {
                item: "9-3".into(),
                expr: "gpu[9-3]".into(),
            },
        };
        assert_eq!(
            e.to_string(),
            "SLURM_JOB_NODELIST: reversed range '9-3' in 'gpu[9-3]'"
        );
        let e = TopologyError::RankOutOfRange {
            name: "MULTINODE_NODE_RANK",
            rank: 5,
            nodes: 2,
            origin: "--hosts".into(),
        };
        assert_eq!(
            e.to_string(),
            "MULTINODE_NODE_RANK=5 but the hostlist from --hosts has 2 node(s), ranks 0 to 1; fix MULTINODE_NODE_RANK"
        );
    }
}
