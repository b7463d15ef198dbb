//! The agent's group keeper: one small child process per agent that ends the
//! process groups of the agent's commands if the agent itself dies, even by
//! SIGKILL, when nothing in the agent can run any more.
//!
//! Each command registers its group from the child, before it execs,
//! by writing `+PGID` to a socket whose only reader is the keeper; the agent
//! registers it again once the spawn returned if a new keeper was started
//! meanwhile (else that line would be the keeper's third a command, for
//! nothing), and writes `-PGID` once the group is over. When the agent
//! dies, the socket's other end closes and the keeper reads EOF: it sends
//! SIGTERM to every group still registered, waits the grace period, and
//! SIGKILLs what is left. One keeper per agent costs
//! one process; a supervisor per command would cost an exec per command.
//!
//! It also removes what the agent would have removed on its way out: the
//! shared-connection socket and its directory, the directory of hostfiles
//! (`rPATH`, `uPATH` lines).
//!
//! A keeper that dies while the agent lives (`kill -9`, the OOM killer) is
//! seen at once ([`Keeper::watch`] waits on it, which also reaps it), logged,
//! and replaced: the new keeper's socket takes the old one's descriptor
//! number, and every group still running is registered with it. A keeper
//! that keeps dying (more than [`MAX_RESTARTS`] times in [`RESTART_WINDOW`])
//! or cannot be started stops the agent with an error: without a keeper, its
//! commands could outlive it.

use std::collections::{HashSet, VecDeque};
use std::io::BufRead;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigHandler, Signal};
use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, send, socketpair};
use nix::unistd::Pid;
use tracing::{error, warn};

use crate::error::Error;
use crate::process;

/// A keeper may die this many times within [`RESTART_WINDOW`] and be replaced.
pub(crate) const MAX_RESTARTS: usize = 5;
pub(crate) const RESTART_WINDOW: Duration = Duration::from_secs(60);

/// The agent's end of the keeper's socket, and the groups registered on it.
pub(crate) struct Keeper {
    bin: PathBuf,
    grace: Duration,
    /// The descriptor commands register on: the same number for the agent's
    /// whole life (a new keeper's socket is put in its place with `dup3`),
    /// so a `pre_exec` taken before a restart still names the current one.
    fd: RawFd,
    state: std::sync::Mutex<State>,
}

struct State {
    /// Owns [`Keeper::fd`].
    socket: OwnedFd,
    /// Groups registered and not yet over, for a new keeper.
    live: HashSet<i32>,
    /// Paths to remove if the agent dies (the shared-connection socket and
    /// its directory), for a new keeper.
    paths: Vec<PathBuf>,
    /// How many keepers were started after the first.
    restarts: u64,
}

/// Which keeper was current before a spawn ([`Keeper::current`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generation(u64);

impl Keeper {
    /// Starts `bin keep-groups --grace GRACE` with one end of a socket pair
    /// as its stdin, in its own process group (signals for the agent's
    /// terminal or group do not reach it). The child is for [`Keeper::watch`].
    pub(crate) fn start(
        bin: &Path,
        grace: Duration,
    ) -> Result<(Self, tokio::process::Child), Error> {
        let (socket, child) = spawn(bin, grace)?;
        let keeper = Keeper {
            bin: bin.to_path_buf(),
            grace,
            fd: socket.as_raw_fd(),
            state: std::sync::Mutex::new(State {
                socket,
                live: HashSet::new(),
                paths: Vec::new(),
                restarts: 0,
            }),
        };
        Ok((keeper, child))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("not poisoned: no panics while held")
    }

    /// Makes the child started from `spawn` register its pid (its future process
    /// group) with the keeper before it execs. The socket is close-on-exec,
    /// so the command itself never holds it.
    pub(crate) fn register_on_spawn(&self, spawn: &mut crate::process::Spawn) {
        /// Runs in the child before exec: getpid and send are
        /// async-signal-safe, and the buffer is on the stack. MSG_NOSIGNAL:
        /// a dead keeper gives EPIPE, not a SIGPIPE that would kill the
        /// command.
        fn announce(fd: RawFd) {
            let mut buf = [0u8; 24];
            // SAFETY: getpid has no preconditions; send reads `len` bytes of `buf`.
            unsafe {
                let len = format_line(&mut buf, b'+', libc::getpid());
                libc::send(fd, buf.as_ptr().cast(), len, libc::MSG_NOSIGNAL);
            }
        }
        // SAFETY: `announce` makes two async-signal-safe calls, no allocation.
        unsafe {
            spawn.before_exec(announce, self.fd);
        }
    }

    /// The keeper now: taken before a spawn, for [`Keeper::register`].
    pub(crate) fn current(&self) -> Generation {
        Generation(self.lock().restarts)
    }

    /// The group was spawned, its child having registered it with the
    /// keeper that was current then (or failed to, that keeper being dead).
    /// Kept for a later keeper; and registered again from here if a keeper
    /// was started since `before` (taken before the spawn), which the child
    /// may not have told.
    pub(crate) fn register(&self, pgid: Pid, before: Generation) {
        let mut state = self.lock();
        state.live.insert(pgid.as_raw());
        if state.restarts != before.0 {
            write_line(&state.socket, b'+', pgid.as_raw());
        }
    }

    /// The group is over: the keeper need not end it.
    pub(crate) fn forget(&self, pgid: Pid) {
        let mut state = self.lock();
        state.live.remove(&pgid.as_raw());
        write_line(&state.socket, b'-', pgid.as_raw());
    }

    /// Waits on the keeper; when it dies, logs it, reaps it and starts
    /// another. Returns only when no keeper can be kept: the agent must
    /// then stop.
    pub(crate) async fn watch(&self, mut child: tokio::process::Child) -> Error {
        let mut deaths: VecDeque<Instant> = VecDeque::new();
        loop {
            let pid = child.id();
            let status = child.wait().await;
            let how = match status {
                Ok(status) => process::Outcome::from_status(status).to_string(),
                Err(e) => e.to_string(),
            };
            let now = Instant::now();
            deaths.push_back(now);
            while deaths
                .front()
                .is_some_and(|t| now.duration_since(*t) > RESTART_WINDOW)
            {
                deaths.pop_front();
            }
            if deaths.len() > MAX_RESTARTS {
                return Error::Failed(format!(
                    "the group keeper (multinode keep-groups) died {} times within {} s, last \
                     {how}; stopping the agent, whose commands could otherwise outlive it",
                    deaths.len(),
                    RESTART_WINDOW.as_secs()
                ));
            }
            error!(
                pid,
                "the group keeper (multinode keep-groups) died ({how}): starting another"
            );
            child = match self.restart() {
                Ok(child) => child,
                Err(e) => {
                    return Error::Failed(format!(
                        "the group keeper (multinode keep-groups) died ({how}) and cannot be \
                         restarted: {e}; stopping the agent, whose commands could otherwise outlive it"
                    ));
                }
            };
        }
    }

    /// A new keeper in the old one's place, told every live group.
    fn restart(&self) -> Result<tokio::process::Child, Error> {
        let (socket, child) = spawn(&self.bin, self.grace)?;
        let mut state = self.lock();
        // Closes the dead keeper's socket and puts the new one at the same
        // number, in one step: a command forking meanwhile sees one or the other.
        nix::unistd::dup3(&socket, &mut state.socket, nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::Failed(format!("cannot hand the new keeper its socket: {e}")))?;
        drop(socket);
        state.restarts += 1;
        for &pgid in &state.live {
            write_line(&state.socket, b'+', pgid);
        }
        for path in &state.paths {
            write_path(&state.socket, b'r', path);
        }
        Ok(child)
    }

    /// If the agent dies, the keeper removes `path` (a file, or a directory
    /// and everything in it: [`remove_path`]), after the groups. Paths are removed in the reverse order
    /// of registration. A path with a newline is not kept.
    pub(crate) fn remove_on_death(&self, path: &Path) {
        if path.as_os_str().as_bytes().contains(&b'\n') {
            return;
        }
        let mut state = self.lock();
        state.paths.push(path.to_path_buf());
        write_path(&state.socket, b'r', path);
    }

    /// `path` was removed by the agent: the keeper need not.
    pub(crate) fn forget_path(&self, path: &Path) {
        let mut state = self.lock();
        state.paths.retain(|p| p != path);
        write_path(&state.socket, b'u', path);
    }
}

fn spawn(bin: &Path, grace: Duration) -> Result<(OwnedFd, tokio::process::Child), Error> {
    let (agent_end, keeper_end) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| Error::Failed(format!("cannot create the keeper's socket: {e}")))?;
    let child = tokio::process::Command::new(bin)
        .arg("keep-groups")
        .arg("--grace")
        .arg(format!("{:.3}", grace.as_secs_f64()))
        .stdin(Stdio::from(keeper_end))
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| Error::Failed(format!("cannot start the group keeper: {e}")))?;
    Ok((agent_end, child))
}

/// One registration line, without blocking: a stopped keeper must not stall
/// the agent, and a dead one is replaced by [`Keeper::watch`].
fn write_line(socket: &OwnedFd, sign: u8, pgid: i32) {
    let mut buf = [0u8; 24];
    let len = format_line(&mut buf, sign, pgid);
    if let Err(e) = tell(socket, &buf[..len]) {
        warn!(pgid, error = %e, "cannot tell the group keeper");
    }
}

/// Sends one line to the keeper, never blocking and never raising SIGPIPE.
fn tell(socket: &OwnedFd, line: &[u8]) -> nix::Result<usize> {
    send(
        socket.as_raw_fd(),
        line,
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
    )
}

/// `rPATH\n` (remove at the agent's death) or `uPATH\n` (no longer).
fn write_path(socket: &OwnedFd, sign: u8, path: &Path) {
    let mut line = Vec::with_capacity(path.as_os_str().len() + 2);
    line.push(sign);
    line.extend_from_slice(path.as_os_str().as_bytes());
    line.push(b'\n');
    if let Err(e) = tell(socket, &line) {
        warn!(path = %path.display(), error = %e, "cannot tell the group keeper");
    }
}

/// `+PID\n` or `-PID\n` into `buf` without allocating; returns its length.
fn format_line(buf: &mut [u8; 24], sign: u8, pid: libc::pid_t) -> usize {
    let mut digits = [0u8; 20];
    let mut n = pid.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let count = digits.len() - i;
    buf[0] = sign;
    buf[1..=count].copy_from_slice(&digits[i..]);
    buf[count + 1] = b'\n';
    count + 2
}

/// `multinode keep-groups --grace S`: the keeper process itself.
pub fn keep_groups(grace: Duration) -> Result<i32, Error> {
    // Only the socket's end ends the keeper.
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        // SAFETY: ignoring a signal installs no handler code.
        unsafe {
            let _ = nix::sys::signal::signal(sig, SigHandler::SigIgn);
        }
    }
    let mut groups: HashSet<i32> = HashSet::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().split(b'\n') {
        let Ok(line) = line else { break };
        match line.split_first() {
            Some((b'r', path)) => {
                paths.push(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
                continue;
            }
            Some((b'u', path)) => {
                let path = std::ffi::OsStr::from_bytes(path);
                paths.retain(|p| p.as_os_str() != path);
                continue;
            }
            _ => {}
        }
        let text = String::from_utf8_lossy(&line);
        let (sign, number) = text.split_at(text.len().min(1));
        match (sign, number.trim().parse::<i32>()) {
            ("+", Ok(pgid)) if pgid > 1 => {
                groups.insert(pgid);
            }
            ("-", Ok(pgid)) => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    // The agent is gone. Each command leads its own session: the groups of
    // its session go with it (a terminal's shell gives each job its own).
    let live = || process::sessions_groups(|sid| groups.contains(&sid));
    process::end_blocking(
        |sig| {
            for &pgid in &groups {
                process::signal_group(Pid::from_raw(pgid), sig);
            }
            for pgid in live() {
                process::signal_group(pgid, sig);
            }
        },
        || live().is_empty(),
        grace,
    );
    for path in paths.iter().rev() {
        remove_path(path);
    }
    Ok(0)
}

/// Removes a file, or a directory and everything in it, following no link
/// (`private_files::remove_all`): the agent's private directory holds its
/// commands' heartbeat files, which a command may have made a directory
/// with files in it.
pub(crate) fn remove_path(path: &Path) {
    if let Err(e) = crate::private_files::remove_all(path) {
        warn!(path = %path.display(), error = %e, "cannot remove what the agent left");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_lines_are_formatted_without_allocation() {
        let mut buf = [0u8; 24];
        let len = format_line(&mut buf, b'+', 4_194_304);
        assert_eq!(&buf[..len], b"+4194304\n");
        let len = format_line(&mut buf, b'-', 7);
        assert_eq!(&buf[..len], b"-7\n");
    }

    /// What the keeper's end of the socket holds now.
    fn lines(keeper_end: &OwnedFd) -> String {
        let mut buf = [0u8; 256];
        match nix::sys::socket::recv(keeper_end.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
            Err(nix::errno::Errno::EAGAIN) => String::new(),
            Err(e) => panic!("recv: {e}"),
        }
    }

    #[test]
    fn the_agent_registers_a_group_again_only_when_a_keeper_started_since_the_spawn() {
        let (agent_end, keeper_end) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .expect("socketpair");
        let keeper = Keeper {
            bin: PathBuf::new(),
            grace: Duration::ZERO,
            fd: agent_end.as_raw_fd(),
            state: std::sync::Mutex::new(State {
                socket: agent_end,
                live: HashSet::new(),
                paths: Vec::new(),
                restarts: 0,
            }),
        };
        // The child told the keeper that was current: nothing more to say.
        let before = keeper.current();
        keeper.register(Pid::from_raw(100), before);
        assert_eq!(lines(&keeper_end), "");
        // A keeper started between the spawn and its return: it is told here.
        let before = keeper.current();
        keeper.lock().restarts += 1;
        keeper.register(Pid::from_raw(101), before);
        assert_eq!(lines(&keeper_end), "+101\n");
        // Both are kept for the next keeper, and forgotten when over.
        assert_eq!(keeper.lock().live, HashSet::from([100, 101]));
        keeper.forget(Pid::from_raw(100));
        assert_eq!(lines(&keeper_end), "-100\n");
        assert_eq!(keeper.lock().live, HashSet::from([101]));
    }

    /// What the agent leaves to its keeper may hold more than files: a
    /// command made its heartbeat file a directory with files in it. All
    /// of it goes, and a link in it is removed, never followed.
    #[test]
    fn a_path_goes_whole_and_links_in_it_are_not_followed() {
        let base = tempfile::tempdir().expect("tempdir");
        let outside = base.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), "precious").expect("write");
        let dir = base.path().join("private");
        std::fs::create_dir_all(dir.join("heartbeat-x/deeper")).expect("mkdir");
        std::fs::write(dir.join("heartbeat-x/deeper/f"), "").expect("write");
        std::fs::write(dir.join("hosts"), "").expect("write");
        std::os::unix::fs::symlink(&outside, dir.join("heartbeat-x/link")).expect("link");
        remove_path(&dir);
        assert!(!dir.exists(), "{} is left", dir.display());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).expect("still there"),
            "precious"
        );
        // A link given as the path is removed itself.
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).expect("link");
        remove_path(&link);
        assert!(
            std::fs::symlink_metadata(&link).is_err(),
            "the link is left"
        );
        assert!(outside.join("keep").exists());
    }
}
