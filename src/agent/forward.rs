//! `direct-tcpip` channels: local port forwarding (`mn-ssh -L`, `ssh -L`)
//! for the job's authenticated clients.
//!
//! The destination is this node's loopback (`127.0.0.0/8`, `::1`,
//! `localhost`) or one of the job's nodes as its hostlist names them
//! (docs/security.md); anything else is refused, before any connection, with
//! `administratively prohibited` and a description that names what is
//! allowed. A connection holds at most [`MAX_PER_CONNECTION`] forwarded
//! channels at once and the agent [`ForwardBounds`] in all (a quarter of its
//! open-file limit: each holds a socket); past either the channel is
//! refused with `resource shortage` and the limit it met. Each connects
//! within [`CONNECT_TIMEOUT`] and copies bytes both ways until either side
//! ends, its SSH connection ends or the agent stops.
//!
//! A destination that does not read: OpenSSH's server holds such a channel
//! back alone: it sends a window adjustment only for the bytes its
//! destination took, so the client stops sending into that channel and
//! nothing else waits. russh 0.65 cannot: it refills a channel's window as
//! the bytes *arrive* (`Encrypted::adjust_window_size`, called for every
//! data packet before the channel or the handler sees it), its only hook
//! (`Handler::adjust_window`) sets one target for every channel of the
//! connection, and no call sends or holds back a window adjustment for one
//! channel. So the client may always send more into a channel than its
//! destination took, and the bytes must go somewhere: held without bound,
//! dropped, or left in TCP by pausing the connection's read loop (russh's
//! per-channel queue, `protocol::CHANNEL_BUFFER` messages, pauses it when
//! full). A forward takes what its destination does not yet take up to
//! [`HELD_MAX`] bytes (plus russh's queue); past that the connection's read
//! loop waits for it, as TCP would, which a slow destination that keeps
//! reading only slows. One that takes nothing for [`STALL_LIMIT`] while
//! the forward is so full (and the client has not sent its EOF, after
//! which nothing can wait behind it) is ended (its socket reset, the
//! channel closed, a line in the log), and the connection's other
//! channels go on: a destination that never reads freezes nothing for
//! longer than that. No byte is dropped while the forward lasts; what a
//! forward ended so held dies with it, as when a destination resets.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use russh::server::{ChannelOpenHandle, Msg};
use russh::{Channel, ChannelOpenFailure};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info};

use super::forward_copy::{ForwardEnd, HELD_MAX, STALL_LIMIT, Up, copy_both_ways, reset_on_close};

/// Forwarded channels one SSH connection may hold at once (a browser on a
/// dashboard opens a few dozen at most).
pub(crate) const MAX_PER_CONNECTION: usize = 256;
/// How long the agent tries to reach a destination before the channel fails.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// RFC 4254's reason codes, with a description of ours.
const PROHIBITED: u32 = 1;
const CONNECT_FAILED: u32 = 2;
const RESOURCE_SHORTAGE: u32 = 4;

/// Where this agent forwards to: its node's loopback and the job's nodes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Destinations {
    /// The job's hosts as the hostlist writes them (names lowercased, IPv6
    /// without brackets); empty when the agent was given no hostlist.
    nodes: Vec<String>,
}

impl Destinations {
    pub(crate) fn new<'a>(nodes: impl IntoIterator<Item = &'a str>) -> Destinations {
        Destinations {
            nodes: nodes.into_iter().map(normalize).collect(),
        }
    }

    /// `Ok` for a destination this agent connects to; otherwise the one line
    /// the client is told (it names the destination and what is allowed).
    pub(crate) fn check(&self, host: &str, port: u32) -> Result<(), String> {
        let name = normalize(host);
        let allowed = match name.parse::<IpAddr>() {
            Ok(ip) => ip.to_canonical().is_loopback() || self.nodes.contains(&name),
            Err(_) => name == "localhost" || self.nodes.contains(&name),
        };
        if port == 0 || port > u32::from(u16::MAX) {
            return Err(format!("port {port} of {host} is not a TCP port"));
        }
        if allowed {
            return Ok(());
        }
        let nodes = match self.nodes.len() {
            0 => "(this agent was given no hostlist)".to_string(),
            1..=4 => self.nodes.join(", "),
            n => format!("{}, ... ({n} nodes)", self.nodes[..3].join(", ")),
        };
        Err(format!(
            "{host}:{port} is not forwarded to: an agent forwards only to its node's loopback \
             (127.0.0.0/8, ::1, localhost) and to the job's nodes as the hostlist names them {nodes}"
        ))
    }
}

fn normalize(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.to_ascii_lowercase()
}

/// The forwarded channels of all the agent's connections.
pub(crate) struct ForwardBounds {
    /// Held by each forwarded channel: a quarter of the open-file limit
    /// (each holds a socket; the rest is for connections, commands, SFTP
    /// and logins).
    open: Arc<Semaphore>,
    max: usize,
}

impl ForwardBounds {
    /// From the open-file limit the agent runs with (after raising it).
    pub(crate) fn new() -> Self {
        let files = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(soft, _)| soft)
            .unwrap_or(1024);
        Self::with_max(usize::try_from(files / 4).unwrap_or(usize::MAX).max(16))
    }

    fn with_max(max: usize) -> Self {
        let max = max.min(Semaphore::MAX_PERMITS);
        ForwardBounds {
            open: Arc::new(Semaphore::new(max)),
            max,
        }
    }
}

/// A forwarded channel's place in both counts; given back when its task
/// ends. The memory its buffers took goes back to the system when it held
/// many bytes or was the agent's last forward.
struct Slot {
    _connection: OwnedSemaphorePermit,
    all: Option<OwnedSemaphorePermit>,
    open: Arc<Semaphore>,
    max: usize,
    held_much: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.all.take());
        if self.held_much || self.open.available_permits() == self.max {
            super::heap::trim_heap();
        }
    }
}

/// A connection's count of forwarded channels.
pub(crate) fn slots() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_PER_CONNECTION))
}

/// One `direct-tcpip` open request, as the client sent it.
pub(crate) struct DirectTcpip {
    pub channel: Channel<Msg>,
    pub host: String,
    pub port: u32,
    pub originator: String,
}

/// What a forwarded channel's task watches: its connection, the agent.
pub(crate) struct Scope<'a> {
    pub destinations: &'a Destinations,
    pub slots: &'a Arc<Semaphore>,
    pub bounds: &'a ForwardBounds,
    pub tracker: &'a TaskTracker,
    pub conn: &'a CancellationToken,
    pub shutdown: &'a CancellationToken,
}

/// Answers an open request: refused at once, or handed to a task that
/// connects and then accepts (or fails the channel with the reason).
/// Returns without waiting: russh calls it inside the connection's read loop.
pub(crate) async fn open(open: DirectTcpip, reply: ChannelOpenHandle, scope: Scope<'_>) {
    let DirectTcpip {
        channel,
        host,
        port,
        originator,
    } = open;
    if let Err(why) = scope.destinations.check(&host, port) {
        info!(%originator, destination = %format!("{host}:{port}"), "forward refused: not an allowed destination");
        reply.reject(failure(PROHIBITED, why)).await;
        return;
    }
    let Ok(connection) = scope.slots.clone().try_acquire_owned() else {
        info!(%originator, "forward refused: {MAX_PER_CONNECTION} already open on this connection");
        let why = format!(
            "this connection already forwards {MAX_PER_CONNECTION} connections; close some"
        );
        reply.reject(failure(RESOURCE_SHORTAGE, why)).await;
        return;
    };
    let max = scope.bounds.max;
    let Ok(all) = scope.bounds.open.clone().try_acquire_owned() else {
        info!(%originator, "forward refused: {max} already open on this agent");
        let why = format!(
            "the agent already forwards {max} connections in all (a quarter of its open-file \
             limit); close some"
        );
        reply.reject(failure(RESOURCE_SHORTAGE, why)).await;
        return;
    };
    let mut slot = Slot {
        _connection: connection,
        all: Some(all),
        open: scope.bounds.open.clone(),
        max,
        held_much: false,
    };
    let (conn, shutdown) = (scope.conn.clone(), scope.shutdown.clone());
    scope.tracker.spawn(async move {
        let ended = async {
            tokio::select! {
                () = conn.cancelled() => {}
                () = shutdown.cancelled() => {}
            }
        };
        tokio::select! {
            () = forward(channel, &host, port, reply, &mut slot) => {}
            // Dropping the channel's halves and the socket closes the
            // socket; a reply not sent yet is a refusal.
            () = ended => debug!(destination = %format!("{host}:{port}"), "forward ended with its connection"),
        }
    });
}

async fn forward(
    channel: Channel<Msg>,
    host: &str,
    port: u32,
    reply: ChannelOpenHandle,
    slot: &mut Slot,
) {
    let destination = format!("{host}:{port}");
    let target = normalize(host);
    // `check` made sure it fits.
    let port = u16::try_from(port).unwrap_or_default();
    let tcp =
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((target.as_str(), port)))
            .await
        {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => {
                debug!(%destination, error = %e, "forward: connect failed");
                reply
                    .reject(failure(
                        CONNECT_FAILED,
                        format!("connect to {destination} failed: {e}"),
                    ))
                    .await;
                return;
            }
            Err(_) => {
                let why = format!(
                    "connect to {destination} timed out after {} s",
                    CONNECT_TIMEOUT.as_secs()
                );
                reply.reject(failure(CONNECT_FAILED, why)).await;
                return;
            }
        };
    let _ = tcp.set_nodelay(true);
    reply.accept().await;
    let (mut rx, tx) = channel.split();
    let mut up = Up::default();
    let end = copy_both_ways(&mut rx, &tx, &tcp, &mut up).await;
    slot.held_much = up.peak >= HELD_MAX;
    // What is still queued for this channel goes, and russh's read loop,
    // if it waits to queue more, goes on: its sends now fail at once.
    drop(rx);
    match end {
        ForwardEnd::Done => debug!(%destination, up = up.total, "forward ended"),
        ForwardEnd::ClientClosed => {
            debug!(%destination, up = up.total, "forward closed by the client")
        }
        ForwardEnd::Failed(e) => debug!(%destination, error = %e, "forward ended with an error"),
        ForwardEnd::Stalled => {
            info!(
                %destination,
                "forward ended: its destination took nothing for {} s while {} KiB waited \
                 for it, and the connection's other channels waited behind it",
                STALL_LIMIT.as_secs(),
                up.held / 1024
            );
            // A reset, not a FIN: the destination did not get all it was sent.
            reset_on_close(&tcp);
        }
    }
    let _ = tx.close().await;
}

fn failure(code: u32, reason: String) -> ChannelOpenFailure {
    ChannelOpenFailure::Other { code, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_the_jobs_nodes_are_allowed() {
        let d = Destinations::new(["node1", "10.0.0.7", "fd00::7"]);
        for host in [
            "127.0.0.1",
            "127.3.4.5",
            "::1",
            "[::1]",
            "::ffff:127.0.0.1",
            "localhost",
            "LocalHost",
            "node1",
            "NODE1",
            "10.0.0.7",
            "[fd00::7]",
        ] {
            assert_eq!(d.check(host, 6006), Ok(()), "{host}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_what_is_allowed() {
        let d = Destinations::new(["node1", "node2"]);
        for host in [
            "10.0.0.8",
            "example.com",
            "node3",
            "0.0.0.0",
            "::",
            "169.254.169.254",
        ] {
            let why = d.check(host, 80).unwrap_err();
            assert!(
                why.starts_with(&format!("{host}:80 is not forwarded to")),
                "{why}"
            );
            assert!(why.contains("127.0.0.0/8, ::1, localhost"), "{why}");
            assert!(why.ends_with("node1, node2"), "{why}");
        }
        let why = Destinations::default().check("10.1.1.1", 22).unwrap_err();
        assert!(why.ends_with("(this agent was given no hostlist)"), "{why}");
        assert!(d.check("127.0.0.1", 0).is_err());
        assert!(d.check("127.0.0.1", 70000).is_err());
    }

    #[test]
    fn a_long_hostlist_is_shortened_in_the_message() {
        let hosts: Vec<String> = (0..100).map(|i| format!("n{i}")).collect();
        let d = Destinations::new(hosts.iter().map(String::as_str));
        let why = d.check("x", 1).unwrap_err();
        assert!(why.ends_with("n0, n1, n2, ... (100 nodes)"), "{why}");
    }
}
