//! One exec request: `sh -c COMMAND` as a group leader, its stdin, stdout and
//! stderr passed on over the channel, signals forwarded to its group, and the
//! exit status or signal sent back. Runs in its own task, never inside a
//! russh handler method.
//!
//! With a terminal (`pty-req`), the command (or the user's login shell, for a
//! `shell` request) has a pty instead of pipes: its output comes back as one
//! stream, the client's window changes resize it, and when the command ends
//! or the client goes, every job of its session ends with it.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use russh::server::Msg;
use russh::{ChannelMsg, ChannelReadHalf, ChannelWriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::command_reply::{
    end_unrun, heartbeat_file, pump, send_exit_info, send_heartbeats, send_outcome,
};
use super::plain;
use super::pty::{self, Terminal};
use super::shared::Shared;
use crate::exit_info;
use crate::process::{self, GroupChild, Outcome, Spawn, Stdio};
use crate::protocol::signals::signal_number;
use crate::snapshot::watch::Watched;
use crate::vars;

/// What the client asked for before `exec`.
pub(crate) struct Request {
    /// `None`: the user's login shell (a `shell` request).
    pub command: Option<Vec<u8>>,
    pub env: Vec<(String, String)>,
    pub terminal: Option<Terminal>,
}

/// Runs the request to completion and closes the channel. `conn` is cancelled
/// when the connection ends; the command's group is then ended.
pub(crate) async fn run(
    req: Request,
    mut rx: ChannelReadHalf,
    tx: ChannelWriteHalf<Msg>,
    handle: russh::server::Handle,
    shared: Arc<Shared>,
    conn: CancellationToken,
) {
    let id = tx.id();
    // exec_all sends the hostlists folded; this node writes them out. A
    // list other than the last one's (up to 65,536 names: ~1 s of a debug
    // build's CPU) is expanded off this connection's thread, which serves
    // other connections too. Held until the command ended: its hostfile
    // stays until then.
    let mut env = req.env;
    let expanded = if shared.wire.expands_at_once(&env) {
        shared.wire.expand_wire(&mut env)
    } else {
        let shared = shared.clone();
        let expanding = tokio::task::spawn_blocking(move || {
            let expanded = shared.wire.expand_wire(&mut env);
            (env, expanded)
        });
        match expanding.await {
            Ok((back, expanded)) => {
                env = back;
                expanded
            }
            Err(e) => {
                let msg = format!("multinode agent: cannot write out the hostlists: {e}\n");
                return end_unrun(&tx, msg, crate::exit_code::CANNOT_EXECUTE).await;
            }
        }
    };
    let _lists = match expanded {
        Ok(lists) => lists,
        Err(e) => {
            let msg = format!("multinode agent: warning: {e}\n");
            let _ = tx.extended_data_bytes(1, msg.into_bytes()).await;
            None
        }
    };
    let mut cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let mut cwd_set = false;
    let mut wants_exit_info = false;
    let mut wants_heartbeat = false;
    let mut vars = Vec::with_capacity(env.len());
    for (name, value) in env {
        if name == vars::EXIT_INFO {
            wants_exit_info = value == "1";
        } else if name == vars::HEARTBEAT {
            wants_heartbeat = value == "1";
        } else if name == vars::CWD {
            if std::path::Path::new(&value).is_dir() {
                cwd = value.into();
                cwd_set = true;
            } else {
                let msg = format!(
                    "multinode agent: warning: no directory {value} here; staying in the agent's\n"
                );
                let _ = tx.extended_data_bytes(1, msg.into_bytes()).await;
            }
        } else {
            vars.push((name, value));
        }
    }
    let path = vars
        .iter()
        .chain(shared.base_env.iter())
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let direct = req
        .command
        .as_deref()
        .and_then(plain::argv)
        .and_then(|argv| plain::resolve(argv, path));
    let terminal = match req.terminal.as_ref().map(Terminal::open).transpose() {
        Ok(terminal) => terminal,
        Err(e) => {
            let msg = format!("multinode agent: cannot open a terminal: {e}\n");
            return end_unrun(&tx, msg, crate::exit_code::CANNOT_EXECUTE).await;
        }
    };
    if req.command.is_none() && !cwd_set {
        // A login shell starts at home, as sshd starts it.
        let home = vars
            .iter()
            .chain(shared.base_env.iter())
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| std::ffi::OsString::from(v))
            .or_else(|| std::env::var_os("HOME"));
        if let Some(home) = home.filter(|h| std::path::Path::new(h).is_dir()) {
            cwd = home.into();
            cwd_set = true;
        }
    }
    // Removed when this function returns: after the command's group ended.
    let mut heartbeat = wants_heartbeat.then(|| heartbeat_file(&shared)).flatten();
    let build = |direct: Option<&plain::Direct<'_>>| {
        let mut cmd = match (direct, &req.command) {
            (Some(d), _) => {
                let mut cmd = Spawn::new(&d.program);
                cmd.arg0(d.argv[0]).args(&d.argv[1..]);
                cmd
            }
            (None, Some(command)) => {
                let mut cmd = Spawn::new("/bin/sh");
                cmd.arg("-c").arg(OsStr::from_bytes(command));
                cmd
            }
            (None, None) => {
                let (shell, arg0) = pty::login_shell();
                let mut cmd = Spawn::new(&shell);
                cmd.arg0(arg0);
                cmd.env("SHELL", shell);
                cmd
            }
        };
        // Registered with the keeper: the group ends even if this agent is killed.
        shared.keeper.register_on_spawn(&mut cmd);
        cmd.envs(shared.base_env.iter().map(|(k, v)| (k, v)));
        cmd.envs(vars.iter().map(|(k, v)| (k, v)));
        if let Some(file) = &heartbeat {
            cmd.env(vars::HEARTBEAT_FILE, file.path());
        }
        match (&terminal, &req.terminal) {
            (Some(opened), Some(asked)) => {
                cmd.stdio(Stdio::Terminal(opened.slave.as_raw_fd()));
                if !asked.term.is_empty() {
                    cmd.env("TERM", &asked.term);
                }
            }
            _ => {
                cmd.stdio(Stdio::Piped);
            }
        }
        if cwd_set {
            cmd.current_dir(&cwd);
        }
        if direct.is_some() {
            // As sh exports it: the directory the command runs in (a PWD
            // among the variables was the head's).
            cmd.env("PWD", &cwd);
        }
        cmd
    };

    let watch = wants_exit_info.then(|| exit_info::Watch::start(&cwd));
    let keeper = shared.keeper.current();
    let spawned = match &direct {
        // A program exec cannot start (a script without #!) is sh's to run.
        Some(d) => GroupChild::spawn(&build(Some(d))).or_else(|e| {
            debug!(program = %d.program.display(), error = %e, "direct exec failed; through sh");
            GroupChild::spawn(&build(None))
        }),
        None => GroupChild::spawn(&build(None)),
    };
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let msg = format!("multinode agent: cannot run /bin/sh: {e}\n");
            return end_unrun(&tx, msg, crate::exit_code::CANNOT_EXECUTE).await;
        }
    };
    let pgid = child.pgid();
    shared.keeper.register(pgid, keeper);
    // A terminal is a person's (`multinode shell --rank R` gives its shell
    // the process's RANK): it claims no rank, so that `top` and the next
    // `shell --rank R` see the one process that does.
    let claims_rank = terminal.is_none();
    let watched = shared.running.add_watched(pgid, |keeps_tail| {
        Watched::from_vars(
            vars.iter()
                .filter(|_| claims_rank)
                .map(|(k, v)| (k.as_str(), v.as_str())),
            keeps_tail,
        )
    });
    debug!(channel = %id, pgid = pgid.as_raw(), "command started");
    // With a terminal: the master, both ways; its copy for window changes.
    let (stdin, stdout, stderr, winsize) = match terminal {
        Some(opened) => match terminal_ends(opened) {
            Ok((stdin, stdout, winsize)) => (Some(stdin), Some(stdout), None, Some(winsize)),
            Err(e) => {
                debug!(channel = %id, error = %e, "no descriptor left for the terminal");
                (None, None, None, None)
            }
        },
        None => {
            let (stdin, stdout, stderr) = child.take_stdio();
            // Written as `stdio::write_all_async` does: not registered with
            // the runtime while it has room.
            let stdin = stdin.and_then(|pipe| pipe.into_nonblocking_fd().ok());
            (stdin, stdout, stderr, None)
        }
    };
    let session = winsize.is_some();

    let tx = Arc::new(tx);
    let out_pump = tokio::spawn(pump(stdout, tx.clone(), None, watched.clone()));
    let err_pump = tokio::spawn(pump(stderr, tx.clone(), Some(1), watched.clone()));

    // Inbound: stdin data at the pace the command reads it (a full pipe stops
    // this loop, which stops russh's bounded channel queue, which stops the
    // TCP stream: memory stays bounded), EOF, signals, and the channel's close.
    let peer_closed = CancellationToken::new();
    let group = child.group();
    let inbound = {
        let peer_closed = peer_closed.clone();
        let group = group.clone();
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(msg) = rx.wait().await {
                match msg {
                    ChannelMsg::Data { data } => {
                        if let Some(pipe) = &stdin
                            && crate::stdio::write_all_async(pipe.as_fd(), &data)
                                .await
                                .is_err()
                        {
                            // The command closed its stdin: drop the rest.
                            stdin = None;
                        }
                    }
                    ChannelMsg::Eof => stdin = None,
                    ChannelMsg::WindowChange {
                        col_width,
                        row_height,
                        pix_width,
                        pix_height,
                    } => {
                        if let Some(master) = &winsize {
                            let size = pty::Size {
                                cols: col_width,
                                rows: row_height,
                                width: pix_width,
                                height: pix_height,
                            };
                            if let Err(e) = pty::resize(master.as_fd(), size) {
                                debug!(error = %e, "window change not applied");
                            }
                        }
                    }
                    ChannelMsg::Signal { signal } => match signal_number(&signal) {
                        Some(signo) => group.signal(signo),
                        None => debug!(?signal, "unknown signal name ignored"),
                    },
                    ChannelMsg::Close => break,
                    _ => {}
                }
            }
            peer_closed.cancel();
        })
    };

    let ended = tokio::select! {
        status = child.wait() => Some(status),
        () = peer_closed.cancelled() => None,
        () = conn.cancelled() => None,
        () = shared.shutdown.cancelled() => None,
        never = send_heartbeats(heartbeat.as_mut(), &tx, &watched) => match never {},
    };

    match ended {
        Some(status) => {
            let outcome = status.unwrap_or(Outcome::Exited(1));
            let pumps = async {
                let _ = out_pump.await;
                let _ = err_pump.await;
            };
            let drained = process::settle(&group, shared.grace, session, pumps).await;
            debug!(channel = %id, ?drained, "output drained");
            child.disarm();
            shared.keeper.forget(pgid);
            shared.running.remove(pgid);
            debug!(channel = %id, %outcome, "command ended");
            if let Some(watch) = &watch {
                send_exit_info(&tx, watch, &outcome).await;
            }
            send_outcome(&tx, &handle, outcome).await;
            let _ = tx.eof().await;
            let _ = tx.close().await;
        }
        None => {
            debug!(channel = %id, "channel closed, connection lost or agent stopping: ending the command's group");
            if session {
                // As a terminal's hangup: the shell, then its jobs (each its own group).
                process::end_session(pgid, shared.grace).await;
            }
            let outcome = child.terminate(shared.grace).await;
            child.disarm();
            shared.keeper.forget(pgid);
            shared.running.remove(pgid);
            debug!(
                channel = %id,
                ?outcome,
                peer_closed = peer_closed.is_cancelled(),
                conn_lost = conn.is_cancelled(),
                "command ended"
            );
            // The client may still be there (the agent is stopping): tell it how the command ended.
            if !peer_closed.is_cancelled()
                && !conn.is_cancelled()
                && let Ok(outcome) = outcome
            {
                if let Some(watch) = &watch {
                    send_exit_info(&tx, watch, &outcome).await;
                }
                send_outcome(&tx, &handle, outcome).await;
                let _ = tx.eof().await;
            }
            let _ = tx.close().await;
        }
    }
    // The inbound loop ends when russh closes the channel; it owns nothing else.
    drop(inbound);
}

/// The master's two ends for the copies (the command's output, its input:
/// non-blocking, as the reader makes their shared description) and a
/// third copy to resize the terminal. A pty's master reads as a pipe does
/// (`EIO`, not EOF, once every slave is closed, which ends the pump).
fn terminal_ends(
    opened: pty::Pty,
) -> std::io::Result<(
    std::os::fd::OwnedFd,
    tokio::net::unix::pipe::Receiver,
    std::os::fd::OwnedFd,
)> {
    // The command has its copies of the slave: the master sees its end once they close.
    drop(opened.slave);
    let writer = opened.master.try_clone()?;
    let winsize = opened.master.try_clone()?;
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(opened.master)?;
    Ok((writer, reader, winsize))
}
