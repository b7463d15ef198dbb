//! The GPU health checks of `check --gpu`: what each node's health query,
//! `nvidia-smi nvlink --status` and kernel log said, judged here. A field a
//! GPU does not report is "not reported", never a fault. The GPU count is
//! `gpu-count`'s (`gpu.rs`); docs/check.md gives every threshold.

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Tally};
use crate::check::facts::{GpuHealth, GpuHealthFacts, SmiStatus};
use crate::nvidia_smi::same_pci;

/// The clock event reasons that mean the GPU is held down by hardware, heat
/// or power (not by being idle or by a clock an administrator set).
pub(crate) const SLOWDOWNS: [&str; 5] = [
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sw_power_cap",
];

/// Xids that mean the GPU or its memory needs a reset or a replacement;
/// any other is warned (13, 31, 43, 45: most often the application's own
/// fault). NVIDIA's Xid catalog.
pub(crate) const SERIOUS_XIDS: [u32; 14] =
    [48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 123, 140];

/// Every node that answered, with its GPU health when it has GPUs and its
/// health query read; the others counted as ok (nothing to check here).
fn each<'a>(inputs: &'a CheckInputs, t: &mut Tally<'_>) -> Vec<(usize, &'a GpuHealthFacts)> {
    let mut out = Vec::new();
    for (n, f) in inputs.answered() {
        match &f.gpu_health {
            Some(h) if !f.gpus.devices.is_empty() && h.smi == SmiStatus::Ok => {
                out.push((n.rank, h))
            }
            _ => t.ok(n.rank),
        }
    }
    out
}

/// `gpu-health`: the health query answered on every node with GPUs.
pub(crate) fn health_query(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-health");
    let mut gpus = 0;
    for (n, f) in inputs.answered() {
        let Some(h) = f.gpu_health.as_ref().filter(|_| !f.gpus.devices.is_empty()) else {
            t.ok(n.rank);
            continue;
        };
        match h.smi {
            SmiStatus::Ok => {
                gpus += h.devices.len();
                t.ok(n.rank);
            }
            _ => t.fail(
                n.rank,
                h.error.clone().unwrap_or_else(|| "no answer".into()),
                "run `nvidia-smi -q` on the node; a GPU that hangs it has likely fallen off the bus: look for Xid 79 in `dmesg`, reset the GPU or drain the node",
            ),
        }
    }
    t.finish(format!("nvidia-smi reported the health of {gpus} GPU(s)"))
}

fn sum(devices: &[&GpuHealth], field: impl Fn(&GpuHealth) -> Option<u64>) -> Option<u64> {
    devices.iter().filter_map(|d| field(d)).reduce(|a, b| a + b)
}

fn count(n: Option<u64>) -> String {
    n.map_or("not reported".to_string(), |n| n.to_string())
}

/// `gpu-ecc`: no uncorrected ECC error, since boot (volatile) or in the
/// GPU's lifetime (aggregate); corrected ones reported; ECC off warned.
pub(crate) fn ecc(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-ecc");
    let mut all: Vec<&GpuHealth> = Vec::new();
    for (rank, h) in each(inputs, &mut t) {
        t.ok(rank);
        for d in &h.devices {
            all.push(d);
            let (v, a) = (
                d.ecc_uncorrected_volatile.unwrap_or(0),
                d.ecc_uncorrected_aggregate.unwrap_or(0),
            );
            if v > 0 || a > 0 {
                t.fail(
                    rank,
                    format!(
                        "GPU {} {v} uncorrected ECC error(s) since boot, {a} in its lifetime (ecc.errors.uncorrected.volatile/aggregate.total: 0 expected)",
                        d.index
                    ),
                    "drain the node and reset the GPU (`nvidia-smi -r`); if uncorrected errors come back, replace it",
                );
            } else if d.ecc_mode == Some(false) {
                t.warn(
                    rank,
                    format!("GPU {} ECC off (ecc.mode.current Disabled)", d.index),
                    "turn ECC on (`nvidia-smi -e 1`, then a reset): memory errors go unnoticed without it",
                );
            }
        }
    }
    t.finish(format!(
        "no uncorrected ECC error; corrected: {} since boot, {} in the GPUs' lifetime",
        count(sum(&all, |d| d.ecc_corrected_volatile)),
        count(sum(&all, |d| d.ecc_corrected_aggregate))
    ))
}

/// `gpu-remapped-rows`: no retired page or remapped row pending (a reset
/// applies them), no remapping failure; the counts reported.
pub(crate) fn remapped_rows(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-remapped-rows");
    let mut all: Vec<&GpuHealth> = Vec::new();
    const RESET: &str = "drain the node and reset the GPU (`nvidia-smi -r -i N`, or reboot) to apply it; the GPU's memory is degraded until then";
    for (rank, h) in each(inputs, &mut t) {
        t.ok(rank);
        for d in &h.devices {
            all.push(d);
            let g = d.index;
            if d.remapped_failure == Some(true) {
                t.fail(
                    rank,
                    format!("GPU {g} a row remapping failed (remapped_rows.failure Yes): no spare rows left"),
                    "replace the GPU (RMA): its memory can no longer be repaired",
                );
            }
            if d.remapped_pending == Some(true) {
                t.fail(
                    rank,
                    format!(
                        "GPU {g} row remapping pending (remapped_rows.pending Yes; {} uncorrectable, {} correctable remapped)",
                        count(d.remapped_uncorrectable),
                        count(d.remapped_correctable)
                    ),
                    RESET,
                );
            }
            if d.retired_pending == Some(true) {
                t.fail(
                    rank,
                    format!(
                        "GPU {g} page retirement pending (retired_pages.pending Yes; {} single-bit, {} double-bit retired)",
                        count(d.retired_single_bit),
                        count(d.retired_double_bit)
                    ),
                    RESET,
                );
            }
        }
    }
    t.finish(format!(
        "none pending or failed; remapped rows: {} correctable, {} uncorrectable; retired pages: {} single-bit, {} double-bit",
        count(sum(&all, |d| d.remapped_correctable)),
        count(sum(&all, |d| d.remapped_uncorrectable)),
        count(sum(&all, |d| d.retired_single_bit)),
        count(sum(&all, |d| d.retired_double_bit)),
    ))
}

/// `gpu-persistence`: persistence mode on.
pub(crate) fn persistence(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-persistence");
    for (rank, h) in each(inputs, &mut t) {
        t.ok(rank);
        let off: Vec<String> = h
            .devices
            .iter()
            .filter(|d| d.persistence_mode == Some(false))
            .map(|d| d.index.to_string())
            .collect();
        if !off.is_empty() {
            t.warn(
                rank,
                format!("persistence mode off on GPU {}", off.join(", ")),
                "run nvidia-persistenced (or `nvidia-smi -pm 1` as root): without it the driver unloads between jobs and each start waits for it",
            );
        }
    }
    t.finish("on for every GPU (or not reported)")
}

/// `gpu-pcie`: each link at its maximum generation and width.
pub(crate) fn pcie(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-pcie");
    for (rank, h) in each(inputs, &mut t) {
        t.ok(rank);
        for d in &h.devices {
            let below = |cur: Option<u32>, max: Option<u32>| matches!((cur, max), (Some(c), Some(m)) if c < m);
            let gen_low = below(d.pcie_gen, d.pcie_gen_max);
            let width_low = below(d.pcie_width, d.pcie_width_max);
            if gen_low || width_low {
                let of = |c: Option<u32>, m: Option<u32>| {
                    format!("{} of {}", count(c.map(u64::from)), count(m.map(u64::from)))
                };
                t.warn(
                    rank,
                    format!(
                        "GPU {} PCIe gen {}, width {}",
                        d.index,
                        of(d.pcie_gen, d.pcie_gen_max),
                        of(d.pcie_width, d.pcie_width_max)
                    ),
                    "an idle GPU may lower its link gen to save power: look again under load; a width below its maximum is a seating, riser or BIOS fault",
                );
            }
        }
    }
    t.finish("every GPU's link at its maximum gen and width (or not reported)")
}

/// `gpu-clocks`: no SM clock below its maximum with a hardware, thermal or
/// power reason active (an idle GPU clocks down: not a fault).
pub(crate) fn clocks(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-clocks");
    for (rank, h) in each(inputs, &mut t) {
        t.ok(rank);
        for d in &h.devices {
            let (Some(clock), Some(max), Some(reasons)) =
                (d.sm_clock_mhz, d.sm_clock_max_mhz, &d.reasons)
            else {
                continue;
            };
            let slow: Vec<&str> = reasons
                .iter()
                .map(String::as_str)
                .filter(|r| SLOWDOWNS.contains(r))
                .collect();
            if clock < max && !slow.is_empty() {
                t.warn(
                    rank,
                    format!(
                        "GPU {} SM clock {clock} of {max} MHz ({}%), throttle: {}",
                        d.index,
                        u64::from(clock) * 100 / u64::from(max.max(1)),
                        slow.join(", ")
                    ),
                    "check the GPU's cooling and power (`nvidia-smi -q -d PERFORMANCE`); hw_slowdown is the board's own slowdown signal (power supply, temperature)",
                );
            }
        }
    }
    t.finish("no clock held down by hardware, heat or power")
}

/// `gpu-xid`: the driver's Xid errors since boot, where the kernel log is
/// readable; a node whose log is not readable is skipped, not failed.
pub(crate) fn xid(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-xid");
    let (mut read, mut unread) = (Vec::new(), Vec::new());
    for (rank, h) in each(inputs, &mut t) {
        t.ok(rank);
        if let Some(e) = &h.kernel_log_error {
            unread.push((inputs.host(rank).to_string(), e.clone()));
            continue;
        }
        read.push(inputs.host(rank).to_string());
        let mut seen: Vec<(String, u32, usize, String)> = Vec::new();
        for x in &h.xids {
            let gpu = h
                .devices
                .iter()
                .find(|d| d.bus_id.as_deref().is_some_and(|b| same_pci(&x.pci, b)))
                .map_or(format!("PCI:{}", x.pci), |d| format!("GPU {}", d.index));
            match seen
                .iter_mut()
                .find(|(g, c, _, _)| *g == gpu && *c == x.code)
            {
                Some(s) => {
                    s.2 += 1;
                    s.3.clone_from(&x.text);
                }
                None => seen.push((gpu, x.code, 1, x.text.clone())),
            }
        }
        for (gpu, code, n, text) in seen {
            let detail = format!("{gpu} Xid {code} ({n} since boot, last: {text})");
            if SERIOUS_XIDS.contains(&code) {
                t.fail(
                    rank,
                    detail,
                    "drain the node and reset the GPU; look the Xid up in NVIDIA's Xid catalog",
                );
            } else {
                t.warn(
                    rank,
                    detail,
                    "most often the application's own fault (a bad memory access); look the Xid up in NVIDIA's Xid catalog",
                );
            }
        }
    }
    let fold = |hosts: &[String]| crate::topology::nodeset::fold(hosts);
    let mut ok = Vec::new();
    if !read.is_empty() {
        ok.push(format!("no Xid since boot on {}", fold(&read)));
    }
    for (host, e) in &unread {
        ok.push(format!("kernel log not readable on {host} ({e}): skipped"));
    }
    if ok.is_empty() {
        ok.push("no GPU to check".into());
    }
    t.finish(ok.join("; "))
}

/// `gpu-nvlink`: every NVLink listed is active; none listed: no NVLink.
pub(crate) fn nvlink(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-nvlink");
    let mut links = 0;
    for (rank, h) in each(inputs, &mut t) {
        t.ok(rank);
        if h.nvlink_smi != SmiStatus::Ok {
            t.warn(
                rank,
                h.nvlink_error
                    .clone()
                    .unwrap_or_else(|| "nvidia-smi nvlink --status did not run".into()),
                "run `nvidia-smi nvlink --status` on the node",
            );
            continue;
        }
        links += h.nvlinks.len();
        let mut down: Vec<(u32, Vec<String>)> = Vec::new();
        for l in h.nvlinks.iter().filter(|l| !l.active) {
            match down.iter_mut().find(|(g, _)| *g == l.gpu) {
                Some((_, v)) => v.push(l.link.to_string()),
                None => down.push((l.gpu, vec![l.link.to_string()])),
            }
        }
        for (gpu, ls) in down {
            t.fail(
                rank,
                format!("GPU {gpu} NVLink {} inactive", ls.join(", ")),
                "reset the GPU (and the NVSwitch fabric manager where there is one); drain the node if the link stays inactive",
            );
        }
    }
    t.finish(if links == 0 {
        "no NVLink".to_string()
    } else {
        format!("all {links} NVLinks active")
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{Status, evaluate, failed};
    use crate::check::facts::{GpuHealthFacts, SmiStatus};
    use crate::nvidia_smi::{parse_nvlink, parse_xids};

    fn health(inputs: &mut crate::check::checks::CheckInputs, rank: usize) -> &mut GpuHealthFacts {
        facts(inputs, rank).gpu_health.as_mut().expect("health")
    }

    const GPU_ROWS: [&str; 9] = [
        "gpu-health",
        "gpu-ecc",
        "gpu-remapped-rows",
        "gpu-persistence",
        "gpu-pcie",
        "gpu-clocks",
        "gpu-xid",
        "gpu-nvlink",
        "gpu-speed",
    ];

    #[test]
    fn the_captured_h100_is_healthy_on_every_node() {
        let inputs = h100_cluster(4);
        let results = evaluate(&inputs);
        let names: Vec<&str> = results.iter().map(|r| r.check).collect();
        assert_eq!(names[22..], GPU_ROWS);
        for r in &results {
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
        let detail = |c: &str| row(&inputs, c).detail;
        assert_eq!(detail("gpu-count"), "1 GPU on every node");
        assert_eq!(
            detail("gpu-health"),
            "nvidia-smi reported the health of 4 GPU(s)"
        );
        assert_eq!(
            detail("gpu-ecc"),
            "no uncorrected ECC error; corrected: 0 since boot, 0 in the GPUs' lifetime"
        );
        // An H100 remaps rows; its retired pages are [N/A]: not reported.
        assert_eq!(
            detail("gpu-remapped-rows"),
            "none pending or failed; remapped rows: 0 correctable, 0 uncorrectable; retired pages: not reported single-bit, not reported double-bit"
        );
        // Idle at 345 of 1980 MHz with gpu_idle active: not a fault.
        assert_eq!(
            detail("gpu-clocks"),
            "no clock held down by hardware, heat or power"
        );
        assert_eq!(detail("gpu-xid"), "no Xid since boot on gpu[01-04]");
        assert_eq!(detail("gpu-nvlink"), "no NVLink");
        assert_eq!(row(&inputs, "gpu-ecc").nodes.len(), 4);
        // Without --gpu, none of these rows.
        let mut plain = inputs.clone();
        plain.head.gpu = false;
        assert_eq!(evaluate(&plain).len(), 22);
    }

    #[test]
    fn an_uncorrected_ecc_error_fails_its_node() {
        let mut inputs = h100_cluster(3);
        *health(&mut inputs, 1) = health_from(H100_ECC);
        let r = row(&inputs, "gpu-ecc");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02"]);
        assert_eq!(
            r.detail,
            "GPU 0 2 uncorrected ECC error(s) since boot, 2 in its lifetime (ecc.errors.uncorrected.volatile/aggregate.total: 0 expected) on gpu02"
        );
        assert!(failed(&evaluate(&inputs), false));
        // ECC off warns.
        let mut inputs = h100_cluster(1);
        health(&mut inputs, 0).devices[0].ecc_mode = Some(false);
        let r = row(&inputs, "gpu-ecc");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (
                Status::Warn,
                "GPU 0 ECC off (ecc.mode.current Disabled) on gpu01"
            )
        );
    }

    #[test]
    fn remapped_rows_pending_or_failed_fail() {
        let mut inputs = h100_cluster(2);
        *health(&mut inputs, 1) = health_from(H100_REMAP_PENDING);
        let r = row(&inputs, "gpu-remapped-rows");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(
            r.detail,
            "GPU 0 row remapping pending (remapped_rows.pending Yes; 1 uncorrectable, 0 correctable remapped) on gpu02"
        );
        let d = &mut health(&mut inputs, 0).devices[0];
        d.remapped_failure = Some(true);
        d.retired_pending = Some(true);
        d.retired_double_bit = Some(3);
        let r = row(&inputs, "gpu-remapped-rows");
        assert_eq!(r.nodes, ["gpu01", "gpu02"]);
        assert!(
            r.detail.starts_with(
                "GPU 0 a row remapping failed (remapped_rows.failure Yes): no spare rows left on gpu01; \
                 GPU 0 page retirement pending (retired_pages.pending Yes; not reported single-bit, 3 double-bit retired) on gpu01"
            ),
            "{}",
            r.detail
        );
    }

    #[test]
    fn a_pcie_link_below_its_maximum_warns() {
        let mut inputs = h100_cluster(4);
        *health(&mut inputs, 2) = health_from(H100_PCIE);
        let r = row(&inputs, "gpu-pcie");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.detail, "GPU 0 PCIe gen 3 of 5, width 8 of 16 on gpu03");
        assert!(r.fix.as_deref().is_some_and(|f| f.contains("idle GPU")));
        let results = evaluate(&inputs);
        assert!(!failed(&results, false));
        assert!(failed(&results, true));
    }

    #[test]
    fn a_clock_held_down_under_load_warns_with_its_reason() {
        let mut inputs = h100_cluster(3);
        *health(&mut inputs, 0) = health_from(H100_HW_SLOWDOWN);
        *health(&mut inputs, 2) = health_from(H100_HW_SLOWDOWN);
        let r = row(&inputs, "gpu-clocks");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "GPU 0 SM clock 1095 of 1980 MHz (55%), throttle: hw_slowdown on gpu[01,03]"
        );
        // Below the maximum for an application clock alone: not warned.
        let d = &mut health(&mut inputs, 0).devices[0];
        d.reasons = Some(vec!["applications_clocks_setting".into()]);
        assert_eq!(row(&inputs, "gpu-clocks").nodes, ["gpu03"]);
    }

    #[test]
    fn xids_from_the_kernel_log_or_not_readable() {
        let mut inputs = h100_cluster(3);
        health(&mut inputs, 1).xids = parse_xids(H100_DMESG_XID);
        let h = health(&mut inputs, 2);
        h.kernel_log_error = Some(
            "dmesg failed (exit 1): dmesg: read kernel buffer failed: Operation not permitted"
                .into(),
        );
        let r = row(&inputs, "gpu-xid");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(
            r.detail,
            "GPU 0 Xid 79 (1 since boot, last: GPU has fallen off the bus.) on gpu02"
        );
        // Unreadable is skipped, not failed.
        health(&mut inputs, 1).xids.clear();
        let r = row(&inputs, "gpu-xid");
        assert_eq!(r.status, Status::Ok);
        assert_eq!(
            r.detail,
            "no Xid since boot on gpu[01-02]; kernel log not readable on gpu03 (dmesg failed (exit 1): dmesg: read kernel buffer failed: Operation not permitted): skipped"
        );
        // An application's Xid (13) warns; on a GPU not in the query, by its address.
        health(&mut inputs, 0).xids = parse_xids(
            "[ 9.1] NVRM: Xid (PCI:0000:41:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x5041b0=0x3f0d0d\n\
             [ 9.2] NVRM: Xid (PCI:0000:41:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x5041b0=0x3f0d0e\n",
        );
        let r = row(&inputs, "gpu-xid");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "PCI:0000:41:00 Xid 13 (2 since boot, last: Graphics Exception: ESR 0x5041b0=0x3f0d0e) on gpu01"
        );
    }

    #[test]
    fn an_inactive_nvlink_fails() {
        let mut inputs = h100_cluster(2);
        health(&mut inputs, 1).nvlinks = parse_nvlink(H100_NVLINK_INACTIVE);
        let r = row(&inputs, "gpu-nvlink");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (Status::Fail, "GPU 0 NVLink 2 inactive on gpu02")
        );
        health(&mut inputs, 1).nvlinks[2].active = true;
        assert_eq!(row(&inputs, "gpu-nvlink").detail, "all 4 NVLinks active");
    }

    #[test]
    fn a_hung_health_query_is_named_and_nothing_else_judged() {
        let mut inputs = h100_cluster(2);
        *health(&mut inputs, 1) = GpuHealthFacts {
            smi: SmiStatus::Timeout,
            error: Some("nvidia-smi --query-gpu (health) did not answer in 10 s (killed): a GPU may have fallen off the bus".into()),
            ..GpuHealthFacts::default()
        };
        let r = row(&inputs, "gpu-health");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(
            r.detail,
            "nvidia-smi --query-gpu (health) did not answer in 10 s (killed): a GPU may have fallen off the bus on gpu02"
        );
        for c in &GPU_ROWS[1..] {
            assert_eq!(row(&inputs, c).status, Status::Ok, "{c}");
        }
        // A node without GPUs has nothing to check.
        let f = facts(&mut inputs, 1);
        f.gpus.devices.clear();
        assert_eq!(row(&inputs, "gpu-health").status, Status::Ok);
    }
}
