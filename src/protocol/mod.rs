//! The wire protocol between a client of this job (`transport`) and an agent
//! (`agent`): what both ends must agree on, in one place that both import
//! (neither imports the other for it).
//!
//! - `control`: the agent's own requests (`#multinode:ping`, `release`, `wait-release`).
//! - `signals`: signals by their SSH names, and a channel's exit message as an `Outcome`.
//! - `exit_info`: what a node tells of its command's end (OOM kills, a core), and how.
//! - `heartbeat`: a command's progress without output (its heartbeat file), and how it is told.
//! - `env_pack`: a node's variables in one `env` request.
//! - `mux`: connection sharing through the head's agent (frames on a Unix socket).
//! - `terminal`: a terminal's modes as `pty-req` carries them, to and from termios.
//! - `algorithms`: key exchange and cipher preferences between two `multinode` ends.
//! - here: the variables and constants both ends share, keepalive and channel settings.

pub mod algorithms;
pub mod control;
pub mod env_pack;
pub mod exit_info;
pub mod heartbeat;
pub mod mux;
pub mod signals;
pub mod terminal;

use std::time::Duration;

/// SSH keepalive from the agent: every 3 s of silence, at most 3 unanswered.
pub const SERVER_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(3);
/// Unanswered keepalives before the agent gives a client up. (A client
/// decides from its socket instead: `transport::client`'s liveness.)
pub const KEEPALIVE_MAX: usize = 3;

/// An agent's receive window for a channel, larger than any TCP receive
/// buffer: when a command leaves its stdin unread, the agent's read loop
/// waits (see ARCHITECTURE.md) and the client's bytes then stay in TCP,
/// where the client sees a zero window from a live peer (not a lost one).
/// It costs no memory: russh refills it as the bytes arrive.
pub const AGENT_WINDOW: u32 = 1 << 30;

/// The channel window an agent gives any other client (OpenSSH's `ssh`,
/// which judges a server by its own keepalives, not by TCP state): the
/// 2 MiB `sshd` gives. A larger one costs OpenSSH's client dearly: with
/// 1 GiB to fill it reads a forwarded port far ahead of the network, and its
/// buffers balloon (`ssh -L` uploaded at 40% of its speed to `sshd`).
pub const STOCK_WINDOW: u32 = 2 * 1024 * 1024;

/// How `multinode`'s clients begin their SSH identification string
/// (`SSH-2.0-multinode_VERSION`, RFC 4253 4.2): an agent gives a client
/// that names itself so [`AGENT_WINDOW`], every other one [`STOCK_WINDOW`].
pub const CLIENT_ID_PREFIX: &str = "SSH-2.0-multinode_";

/// The identification string `multinode`'s clients send.
pub fn client_id() -> String {
    format!("{CLIENT_ID_PREFIX}{}", env!("CARGO_PKG_VERSION"))
}

/// Bytes read from the socket at once (both ends). russh reads a packet in
/// two exact reads, its length and then the rest, straight from the socket,
/// and a third read finds it empty: three system calls a keystroke. Read
/// through a buffer of this size, a small packet (or several) is one. Not
/// larger: a read the buffer cannot hold bypasses it, so a bulk packet
/// (32 KiB) is copied through it only for its first 4 KiB (a 64 KiB buffer
/// copied all of it: 13% less forwarded throughput).
pub const SOCKET_READ_BUFFER: usize = 4 * 1024;

/// Messages queued per channel before the TCP stream is paused (both ends):
/// a reader that stops reading stops the sender through SSH flow control.
pub const CHANNEL_BUFFER: usize = 32;
