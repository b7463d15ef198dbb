//! The terminal while `top` runs live: the alternate screen, raw mode
//! (`transport::tty`'s guard: a key reaches `top` as it is typed, Ctrl-C
//! as a byte), the cursor hidden; all of it put back when the guard is
//! dropped, on every return (`q`, Ctrl-C, a signal, an error).

use tokio::sync::mpsc;

use crate::transport::tty::RawMode;

const ENTER: &str = "\x1b[?1049h\x1b[?25l";
const LEAVE: &str = "\x1b[?25h\x1b[?1049l";
const HOME_CLEAR: &str = "\x1b[H\x1b[2J";

/// What a key asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    Quit,
    Sort,
    Refresh,
}

/// A byte typed, as a key (`None`: not one of `top`'s).
pub(crate) fn key(byte: u8) -> Option<Key> {
    match byte {
        b'q' | b'Q' | 0x03 | 0x04 => Some(Key::Quit),
        b's' | b'S' => Some(Key::Sort),
        b' ' | b'r' => Some(Key::Refresh),
        _ => None,
    }
}

/// The terminal taken over; given back when dropped.
pub(crate) struct Screen {
    _raw: RawMode,
}

impl Screen {
    /// `None` when stdin is not a terminal.
    pub(crate) fn enter() -> Option<Screen> {
        let raw = RawMode::enter()?;
        let _ = crate::stdio::print(ENTER);
        Some(Screen { _raw: raw })
    }

    /// Draws one refresh (raw mode does not turn `\n` into `\r\n`).
    pub(crate) fn draw(&self, text: &str) {
        let mut frame = String::with_capacity(text.len() + 64);
        frame.push_str(HOME_CLEAR);
        frame.push_str(&text.replace('\n', "\r\n"));
        let _ = crate::stdio::print(&frame);
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = crate::stdio::print(LEAVE);
    }
}

/// The keys typed, read on a thread of their own (a blocking read of the
/// terminal; the thread ends with the process).
pub(crate) fn keys() -> mpsc::Receiver<Key> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::Builder::new()
        .name("mn-top-keys".into())
        .spawn(move || {
            use std::io::Read as _;
            let mut buf = [0u8; 32];
            let mut stdin = std::io::stdin();
            while let Ok(n @ 1..) = stdin.read(&mut buf) {
                for key in buf[..n].iter().filter_map(|b| key(*b)) {
                    if tx.blocking_send(key).is_err() {
                        return;
                    }
                }
            }
        })
        .map(drop)
        .unwrap_or_else(|e| tracing::debug!(error = %e, "no thread for the keys"));
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_by_byte() {
        assert_eq!(key(b'q'), Some(Key::Quit));
        assert_eq!(key(0x03), Some(Key::Quit), "Ctrl-C in raw mode");
        assert_eq!(key(b's'), Some(Key::Sort));
        assert_eq!(key(b'x'), None);
    }
}
