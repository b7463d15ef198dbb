//! Which CPUs and which memory node each process gets (docs/binding.md):
//! the mode, the layout, the process's place among its node's and the CPUs
//! it may use in; a [`Binding`] out, or the one-line error of a request that
//! cannot be met. Pure.

use std::fmt;
use std::str::FromStr;

use super::cpus::CpuSet;
use super::launcher_ranks::{LOCAL_RANK_VARS, Ranks};
use super::sysfs::{GpuPlace, Host};
use crate::error::Error;

/// `--bind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `numa` where the machine has more than one NUMA node and one process a GPU; else none.
    Auto,
    /// The CPUs of the GPU's NUMA node, memory preferred there.
    Numa,
    /// An exclusive share of those CPUs for each process on that node.
    Cores,
    /// Unbound.
    None,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Numa => "numa",
            Mode::Cores => "cores",
            Mode::None => "none",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> Result<Mode, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Mode::Auto),
            "numa" => Ok(Mode::Numa),
            "cores" => Ok(Mode::Cores),
            "none" => Ok(Mode::None),
            _ => Err(format!(
                "unknown binding mode '{text}': give auto, numa, cores or none"
            )),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one process gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    pub ranks: Ranks,
    /// Its GPU, when it has one.
    pub gpu: Option<GpuPlace>,
    /// The CPUs it runs on; `None`: unbound (as started).
    pub cpus: Option<CpuSet>,
    /// The NUMA node its memory is preferred on.
    pub memory_node: Option<u32>,
    /// Why it is unbound, or what was given less than asked (memory not
    /// preferred, cores shared).
    pub note: Option<String>,
    /// The mode that decided (`auto` resolved to `numa` or `none`).
    pub mode: Mode,
}

/// What the process may use as it starts: `sched_getaffinity(2)`'s CPUs
/// (a cgroup cpuset, `srun --cpu-bind`, `taskset`, mpirun's own binding),
/// and the memory nodes of its cpuset (`Mems_allowed_list`) when known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Allowed {
    pub cpus: CpuSet,
    pub mems: Option<CpuSet>,
}

/// The binding of the process at `ranks` on `host` (named `node` in
/// messages), within `allowed`.
///
/// Errors (bad input, exit 2): no local rank where the mode needs one, more
/// processes than GPUs with `numa` or `cores`, `cores` without the number
/// of local processes.
pub(crate) fn plan(
    host: &Host,
    mode: Mode,
    ranks: Ranks,
    allowed: &Allowed,
    node: &str,
) -> Result<Binding, Error> {
    let unbound = |mode: Mode, gpu: Option<&GpuPlace>, why: String| Binding {
        ranks,
        gpu: gpu.cloned(),
        cpus: None,
        memory_node: None,
        note: Some(why),
        mode,
    };
    let gpus = host.gpus.len();
    let (mode, rank) = match mode {
        Mode::None => return Ok(unbound(Mode::None, None, "--bind none".into())),
        Mode::Auto => {
            if host.nodes.len() <= 1 {
                return Ok(unbound(
                    Mode::None,
                    None,
                    "one NUMA node: auto leaves processes unbound".into(),
                ));
            }
            if gpus == 0 {
                return Ok(unbound(Mode::None, None, "no GPU visible".into()));
            }
            let rank = need_rank(ranks, Mode::Auto)?;
            let processes = ranks.local_size.unwrap_or(0).max(rank.saturating_add(1));
            if processes > gpus {
                return Ok(unbound(
                    Mode::None,
                    host.gpus.get(rank),
                    format!(
                        "{} for {}: auto binds one process a GPU",
                        plural(processes, "process", "processes"),
                        plural(gpus, "GPU", "GPUs")
                    ),
                ));
            }
            (Mode::Numa, rank)
        }
        explicit => {
            let rank = need_rank(ranks, explicit)?;
            let processes = ranks.local_size.unwrap_or(0).max(rank.saturating_add(1));
            if processes > gpus {
                return Err(Error::usage(format!(
                    "{node}: {} for {}: --bind {explicit} binds one process a GPU; start at most {gpus} on {node}, or use --bind none",
                    plural(processes, "process", "processes"),
                    plural(gpus, "GPU", "GPUs")
                )));
            }
            if explicit == Mode::Cores && ranks.local_size.is_none() {
                return Err(Error::usage(format!(
                    "--bind cores shares a NUMA node's CPUs among its processes, and no launcher says how many run on {node}: set LOCAL_WORLD_SIZE (or use --bind numa)"
                )));
            }
            (explicit, rank)
        }
    };
    let Some(gpu) = host.gpus.get(rank) else {
        return Ok(unbound(mode, None, format!("no GPU {rank} visible")));
    };
    let numa = match &gpu.numa_node {
        Ok(n) => *n,
        Err(why) => {
            return Ok(unbound(
                mode,
                Some(gpu),
                format!("GPU {} has no NUMA node: {why}", gpu.index),
            ));
        }
    };
    let node_cpus = host.nodes.get(&numa).unwrap_or(&gpu.local_cpus);
    if node_cpus.is_empty() {
        return Ok(unbound(
            mode,
            Some(gpu),
            format!("NUMA node {numa} lists no CPUs"),
        ));
    }
    let usable = node_cpus.intersection(&allowed.cpus);
    if usable.is_empty() {
        return Ok(unbound(
            mode,
            Some(gpu),
            format!(
                "none of NUMA node {numa}'s CPUs ({node_cpus}) is among the CPUs this process may use ({})",
                allowed.cpus
            ),
        ));
    }
    let mut notes = Vec::new();
    let cpus = if mode == Mode::Cores {
        let sharing: Vec<usize> = (0..ranks.local_size.unwrap_or(rank.saturating_add(1)))
            .filter(|r| {
                host.gpus
                    .get(*r)
                    .is_some_and(|g| g.numa_node.as_ref().ok() == Some(&numa))
            })
            .collect();
        let share = sharing.iter().position(|r| *r == rank).unwrap_or(0);
        let cores = cores_of(&usable, host);
        if cores.len() < sharing.len() {
            notes.push(format!(
                "{} for {} on NUMA node {numa}: shared",
                plural(cores.len(), "core", "cores"),
                plural(sharing.len(), "process", "processes")
            ));
            usable
        } else {
            let (n, k) = (cores.len(), sharing.len());
            cores[share * n / k..(share + 1) * n / k]
                .iter()
                .flat_map(|c| c.iter())
                .collect()
        }
    } else {
        usable
    };
    let memory_node = match &allowed.mems {
        Some(mems) if !mems.contains(numa) => {
            notes.push(format!(
                "memory not preferred: node {numa} is not among this process's memory nodes ({mems})"
            ));
            None
        }
        _ => Some(numa),
    };
    Ok(Binding {
        ranks,
        gpu: Some(gpu.clone()),
        cpus: Some(cpus),
        memory_node,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        mode,
    })
}

/// `1 GPU`, `8 GPUs`.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The local rank, or the error that says where it is read from.
fn need_rank(ranks: Ranks, mode: Mode) -> Result<usize, Error> {
    ranks.local_rank.ok_or_else(|| {
        Error::usage(format!(
            "--bind {mode} needs this process's local rank, and none of {LOCAL_RANK_VARS} is set: run it under torchrun, srun or mpirun, set LOCAL_RANK, or use --bind none"
        ))
    })
}

/// `cpus` as cores: each CPU with its SMT siblings among `cpus`, in the
/// order of their first CPU.
fn cores_of(cpus: &CpuSet, host: &Host) -> Vec<CpuSet> {
    let mut cores: Vec<CpuSet> = Vec::new();
    for cpu in cpus.iter() {
        if cores.iter().any(|c| c.contains(cpu)) {
            continue;
        }
        let core = match host.siblings.get(&cpu) {
            Some(siblings) => siblings.intersection(cpus),
            None => std::iter::once(cpu).collect(),
        };
        cores.push(core);
    }
    cores.sort_by_key(CpuSet::first);
    cores
}

impl Binding {
    /// The line `--report-bindings` prints (as mpirun's): who, its GPU,
    /// its NUMA node, its CPUs, or why it is unbound.
    pub(crate) fn report_line(&self, node: &str) -> String {
        let who = match (self.ranks.rank, self.ranks.local_rank) {
            (Some(r), Some(l)) => format!("rank {r} (local {l})"),
            (None, Some(l)) => format!("local rank {l}"),
            _ => "process".to_string(),
        };
        let mut line = format!("{who} on {node}");
        if let Some(gpu) = &self.gpu {
            line.push_str(&format!(": GPU {} ({})", gpu.index, gpu.bus_id));
            if let Ok(n) = gpu.numa_node {
                line.push_str(&format!(", NUMA node {n}"));
            }
        }
        match &self.cpus {
            Some(cpus) => {
                line.push_str(&format!(": CPUs {cpus}"));
                if let Some(n) = self.memory_node {
                    line.push_str(&format!(", memory preferred on node {n}"));
                }
                line.push_str(&format!(" [{}]", self.mode));
            }
            None => line.push_str(": unbound"),
        }
        if let Some(note) = &self.note {
            line.push_str(&format!(" ({note})"));
        }
        line
    }
}
