//! The speed probe of `multinode check --local --gpu`: `gpu_speed.py`
//! (carried in the binary) run by the job's own `python3`, the one whose
//! packages hold PyTorch, within [`SPEED_TIMEOUT`]. Where no torch is found
//! beside the job's `python3`, nothing runs: skipped with one line.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::facts::{GpuSpeed, GpuSpeedFacts};
use super::gpu_stack::torch_packages;
use super::probe::{Probe, RunOutput};
use crate::env_map::EnvMap;
use crate::nvidia_smi::first_line;

/// The probe's text, run as `python3 -c`.
pub(crate) const SPEED_PY: &str = include_str!("gpu_speed.py");
/// Its limit: torch's import and CUDA's start take seconds, the measures
/// well under one a GPU on an H100; within `check`'s 30 s a node.
pub(crate) const SPEED_TIMEOUT: Duration = Duration::from_secs(20);

/// What the probe prints: one JSON line.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Printed {
    skipped: Option<String>,
    torch: Option<String>,
    gpus: Vec<GpuSpeed>,
}

/// The python of a `ROOT/lib/python3.X/site-packages` folder: `ROOT/bin/python3`.
fn python_of(packages: &Path) -> Option<std::path::PathBuf> {
    Some(packages.parent()?.parent()?.parent()?.join("bin/python3"))
}

/// Runs the probe with the job's python, or says why not.
pub(super) fn gpu_speed(probe: &dyn Probe, env: &EnvMap) -> GpuSpeedFacts {
    let Some(python) = torch_packages(probe, env)
        .as_deref()
        .and_then(python_of)
        .filter(|p| probe.exists(p))
    else {
        return GpuSpeedFacts {
            skipped: Some(
                "no torch beside the job's python3 (PATH, VIRTUAL_ENV, CONDA_PREFIX)".into(),
            ),
            ..GpuSpeedFacts::default()
        };
    };
    let shown = python.display().to_string();
    let mut facts = GpuSpeedFacts {
        python: Some(shown.clone()),
        ..GpuSpeedFacts::default()
    };
    match probe.run(&shown, &["-B", "-c", SPEED_PY], SPEED_TIMEOUT) {
        RunOutput::Exited {
            code: Some(0),
            stdout,
            ..
        } => match stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .map(serde_json::from_str::<Printed>)
        {
            Some(Ok(p)) => {
                facts.skipped = p.skipped;
                facts.torch = p.torch;
                facts.gpus = p.gpus;
            }
            Some(Err(e)) => facts.error = Some(format!("unreadable speed probe output: {e}")),
            None => facts.error = Some("the speed probe printed nothing".into()),
        },
        RunOutput::Exited {
            code,
            stdout,
            stderr,
        } => {
            let how = crate::process::how_it_ended(code);
            let last = stderr
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map_or_else(|| first_line(&stdout, ""), str::to_string);
            facts.error = Some(format!("the speed probe failed ({how}): {last}"));
        }
        RunOutput::TimedOut => {
            facts.error = Some(format!(
                "the speed probe did not finish in {} s (killed)",
                SPEED_TIMEOUT.as_secs()
            ));
        }
        RunOutput::NotFound => facts.skipped = Some(format!("{shown} not found")),
        RunOutput::SpawnError(e) => facts.error = Some(format!("cannot run {shown}: {e}")),
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::super::probe::fake::{FakeProbe, printed};
    use super::*;
    use crate::topology::machine::fake::env;

    fn with_torch() -> FakeProbe {
        FakeProbe::default()
            .program("/venv/bin/python3", printed(""))
            .file("/venv/bin/python3", "")
            .dir("/venv/lib", &["python3.12"])
            .file(
                "/venv/lib/python3.12/site-packages/torch/version.py",
                "__version__ = '2.11.0+cu130'\n",
            )
    }

    fn cmd() -> String {
        format!("/venv/bin/python3 -B -c {SPEED_PY}")
    }

    #[test]
    fn the_h100_as_measured() {
        let out = "{\"torch\": \"2.11.0+cu130\", \"gpus\": [{\"ordinal\": 0, \"name\": \"NVIDIA H100 80GB HBM3\", \"matmul_tflops\": 748.8, \"h2d_gbs\": 54.9, \"d2h_gbs\": 55.3}]}\n";
        let probe = with_torch().program(&cmd(), printed(out));
        let f = gpu_speed(&probe, &env(&[("PATH", "/venv/bin:/usr/bin")]));
        assert_eq!(f.python.as_deref(), Some("/venv/bin/python3"));
        assert_eq!(f.torch.as_deref(), Some("2.11.0+cu130"));
        assert_eq!((f.skipped, f.error), (None, None));
        assert_eq!(f.gpus[0].matmul_tflops, 748.8);
        assert_eq!(f.gpus[0].d2h_gbs, 55.3);
    }

    #[test]
    fn skipped_without_torch_killed_at_its_limit() {
        let f = gpu_speed(&FakeProbe::default(), &env(&[("PATH", "/usr/bin")]));
        assert_eq!(
            f.skipped.as_deref(),
            Some("no torch beside the job's python3 (PATH, VIRTUAL_ENV, CONDA_PREFIX)")
        );
        let probe = with_torch().program(&cmd(), RunOutput::TimedOut);
        let f = gpu_speed(&probe, &env(&[("PATH", "/venv/bin")]));
        assert_eq!(
            f.error.as_deref(),
            Some("the speed probe did not finish in 20 s (killed)")
        );
        let probe = with_torch().program(
            &cmd(),
            printed("{\"skipped\": \"torch 2.11.0+cpu sees no CUDA GPU\"}\n"),
        );
        let f = gpu_speed(&probe, &env(&[("PATH", "/venv/bin")]));
        assert_eq!(
            f.skipped.as_deref(),
            Some("torch 2.11.0+cpu sees no CUDA GPU")
        );
    }

    /// The probe itself, with a python3 that has no torch (CI's): one line.
    #[test]
    fn the_probe_skips_in_one_line_without_torch() {
        let out = crate::process::run_bounded(
            "python3",
            &["-I", "-S", "-c", SPEED_PY],
            Duration::from_secs(20),
        );
        match out {
            RunOutput::NotFound => {} // no python3 at all: nothing to run
            RunOutput::Exited {
                code: Some(0),
                stdout,
                ..
            } => {
                let p: Printed = serde_json::from_str(stdout.trim()).expect("one JSON line");
                assert_eq!(stdout.lines().count(), 1, "{stdout}");
                assert!(
                    p.skipped
                        .as_deref()
                        .is_some_and(|s| s.starts_with("no torch for ")),
                    "{stdout}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
