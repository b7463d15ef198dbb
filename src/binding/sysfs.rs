//! Where each GPU sits, as sysfs tells it: the NUMA node and local CPUs of
//! its PCI device (by the bus id `nvidia-smi` gives), the NUMA nodes that
//! have CPUs and their CPUs, and which CPUs are SMT siblings. Every file is
//! read through a function under a root (`/sys`; a fixture tree in tests).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use super::cpus::CpuSet;
use crate::nvidia_smi::PciGpu;

/// Reads one file.
pub(crate) type Read<'a> = &'a (dyn Fn(&Path) -> io::Result<String> + Sync);

/// One visible GPU and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuPlace {
    /// `nvidia-smi`'s index.
    pub index: u32,
    /// The bus id as sysfs names the device: `0000:07:00.0`.
    pub bus_id: String,
    /// Its NUMA node, or why there is none (`numa_node` is -1, unreadable).
    pub numa_node: Result<u32, String>,
    /// The device's `local_cpulist` (empty when unreadable).
    pub local_cpus: CpuSet,
}

/// The layout binding decides from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Host {
    /// The visible GPUs in CUDA's order: entry i is local rank i's.
    pub gpus: Vec<GpuPlace>,
    /// The NUMA nodes that have CPUs, and their CPUs.
    pub nodes: BTreeMap<u32, CpuSet>,
    /// A CPU's SMT siblings (itself included), for the CPUs of the GPUs'
    /// nodes; a CPU not listed is a core of its own.
    pub siblings: BTreeMap<u32, CpuSet>,
}

/// `00000000:07:00.0` (nvidia-smi: 8-digit domain, upper case) as sysfs
/// names the device: `0000:07:00.0` (`%04x` domain, lower case).
pub(crate) fn sysfs_bus_id(bus_id: &str) -> Option<String> {
    let (domain, rest) = bus_id.trim().split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let valid = rest.len() == 7
        && rest.as_bytes()[2] == b':'
        && rest.as_bytes()[5] == b'.'
        && rest
            .bytes()
            .enumerate()
            .all(|(i, b)| matches!(i, 2 | 5) || b.is_ascii_hexdigit());
    valid.then(|| format!("{domain:04x}:{}", rest.to_ascii_lowercase()))
}

/// The NUMA nodes that have CPUs, and their CPUs. `has_cpu`: a node of
/// memory only (a Grace Hopper's GPU memory, CXL) is no place to run;
/// `online` on kernels without it.
pub(crate) fn read_nodes(root: &Path, read: Read<'_>) -> BTreeMap<u32, CpuSet> {
    let file = |rel: String| read(&root.join(rel)).map(|t| t.trim().to_string());
    let node_ids = file("devices/system/node/has_cpu".into())
        .or_else(|_| file("devices/system/node/online".into()))
        .ok()
        .and_then(|t| CpuSet::parse(&t).ok())
        .unwrap_or_default();
    node_ids
        .iter()
        .filter_map(|n| {
            let cpus = file(format!("devices/system/node/node{n}/cpulist")).ok()?;
            Some((n, CpuSet::parse(&cpus).ok()?))
        })
        .filter(|(_, cpus)| !cpus.is_empty())
        .collect()
}

/// Reads the layout of `gpus` (the visible ones, in CUDA's order) under `root`.
pub(crate) fn read_host(root: &Path, read: Read<'_>, gpus: &[&PciGpu]) -> Host {
    let file = |rel: String| read(&root.join(rel)).map(|t| t.trim().to_string());
    let gpus: Vec<GpuPlace> = gpus
        .iter()
        .map(|g| {
            let Some(bus_id) = sysfs_bus_id(&g.bus_id) else {
                return GpuPlace {
                    index: g.index,
                    bus_id: g.bus_id.clone(),
                    numa_node: Err(format!("nvidia-smi's bus id '{}' is unreadable", g.bus_id)),
                    local_cpus: CpuSet::default(),
                };
            };
            let dev = format!("bus/pci/devices/{bus_id}");
            let numa_node = match file(format!("{dev}/numa_node")) {
                Ok(text) => match text.parse::<i64>() {
                    Ok(n) if n >= 0 => u32::try_from(n).map_err(|_| format!("numa_node is {n}")),
                    Ok(n) => Err(format!(
                        "its numa_node is {n}: the firmware names no NUMA node for it"
                    )),
                    Err(_) => Err(format!("its numa_node reads '{text}'")),
                },
                Err(e) => Err(format!("cannot read {dev}/numa_node: {e}")),
            };
            let local_cpus = file(format!("{dev}/local_cpulist"))
                .ok()
                .and_then(|t| CpuSet::parse(&t).ok())
                .unwrap_or_default();
            GpuPlace {
                index: g.index,
                bus_id,
                numa_node,
                local_cpus,
            }
        })
        .collect();
    let nodes = read_nodes(root, read);
    let mut siblings = BTreeMap::new();
    for gpu in &gpus {
        let cpus = match &gpu.numa_node {
            Ok(n) => nodes.get(n).unwrap_or(&gpu.local_cpus),
            Err(_) => continue,
        };
        for cpu in cpus.iter() {
            if siblings.contains_key(&cpu) {
                continue;
            }
            if let Some(set) = file(format!(
                "devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
            ))
            .ok()
            .and_then(|t| CpuSet::parse(&t).ok())
            {
                siblings.insert(cpu, set);
            }
        }
    }
    Host {
        gpus,
        nodes,
        siblings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smis_bus_ids_become_sysfs_names() {
        assert_eq!(
            sysfs_bus_id("00000000:07:00.0").as_deref(),
            Some("0000:07:00.0")
        );
        assert_eq!(
            sysfs_bus_id("00000000:BD:00.0").as_deref(),
            Some("0000:bd:00.0")
        );
        // Hyper-V guests (Azure) give GPUs domains of their own.
        assert_eq!(
            sysfs_bus_id("00000001:00:00.0").as_deref(),
            Some("0001:00:00.0")
        );
        assert_eq!(
            sysfs_bus_id("0000C4D3:00:00.0").as_deref(),
            Some("c4d3:00:00.0")
        );
        assert_eq!(
            sysfs_bus_id("0000:07:00.0").as_deref(),
            Some("0000:07:00.0")
        );
        for bad in [
            "",
            "07:00.0",
            "00000000:07:00",
            "x:07:00.0",
            "00000000:0G:00.0",
        ] {
            assert_eq!(sysfs_bus_id(bad), None, "{bad}");
        }
    }
}
