//! A channel on which exec_all tells this machine's agent something while
//! it runs (`#multinode:show-group`: its own node's output; `#multinode:
//! show-start`: where its ranks' start is), on a connection of its own,
//! closed at the end. No agent there (or one that refuses) only means
//! nothing is shown: it is logged, never an error of the run.

use std::time::Duration;

use russh::ChannelMsg;
use russh::client::Msg;
use tracing::debug;

use crate::protocol::control::{self, Control};
use crate::transport::client::{Connection, Connector, Target};

/// An open channel to the agent, with its connection.
pub(crate) struct Telling {
    conn: Connection,
    channel: russh::Channel<Msg>,
}

impl Telling {
    /// Connects to the agent at `target` and sends `request`; `None`
    /// (logged) when there is no agent there or the request fails.
    pub(crate) async fn open(
        connector: &Connector,
        target: &Target,
        request: Control,
    ) -> Option<Self> {
        let conn = match connector.connect(target).await {
            Ok(conn) => conn,
            Err(e) => {
                debug!(host = %target.host, error = %e, "no agent here to tell");
                return None;
            }
        };
        match conn.exec(control::command(request).as_bytes(), &[]).await {
            Ok(channel) => Some(Telling { conn, channel }),
            Err(e) => {
                debug!(error = %e, "cannot tell this node's agent");
                Self::close_conn(&conn).await;
                None
            }
        }
    }

    /// Sends `line`; `false` once the channel is gone.
    pub(crate) async fn send(&self, line: &[u8]) -> bool {
        self.channel.data(line).await.is_ok()
    }

    /// Waits for the agent's next message: `false` once the channel ended
    /// (its word, when it refused, is logged).
    pub(crate) async fn open_still(&mut self) -> bool {
        match self.channel.wait().await {
            Some(ChannelMsg::ExtendedData { data, .. }) => {
                debug!(answer = %String::from_utf8_lossy(&data).trim_end(), "the agent refused");
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    pub(crate) async fn close(self) {
        Self::close_conn(&self.conn).await;
    }

    async fn close_conn(conn: &Connection) {
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
    }
}
