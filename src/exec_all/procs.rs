//! Several processes a node (`--nproc-per-node`, docs/exec-all.md): how
//! many each node starts, their global ranks (dense, node by node in
//! hostlist order), torchrun's worker contract for each, and the command
//! each runs (bound to its GPU's NUMA node by `multinode bind` before the
//! script, `docs/binding.md`). Pure: the GPUs of `gpu` are counted on the
//! nodes by the launch (`one_launch.rs`), which hands the counts in.

use std::fmt;
use std::str::FromStr;

use super::job_store::{StoreLink, StoreMode};
use crate::binding::Mode;
use crate::binding::launcher_ranks::MAX_LOCAL_PROCESSES;

/// What `ROLE_NAME` is, as torchrun's default role.
const ROLE_NAME: &str = "default";

/// How many processes each node starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PerNode {
    /// N on every node.
    Count(usize),
    /// The node's visible GPUs (`CUDA_VISIBLE_DEVICES`, else the GPUs found).
    Gpu,
    /// The node's slots in the hostlist.
    Slots,
    /// Counted already, a count for each node of the job (what a head
    /// passes its relays: `--proc-counts`).
    Counts(Vec<usize>),
}

impl FromStr for PerNode {
    type Err = String;

    fn from_str(text: &str) -> Result<PerNode, String> {
        match text.trim() {
            "gpu" => Ok(PerNode::Gpu),
            "slots" => Ok(PerNode::Slots),
            list if list.contains([',', 'x']) => parse_counts(list).map(PerNode::Counts),
            n => match n.parse::<usize>() {
                Ok(n) if n > MAX_LOCAL_PROCESSES => Err(past_the_cap(text)),
                Ok(n) if n > 0 => Ok(PerNode::Count(n)),
                _ => Err(format!(
                    "'{text}' is not a number of processes: give N (1, 2, ...), gpu or slots"
                )),
            },
        }
    }
}

impl fmt::Display for PerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerNode::Count(n) => write!(f, "{n}"),
            PerNode::Gpu => f.write_str("gpu"),
            PerNode::Slots => f.write_str("slots"),
            PerNode::Counts(counts) => f.write_str(&fold_counts(counts)),
        }
    }
}

/// A run's processes: the options of `--nproc-per-node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Procs {
    pub per_node: PerNode,
    /// `--bind` (`MULTINODE_BIND`), resolved on the head.
    pub bind: Mode,
    /// `--report-bindings`.
    pub report_bindings: bool,
    /// `--master-port`: rank 0's store; an attempt may get another when
    /// this one is still taken on the head (`one_launch.rs`).
    pub master_port: u16,
    /// This exec_all sets the run's variables ([`run_vars`]): the head's;
    /// a relay has them from its head, in its environment.
    pub head: bool,
    /// `--store`: whether exec_all may host the job's store (`job_store.rs`).
    pub store: StoreMode,
    /// The store exec_all hosts at `MASTER_PORT` for the whole run, when
    /// it does: the workers are its clients.
    pub hosted: Option<StoreLink>,
}

/// Where one process stands: its global rank, its node, its place there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub rank: usize,
    pub node: usize,
    pub local_rank: usize,
    pub local_size: usize,
}

/// The processes of a job's nodes: `counts[i]` on node `i`, ranked densely
/// node by node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    counts: Vec<usize>,
    /// The global rank of each node's first process.
    first: Vec<usize>,
}

impl Layout {
    /// `counts[i]` processes on node `i` of the job; a node with none
    /// (not selected: `--nodes`, `--exclude`) takes no rank.
    pub fn new(counts: &[usize]) -> Layout {
        let first = counts
            .iter()
            .scan(0, |next, &c| {
                let first = *next;
                *next += c;
                Some(first)
            })
            .collect();
        Layout {
            counts: counts.to_vec(),
            first,
        }
    }

    /// The counts of a run over the `selected` nodes: none on the others.
    pub fn selected(counts: &[usize], selected: &[usize]) -> Vec<usize> {
        let mut only = vec![0; counts.len()];
        for &node in selected {
            only[node] = counts[node];
        }
        only
    }

    /// Every process.
    pub fn total(&self) -> usize {
        self.counts.iter().sum()
    }

    /// The nodes that start a process.
    pub fn nodes(&self) -> usize {
        self.counts.iter().filter(|&&c| c > 0).count()
    }

    /// The processes of node `node`, in local rank order.
    pub fn of_node(&self, node: usize) -> impl Iterator<Item = Place> + '_ {
        let (first, size) = (self.first[node], self.counts[node]);
        (0..size).map(move |local_rank| Place {
            rank: first + local_rank,
            node,
            local_rank,
            local_size: size,
        })
    }

    /// A node's rank among those that start processes (torchrun's
    /// `GROUP_RANK`): the node ranks of a job that runs on every node.
    fn group_rank(&self, node: usize) -> usize {
        self.counts[..node].iter().filter(|&&c| c > 0).count()
    }
}

/// `4x3,8,2x2`: `counts` folded (a count repeated on consecutive nodes
/// written once), the form a head passes its relays.
pub(crate) fn fold_counts(counts: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let run = counts[i..].iter().take_while(|&&c| c == counts[i]).count();
        parts.push(match run {
            1 => counts[i].to_string(),
            _ => format!("{}x{run}", counts[i]),
        });
        i += run;
    }
    parts.join(",")
}

/// [`fold_counts`] read back.
pub(crate) fn parse_counts(text: &str) -> Result<Vec<usize>, String> {
    let mut counts = Vec::new();
    for part in text.split(',') {
        let (count, run) = part.split_once('x').unwrap_or((part, "1"));
        let bad = || {
            format!(
                "'{text}' is not a list of process counts: give N, gpu, slots or N,N,... (4x3,8)"
            )
        };
        let count: usize = count.parse().ok().filter(|&c| c > 0).ok_or_else(bad)?;
        if count > MAX_LOCAL_PROCESSES {
            return Err(past_the_cap(text));
        }
        let run: usize = run.parse().map_err(|_| bad())?;
        if counts
            .len()
            .checked_add(run)
            .is_none_or(|n| n as u64 > crate::env::hostlists::WIRE_NAMES)
        {
            return Err(bad());
        }
        counts.extend(std::iter::repeat_n(count, run));
    }
    Ok(counts)
}

/// Why a count past [`MAX_LOCAL_PROCESSES`] is refused.
fn past_the_cap(text: &str) -> String {
    format!("'{text}' is past the {MAX_LOCAL_PROCESSES} processes a node may have; give fewer")
}

/// `counts` (each node's, as `slots` or `gpu` found them) checked against
/// [`MAX_LOCAL_PROCESSES`] before anything is made for them: one line naming
/// the first node past it.
pub(crate) fn check_counts(counts: &[usize], per_node: &PerNode) -> Result<(), String> {
    match counts.iter().position(|&c| c > MAX_LOCAL_PROCESSES) {
        None => Ok(()),
        Some(node) => Err(format!(
            "--nproc-per-node {per_node}: node {node} would start {} processes, past the {MAX_LOCAL_PROCESSES} a node may have; give a count (--nproc-per-node N) or fewer slots",
            counts[node]
        )),
    }
}

/// The variables every process of the run gets alike (torchrun's that do
/// not depend on the process): the world, the store (exec_all's, or else
/// rank 0's), the restart count. `head_ip` is the head's address (`MULTINODE_NODE_IP`).
pub(crate) fn run_vars(
    layout: &Layout,
    procs: &Procs,
    head_ip: &str,
    restart: (u32, u32),
    run_id: &str,
) -> Vec<(String, String)> {
    let world = layout.total().to_string();
    [
        ("WORLD_SIZE", world.clone()),
        ("ROLE_WORLD_SIZE", world),
        ("GROUP_WORLD_SIZE", layout.nodes().to_string()),
        ("ROLE_NAME", ROLE_NAME.to_string()),
        ("MASTER_ADDR", head_ip.to_string()),
        ("MASTER_PORT", procs.master_port.to_string()),
        ("TORCHELASTIC_RESTART_COUNT", restart.0.to_string()),
        ("TORCHELASTIC_MAX_RESTARTS", restart.1.to_string()),
        ("TORCHELASTIC_RUN_ID", run_id.to_string()),
        // exec_all's store, of which every process is a client; else
        // rank 0's process hosts one.
        (
            "TORCHELASTIC_USE_AGENT_STORE",
            match procs.hosted {
                Some(_) => "True",
                None => "False",
            }
            .to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Every name [`run_vars`] sets.
pub(crate) const RUN_VARS: [&str; 10] = [
    "WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
];

/// One process's own variables: `RANK` (global, in place of the node's),
/// `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `ROLE_RANK`.
pub(crate) fn process_vars(layout: &Layout, place: Place) -> Vec<(String, String)> {
    [
        ("RANK", place.rank),
        ("LOCAL_RANK", place.local_rank),
        ("LOCAL_WORLD_SIZE", place.local_size),
        ("GROUP_RANK", layout.group_rank(place.node)),
        ("ROLE_RANK", place.rank),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// What a process runs: `OMP_NUM_THREADS=1` when its node starts several
/// and it is unset there (torchrun's rule), then, unless `--bind none`
/// without `--report-bindings`, `multinode bind` (this node's binary:
/// `MULTINODE_BIN`), which binds and execs `shell_command`, the script's
/// `exec sh ...` line.
pub(crate) fn command(procs: &Procs, local_size: usize, shell_command: &[u8]) -> Vec<u8> {
    let mut cmd = Vec::new();
    if local_size > 1 {
        cmd.extend_from_slice(b"[ -n \"${OMP_NUM_THREADS+x}\" ] || export OMP_NUM_THREADS=1\n");
    }
    let rest = shell_command
        .strip_prefix(b"exec ")
        .unwrap_or(shell_command);
    if procs.bind == Mode::None && !procs.report_bindings {
        cmd.extend_from_slice(b"exec ");
    } else {
        cmd.extend_from_slice(b"exec \"${MULTINODE_BIN:-multinode}\" bind --bind ");
        cmd.extend_from_slice(procs.bind.as_str().as_bytes());
        if procs.report_bindings {
            cmd.extend_from_slice(b" --report-bindings");
        }
        cmd.extend_from_slice(b" -- ");
    }
    cmd.extend_from_slice(rest);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn procs(bind: Mode, report_bindings: bool) -> Procs {
        Procs {
            per_node: PerNode::Count(2),
            bind,
            report_bindings,
            master_port: crate::defaults::MASTER_PORT,
            head: true,
            store: StoreMode::Auto,
            hosted: None,
        }
    }

    #[test]
    fn per_node_reads_a_number_gpu_or_slots_and_nothing_else() {
        assert_eq!("4".parse(), Ok(PerNode::Count(4)));
        assert_eq!(" gpu".parse(), Ok(PerNode::Gpu));
        assert_eq!("slots".parse(), Ok(PerNode::Slots));
        assert_eq!("2x2,4".parse(), Ok(PerNode::Counts(vec![2, 2, 4])));
        for bad in ["0", "-1", "gpus", "", "2.5"] {
            let e = bad.parse::<PerNode>().unwrap_err();
            assert!(e.contains("give N (1, 2, ...), gpu or slots"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_count_past_the_cap_is_one_line_before_anything_is_made() {
        for huge in [
            "18446744073709551615",
            "1000000000",
            "4097",
            "1,1x18446744073709551615",
            "4097x2",
        ] {
            let e = huge.parse::<PerNode>().unwrap_err();
            assert!(
                e.contains("past the 4096 processes a node may have")
                    || e.contains("not a list of process counts"),
                "{huge}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!("4096".parse(), Ok(PerNode::Count(4096)));
        // A slot count of 100000 (`--nproc-per-node slots`).
        let e = check_counts(&[2, 100_000], &PerNode::Slots).unwrap_err();
        assert_eq!(
            e,
            "--nproc-per-node slots: node 1 would start 100000 processes, past the 4096 a node may have; give a count (--nproc-per-node N) or fewer slots"
        );
        assert_eq!(check_counts(&[4096, 1], &PerNode::Slots), Ok(()));
    }

    #[test]
    fn ranks_are_dense_node_by_node_and_nodes_may_differ() {
        let layout = Layout::new(&[2, 4, 1]);
        assert_eq!(layout.total(), 7);
        let places: Vec<(usize, usize, usize, usize)> = (0..3)
            .flat_map(|n| layout.of_node(n))
            .map(|p| (p.rank, p.node, p.local_rank, p.local_size))
            .collect();
        assert_eq!(
            places,
            [
                (0, 0, 0, 2),
                (1, 0, 1, 2),
                (2, 1, 0, 4),
                (3, 1, 1, 4),
                (4, 1, 2, 4),
                (5, 1, 3, 4),
                (6, 2, 0, 1)
            ]
        );
    }

    #[test]
    fn a_node_left_out_takes_no_rank() {
        let layout = Layout::new(&Layout::selected(&[2, 2, 2], &[0, 2]));
        assert_eq!(layout.total(), 4);
        assert_eq!(layout.nodes(), 2);
        let third: Vec<usize> = layout.of_node(2).map(|p| p.rank).collect();
        assert_eq!(third, [2, 3]);
        assert_eq!(layout.of_node(1).count(), 0);
        let vars = process_vars(&layout, layout.of_node(2).next().unwrap());
        assert!(
            vars.contains(&("GROUP_RANK".into(), "1".into())),
            "{vars:?}"
        );
    }

    #[test]
    fn counts_fold_and_read_back() {
        let counts = [4, 4, 4, 8, 2, 2];
        assert_eq!(fold_counts(&counts), "4x3,8,2x2");
        assert_eq!(parse_counts("4x3,8,2x2").unwrap(), counts);
        assert_eq!(parse_counts("1").unwrap(), [1]);
        for bad in ["", "4x", "x3", "a", "4x3,,8", "1x99999999999", "0x2"] {
            assert!(parse_counts(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_worker_contract_is_torchruns() {
        let layout = Layout::new(&[2, 2]);
        let mut vars = run_vars(&layout, &procs(Mode::Auto, false), "10.0.0.1", (1, 3), "r");
        vars.extend(process_vars(&layout, layout.of_node(1).nth(1).unwrap()));
        let get = |name: &str| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        for (name, value) in [
            ("RANK", "3"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("GROUP_RANK", "1"),
            ("GROUP_WORLD_SIZE", "2"),
            ("ROLE_RANK", "3"),
            ("ROLE_WORLD_SIZE", "4"),
            ("ROLE_NAME", "default"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RESTART_COUNT", "1"),
            ("TORCHELASTIC_MAX_RESTARTS", "3"),
            ("TORCHELASTIC_RUN_ID", "r"),
            ("TORCHELASTIC_USE_AGENT_STORE", "False"),
        ] {
            assert_eq!(get(name), Some(value), "{name}");
        }
        let names: Vec<&str> = run_vars(&layout, &procs(Mode::Auto, false), "h", (0, 0), "r")
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|k| RUN_VARS.into_iter().find(|n| *n == k).unwrap())
            .collect();
        assert_eq!(names, RUN_VARS);
        // exec_all's store: every process is its client.
        let hosted = Procs {
            hosted: Some(StoreLink::new()),
            ..procs(Mode::Auto, false)
        };
        let vars = run_vars(&layout, &hosted, "10.0.0.1", (1, 3), "r");
        assert!(vars.contains(&("TORCHELASTIC_USE_AGENT_STORE".into(), "True".into())));
        assert!(vars.contains(&("MASTER_PORT".into(), "29500".into())));
    }

    #[test]
    fn the_command_binds_then_runs_the_script_and_sets_omp_for_several() {
        let script = b"exec sh -c 'python3 train.py' sh";
        let bound = String::from_utf8(command(&procs(Mode::Numa, true), 2, script)).unwrap();
        assert_eq!(
            bound,
            "[ -n \"${OMP_NUM_THREADS+x}\" ] || export OMP_NUM_THREADS=1\n\
             exec \"${MULTINODE_BIN:-multinode}\" bind --bind numa --report-bindings -- sh -c 'python3 train.py' sh"
        );
        let one = String::from_utf8(command(&procs(Mode::Auto, false), 1, script)).unwrap();
        assert_eq!(
            one,
            "exec \"${MULTINODE_BIN:-multinode}\" bind --bind auto -- sh -c 'python3 train.py' sh"
        );
        let unbound = command(&procs(Mode::None, false), 1, script);
        assert_eq!(unbound, script);
    }
}
