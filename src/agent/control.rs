//! The agent's answers to its own requests (`#multinode:ping`, `release`,
//! `wait-release`, `snapshot`, `ranks`, `top`, `show-group`; what they mean:
//! `protocol::control`).

use std::sync::Arc;

use russh::server::Msg;
use russh::{ChannelReadHalf, ChannelWriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::shared::Shared;
use crate::protocol::control::{Control, PingReply};
use crate::snapshot::watch::{PASSED_ON_MAX, Watched};

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
        Control::Ranks => {
            let snap = super::snapshot::ranks(&shared);
            let mut line = serde_json::to_vec(&snap).expect("a plain struct serialises");
            line.push(b'\n');
            let _ = tx.data_bytes(line).await;
            0
        }
        Control::Top { tail, ras } => {
            let snap = super::snapshot::take_for_top(&shared, tail, ras).await;
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
                let watched = shared.running.add_watched(pgid, |keeps_tail| {
                    Watched::of_shown_group(pgid.as_raw(), keeps_tail)
                });
                // Shown while the client holds the channel; never signalled:
                // the client owns that group. What it tells of the group's
                // output comes as lines of JSON (`watch::PassedOn`).
                tokio::select! {
                    () = shared.shutdown.cancelled() => {}
                    () = conn.cancelled() => {}
                    () = take_passed_on(&mut rx, &watched) => {}
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

/// Reads a show-group channel to its end: each line of JSON is what the
/// client tells of the group's output. At most [`PASSED_ON_MAX`] bytes are
/// held: a longer line is dropped whole.
async fn take_passed_on(rx: &mut ChannelReadHalf, watched: &Watched) {
    let mut pending: Vec<u8> = Vec::new();
    let mut skipping = false;
    while let Some(msg) = rx.wait().await {
        let russh::ChannelMsg::Data { data } = msg else {
            continue;
        };
        for part in data.split_inclusive(|&b| b == b'\n') {
            let whole = part.ends_with(b"\n");
            if !skipping {
                pending.extend_from_slice(part);
            }
            if pending.len() > PASSED_ON_MAX {
                pending.clear();
                skipping = !whole;
                continue;
            }
            if whole {
                if !skipping {
                    match serde_json::from_slice(&pending) {
                        Ok(passed_on) => watched.take_passed_on(passed_on),
                        Err(e) => debug!(error = %e, "an unreadable show-group line"),
                    }
                }
                pending.clear();
                skipping = false;
            }
        }
    }
}
