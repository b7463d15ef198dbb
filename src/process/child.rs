//! A spawned group leader ([`GroupChild`]): its pipes, waiting on a pidfd,
//! ending its whole group, and killed and reaped when dropped while armed.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::process::ExitStatus;
use std::time::Duration;

use std::os::unix::process::ExitStatusExt;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::child_setup::starting_fd_limit;
use super::drain::Group;
use super::group::{kill_group_at, signal_group};
use super::outcome::Outcome;
use super::spawn::{self, Spawn};

/// A spawned group leader. Dropped while armed, it SIGKILLs its group; a
/// leader not yet waited for is reaped in the background.
#[derive(Debug)]
pub struct GroupChild {
    /// Its group, which signals go to (and which remembers the first that ends it).
    group: Group,
    /// Readable once the leader has exited; `None` where the kernel has no
    /// pidfd (before Linux 5.3): then [`GroupChild::wait`] polls.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    stdin: Option<pipe::Sender>,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    armed: bool,
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
            group: Group::new(pgid),
            pidfd: None,
            status: None,
            stdin: None,
            stdout: None,
            stderr: None,
            armed: true,
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
        self.group.pgid()
    }

    /// Its group, to signal from another task while this one waits.
    pub fn group(&self) -> Group {
        self.group.clone()
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
        self.group.signal(sig);
    }

    /// The leader's status if it has exited, reaping it.
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = reap(self.pgid().as_raw(), libc::WNOHANG)?;
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
        kill_group_at(self.pgid(), deadline).await;
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
            signal_group(self.pgid(), Signal::SIGKILL);
        }
        if matches!(self.try_wait(), Ok(None)) {
            // Not over yet: reaped when it is, so that no zombie stays.
            let pid = self.pgid().as_raw();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Stdio;
    use crate::process::child_setup::raise_fd_limit;
    use crate::process::group::{end_group_after, group_alive};
    use nix::sys::signal;

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
        let at = child.group().signalled_at().expect("recorded");
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
