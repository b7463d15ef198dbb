//! One node's snapshot: the processes of the given roots' trees, sampled
//! twice over a short window for CPU %, with `nvidia-smi` and `py-spy`
//! running meanwhile. Takes the window or the slowest tool's timeout,
//! whichever is longer; nothing here can hang.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::node_snapshot::{NodeSnapshot, Proc, unix_ms};
use super::procfs::{self, Stat};
use super::pystack::{self, PyStack};
use super::samples::{self, Samples};

/// CPU % is measured over this window (two samples of `/proc/PID/stat`).
pub(crate) const WINDOW: Duration = Duration::from_millis(200);
/// `nvidia-smi` and each `py-spy dump` get at most this long.
pub(crate) const TOOL_TIMEOUT: Duration = Duration::from_secs(3);
/// At most this many `py-spy dump`s at once in this process (an agent:
/// however many snapshots are taken at once).
pub(crate) const PY_SPY_AT_ONCE: usize = 16;
static PY_SPY_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(PY_SPY_AT_ONCE);

/// The processes one snapshot holds (parents before children, the first
/// found): the rest are counted (`NodeSnapshot::processes_left_out`).
pub(crate) const PROCESSES_MAX: usize = 1024;

/// How to take a snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub window: Duration,
    pub tool_timeout: Duration,
    /// py-spy's program, when installed.
    pub py_spy: Option<PathBuf>,
    pub nvidia_smi: String,
    pub proc_root: PathBuf,
    /// Looks at each process's state over the window ([`Samples`]); 0: none.
    pub looks: u32,
    /// `py-spy dump`s of each Python process over the window (at least 1).
    pub py_samples: u32,
    /// Each GPU's state as well (`nvidia_smi::processes_and_devices`), for `top`.
    pub gpu_devices: bool,
    /// With `gpu_devices`: read from `nvidia-smi`'s loops kept for the
    /// asker (an agent's), not by runs each time; without, by runs shared
    /// with the snapshots asked meanwhile.
    pub gpu_watch: Option<std::sync::Arc<crate::nvidia_smi::Watch>>,
}

impl Options {
    /// The defaults, with py-spy looked up on this process's PATH.
    pub(crate) fn from_env() -> Self {
        Options {
            window: WINDOW,
            tool_timeout: TOOL_TIMEOUT,
            py_spy: pystack::find(std::env::var_os("PATH").as_deref()),
            nvidia_smi: crate::nvidia_smi::PROGRAM.to_string(),
            proc_root: PathBuf::from("/proc"),
            looks: 0,
            py_samples: 1,
            gpu_devices: false,
            gpu_watch: None,
        }
    }

    /// `multinode top`'s: a longer window, sampled [`TOP_LOOKS`] times,
    /// [`TOP_PY_SAMPLES`] Python stacks a process, and the GPUs' state.
    pub(crate) fn for_top() -> Self {
        Options {
            window: TOP_WINDOW,
            looks: TOP_LOOKS,
            py_samples: TOP_PY_SAMPLES,
            gpu_devices: true,
            ..Options::from_env()
        }
    }
}

/// `top`'s window: long enough for a few steps of a fast loop's
/// compute-then-wait to show in its samples, short against a refresh (it
/// is most of one at 256 nodes: every agent samples over its window).
pub(crate) const TOP_WINDOW: Duration = Duration::from_millis(250);
/// Looks at each process's state over [`TOP_WINDOW`] (a `/proc/PID/stat`
/// read each, microseconds): as many as `top`'s rule wants of a wait share
/// from one refresh (`--once`), however short the window.
pub(crate) const TOP_LOOKS: u32 = 20;
/// Python stacks a process over [`TOP_WINDOW`] (a `py-spy dump` each:
/// tens of milliseconds of a CPU on the node, and a pause of the process).
pub(crate) const TOP_PY_SAMPLES: u32 = 3;

/// The snapshot of every process in the trees of `roots` (process group
/// leaders, their groups, sessions and descendants).
pub(crate) async fn take(roots: &BTreeSet<i32>, opts: &Options) -> NodeSnapshot {
    let proc = opts.proc_root.clone();
    let (tck, page) = procfs::clock_and_page();
    let taken_ms = unix_ms();
    let mut first: Vec<Stat> = super::trees::read(&proc, roots);
    let processes_left_out = first.len().saturating_sub(PROCESSES_MAX);
    first.truncate(PROCESSES_MAX);
    let t0 = Instant::now();
    let cmdlines: Vec<String> = first
        .iter()
        .map(|s| procfs::read_cmdline(&proc, s.pid))
        .collect();
    let cpus: Vec<Option<String>> = first
        .iter()
        .map(|s| procfs::read_cpus(&proc, s.pid))
        .collect();
    // State and wait channel before py-spy attaches (it stops the process
    // for a moment, and its interruption wakes a sleeping syscall).
    let waits: Vec<Option<String>> = first
        .iter()
        .map(|s| procfs::read_wait(&proc, s.pid))
        .collect();

    // Meanwhile: the GPUs and the Python stacks.
    let (program, timeout) = (&opts.nvidia_smi, opts.tool_timeout);
    let gpus = async {
        match (opts.gpu_devices, &opts.gpu_watch) {
            (true, Some(watch)) => watch.processes_and_devices(timeout).await,
            (true, None) => crate::nvidia_smi::processes_and_devices(program, timeout).await,
            (false, Some(watch)) => (watch.processes(timeout).await, Ok(Vec::new())),
            (false, None) => {
                let reading = crate::nvidia_smi::processes(program, timeout).await;
                (reading, Ok(Vec::new()))
            }
        }
    };
    let python: Vec<i32> = first
        .iter()
        .zip(&cmdlines)
        .filter(|(s, cmd)| {
            s.state != 'Z'
                && Proc {
                    comm: s.comm.clone(),
                    cmdline: (*cmd).clone(),
                    ..Proc::default()
                }
                .is_python()
        })
        .map(|(s, _)| s.pid)
        .collect();
    let stacks = async {
        let mut out = std::collections::BTreeMap::new();
        let Some(py_spy) = &opts.py_spy else {
            return out;
        };
        let mut set = JoinSet::new();
        let n = opts.py_samples.max(1);
        for &pid in &python {
            let (py_spy, timeout) = (py_spy.clone(), opts.tool_timeout);
            let window = opts.window;
            set.spawn(async move {
                // The first stack is the one shown; each counts as a sample.
                let mut first = None;
                let mut counted = Samples::default();
                for k in 0..n {
                    if k > 0 {
                        tokio::time::sleep_until((t0 + window * k / n).into()).await;
                    }
                    let stack = {
                        let _slot = PY_SPY_SLOTS.acquire().await;
                        pystack::dump(&py_spy, pid, timeout).await
                    };
                    if let PyStack::Stack { frames, .. } = &stack {
                        counted.stacks += 1;
                        counted.stacks_waiting += u32::from(samples::waits(frames));
                    }
                    let stop = matches!(stack, PyStack::Note(_));
                    first.get_or_insert(stack);
                    if stop {
                        break;
                    }
                }
                (pid, first, counted)
            });
        }
        while let Some(done) = set.join_next().await {
            if let Ok((pid, Some(stack), counted)) = done {
                out.insert(pid, (stack, counted));
            }
        }
        out
    };
    let window = async {
        let n = opts.looks.max(1);
        let mut looks: std::collections::BTreeMap<i32, Samples> = Default::default();
        let mut second: Vec<Option<Stat>> = Vec::new();
        for k in 1..=n {
            tokio::time::sleep_until((t0 + opts.window * k / n).into()).await;
            second = first
                .iter()
                .map(|s| procfs::read_stat(&proc, s.pid))
                .collect();
            if opts.looks == 0 {
                continue;
            }
            for (a, b) in first.iter().zip(&second) {
                let state = b.as_ref().filter(|b| b.start_ticks == a.start_ticks);
                if let Some((asleep, d)) = state.and_then(|b| samples::look(b.state)) {
                    let s = looks.entry(a.pid).or_default();
                    s.looks += 1;
                    s.asleep += u32::from(asleep);
                    s.uninterruptible += u32::from(d);
                }
            }
        }
        (second, t0.elapsed(), procfs::uptime(&proc), looks)
    };
    let ((gpus, devices), mut stacks, (second, elapsed, uptime, mut looks)) =
        tokio::join!(gpus, stacks, window);

    let secs = elapsed.as_secs_f64().max(0.001);
    let processes = first
        .iter()
        .zip(second)
        .zip(waits)
        .zip(cmdlines)
        .zip(cpus)
        .map(|((((a, b), wchan), cmdline), cpus)| {
            // A process that ended during the window keeps its first sample.
            let now = b.filter(|b| b.start_ticks == a.start_ticks);
            let cpu_pct = now.as_ref().map_or(0.0, |b| {
                b.cpu_ticks.saturating_sub(a.cpu_ticks) as f64 / tck as f64 / secs * 100.0
            });
            let s = now.as_ref().unwrap_or(a);
            let state = settled_state(a.state, now.as_ref().map(|b| b.state), cpu_pct);
            let mut p = Proc {
                pid: a.pid,
                ppid: s.ppid,
                pgid: s.pgrp,
                state: state.to_string(),
                cpu_pct: (cpu_pct * 10.0).round() / 10.0,
                rss_kib: s.rss_pages * page / 1024,
                wchan: if state == 'R' { None } else { wchan },
                elapsed_s: uptime.map_or(0.0, |u| {
                    ((u - s.start_ticks as f64 / tck as f64).max(0.0) * 10.0).round() / 10.0
                }),
                comm: s.comm.clone(),
                cmdline,
                cpus,
                gpu: gpus.by_pid.get(&a.pid).cloned(),
                ..Proc::default()
            };
            let mut counted = looks.remove(&a.pid).unwrap_or_default();
            match stacks.remove(&a.pid) {
                Some((PyStack::Stack { frames, idle }, stacks)) => {
                    p.stack = Some(frames);
                    p.stack_idle = Some(idle);
                    counted.add(&stacks);
                }
                Some((PyStack::Note(note), _)) => p.stack_note = Some(note),
                None => {}
            }
            if counted != Samples::default() {
                p.samples = Some(counted);
            }
            p
        })
        .collect();
    NodeSnapshot {
        rank: 0,
        host: hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        taken_ms,
        window_ms: elapsed.as_millis() as u64,
        processes,
        py_spy: match &opts.py_spy {
            Some(path) => format!("used ({})", path.display()),
            None => "not installed (no Python stacks)".to_string(),
        },
        gpu_note: gpus.note.or(devices.as_ref().err().cloned()),
        gpus: devices.unwrap_or_default(),
        processes_left_out,
        error: None,
        ..NodeSnapshot::default()
    }
}

/// A process's state over the window, from its state at the first look,
/// at the second, and the CPU it used between. Runnable at the first look,
/// asleep at the second and next to no CPU used: it was woken for a moment
/// and waited for a CPU to go back to sleep (an earlier snapshot's py-spy
/// leaving it, on a loaded machine): it sleeps. Anything else is the
/// first look's (py-spy, attached at the second, shows as a stop).
fn settled_state(first: char, second: Option<char>, cpu_pct: f64) -> char {
    match second {
        Some(later @ ('S' | 'D' | 'I')) if first == 'R' && cpu_pct < 5.0 => later,
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_runnable_between_two_sleeps_is_sleeping() {
        assert_eq!(settled_state('R', Some('S'), 0.3), 'S');
        assert_eq!(settled_state('R', Some('D'), 0.0), 'D');
        // Busy in the window, or runnable at both looks: running.
        assert_eq!(settled_state('R', Some('S'), 40.0), 'R');
        assert_eq!(settled_state('R', Some('R'), 0.0), 'R');
        // Stopped by py-spy at the second look, or ended: the first.
        assert_eq!(settled_state('R', Some('t'), 0.0), 'R');
        assert_eq!(settled_state('R', None, 0.0), 'R');
        assert_eq!(settled_state('S', Some('R'), 0.0), 'S');
    }

    #[tokio::test]
    async fn a_busy_and_a_sleeping_child() {
        use std::os::unix::process::CommandExt;
        // A group of its own: sh with a busy loop and a sleep.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 & while :; do :; done"])
            .process_group(0)
            .spawn()
            .expect("sh");
        let pid = child.id() as i32;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let opts = Options {
            py_spy: None,
            nvidia_smi: "/nonexistent/nvidia-smi".into(),
            ..Options::from_env()
        };
        let snap = take(&[pid].into(), &opts).await;
        // The sleep's CPUs, read while it lives.
        let status = snap
            .processes
            .get(1)
            .and_then(|p| std::fs::read_to_string(format!("/proc/{}/status", p.pid)).ok())
            .unwrap_or_default();
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.wait();
        assert_eq!(snap.processes.len(), 2, "{snap:#?}");
        let (sh, sleep) = (&snap.processes[0], &snap.processes[1]);
        assert_eq!(sh.pid, pid);
        assert_eq!(sh.state, "R");
        assert!(sh.cpu_pct > 5.0, "{sh:?}");
        assert_eq!(sleep.ppid, pid);
        assert_eq!(sleep.state, "S");
        assert!(sleep.cpu_pct < 5.0, "{sleep:?}");
        assert!(sleep.cmdline.starts_with("sleep 30"), "{sleep:?}");
        assert!(sleep.rss_kib > 0);
        let line = format!("Cpus_allowed_list:\t{}", sleep.cpus.as_deref().unwrap());
        assert!(status.lines().any(|l| l == line), "{line} in {status}");
        assert!(snap.window_ms >= 200);
        assert_eq!(snap.py_spy, "not installed (no Python stacks)");
        assert_eq!(snap.gpu_note, None);
    }
}
