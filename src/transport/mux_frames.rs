//! A channel forwarded by the head's agent ([`super::mux`] opens it), as
//! frames on its socket ([`crate::protocol::mux`]): those that come decoded
//! into channel messages, those that go written whole.

use bytes::Bytes;
use russh::ChannelMsg;
use tokio::io::BufReader;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::protocol::mux::{self as wire, read_frame, write_frame};
use crate::protocol::signals::sig_from_name;

/// What comes from a node.
pub struct MuxReader {
    r: BufReader<OwnedReadHalf>,
}

impl MuxReader {
    pub(super) fn new(r: BufReader<OwnedReadHalf>) -> Self {
        Self { r }
    }

    /// The next message; `None` when the head's agent lost the node (or ended).
    pub async fn wait(&mut self) -> Option<ChannelMsg> {
        let (kind, payload) = read_frame(&mut self.r).await.ok()??;
        decode(kind, payload)
    }
}

/// Where commands go: the socket, to which [`write`] sends frames.
pub type MuxWriter = tokio::sync::Mutex<OwnedWriteHalf>;

/// Sends one frame to the head's agent; an error means it no longer takes input.
pub(super) async fn write(w: &MuxWriter, kind: u8, payload: &[u8]) -> std::io::Result<()> {
    write_frame(&mut *w.lock().await, kind, payload).await
}

/// No more input: the channel is closed.
pub(super) async fn close(w: &MuxWriter) {
    use tokio::io::AsyncWriteExt;
    let _ = w.lock().await.shutdown().await;
}

/// One frame from the head's agent as the channel message it stands for; an
/// unknown frame ends the channel as lost.
fn decode(kind: u8, payload: Bytes) -> Option<ChannelMsg> {
    Some(match kind {
        wire::DATA => ChannelMsg::Data { data: payload },
        wire::EXT if payload.len() >= 4 => ChannelMsg::ExtendedData {
            ext: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]),
            data: payload.slice(4..),
        },
        wire::EOF => ChannelMsg::Eof,
        wire::CLOSE => ChannelMsg::Close,
        wire::SUCCESS => ChannelMsg::Success,
        wire::FAILURE => ChannelMsg::Failure,
        wire::EXIT_STATUS if payload.len() == 4 => ChannelMsg::ExitStatus {
            exit_status: u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]),
        },
        wire::EXIT_SIGNAL => {
            let s: wire::ExitSignal = serde_json::from_slice(&payload).ok()?;
            ChannelMsg::ExitSignal {
                signal_name: sig_from_name(&s.name),
                core_dumped: s.core_dumped,
                error_message: s.message,
                lang_tag: String::new(),
            }
        }
        _ => return None,
    })
}
