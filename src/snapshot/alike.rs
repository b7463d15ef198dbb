//! Nodes that do the same thing, folded into one entry, the odd ones out
//! first (as `clush -b` and `dshbak -c` fold identical output). Pure.
//!
//! What a node "does" is its signature: for every leaf of its process trees
//! (the workers; their parents only wait for them), the process name, its
//! state (running when it is in `R` or used half a CPU or more over the
//! window), and where it is: its top three Python frames when py-spy gave
//! them, else its wait channel or syscall.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::node_snapshot::{NodeSnapshot, Proc};
use super::samples::{COLLECTIVES, GPU_WAITS};
use crate::topology::nodeset::fold_ranks;

/// How many Python frames, from the innermost, make a signature.
pub(crate) const TOP_FRAMES: usize = 3;

const NO_SNAPSHOT: &str = "no snapshot: ";

/// One folded entry: the ranks that do the same thing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alike {
    /// `0-6,8-15`.
    pub ranks: String,
    pub rank_list: Vec<usize>,
    /// What every node of the group does, one phrase per kind of worker.
    pub summary: String,
    /// Not what most nodes do (every group but the last, when there are several).
    pub odd: bool,
}

/// The state word of a process.
pub(crate) fn state_word(p: &Proc) -> &'static str {
    if p.state == "R" || p.cpu_pct >= 50.0 {
        return "running";
    }
    match p.state.as_str() {
        "S" | "I" => "sleeping",
        "D" => "D state (uninterruptible)",
        "Z" => "zombie",
        "T" | "t" => "stopped",
        _ => "in an odd state",
    }
}

/// Where a process is: its top Python frames, else its wait channel.
pub(crate) fn place(p: &Proc) -> Option<String> {
    match &p.stack {
        Some(frames) if !frames.is_empty() => Some(
            frames
                .iter()
                .take(TOP_FRAMES)
                .map(|f| f.function.as_str())
                .collect::<Vec<_>>()
                .join(" <- "),
        ),
        _ => p.wchan.clone(),
    }
}

/// One leaf's phrase: `python3 sleeping in all_reduce <- wrapper <- train_step`.
pub(crate) fn phrase(p: &Proc) -> String {
    match place(p) {
        Some(place) => format!("{} {} in {place}", p.comm, state_word(p)),
        None => format!("{} {}", p.comm, state_word(p)),
    }
}

/// The processes no other process of the snapshot is the parent of.
pub(crate) fn leaves(snap: &NodeSnapshot) -> Vec<&Proc> {
    let parents: BTreeSet<i32> = snap.processes.iter().map(|p| p.ppid).collect();
    snap.processes
        .iter()
        .filter(|p| !parents.contains(&p.pid))
        .collect()
}

/// A node's signature: its leaves' phrases, sorted, each with its count.
pub(crate) fn signature(snap: &NodeSnapshot) -> String {
    if let Some(e) = &snap.error {
        return format!("{NO_SNAPSHOT}{e}");
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for leaf in leaves(snap) {
        *counts.entry(phrase(leaf)).or_default() += 1;
    }
    if counts.is_empty() {
        return "no process of the job running".to_string();
    }
    counts
        .into_iter()
        .map(|(phrase, n)| {
            if n > 1 {
                format!("{n} x {phrase}")
            } else {
                phrase
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// How surely a group waits for the others, from its summary: between
/// groups of one size, the least sure comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Waiting {
    /// Somewhere of its own: the suspect.
    No,
    /// Waits for its GPU: for a collective, or for its own kernels.
    ForItsGpu,
    /// In a named collective.
    ForTheOthers,
}

fn waiting(summary: &str) -> Waiting {
    let s = summary.to_ascii_lowercase();
    if COLLECTIVES.iter().any(|c| s.contains(c)) {
        Waiting::ForTheOthers
    } else if GPU_WAITS.iter().any(|c| s.contains(c)) {
        Waiting::ForItsGpu
    } else {
        Waiting::No
    }
}

/// Folds the nodes by signature: the smallest groups first (the odd ones
/// out); between groups of one size, those waiting for nothing first, then
/// those waiting for their GPU, then those in a named collective
/// ([`Waiting`]); then by first rank. The last group is what most nodes do.
pub(crate) fn fold(snaps: &[NodeSnapshot]) -> Vec<Alike> {
    let mut by_sig: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for s in snaps {
        by_sig.entry(signature(s)).or_default().push(s.rank);
    }
    let mut groups: Vec<Alike> = by_sig
        .into_iter()
        .map(|(summary, mut ranks)| {
            ranks.sort_unstable();
            Alike {
                ranks: fold_ranks(&ranks),
                rank_list: ranks,
                summary,
                odd: false,
            }
        })
        .collect();
    groups.sort_by_key(|g| {
        (
            g.rank_list.len(),
            !g.summary.starts_with(NO_SNAPSHOT),
            waiting(&g.summary),
            g.rank_list[0],
        )
    });
    let n = groups.len();
    for g in groups.iter_mut().take(n.saturating_sub(1)) {
        g.odd = true;
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::pystack::Frame;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|n| Frame {
                function: n.to_string(),
                file: "train.py".into(),
                line: 1,
            })
            .collect()
    }

    /// A node: a shell (pid 10) with one Python worker under it.
    pub(crate) fn node(
        rank: usize,
        state: &str,
        cpu: f64,
        stack: Option<&[&str]>,
        wchan: Option<&str>,
    ) -> NodeSnapshot {
        NodeSnapshot {
            rank,
            host: format!("n{rank:02}"),
            processes: vec![
                Proc {
                    pid: 10,
                    ppid: 1,
                    pgid: 10,
                    state: "S".into(),
                    comm: "sh".into(),
                    wchan: Some("do_wait".into()),
                    ..Proc::default()
                },
                Proc {
                    pid: 11,
                    ppid: 10,
                    pgid: 10,
                    state: state.into(),
                    cpu_pct: cpu,
                    comm: "python3".into(),
                    wchan: wchan.map(String::from),
                    stack: stack.map(frames),
                    ..Proc::default()
                },
            ],
            ..NodeSnapshot::default()
        }
    }

    #[test]
    fn the_odd_rank_comes_first_and_the_rest_fold() {
        let mut snaps: Vec<NodeSnapshot> = (0..16)
            .map(|r| {
                node(
                    r,
                    "S",
                    0.0,
                    Some(&["all_reduce", "wrapper", "train_step", "<module>"]),
                    None,
                )
            })
            .collect();
        snaps[7] = node(7, "D", 0.0, None, Some("nfs_wait_bit"));
        let groups = fold(&snaps);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].ranks, "7");
        assert!(groups[0].odd);
        assert_eq!(
            groups[0].summary,
            "python3 D state (uninterruptible) in nfs_wait_bit"
        );
        assert_eq!(groups[1].ranks, "0-6,8-15");
        assert!(!groups[1].odd);
        assert_eq!(
            groups[1].summary,
            "python3 sleeping in all_reduce <- wrapper <- train_step"
        );
    }

    #[test]
    fn between_equals_the_one_outside_a_collective_is_odd() {
        let snaps = vec![
            node(0, "S", 0.0, Some(&["all_reduce", "train_step"]), None),
            node(1, "S", 0.0, Some(&["<module>"]), Some("hrtimer_nanosleep")),
        ];
        let groups = fold(&snaps);
        assert_eq!(groups[0].ranks, "1");
        assert!(groups[0].odd);
        assert_eq!(groups[1].ranks, "0");
        assert!(!groups[1].odd);
    }

    #[test]
    fn waiting_for_the_gpu_counts_as_waiting_for_the_others() {
        let snaps = vec![
            node(
                0,
                "R",
                100.0,
                Some(&["synchronize", "train_step", "main"]),
                None,
            ),
            node(1, "S", 0.0, Some(&["straggle", "train_step", "main"]), None),
        ];
        let groups = fold(&snaps);
        assert_eq!(groups[0].ranks, "1");
        assert!(groups[0].odd);
    }

    /// A Python worker with the stack py-spy gave (innermost first), each
    /// frame `function (file:line)` as the real torch 2.11 run on an H200
    /// showed (bench/gpu/results/h200-ps-hang-2026-12-03.log).
    fn real(rank: usize, state: &str, cpu: f64, stack: &[(&str, &str, u32)]) -> NodeSnapshot {
        let mut snap = node(rank, state, cpu, None, Some("futex_do_wait"));
        snap.processes[1].stack = Some(
            stack
                .iter()
                .map(|(function, file, line)| Frame {
                    function: function.to_string(),
                    file: file.to_string(),
                    line: *line,
                })
                .collect(),
        );
        snap
    }

    const SPINNING: &[(&str, &str, u32)] = &[
        ("synchronize", "torch/cuda/__init__.py", 1162),
        ("spin_forever", "ps_hang.py", 20),
        ("main", "ps_hang.py", 31),
        ("<module>", "ps_hang.py", 38),
    ];
    const IN_ALL_REDUCE: &[(&str, &str, u32)] = &[
        ("all_reduce", "torch/distributed/distributed_c10d.py", 3075),
        (
            "_exception_logger.<locals>.wrapper",
            "torch/distributed/c10d_logger.py",
            83,
        ),
        ("main", "ps_hang.py", 34),
        ("<module>", "ps_hang.py", 38),
    ];

    #[test]
    fn of_two_the_rank_in_synchronize_alone_is_the_suspect_not_the_one_in_all_reduce() {
        // Rank 1 loops on its busy GPU; rank 0 waits for it in gloo's all_reduce.
        let snaps = vec![
            real(0, "S", 0.0, IN_ALL_REDUCE),
            real(1, "R", 93.0, SPINNING),
        ];
        let groups = fold(&snaps);
        let by_ranks: Vec<(&str, &str, bool)> = groups
            .iter()
            .map(|g| (g.ranks.as_str(), g.summary.as_str(), g.odd))
            .collect();
        assert_eq!(
            by_ranks,
            vec![
                (
                    "1",
                    "python3 running in synchronize <- spin_forever <- main",
                    true
                ),
                (
                    "0",
                    "python3 sleeping in all_reduce <- _exception_logger.<locals>.wrapper <- main",
                    false
                ),
            ]
        );
    }

    #[test]
    fn past_two_ranks_the_majority_decides_whatever_waits() {
        // One rank in all_reduce against three in synchronize: the one is odd.
        let mut snaps: Vec<NodeSnapshot> = (0..4).map(|r| real(r, "R", 93.0, SPINNING)).collect();
        snaps[2] = real(2, "S", 0.0, IN_ALL_REDUCE);
        let groups = fold(&snaps);
        assert_eq!(groups[0].ranks, "2");
        assert!(groups[0].odd);
        assert_eq!(groups[1].ranks, "0-1,3");
        assert!(!groups[1].odd);
        // And the other way round.
        let mut snaps: Vec<NodeSnapshot> =
            (0..4).map(|r| real(r, "S", 0.0, IN_ALL_REDUCE)).collect();
        snaps[3] = real(3, "R", 93.0, SPINNING);
        let groups = fold(&snaps);
        assert_eq!(groups[0].ranks, "3");
        assert_eq!(groups[1].ranks, "0-2");
    }

    #[test]
    fn busy_spinning_counts_as_running_and_errors_fold_too() {
        let mut snaps = vec![
            node(0, "S", 97.0, None, Some("futex_wait")),
            node(1, "R", 100.0, None, None),
            node(2, "R", 99.0, None, None),
        ];
        snaps.push(NodeSnapshot {
            rank: 3,
            error: Some("connection refused".into()),
            ..NodeSnapshot::default()
        });
        snaps.push(NodeSnapshot {
            rank: 4,
            ..NodeSnapshot::default()
        });
        let groups = fold(&snaps);
        let by_ranks: Vec<(&str, &str)> = groups
            .iter()
            .map(|g| (g.ranks.as_str(), g.summary.as_str()))
            .collect();
        assert_eq!(
            by_ranks,
            vec![
                ("3", "no snapshot: connection refused"),
                ("0", "python3 running in futex_wait"),
                ("4", "no process of the job running"),
                ("1-2", "python3 running"),
            ]
        );
        assert_eq!(groups.iter().filter(|g| g.odd).count(), 3);
    }

    #[test]
    fn two_workers_a_node_count() {
        let mut a = node(0, "S", 0.0, Some(&["all_reduce"]), None);
        let mut second = a.processes[1].clone();
        second.pid = 12;
        a.processes.push(second);
        assert_eq!(signature(&a), "2 x python3 sleeping in all_reduce");
    }
}
