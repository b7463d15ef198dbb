//! `gpu-speed` (`check --gpu`): each GPU's bf16 matmul TFLOPs and pinned
//! host-to-device and device-to-host GB/s, judged two ways: against the
//! GPU model's floor of [`REFERENCE`] (docs/check.md gives each row's
//! source), and against the job's median of the same model, slow being
//! more than [`MEDIAN_MARGIN`] below it. Slow warns; a node where the probe
//! was skipped (no torch) says so in one line and is not judged.

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Tally};

/// Slow against the job: below the median of the same GPU model by more than this.
pub(crate) const MEDIAN_MARGIN: f64 = 0.10;

/// A GPU model's floors: below one is slow. `name` as `nvidia-smi` and
/// torch give it.
pub(crate) struct Reference {
    pub name: &'static str,
    pub matmul_tflops: f64,
    pub h2d_gbs: f64,
    pub d2h_gbs: f64,
}

/// The floors, docs/check.md's table with the source of each: the H100's
/// matmul and D2H are 85% of what this project measured on one
/// (748.8 TFLOPs, 55.3 GB/s; bench/gpu/results/h100-health-probe-2026-12-07),
/// its H2D is Azure's published health check (`check_cuda_bw 52`).
pub(crate) const REFERENCE: [Reference; 1] = [Reference {
    name: "NVIDIA H100 80GB HBM3",
    matmul_tflops: 636.5,
    h2d_gbs: 52.0,
    d2h_gbs: 47.0,
}];

struct Measure {
    label: &'static str,
    unit: &'static str,
    get: fn(&crate::check::facts::GpuSpeed) -> f64,
    floor: fn(&Reference) -> f64,
}

const MEASURES: [Measure; 3] = [
    Measure {
        label: "matmul",
        unit: "TFLOPs",
        get: |g| g.matmul_tflops,
        floor: |r| r.matmul_tflops,
    },
    Measure {
        label: "H2D",
        unit: "GB/s",
        get: |g| g.h2d_gbs,
        floor: |r| r.h2d_gbs,
    },
    Measure {
        label: "D2H",
        unit: "GB/s",
        get: |g| g.d2h_gbs,
        floor: |r| r.d2h_gbs,
    },
];

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// `gpu-speed`.
pub(crate) fn gpu_speed(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "gpu-speed");
    // Every measured GPU: (rank, the nvidia-smi index, its speed).
    let mut all = Vec::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    for (n, f) in inputs.answered() {
        t.ok(n.rank);
        let Some(s) = f.gpu_speed.as_ref().filter(|_| !f.gpus.devices.is_empty()) else {
            continue;
        };
        if let Some(e) = &s.error {
            t.warn(
                n.rank,
                e.clone(),
                "run the probe by hand: `multinode check --local --gpu` on the node",
            );
        } else if let Some(why) = &s.skipped {
            skipped.push((n.host.clone(), why.clone()));
        }
        for g in &s.gpus {
            let index = f
                .gpus
                .devices
                .get(g.ordinal as usize)
                .map_or(g.ordinal, |d| d.index);
            all.push((n.rank, index, g));
        }
    }
    for m in &MEASURES {
        for (rank, index, g) in &all {
            let value = (m.get)(g);
            let peers: Vec<f64> = all
                .iter()
                .filter(|(_, _, o)| o.name == g.name)
                .map(|(_, _, o)| (m.get)(o))
                .collect();
            let mut why = Vec::new();
            if let Some(r) = REFERENCE.iter().find(|r| r.name == g.name) {
                let floor = (m.floor)(r);
                if value < floor {
                    why.push(format!("below the {} floor of {floor} {}", r.name, m.unit));
                }
            }
            if let Some(med) = median(peers).filter(|_| all.len() > 1)
                && value < med * (1.0 - MEDIAN_MARGIN)
            {
                why.push(format!(
                    "{:.0}% of the job's median {med:.1} {}",
                    value / med * 100.0,
                    m.unit
                ));
            }
            if !why.is_empty() {
                t.warn(
                    *rank,
                    format!(
                        "GPU {index} {} {value:.1} {}: {}",
                        m.label,
                        m.unit,
                        why.join(", ")
                    ),
                    "look at `gpu-clocks` (throttle reasons) and `gpu-pcie` for that GPU, and at other processes on it (`nvidia-smi`); drain the node if it stays slow",
                );
            }
        }
    }
    let mut ok = Vec::new();
    if !all.is_empty() {
        let med = |get: fn(&crate::check::facts::GpuSpeed) -> f64| {
            median(all.iter().map(|(_, _, g)| get(g)).collect()).unwrap_or(0.0)
        };
        ok.push(format!(
            "median of {} GPU(s): matmul {:.1} TFLOPs, H2D {:.1} GB/s, D2H {:.1} GB/s",
            all.len(),
            med(MEASURES[0].get),
            med(MEASURES[1].get),
            med(MEASURES[2].get)
        ));
    }
    for (host, why) in skipped {
        ok.push(format!("skipped on {host}: {why}"));
    }
    if ok.is_empty() {
        ok.push("no GPU measured".into());
    }
    t.finish(ok.join("; "))
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::fixtures::*;
    use crate::check::facts::{GpuSpeed, GpuSpeedFacts};

    fn measured(tflops: f64, h2d: f64, d2h: f64) -> Option<GpuSpeedFacts> {
        Some(GpuSpeedFacts {
            torch: Some("2.11.0+cu130".into()),
            gpus: vec![GpuSpeed {
                ordinal: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                matmul_tflops: tflops,
                h2d_gbs: h2d,
                d2h_gbs: d2h,
            }],
            ..GpuSpeedFacts::default()
        })
    }

    #[test]
    fn the_h100_as_measured_is_fast_and_a_hogged_one_is_named() {
        let mut inputs = h100_cluster(4);
        for rank in 0..4 {
            facts(&mut inputs, rank).gpu_speed = measured(748.8, 54.9, 55.3);
        }
        let r = row(&inputs, "gpu-speed");
        assert_eq!(r.status, Status::Ok);
        assert_eq!(
            r.detail,
            "median of 4 GPU(s): matmul 748.8 TFLOPs, H2D 54.9 GB/s, D2H 55.3 GB/s"
        );
        // Another process hammers gpu03's GPU.
        facts(&mut inputs, 2).gpu_speed = measured(412.0, 54.1, 55.0);
        let r = row(&inputs, "gpu-speed");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu03"]);
        assert_eq!(
            r.detail,
            "GPU 0 matmul 412.0 TFLOPs: below the NVIDIA H100 80GB HBM3 floor of 636.5 TFLOPs, 55% of the job's median 748.8 TFLOPs on gpu03"
        );
    }

    #[test]
    fn a_model_without_a_row_is_judged_against_its_peers_only() {
        let mut inputs = h100_cluster(3);
        for (rank, h2d) in [(0, 20.0), (1, 25.0), (2, 25.5)] {
            let mut s = measured(300.0, h2d, 25.0);
            s.as_mut().expect("some").gpus[0].name = "NVIDIA L4".into();
            facts(&mut inputs, rank).gpu_speed = s;
        }
        let r = row(&inputs, "gpu-speed");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "GPU 0 H2D 20.0 GB/s: 80% of the job's median 25.0 GB/s on gpu01"
        );
    }

    #[test]
    fn skipped_nodes_say_why_in_one_line() {
        let mut inputs = h100_cluster(2);
        facts(&mut inputs, 0).gpu_speed = measured(748.8, 54.9, 55.3);
        facts(&mut inputs, 1).gpu_speed = Some(GpuSpeedFacts {
            skipped: Some(
                "no torch beside the job's python3 (PATH, VIRTUAL_ENV, CONDA_PREFIX)".into(),
            ),
            ..GpuSpeedFacts::default()
        });
        let r = row(&inputs, "gpu-speed");
        assert_eq!(r.status, Status::Ok);
        assert_eq!(
            r.detail,
            "median of 1 GPU(s): matmul 748.8 TFLOPs, H2D 54.9 GB/s, D2H 55.3 GB/s; skipped on gpu02: no torch beside the job's python3 (PATH, VIRTUAL_ENV, CONDA_PREFIX)"
        );
        facts(&mut inputs, 1).gpu_speed = Some(GpuSpeedFacts {
            error: Some("the speed probe did not finish in 20 s (killed)".into()),
            ..GpuSpeedFacts::default()
        });
        let r = row(&inputs, "gpu-speed");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (
                Status::Warn,
                "the speed probe did not finish in 20 s (killed) on gpu02"
            )
        );
    }
}
