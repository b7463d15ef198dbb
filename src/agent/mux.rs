//! Connection sharing, the head's end ([`crate::protocol::mux`]): the head's
//! agent keeps its logged-in connections to the nodes in a [`ConnectionPool`] and
//! forwards channels on them for the job's clients, which reach it on a Unix
//! socket in a directory only this user can enter.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use russh::ChannelMsg;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::mux_pool::ConnectionPool;
use crate::protocol::mux::{self as wire, read_frame, write_data, write_frame};
use crate::protocol::signals::sig_from_name;
use crate::transport::client::{Connection, Target};

/// How long a connection may stay stuck after a client went away.
const STUCK_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How often it is looked at meanwhile.
const STUCK_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// The Unix socket and its private directory, removed when dropped.
pub(crate) struct Socket {
    dir: PathBuf,
    path: PathBuf,
    listener: Option<UnixListener>,
}

impl Socket {
    /// Creates a directory only this user can enter, under the system's
    /// temporary directory, and listens in it.
    pub(crate) fn bind() -> std::io::Result<Socket> {
        let base = std::env::temp_dir();
        let pid = std::process::id();
        let mut attempt = 0u32;
        let dir = loop {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or_default();
            let dir = base.join(format!("multinode-mux-{pid}-{nanos:08x}"));
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Socket::bind_at(dir.join("mux.sock"), dir)
    }

    /// Listens at `path` (a path the user chose: `multinode agent
    /// --mux-socket`); nothing but the socket is removed at the end.
    pub(crate) fn bind_path(path: &Path) -> std::io::Result<Socket> {
        Socket::bind_at(path.to_path_buf(), PathBuf::new())
    }

    fn bind_at(path: PathBuf, dir: PathBuf) -> std::io::Result<Socket> {
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Socket {
            dir,
            path,
            listener: Some(listener),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What to remove if the agent dies, in the order to register them with
    /// the keeper (which removes them in reverse): the directory, the socket.
    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        if !self.dir.as_os_str().is_empty() {
            paths.push(self.dir.clone());
        }
        paths.push(self.path.clone());
        paths
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// Serves the socket until `stop`; each client connection is one channel.
pub(crate) async fn serve(
    socket: &mut Socket,
    pool: Arc<ConnectionPool>,
    tracker: TaskTracker,
    stop: CancellationToken,
) {
    let Some(listener) = socket.listener.take() else {
        return;
    };
    info!(socket = %socket.path.display(), "sharing connections");
    let me = nix::unistd::getuid().as_raw();
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    warn!(error = %e, "cannot accept on the shared-connection socket");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // The directory is this user's alone; this says so again.
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == me => {}
            other => {
                debug!(
                    ?other,
                    "a client of another user on the shared-connection socket"
                );
                continue;
            }
        }
        let pool = pool.clone();
        let stop = stop.clone();
        tracker.spawn(async move {
            tokio::select! {
                () = channel(stream, &pool) => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

async fn fail(w: &mut (impl AsyncWriteExt + Unpin), failed: wire::Failed) {
    let json = serde_json::to_vec(&failed).expect("plain fields serialize");
    let _ = write_frame(w, wire::FAILED, &json).await;
}

/// What the head's agent buffers for a client between two writes.
const DOWN_BUFFER: usize = 16 * 1024;

/// `future`'s output if it is ready at once; else `None`, and `future` is
/// dropped (so it must be cancel-safe, as a queue's receive is).
async fn ready_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match future.as_mut().poll(cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// After a client went away and its channel was closed: if the connection
/// stays stuck for [`STUCK_LIMIT`] (the node's agent has stopped reading
/// it, because a command does not read its stdin, and bytes for it wait
/// here, the close behind them), resets it. The node's agent then ends the
/// connection's commands (the stuck one, and any other that shares it:
/// none of their input, signals or closes could pass), and the next client
/// gets a new connection. Returns once the connection is reset, or closed.
async fn unstick(pool: &ConnectionPool, target: &Target, conn: &Arc<Connection>) {
    // Since when the connection has been stuck with the same bytes acknowledged.
    let mut stuck: Option<(tokio::time::Instant, u64)> = None;
    loop {
        tokio::time::sleep(STUCK_POLL).await;
        if conn.is_closed() {
            return;
        }
        let Some(acked) = conn.stuck() else {
            stuck = None;
            continue;
        };
        let since = match stuck {
            Some((since, before)) if before == acked => since,
            _ => {
                stuck = Some((tokio::time::Instant::now(), acked));
                continue;
            }
        };
        if since.elapsed() >= STUCK_LIMIT {
            info!(%target, "a closed channel's input is stuck on the connection (its command does not read it): resetting the connection");
            pool.forget(target, conn).await;
            conn.reset();
            return;
        }
    }
}

/// Whether the client's end of its Unix socket is closed: `POLLHUP` is
/// reported even while frames it sent before wait unread.
fn hung_up(stream: &UnixStream) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(stream.as_fd(), PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLHUP))
}

/// One client connection: open, start, then copy both ways until the
/// channel closes or the client goes (which closes the channel: the node
/// ends the command's group).
async fn channel(stream: UnixStream, pool: &ConnectionPool) {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let open = match read_frame(&mut r).await {
        Ok(Some((wire::OPEN, payload))) => serde_json::from_slice::<wire::Open>(&payload),
        _ => return,
    };
    let Ok(open) = open else {
        return;
    };
    if open.job != pool.job {
        let message = "a client of another job (another secret)".to_string();
        return fail(
            &mut w,
            wire::Failed {
                unreachable: false,
                other_job: true,
                message,
            },
        )
        .await;
    }
    // This agent knows the secret: a client proves it before it sends the
    // variables and the command (another user's socket at the path could not).
    match wire::prove(&pool.host_key, &open.challenge) {
        Ok(proof) => {
            if write_frame(&mut w, wire::PROOF, &proof).await.is_err() {
                return;
            }
        }
        Err(e) => {
            warn!(error = %e, "cannot answer a client's challenge");
            return;
        }
    }
    let target = Target {
        host: open.host,
        port: open.port,
        user: open.user,
    };
    let conn = match pool.get(&target).await {
        Ok(conn) => conn,
        Err(e) => {
            let failed = wire::Failed {
                unreachable: true,
                other_job: false,
                message: e.to_string(),
            };
            return fail(&mut w, failed).await;
        }
    };
    if write_frame(&mut w, wire::OPENED, conn.peer().to_string().as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let env = match read_frame(&mut r).await {
        Ok(Some((wire::ENV, payload))) => serde_json::from_slice::<Vec<(String, String)>>(&payload),
        _ => return,
    };
    let Ok(env) = env else {
        return;
    };
    let command = match read_frame(&mut r).await {
        Ok(Some((wire::COMMAND, command))) => command,
        _ => return,
    };
    let started = match conn.exec(&command, &env).await {
        Ok(channel) => Ok((channel, conn)),
        // A connection that died since it was kept: once more on a new one.
        Err(e) if conn.is_closed() => {
            debug!(%target, error = %e, "kept connection gone: connecting again");
            pool.forget(&target, &conn).await;
            match pool.get(&target).await {
                Ok(conn) => match conn.exec(&command, &env).await {
                    Ok(channel) => Ok((channel, conn)),
                    Err(e) => Err(e.to_string()),
                },
                Err(e) => Err(e.to_string()),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    let (channel, conn) = match started {
        Ok(started) => started,
        Err(message) => {
            let failed = wire::Failed {
                unreachable: false,
                other_job: false,
                message,
            };
            return fail(&mut w, failed).await;
        }
    };
    if write_frame(&mut w, wire::STARTED, b"").await.is_err() {
        return;
    }
    let (mut rx, tx) = channel.split();
    // Client → node: input, EOF, signals; the client's end closes the channel.
    let up = async {
        loop {
            match read_frame(&mut r).await {
                Ok(Some((wire::DATA, data))) => {
                    // The node's window may stay shut (its command does not
                    // read its input): a client that goes meanwhile must
                    // still be seen.
                    let sent = tx.data_bytes(data);
                    tokio::pin!(sent);
                    let sent = loop {
                        tokio::select! {
                            sent = &mut sent => break sent,
                            () = tokio::time::sleep(STUCK_POLL) => {
                                if hung_up(r.get_ref().as_ref()) {
                                    let _ = tokio::time::timeout(STUCK_POLL, tx.close()).await;
                                    unstick(pool, &target, &conn).await;
                                    std::future::pending::<()>().await;
                                }
                            }
                        }
                    };
                    if sent.is_err() {
                        break;
                    }
                }
                Ok(Some((wire::EOF, _))) => {
                    let _ = tx.eof().await;
                }
                Ok(Some((wire::SIGNAL, name))) => {
                    let name = String::from_utf8_lossy(&name);
                    let _ = tx.signal(sig_from_name(&name)).await;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    let _ = tx.close().await;
                    // The node's close ends the other direction, unless the
                    // close cannot reach it.
                    unstick(pool, &target, &conn).await;
                    std::future::pending::<()>().await;
                }
            }
        }
        std::future::pending::<()>().await;
    };
    // Node → client, until the channel closes (or is lost: the socket then
    // ends without CLOSE, and the client counts the node as lost). Frames
    // are buffered while the channel has more messages ready, and written
    // when it has none: a command's end (exit info, status, EOF, close)
    // wakes the client once, not four times.
    let down = async {
        let mut w = tokio::io::BufWriter::with_capacity(DOWN_BUFFER, &mut w);
        loop {
            let msg = match ready_now(rx.wait()).await {
                Some(msg) => msg,
                None => {
                    if w.flush().await.is_err() {
                        let _ = tx.close().await;
                        return;
                    }
                    rx.wait().await
                }
            };
            let Some(msg) = msg else {
                let _ = w.flush().await;
                return;
            };
            let sent = match msg {
                ChannelMsg::Data { data } => write_data(&mut w, None, &data).await,
                ChannelMsg::ExtendedData { data, ext } => {
                    write_data(&mut w, Some(ext), &data).await
                }
                ChannelMsg::Eof => write_frame(&mut w, wire::EOF, b"").await,
                ChannelMsg::Success => write_frame(&mut w, wire::SUCCESS, b"").await,
                ChannelMsg::Failure => write_frame(&mut w, wire::FAILURE, b"").await,
                ChannelMsg::ExitStatus { exit_status } => {
                    write_frame(&mut w, wire::EXIT_STATUS, &exit_status.to_be_bytes()).await
                }
                ChannelMsg::ExitSignal {
                    signal_name,
                    core_dumped,
                    error_message,
                    ..
                } => {
                    let signal = wire::ExitSignal {
                        name: crate::protocol::signals::sig_name(&signal_name),
                        core_dumped,
                        message: error_message,
                    };
                    let json = serde_json::to_vec(&signal).expect("plain fields serialize");
                    write_frame(&mut w, wire::EXIT_SIGNAL, &json).await
                }
                ChannelMsg::Close => {
                    let _ = write_frame(&mut w, wire::CLOSE, b"").await;
                    let _ = w.flush().await;
                    return;
                }
                _ => Ok(()),
            };
            if sent.is_err() {
                // The client is gone: the channel goes too.
                let _ = tx.close().await;
                return;
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}
