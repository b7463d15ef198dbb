//! Reading what a GPU node tells of its health, for `check --gpu`: one
//! `--query-gpu` run of the error and link fields with its header
//! (`--format=csv,nounits`), `nvidia-smi nvlink --status`, and the driver's
//! Xid lines in the kernel log. Pure: text in, data out.
//!
//! The header is read, not assumed: `nvidia-smi` renames some fields in it
//! (`clocks.sm` comes back as `clocks.current.sm [MHz]`) and adds units in
//! brackets; a field it cannot give (`[N/A]`, `N/A`, `[Not Supported]`) is
//! absent here, never a fault.

use serde::{Deserialize, Serialize};

use super::devices::reasons;

/// The fields of the health query, in order (a driver of R535 or newer).
pub(crate) const HEALTH_QUERY: &str = "index,pci.bus_id,persistence_mode,ecc.mode.current,\
ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,\
ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total,\
retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,retired_pages.pending,\
remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure,\
pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,\
clocks.sm,clocks.max.sm,clocks_event_reasons.active,utilization.gpu";

/// The event reasons' field as drivers older than R535 name it.
pub(crate) const EVENT_REASONS: &str = "clocks_event_reasons.active";
pub(crate) const THROTTLE_REASONS: &str = "clocks_throttle_reasons.active";

/// One GPU's error and link state. `None`: not reported by this GPU or driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct GpuHealth {
    pub index: u32,
    /// `00000000:00:06.0`.
    pub bus_id: Option<String>,
    pub persistence_mode: Option<bool>,
    pub ecc_mode: Option<bool>,
    pub ecc_corrected_volatile: Option<u64>,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_corrected_aggregate: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    pub retired_single_bit: Option<u64>,
    pub retired_double_bit: Option<u64>,
    pub retired_pending: Option<bool>,
    pub remapped_correctable: Option<u64>,
    pub remapped_uncorrectable: Option<u64>,
    pub remapped_pending: Option<bool>,
    pub remapped_failure: Option<bool>,
    pub pcie_gen: Option<u32>,
    pub pcie_gen_max: Option<u32>,
    pub pcie_width: Option<u32>,
    pub pcie_width_max: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    /// The active clock event (throttle) reasons by name, `gpu_idle`
    /// included; `None` when not reported.
    pub reasons: Option<Vec<String>>,
    pub utilization_pct: Option<u32>,
}

/// A field's name as asked: units dropped, the header's renamings undone,
/// the old name of the event reasons made the new one.
fn field_name(header: &str) -> String {
    let name = header.split(" [").next().unwrap_or(header).trim();
    match name {
        "clocks.current.sm" => "clocks.sm".to_string(),
        THROTTLE_REASONS => EVENT_REASONS.to_string(),
        other => other.to_string(),
    }
}

/// A value, or `None` for what nvidia-smi prints when it has none
/// (`[N/A]`, `N/A`, `[Not Supported]`, `[Unknown Error]`, empty).
fn value(field: &str) -> Option<&str> {
    let f = field.trim();
    (!f.is_empty() && !f.starts_with('[') && f != "N/A").then_some(f)
}

fn yes(field: &str) -> Option<bool> {
    match value(field)? {
        "Enabled" | "Yes" | "Active" => Some(true),
        "Disabled" | "No" | "Not Active" => Some(false),
        _ => None,
    }
}

/// The CSV of `--query-gpu=... --format=csv,nounits`: its header line, then
/// one GPU a line. Columns are found by their header; fields missing from it
/// are absent; a line whose field count differs from the header's is an error.
pub(crate) fn parse_health(csv: &str) -> Result<Vec<GpuHealth>, String> {
    let mut lines = csv.lines().map(str::trim).filter(|l| !l.is_empty());
    let Some(header) = lines.next() else {
        return Ok(Vec::new());
    };
    let names: Vec<String> = header.split(',').map(field_name).collect();
    if !names.iter().any(|n| n == "index") {
        return Err(format!("no header with an index: '{header}'"));
    }
    let mut gpus = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != names.len() {
            return Err(format!(
                "'{line}' has {} fields, the header {}",
                fields.len(),
                names.len()
            ));
        }
        let get = |name: &str| {
            names
                .iter()
                .position(|n| n == name)
                .map_or("", |i| fields[i])
        };
        let num = |name: &str| value(get(name)).and_then(|v| v.parse::<u64>().ok());
        let small = |name: &str| num(name).and_then(|v| u32::try_from(v).ok());
        let index = get("index")
            .parse::<u32>()
            .map_err(|_| format!("'{line}': no GPU index"))?;
        gpus.push(GpuHealth {
            index,
            bus_id: value(get("pci.bus_id")).map(str::to_string),
            persistence_mode: yes(get("persistence_mode")),
            ecc_mode: yes(get("ecc.mode.current")),
            ecc_corrected_volatile: num("ecc.errors.corrected.volatile.total"),
            ecc_uncorrected_volatile: num("ecc.errors.uncorrected.volatile.total"),
            ecc_corrected_aggregate: num("ecc.errors.corrected.aggregate.total"),
            ecc_uncorrected_aggregate: num("ecc.errors.uncorrected.aggregate.total"),
            retired_single_bit: num("retired_pages.single_bit_ecc.count"),
            retired_double_bit: num("retired_pages.double_bit.count"),
            retired_pending: yes(get("retired_pages.pending")),
            remapped_correctable: num("remapped_rows.correctable"),
            remapped_uncorrectable: num("remapped_rows.uncorrectable"),
            remapped_pending: yes(get("remapped_rows.pending")),
            remapped_failure: yes(get("remapped_rows.failure")),
            pcie_gen: small("pcie.link.gen.current"),
            pcie_gen_max: small("pcie.link.gen.max"),
            pcie_width: small("pcie.link.width.current"),
            pcie_width_max: small("pcie.link.width.max"),
            sm_clock_mhz: small("clocks.sm"),
            sm_clock_max_mhz: small("clocks.max.sm"),
            reasons: value(get(EVENT_REASONS))
                .and_then(|m| u64::from_str_radix(m.trim_start_matches("0x"), 16).ok())
                .map(|mask| {
                    let mut r = reasons(mask);
                    if mask & 0x1 != 0 {
                        r.insert(0, "gpu_idle".to_string());
                    }
                    r
                }),
            utilization_pct: small("utilization.gpu"),
        });
    }
    Ok(gpus)
}

/// One NVLink of `nvidia-smi nvlink --status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct NvLink {
    pub gpu: u32,
    pub link: u32,
    /// `<inactive>` is false; a speed (`26.562 GB/s`) is true.
    pub active: bool,
}

/// `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)` then `\t Link 0: 26.562 GB/s`
/// or `\t Link 3: <inactive>`, a GPU after another. Nothing printed: no NVLink.
pub(crate) fn parse_nvlink(text: &str) -> Vec<NvLink> {
    let mut out = Vec::new();
    let mut gpu = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("GPU ") {
            gpu = rest.split(':').next().and_then(|i| i.trim().parse().ok());
        } else if let (Some(g), Some(rest)) = (gpu, line.strip_prefix("Link ")) {
            let Some((link, state)) = rest.split_once(':') else {
                continue;
            };
            let Ok(link) = link.trim().parse() else {
                continue;
            };
            out.push(NvLink {
                gpu: g,
                link,
                active: !state.to_ascii_lowercase().contains("inactive"),
            });
        }
    }
    out
}

/// One Xid of the kernel log: `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Xid {
    /// `0000:3b:00` (domain, bus, device).
    pub pci: String,
    pub code: u32,
    /// What the driver said after the code and the process fields, shortened.
    pub text: String,
}

/// Every Xid line of `dmesg`'s output, in order.
pub(crate) fn parse_xids(log: &str) -> Vec<Xid> {
    log.lines()
        .filter_map(|line| {
            let rest = line.split_once("NVRM: Xid (PCI:")?.1;
            let (pci, rest) = rest.split_once("):")?;
            let (code, text) = rest.split_once(',').unwrap_or((rest, ""));
            let code = code.trim().parse().ok()?;
            // `pid=1234, name=python, Ch 00000010, An uncorrectable ...`:
            // the process fields dropped.
            let text: Vec<&str> = text
                .split(", ")
                .map(str::trim)
                .filter(|p| !p.starts_with("pid=") && !p.starts_with("name="))
                .collect();
            let mut text = text.join(", ");
            if text.chars().count() > 120 {
                text = text.chars().take(117).collect::<String>() + "...";
            }
            Some(Xid {
                pci: pci.trim().to_string(),
                code,
                text,
            })
        })
        .collect()
}

/// Whether an Xid's `PCI:0000:3b:00` and a bus id `00000000:3B:00.0` are one GPU.
pub(crate) fn same_pci(xid_pci: &str, bus_id: &str) -> bool {
    let parts = |s: &str| -> Option<(u32, u32, u32)> {
        let s = s.split('.').next()?;
        let mut it = s.split(':');
        let domain = u32::from_str_radix(it.next()?, 16).ok()?;
        let bus = u32::from_str_radix(it.next()?, 16).ok()?;
        let dev = u32::from_str_radix(it.next()?, 16).ok()?;
        Some((domain, bus, dev))
    };
    matches!((parts(xid_pci), parts(bus_id)), (Some(a), Some(b)) if a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: &str = include_str!("../../tests/fixtures/nvidia-smi/h100-health/health.csv");

    #[test]
    fn the_captured_h100() {
        let gpus = parse_health(H100).expect("parses");
        assert_eq!(
            gpus,
            vec![GpuHealth {
                index: 0,
                bus_id: Some("00000000:00:06.0".into()),
                persistence_mode: Some(true),
                ecc_mode: Some(true),
                ecc_corrected_volatile: Some(0),
                ecc_uncorrected_volatile: Some(0),
                ecc_corrected_aggregate: Some(0),
                ecc_uncorrected_aggregate: Some(0),
                retired_single_bit: None,
                retired_double_bit: None,
                retired_pending: None,
                remapped_correctable: Some(0),
                remapped_uncorrectable: Some(0),
                remapped_pending: Some(false),
                remapped_failure: Some(false),
                pcie_gen: Some(5),
                pcie_gen_max: Some(5),
                pcie_width: Some(16),
                pcie_width_max: Some(16),
                sm_clock_mhz: Some(345),
                sm_clock_max_mhz: Some(1980),
                reasons: Some(vec!["gpu_idle".into()]),
                utilization_pct: Some(0),
            }]
        );
    }

    #[test]
    fn old_names_missing_fields_and_garbage() {
        let csv = "index, clocks_throttle_reasons.active, ecc.mode.current\n\
                   3, 0x0000000000000048, [Not Supported]\n";
        let g = parse_health(csv).expect("parses");
        assert_eq!(
            g[0].reasons,
            Some(vec!["hw_slowdown".into(), "hw_thermal_slowdown".into()])
        );
        assert_eq!((g[0].index, g[0].ecc_mode, g[0].pcie_gen), (3, None, None));
        assert!(parse_health("index, pci.bus_id\n0\n").is_err());
        assert!(parse_health("No devices were found\n").is_err());
        assert!(parse_health("index\nx\n").is_err());
        assert_eq!(parse_health(""), Ok(vec![]));
    }

    #[test]
    fn nvlinks() {
        let text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-35209c12-7658-1fe4-d613-bef705e606f0)\n\
                    \t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n\
                    GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n\t Link 0: 26.562 GB/s\n";
        let links = parse_nvlink(text);
        assert_eq!(links.len(), 3);
        assert_eq!(
            links[1],
            NvLink {
                gpu: 0,
                link: 1,
                active: false
            }
        );
        assert!(links[2].active && links[2].gpu == 1);
        assert!(parse_nvlink("").is_empty());
    }

    #[test]
    fn xids_from_the_kernel_log() {
        let log = include_str!("../../tests/fixtures/nvidia-smi/h100-health/dmesg-xid.txt");
        let x = parse_xids(log);
        assert_eq!(x.len(), 1, "{x:?}");
        assert_eq!(x[0].pci, "0000:00:06");
        assert_eq!(x[0].code, 79);
        assert_eq!(x[0].text, "GPU has fallen off the bus.");
        assert!(same_pci(&x[0].pci, "00000000:00:06.0"));
        assert!(!same_pci(&x[0].pci, "00000000:00:07.0"));
        assert!(parse_xids("[1.3] NVRM: loading NVIDIA UNIX Open Kernel Module").is_empty());
    }
}
