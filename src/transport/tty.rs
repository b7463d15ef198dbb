//! `mn-ssh`'s own terminal when the remote side has one: what it asks for
//! (`pty-req`: `TERM`, the window's size, the terminal's modes), the window's
//! size again on SIGWINCH, and raw mode while the session lasts, so that
//! every key (Ctrl-C, Ctrl-Z included) reaches the remote terminal as a byte.
//!
//! Raw mode is a guard: dropped on every return of `mn-ssh`'s copy loop (an
//! error, the remote end, a signal handled as data), it puts the terminal's
//! modes back.

use std::io::IsTerminal;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};

use crate::protocol::terminal;

/// What a `pty-req` carries.
#[derive(Debug, Clone, Default)]
pub struct PtyRequest {
    pub term: String,
    pub size: WindowSize,
    pub modes: Vec<(russh::Pty, u32)>,
}

/// A window's size: columns, rows, and pixels (0: unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowSize {
    pub cols: u32,
    pub rows: u32,
    pub width: u32,
    pub height: u32,
}

fn stdin() -> BorrowedFd<'static> {
    // SAFETY: fd 0 is never closed by this program.
    unsafe { BorrowedFd::borrow_raw(libc::STDIN_FILENO) }
}

pub fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}

/// The request for this process's terminal: stdin's modes and size when it
/// is a terminal; `TERM` from the environment (empty: none), as OpenSSH sends them.
pub fn request(term: Option<&str>) -> PtyRequest {
    PtyRequest {
        term: term.unwrap_or_default().to_string(),
        size: window_size().unwrap_or_default(),
        modes: tcgetattr(stdin())
            .map(|t| terminal::encode(&t))
            .unwrap_or_default(),
    }
}

/// Stdin's window size, if it is a terminal.
pub fn window_size() -> Option<WindowSize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize through a valid pointer.
    let rc = unsafe { libc::ioctl(stdin().as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (rc == 0).then_some(WindowSize {
        cols: ws.ws_col.into(),
        rows: ws.ws_row.into(),
        width: ws.ws_xpixel.into(),
        height: ws.ws_ypixel.into(),
    })
}

/// Stdin's terminal in raw mode until dropped.
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// `None` when stdin is not a terminal (`-tt` from a pipe).
    pub fn enter() -> Option<RawMode> {
        let saved = tcgetattr(stdin()).ok()?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin(), SetArg::TCSADRAIN, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = tcsetattr(stdin(), SetArg::TCSADRAIN, &self.saved);
    }
}
