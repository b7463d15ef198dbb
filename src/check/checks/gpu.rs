//! GPUs: how many each node has against its slots and `--nproc-per-node`,
//! the same driver and CUDA version everywhere, and CUDA toolkits that build
//! for the GPUs' architecture and run on the driver.
//!
//! No `nvidia-smi` on a node means no GPU. That is fine for a CPU job: with
//! no GPU on any node and no `--nproc-per-node`, `gpu-count` is ok.
//! `--nproc-per-node` asks for one GPU per process: a node without GPUs
//! then fails, or, when no node has any, the job is warned that it will run
//! on CPUs only (gloo) and NCCL cannot.

use std::collections::{BTreeMap, BTreeSet};

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Tally};
use crate::check::cuda::{CudaVersion, Support, sm, supports};
use crate::check::facts::{NodeFacts, SmiStatus};
use crate::nvidia_smi::{TIMEOUT_S as SMI_TIMEOUT_S, parse_dotted};

const FIX_NO_GPU: &str = "give the job its GPUs on that node (`docker run --gpus all`, the platform's GPU request) or leave the node out of the hostlist";

/// `gpu-count`.
pub(crate) fn gpu_count(inputs: &CheckInputs) -> CheckResult {
    let any_gpu = inputs.any_gpu();
    let nproc = inputs.head.nproc_per_node;
    let mut t = Tally::new(inputs, "gpu-count");
    let mut counts: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (n, f) in inputs.answered() {
        match f.gpus.smi {
            SmiStatus::Failed => {
                t.fail(
                    n.rank,
                    format!(
                        "nvidia-smi fails: {}",
                        f.gpus.error.as_deref().unwrap_or("no message")
                    ),
                    "load the NVIDIA driver, or give the job its GPUs (`docker run --gpus all`, the platform's GPU request); run nvidia-smi on the node",
                );
                continue;
            }
            SmiStatus::Timeout => {
                t.fail(
                    n.rank,
                    format!("nvidia-smi did not answer in {SMI_TIMEOUT_S} s"),
                    "a GPU may have fallen off the bus: look for Xid errors in `dmesg`, then reset the GPU or drain the node",
                );
                continue;
            }
            SmiStatus::Ok | SmiStatus::Absent => {}
        }
        let gpus = f.gpus.devices.len();
        let none = if f.gpus.smi == SmiStatus::Absent {
            "no GPU (no nvidia-smi)"
        } else {
            "no GPU"
        };
        counts.entry(gpus).or_default().push(n.host.clone());
        let slots = n.slots as usize;
        match nproc {
            Some(p) if !any_gpu => t.warn(
                n.rank,
                format!("--nproc-per-node {p} but no node has a GPU"),
                "fine for a CPU job (gloo); a NCCL job needs GPUs on every node",
            ),
            Some(p) if gpus == 0 => t.fail(
                n.rank,
                format!("{none}, but --nproc-per-node {p}"),
                FIX_NO_GPU,
            ),
            Some(p) if p as usize > gpus => t.fail(
                n.rank,
                format!("--nproc-per-node {p} for {gpus} GPUs: processes would share a GPU (NCCL: \"Duplicate GPU detected\")"),
                "run one process per GPU: --nproc-per-node equal to the GPU count",
            ),
            Some(p) if (p as usize) < gpus => t.warn(
                n.rank,
                format!("--nproc-per-node {p} leaves {} of {gpus} GPUs idle", gpus - p as usize),
                "run one process per GPU: --nproc-per-node equal to the GPU count",
            ),
            Some(_) => t.ok(n.rank),
            None if any_gpu && gpus == 0 => t.fail(
                n.rank,
                format!("{none}, while other nodes have GPUs"),
                FIX_NO_GPU,
            ),
            None if gpus > 0 && slots > gpus => t.warn(
                n.rank,
                format!("{slots} slots for {gpus} GPUs: mpirun -np $MULTINODE_TOTAL_SLOTS puts several ranks on one GPU"),
                "give each node as many slots as GPUs in the hostlist (HOST:GPUS), or 1 slot for torchrun",
            ),
            None if gpus > 0 && slots > 1 && slots < gpus => t.warn(
                n.rank,
                format!("{slots} slots for {gpus} GPUs: mpirun -np $MULTINODE_TOTAL_SLOTS leaves GPUs idle"),
                "give each node as many slots as GPUs in the hostlist (HOST:GPUS), or 1 slot for torchrun",
            ),
            None => t.ok(n.rank),
        }
    }
    let gpus = |n: usize| {
        if n == 1 {
            "1 GPU".to_string()
        } else {
            format!("{n} GPUs")
        }
    };
    let ok = if !any_gpu {
        "no GPU on any node (a CPU job)".to_string()
    } else if counts.len() == 1 {
        format!(
            "{} on every node",
            gpus(counts.keys().next().copied().unwrap_or(0))
        )
    } else {
        counts
            .iter()
            .rev()
            .map(|(n, hosts)| format!("{} on {}", gpus(*n), crate::topology::nodeset::fold(hosts)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    t.finish(ok)
}

/// `(driver, CUDA)` of a node with GPUs.
fn versions(f: &NodeFacts) -> Option<(String, String)> {
    if f.gpus.devices.is_empty() {
        return None;
    }
    let unknown = || "unknown".to_string();
    Some((
        f.gpus.driver_version.clone().unwrap_or_else(unknown),
        f.gpus.cuda_version.clone().unwrap_or_else(unknown),
    ))
}

/// `gpu-driver`: one driver and CUDA version on every node with GPUs (the
/// head's, or when the head has none, the most common).
pub(crate) fn gpu_driver(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-driver");
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (_, f) in inputs.answered() {
        if let Some(v) = versions(f) {
            *counts.entry(v).or_default() += 1;
        }
    }
    let (reference, whose) = match inputs.head_facts().and_then(versions) {
        Some(v) => (v, "the head has"),
        None => match counts.iter().max_by_key(|(_, c)| **c) {
            Some((v, _)) => (v.clone(), "most nodes have"),
            None => {
                for (n, _) in inputs.answered() {
                    t.ok(n.rank);
                }
                return t.finish("no GPU on any node");
            }
        },
    };
    for (n, f) in inputs.answered() {
        match versions(f) {
            Some(v) if v != reference => t.warn(
                n.rank,
                format!(
                    "driver {} with CUDA {}, {whose} {} with CUDA {}",
                    v.0, v.1, reference.0, reference.1
                ),
                "install the same NVIDIA driver on every node (one image and one driver per job)",
            ),
            _ => t.ok(n.rank),
        }
    }
    t.finish(format!(
        "driver {} with CUDA {} on every node with GPUs",
        reference.0, reference.1
    ))
}

/// `cuda-arch`: every CUDA toolkit found on a node builds for its GPUs'
/// compute capability (see [`crate::check::cuda::ARCHS`]) and runs on its
/// driver: newer than the driver's CUDA major fails ("CUDA driver version is
/// insufficient"), a newer minor warns (minor-version compatibility: no PTX JIT).
pub(crate) fn cuda_arch(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "cuda-arch");
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for (n, f) in inputs.answered() {
        if f.gpus.devices.is_empty() {
            t.ok(n.rank);
            continue;
        }
        let mut caps: Vec<((u32, u32), &str)> = Vec::new();
        for gpu in &f.gpus.devices {
            if let Some(cc) = gpu.compute_cap.as_deref().and_then(parse_dotted)
                && !caps.iter().any(|(c, _)| *c == cc)
            {
                caps.push((cc, &gpu.name));
            }
        }
        let driver = f.gpus.cuda_version.as_deref().and_then(CudaVersion::parse);
        let mut found = false;
        for tk in &f.cuda_toolkits {
            let Some(v) = CudaVersion::parse(&tk.version) else {
                continue;
            };
            let what = format!("CUDA {v} ({})", tk.source);
            for (cc, name) in &caps {
                match supports(v, *cc) {
                    Support::Yes => {
                        seen.insert(format!("{what} builds for {}", sm(*cc)));
                    }
                    Support::TooOld(need) => {
                        found = true;
                        t.fail(
                            n.rank,
                            format!("{what} predates {} ({name}): kernels fail with \"Cuda failure 'invalid argument'\"", sm(*cc)),
                            format!("use a build for CUDA {need} or newer (an image or PyTorch wheel for it)"),
                        );
                    }
                    Support::Dropped(since) => {
                        found = true;
                        t.fail(
                            n.rank,
                            format!(
                                "{what} no longer builds for {} ({name}), dropped in CUDA {since}",
                                sm(*cc)
                            ),
                            format!("use a build for a CUDA older than {since} on these GPUs"),
                        );
                    }
                    Support::Unknown => {
                        found = true;
                        t.warn(
                            n.rank,
                            format!(
                                "compute capability {}.{} ({name}) is not in multinode's table",
                                cc.0, cc.1
                            ),
                            "check the CUDA release notes for the first version that supports it",
                        );
                    }
                }
            }
            if let Some(d) = driver {
                if v.major > d.major {
                    found = true;
                    t.fail(
                        n.rank,
                        format!("{what} is newer than the driver's CUDA {d}: \"CUDA driver version is insufficient for CUDA runtime version\""),
                        format!("install a driver for CUDA {v}, or use a build for CUDA {}.x", d.major),
                    );
                } else if v > d {
                    found = true;
                    t.warn(
                        n.rank,
                        format!("{what} is newer than the driver's CUDA {d}: it runs by minor-version compatibility, without PTX JIT"),
                        format!("install a driver for CUDA {v}, or use a build for CUDA {d}"),
                    );
                }
            }
        }
        if !found {
            t.ok(n.rank);
        }
    }
    let ok = if seen.is_empty() {
        "nothing to compare (no GPU, no compute capability or no CUDA toolkit found)".to_string()
    } else {
        seen.into_iter().collect::<Vec<_>>().join(", ")
    };
    t.finish(ok)
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::fixtures::*;
    use crate::check::facts::{SmiStatus, Toolkit};

    #[test]
    fn mismatched_nodes_from_the_fixtures() {
        let mut inputs = cluster(3);
        facts(&mut inputs, 1).gpus = gpus_from(H200_570_QUERY, H200_570_SMI);
        facts(&mut inputs, 2).gpus = gpus_from(H200_4_QUERY, H200_4_SMI);
        let r = row(&inputs, "gpu-driver");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu02", "gpu03"]);
        assert_eq!(
            r.detail,
            "driver 570.172.08 with CUDA 12.8, the head has 580.159.04 with CUDA 13.0 on gpu02; \
             driver 575.57.08 with CUDA 12.9, the head has 580.159.04 with CUDA 13.0 on gpu03"
        );
        // gpu03 has 4 GPUs for 8 slots.
        let r = row(&inputs, "gpu-count");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu03"]);
        assert_eq!(
            r.detail,
            "8 slots for 4 GPUs: mpirun -np $MULTINODE_TOTAL_SLOTS puts several ranks on one GPU on gpu03"
        );
        // CUDA 13.0 (nvcc) is newer than the 12.x drivers of gpu02 and gpu03.
        let r = row(&inputs, "cuda-arch");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03"]);
        assert!(r.detail.starts_with("CUDA 13.0 (nvcc) is newer than the driver's CUDA 12.8: \"CUDA driver version is insufficient for CUDA runtime version\" on gpu02"), "{}", r.detail);
        // torch's CUDA 12.8 on the 12.8 and 12.9 drivers is fine.
        assert!(!r.detail.contains("(torch)"), "{}", r.detail);
    }

    #[test]
    fn healthy_h200s() {
        let inputs = cluster(2);
        assert_eq!(row(&inputs, "gpu-count").detail, "8 GPUs on every node");
        assert_eq!(
            row(&inputs, "gpu-driver").detail,
            "driver 580.159.04 with CUDA 13.0 on every node with GPUs"
        );
        assert_eq!(
            row(&inputs, "cuda-arch").detail,
            "CUDA 12.8 (torch) builds for sm_90, CUDA 13.0 (nvcc) builds for sm_90"
        );
    }

    #[test]
    fn nproc_per_node_against_gpus() {
        let mut inputs = cluster(3);
        inputs.head.nproc_per_node = Some(8);
        facts(&mut inputs, 1).gpus = gpus_from(H200_4_QUERY, H200_4_SMI);
        let f = facts(&mut inputs, 2);
        f.gpus.devices.clear();
        f.gpus.smi = SmiStatus::Absent;
        let r = row(&inputs, "gpu-count");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03"]);
        assert_eq!(
            r.detail,
            "--nproc-per-node 8 for 4 GPUs: processes would share a GPU (NCCL: \"Duplicate GPU detected\") on gpu02; \
             no GPU (no nvidia-smi), but --nproc-per-node 8 on gpu03"
        );
        inputs.head.nproc_per_node = Some(2);
        facts(&mut inputs, 2).gpus = gpus_from(H200_QUERY, H200_SMI);
        let r = row(&inputs, "gpu-count");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "--nproc-per-node 2 leaves 6 of 8 GPUs idle on gpu[01,03]; --nproc-per-node 2 leaves 2 of 4 GPUs idle on gpu02"
        );
    }

    #[test]
    fn cpu_jobs() {
        let mut inputs = cluster(2);
        for rank in 0..2 {
            let f = facts(&mut inputs, rank);
            f.gpus.devices.clear();
            f.gpus.smi = SmiStatus::Absent;
        }
        let r = row(&inputs, "gpu-count");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (Status::Ok, "no GPU on any node (a CPU job)")
        );
        assert_eq!(row(&inputs, "gpu-driver").detail, "no GPU on any node");
        assert_eq!(row(&inputs, "cuda-arch").status, Status::Ok);
        inputs.head.nproc_per_node = Some(4);
        let r = row(&inputs, "gpu-count");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu01", "gpu02"]);
        assert_eq!(
            r.detail,
            "--nproc-per-node 4 but no node has a GPU on gpu[01-02]"
        );
    }

    #[test]
    fn a_node_that_lost_its_gpus_or_its_driver() {
        let mut inputs = cluster(4);
        let f = facts(&mut inputs, 1);
        f.gpus.devices.clear();
        f.gpus.smi = SmiStatus::Failed;
        f.gpus.error = Some(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.".into(),
        );
        let f = facts(&mut inputs, 2);
        f.gpus.devices.clear();
        f.gpus.smi = SmiStatus::Timeout;
        let f = facts(&mut inputs, 3);
        f.gpus.devices.clear();
        f.gpus.smi = SmiStatus::Absent;
        let r = row(&inputs, "gpu-count");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03", "gpu04"]);
        assert_eq!(
            r.detail,
            "nvidia-smi fails: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. on gpu02; \
             nvidia-smi did not answer in 10 s on gpu03; \
             no GPU (no nvidia-smi), while other nodes have GPUs on gpu04"
        );
    }

    #[test]
    fn slots_and_gpus() {
        let mut inputs = cluster(3);
        inputs.nodes[0].slots = 1; // torchrun: one launcher per node
        inputs.nodes[1].slots = 4;
        inputs.nodes[2].slots = 8;
        let r = row(&inputs, "gpu-count");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu02"]);
        assert_eq!(
            r.detail,
            "4 slots for 8 GPUs: mpirun -np $MULTINODE_TOTAL_SLOTS leaves GPUs idle on gpu02"
        );
    }

    #[test]
    fn toolkits_older_than_the_gpu() {
        let mut inputs = cluster(2);
        facts(&mut inputs, 1).cuda_toolkits = vec![Toolkit {
            source: "torch".into(),
            path: "/venv/lib/python3.10/site-packages/torch/version.py".into(),
            version: "11.7".into(),
        }];
        let r = row(&inputs, "cuda-arch");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02"]);
        assert_eq!(
            r.detail,
            "CUDA 11.7 (torch) predates sm_90 (NVIDIA H200): kernels fail with \"Cuda failure 'invalid argument'\" on gpu02"
        );
        assert_eq!(
            r.fix.as_deref(),
            Some("use a build for CUDA 11.8 or newer (an image or PyTorch wheel for it)")
        );
    }

    #[test]
    fn blackwell_and_dropped_architectures() {
        let mut inputs = cluster(2);
        for gpu in &mut facts(&mut inputs, 0).gpus.devices {
            gpu.name = "NVIDIA B200".into();
            gpu.compute_cap = Some("10.0".into());
        }
        for gpu in &mut facts(&mut inputs, 1).gpus.devices {
            gpu.name = "Tesla V100-SXM2-32GB".into();
            gpu.compute_cap = Some("7.0".into());
        }
        for rank in 0..2 {
            facts(&mut inputs, rank).cuda_toolkits[1].version = "12.4".into();
        }
        let r = row(&inputs, "cuda-arch");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(
            r.detail,
            "CUDA 12.4 (torch) predates sm_100 (NVIDIA B200): kernels fail with \"Cuda failure 'invalid argument'\" on gpu01; \
             CUDA 13.0 (nvcc) no longer builds for sm_70 (Tesla V100-SXM2-32GB), dropped in CUDA 13.0 on gpu02"
        );
    }

    #[test]
    fn unknown_architectures_and_newer_minors_warn() {
        let mut inputs = cluster(1);
        let f = facts(&mut inputs, 0);
        f.gpus.cuda_version = Some("12.8".into());
        f.cuda_toolkits = vec![Toolkit {
            source: "CUDA_VERSION".into(),
            path: "CUDA_VERSION".into(),
            version: "12.9.1".into(),
        }];
        f.gpus.devices[0].compute_cap = Some("14.0".into());
        let r = row(&inputs, "cuda-arch");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "compute capability 14.0 (NVIDIA H200) is not in multinode's table on gpu01; \
             CUDA 12.9 (CUDA_VERSION) is newer than the driver's CUDA 12.8: it runs by minor-version compatibility, without PTX JIT on gpu01"
        );
    }
}
