//! Requests of the agent protocol itself, sent as exec commands that start
//! with `#multinode:` (a comment, should one ever reach a shell). Only an
//! authenticated client of this job can send them.
//!
//! - `#multinode:ping`: prints one JSON line (version, host, rank, pid).
//! - `#multinode:release`: the job is over; the agent ends its commands and exits.
//! - `#multinode:wait-release`: answers exit 0 once this agent is released
//!   (a worker holds one of these open to the head to notice it leave).
//! - `#multinode:snapshot`: prints one JSON line, the snapshot of the
//!   commands this agent runs (`agent/snapshot.rs`).

use std::sync::Arc;

use russh::server::Msg;
use russh::{ChannelReadHalf, ChannelWriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::Shared;

const PREFIX: &[u8] = b"#multinode:";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    Ping,
    Release,
    WaitRelease,
    Snapshot,
}

pub(crate) fn parse(command: &[u8]) -> Option<Control> {
    let rest = command.strip_prefix(PREFIX)?;
    match rest.trim_ascii() {
        b"ping" => Some(Control::Ping),
        b"release" => Some(Control::Release),
        b"wait-release" => Some(Control::WaitRelease),
        b"snapshot" => Some(Control::Snapshot),
        _ => None,
    }
}

/// The exec command of a control request.
pub(crate) fn command(control: Control) -> &'static str {
    match control {
        Control::Ping => "#multinode:ping",
        Control::Release => "#multinode:release",
        Control::WaitRelease => "#multinode:wait-release",
        Control::Snapshot => "#multinode:snapshot",
    }
}

/// What `#multinode:ping` answers.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PingReply {
    pub version: String,
    pub host: String,
    pub rank: Option<usize>,
    pub pid: u32,
}

pub(crate) async fn run(
    control: Control,
    mut rx: ChannelReadHalf,
    tx: ChannelWriteHalf<Msg>,
    shared: Arc<Shared>,
    conn: CancellationToken,
) {
    let code = match control {
        Control::Ping => {
            let reply = PingReply {
                version: env!("CARGO_PKG_VERSION").to_string(),
                host: shared.host.clone(),
                rank: shared.rank,
                pid: std::process::id(),
            };
            let mut line = serde_json::to_vec(&reply).expect("a plain struct serialises");
            line.push(b'\n');
            let _ = tx.data_bytes(line).await;
            0
        }
        Control::Release => {
            info!("released by the head");
            // Answer first: the release ends this agent, and its connections with it.
            let _ = tx.exit_status(0).await;
            let _ = tx.eof().await;
            let _ = tx.close().await;
            shared.released.cancel();
            return;
        }
        Control::Snapshot => {
            let snap = super::snapshot::take(&shared).await;
            let mut line = serde_json::to_vec(&snap).expect("a plain struct serialises");
            line.push(b'\n');
            let _ = tx.data_bytes(line).await;
            0
        }
        Control::WaitRelease => {
            // Only a release answers: an agent that stops without one (its job
            // never started, a signal) just closes, and the worker sees it gone.
            tokio::select! {
                () = shared.released.cancelled() => 0,
                () = shared.shutdown.cancelled() => return,
                () = conn.cancelled() => return,
                // The client gave up waiting.
                () = async { while rx.wait().await.is_some() {} } => return,
            }
        }
    };
    let _ = tx.exit_status(code).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_known_requests() {
        assert_eq!(parse(b"#multinode:ping"), Some(Control::Ping));
        assert_eq!(parse(b"#multinode:release\n"), Some(Control::Release));
        assert_eq!(
            parse(b"#multinode:wait-release"),
            Some(Control::WaitRelease)
        );
        assert_eq!(parse(b"#multinode:rm -rf"), None);
        assert_eq!(parse(b"echo #multinode:ping"), None);
        for c in [
            Control::Ping,
            Control::Release,
            Control::WaitRelease,
            Control::Snapshot,
        ] {
            assert_eq!(parse(command(c).as_bytes()), Some(c));
        }
    }
}
