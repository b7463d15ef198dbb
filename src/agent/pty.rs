//! A terminal for a command (`pty-req`): the pty the agent opens with the
//! client's terminal type, size and modes, its size changes
//! (`window-change`), and the user's login shell for a `shell` request.
//!
//! The command's session has the pty's slave as its controlling terminal
//! (`process::Stdio::Terminal`): the line discipline turns the client's
//! Ctrl-C byte into SIGINT for the foreground job, as under sshd.
//!
//! Terminals are bounded: [`PER_CONNECTION`] a connection, and in all a
//! share of the machine's ptys and of the agent's open-file limit
//! ([`PtyBounds`]); past either the command is refused with a message.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use std::sync::Arc;

use nix::fcntl::OFlag;
use nix::sys::termios::{SetArg, tcgetattr, tcsetattr};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::protocol::terminal;

/// Terminals one connection may hold at once: a person's `mn-ssh -t` holds
/// one, the head's shared connection those of the job's users on a node.
pub(crate) const PER_CONNECTION: usize = 64;
/// The machine's ptys, where `/proc/sys/kernel/pty/max` cannot be read
/// (Linux's default).
const PTY_MAX: usize = 4096;

/// The bound on terminals in all connections of an agent (in `Shared`).
pub(crate) struct PtyBounds {
    all: Arc<Semaphore>,
    max: usize,
}

/// One connection's share of the terminals.
#[derive(Clone)]
pub(crate) struct ConnectionPtys {
    own: Arc<Semaphore>,
    all: Arc<Semaphore>,
    max: usize,
}

/// A terminal's place among its connection's and the agent's; given back
/// when dropped (once its command ended).
pub(crate) struct Slot {
    _own: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

impl PtyBounds {
    /// A quarter of the machine's ptys (other users and jobs need theirs)
    /// and an eighth of the open-file limit the agent runs with (each
    /// terminal holds three descriptors of its master; SFTP and logins take
    /// a quarter each), at least 16.
    pub(crate) fn new() -> Self {
        let ptys = std::fs::read_to_string("/proc/sys/kernel/pty/max")
            .ok()
            .and_then(|max| max.trim().parse::<usize>().ok())
            .unwrap_or(PTY_MAX);
        let files = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(soft, _)| usize::try_from(soft).unwrap_or(usize::MAX))
            .unwrap_or(1024);
        Self::with_max((ptys / 4).min(files / 8).max(16))
    }

    fn with_max(max: usize) -> Self {
        let max = max.min(Semaphore::MAX_PERMITS);
        PtyBounds {
            all: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// The share of a new connection.
    pub(crate) fn connection(&self) -> ConnectionPtys {
        ConnectionPtys {
            own: Arc::new(Semaphore::new(PER_CONNECTION)),
            all: self.all.clone(),
            max: self.max,
        }
    }
}

impl ConnectionPtys {
    /// A place for one more terminal, or the one line that tells the
    /// client which bound refused it.
    pub(crate) fn slot(&self) -> Result<Slot, String> {
        let refused = |limit: String| {
            format!(
                "multinode agent: error: too many terminals: {limit}, the agent's limit; \
                 nothing was run. Close some, or run the command without one (ssh -T)\n"
            )
        };
        let own = self
            .own
            .clone()
            .try_acquire_owned()
            .map_err(|_| refused(format!("{PER_CONNECTION} on this connection")))?;
        let all = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| refused(format!("{} in all connections of this agent", self.max)))?;
        Ok(Slot {
            _own: own,
            _all: all,
        })
    }
}

/// What the client asked for in its `pty-req`.
#[derive(Debug, Clone)]
pub(crate) struct Terminal {
    /// `TERM` for the command (`xterm-256color`); empty: not set.
    pub term: String,
    pub size: Size,
    pub modes: Vec<(russh::Pty, u32)>,
}

/// A window size in characters and pixels (0: unknown).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Size {
    pub cols: u32,
    pub rows: u32,
    pub width: u32,
    pub height: u32,
}

/// An open pty: the agent's end and the command's.
pub(crate) struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

impl Terminal {
    /// A new pty with this terminal's modes and size; both ends close on
    /// exec (the slave reaches the command through `dup2`), the master is
    /// non-blocking.
    pub fn open(&self) -> io::Result<Pty> {
        let master = nix::pty::posix_openpt(
            OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        )?;
        nix::pty::grantpt(&master)?;
        nix::pty::unlockpt(&master)?;
        let name = nix::pty::ptsname_r(&master)?;
        let slave = nix::fcntl::open(
            name.as_str(),
            OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        let slave = above_stdio(slave)?;
        let master = OwnedFd::from(master);
        let mut modes = tcgetattr(&slave)?;
        terminal::apply(&mut modes, &self.modes);
        tcsetattr(&slave, SetArg::TCSANOW, &modes)?;
        resize(master.as_fd(), self.size)?;
        Ok(Pty { master, slave })
    }
}

/// The slave becomes fds 0, 1 and 2 through `dup2`: it must not be one of them.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3)).map(|new| {
            // SAFETY: F_DUPFD_CLOEXEC returned a fresh descriptor that nothing else owns.
            unsafe { OwnedFd::from_raw_fd(new) }
        })?,
    )
}

/// Sets the terminal's size: the kernel sends SIGWINCH to its foreground job.
pub(crate) fn resize(master: BorrowedFd<'_>, size: Size) -> io::Result<()> {
    let clamp = |v: u32| u16::try_from(v).unwrap_or(u16::MAX);
    let ws = libc::winsize {
        ws_row: clamp(size.rows),
        ws_col: clamp(size.cols),
        ws_xpixel: clamp(size.width),
        ws_ypixel: clamp(size.height),
    };
    // SAFETY: TIOCSWINSZ reads one winsize through a valid pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The agent's user's login shell (passwd's, else `/bin/sh`) and the argv[0]
/// that makes it a login shell (`-bash`), as sshd starts it.
pub(crate) fn login_shell() -> (PathBuf, OsString) {
    let shell = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|user| user.shell)
        .filter(|shell| shell.is_absolute() && shell.exists())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"));
    let name = shell
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    let mut arg0 = b"-".to_vec();
    arg0.extend(name.into_vec());
    (shell, OsString::from_vec(arg0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminals_are_bounded_per_connection_and_in_all() {
        let bounds = PtyBounds::with_max(PER_CONNECTION + 10);
        let (a, b) = (bounds.connection(), bounds.connection());
        let mut held: Vec<Slot> = (0..PER_CONNECTION)
            .map(|_| a.slot().expect("room"))
            .collect();
        let refused = a.slot().err().expect("the connection is full");
        assert!(refused.contains("64 on this connection"), "{refused}");
        assert_eq!(refused.lines().count(), 1);
        held.extend((0..10).map(|_| b.slot().expect("room")));
        let refused = b.slot().err().expect("the agent is full");
        assert!(
            refused.contains("74 in all connections of this agent"),
            "{refused}"
        );
        held.truncate(PER_CONNECTION - 1);
        assert!(a.slot().is_ok(), "a closed terminal gave its place back");
        assert!(b.slot().is_ok());
    }

    #[test]
    fn the_agents_bound_is_a_share_of_the_machines_ptys() {
        let ptys: usize = std::fs::read_to_string("/proc/sys/kernel/pty/max")
            .expect("Linux")
            .trim()
            .parse()
            .expect("a number");
        let bounds = PtyBounds::new();
        assert!(
            (16..=(ptys / 4).max(16)).contains(&bounds.max),
            "{}",
            bounds.max
        );
    }
}
