//! The agent's answers to its own requests (`#multinode:ping`, `release`,
//! `wait-release`, `snapshot`, `ranks`, `top`, `show-group`, `show-start`; what they mean:
//! `protocol::control`).

use std::sync::Arc;

use russh::server::Msg;
use russh::{ChannelReadHalf, ChannelWriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::shared::Shared;
use crate::protocol::control::{Control, PingReply};
use crate::snapshot::run_start::RUN_START_MAX;
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
                // the client owns that group.
                tokio::select! {
                    () = shared.shutdown.cancelled() => {}
                    () = conn.cancelled() => {}
                    // What it tells of the group's output (`watch::PassedOn`).
                    () = json_lines(&mut rx, PASSED_ON_MAX, "show-group", |passed_on| {
                        watched.take_passed_on(passed_on)
                    }) => {}
                }
                shared.running.remove(pgid);
                debug!(
                    pgid = pgid.as_raw(),
                    "a client's process group no longer shown"
                );
                0
            }
        }
        Control::ShowStart => match shared.runs.hold() {
            None => {
                let msg = "multinode agent: too many runs shown at once: not shown\n";
                let _ = tx.extended_data_bytes(1, msg.as_bytes().to_vec()).await;
                1
            }
            Some(id) => {
                // Each line the run's start as its exec_all knows it now,
                // kept until the next; gone with the channel.
                tokio::select! {
                    () = shared.shutdown.cancelled() => {}
                    () = conn.cancelled() => {}
                    () = json_lines(&mut rx, RUN_START_MAX, "show-start", |run| {
                        shared.runs.set(id, run)
                    }) => {}
                }
                shared.runs.drop_run(id);
                0
            }
        },
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

/// Reads a `request` channel to its end, a line of JSON at a time, each
/// given to `take` (an unreadable one logged and skipped). At most `max`
/// bytes are held: a longer line is dropped whole.
async fn json_lines<T: serde::de::DeserializeOwned>(
    rx: &mut ChannelReadHalf,
    max: usize,
    request: &str,
    mut take: impl FnMut(T),
) {
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
            if pending.len() > max {
                pending.clear();
                skipping = !whole;
                continue;
            }
            if whole {
                if !skipping {
                    match serde_json::from_slice(&pending) {
                        Ok(value) => take(value),
                        Err(e) => debug!(error = %e, request, "an unreadable line"),
                    }
                }
                pending.clear();
                skipping = false;
            }
        }
    }
}
