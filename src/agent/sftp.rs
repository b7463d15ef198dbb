//! The `sftp` subsystem: SFTP version 3, as OpenSSH's `sftp`, `scp` (SFTP
//! mode, its default) and `sftp -S mn-ssh` speak it, served in the agent's
//! own process on this machine's files, as the agent's user, relative paths
//! from the agent's working directory (where its commands run).
//!
//! The protocol (packets, their encoding, one answer per request) is the
//! russh-sftp crate's; this module only maps requests to file operations.
//! No process is started (an image may have no `sftp-server`), so nothing
//! can outlive the channel: the session's task ends, and its open files
//! close, when the client closes the channel, the connection is lost or the
//! agent stops.
//!
//! Bounds, so that a buggy client cannot take the node's other jobs down:
//! files are opened without blocking (a FIFO is refused: SFTP reads and
//! writes at offsets, which a pipe has not), one request of a session runs
//! at a time (the crate's protocol loop), file operations of all sessions
//! together take at most [`IO_AT_ONCE`](super::sftp_bounds::IO_AT_ONCE) threads, a session holds at most
//! [`MAX_HANDLES`](super::sftp_bounds::MAX_HANDLES) handles and the agent a
//! quarter of its open-file limit in all (`sftp_bounds.rs`), and a
//! directory is read as READDIR asks (memory per handle, not per entry).
//! When the channel ends, a request still waiting on the file system is
//! answered at once, so the session's files close then.
//!
//! Limits: names must be UTF-8 (the crate's protocol types are strings); no
//! `statvfs` (sftp's `df`).

use std::sync::Arc;

use bytes::Bytes;
use russh::server::Msg;
use russh::{ChannelMsg, ChannelReadHalf, ChannelWriteHalf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::sftp_handler::Files;
use super::shared::Shared;

/// The subsystem's name in the SSH request.
pub(crate) const NAME: &str = "sftp";
/// Bytes in flight between the channel and the protocol task, each way.
const PIPE: usize = 256 * 1024;
/// Serves SFTP on the channel until the client closes it, the connection
/// ends or the agent stops; then closes the channel.
pub(crate) async fn serve(
    mut rx: ChannelReadHalf,
    tx: ChannelWriteHalf<Msg>,
    shared: Arc<Shared>,
    conn: CancellationToken,
) {
    let id = tx.id();
    debug!(channel = %id, "sftp session started");
    let (ours, theirs) = tokio::io::duplex(PIPE);
    // Cancelled when this function returns: a request still waiting on the
    // file system is answered then, and the protocol task can end.
    let ended = CancellationToken::new();
    let _ended = ended.clone().drop_guard();
    // The crate runs the protocol on its own task, on `theirs`; it ends when
    // `ours` is dropped (its reads see EOF), dropping the open files.
    russh_sftp::server::run(theirs, Files::new(shared.clone(), ended)).await;
    let (mut from_sftp, mut to_sftp) = tokio::io::split(ours);
    let tx = Arc::new(tx);
    let inbound = async {
        // At the pace the protocol task takes requests: a full pipe stops
        // this loop, which stops the channel's bounded queue.
        while let Some(msg) = rx.wait().await {
            match msg {
                ChannelMsg::Data { data } if to_sftp.write_all(&data).await.is_err() => break,
                ChannelMsg::Eof => {
                    let _ = to_sftp.shutdown().await;
                }
                ChannelMsg::Close => break,
                _ => {}
            }
        }
    };
    let outbound = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_sftp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx
                        .data_bytes(Bytes::copy_from_slice(&buf[..n]))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    };
    let finished = tokio::select! {
        () = inbound => false,
        () = outbound => true,
        () = conn.cancelled() => false,
        () = shared.shutdown.cancelled() => false,
    };
    if finished {
        // The protocol task ended (the client sent EOF): as sshd does when
        // its sftp-server exits.
        let _ = tx.exit_status(0).await;
        let _ = tx.eof().await;
    }
    let _ = tx.close().await;
    debug!(channel = %id, "sftp session ended");
}
