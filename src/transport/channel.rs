//! A session channel's two halves, whichever way the node was reached: a
//! russh channel of this process's own connection, or one forwarded by the
//! head's agent ([`super::mux_frames`]). exec_all and `mn-ssh` read and write
//! through these.

use bytes::Bytes;
use russh::client::Msg;
use russh::{ChannelMsg, ChannelReadHalf, ChannelWriteHalf, Sig};

use super::mux_frames::{self as mux, MuxReader, MuxWriter};
use super::tty::WindowSize;
use crate::protocol::mux as wire;
use crate::protocol::signals::sig_name;

/// A channel's incoming half.
pub enum ChannelRx {
    Ssh(ChannelReadHalf),
    Mux(MuxReader),
}

impl ChannelRx {
    /// The next message; `None` when the channel is gone without a close
    /// (the connection to the node was lost).
    pub async fn wait(&mut self) -> Option<ChannelMsg> {
        match self {
            ChannelRx::Ssh(rx) => rx.wait().await,
            ChannelRx::Mux(m) => m.wait().await,
        }
    }
}

/// A channel's outgoing half.
pub enum ChannelTx {
    Ssh(ChannelWriteHalf<Msg>),
    Mux(MuxWriter),
}

/// The other side no longer takes input.
#[derive(Debug)]
pub struct Refused;

impl ChannelTx {
    pub async fn data_bytes(&self, data: Bytes) -> Result<(), Refused> {
        match self {
            ChannelTx::Ssh(tx) => tx.data_bytes(data).await.map_err(|_| Refused),
            ChannelTx::Mux(w) => wire::write_data(&mut *w.lock().await, None, &data)
                .await
                .map_err(|_| Refused),
        }
    }

    pub async fn eof(&self) -> Result<(), Refused> {
        match self {
            ChannelTx::Ssh(tx) => tx.eof().await.map_err(|_| Refused),
            ChannelTx::Mux(w) => mux::write(w, wire::EOF, b"").await.map_err(|_| Refused),
        }
    }

    pub async fn signal(&self, sig: Sig) -> Result<(), Refused> {
        match self {
            ChannelTx::Ssh(tx) => tx.signal(sig).await.map_err(|_| Refused),
            ChannelTx::Mux(w) => mux::write(w, wire::SIGNAL, sig_name(&sig).as_bytes())
                .await
                .map_err(|_| Refused),
        }
    }

    /// The local window's new size (only a channel of its own has a terminal).
    pub async fn window_change(&self, size: WindowSize) -> Result<(), Refused> {
        match self {
            ChannelTx::Ssh(tx) => tx
                .window_change(size.cols, size.rows, size.width, size.height)
                .await
                .map_err(|_| Refused),
            ChannelTx::Mux(_) => Err(Refused),
        }
    }

    /// Closes the channel: the node ends what is left of the command's group.
    pub async fn close(&self) {
        match self {
            ChannelTx::Ssh(tx) => {
                let _ = tx.close().await;
            }
            ChannelTx::Mux(w) => mux::close(w).await,
        }
    }
}

/// A channel's input: `prefix` (if any), then every chunk of `input` (if
/// any), then EOF, at the pace the channel's window allows; it stops quietly
/// when the channel refuses more (the other side closed it). The one stdin
/// copy loop of a channel, for `mn-ssh` and exec_all's remote nodes.
pub(crate) async fn send_input(
    tx: &ChannelTx,
    prefix: Option<Bytes>,
    mut input: Option<tokio::sync::mpsc::Receiver<Bytes>>,
) {
    if let Some(prefix) = prefix
        && tx.data_bytes(prefix).await.is_err()
    {
        return;
    }
    if let Some(input) = input.as_mut() {
        while let Some(chunk) = input.recv().await {
            if tx.data_bytes(chunk).await.is_err() {
                return;
            }
        }
    }
    let _ = tx.eof().await;
}
