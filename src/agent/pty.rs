//! A terminal for a command (`pty-req`): the pty the agent opens with the
//! client's terminal type, size and modes, its size changes
//! (`window-change`), and the user's login shell for a `shell` request.
//!
//! The command's session has the pty's slave as its controlling terminal
//! (`process::Stdio::Terminal`): the line discipline turns the client's
//! Ctrl-C byte into SIGINT for the foreground job, as under sshd.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use nix::fcntl::OFlag;
use nix::sys::termios::{SetArg, tcgetattr, tcsetattr};

use crate::protocol::terminal;

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
