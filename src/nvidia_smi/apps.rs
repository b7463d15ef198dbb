//! Reading `nvidia-smi` for `snapshot`: GPU memory and utilisation of the
//! job's processes, from its compute processes (pid, memory, GPU) and its
//! GPUs (index, utilisation). Pure: text in, data out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One process's use of a GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuUse {
    /// The GPU's index as `nvidia-smi` numbers it on the node.
    pub index: Option<u32>,
    /// GPU memory this process holds.
    pub memory_mib: Option<u64>,
    /// The whole GPU's utilisation (NVML has no per-process figure without
    /// accounting mode): what the GPU this process is on is doing.
    pub utilization_pct: Option<u32>,
}

/// `nvidia-smi --query-compute-apps`.
pub(crate) const APPS_QUERY: &str = "--query-compute-apps=pid,used_memory,gpu_uuid";
/// `nvidia-smi --query-gpu`.
pub(crate) const GPUS_QUERY: &str = "--query-gpu=index,uuid,utilization.gpu";

/// What `nvidia-smi` said: GPU use by pid, or why there is none.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpuReading {
    pub by_pid: BTreeMap<i32, GpuUse>,
    /// `None` when `nvidia-smi` is not installed (no note needed) or answered.
    pub note: Option<String>,
}

/// One GPU: its index and utilisation, by UUID.
fn parse_gpus(text: &str) -> BTreeMap<String, (Option<u32>, Option<u32>)> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split(',').map(str::trim);
            let index = f.next()?.parse().ok();
            let uuid = f.next()?.to_string();
            let util = f.next().and_then(|u| u.parse().ok());
            (!uuid.is_empty()).then_some((uuid, (index, util)))
        })
        .collect()
}

/// The compute processes, joined with their GPU's index and utilisation.
/// Values `nvidia-smi` cannot give (`[N/A]`, `[Not Supported]`) are absent.
pub(crate) fn parse(apps: &str, gpus: &str) -> BTreeMap<i32, GpuUse> {
    let gpus = parse_gpus(gpus);
    let mut out = BTreeMap::new();
    for line in apps.lines() {
        let mut f = line.split(',').map(str::trim);
        let Some(pid) = f.next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let memory = f.next().and_then(|m| m.parse::<u64>().ok());
        let uuid = f.next().unwrap_or_default();
        let (index, util) = gpus.get(uuid).copied().unwrap_or((None, None));
        // A process on several GPUs: its memory adds up, the first GPU names it.
        let entry = out.entry(pid).or_insert(GpuUse {
            index,
            memory_mib: None,
            utilization_pct: util,
        });
        if let Some(m) = memory {
            entry.memory_mib = Some(entry.memory_mib.unwrap_or(0) + m);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_processes_with_their_gpu() {
        let gpus = "0, GPU-aaaa, 100\n1, GPU-bbbb, 0\n";
        let apps = "4242, 1024, GPU-aaaa\n4343, 600, GPU-bbbb\n4343, 400, GPU-aaaa\n4444, [N/A], GPU-cccc\nNo running processes found\n";
        let by_pid = parse(apps, gpus);
        assert_eq!(
            by_pid.get(&4242),
            Some(&GpuUse {
                index: Some(0),
                memory_mib: Some(1024),
                utilization_pct: Some(100)
            })
        );
        assert_eq!(
            by_pid.get(&4343),
            Some(&GpuUse {
                index: Some(1),
                memory_mib: Some(1000),
                utilization_pct: Some(0)
            })
        );
        assert_eq!(
            by_pid.get(&4444),
            Some(&GpuUse {
                index: None,
                memory_mib: None,
                utilization_pct: None
            })
        );
        assert_eq!(by_pid.len(), 3);
        assert!(parse("", gpus).is_empty());
    }
}
