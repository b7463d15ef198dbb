//! The agent's own requests on a client connection (what they mean:
//! `protocol/control.rs`): ping, release, wait for the release.

use russh::ChannelMsg;

use super::client::Connection;
use crate::protocol;
use crate::protocol::control::{Control, PingReply};

impl Connection {
    /// Sends an agent control request; returns its exit status and stdout.
    pub(crate) async fn control(&self, control: Control) -> Result<(u32, Vec<u8>), russh::Error> {
        let mut channel = self
            .exec(protocol::control::command(control).as_bytes(), &[])
            .await?;
        let _ = channel.eof().await;
        let mut out = Vec::new();
        let mut status = None;
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => out.extend_from_slice(&data),
                ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                _ => {}
            }
        }
        status.map(|s| (s, out)).ok_or(russh::Error::Disconnect)
    }

    /// Asks an agent who it is.
    pub async fn ping(&self) -> Result<PingReply, String> {
        let (status, out) = self
            .control(Control::Ping)
            .await
            .map_err(|e| e.to_string())?;
        if status != 0 {
            return Err(format!("ping answered with status {status}"));
        }
        serde_json::from_slice(&out).map_err(|e| format!("unreadable ping answer: {e}"))
    }

    /// Releases an agent (the job is over).
    pub async fn release(&self) -> Result<(), String> {
        self.control(Control::Release)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Waits until the agent is released; an error means the connection was lost.
    pub async fn wait_release(&self) -> Result<(), String> {
        match self.control(Control::WaitRelease).await {
            Ok((0, _)) => Ok(()),
            Ok((status, _)) => Err(format!("wait answered with status {status}")),
            Err(e) => Err(e.to_string()),
        }
    }
}
