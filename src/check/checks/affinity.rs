//! What binding each process to its GPU's NUMA node meets (docs/binding.md):
//!
//! - `gpu-numa-order`: GPU order is not NUMA order (a DGX A100's GPUs 0-7
//!   sit on nodes 3,3,1,1,7,7,5,5): a binding by `local_rank // k`
//!   (`NVRX_GPUS_PER_NUMA`, numactl by rank) puts processes on the wrong
//!   node. A warning.
//! - `cpu-mask`: the job's CPUs are narrower than its GPUs' NUMA nodes:
//!   fewer than [`CPUS_PER_GPU`] a visible GPU (2 CPUs for 8 GPUs), or a
//!   GPU whose node has none of them (its process runs remote from it). A
//!   warning (13x slower training on Frontier: nasa-nccs-hpda/pytorch-caney#44).
//! - `omp-affinity`: `OMP_PROC_BIND` or `KMP_AFFINITY` set: `import torch`
//!   then shrinks the process's CPUs to one core (llnl/mpibind#41). A warning.

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Tally};
use crate::binding::CpuSet;

/// Fewer CPUs than this a GPU is warned about: a rank's own thread and one
/// more (data loading, NCCL's proxy thread).
pub(crate) const CPUS_PER_GPU: usize = 2;

/// `gpu-numa-order`.
pub(crate) fn gpu_numa_order(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-numa-order");
    for (n, f) in inputs.answered() {
        let known: Vec<u32> = f.affinity.gpus.iter().filter_map(|g| g.numa_node).collect();
        if known.is_sorted() {
            t.ok(n.rank);
            continue;
        }
        let indices: Vec<String> = f
            .affinity
            .gpus
            .iter()
            .map(|g| g.index.to_string())
            .collect();
        let nodes: Vec<String> = f
            .affinity
            .gpus
            .iter()
            .map(|g| g.numa_node.map_or("-1".into(), |n| n.to_string()))
            .collect();
        t.warn(
            n.rank,
            format!(
                "GPU order is not NUMA order: GPUs {} on NUMA nodes {}",
                indices.join(","),
                nodes.join(",")
            ),
            "bind by each GPU's bus id (multinode bind, docs/binding.md), not by local rank (local_rank // k, NVRX_GPUS_PER_NUMA)",
        );
    }
    t.finish("GPUs in NUMA order")
}

/// `cpu-mask`.
pub(crate) fn cpu_mask(inputs: &CheckInputs) -> CheckResult {
    const FIX: &str = "give the job every CPU of its GPUs' NUMA nodes (srun --cpus-per-task, --cpu-bind=none; a wider cpuset; no taskset)";
    let mut t = Tally::new(inputs, "cpu-mask");
    for (n, f) in inputs.answered() {
        let gpus = f.affinity.gpus.len();
        let Some(allowed) = f
            .affinity
            .allowed_cpus
            .as_deref()
            .and_then(|l| CpuSet::parse(l).ok())
        else {
            continue;
        };
        if gpus == 0 {
            t.ok(n.rank);
            continue;
        }
        if allowed.len() < CPUS_PER_GPU * gpus {
            t.warn(
                n.rank,
                format!(
                    "{} CPUs ({allowed}) for {gpus} GPUs: fewer than {CPUS_PER_GPU} a GPU",
                    allowed.len()
                ),
                FIX,
            );
            continue;
        }
        let remote: Vec<String> = f
            .affinity
            .gpus
            .iter()
            .filter_map(|g| {
                let node = g.numa_node?;
                let cpus = CpuSet::parse(g.node_cpus.as_deref()?).ok()?;
                cpus.intersection(&allowed)
                    .is_empty()
                    .then(|| format!("GPU {}'s NUMA node {node} ({cpus})", g.index))
            })
            .collect();
        if remote.is_empty() {
            t.ok(n.rank);
        } else {
            t.warn(
                n.rank,
                format!(
                    "{} {} none of the job's CPUs ({allowed})",
                    remote.join(", "),
                    if remote.len() == 1 { "has" } else { "have" }
                ),
                FIX,
            );
        }
    }
    t.finish(format!(
        "the job's CPUs reach every GPU's NUMA node, {CPUS_PER_GPU} or more a GPU"
    ))
}

/// `omp-affinity`.
pub(crate) fn omp_affinity(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "omp-affinity");
    for (n, f) in inputs.answered() {
        let set: Vec<String> = f
            .affinity
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if set.is_empty() {
            t.ok(n.rank);
        } else {
            t.warn(
                n.rank,
                format!(
                    "{} set: `import torch` shrinks each process to one core (llnl/mpibind#41)",
                    set.join(", ")
                ),
                "unset OMP_PROC_BIND and KMP_AFFINITY; bind processes with multinode bind (docs/binding.md)",
            );
        }
    }
    t.finish("neither OMP_PROC_BIND nor KMP_AFFINITY set")
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::fixtures::{cluster, facts};
    use super::*;
    use crate::check::facts::GpuNuma;

    /// A DGX A100's GPUs as `check --local` reports them: NUMA nodes 3,3,1,1,7,7,5,5.
    fn dgx_a100() -> Vec<GpuNuma> {
        let nodes = [3, 3, 1, 1, 7, 7, 5, 5];
        let buses = ["07", "0f", "47", "4e", "87", "90", "b7", "bd"];
        (0..8)
            .map(|i| GpuNuma {
                index: i as u32,
                bus_id: format!("0000:{}:00.0", buses[i]),
                numa_node: Some(nodes[i]),
                node_cpus: Some(format!(
                    "{}-{},{}-{}",
                    16 * nodes[i],
                    16 * nodes[i] + 15,
                    128 + 16 * nodes[i],
                    128 + 16 * nodes[i] + 15
                )),
            })
            .collect()
    }

    #[test]
    fn a_healthy_cluster_passes() {
        let inputs = cluster(2);
        for check in [gpu_numa_order, cpu_mask, omp_affinity] {
            let r = check(&inputs);
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
    }

    #[test]
    fn gpu_order_not_numa_order_is_warned() {
        let mut inputs = cluster(3);
        facts(&mut inputs, 1).affinity.gpus = dgx_a100();
        let r = gpu_numa_order(&inputs);
        assert_eq!(
            (r.status, r.nodes.as_slice()),
            (Status::Warn, ["gpu02".to_string()].as_slice())
        );
        assert_eq!(
            r.detail,
            "GPU order is not NUMA order: GPUs 0,1,2,3,4,5,6,7 on NUMA nodes 3,3,1,1,7,7,5,5 on gpu02"
        );
        // A GPU without a NUMA node says nothing of the order.
        let mut gpus = dgx_a100();
        gpus.truncate(2);
        gpus[0].numa_node = None;
        facts(&mut inputs, 1).affinity.gpus = gpus;
        assert_eq!(gpu_numa_order(&inputs).status, Status::Ok);
    }

    #[test]
    fn a_cpu_mask_narrower_than_the_gpus_nodes_is_warned() {
        let mut inputs = cluster(2);
        let f = facts(&mut inputs, 0);
        f.affinity.gpus = dgx_a100();
        f.affinity.allowed_cpus = Some("0-1".into());
        let r = cpu_mask(&inputs);
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "2 CPUs (0-1) for 8 GPUs: fewer than 2 a GPU on gpu01"
        );
        // Enough CPUs, but none on the nodes of GPUs 4-7.
        facts(&mut inputs, 0).affinity.allowed_cpus = Some("0-63,128-191".into());
        let r = cpu_mask(&inputs);
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "GPU 4's NUMA node 7 (112-127,240-255), GPU 5's NUMA node 7 (112-127,240-255), GPU 6's NUMA node 5 (80-95,208-223), GPU 7's NUMA node 5 (80-95,208-223) have none of the job's CPUs (0-63,128-191) on gpu01"
        );
        facts(&mut inputs, 0).affinity.allowed_cpus = Some("0-255".into());
        assert_eq!(cpu_mask(&inputs).status, Status::Ok);
    }

    #[test]
    fn openmp_affinity_variables_are_warned() {
        let mut inputs = cluster(2);
        facts(&mut inputs, 1)
            .affinity
            .env
            .insert("OMP_PROC_BIND".into(), "true".into());
        let r = omp_affinity(&inputs);
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "OMP_PROC_BIND=true set: `import torch` shrinks each process to one core (llnl/mpibind#41) on gpu02"
        );
    }
}
