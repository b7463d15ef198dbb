//! The snapshots of a refresh turned into one row a rank (pure).
//!
//! A node's commands that were started with `RANK` (every command exec_all
//! starts, one a process with `--nproc-per-node`) are a row each, keyed by
//! that rank, with the processes of their trees. A node without one (an
//! agent older than `top`, exec_all's own node shown to its agent) is one
//! row, keyed by the node's rank, with all its processes.
//!
//! A row's main process is the one `top` describes (its state, its
//! samples): of the rank's processes that are not `multinode`'s own
//! (`supervise`, exec_all), the busiest over the window; between equals a
//! Python process, then the deepest (its leaf). The rank's state is that
//! process's, but `D` when any of its processes was in `D` at the first
//! look or in half of the looks over the window.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::snapshot::{CommandInfo, GpuDevice, NodeSnapshot, Proc, Samples};

/// One rank as `top` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Row {
    pub rank: usize,
    pub node_rank: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<usize>,
    pub host: String,
    /// Why the node gave no snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its node's processes past a snapshot's bound, not shown.
    #[serde(skip_serializing_if = "is_zero")]
    pub processes_left_out: usize,
    /// The main process: pid, name, state (`R`, `S`, `D`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    pub comm: String,
    pub state: String,
    /// Over all the rank's processes.
    pub cpu_pct: f64,
    pub rss_kib: u64,
    /// Where the main process is: its top Python frames or its wait channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
    /// The GPUs the rank's processes hold.
    pub gpus: Vec<GpuDevice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_age_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_age_s: Option<f64>,
    /// Since the rank's command started (its oldest command's spawn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_s: Option<f64>,
    /// From its start to its first output line, and to its first
    /// heartbeat: where its start went (`start_line.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_output_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_heartbeat_s: Option<f64>,
    /// The main process's samples this refresh (and the last few, for the
    /// share: `History`).
    #[serde(skip)]
    pub samples: Samples,
    /// The share of the samples waiting (0 to 1), what it stands on, and
    /// whence (`py-spy` or `state`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_share: Option<f64>,
    pub wait_samples: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_from: Option<&'static str>,
    /// Of the state looks this refresh, in `D`.
    pub d_looks: u32,
    pub looks: u32,
    /// `--progress`: the step, and steps a second since the last refresh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_rate: Option<f64>,
    /// The seconds the rate was measured over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_window_s: Option<f64>,
    /// What NCCL's RAS service says of this rank (missing, its count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ras: Option<String>,
    /// Its last lines (`--progress` only; not in the JSON).
    #[serde(skip)]
    pub tail: Vec<String>,
    /// When the node took its snapshot (its clock), for the step rate.
    #[serde(skip)]
    pub taken_ms: u64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `multinode`'s own processes, which are never a rank's main process.
fn is_ours(p: &Proc) -> bool {
    matches!(p.comm.as_str(), "multinode" | "mn-exec-all" | "mn-ssh")
}

/// The processes of `pgid`'s tree (its group, and their descendants).
fn tree(processes: &[Proc], pgid: i32) -> Vec<&Proc> {
    let mut pids: BTreeSet<i32> = processes
        .iter()
        .filter(|p| p.pgid == pgid)
        .map(|p| p.pid)
        .collect();
    // Parents come before children; twice for any that do not.
    for _ in 0..2 {
        for p in processes {
            if pids.contains(&p.ppid) {
                pids.insert(p.pid);
            }
        }
    }
    processes.iter().filter(|p| pids.contains(&p.pid)).collect()
}

/// The main process of a rank's processes (see the module's comment).
pub(crate) fn main_process<'a>(processes: &[&'a Proc]) -> Option<&'a Proc> {
    let job: Vec<&Proc> = processes.iter().copied().filter(|p| !is_ours(p)).collect();
    let pool = if job.is_empty() { processes } else { &job[..] };
    pool.iter().copied().max_by(|a, b| {
        let busy = |p: &Proc| (p.cpu_pct / 5.0).round() as i64;
        busy(a)
            .cmp(&busy(b))
            .then(a.is_python().cmp(&b.is_python()))
    })
}

fn row_of(snap: &NodeSnapshot, processes: &[&Proc], cmds: &[&CommandInfo]) -> Row {
    let main = main_process(processes);
    let any_d = processes.iter().any(|p| {
        p.state == "D"
            || p.samples
                .is_some_and(|s| s.looks > 0 && s.uninterruptible * 2 >= s.looks)
    });
    let mut gpu_indices: BTreeSet<u32> = processes
        .iter()
        .filter_map(|p| p.gpu.as_ref()?.index)
        .collect();
    if gpu_indices.is_empty() {
        // No pid matched (a container's own PID namespace): by LOCAL_RANK.
        if let Some(local) = cmds.iter().find_map(|c| c.local_rank) {
            gpu_indices.insert(local as u32);
        }
    }
    // The main process's samples; a process of the rank that was in D in
    // more looks speaks for it (a vfork's parent, beside its busy child).
    let samples = processes
        .iter()
        .filter_map(|p| p.samples)
        .filter(|s| s.uninterruptible > 0)
        .max_by_key(|s| s.uninterruptible)
        .filter(|d| {
            main.and_then(|p| p.samples)
                .is_none_or(|m| d.uninterruptible > m.uninterruptible)
        })
        .or(main.and_then(|p| p.samples))
        .unwrap_or_default();
    // The start of a rank with several commands is its oldest's.
    let oldest = cmds.iter().copied().max_by_key(|c| c.up_ms);
    let secs = |ms: u64| ms as f64 / 1000.0;
    let age = |f: fn(&CommandInfo) -> Option<u64>| {
        cmds.iter()
            .filter_map(|c| f(c))
            .min()
            .map(|ms| ms as f64 / 1000.0)
    };
    Row {
        rank: snap.rank,
        node_rank: snap.rank,
        local_rank: cmds.iter().find_map(|c| c.local_rank),
        host: snap.host.clone(),
        error: snap.error.clone(),
        processes_left_out: snap.processes_left_out,
        pid: main.map(|p| p.pid),
        comm: main.map(|p| p.comm.clone()).unwrap_or_default(),
        state: if any_d {
            "D".to_string()
        } else {
            main.map(|p| p.state.clone()).unwrap_or_default()
        },
        cpu_pct: (processes.iter().map(|p| p.cpu_pct).sum::<f64>() * 10.0).round() / 10.0,
        rss_kib: processes.iter().map(|p| p.rss_kib).sum(),
        place: main.and_then(crate::snapshot::place),
        gpus: snap
            .gpus
            .iter()
            .filter(|g| gpu_indices.contains(&g.index))
            .cloned()
            .collect(),
        output_age_s: age(|c| c.output_age_ms),
        heartbeat_age_s: age(|c| c.heartbeat_age_ms),
        up_s: oldest.and_then(|c| c.up_ms).map(secs),
        first_output_s: oldest.and_then(|c| c.first_output_after_ms).map(secs),
        first_heartbeat_s: oldest.and_then(|c| c.first_beat_after_ms).map(secs),
        samples,
        d_looks: samples.uninterruptible,
        looks: samples.looks,
        tail: cmds.iter().flat_map(|c| c.tail.iter().cloned()).collect(),
        taken_ms: snap.taken_ms,
        ..Row::default()
    }
}

/// One row a rank, in rank order.
pub(crate) fn rows(snaps: &[NodeSnapshot]) -> Vec<Row> {
    let mut out = Vec::new();
    for snap in snaps {
        let ranked: Vec<&CommandInfo> = snap.commands.iter().filter(|c| c.rank.is_some()).collect();
        if ranked.is_empty() || snap.error.is_some() {
            let all: Vec<&Proc> = snap.processes.iter().collect();
            let cmds: Vec<&CommandInfo> = snap.commands.iter().collect();
            out.push(row_of(snap, &all, &cmds));
            continue;
        }
        for cmd in ranked {
            let procs = tree(&snap.processes, cmd.pgid);
            let mut row = row_of(snap, &procs, &[cmd]);
            row.rank = cmd.rank.expect("filtered above");
            out.push(row);
        }
    }
    out.sort_by_key(|r| (r.rank, r.node_rank));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: i32, ppid: i32, pgid: i32, comm: &str, state: &str, cpu: f64) -> Proc {
        Proc {
            pid,
            ppid,
            pgid,
            comm: comm.into(),
            cmdline: comm.into(),
            state: state.into(),
            cpu_pct: cpu,
            rss_kib: 1000,
            ..Proc::default()
        }
    }

    #[test]
    fn a_row_a_ranked_command_else_one_a_node() {
        let two = NodeSnapshot {
            rank: 1,
            host: "n1".into(),
            processes: vec![
                proc(10, 1, 10, "sh", "S", 0.0),
                proc(11, 10, 10, "python3", "R", 99.0),
                proc(20, 1, 20, "sh", "S", 0.0),
                proc(21, 20, 20, "python3", "S", 1.0),
                proc(22, 21, 22, "python3", "D", 0.0),
            ],
            commands: vec![
                CommandInfo {
                    pgid: 10,
                    rank: Some(2),
                    local_rank: Some(0),
                    output_age_ms: Some(1500),
                    ..CommandInfo::default()
                },
                CommandInfo {
                    pgid: 20,
                    rank: Some(3),
                    local_rank: Some(1),
                    ..CommandInfo::default()
                },
            ],
            ..NodeSnapshot::default()
        };
        let head = NodeSnapshot {
            rank: 0,
            host: "n0".into(),
            processes: vec![
                proc(5, 1, 5, "multinode", "S", 0.0),
                proc(6, 5, 6, "python3", "S", 0.5),
            ],
            commands: vec![CommandInfo {
                pgid: 5,
                output_age_ms: Some(200),
                ..CommandInfo::default()
            }],
            ..NodeSnapshot::default()
        };
        let rows = rows(&[two, head]);
        let ranks: Vec<usize> = rows.iter().map(|r| r.rank).collect();
        assert_eq!(ranks, [0, 2, 3]);
        assert_eq!((rows[0].pid, rows[0].output_age_s), (Some(6), Some(0.2)));
        assert_eq!((rows[1].pid, rows[1].state.as_str()), (Some(11), "R"));
        assert_eq!(rows[1].output_age_s, Some(1.5));
        assert_eq!(rows[1].cpu_pct, 99.0);
        assert_eq!(rows[1].node_rank, 1);
        // Its child in D (a vfork, a read that never ends): the rank is in D.
        assert_eq!(rows[2].state, "D");
        assert_eq!(rows[2].local_rank, Some(1));
    }
}
