//! Reading `nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader`
//! for binding: each GPU's index, UUID (what `CUDA_VISIBLE_DEVICES` may
//! name) and PCI bus id (where sysfs tells its NUMA node). Pure.

/// One GPU as [`PCI_QUERY`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PciGpu {
    pub index: u32,
    /// `GPU-3a1f1cf2-...`.
    pub uuid: String,
    /// As nvidia-smi writes it: an 8-digit domain, upper case (`00000000:07:00.0`).
    pub bus_id: String,
}

/// The fields asked of `nvidia-smi --query-gpu`, in order.
pub(crate) const PCI_QUERY: &str = "index,uuid,pci.bus_id";

/// One GPU a line: `0, GPU-3a1f1cf2-1d4d-6b45-7a3e-0f2c4e5d6a7b, 00000000:07:00.0`.
pub(crate) fn parse_pci(csv: &str) -> Result<Vec<PciGpu>, String> {
    let mut gpus = Vec::new();
    for (n, line) in csv.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = || format!("line {}: '{line}' is not 'index, uuid, pci.bus_id'", n + 1);
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [index, uuid, bus_id] = fields.as_slice() else {
            return Err(bad());
        };
        gpus.push(PciGpu {
            index: index.parse().map_err(|_| bad())?,
            uuid: uuid.to_string(),
            bus_id: bus_id.to_string(),
        });
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nvidia_smis_lines() {
        let csv = "0, GPU-0f7d9a57-8d6c-7b51-2c6e-3f0d1a2b3c4d, 00000000:18:00.0\n\
                   1, GPU-5b2e1c3d-4a5f-6e7d-8c9b-0a1b2c3d4e5f, 00000000:2A:00.0\n";
        let gpus = parse_pci(csv).expect("two GPUs");
        assert_eq!(gpus.len(), 2);
        assert_eq!(
            gpus[1],
            PciGpu {
                index: 1,
                uuid: "GPU-5b2e1c3d-4a5f-6e7d-8c9b-0a1b2c3d4e5f".into(),
                bus_id: "00000000:2A:00.0".into(),
            }
        );
        assert_eq!(parse_pci("").expect("none"), []);
    }

    #[test]
    fn other_output_is_an_error() {
        let err = parse_pci("NVIDIA-SMI has failed because it couldn't communicate")
            .expect_err("not CSV");
        assert!(err.starts_with("line 1: "), "{err}");
        assert!(parse_pci("x, GPU-1, 00000000:18:00.0").is_err());
    }
}
