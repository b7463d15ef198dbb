//! The agent's answers to its own requests (`#multinode:ping`, `release`,
//! `wait-release`, `snapshot`, `ranks`, `top`, `show-group`, `show-start`; what they mean:
//! `protocol::control`).

use std::sync::Arc;

use russh::server::Msg;
use russh::{ChannelReadHalf, ChannelWriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::channel_lines::Lines;
use super::shared::Shared;
use crate::protocol::control::{Control, PingReply};
use crate::snapshot::run_start::{RUN_START_MAX, RunStart};

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
            let Some(_slot) = turn(&mut rx).await else {
                return;
            };
            let snap = super::snapshot::take(&shared).await;
            let mut line = serde_json::to_vec(&snap).expect("a plain struct serialises");
            line.push(b'\n');
            drop(snap);
            send_answer(&tx, line).await
        }
        Control::Ranks => {
            let snap = super::snapshot::ranks(&shared);
            let mut line = serde_json::to_vec(&snap).expect("a plain struct serialises");
            line.push(b'\n');
            let _ = tx.data_bytes(line).await;
            0
        }
        Control::Top { tail, ras } => {
            let Some(_slot) = turn(&mut rx).await else {
                return;
            };
            let snap = super::snapshot::take_for_top(&shared, tail, ras).await;
            let mut line = serde_json::to_vec(&snap).expect("a plain struct serialises");
            line.push(b'\n');
            drop(snap);
            send_answer(&tx, line).await
        }
        Control::ShowGroup { pgid, pid_ns } => {
            super::show_group::serve(pgid, pid_ns, &mut rx, &tx, &shared, &conn).await
        }
        Control::ShowStart => match shared.runs.hold() {
            None => {
                let msg = "multinode agent: too many runs shown at once: not shown\n";
                let _ = tx.extended_data_bytes(1, msg.as_bytes().to_vec()).await;
                1
            }
            Some(id) => {
                // Each line the run's start as its exec_all knows it now,
                // kept until the next; gone with the channel. A line is
                // parsed one at a time in all the agent, with its bounds
                // (`run_start::Ranks`), and kept within the runs' budget.
                tokio::select! {
                    () = shared.shutdown.cancelled() => {}
                    () = conn.cancelled() => {}
                    () = async {
                        let mut lines = Lines::new(&mut rx, RUN_START_MAX);
                        while let Some(line) = lines.next().await {
                            let Ok(_parsing) = shared.runs.parsing.acquire().await else {
                                return;
                            };
                            match serde_json::from_slice::<RunStart>(&line) {
                                Ok(run) => {
                                    if let Err(why) = shared.runs.set(id, run) {
                                        warn!("show-start: {why}: not kept");
                                    }
                                }
                                Err(e) => debug!(error = %e, "show-start: an unreadable line"),
                            }
                        }
                    } => {}
                }
                shared.runs.drop_run(id);
                super::heap::trim_heap();
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

/// A turn to take a snapshot ([`super::snapshot::slot`]); `None` when the
/// asker closed its channel (it gave up) while it waited.
async fn turn(rx: &mut ChannelReadHalf) -> Option<tokio::sync::SemaphorePermit<'static>> {
    tokio::select! {
        slot = super::snapshot::slot() => Some(slot),
        () = async {
            while !matches!(rx.wait().await, None | Some(russh::ChannelMsg::Close)) {}
        } => None,
    }
}

/// How long a snapshot's answer may take to be sent: a client that does
/// not read it holds a turn ([`turn`]) no longer than this.
const SEND_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends a snapshot's answer within [`SEND_LIMIT`]; the exit status (1:
/// the client did not take it in time, and gets no answer).
async fn send_answer(tx: &ChannelWriteHalf<Msg>, line: Vec<u8>) -> u32 {
    match tokio::time::timeout(SEND_LIMIT, tx.data_bytes(line)).await {
        Ok(_) => 0,
        Err(_) => {
            debug!("a snapshot's answer not taken within {SEND_LIMIT:?}: given up");
            1
        }
    }
}
