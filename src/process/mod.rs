//! Spawning commands as process-group leaders and ending their whole group.
//!
//! Every command `multinode` starts runs in a new session (so a new process
//! group whose id is the child's pid). Ending a command means ending the
//! group: SIGTERM, a grace period, SIGKILL. A [`GroupChild`] that is dropped
//! without [`GroupChild::disarm`] kills its group, so no path leaves it behind.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

mod spawn;
pub use spawn::{Spawn, Stdio};

/// How a process ended, kept whole: the signal is never folded into a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Outcome {
    Exited(i32),
    Signaled { signal: i32, core_dumped: bool },
}

impl Outcome {
    pub fn from_status(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited(code),
            (None, Some(signal)) => Outcome::Signaled {
                signal,
                core_dumped: status.core_dumped(),
            },
            // Neither code nor signal: stopped/continued never reach here from wait().
            (None, None) => Outcome::Exited(1),
        }
    }

    /// The code a shell reports: the exit code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            Outcome::Exited(code) => code,
            Outcome::Signaled { signal, .. } => crate::exit_code::from_signal(signal),
        }
    }

    pub fn success(self) -> bool {
        self == Outcome::Exited(0)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Exited(code) => write!(f, "exit {code}"),
            Outcome::Signaled {
                signal,
                core_dumped,
            } => {
                write!(f, "killed by {}", signal_name(*signal))?;
                if *core_dumped {
                    write!(f, " (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

/// `SIGKILL`, `SIGTERM`, ... or `signal 42`.
pub fn signal_name(signo: i32) -> String {
    Signal::try_from(signo)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signo}"))
}

/// The soft and hard `RLIMIT_NOFILE` this process started with, once
/// [`raise_fd_limit`] raised the soft one; `u64::MAX` while not raised.
static STARTING_NOFILE: [AtomicU64; 2] = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];

/// Raises the soft limit on open files to the hard limit. One connection is
/// one descriptor, and the usual soft limit (1024) ends a run on a thousand
/// nodes with "Too many open files". Commands started through
/// [`GroupChild::spawn`] get the starting limit back: some programs still
/// misbehave with descriptors past 1024 (`select`).
pub fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= hard || STARTING_NOFILE[0].load(Ordering::Relaxed) != u64::MAX {
        return;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            STARTING_NOFILE[1].store(hard, Ordering::Relaxed);
            STARTING_NOFILE[0].store(soft, Ordering::Relaxed);
            tracing::debug!(soft, hard, "open-file limit raised");
        }
        Err(e) => tracing::debug!(soft, hard, error = %e, "open-file limit not raised"),
    }
}

/// The open-file limit this process started with, for its children, once
/// [`raise_fd_limit`] raised it.
fn starting_fd_limit() -> Option<libc::rlimit> {
    let soft = STARTING_NOFILE[0].load(Ordering::Relaxed);
    // rlim_t is u64 on every 64-bit Linux target.
    (soft != u64::MAX).then(|| libc::rlimit {
        rlim_cur: soft,
        rlim_max: STARTING_NOFILE[1].load(Ordering::Relaxed),
    })
}

/// Default dispositions for every catchable signal, real-time ones
/// included, and an empty mask: the one reset every child of `multinode`
/// gets (group leaders here, the supervisor's command). Async-signal-safe:
/// used in a child before it execs (after fork, or in `spawn`'s child).
pub fn reset_signals() {
    for signo in 1..=libc::SIGRTMAX() {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP {
            continue;
        }
        // SAFETY: setting SIG_DFL is valid for these numbers (the C library
        // refuses, harmlessly, the few it reserves for itself).
        unsafe {
            libc::signal(signo, libc::SIG_DFL);
        }
    }
    // SAFETY: an empty, initialised set; SIG_SETMASK with it unblocks everything.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// A spawned group leader. Dropped while armed, it SIGKILLs its group; a
/// leader not yet waited for is reaped in the background.
#[derive(Debug)]
pub struct GroupChild {
    pgid: Pid,
    /// Readable once the leader has exited; `None` where the kernel has no
    /// pidfd (before Linux 5.3): then [`GroupChild::wait`] polls.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    stdin: Option<pipe::Sender>,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    armed: bool,
    /// When the group first had a signal that ends it (see [`ends`]).
    signalled: std::cell::Cell<Option<tokio::time::Instant>>,
}

/// Whether `sig` asks a command to end: SIGTERM, SIGINT, SIGHUP. The grace
/// period of a group counts from the first of these it gets.
pub fn ends(sig: Signal) -> bool {
    matches!(sig, Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP)
}

/// How often [`GroupChild::wait`] looks without a pidfd.
const WAIT_POLL: Duration = Duration::from_millis(20);

impl GroupChild {
    /// Starts `spawn` as the leader of a new session, with default signal
    /// dispositions and an empty mask whatever it inherited from us (an agent
    /// started with `&` passes an ignored SIGINT on otherwise), and the
    /// open-file limit this process started with. Must be called inside a
    /// tokio runtime.
    pub fn spawn(spawn: &Spawn) -> io::Result<Self> {
        let started = spawn::start(spawn, starting_fd_limit())?;
        let pgid = Pid::from_raw(started.pid);
        let mut child = GroupChild {
            pgid,
            pidfd: None,
            status: None,
            stdin: None,
            stdout: None,
            stderr: None,
            armed: true,
            signalled: std::cell::Cell::new(None),
        };
        // From here `child` is dropped (and the group killed, the leader
        // reaped) on any error.
        // SAFETY: an OwnedFd keeps its descriptor for as long as it lives.
        child.pidfd = pidfd_open(started.pid).and_then(|fd| {
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
        });
        child.stdin = started.stdin.map(pipe::Sender::from_owned_fd).transpose()?;
        child.stdout = started
            .stdout
            .map(pipe::Receiver::from_owned_fd)
            .transpose()?;
        child.stderr = started
            .stderr
            .map(pipe::Receiver::from_owned_fd)
            .transpose()?;
        Ok(child)
    }

    pub fn pgid(&self) -> Pid {
        self.pgid
    }

    /// This side of the leader's stdin, stdout and stderr (with [`Stdio::Piped`]).
    pub fn take_stdio(
        &mut self,
    ) -> (
        Option<pipe::Sender>,
        Option<pipe::Receiver>,
        Option<pipe::Receiver>,
    ) {
        (self.stdin.take(), self.stdout.take(), self.stderr.take())
    }

    /// Sends `sig` to the whole group. A group already gone is not an error.
    pub fn signal(&self, sig: Signal) {
        if ends(sig) && self.signalled.get().is_none() {
            self.signalled.set(Some(tokio::time::Instant::now()));
        }
        signal_group(self.pgid, sig);
    }

    /// When the group first had a signal that ends it, if it had one.
    pub fn signalled_at(&self) -> Option<tokio::time::Instant> {
        self.signalled.get()
    }

    /// The leader's status if it has exited, reaping it.
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = reap(self.pgid.as_raw(), libc::WNOHANG)?;
        }
        Ok(self.status)
    }

    /// Waits for the leader. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<Outcome> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Outcome::from_status(status));
            }
            match &self.pidfd {
                Some(fd) => fd.readable().await?.clear_ready(),
                None => tokio::time::sleep(WAIT_POLL).await,
            }
        }
    }

    /// Ends the whole group: SIGTERM, then SIGKILL to whatever is left of
    /// the group `grace` later (the leader's exit does not restart the
    /// grace). Returns how the leader ended.
    pub async fn terminate(&mut self, grace: Duration) -> io::Result<Outcome> {
        let deadline = tokio::time::Instant::now() + grace;
        self.signal(Signal::SIGTERM);
        let outcome = match tokio::time::timeout_at(deadline, self.wait()).await {
            Ok(outcome) => outcome?,
            Err(_) => {
                self.signal(Signal::SIGKILL);
                self.wait().await?
            }
        };
        kill_group_at(self.pgid, deadline).await;
        Ok(outcome)
    }

    /// The group is known to be over; dropping no longer kills it.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, Signal::SIGKILL);
        }
        if matches!(self.try_wait(), Ok(None)) {
            // Not over yet: reaped when it is, so that no zombie stays.
            let pid = self.pgid.as_raw();
            let pidfd = self.pidfd.take();
            let reaper = async move {
                if let Some(fd) = &pidfd {
                    let _ = fd.readable().await;
                }
                let _ = tokio::task::spawn_blocking(move || reap(pid, 0)).await;
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(reaper)),
                Err(_) => drop(std::thread::spawn(move || reap(pid, 0))),
            }
        }
    }
}

/// How many bytes `pipe` holds unread (`FIONREAD`; 0 when it cannot tell).
pub fn bytes_unread(pipe: &pipe::Receiver) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which is valid.
    let rc = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 {
        usize::try_from(n).unwrap_or(0)
    } else {
        0
    }
}

/// `waitpid(pid, flags)`: the status once `pid` has exited.
fn reap(pid: libc::pid_t, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child, with a valid status pointer.
        match unsafe { libc::waitpid(pid, &mut status, flags) } {
            0 => return Ok(None),
            n if n == pid => return Ok(Some(ExitStatus::from_raw(status))),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// A pidfd for our child `pid`, readable once it has exited.
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, libc::PIDFD_NONBLOCK) };
    // SAFETY: a non-negative result is a fresh descriptor we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `sig` to group `pgid`, ignoring a group that no longer exists.
pub fn signal_group(pgid: Pid, sig: Signal) {
    if let Err(e) = signal::killpg(pgid, sig)
        && e != nix::errno::Errno::ESRCH
    {
        tracing::debug!(pgid = pgid.as_raw(), ?sig, error = %e, "killpg failed");
    }
}

/// Whether any live process (not a zombie waiting for its reaper) is still in group `pgid`.
pub fn group_alive(pgid: Pid) -> bool {
    if signal::killpg(pgid, None).is_err() {
        return false;
    }
    // killpg also counts zombies, which no signal can end: look closer.
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        live_member_of(&stat, pgid.as_raw())
    })
}

/// Reads a `/proc/PID/stat` line: in group `pgid` and not a zombie.
fn live_member_of(stat: &str, pgid: i32) -> bool {
    stat_ids(stat).is_some_and(|(pgrp, _)| pgrp == pgid)
}

/// A live process's group and session from its `/proc/PID/stat` line; `None`
/// for a zombie.
fn stat_ids(stat: &str) -> Option<(i32, i32)> {
    // Fields after the command name, which may itself hold spaces and ')'.
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let pgrp = fields.nth(1)?.parse::<i32>().ok()?;
    let session = fields.next()?.parse::<i32>().ok()?;
    (!matches!(state, "Z" | "X")).then_some((pgrp, session))
}

/// The process groups with a live member in session `sid`. A terminal's
/// session has several: a shell with job control gives each job its own.
pub fn session_groups(sid: Pid) -> Vec<Pid> {
    sessions_groups(|session| session == sid.as_raw())
}

/// The process groups with a live member in a session `wanted` says yes
/// to, in one pass over `/proc`.
pub fn sessions_groups(wanted: impl Fn(i32) -> bool) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut groups: Vec<Pid> = entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (pgrp, session) = stat_ids(&stat)?;
            wanted(session).then_some(Pid::from_raw(pgrp))
        })
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// Ends every process group of session `sid` as a terminal hangup would:
/// SIGHUP (and SIGCONT, for a stopped job), up to `grace`, then SIGKILL to
/// whatever is left of the session.
pub async fn end_session(sid: Pid, grace: Duration) {
    let groups = session_groups(sid);
    if groups.is_empty() {
        return;
    }
    for group in groups {
        signal_group(group, Signal::SIGHUP);
        signal_group(group, Signal::SIGCONT);
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if session_groups(sid).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for group in session_groups(sid) {
        signal_group(group, Signal::SIGKILL);
    }
}

/// Ends whatever is left of a group whose leader already exited: SIGTERM,
/// up to `grace`, then SIGKILL. Returns at once when the group is empty.
pub async fn end_group(pgid: Pid, grace: Duration) {
    if !group_alive(pgid) {
        return;
    }
    signal_group(pgid, Signal::SIGTERM);
    kill_group_at(pgid, tokio::time::Instant::now() + grace).await;
}

/// Ends what is left of a group whose leader exited. A group that had a
/// signal that ends it (at `signalled`) less than `grace` ago keeps its
/// grace: no second SIGTERM (it could cut short a handler still at work),
/// SIGKILL to what is left at `signalled + grace`. Otherwise SIGTERM, up to
/// `grace`, SIGKILL.
pub async fn end_group_after(pgid: Pid, grace: Duration, signalled: Option<tokio::time::Instant>) {
    match signalled.map(|at| at + grace) {
        Some(deadline) if tokio::time::Instant::now() < deadline => {
            kill_group_at(pgid, deadline).await;
        }
        _ => end_group(pgid, grace).await,
    }
}

/// Ending without a runtime (the keeper, the supervisor): SIGTERM through
/// `signal`, up to `grace` until `gone()` says everything ended (polled every
/// 50 ms), then SIGKILL through `signal` to whatever is left. The blocking
/// twin of [`end_group`].
pub fn end_blocking(signal: impl Fn(Signal), mut gone: impl FnMut() -> bool, grace: Duration) {
    signal(Signal::SIGTERM);
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline && !gone() {
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(Signal::SIGKILL);
}

/// Waits until the group is empty or `deadline` has come, then SIGKILLs
/// whatever is left: for a group that already has its signal.
pub async fn kill_group_at(pgid: Pid, deadline: tokio::time::Instant) {
    while tokio::time::Instant::now() < deadline {
        if !group_alive(pgid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal_group(pgid, Signal::SIGKILL);
}

/// How a program run by [`run_bounded`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutput {
    /// Not found (not on `PATH`, or the path does not exist).
    NotFound,
    /// It could not be started for another reason.
    SpawnError(String),
    /// It did not exit within the time given; it was killed.
    TimedOut,
    /// It exited (`code` is `None` when a signal ended it).
    Exited {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    },
}

/// Runs a program with a time limit, reading its output as it comes (a
/// grandchild that keeps a pipe open delays the answer by at most the
/// limit). On timeout the program is killed and not waited for: a process
/// stuck in the kernel (a GPU that fell off the bus) would not die anyway.
pub fn run_bounded(program: &str, args: &[&str], timeout: Duration) -> RunOutput {
    let deadline = std::time::Instant::now() + timeout;
    let mut child = match std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return RunOutput::NotFound,
        Err(e) => return RunOutput::SpawnError(e.to_string()),
    };
    let reader = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(mut pipe) = pipe {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.read_to_end(&mut buf);
                let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
            });
        }
        rx
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                return RunOutput::TimedOut;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return RunOutput::SpawnError(e.to_string()),
        }
    };
    let left = |rx: &std::sync::mpsc::Receiver<String>| {
        let wait = deadline.saturating_duration_since(std::time::Instant::now());
        rx.recv_timeout(wait).unwrap_or_default()
    };
    RunOutput::Exited {
        code: status.code(),
        stdout: left(&out),
        stderr: left(&err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_are_read_past_odd_names() {
        let line = "42 (a) b (c) S 1 77 77 0 -1 4194560";
        assert!(live_member_of(line, 77));
        assert!(!live_member_of(line, 78));
        assert!(!live_member_of("43 (sleep) Z 1 77 77 0", 77));
    }

    #[test]
    fn outcome_codes_follow_the_shell() {
        assert_eq!(Outcome::Exited(3).shell_code(), 3);
        let killed = Outcome::Signaled {
            signal: 9,
            core_dumped: false,
        };
        assert_eq!(killed.shell_code(), 137);
        assert_eq!(killed.to_string(), "killed by SIGKILL");
        assert_eq!(signal_name(200), "signal 200");
    }

    #[tokio::test]
    async fn terminate_ends_the_leader_and_its_children() {
        let mut cmd = Spawn::new("/bin/sh");
        cmd.arg("-c")
            .arg("sleep 1000 & echo $!; wait")
            .stdio(Stdio::Piped);
        let mut child = GroupChild::spawn(&cmd).unwrap();
        let mut out = child.take_stdio().1.unwrap();
        let mut line = Vec::new();
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        while !line.ends_with(b"\n") {
            let n = out.read(&mut buf).await.unwrap();
            assert!(n > 0, "no pid printed");
            line.extend_from_slice(&buf[..n]);
        }
        let grandchild: i32 = String::from_utf8(line).unwrap().trim().parse().unwrap();
        let outcome = child.terminate(Duration::from_secs(2)).await.unwrap();
        assert_eq!(
            outcome,
            Outcome::Signaled {
                signal: 15,
                core_dumped: false
            }
        );
        child.disarm();
        // The grandchild was in the group: it got SIGTERM too.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let alive = signal::kill(Pid::from_raw(grandchild), None).is_ok()
            && !std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .unwrap_or_default()
                .contains(") Z");
        assert!(!alive, "grandchild {grandchild} survived");
    }

    #[tokio::test]
    async fn terminate_escalates_to_sigkill() {
        let mut cmd = Spawn::new("/bin/sh");
        cmd.arg("-c").arg("trap '' TERM; sleep 1000");
        let mut child = GroupChild::spawn(&cmd).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let outcome = child.terminate(Duration::from_millis(300)).await.unwrap();
        assert_eq!(
            outcome,
            Outcome::Signaled {
                signal: 9,
                core_dumped: false
            }
        );
    }

    /// Whether the group is gone within a second (a SIGKILLed process takes a
    /// moment to die).
    async fn gone_soon(pgid: Pid) -> bool {
        for _ in 0..50 {
            if !group_alive(pgid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// A leader that handles SIGTERM and exits during the grace does not
    /// buy the rest of its group a new grace: what ignores SIGTERM is killed
    /// when the first grace is over, and gets no second SIGTERM.
    #[tokio::test]
    async fn the_grace_counts_from_the_signal_not_from_the_leaders_exit() {
        let dir = tempfile::tempdir().unwrap();
        let terms = dir.path().join("terms");
        let mut cmd = Spawn::new("/bin/sh");
        cmd.arg("-c").arg(format!(
            "(trap 'echo >> {t}' TERM; while :; do sleep 0.05; done) &
             trap 'sleep 1.2; exit 0' TERM; sleep 1000 & wait",
            t = terms.display()
        ));
        let mut child = GroupChild::spawn(&cmd).unwrap();
        let pgid = child.pgid();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let start = std::time::Instant::now();
        let outcome = child.terminate(Duration::from_millis(1500)).await.unwrap();
        let took = start.elapsed();
        assert_eq!(outcome, Outcome::Exited(0));
        assert!(gone_soon(pgid).await);
        // A grace restarted at the leader's exit would end it at 2.7 s.
        assert!(
            took >= Duration::from_millis(1400) && took < Duration::from_millis(2400),
            "the group ended {took:?} after SIGTERM, grace 1.5 s"
        );
        let seen = std::fs::read_to_string(&terms).unwrap_or_default();
        assert_eq!(
            seen.lines().count(),
            1,
            "SIGTERMs seen by the background job"
        );
    }

    #[tokio::test]
    async fn end_group_after_a_signal_keeps_its_deadline() {
        let mut cmd = Spawn::new("/bin/sh");
        cmd.arg("-c")
            .arg("(trap '' TERM; exec sleep 1000) & trap 'exit 0' TERM; sleep 1000 & wait");
        let mut child = GroupChild::spawn(&cmd).unwrap();
        let pgid = child.pgid();
        tokio::time::sleep(Duration::from_millis(300)).await;
        child.signal(Signal::SIGTERM);
        let at = child.signalled_at().expect("recorded");
        child.wait().await.unwrap();
        tokio::time::sleep(Duration::from_millis(800)).await;
        end_group_after(pgid, Duration::from_millis(1000), Some(at)).await;
        let took = at.elapsed();
        assert!(gone_soon(pgid).await);
        // A fresh grace from now would end it at 1.8 s.
        assert!(
            took >= Duration::from_millis(950) && took < Duration::from_millis(1600),
            "{took:?} after the signal, grace 1 s"
        );
        child.disarm();
    }

    #[tokio::test]
    async fn the_fd_limit_is_raised_and_children_get_the_starting_one() {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        if hard <= 256 {
            return; // nothing to raise on this machine
        }
        // nextest runs each test in its own process: this changes only ours.
        setrlimit(Resource::RLIMIT_NOFILE, 256, hard).unwrap();
        raise_fd_limit();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
        let mut cmd = Spawn::new("/bin/sh");
        cmd.arg("-c").arg("ulimit -n").stdio(Stdio::Piped);
        let mut child = GroupChild::spawn(&cmd).unwrap();
        let mut out = String::new();
        use tokio::io::AsyncReadExt;
        let mut pipe = child.take_stdio().1.unwrap();
        pipe.read_to_string(&mut out).await.unwrap();
        child.wait().await.unwrap();
        child.disarm();
        assert_eq!(out.trim(), "256");
    }

    #[tokio::test]
    async fn ignored_signals_are_reset_in_the_child() {
        // SAFETY: test-only; ignoring SIGINT in this test process is inherited by
        // fork unless reset, which is what we check.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
        }
        let mut cmd = Spawn::new("/bin/sh");
        cmd.arg("-c").arg("sleep 1000");
        let mut child = GroupChild::spawn(&cmd).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        child.signal(Signal::SIGINT);
        let outcome = tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .expect("SIGINT must end it")
            .unwrap();
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
        assert_eq!(
            outcome,
            Outcome::Signaled {
                signal: 2,
                core_dumped: false
            }
        );
    }
}
