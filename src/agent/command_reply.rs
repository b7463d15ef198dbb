//! What a command's channel is told: its output as it comes (stdout as
//! data, stderr as extended data 1), its heartbeats, what the node saw of
//! its end (for a client that asked), its exit status or signal; and the
//! end of a channel whose command did not run.

use std::sync::Arc;

use russh::ChannelWriteHalf;
use russh::server::Msg;
use tracing::debug;

use super::shared::Shared;
use crate::exit_info;
use crate::heartbeat::HeartbeatFile;
use crate::process::{self, Outcome};
use crate::protocol;
use crate::protocol::signals::signal_to_sig;
use crate::snapshot::watch::{Stream, Watched};
/// Reads a pipe to EOF, sending each chunk as it comes (stdout as data, stderr
/// as extended data 1). `data_bytes` waits for the client's window: a slow
/// client slows the command instead of growing a buffer here. Each chunk
/// is also `watched`'s (its time, its tail: `top`).
pub(super) async fn pump(
    pipe: Option<tokio::net::unix::pipe::Receiver>,
    tx: Arc<ChannelWriteHalf<Msg>>,
    ext: Option<u32>,
    watched: Arc<Watched>,
) {
    let Some(pipe) = pipe else { return };
    let mut reader = process::PipeReader::new(pipe);
    let stream = if ext.is_some() {
        Stream::Err
    } else {
        Stream::Out
    };
    while let Some(chunk) = reader.next().await {
        watched.seen(stream, &chunk);
        let sent = match ext {
            None => tx.data_bytes(chunk).await,
            Some(ext) => tx.extended_data_bytes(ext, chunk).await,
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The command's heartbeat file, in the agent's private directory; `None`
/// (the command runs without one) when it cannot be made.
pub(super) fn heartbeat_file(shared: &Shared) -> Option<HeartbeatFile> {
    let Some(dir) = shared.wire.dir() else {
        debug!("no private directory: the command gets no heartbeat file");
        return None;
    };
    HeartbeatFile::create(dir)
        .inspect_err(|e| debug!(error = %e, "no heartbeat file for the command"))
        .ok()
}

/// Tells the client of each heartbeat of the command (one message on its
/// own extended data stream, see `protocol::heartbeat`), for as long as it
/// is polled: until the command ends.
pub(super) async fn send_heartbeats(
    file: Option<&mut HeartbeatFile>,
    tx: &ChannelWriteHalf<Msg>,
    watched: &Watched,
) -> std::convert::Infallible {
    let Some(file) = file else {
        return std::future::pending().await;
    };
    loop {
        file.beat().await;
        watched.beat();
        let beat = bytes::Bytes::from_static(protocol::heartbeat::MESSAGE);
        if tx
            .extended_data_bytes(protocol::heartbeat::EXT_HEARTBEAT, beat)
            .await
            .is_err()
        {
            return std::future::pending().await;
        }
    }
}

/// Ends a channel whose command did not run: `message` on its stderr, exit
/// status `status`, EOF, close.
pub(crate) async fn end_unrun(tx: &ChannelWriteHalf<Msg>, message: String, status: i32) {
    let _ = tx.extended_data_bytes(1, message.into_bytes()).await;
    let _ = tx.exit_status(status as u32).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}

/// What the node saw of the command's end (OOM kills, a core), for a client
/// that asked: one message on its own extended data stream (see `exit_info`).
pub(super) async fn send_exit_info(
    tx: &ChannelWriteHalf<Msg>,
    watch: &exit_info::Watch,
    outcome: &Outcome,
) {
    let info = watch.finish(exit_info::may_have_dumped(outcome));
    debug!(channel = %tx.id(), ?info, "exit info");
    let _ = tx
        .extended_data_bytes(
            protocol::exit_info::EXT_EXIT_INFO,
            bytes::Bytes::from(info.to_message()),
        )
        .await;
}

pub(super) async fn send_outcome(
    tx: &ChannelWriteHalf<Msg>,
    handle: &russh::server::Handle,
    outcome: Outcome,
) {
    match outcome {
        Outcome::Exited(code) => {
            let _ = tx.exit_status(code as u32).await;
        }
        Outcome::Signaled {
            signal,
            core_dumped,
        } => {
            let _ = handle
                .exit_signal_request(
                    tx.id(),
                    signal_to_sig(signal),
                    core_dumped,
                    String::new(),
                    String::new(),
                )
                .await;
        }
    }
}
