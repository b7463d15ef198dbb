//! GPU memory and utilisation of the job's processes, from `nvidia-smi`:
//! its compute processes (pid, memory, GPU) and its GPUs (index,
//! utilisation). Both queries run at once, each bounded by a timeout (a
//! hung GPU makes `nvidia-smi` hang).

use std::collections::BTreeMap;
use std::time::Duration;

use super::GpuUse;

/// `nvidia-smi --query-compute-apps`.
pub(crate) const APPS_QUERY: &str = "--query-compute-apps=pid,used_memory,gpu_uuid";
/// `nvidia-smi --query-gpu`.
pub(crate) const GPUS_QUERY: &str = "--query-gpu=index,uuid,utilization.gpu";

/// What `nvidia-smi` said: GPU use by pid, or why there is none.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpuReading {
    pub by_pid: BTreeMap<i32, GpuUse>,
    /// `None` when `nvidia-smi` is not installed (no note needed) or answered.
    pub note: Option<String>,
}

/// One GPU: its index and utilisation, by UUID.
fn parse_gpus(text: &str) -> BTreeMap<String, (Option<u32>, Option<u32>)> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split(',').map(str::trim);
            let index = f.next()?.parse().ok();
            let uuid = f.next()?.to_string();
            let util = f.next().and_then(|u| u.parse().ok());
            (!uuid.is_empty()).then_some((uuid, (index, util)))
        })
        .collect()
}

/// The compute processes, joined with their GPU's index and utilisation.
/// Values `nvidia-smi` cannot give (`[N/A]`, `[Not Supported]`) are absent.
pub(crate) fn parse(apps: &str, gpus: &str) -> BTreeMap<i32, GpuUse> {
    let gpus = parse_gpus(gpus);
    let mut out = BTreeMap::new();
    for line in apps.lines() {
        let mut f = line.split(',').map(str::trim);
        let Some(pid) = f.next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let memory = f.next().and_then(|m| m.parse::<u64>().ok());
        let uuid = f.next().unwrap_or_default();
        let (index, util) = gpus.get(uuid).copied().unwrap_or((None, None));
        // A process on several GPUs: its memory adds up, the first GPU names it.
        let entry = out.entry(pid).or_insert(GpuUse {
            index,
            memory_mib: None,
            utilization_pct: util,
        });
        if let Some(m) = memory {
            entry.memory_mib = Some(entry.memory_mib.unwrap_or(0) + m);
        }
    }
    out
}

/// Runs both queries, at most `timeout` each.
pub(crate) async fn read(program: &str, timeout: Duration) -> GpuReading {
    let query = |q: &'static str| {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args([q, "--format=csv,noheader,nounits"])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        async move { tokio::time::timeout(timeout, cmd.output()).await }
    };
    let (apps, gpus) = tokio::join!(query(APPS_QUERY), query(GPUS_QUERY));
    let secs = timeout.as_secs_f64();
    match (apps, gpus) {
        (Ok(Err(e)), _) if e.kind() == std::io::ErrorKind::NotFound => GpuReading::default(),
        (Err(_), _) | (_, Err(_)) => GpuReading {
            by_pid: BTreeMap::new(),
            note: Some(format!("nvidia-smi did not answer within {secs:.1} s")),
        },
        (Ok(Err(e)), _) | (_, Ok(Err(e))) => GpuReading {
            by_pid: BTreeMap::new(),
            note: Some(format!("cannot run nvidia-smi: {e}")),
        },
        (Ok(Ok(apps)), Ok(Ok(gpus))) => {
            if !apps.status.success() {
                let first = String::from_utf8_lossy(&apps.stdout)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                return GpuReading {
                    by_pid: BTreeMap::new(),
                    note: Some(format!("nvidia-smi failed ({}): {first}", apps.status)),
                };
            }
            GpuReading {
                by_pid: parse(
                    &String::from_utf8_lossy(&apps.stdout),
                    &String::from_utf8_lossy(&gpus.stdout),
                ),
                note: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_processes_with_their_gpu() {
        let gpus = "0, GPU-aaaa, 100\n1, GPU-bbbb, 0\n";
        let apps = "4242, 1024, GPU-aaaa\n4343, 600, GPU-bbbb\n4343, 400, GPU-aaaa\n4444, [N/A], GPU-cccc\nNo running processes found\n";
        let by_pid = parse(apps, gpus);
        assert_eq!(
            by_pid.get(&4242),
            Some(&GpuUse {
                index: Some(0),
                memory_mib: Some(1024),
                utilization_pct: Some(100)
            })
        );
        assert_eq!(
            by_pid.get(&4343),
            Some(&GpuUse {
                index: Some(1),
                memory_mib: Some(1000),
                utilization_pct: Some(0)
            })
        );
        assert_eq!(
            by_pid.get(&4444),
            Some(&GpuUse {
                index: None,
                memory_mib: None,
                utilization_pct: None
            })
        );
        assert_eq!(by_pid.len(), 3);
        assert!(parse("", gpus).is_empty());
    }

    #[tokio::test]
    async fn no_nvidia_smi_is_no_note() {
        let r = read("/nonexistent/nvidia-smi", Duration::from_secs(1)).await;
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
        let r = read(fake.to_str().expect("utf-8"), Duration::from_millis(300)).await;
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(
            r.note.as_deref(),
            Some("nvidia-smi did not answer within 0.3 s")
        );
    }
}
