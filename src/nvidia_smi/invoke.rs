//! `nvidia-smi` run, each invocation through the bounded runner within a
//! time limit: the GPUs counted (`-L`), binding's bus ids, `check`'s
//! inventory, `snapshot`'s processes, `top`'s devices.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::time::Duration;

use crate::process::{RunOutput, run_bounded, run_bounded_async};

use super::apps::{self, APPS_QUERY, GPUS_QUERY, GpuReading};
use super::devices::{DEVICE_QUERY, DEVICE_QUERY_OLD, GpuDevice, parse_devices};
use super::health::{EVENT_REASONS, HEALTH_QUERY, THROTTLE_REASONS};
use super::pci::{PCI_QUERY, PciGpu, parse_pci};
use super::query::{QUERY, QUERY_OLD, first_line};

/// The program, found on `PATH`.
pub(crate) const PROGRAM: &str = "nvidia-smi";

/// How long `nvidia-smi` may take in topology and `check` (seconds on a
/// node without persistence mode); then its GPUs are unknown, or hung.
pub(crate) const TIMEOUT_S: u64 = 10;
/// [`TIMEOUT_S`] as a duration.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(TIMEOUT_S);

/// A bounded runner: [`run_bounded`], or a probe's (faked in tests).
pub(crate) type Run<'a> = &'a (dyn Fn(&str, &[&str], Duration) -> RunOutput + Sync);

/// GPUs listed by `nvidia-smi -L`, if it runs and lists any.
pub(crate) fn count_gpus() -> Option<u32> {
    let RunOutput::Exited {
        code: Some(0),
        stdout,
        ..
    } = run_bounded(PROGRAM, &["-L"], TIMEOUT)
    else {
        return None;
    };
    let gpus = stdout.lines().filter(|l| l.starts_with("GPU ")).count();
    u32::try_from(gpus).ok().filter(|n| *n > 0)
}

/// What binding asks: each GPU's index, UUID and PCI bus id ([`PCI_QUERY`]),
/// through `run`, within [`TIMEOUT`]. `Ok(None)` when `nvidia-smi` is not
/// installed; an error (one line) when it fails, hangs or prints something else.
pub(crate) fn pci_gpus(run: Run<'_>) -> Result<Option<Vec<PciGpu>>, String> {
    let query = format!("--query-gpu={PCI_QUERY}");
    match run(PROGRAM, &[query.as_str(), "--format=csv,noheader"], TIMEOUT) {
        RunOutput::NotFound => Ok(None),
        RunOutput::TimedOut => Err(format!("nvidia-smi did not answer within {TIMEOUT_S} s")),
        RunOutput::SpawnError(e) => Err(format!("cannot run nvidia-smi: {e}")),
        RunOutput::Exited {
            code: Some(0),
            stdout,
            ..
        } => parse_pci(&stdout)
            .map(Some)
            .map_err(|e| format!("unreadable nvidia-smi output: {e}")),
        RunOutput::Exited {
            code,
            stdout,
            stderr,
        } => {
            let how = crate::process::how_it_ended(code);
            Err(format!(
                "nvidia-smi failed ({how}): {}",
                first_line(&stdout, &stderr)
            ))
        }
    }
}

/// What `check` asks: `--query-gpu` ([`QUERY`], again without
/// `compute_cap` when an old driver refuses it) and plain `nvidia-smi`
/// for the header's versions, at once, through `run`.
pub(crate) struct Inventory {
    /// `--query-gpu=... --format=csv,noheader`.
    pub query: RunOutput,
    /// Plain `nvidia-smi`.
    pub header: RunOutput,
}

/// Runs [`Inventory`]'s two invocations at once, each within [`TIMEOUT`].
pub(crate) fn inventory(run: Run<'_>) -> Inventory {
    let run_query = |fields: &str| {
        let query = format!("--query-gpu={fields}");
        run(PROGRAM, &[query.as_str(), "--format=csv,noheader"], TIMEOUT)
    };
    std::thread::scope(|s| {
        let header = s.spawn(|| run(PROGRAM, &[], TIMEOUT));
        let mut query = run_query(QUERY);
        if let RunOutput::Exited {
            code: Some(c),
            stdout,
            stderr,
        } = &query
            && *c != 0
            && (stdout.contains("compute_cap") || stderr.contains("compute_cap"))
        {
            query = run_query(QUERY_OLD);
        }
        Inventory {
            query,
            header: header.join().unwrap_or(RunOutput::TimedOut),
        }
    })
}

/// What `check --gpu` asks: the health query ([`HEALTH_QUERY`], with its
/// header, to read the fields by name), again with the old name of the
/// event reasons when a driver older than R535 refuses the new one; within
/// [`TIMEOUT`], through `run`.
pub(crate) fn health_query(run: Run<'_>) -> RunOutput {
    let ask = |fields: &str| {
        let query = format!("--query-gpu={fields}");
        run(PROGRAM, &[query.as_str(), "--format=csv,nounits"], TIMEOUT)
    };
    let out = ask(HEALTH_QUERY);
    if let RunOutput::Exited {
        code: Some(c),
        stdout,
        stderr,
    } = &out
        && *c != 0
        && (stdout.contains(EVENT_REASONS) || stderr.contains(EVENT_REASONS))
    {
        return ask(&HEALTH_QUERY.replace(EVENT_REASONS, THROTTLE_REASONS));
    }
    out
}

/// `nvidia-smi nvlink --status` within [`TIMEOUT`], through `run`.
pub(crate) fn nvlink_status(run: Run<'_>) -> RunOutput {
    run(PROGRAM, &["nvlink", "--status"], TIMEOUT)
}

/// `nvidia-smi QUERY --format=csv,noheader,nounits`, within `timeout`.
async fn csv(program: &str, query: &str, timeout: Duration) -> RunOutput {
    run_bounded_async(
        OsStr::new(program),
        &[query, "--format=csv,noheader,nounits"],
        timeout,
    )
    .await
}

/// What `snapshot` asks: the compute processes and the GPUs, both queries
/// at once, at most `timeout` each; `program` is `nvidia-smi` (a fake in tests).
pub(crate) async fn processes(program: &str, timeout: Duration) -> GpuReading {
    let (apps, gpus) = tokio::join!(
        csv(program, APPS_QUERY, timeout),
        csv(program, GPUS_QUERY, timeout)
    );
    reading(&apps, &gpus, timeout)
}

/// What `top` asks: the compute processes and every GPU's state
/// ([`GpuDevice`]), two runs at once: the GPUs' index, UUID and use that
/// the processes are joined with are the first fields of the devices'
/// query (so a refresh costs a node two runs of `nvidia-smi`, not three).
pub(crate) async fn processes_and_devices(
    program: &str,
    timeout: Duration,
) -> (GpuReading, Result<Vec<GpuDevice>, String>) {
    let (apps, gpus, _) = top_runs(program, timeout).await;
    let reading = reading(&apps, &gpus, timeout);
    (reading, read_devices(gpus, timeout))
}

/// [`processes_and_devices`]' two runs as they ended, and the devices'
/// fields that this driver answered (or was last asked), for `watch`.
pub(super) async fn top_runs(
    program: &str,
    timeout: Duration,
) -> (RunOutput, RunOutput, &'static str) {
    let (apps, (gpus, fields)) = tokio::join!(
        csv(program, APPS_QUERY, timeout),
        device_query(program, timeout)
    );
    (apps, gpus, fields)
}

/// The compute processes from `apps` (their query's run), joined with the
/// GPUs of `gpus` (a run whose first fields are index, UUID, utilisation);
/// a note when either did not answer.
pub(super) fn reading(apps: &RunOutput, gpus: &RunOutput, timeout: Duration) -> GpuReading {
    let secs = timeout.as_secs_f64();
    let note = |note: String| GpuReading {
        by_pid: BTreeMap::new(),
        note: Some(note),
    };
    match (apps, gpus) {
        (RunOutput::NotFound, _) => GpuReading::default(),
        (RunOutput::TimedOut, _) | (_, RunOutput::TimedOut) => {
            note(format!("nvidia-smi did not answer within {secs:.1} s"))
        }
        (RunOutput::SpawnError(e), _) | (_, RunOutput::SpawnError(e)) => {
            note(format!("cannot run nvidia-smi: {e}"))
        }
        (_, RunOutput::NotFound) => note("cannot run nvidia-smi: not found".to_string()),
        (
            RunOutput::Exited {
                code, stdout: apps, ..
            },
            RunOutput::Exited { stdout: gpus, .. },
        ) => {
            if *code != Some(0) {
                let first = apps.lines().next().unwrap_or_default().trim().to_string();
                let how = crate::process::how_it_ended(*code);
                return note(format!("nvidia-smi failed ({how}): {first}"));
            }
            GpuReading {
                by_pid: apps::parse(apps, gpus),
                note: None,
            }
        }
    }
}

/// Every GPU's state ([`DEVICE_QUERY`]), again with the old name of the
/// throttle field when a driver older than R535 refuses the new one; and
/// the fields of the run returned.
async fn device_query(program: &str, timeout: Duration) -> (RunOutput, &'static str) {
    let query = |fields: &'static str| {
        let arg = format!("--query-gpu={fields}");
        async move { csv(program, &arg, timeout).await }
    };
    let out = query(DEVICE_QUERY).await;
    if let RunOutput::Exited {
        code: Some(c),
        stdout,
        stderr,
    } = &out
        && *c != 0
        && (stdout.contains("clocks_event_reasons") || stderr.contains("clocks_event_reasons"))
    {
        return (query(DEVICE_QUERY_OLD).await, DEVICE_QUERY_OLD);
    }
    (out, DEVICE_QUERY)
}

/// Every GPU's state ([`GpuDevice`]), within `timeout`. `Ok` of nothing
/// when `nvidia-smi` is not installed; an error (one line) when it fails
/// or hangs.
#[cfg(test)]
pub(crate) async fn devices(program: &str, timeout: Duration) -> Result<Vec<GpuDevice>, String> {
    read_devices(device_query(program, timeout).await.0, timeout)
}

pub(super) fn read_devices(out: RunOutput, timeout: Duration) -> Result<Vec<GpuDevice>, String> {
    match out {
        RunOutput::NotFound => Ok(Vec::new()),
        RunOutput::TimedOut => Err(format!(
            "nvidia-smi did not answer within {:.1} s",
            timeout.as_secs_f64()
        )),
        RunOutput::SpawnError(e) => Err(format!("cannot run nvidia-smi: {e}")),
        RunOutput::Exited {
            code: Some(0),
            stdout,
            ..
        } => Ok(parse_devices(&stdout)),
        RunOutput::Exited {
            code,
            stdout,
            stderr,
        } => Err(format!(
            "nvidia-smi failed ({}): {}",
            crate::process::how_it_ended(code),
            first_line(&stdout, &stderr)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn devices_fall_back_to_the_old_field_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = dir.path().join("nvidia-smi");
        // An old driver: refuses clocks_event_reasons, knows the throttle name.
        std::fs::write(
            &fake,
            "#!/bin/sh\ncase \"$1\" in\n*clocks_event_reasons*) echo 'Field \"clocks_event_reasons.active\" is not a valid field to query.'; exit 2;;\nesac\necho '0, GPU-a, 99, 100, 200, 300.5, 1500, 1980, 0x0000000000000008'\n",
        )
        .expect("write");
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let gpus = devices(fake.to_str().expect("utf-8"), Duration::from_secs(5))
            .await
            .expect("answered");
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].throttle, ["hw_slowdown"]);
        assert_eq!(
            devices("/nonexistent/nvidia-smi", Duration::from_secs(1)).await,
            Ok(vec![])
        );
    }

    #[tokio::test]
    async fn top_runs_it_twice_a_refresh_and_joins_the_processes_with_the_devices() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (fake, log) = (dir.path().join("nvidia-smi"), dir.path().join("runs"));
        // As an H100 driver prints each query (`--format=csv,noheader,nounits`).
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$1\" >> {}\ncase \"$1\" in\n\
                 --query-compute-apps=*) echo '4242, 40210, GPU-5f0e6b1c-0000-0000-0000-000000000000';;\n\
                 --query-gpu=*) echo '0, GPU-5f0e6b1c-0000-0000-0000-000000000000, 97, 40213, 81559, 512.33, 1980, 1980, 0x0000000000000000';;\n\
                 esac\n",
                log.display()
            ),
        )
        .expect("write");
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let (reading, devices) =
            processes_and_devices(fake.to_str().expect("utf-8"), Duration::from_secs(5)).await;
        let runs = std::fs::read_to_string(&log).expect("it ran");
        assert_eq!(runs.lines().count(), 2, "{runs}");
        let used = &reading.by_pid[&4242];
        assert_eq!(
            (used.index, used.utilization_pct, used.memory_mib),
            (Some(0), Some(97), Some(40210))
        );
        let devices = devices.expect("answered");
        assert_eq!((devices.len(), devices[0].sm_clock_mhz), (1, Some(1980)));
        let (none, no_devices) =
            processes_and_devices("/nonexistent/nvidia-smi", Duration::from_secs(1)).await;
        assert_eq!((none, no_devices), (GpuReading::default(), Ok(vec![])));
    }

    #[tokio::test]
    async fn no_nvidia_smi_is_no_note() {
        let r = processes("/nonexistent/nvidia-smi", Duration::from_secs(1)).await;
        assert_eq!(r, GpuReading::default());
    }

    #[tokio::test]
    async fn a_hung_nvidia_smi_is_a_note() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = dir.path().join("nvidia-smi");
        std::fs::write(&fake, "#!/bin/sh\nexec sleep 30\n").expect("write");
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let t = std::time::Instant::now();
        let r = processes(fake.to_str().expect("utf-8"), Duration::from_millis(300)).await;
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(
            r.note.as_deref(),
            Some("nvidia-smi did not answer within 0.3 s")
        );
    }
}
