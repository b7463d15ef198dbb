//! Several processes a node (`mn-exec-all --nproc-per-node`): each is a
//! command of its node's agent (exec_all's own node: a group it shows the
//! agent), started with its global `RANK` and its `LOCAL_RANK`, which the
//! agent keeps (`CommandInfo`). Here each such command's process tree is
//! labelled with them ([`label`]), the nodes are split into their ranks for
//! the table ([`Units`]), and a global rank is looked for among the nodes'
//! answers ([`find`], `multinode shell --rank`). Pure.
//!
//! A job of one command a node (`RANK` its node's rank, no `LOCAL_RANK`)
//! is labelled nowhere: its snapshot stays one per node, as it always was.

use std::collections::{BTreeMap, BTreeSet};

use super::node_snapshot::{CommandInfo, NodeSnapshot};

/// The global rank of a command that is one of several processes of the
/// node `node_rank`: started with a `LOCAL_RANK`, or with a `RANK` other
/// than its node's.
fn process_rank(cmd: &CommandInfo, node_rank: usize) -> Option<usize> {
    let rank = cmd.rank?;
    (cmd.local_rank.is_some() || rank != node_rank).then_some(rank)
}

/// Labels each process of such a command's tree (its process group and
/// what descends from it) with the command's `RANK` and `LOCAL_RANK`.
/// `snap.rank` must be the node's rank in the job.
pub(crate) fn label(snap: &mut NodeSnapshot) {
    for cmd in &snap.commands {
        let Some(rank) = process_rank(cmd, snap.rank) else {
            continue;
        };
        let mut tree: BTreeSet<i32> = BTreeSet::new();
        // Parents come before children (`procfs::select`).
        for p in snap.processes.iter_mut() {
            if p.pgid == cmd.pgid || tree.contains(&p.ppid) {
                tree.insert(p.pid);
                if p.rank.is_none() {
                    p.rank = Some(rank);
                    p.local_rank = cmd.local_rank;
                }
            }
        }
    }
}

/// What the table folds and shows: each node, or, once a node runs
/// several processes, each rank.
#[derive(Debug)]
pub(crate) struct Units<'a> {
    /// Whether the units are ranks (a node's share, `node_rank` set).
    pub by_rank: bool,
    /// In rank order: each node's snapshot, or each rank's processes.
    pub units: Vec<NodeSnapshot>,
    /// With `by_rank`: the nodes that have no labelled process (no
    /// answer, an agent older than this, nothing running), shown apart
    /// by their node's rank.
    pub apart: Vec<NodeSnapshot>,
    /// Every node's snapshot, as it came.
    pub nodes: &'a [NodeSnapshot],
}

impl Units<'_> {
    /// `snaps` ([`label`]led) as units: a node's processes split by rank,
    /// those of no rank's tree (exec_all, a shell above the ranks) with
    /// its first rank.
    pub(crate) fn of(snaps: &[NodeSnapshot]) -> Units<'_> {
        let labelled = |s: &NodeSnapshot| s.processes.iter().any(|p| p.rank.is_some());
        if !snaps.iter().any(labelled) {
            return Units {
                by_rank: false,
                units: snaps.to_vec(),
                apart: Vec::new(),
                nodes: snaps,
            };
        }
        let (mut units, mut apart) = (Vec::new(), Vec::new());
        for snap in snaps {
            let Some(first) = snap.processes.iter().filter_map(|p| p.rank).min() else {
                apart.push(snap.clone());
                continue;
            };
            let mut ranks: BTreeMap<usize, NodeSnapshot> = BTreeMap::new();
            for p in &snap.processes {
                let rank = p.rank.unwrap_or(first);
                ranks
                    .entry(rank)
                    .or_insert_with(|| NodeSnapshot {
                        rank,
                        host: snap.host.clone(),
                        taken_ms: snap.taken_ms,
                        window_ms: snap.window_ms,
                        py_spy: snap.py_spy.clone(),
                        node_rank: Some(snap.rank),
                        ..NodeSnapshot::default()
                    })
                    .processes
                    .push(p.clone());
            }
            for unit in ranks.values_mut() {
                unit.local_rank = unit
                    .processes
                    .iter()
                    .find(|p| p.rank == Some(unit.rank))
                    .and_then(|p| p.local_rank);
            }
            units.extend(ranks.into_values());
        }
        units.sort_by_key(|u| u.rank);
        Units {
            by_rank: true,
            units,
            apart,
            nodes: snaps,
        }
    }
}

/// One command that claims a global rank (started with `RANK` set to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    /// Its node's rank and host.
    pub node: usize,
    pub host: String,
    /// Its process group there.
    pub pgid: i32,
    pub local_rank: Option<usize>,
}

/// Where a global rank runs, from the nodes' answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// On node `node`, its local rank when it was started with one.
    At {
        node: usize,
        local_rank: Option<usize>,
    },
    /// Several processes claim it (a stale one, one started by hand, a
    /// forged one): which is meant is not guessed.
    Several(Vec<Claim>),
    /// No node that answered runs it; `unanswered`: the nodes that did not
    /// answer, with why.
    Nowhere { unanswered: Vec<(usize, String)> },
}

/// Every command of the nodes that claims `rank`, in node order.
fn claims_of(snaps: &[NodeSnapshot], rank: usize) -> Vec<Claim> {
    snaps
        .iter()
        .flat_map(|snap| {
            snap.commands
                .iter()
                .filter(move |c| c.rank == Some(rank))
                .map(|c| Claim {
                    node: snap.rank,
                    host: snap.host.clone(),
                    pgid: c.pgid,
                    local_rank: c.local_rank,
                })
        })
        .collect()
}

/// The node whose agent runs the one command started with `RANK=rank`;
/// [`Found::Several`] when more than one claims it.
pub(crate) fn find(snaps: &[NodeSnapshot], rank: usize) -> Found {
    let mut claims = claims_of(snaps, rank);
    match claims.len() {
        0 => Found::Nowhere {
            unanswered: snaps
                .iter()
                .filter_map(|s| Some((s.rank, s.error.clone()?)))
                .collect(),
        },
        1 => {
            let one = claims.remove(0);
            Found::At {
                node: one.node,
                local_rank: one.local_rank,
            }
        }
        _ => Found::Several(claims),
    }
}

/// Each rank that more than one command claims, with its claims, in rank
/// order: `top` and `ps` show them as such.
pub(crate) fn claimed_twice(snaps: &[NodeSnapshot]) -> Vec<(usize, Vec<Claim>)> {
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for c in snaps.iter().flat_map(|s| &s.commands) {
        if let Some(rank) = c.rank {
            *counts.entry(rank).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(rank, _)| (rank, claims_of(snaps, rank)))
        .collect()
}

/// `rank 3 is claimed by 2 processes: node 0 (n0, group 900), node 1 (n1, group 20)`.
pub(crate) fn claimed_line(rank: usize, claims: &[Claim]) -> String {
    let each: Vec<String> = claims
        .iter()
        .map(|c| {
            format!(
                "node {} ({}, group {})",
                c.node,
                crate::table::printable(&c.host),
                c.pgid
            )
        })
        .collect();
    format!(
        "rank {rank} is claimed by {} processes: {}",
        claims.len(),
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Proc;

    fn proc(pid: i32, ppid: i32, pgid: i32, comm: &str) -> Proc {
        Proc {
            pid,
            ppid,
            pgid,
            state: "S".into(),
            comm: comm.into(),
            ..Proc::default()
        }
    }

    fn cmd(pgid: i32, rank: usize, local_rank: Option<usize>) -> CommandInfo {
        CommandInfo {
            pgid,
            rank: Some(rank),
            local_rank,
            ..CommandInfo::default()
        }
    }

    /// Node `node` of a job of two processes a node: exec_all's group (on
    /// node 0), then each process's group (`supervise`, its script, a child).
    fn node(node: usize, two: bool) -> NodeSnapshot {
        let base = 100 * (node as i32 + 1);
        let mut processes = vec![proc(base, 1, base, "mn-exec-all")];
        let mut commands = Vec::new();
        for local in 0..if two { 2 } else { 1 } {
            let leader = base + 10 * (local as i32 + 1);
            processes.push(proc(leader, base, leader, "multinode"));
            processes.push(proc(leader + 1, leader, leader, "sh"));
            // A child that made its own group stays with its rank.
            processes.push(proc(leader + 2, leader + 1, leader + 2, "python3"));
            commands.push(if two {
                cmd(leader, 2 * node + local, Some(local))
            } else {
                cmd(leader, node, None)
            });
        }
        NodeSnapshot {
            rank: node,
            host: format!("n{node}"),
            processes,
            commands,
            ..NodeSnapshot::default()
        }
    }

    #[test]
    fn each_process_tree_is_labelled_with_its_rank_one_command_a_node_is_not() {
        let mut two = node(1, true);
        label(&mut two);
        let got: Vec<(i32, Option<usize>, Option<usize>)> = two
            .processes
            .iter()
            .map(|p| (p.pid, p.rank, p.local_rank))
            .collect();
        assert_eq!(
            got,
            [
                (200, None, None),
                (210, Some(2), Some(0)),
                (211, Some(2), Some(0)),
                (212, Some(2), Some(0)),
                (220, Some(3), Some(1)),
                (221, Some(3), Some(1)),
                (222, Some(3), Some(1)),
            ]
        );
        let mut one = node(1, false);
        label(&mut one);
        assert!(one.processes.iter().all(|p| p.rank.is_none()));
        // An agent older than the records: nothing to label.
        let mut old = node(1, true);
        old.commands.clear();
        label(&mut old);
        assert!(old.processes.iter().all(|p| p.rank.is_none()));
    }

    #[test]
    fn nodes_split_into_ranks_and_a_node_without_any_stands_apart() {
        let mut snaps = vec![node(0, true), node(1, true)];
        snaps.iter_mut().for_each(label);
        snaps.push(NodeSnapshot {
            rank: 2,
            host: "n2".into(),
            error: Some("connection refused".into()),
            ..NodeSnapshot::default()
        });
        let units = Units::of(&snaps);
        assert!(units.by_rank);
        type Unit = (usize, Option<usize>, Option<usize>, Vec<i32>);
        let got: Vec<Unit> = units
            .units
            .iter()
            .map(|u| {
                (
                    u.rank,
                    u.node_rank,
                    u.local_rank,
                    u.processes.iter().map(|p| p.pid).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, Some(0), Some(0), vec![100, 110, 111, 112]),
                (1, Some(0), Some(1), vec![120, 121, 122]),
                (2, Some(1), Some(0), vec![200, 210, 211, 212]),
                (3, Some(1), Some(1), vec![220, 221, 222]),
            ]
        );
        assert_eq!(units.apart.len(), 1);
        assert_eq!(units.apart[0].rank, 2);
        // One command a node: the nodes as they are.
        let snaps = vec![node(0, false), node(1, false)];
        let units = Units::of(&snaps);
        assert!(!units.by_rank);
        assert_eq!(units.units, snaps);
    }

    #[test]
    fn a_rank_is_found_on_its_node_or_said_to_be_nowhere() {
        let mut snaps = vec![node(0, true), node(1, true)];
        assert_eq!(
            find(&snaps, 3),
            Found::At {
                node: 1,
                local_rank: Some(1)
            }
        );
        assert!(claimed_twice(&snaps).is_empty());
        // A command on node 0 started with RANK=3 too (by hand, stale,
        // forged): neither is guessed.
        snaps[0].commands.push(cmd(900, 3, None));
        let Found::Several(claims) = find(&snaps, 3) else {
            panic!("two claims: {:?}", find(&snaps, 3));
        };
        let twice = claimed_twice(&snaps);
        assert_eq!(twice, vec![(3, claims.clone())]);
        assert_eq!(
            claimed_line(3, &claims),
            "rank 3 is claimed by 2 processes: node 0 (n0, group 900), node 1 (n1, group 220)"
        );
        snaps[0].commands.pop();
        assert_eq!(
            find(&snaps, 0),
            Found::At {
                node: 0,
                local_rank: Some(0)
            }
        );
        snaps.push(NodeSnapshot {
            rank: 2,
            error: Some("connection refused".into()),
            ..NodeSnapshot::default()
        });
        assert_eq!(
            find(&snaps, 7),
            Found::Nowhere {
                unanswered: vec![(2, "connection refused".into())]
            }
        );
        // One command a node: RANK is the node's.
        let snaps = vec![node(0, false), node(1, false)];
        assert_eq!(
            find(&snaps, 1),
            Found::At {
                node: 1,
                local_rank: None
            }
        );
    }
}
