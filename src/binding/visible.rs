//! The GPUs a process sees, in CUDA's order: `CUDA_VISIBLE_DEVICES` read
//! as CUDA reads it, against `nvidia-smi`'s list. Pure.
//!
//! An entry is an index (`3`), a UUID (`GPU-5b2e1c3d-...`) or a prefix of
//! one that names a single GPU (`GPU-5b2e`). The list ends at the first
//! entry that names no GPU, names several, or names one already listed (CUDA
//! ignores the rest); a set but empty value hides every GPU. Unset: every GPU,
//! in `nvidia-smi`'s order. (`MIG-...` entries name no whole GPU and end the
//! list here: a MIG instance's NUMA node is its GPU's, which its UUID does not tell.)

use crate::nvidia_smi::PciGpu;

/// The visible GPUs in CUDA's order; entry i is local rank i's.
pub(crate) fn visible<'a>(
    gpus: &'a [PciGpu],
    cuda_visible_devices: Option<&str>,
) -> Vec<&'a PciGpu> {
    let Some(list) = cuda_visible_devices else {
        return gpus.iter().collect();
    };
    let mut seen: Vec<&PciGpu> = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let Some(gpu) = named(gpus, entry) else {
            break;
        };
        if seen.iter().any(|g| g.index == gpu.index) {
            break;
        }
        seen.push(gpu);
    }
    seen
}

/// The one GPU `entry` names, by index or by (a unique prefix of) its UUID.
fn named<'a>(gpus: &'a [PciGpu], entry: &str) -> Option<&'a PciGpu> {
    if entry.starts_with("GPU-") {
        let mut matches = gpus.iter().filter(|g| {
            g.uuid
                .get(..entry.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(entry))
        });
        let first = matches.next()?;
        return matches.next().is_none().then_some(first);
    }
    let index = entry.parse::<u32>().ok()?;
    gpus.iter().find(|g| g.index == index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus() -> Vec<PciGpu> {
        [
            "GPU-0f7d9a57-8d6c-7b51-2c6e-3f0d1a2b3c4d",
            "GPU-5b2e1c3d-4a5f-6e7d-8c9b-0a1b2c3d4e5f",
            "GPU-5b9a0c11-2d3e-4f50-6172-8394a5b6c7d8",
            "GPU-c3d4e5f6-a7b8-c9d0-e1f2-a3b4c5d6e7f8",
        ]
        .iter()
        .enumerate()
        .map(|(i, uuid)| PciGpu {
            index: i as u32,
            uuid: uuid.to_string(),
            bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x10),
        })
        .collect()
    }

    fn indices(gpus: &[PciGpu], cvd: Option<&str>) -> Vec<u32> {
        visible(gpus, cvd).iter().map(|g| g.index).collect()
    }

    #[test]
    fn unset_is_every_gpu_in_order() {
        assert_eq!(indices(&gpus(), None), [0, 1, 2, 3]);
    }

    #[test]
    fn indices_in_the_given_order() {
        assert_eq!(indices(&gpus(), Some("3,1")), [3, 1]);
        assert_eq!(indices(&gpus(), Some(" 2 , 0 ")), [2, 0]);
        assert_eq!(indices(&gpus(), Some("")), Vec::<u32>::new());
    }

    #[test]
    fn uuids_and_unique_prefixes_reordered() {
        let g = gpus();
        assert_eq!(
            indices(
                &g,
                Some(
                    "GPU-c3d4e5f6-a7b8-c9d0-e1f2-a3b4c5d6e7f8,GPU-0f7d9a57-8d6c-7b51-2c6e-3f0d1a2b3c4d"
                )
            ),
            [3, 0]
        );
        assert_eq!(indices(&g, Some("GPU-5b2e,GPU-c3")), [1, 3]);
        assert_eq!(
            indices(&g, Some("GPU-c3,1")),
            [3, 1],
            "UUIDs and indices mixed"
        );
    }

    #[test]
    fn the_list_ends_where_cuda_stops_reading() {
        let g = gpus();
        assert_eq!(indices(&g, Some("1,7,2")), [1], "no GPU 7");
        assert_eq!(indices(&g, Some("0,GPU-5b,2")), [0], "GPU-5b names two");
        assert_eq!(indices(&g, Some("2,2,3")), [2], "a GPU twice");
        assert_eq!(
            indices(&g, Some("MIG-0f7d9a57-8d6c-7b51-2c6e-3f0d1a2b3c4d")),
            Vec::<u32>::new()
        );
        assert_eq!(indices(&g, Some("GPU-ffff")), Vec::<u32>::new());
    }
}
