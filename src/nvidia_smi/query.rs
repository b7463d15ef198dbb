//! Reading `nvidia-smi` for `check`: the CSV of
//! `--query-gpu=index,name,driver_version,compute_cap --format=csv,noheader`
//! and the driver and CUDA versions of its header. Pure: text in, data out.

use serde::{Deserialize, Serialize};

/// One GPU as `--query-gpu` lists it (a fact `check` reports).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Gpu {
    pub index: u32,
    pub name: String,
    pub driver_version: String,
    /// `9.0`; `None` when the driver is too old to report it.
    pub compute_cap: Option<String>,
}

/// The fields asked of `nvidia-smi --query-gpu`, in order.
pub(crate) const QUERY: &str = "index,name,driver_version,compute_cap";
/// The same without `compute_cap`, which drivers older than R510 refuse.
pub(crate) const QUERY_OLD: &str = "index,name,driver_version";

/// One GPU a line: `0, NVIDIA H200, 580.159.04, 9.0`. Three fields (no
/// compute capability) are accepted for old drivers; a name may hold commas.
pub(crate) fn parse_query(csv: &str) -> Result<Vec<Gpu>, String> {
    let mut gpus = Vec::new();
    for (n, line) in csv.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = || {
            format!(
                "line {}: '{line}' is not 'index, name, driver, compute_cap'",
                n + 1
            )
        };
        let (index, name, driver, cap) = match fields.as_slice() {
            [index, middle @ .., driver, cap] if !middle.is_empty() && looks_like_cap(cap) => {
                (*index, middle.join(", "), *driver, Some(*cap))
            }
            [index, middle @ .., driver] if !middle.is_empty() => {
                (*index, middle.join(", "), *driver, None)
            }
            _ => return Err(bad()),
        };
        let index = index.parse::<u32>().map_err(|_| bad())?;
        gpus.push(Gpu {
            index,
            name,
            driver_version: driver.to_string(),
            compute_cap: cap.and_then(known).map(String::from),
        });
    }
    Ok(gpus)
}

/// The GPUs the job's processes see: `nvidia-smi` lists every GPU of the
/// node, CUDA only those `CUDA_VISIBLE_DEVICES` names. As CUDA reads it, the
/// list ends at the first entry that names no GPU, and an empty value hides
/// them all. Entries by UUID (`GPU-...`, `MIG-...`) cannot be matched to the
/// query's indices: then every GPU is kept, as `nvidia-smi` shows them.
pub(crate) fn visible(devices: Vec<Gpu>, cuda_visible_devices: Option<&str>) -> Vec<Gpu> {
    let Some(list) = cuda_visible_devices else {
        return devices;
    };
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    if entries
        .iter()
        .any(|e| e.starts_with("GPU-") || e.starts_with("MIG-"))
    {
        return devices;
    }
    let mut seen = Vec::new();
    for entry in entries {
        let Some(gpu) = entry
            .parse::<u32>()
            .ok()
            .and_then(|i| devices.iter().find(|d| d.index == i))
        else {
            break;
        };
        if seen.iter().any(|g: &Gpu| g.index == gpu.index) {
            break;
        }
        seen.push(gpu.clone());
    }
    seen
}

/// `9.0`, or what nvidia-smi prints when it has no value (`[N/A]`).
fn looks_like_cap(field: &str) -> bool {
    field.starts_with('[') || parse_dotted(field).is_some()
}

/// A value, not one of nvidia-smi's `[N/A]`, `[Not Supported]`.
fn known(field: &str) -> Option<&str> {
    (!field.starts_with('[') && !field.is_empty()).then_some(field)
}

/// `9.0` as (9, 0).
pub(crate) fn parse_dotted(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = match parts.next() {
        Some(m) => m.parse().ok()?,
        None => 0,
    };
    Some((major, minor))
}

/// The driver and CUDA versions from `nvidia-smi`'s header
/// (`| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |`)
/// or from `nvidia-smi --version` (`CUDA Version        : 13.0`).
pub(crate) fn parse_header(text: &str) -> (Option<String>, Option<String>) {
    (
        value_after(text, "driver version"),
        value_after(text, "cuda version"),
    )
}

/// The version number after `label` (matched case-insensitively), skipping
/// spaces and a colon.
fn value_after(text: &str, label: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let start = lower.find(label)? + label.len();
    let rest = text[start..].trim_start_matches([' ', '\t', ':']);
    let value: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    (!value.is_empty()).then_some(value)
}

/// The first non-empty line of a failing `nvidia-smi`'s output, for messages.
pub(crate) fn first_line(stdout: &str, stderr: &str) -> String {
    stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: &str = include_str!("../../tests/fixtures/nvidia-smi/h200-8gpu/query.csv");
    const H200_HEADER: &str =
        include_str!("../../tests/fixtures/nvidia-smi/h200-8gpu/nvidia-smi.txt");
    const H200_1: &str = include_str!("../../tests/fixtures/nvidia-smi/h200-1gpu/query.csv");
    const H200_1_HEADER: &str =
        include_str!("../../tests/fixtures/nvidia-smi/h200-1gpu/nvidia-smi.txt");
    const OLD: &str = include_str!("../../tests/fixtures/nvidia-smi/h200-570/query.csv");
    const OLD_HEADER: &str =
        include_str!("../../tests/fixtures/nvidia-smi/h200-570/nvidia-smi.txt");
    const FOUR: &str = include_str!("../../tests/fixtures/nvidia-smi/h200-4gpu-575/query.csv");
    const FOUR_HEADER: &str =
        include_str!("../../tests/fixtures/nvidia-smi/h200-4gpu-575/nvidia-smi.txt");
    const VERSION: &str = include_str!("../../tests/fixtures/nvidia-smi/h200-1gpu/version.txt");

    #[test]
    fn visible_devices_as_cuda_reads_them() {
        let all = parse_query(FOUR).expect("parses");
        let idx = |v: Vec<Gpu>| v.iter().map(|g| g.index).collect::<Vec<_>>();
        assert_eq!(idx(visible(all.clone(), None)), vec![0, 1, 2, 3]);
        assert_eq!(idx(visible(all.clone(), Some("1"))), vec![1]);
        assert_eq!(idx(visible(all.clone(), Some("3,0"))), vec![3, 0]);
        // The list ends at the first entry that names no GPU.
        assert_eq!(idx(visible(all.clone(), Some("0,7,1"))), vec![0]);
        assert_eq!(idx(visible(all.clone(), Some("2,-1,1"))), vec![2]);
        assert_eq!(idx(visible(all.clone(), Some(""))), Vec::<u32>::new());
        assert_eq!(
            idx(visible(all.clone(), Some("NoDevFiles"))),
            Vec::<u32>::new()
        );
        // UUIDs cannot be matched to indices: every GPU stays.
        assert_eq!(
            idx(visible(
                all,
                Some("GPU-5a1b2c3d-0000-1111-2222-333344445555")
            )),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn h200_query_and_header() {
        let gpus = parse_query(H200).expect("parses");
        assert_eq!(gpus.len(), 8);
        for (i, gpu) in gpus.iter().enumerate() {
            assert_eq!(gpu.index, i as u32);
            assert_eq!(gpu.name, "NVIDIA H200");
            assert_eq!(gpu.driver_version, "580.159.04");
            assert_eq!(gpu.compute_cap.as_deref(), Some("9.0"));
        }
        assert_eq!(
            parse_header(H200_HEADER),
            (Some("580.159.04".into()), Some("13.0".into()))
        );
    }

    #[test]
    fn captured_single_h200() {
        assert_eq!(
            parse_query(H200_1).expect("parses"),
            vec![Gpu {
                index: 0,
                name: "NVIDIA H200".into(),
                driver_version: "580.159.04".into(),
                compute_cap: Some("9.0".into()),
            }]
        );
        assert_eq!(
            parse_header(H200_1_HEADER),
            (Some("580.159.04".into()), Some("13.0".into()))
        );
        assert_eq!(
            parse_header(VERSION),
            (Some("580.159.04".into()), Some("13.0".into()))
        );
    }

    #[test]
    fn mismatched_nodes() {
        let old = parse_query(OLD).expect("parses");
        assert_eq!(old.len(), 8);
        assert!(old.iter().all(|g| g.driver_version == "570.172.08"));
        assert_eq!(
            parse_header(OLD_HEADER),
            (Some("570.172.08".into()), Some("12.8".into()))
        );
        let four = parse_query(FOUR).expect("parses");
        assert_eq!(four.len(), 4);
        assert_eq!(
            parse_header(FOUR_HEADER),
            (Some("575.57.08".into()), Some("12.9".into()))
        );
    }

    #[test]
    fn old_drivers_names_with_commas_and_missing_values() {
        let gpus = parse_query("0, Tesla V100-SXM2-16GB, 470.82.01\n").expect("three fields");
        assert_eq!(gpus[0].compute_cap, None);
        assert_eq!(gpus[0].name, "Tesla V100-SXM2-16GB");
        let gpus = parse_query("3, Odd, Name, 535.1, [N/A]\n").expect("parses");
        assert_eq!(gpus[0].name, "Odd, Name");
        assert_eq!(gpus[0].index, 3);
        assert_eq!(gpus[0].compute_cap, None);
        assert_eq!(parse_query("\n\n").expect("empty"), vec![]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse_query("No devices were found").is_err());
        assert!(parse_query("x, NVIDIA H200, 580.1, 9.0").is_err());
        assert_eq!(parse_header("nothing here"), (None, None));
        assert_eq!(parse_header("CUDA Version: N/A"), (None, None));
    }

    #[test]
    fn failure_messages() {
        let msg = include_str!("../../tests/fixtures/nvidia-smi/no-driver.txt");
        assert_eq!(
            first_line(msg, ""),
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
        );
        assert_eq!(first_line("", "\n  err  \n"), "err");
        assert_eq!(first_line("", ""), "no output");
    }

    #[test]
    fn dotted_versions() {
        assert_eq!(parse_dotted("9.0"), Some((9, 0)));
        assert_eq!(parse_dotted("12"), Some((12, 0)));
        assert_eq!(parse_dotted("12.8.1"), Some((12, 8)));
        assert_eq!(parse_dotted("x.1"), None);
        assert_eq!(parse_dotted(""), None);
    }
}
