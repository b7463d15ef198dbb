//! The client's own watch on its TCP connection to a server: a close that
//! resets (`SO_LINGER` 0), and the liveness watch that counts a silent
//! server lost from the socket's state ([`crate::tcp_state`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tracing::debug;

use crate::tcp_state;

/// A close of the socket (this process's end, `kill -9` included) resets
/// the connection (`SO_LINGER` 0) instead of queuing a FIN. An agent whose
/// command does not read its stdin stops reading the connection once the
/// command's pipe and russh's queue are full; a FIN would wait behind the
/// bytes this side still holds for it, for as long as its kernel answers
/// (minutes), and the command would outlive its client. A reset is seen at
/// once (the agent's watchdog ends the connection's commands). Bytes not yet
/// sent are dropped with it: this process has ended, or has what it waited
/// for (a command's exit status comes after the command read its input).
pub(super) fn abort_on_close(stream: &TcpStream) {
    let abort = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    if let Err(e) = nix::sys::socket::setsockopt(stream, nix::sys::socket::sockopt::Linger, &abort)
    {
        debug!(error = %e, "SO_LINGER not set: a close sends a FIN");
    }
}

/// What the liveness watch and [`Connection::stuck`] read of one connection.
pub(super) struct SocketState {
    pub(super) established: bool,
    /// Since the last bytes came from the peer.
    pub(super) since_recv: Duration,
    /// Bytes from the peer not read yet: we are the slow side.
    pub(super) unread: bool,
    /// Bytes to the peer held back because its kernel says it has no room
    /// (a zero window whose probes it answers), or acknowledged a moment
    /// ago: the peer is alive and not reading what we send.
    pub(super) peer_full: bool,
    /// Bytes to the peer held back, and its kernel's window is zero.
    pub(super) peer_window_closed: bool,
    /// Bytes the peer has acknowledged on this connection.
    pub(super) bytes_acked: u64,
}

pub(super) fn socket_state(fd: &std::os::fd::OwnedFd, lost_after: Duration) -> Option<SocketState> {
    let tcp = tcp_state::read(fd)?;
    let zero_window = tcp.zero_window == Some(true);
    let acked_lately = tcp.since_ack_recv < lost_after;
    let unsent = tcp.unsent > 0;
    Some(SocketState {
        established: tcp.established,
        since_recv: tcp.since_recv,
        unread: tcp.unread > 0,
        peer_full: unsent && (zero_window || acked_lately),
        peer_window_closed: unsent && zero_window,
        bytes_acked: tcp.bytes_acked,
    })
}

/// Watches one connection until it is dropped or closed. When nothing has
/// come from the server for `lost_after` while neither side waits on the
/// other (see [`crate::defaults::LOST_AFTER`]), shuts the socket down: russh's session
/// then ends, and so does every channel (the node is lost).
pub(super) async fn liveness(
    socket: Arc<std::os::fd::OwnedFd>,
    lost_after: Duration,
    done: tokio_util::sync::CancellationToken,
    target: String,
) {
    let least = Duration::from_millis(250);
    let mut wait = lost_after;
    loop {
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let Some(state) = socket_state(&socket, lost_after) else {
            return;
        };
        if !state.established {
            return;
        }
        // Waiting on each other is not silence: the peer has no room for
        // our bytes (alive, not reading), or its bytes wait to be read here.
        if state.since_recv < lost_after || state.peer_full || state.unread {
            wait = lost_after.saturating_sub(state.since_recv).max(least);
            continue;
        }
        debug!(target = %target, silent = ?state.since_recv, "lost: nothing from the server and nothing waits");
        let _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&socket),
            nix::sys::socket::Shutdown::Both,
        );
        return;
    }
}
