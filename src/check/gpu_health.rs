//! The GPUs' error and link state for `multinode check --local --gpu`: one
//! `nvidia-smi --query-gpu` run of the health fields, `nvidia-smi nvlink
//! --status` and `dmesg` (for the driver's Xid lines), at once, each within
//! its own time limit. Nothing is written and nothing stays on the GPU.

use std::time::Duration;

use super::facts::{GpuHealthFacts, SmiStatus};
use super::probe::{Probe, RunOutput};
use crate::nvidia_smi::{
    TIMEOUT_S, first_line, health_query, nvlink_status, parse_health, parse_nvlink, parse_xids,
};

/// `dmesg`: a kernel log is read in well under a second.
pub(crate) const DMESG_TIMEOUT: Duration = Duration::from_secs(5);

/// How a run of `nvidia-smi` ended: its status, why it failed, and what it
/// printed when it succeeded.
fn smi_outcome(out: RunOutput, what: &str) -> (SmiStatus, Option<String>, String) {
    match out {
        RunOutput::NotFound => (SmiStatus::Absent, None, String::new()),
        RunOutput::TimedOut => (
            SmiStatus::Timeout,
            Some(format!(
                "{what} did not answer in {TIMEOUT_S} s (killed): a GPU may have fallen off the bus"
            )),
            String::new(),
        ),
        RunOutput::SpawnError(e) => (
            SmiStatus::Failed,
            Some(format!("cannot run {what}: {e}")),
            String::new(),
        ),
        RunOutput::Exited {
            code: Some(0),
            stdout,
            ..
        } => (SmiStatus::Ok, None, stdout),
        RunOutput::Exited {
            code,
            stdout,
            stderr,
        } => {
            let how = crate::process::how_it_ended(code);
            (
                SmiStatus::Failed,
                Some(format!(
                    "{what} failed ({how}): {}",
                    first_line(&stdout, &stderr)
                )),
                String::new(),
            )
        }
    }
}

/// This node's GPU health, every GPU the query lists (the caller narrows
/// them to those the job sees).
pub(super) fn gpu_health(probe: &dyn Probe) -> GpuHealthFacts {
    let run = |program: &str, args: &[&str], timeout| probe.run(program, args, timeout);
    let (query, nvlink, dmesg) = std::thread::scope(|s| {
        let nvlink = s.spawn(|| nvlink_status(&run));
        let dmesg = s.spawn(|| probe.run("dmesg", &[], DMESG_TIMEOUT));
        (
            health_query(&run),
            nvlink.join().unwrap_or(RunOutput::TimedOut),
            dmesg.join().unwrap_or(RunOutput::TimedOut),
        )
    });
    let mut facts = GpuHealthFacts::default();
    let (smi, error, stdout) = smi_outcome(query, "nvidia-smi --query-gpu (health)");
    facts.smi = smi;
    facts.error = error;
    if smi == SmiStatus::Ok {
        match parse_health(&stdout) {
            Ok(devices) => facts.devices = devices,
            Err(e) => {
                facts.smi = SmiStatus::Failed;
                facts.error = Some(format!("unreadable nvidia-smi output: {e}"));
            }
        }
    }
    let (smi, error, stdout) = smi_outcome(nvlink, "nvidia-smi nvlink --status");
    facts.nvlink_smi = smi;
    facts.nvlink_error = error;
    facts.nvlinks = parse_nvlink(&stdout);
    match dmesg {
        RunOutput::Exited {
            code: Some(0),
            stdout,
            ..
        } => facts.xids = parse_xids(&stdout),
        RunOutput::Exited {
            code,
            stdout,
            stderr,
        } => {
            let how = crate::process::how_it_ended(code);
            facts.kernel_log_error = Some(format!(
                "dmesg failed ({how}): {}",
                first_line(&stdout, &stderr)
            ));
        }
        RunOutput::NotFound => facts.kernel_log_error = Some("no dmesg on PATH".into()),
        RunOutput::TimedOut => {
            facts.kernel_log_error = Some(format!(
                "dmesg did not answer in {} s",
                DMESG_TIMEOUT.as_secs()
            ));
        }
        RunOutput::SpawnError(e) => facts.kernel_log_error = Some(format!("cannot run dmesg: {e}")),
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::super::probe::fake::{FakeProbe, printed};
    use super::*;
    use crate::nvidia_smi::NvLink;

    const HEALTH: &str = include_str!("../../tests/fixtures/nvidia-smi/h100-health/health.csv");
    const DMESG: &str = include_str!("../../tests/fixtures/nvidia-smi/h100-health/dmesg-xid.txt");
    const NVLINK: &str =
        include_str!("../../tests/fixtures/nvidia-smi/h100-health/nvlink-inactive.txt");

    fn query() -> String {
        format!(
            "nvidia-smi --query-gpu={} --format=csv,nounits",
            crate::nvidia_smi::HEALTH_QUERY
        )
    }

    #[test]
    fn an_h100_node_with_an_xid_and_an_inactive_link() {
        let probe = FakeProbe::default()
            .program(&query(), printed(HEALTH))
            .program("nvidia-smi nvlink --status", printed(NVLINK))
            .program("dmesg", printed(DMESG));
        let f = gpu_health(&probe);
        assert_eq!((f.smi, f.error.as_deref()), (SmiStatus::Ok, None));
        assert_eq!(f.devices.len(), 1);
        assert_eq!(f.devices[0].pcie_gen, Some(5));
        assert_eq!(f.nvlinks.len(), 4);
        assert_eq!(
            f.nvlinks[2],
            NvLink {
                gpu: 0,
                link: 2,
                active: false
            }
        );
        assert_eq!(f.kernel_log_error, None);
        assert_eq!(f.xids.len(), 1);
        assert_eq!(f.xids[0].code, 79);
    }

    #[test]
    fn a_hung_query_an_old_driver_and_an_unreadable_kernel_log() {
        let probe = FakeProbe::default()
            .program(&query(), RunOutput::TimedOut)
            .program(
                "dmesg",
                RunOutput::Exited {
                    code: Some(1),
                    stdout: String::new(),
                    stderr: "dmesg: read kernel buffer failed: Operation not permitted\n".into(),
                },
            );
        let f = gpu_health(&probe);
        assert_eq!(f.smi, SmiStatus::Timeout);
        assert_eq!(
            f.error.as_deref(),
            Some(
                "nvidia-smi --query-gpu (health) did not answer in 10 s (killed): a GPU may have fallen off the bus"
            )
        );
        assert_eq!(f.nvlink_smi, SmiStatus::Absent);
        assert_eq!(
            f.kernel_log_error.as_deref(),
            Some(
                "dmesg failed (exit 1): dmesg: read kernel buffer failed: Operation not permitted"
            )
        );
        // A driver older than R535 knows the reasons by their old name.
        let old = query().replace("clocks_event_reasons", "clocks_throttle_reasons");
        let probe = FakeProbe::default()
            .program(
                &query(),
                RunOutput::Exited {
                    code: Some(2),
                    stdout:
                        "Field \"clocks_event_reasons.active\" is not a valid field to query.\n"
                            .into(),
                    stderr: String::new(),
                },
            )
            .program(
                &old,
                printed("index, clocks_throttle_reasons.active\n0, 0x0000000000000004\n"),
            );
        let f = gpu_health(&probe);
        assert_eq!(f.smi, SmiStatus::Ok);
        assert_eq!(f.devices[0].reasons, Some(vec!["sw_power_cap".to_string()]));
        assert_eq!(f.kernel_log_error.as_deref(), Some("no dmesg on PATH"));
    }
}
