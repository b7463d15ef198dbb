//! The agent's answers to its own requests (`#multinode:ping`, `release`,
//! `wait-release`, `snapshot`, `show-group`; what they mean:
//! `protocol::control`).

use std::sync::Arc;

use russh::server::Msg;
use russh::{ChannelReadHalf, ChannelWriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::Shared;
use crate::protocol::control::{Control, PingReply};

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
        Control::ShowGroup { pgid, pid_ns } => {
            if crate::snapshot::pid_namespace() != Some(pid_ns) {
                let msg = format!(
                    "multinode agent: process group {pgid} is not in this agent's PID namespace: not shown\n"
                );
                let _ = tx.extended_data_bytes(1, msg.into_bytes()).await;
                1
            } else {
                let pgid = nix::unistd::Pid::from_raw(pgid);
                debug!(
                    pgid = pgid.as_raw(),
                    "a client's process group shown in snapshots"
                );
                shared.running.add(pgid);
                // Shown while the client holds the channel; never signalled:
                // the client owns that group.
                tokio::select! {
                    () = shared.shutdown.cancelled() => {}
                    () = conn.cancelled() => {}
                    () = async { while rx.wait().await.is_some() {} } => {}
                }
                shared.running.remove(pgid);
                debug!(
                    pgid = pgid.as_raw(),
                    "a client's process group no longer shown"
                );
                0
            }
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
