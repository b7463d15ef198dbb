//! Reading `nvidia-smi` for `top`: each GPU's utilisation, memory, power,
//! SM clock against its maximum, and the reasons its clocks are held down
//! (`clocks_event_reasons.active`, called `clocks_throttle_reasons.active`
//! by drivers older than R535). Pure: text in, data out.

use serde::{Deserialize, Serialize};

/// One GPU as `top` shows it. A value `nvidia-smi` cannot give
/// (`[N/A]`, `[Not Supported]`) is absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuDevice {
    pub index: u32,
    pub uuid: String,
    pub utilization_pct: Option<u32>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    /// The active reasons by name (`sw_power_cap`, `hw_slowdown`, ...),
    /// `gpu_idle` left out; empty: none, or unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub throttle: Vec<String>,
}

/// The fields asked, in order; the last one as newer drivers name it.
pub(crate) const DEVICE_QUERY: &str = "index,uuid,utilization.gpu,memory.used,memory.total,power.draw,clocks.sm,clocks.max.sm,clocks_event_reasons.active";
/// The same for drivers older than R535, which know only the old name.
pub(crate) const DEVICE_QUERY_OLD: &str = "index,uuid,utilization.gpu,memory.used,memory.total,power.draw,clocks.sm,clocks.max.sm,clocks_throttle_reasons.active";

/// NVML's `nvmlClocksEventReason*` bits (`nvml.h`), by the name `top` prints.
const REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The reasons of a mask such as `0x0000000000000004`, without `gpu_idle`
/// (an idle GPU is not slowed); an unknown bit by its value.
pub(crate) fn reasons(mask: u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = mask & !0x1;
    for (bit, name) in REASONS {
        if mask & bit != 0 && bit != 0x1 {
            out.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        out.push(format!("0x{rest:x}"));
    }
    out
}

fn number<T: std::str::FromStr>(field: Option<&str>) -> Option<T> {
    field?.trim().parse().ok()
}

/// One GPU a line of `--format=csv,noheader,nounits`; lines that do not
/// start with an index are skipped.
pub(crate) fn parse_devices(csv: &str) -> Vec<GpuDevice> {
    csv.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let index = number(f.first().copied())?;
            let mask = f
                .get(8)
                .and_then(|m| u64::from_str_radix(m.trim_start_matches("0x"), 16).ok());
            Some(GpuDevice {
                index,
                uuid: f.get(1).map(|s| s.to_string()).unwrap_or_default(),
                utilization_pct: number(f.get(2).copied()),
                memory_used_mib: number(f.get(3).copied()),
                memory_total_mib: number(f.get(4).copied()),
                power_w: number(f.get(5).copied()),
                sm_clock_mhz: number(f.get(6).copied()),
                sm_clock_max_mhz: number(f.get(7).copied()),
                throttle: mask.map(reasons).unwrap_or_default(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_field_and_names_the_reasons() {
        // As an H100 driver prints `--query-gpu=... --format=csv,noheader,nounits`.
        let csv = "0, GPU-5f0e6b1c-0000-0000-0000-000000000000, 100, 40213, 81559, 512.33, 1980, 1980, 0x0000000000000000\n\
                   1, GPU-77aa0000-0000-0000-0000-000000000001, 97, 40100, 81559, 349.10, 1410, 1980, 0x0000000000000044\n\
                   2, GPU-77aa0000-0000-0000-0000-000000000002, 0, 0, 81559, [N/A], 345, 1980, 0x0000000000000001\n";
        let gpus = parse_devices(csv);
        assert_eq!(gpus.len(), 3);
        assert_eq!(gpus[0].sm_clock_mhz, Some(1980));
        assert_eq!(gpus[0].power_w, Some(512.33));
        assert!(gpus[0].throttle.is_empty());
        assert_eq!(gpus[1].throttle, ["sw_power_cap", "hw_thermal_slowdown"]);
        assert_eq!(gpus[1].memory_used_mib, Some(40100));
        assert_eq!(gpus[2].power_w, None);
        assert!(gpus[2].throttle.is_empty(), "idle is not a slowdown");
        assert!(parse_devices("No devices were found\n").is_empty());
        assert_eq!(reasons(0x1000), ["0x1000"]);
    }
}
