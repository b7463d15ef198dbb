//! The one bounded command runner: a program (`nvidia-smi`, `py-spy`,
//! `nvcc`, a check's probe) run with no stdin, its output read as it
//! comes, for at most a time limit and [`OUTPUT_MAX`] bytes a stream (the
//! rest is read and dropped). It leads a process group of its own; on
//! timeout the whole group is killed, and so is a group whose pipes a
//! grandchild still holds when the time is up. A blocking form and one for
//! a tokio runtime (which also kills the group when its caller stops
//! waiting).
//!
//! The program dies with its asker, even one killed outright: it is started
//! with the parent-death signal (`PR_SET_PDEATHSIG`, SIGKILL). The kernel
//! sends it when the *thread* that started it ends, not the process: the
//! blocking form runs on its caller's thread, which waits for the program;
//! the async form on a runtime's thread (a worker, or the one that blocks
//! on the runtime), which lives as long as the runtime, and the program
//! is killed with the runtime's tasks anyway.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::group::signal_group;

/// The most output kept of a stream (a `py-spy dump` of a process with
/// hundreds of threads is a few hundred KiB; `nvidia-smi`'s, a few KiB).
pub const OUTPUT_MAX: usize = 4 * 1024 * 1024;

/// Makes `cmd`'s process die (SIGKILL) when the thread that spawns it
/// ends: an asker killed with `kill -9` leaves no program behind. If that
/// thread is already gone when the child gets to ask, the child does not
/// start.
pub(crate) fn dies_with_its_parent(cmd: &mut std::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: prctl and getppid are async-signal-safe and touch no memory.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            if libc::getppid() != parent.as_raw() {
                return Err(std::io::Error::other("its parent died"));
            }
            Ok(())
        });
    }
}

/// How a program run by [`run_bounded`] or [`run_bounded_async`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutput {
    /// Not found (not on `PATH`, or the path does not exist).
    NotFound,
    /// It could not be started for another reason.
    SpawnError(String),
    /// It did not exit within the time given; its group was killed.
    TimedOut,
    /// It exited (`code` is `None` when a signal ended it).
    Exited {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    },
}

/// How a program that exited unsuccessfully ended, in a few words for a
/// message: `exit 3`, or `killed by a signal` (an `Exited` with no code).
pub fn how_it_ended(code: Option<i32>) -> String {
    code.map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}"))
}

impl RunOutput {
    fn spawn_failed(e: &std::io::Error) -> RunOutput {
        match e.kind() {
            std::io::ErrorKind::NotFound => RunOutput::NotFound,
            _ => RunOutput::SpawnError(e.to_string()),
        }
    }
}

/// SIGKILLs a program's group when dropped, unless disarmed once its
/// pipes closed (then the group may be gone, and its id reused). Dropped
/// before its leader is waited for, the group id is still the leader's.
pub(crate) struct KillGroup {
    pgid: Option<Pid>,
}

impl KillGroup {
    /// The group led by `pid` (`None`: nothing to kill).
    pub(crate) fn new(pid: Option<u32>) -> Self {
        KillGroup {
            pgid: pid.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw),
        }
    }

    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            signal_group(pgid, Signal::SIGKILL);
        }
    }
}

/// Runs a program with a time limit, reading its output as it comes (a
/// grandchild that keeps a pipe open delays the answer by at most the
/// limit, and is killed with the group). On timeout the group is killed
/// and the leader not waited for: a process stuck in the kernel (a GPU
/// that fell off the bus) would not die anyway.
pub fn run_bounded(program: impl AsRef<OsStr>, args: &[&str], timeout: Duration) -> RunOutput {
    let deadline = Instant::now() + timeout;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    dies_with_its_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return RunOutput::spawn_failed(&e),
    };
    let mut group = KillGroup::new(Some(child.id()));
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        if let Some(mut pipe) = pipe {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = (&mut pipe).take(OUTPUT_MAX as u64).read_to_end(&mut buf);
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
                let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
            });
        }
        rx
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => return RunOutput::TimedOut,
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return RunOutput::SpawnError(e.to_string()),
        }
    };
    let left = |rx: &mpsc::Receiver<String>| {
        let wait = deadline.saturating_duration_since(Instant::now());
        rx.recv_timeout(wait).ok()
    };
    let (stdout, stderr) = (left(&out), left(&err));
    if stdout.is_some() && stderr.is_some() {
        group.disarm();
    }
    RunOutput::Exited {
        code: status.code(),
        stdout: stdout.unwrap_or_default(),
        stderr: stderr.unwrap_or_default(),
    }
}

/// [`run_bounded`] on a tokio runtime: the output once the program exited
/// and closed its pipes, within `timeout`. The group is killed on timeout,
/// and when the returned future is dropped before it is done. The command
/// is built at once: the future borrows nothing.
pub fn run_bounded_async(
    program: &OsStr,
    args: &[&str],
    timeout: Duration,
) -> impl Future<Output = RunOutput> + Send + use<> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    dies_with_its_parent(cmd.as_std_mut());
    async move {
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => return RunOutput::spawn_failed(&e),
        };
        let mut group = KillGroup::new(child.id());
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let all = async {
            let (out, err, status) = tokio::join!(read_some(out), read_some(err), child.wait());
            (out, err, status)
        };
        match tokio::time::timeout(timeout, all).await {
            Err(_) => RunOutput::TimedOut,
            Ok((_, _, Err(e))) => RunOutput::SpawnError(e.to_string()),
            Ok((stdout, stderr, Ok(status))) => {
                group.disarm();
                RunOutput::Exited {
                    code: status.code(),
                    stdout,
                    stderr,
                }
            }
        }
    }
}

/// A pipe read to its end, the first [`OUTPUT_MAX`] bytes kept.
async fn read_some(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    use tokio::io::AsyncReadExt;
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut buf = Vec::new();
    let _ = (&mut pipe)
        .take(OUTPUT_MAX as u64)
        .read_to_end(&mut buf)
        .await;
    let _ = tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await;
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unique tag for a test's `sleep`, found in /proc afterwards.
    fn tagged_sleep(tag: &str) -> String {
        format!("sleep 3{tag}")
    }

    fn running(arg: &str) -> bool {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
    }

    fn wait_gone(arg: &str) -> bool {
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            if !running(arg) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn on_timeout_the_whole_group_is_killed() {
        let tag = format!("{}.{}", std::process::id(), 1);
        let sleep = tagged_sleep(&tag);
        let script = format!("{sleep} & {sleep}; wait");
        let start = Instant::now();
        assert_eq!(
            run_bounded("sh", &["-c", &script], Duration::from_millis(300)),
            RunOutput::TimedOut
        );
        assert!(start.elapsed() < Duration::from_secs(2));
        let arg = sleep
            .split(' ')
            .nth(1)
            .expect("sleep's argument")
            .to_string();
        assert!(wait_gone(&arg), "a sleep of the group outlived the timeout");
    }

    #[test]
    fn a_grandchild_left_holding_the_pipe_is_killed_at_the_limit() {
        let tag = format!("{}.{}", std::process::id(), 2);
        let sleep = tagged_sleep(&tag);
        let script = format!("{sleep} & echo started");
        let got = run_bounded("sh", &["-c", &script], Duration::from_millis(300));
        assert!(
            matches!(got, RunOutput::Exited { code: Some(0), .. }),
            "{got:?}"
        );
        let arg = sleep
            .split(' ')
            .nth(1)
            .expect("sleep's argument")
            .to_string();
        assert!(wait_gone(&arg), "the grandchild outlived the limit");
    }

    #[tokio::test]
    async fn the_async_form_answers_and_kills_its_group_on_timeout() {
        assert_eq!(
            run_bounded_async(
                OsStr::new("sh"),
                &["-c", "echo out; echo err >&2; exit 3"],
                Duration::from_secs(5)
            )
            .await,
            RunOutput::Exited {
                code: Some(3),
                stdout: "out\n".into(),
                stderr: "err\n".into()
            }
        );
        assert_eq!(
            run_bounded_async(
                OsStr::new("/nonexistent/py-spy"),
                &[],
                Duration::from_secs(1)
            )
            .await,
            RunOutput::NotFound
        );
        let tag = format!("{}.{}", std::process::id(), 3);
        let sleep = tagged_sleep(&tag);
        let script = format!("{sleep} & {sleep}; wait");
        let start = Instant::now();
        assert_eq!(
            run_bounded_async(
                OsStr::new("sh"),
                &["-c", &script],
                Duration::from_millis(300)
            )
            .await,
            RunOutput::TimedOut
        );
        assert!(start.elapsed() < Duration::from_secs(2));
        let arg = sleep
            .split(' ')
            .nth(1)
            .expect("sleep's argument")
            .to_string();
        assert!(wait_gone(&arg), "a sleep of the group outlived the timeout");
    }

    #[tokio::test]
    async fn output_past_its_bound_is_read_and_dropped() {
        let script = format!("head -c {} /dev/zero; echo done >&2", OUTPUT_MAX * 2);
        let got =
            run_bounded_async(OsStr::new("sh"), &["-c", &script], Duration::from_secs(20)).await;
        let RunOutput::Exited {
            code,
            stdout,
            stderr,
        } = got
        else {
            panic!("{got:?}");
        };
        assert_eq!(
            (code, stdout.len(), stderr.as_str()),
            (Some(0), OUTPUT_MAX, "done\n")
        );
        let got = run_bounded("sh", &["-c", &script], Duration::from_secs(20));
        let RunOutput::Exited { code, stdout, .. } = got else {
            panic!("{got:?}");
        };
        assert_eq!((code, stdout.len()), (Some(0), OUTPUT_MAX));
    }

    #[tokio::test]
    async fn a_dropped_async_run_kills_its_group() {
        let tag = format!("{}.{}", std::process::id(), 4);
        let sleep = tagged_sleep(&tag);
        let script = format!("{sleep} & {sleep}; wait");
        let arg = sleep
            .split(' ')
            .nth(1)
            .expect("sleep's argument")
            .to_string();
        let run = run_bounded_async(OsStr::new("sh"), &["-c", &script], Duration::from_secs(30));
        // Polled until both sleeps run, then dropped.
        let _ = tokio::time::timeout(Duration::from_millis(300), run).await;
        assert!(wait_gone(&arg), "the group outlived its dropped run");
    }
}
