//! The agent's SSH server: accepting connections, moving each to its
//! connection thread, the login deadline, the TCP watch and the end of a
//! connection. Who logs in and which channels are taken: `handler.rs`; a
//! session channel's requests and command: `session_channel.rs`.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use russh::{MethodKind, MethodSet};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::forward;
use super::handler::ConnHandler;
use super::login::{Login, MAX_AUTH_TRIES};
use super::shards::Shards;
use super::shared::Shared;
use crate::protocol;
use crate::tcp_state;

/// When the agent stops, how long a client may take to close its connection
/// after its commands ended, before the agent disconnects it.
const CLIENT_CLOSE_WAIT: Duration = Duration::from_secs(2);
/// After its login deadline, how long a connection's session may take to
/// send the disconnect message before its socket is shut down, and then to end.
const LOGIN_CLOSE_WAIT: Duration = Duration::from_millis(500);
/// How long the agent waits for a client's identification string before
/// sending its own. RFC 4253 lets both ends send at once, and OpenSSH's and
/// russh's clients send first; one that waits for the server's is served
/// as a stock client after this.
const CLIENT_ID_WAIT: Duration = Duration::from_millis(500);
/// TCP-level liveness, checked even while the SSH read loop waits on a full
/// stdin pipe: kernel keepalive probes and an unacknowledged-data limit.
const TCP_KEEPIDLE_S: u32 = 5;
const TCP_KEEPINTVL_S: u32 = 2;
const TCP_KEEPCNT: u32 = 3;
const TCP_USER_TIMEOUT_MS: u32 = 15_000;
const WATCHDOG_PERIOD: Duration = Duration::from_millis(500);

/// An agent's two russh server configurations, which differ in the channel
/// window alone: `multinode`'s own clients get the large one their liveness
/// check stands on, every other client (OpenSSH's) gets `sshd`'s.
#[derive(Clone)]
pub(crate) struct Configs {
    ours: Arc<russh::server::Config>,
    stock: Arc<russh::server::Config>,
}

impl Configs {
    pub(crate) fn new(shared: &Shared) -> Self {
        Self {
            ours: Arc::new(ssh_config(shared, protocol::AGENT_WINDOW)),
            stock: Arc::new(ssh_config(shared, protocol::STOCK_WINDOW)),
        }
    }
}

/// The russh server configuration of an agent, with this channel window.
fn ssh_config(shared: &Shared, window_size: u32) -> russh::server::Config {
    russh::server::Config {
        methods: MethodSet::from(&[MethodKind::PublicKey][..]),
        auth_rejection_time: Duration::from_millis(200),
        // OpenSSH's first "none" probe must not pay the rejection delay.
        auth_rejection_time_initial: Some(Duration::ZERO),
        max_auth_attempts: MAX_AUTH_TRIES,
        keys: vec![shared.keys.host.clone()],
        preferred: crate::protocol::algorithms::agent_preferred(),
        // Keepalives, not inactivity, end a connection: a quiet command may run for days.
        inactivity_timeout: None,
        keepalive_interval: Some(protocol::SERVER_KEEPALIVE_INTERVAL),
        keepalive_max: protocol::KEEPALIVE_MAX,
        nodelay: true,
        channel_buffer_size: protocol::CHANNEL_BUFFER,
        window_size,
        ..Default::default()
    }
}

/// Accepts connections until `shared.shutdown` is cancelled.
/// Each runs on a thread of `shards`'.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    configs: Configs,
    shards: Arc<Shards>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shared.shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Admitted, whatever its source: past a limit, the oldest
                // connection not logged in is closed instead.
                let login = shared.gate.admit(peer.ip());
                // Moved to its shard's runtime, where all its tasks run.
                let stream = match stream.into_std() {
                    Ok(stream) => stream,
                    Err(e) => {
                        warn!(%peer, error = %e, "cannot hand a connection over: closing it");
                        continue;
                    }
                };
                let shared2 = shared.clone();
                let configs = configs.clone();
                let connection = shared.tracker.track_future(async move {
                    match TcpStream::from_std(stream) {
                        Ok(stream) => {
                            connection(stream, peer, Arc::new(login), shared2, configs).await
                        }
                        Err(e) => {
                            warn!(%peer, error = %e, "cannot take a connection over: closing it")
                        }
                    }
                });
                shards.spawn(connection);
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    login: Arc<Login>,
    shared: Arc<Shared>,
    configs: Configs,
) {
    let deadline = tokio::time::Instant::now() + login.timeout();
    let _ = stream.set_nodelay(true);
    set_tcp_liveness(&stream);
    // A second descriptor of the socket, to watch its TCP state and to shut it
    // down: russh's session task cannot be aborted, and dropping its handle
    // does not stop it. Close-on-exec (F_DUPFD_CLOEXEC): a plain dup() would
    // hand this socket to every command spawned while the connection lasts.
    let Ok(socket) = stream.as_fd().try_clone_to_owned() else {
        warn!(%peer, "no descriptor left to watch a connection: closing it");
        return;
    };
    // Cancelled when this connection ends (not when the agent stops: then
    // commands end first and report how, and the connection closes after).
    let conn = CancellationToken::new();
    let channels = TaskTracker::new();
    let handler = ConnHandler {
        shared: shared.clone(),
        conn: conn.clone(),
        channels: channels.clone(),
        login: login.clone(),
        peer,
        env: shared.env.connection(),
        ptys: shared.ptys.connection(),
        forwards: forward::slots(),
        sessions: shared.sessions.connection(),
    };
    // Before the session runs, its future owns the stream: dropping it closes
    // the socket (after the penalty is recorded, so a reconnection pays it).
    let handshake = async move {
        let ours = names_itself_ours(&stream).await;
        debug!(%peer, ours, "client identified");
        let config = if ours { configs.ours } else { configs.stock };
        let stream = tokio::io::BufReader::with_capacity(protocol::SOCKET_READ_BUFFER, stream);
        russh::server::run_stream(config, stream, handler).await
    };
    tokio::pin!(handshake);
    let session = tokio::select! {
        started = &mut handshake => match started {
            Ok(session) => session,
            Err(e) => {
                info!(%peer, error = %e, "connection closed before logging in");
                return;
            }
        },
        () = tokio::time::sleep_until(deadline) => {
            login.time_out();
            info!(%peer, "no SSH banner within {} s: connection closed", login.timeout().as_secs_f64());
            return;
        }
        why = login.evicted() => {
            info!(%peer, "connection closed before its SSH banner: {why}");
            return;
        }
    };
    let handle = session.handle();
    let login_deadline = async {
        tokio::time::sleep_until(deadline).await;
        if !login.time_out() {
            // Logged in in time.
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(session);
    tokio::select! {
        result = &mut session => {
            if let Err(e) = result {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        }
        () = shared.shutdown.cancelled() => {
            // Each command ends its group and sends its status; the client,
            // having read them, closes the connection. Only one that does not
            // is disconnected: a disconnect sent at once could overtake the
            // statuses still on their way out.
            channels.close();
            let _ = tokio::time::timeout(shared.grace + Duration::from_secs(5), channels.wait()).await;
            if tokio::time::timeout(CLIENT_CLOSE_WAIT, &mut session).await.is_err() {
                let _ = handle
                    .disconnect(russh::Disconnect::ByApplication, "agent shutting down".into(), "en".into())
                    .await;
            }
        }
        () = watchdog(&socket) => {
            if login.logged_in() {
                info!(%peer, "peer gone (TCP closed or unresponsive): ending its commands");
            } else {
                info!(%peer, "connection closed before logging in");
            }
        }
        () = login_deadline => {
            info!(%peer, "not logged in within {} s: closing the connection", login.timeout().as_secs_f64());
            close_before_login(&handle, session.as_mut(), &socket, peer, login.deadline_reason()).await;
        }
        why = login.evicted() => {
            info!(%peer, "closing a connection not logged in: {why}");
            close_before_login(&handle, session.as_mut(), &socket, peer, why.to_string()).await;
        }
    }
    // Every command of this connection now ends its process group.
    conn.cancel();
}

/// Whether the client's identification string names `multinode`'s client
/// ([`protocol::CLIENT_ID_PREFIX`]), read from the socket without taking
/// it (russh reads it next). False for anything else, and for a client that
/// sends nothing within [`CLIENT_ID_WAIT`].
async fn names_itself_ours(stream: &TcpStream) -> bool {
    let prefix = protocol::CLIENT_ID_PREFIX.as_bytes();
    let mut buf = [0u8; 32];
    let read = async {
        loop {
            match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) if n >= prefix.len() || buf[..n].contains(&b'\n') => {
                    return buf[..n].starts_with(prefix);
                }
                // The rest of the line is on its way: peek would return the
                // same bytes at once.
                Ok(_) => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
    };
    tokio::time::timeout(CLIENT_ID_WAIT, read)
        .await
        .unwrap_or(false)
}

/// Tells the client of a connection that has not logged in why it is
/// closed (an OpenSSH client and `mn-ssh` print it), then closes the socket
/// whatever the session is doing: a client that does not read cannot hold
/// it open.
async fn close_before_login(
    handle: &russh::server::Handle,
    mut session: std::pin::Pin<&mut russh::server::RunningSession<ConnHandler>>,
    socket: &OwnedFd,
    peer: SocketAddr,
    reason: String,
) {
    let _ = tokio::time::timeout(
        LOGIN_CLOSE_WAIT,
        handle.disconnect(russh::Disconnect::ByApplication, reason, "en".into()),
    )
    .await;
    // A session is polled no more once it has ended: russh's
    // `RunningSession` panics if it is ("called after complete").
    let ended = tokio::time::timeout(LOGIN_CLOSE_WAIT, &mut session)
        .await
        .is_ok();
    let _ = nix::sys::socket::shutdown(socket.as_raw_fd(), nix::sys::socket::Shutdown::Both);
    if !ended
        && tokio::time::timeout(LOGIN_CLOSE_WAIT, &mut session)
            .await
            .is_err()
    {
        warn!(%peer, "a session outlived the shutdown of its socket");
    }
}

/// Kernel keepalives and a user timeout, so a vanished peer turns the socket
/// into an error state that [`watchdog`] sees.
fn set_tcp_liveness(stream: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let fd = stream;
    let _ = setsockopt(fd, sockopt::KeepAlive, &true);
    let _ = setsockopt(fd, sockopt::TcpKeepIdle, &TCP_KEEPIDLE_S);
    let _ = setsockopt(fd, sockopt::TcpKeepInterval, &TCP_KEEPINTVL_S);
    let _ = setsockopt(fd, sockopt::TcpKeepCount, &TCP_KEEPCNT);
    let _ = setsockopt(fd, sockopt::TcpUserTimeout, &TCP_USER_TIMEOUT_MS);
}

/// Returns once the TCP connection is closed by the peer or dead. It reads the
/// kernel's TCP state, which moves on a FIN, RST or timeout even while russh's
/// read loop is paused by a full stdin pipe (and so cannot see it).
async fn watchdog(fd: &OwnedFd) {
    loop {
        tokio::time::sleep(WATCHDOG_PERIOD).await;
        if tcp_state::established(fd) != Some(true) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// What `names_itself_ours` says of a client that sends `parts`, with
    /// `gap` between them (and then holds the socket open).
    async fn identify(parts: &[&[u8]], gap: Duration) -> bool {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let parts: Vec<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
        let (done, wait_done) = std::sync::mpsc::channel::<()>();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            for part in parts {
                s.write_all(&part).unwrap();
                std::thread::sleep(gap);
            }
            let _ = wait_done.recv_timeout(CLIENT_ID_WAIT * 4);
        });
        let (stream, _) = listener.accept().await.unwrap();
        let ours = names_itself_ours(&stream).await;
        if ours {
            // Only peeked: what the client sent is still there for russh.
            let mut buf = [0u8; 64];
            let n = stream.peek(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(protocol::CLIENT_ID_PREFIX.as_bytes()));
        }
        let _ = done.send(());
        client.join().unwrap();
        ours
    }

    #[tokio::test]
    async fn a_client_is_ours_by_its_identification_string_alone() {
        let ours = format!("{}\r\n", protocol::client_id());
        assert!(identify(&[ours.as_bytes()], Duration::ZERO).await);
        // Split across segments, as a slow network may deliver it.
        let (a, b) = ours.as_bytes().split_at(9);
        assert!(identify(&[a, b], Duration::from_millis(30)).await);
        // OpenSSH's client, and a russh client under its default name.
        assert!(
            !identify(
                &[b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u7\r\n"],
                Duration::ZERO
            )
            .await
        );
        assert!(!identify(&[b"SSH-2.0-russh_0.65.1\r\n"], Duration::ZERO).await);
        // A short line that ends before the name could.
        assert!(!identify(&[b"SSH-2.0-x\r\n"], Duration::ZERO).await);
    }

    #[tokio::test]
    async fn a_client_that_sends_nothing_is_served_as_stock_after_the_wait() {
        let start = std::time::Instant::now();
        assert!(!identify(&[], Duration::ZERO).await);
        let waited = start.elapsed();
        assert!(waited >= CLIENT_ID_WAIT, "{waited:?}");
    }
}
