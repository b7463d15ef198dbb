//! A session channel, from its first request to the command it runs: the
//! `env` and `pty-req` requests collected (against the environment's and
//! the terminals' bounds), then `exec`, `shell` or the `sftp` subsystem
//! served, or the command refused with one line and exit status 2.

use std::sync::Arc;

use russh::server::Msg;
use russh::{Channel, ChannelMsg};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::command::{self, Request};
use super::env_limit::ChannelEnv;
use super::pty::ConnectionPtys;
use super::shared::Shared;
use super::{command_reply, control, pty, sftp};
use crate::protocol;
use crate::protocol::env_pack;
use crate::vars;

/// Collects `env` and `pty-req` requests until `exec`, `shell` or the
/// `sftp` subsystem, then serves the request. Past the environment's bounds
/// (the hostlists its folded list expands to counted) the variables are
/// dropped (a failure reply to a client that wants one), and past the
/// terminals' the terminal is not opened: the request is then refused with
/// a message and exit status 2.
pub(super) async fn serve_channel(
    channel: Channel<Msg>,
    handle: russh::server::Handle,
    mut budget: ChannelEnv,
    ptys: ConnectionPtys,
    shared: Arc<Shared>,
    conn: CancellationToken,
) {
    let (mut rx, tx) = channel.split();
    let id = tx.id();
    let mut env = Vec::new();
    let mut terminal: Option<pty::Terminal> = None;
    // Held until the command ended; or why there is no room for one.
    let mut pty_slot: Option<Result<pty::Slot, String>> = None;
    let command = loop {
        let msg = tokio::select! {
            msg = rx.wait() => msg,
            () = conn.cancelled() => return,
            () = shared.shutdown.cancelled() => return,
        };
        match msg {
            // Every variable a client of the job sends is taken (it could as
            // well run `env NAME=VALUE cmd`): LANG, LC_*, GIT_PROTOCOL (git's
            // protocol v2), exec_all's contract. Only what cannot be a
            // variable is dropped, as sshd drops what AcceptEnv does not name.
            Some(ChannelMsg::SetEnv {
                variable_name,
                variable_value,
                ..
            }) => {
                let mut take = |name: &str, value: &str| {
                    if !is_env_name(name) || value.contains('\0') {
                        debug!(name, "env request ignored: not a variable");
                    } else if budget.admit(name, value) {
                        env.push((name.to_string(), value.to_string()));
                    }
                };
                if variable_name == vars::ENV_PACK {
                    for (name, value) in env_pack::unpack(&variable_value) {
                        take(name, value);
                    }
                } else {
                    take(&variable_name, &variable_value);
                }
                if budget.refused().is_some() {
                    env = Vec::new();
                    // Sent only if the request wanted a reply (OpenSSH's do not).
                    let _ = handle.channel_failure(id).await;
                }
            }
            Some(ChannelMsg::RequestPty {
                term,
                col_width,
                row_height,
                pix_width,
                pix_height,
                terminal_modes,
                ..
            }) => {
                if pty_slot.is_none() {
                    pty_slot = Some(ptys.slot());
                }
                terminal = Some(pty::Terminal {
                    term,
                    size: pty::Size {
                        cols: col_width,
                        rows: row_height,
                        width: pix_width,
                        height: pix_height,
                    },
                    modes: terminal_modes,
                });
            }
            Some(ChannelMsg::Exec { command, .. }) => break Some(command),
            // The user's login shell, as sshd starts it, with a terminal
            // or without one (`ssh -T host`: it reads its commands from stdin).
            Some(ChannelMsg::RequestShell { .. }) => break None,
            Some(ChannelMsg::RequestSubsystem { name, .. }) if name == sftp::NAME => {
                if refuse(&budget, &tx).await {
                    return;
                }
                sftp::serve(rx, tx, shared, conn).await;
                return;
            }
            Some(ChannelMsg::Eof | ChannelMsg::Close) | None => return,
            Some(_) => {}
        }
    };
    // Before anything is expanded: a few bytes can name a million hosts.
    budget.admit_hostlists(&env);
    if refuse(&budget, &tx).await {
        return;
    }
    if let Some(Err(message)) = &pty_slot {
        warn!(channel = %id, "{}", message.trim_end());
        command_reply::end_unrun(&tx, message.clone(), crate::exit_code::USAGE).await;
        return;
    }
    if let Some(request) = command.as_deref().and_then(protocol::control::parse) {
        control::run(request, rx, tx, shared, conn).await;
        return;
    }
    let request = Request {
        command,
        env,
        terminal,
    };
    command::run(request, rx, tx, handle, shared, conn).await;
}

/// If the channel's environment went past its bounds: says so on stderr,
/// exit status 2, and closes the channel.
async fn refuse(budget: &ChannelEnv, tx: &russh::ChannelWriteHalf<Msg>) -> bool {
    let Some(message) = budget.refused() else {
        return false;
    };
    warn!(channel = %tx.id(), "{}", message.trim_end());
    command_reply::end_unrun(tx, message, crate::exit_code::USAGE).await;
    true
}

/// A name `env` requests may set: not empty, no `=`, no NUL.
fn is_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}
