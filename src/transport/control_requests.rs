//! The agent's own requests on a client connection (what they mean:
//! `protocol/control.rs`): ping, release, wait for the release.

use russh::ChannelMsg;

use super::client::Connection;
use crate::protocol;
use crate::protocol::control::{Control, PingReply};

/// Why a control request got no answer.
#[derive(Debug)]
pub(crate) enum ControlError {
    /// The connection broke.
    Lost(russh::Error),
    /// The answer went past [`protocol::control::ANSWER_MAX`].
    TooLarge,
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Lost(e) => e.fmt(f),
            ControlError::TooLarge => write!(
                f,
                "the agent's answer is larger than {} MiB: not read",
                protocol::control::ANSWER_MAX >> 20
            ),
        }
    }
}

impl Connection {
    /// Sends an agent control request; returns its exit status and stdout,
    /// read up to [`protocol::control::ANSWER_MAX`] bytes: a longer answer
    /// is not read on ([`ControlError::TooLarge`]) and its channel closed.
    pub(crate) async fn control(&self, control: Control) -> Result<(u32, Vec<u8>), ControlError> {
        let mut channel = self
            .exec(protocol::control::command(control).as_bytes(), &[])
            .await
            .map_err(ControlError::Lost)?;
        let _ = channel.eof().await;
        let mut out = Vec::new();
        let mut status = None;
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => {
                    if out.len() + data.len() > protocol::control::ANSWER_MAX {
                        let _ = channel.close().await;
                        return Err(ControlError::TooLarge);
                    }
                    out.extend_from_slice(&data);
                }
                ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                _ => {}
            }
        }
        status
            .map(|s| (s, out))
            .ok_or(ControlError::Lost(russh::Error::Disconnect))
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
