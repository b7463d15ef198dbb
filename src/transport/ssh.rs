//! `mn-ssh [options] [user@]HOST [COMMAND [ARGS...]]`: ssh semantics over
//! russh, to a `multinode agent` (with the job secret) or to a stock OpenSSH
//! server (with the user's keys).
//!
//! Exit code: the remote command's; 128+N when it died of signal N; 255 when
//! the connection failed or was lost. SIGINT, SIGTERM, SIGHUP, SIGQUIT,
//! SIGUSR1 and SIGUSR2 sent to `mn-ssh` are sent on to the remote command.
//!
//! A terminal is asked for as OpenSSH does (`-t`, `-tt`, `-T`, a shell from a
//! terminal): the local one is then in raw mode until `mn-ssh` returns, and
//! its size changes (SIGWINCH) are sent on.
//!
//! `-L` forwards local ports through the same connection while the command
//! runs; with `-N` there is no command, and the forwards last until a signal
//! or the connection's end (`forward.rs`).

use std::ffi::OsString;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use russh::ChannelMsg;
use tracing::debug;

use super::channel::{ChannelRx, ChannelTx};
use super::choice::{ClientSpec, Route};
use super::client::{Connector, HostKeyPolicy, Start, Target};
use super::forward;
use super::mux::{MuxClient, MuxError};
use super::ssh_args;
use super::ssh_invocation::{RequestTty, SshInvocation};
use super::tty::{self, PtyRequest, RawMode};
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::exit_code;
use crate::process::Outcome;
use crate::protocol::signals::{exit_outcome, signal_to_sig};
use crate::signals::{FORWARDED_SIGNALS, Stops};
use crate::stdio::{self, Fd, StdioWriter};

/// After this many signals the remote side did not end on, `mn-ssh` gives up
/// and closes the channel (the agent then ends the remote group).
const SIGNALS_BEFORE_GIVING_UP: u32 = 3;

pub fn main(args: Vec<OsString>) -> Result<i32, Error> {
    match args.first().and_then(|a| a.to_str()) {
        Some("--help" | "-h") if args.len() == 1 => {
            use clap::CommandFactory;
            let help = crate::cli::SshHelp::command().render_help().to_string();
            return Ok(stdio::print_or_code("mn-ssh", &help));
        }
        Some("--version" | "-V") if args.len() == 1 => {
            return Ok(stdio::print_or_code(
                "mn-ssh",
                &format!("mn-ssh (multinode) {}\n", env!("CARGO_PKG_VERSION")),
            ));
        }
        _ => {}
    }
    let inv = ssh_args::parse(&args).map_err(|e| Error::Usage(e.to_string()))?;
    crate::logging::init("mn-ssh", inv.verbose, false);
    let env = EnvMap::from_process();
    let route = Route::from_env(&client_spec(&inv)?, &env)?;
    let target = Target {
        host: inv.host.clone(),
        port: route.port,
        user: route.user.clone(),
    };
    if inv.print_config {
        // `ssh -G`: what would be used, without connecting (git probes with it).
        return Ok(stdio::print_or_code(
            "mn-ssh",
            &format!(
                "host {host}\nhostname {host}\nuser {user}\nport {port}\n",
                host = target.host,
                user = target.user,
                port = target.port
            ),
        ));
    }
    // `-o SendEnv`/`SetEnv`: sent as `env` requests, as OpenSSH does.
    let send = inv.env_to_send(env.0.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let stdin_is_terminal = !inv.no_stdin && tty::stdin_is_terminal();
    let terminal = (!inv.subsystem
        && !inv.no_command
        && inv.tty.wanted(!inv.command.is_empty(), stdin_is_terminal))
    .then(|| tty::request(env.get("TERM")));
    if inv.tty == RequestTty::Yes && !stdin_is_terminal && !inv.quiet {
        stdio::eprint("Pseudo-terminal will not be allocated because stdin is not a terminal.\n");
    }
    block_on_session(async move {
        run(
            &inv,
            &route.connector,
            route.mux.as_ref(),
            &target,
            &send,
            terminal.as_ref(),
        )
        .await
    })
}

/// Runs a session ([`run`]) on a single-threaded runtime of its own, as a
/// task of it: a task woken by another task (russh's, with a keystroke's
/// echo) runs next, where the runtime's own future would wait for one more
/// poll of the sockets first.
pub fn block_on_session(
    session: impl std::future::Future<Output = Result<i32, Error>> + Send + 'static,
) -> Result<i32, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the async runtime: {e}")))?;
    let task = runtime.spawn(session);
    let result = runtime
        .block_on(task)
        .unwrap_or_else(|e| Err(Error::Failed(format!("the session ended abnormally: {e}"))));
    // The stdin reader may be parked in a blocking read: do not wait for it.
    runtime.shutdown_background();
    result
}

/// What mn-ssh's options ask of the client: `-l`, `-p`, `-i` and the `-o`
/// options that concern connecting (`ConnectTimeout`, `StrictHostKeyChecking`,
/// `UserKnownHostsFile`).
fn client_spec(inv: &SshInvocation) -> Result<ClientSpec, Error> {
    let connect_timeout = match inv.option("ConnectTimeout") {
        Some(v) => Some(Duration::from_secs(v.parse::<u64>().map_err(|_| {
            Error::usage(format!(
                "-o ConnectTimeout={v:?} is not a number of seconds"
            ))
        })?)),
        None => None,
    };
    Ok(ClientSpec {
        user: inv.user.clone(),
        port: inv.port,
        bind_address: inv.bind_address,
        identities: inv.identities.clone(),
        connect_timeout,
        host_key_checking: inv
            .option("StrictHostKeyChecking")
            .map(HostKeyPolicy::from_option),
        // Files separated by spaces, as ssh_config(5) has them.
        known_hosts: inv
            .option("UserKnownHostsFile")
            .map(|list| list.split_whitespace().map(PathBuf::from).collect()),
    })
}

/// Connects, runs the command and passes everything on until the channel closes.
///
/// A byte pipe both ways: every chunk that arrives is written to fd 1 or 2
/// at once (no line logic, no buffer), and stdin goes out as it is read.
/// The remote side's EOF reaches stdout's reader before the exit status
/// ends `mn-ssh`. A failed write to stdout or stderr closes the channel (the
/// agent then ends the remote group) and ends `mn-ssh` with 141.
///
/// With `mux` (inside `multinode agent -- JOB`), a command goes through the
/// head agent's connection to the node; a shell, a subsystem, a command
/// with a terminal or forwards, or a socket that does not answer, gets a
/// connection of its own.
pub async fn run(
    inv: &SshInvocation,
    connector: &Connector,
    mux: Option<&MuxClient>,
    target: &Target,
    env: &[(String, String)],
    terminal: Option<&PtyRequest>,
) -> Result<i32, Error> {
    let subsystem;
    let start = if inv.subsystem {
        subsystem = String::from_utf8(inv.command.clone())
            .map_err(|_| Error::usage("the subsystem name is not valid UTF-8"))?;
        Start::Subsystem(subsystem.trim())
    } else if inv.command.is_empty() {
        Start::Shell
    } else {
        Start::Exec(&inv.command)
    };
    let forwarding = inv.no_command || !inv.forward.local.is_empty();
    let shared = match (mux, start) {
        (Some(mux), Start::Exec(command)) if terminal.is_none() && !forwarding => {
            match mux.exec(target, |_| (command.to_vec(), env.to_vec())).await {
                Ok(shared) => shared,
                Err(MuxError::Unreachable(e)) => return Err(Error::Connection(e)),
                Err(MuxError::Failed(e)) => return Err(lost(target, &e)),
            }
        }
        _ => None,
    };
    // Served until this function returns.
    let _forwarding;
    let (conn, mut rx, tx) = match shared {
        Some(s) => (None, s.rx, s.tx),
        None => {
            let conn = Arc::new(
                connector
                    .connect(target)
                    .await
                    .map_err(|e| Error::Connection(e.to_string()))?,
            );
            if forwarding {
                let listeners = match forward::listen(&inv.forward).await {
                    Ok(listeners) => listeners,
                    Err(e) => {
                        conn.close().await;
                        return Err(e);
                    }
                };
                _forwarding = forward::serve(&conn, listeners);
                if inv.no_command {
                    let mut stops = Stops::new(forward::HOLD_SIGNALS)?;
                    return forward::hold(&conn, target, &mut stops).await;
                }
            }
            let channel = conn
                .start(start, env, terminal)
                .await
                .map_err(|e| lost(target, &e.to_string()))?;
            let (rx, tx) = channel.split();
            (Some(conn), ChannelRx::Ssh(rx), ChannelTx::Ssh(tx))
        }
    };
    let tx = Arc::new(tx);
    // Every key is the remote terminal's from here; put back on any return.
    let _raw = terminal.and_then(|_| RawMode::enter());
    let mut resized = match terminal {
        Some(_) => Some(
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
                .map_err(|e| Error::Failed(format!("cannot handle SIGWINCH: {e}")))?,
        ),
        None => None,
    };

    let stdin_task = {
        let tx = tx.clone();
        // A terminal session's keys are read on this thread (no hop a key).
        let input = (!inv.no_stdin).then(|| {
            terminal
                .and_then(|_| stdio::terminal_chunks())
                .unwrap_or_else(stdio::stdin_chunks)
        });
        tokio::spawn(async move { super::channel::send_input(&tx, None, input).await })
    };

    let mut stops = Stops::new(FORWARDED_SIGNALS)?;
    let mut out = match terminal {
        Some(_) => StdioWriter::start_for_terminal(),
        None => StdioWriter::start(),
    }
    .map_err(|e| Error::Failed(format!("cannot start the output thread: {e}")))?;
    let mut code: Option<i32> = None;
    let mut answered = false;
    let mut signals_sent = 0;
    let mut write_failed = false;
    loop {
        tokio::select! {
            msg = rx.wait() => match msg {
                Some(ChannelMsg::Data { data }) => {
                    if out.write(Fd::Out, data).await.is_err() {
                        write_failed = true;
                    }
                }
                Some(ChannelMsg::ExtendedData { data, ext: 1 }) => {
                    if out.write(Fd::Err, data).await.is_err() {
                        write_failed = true;
                    }
                }
                Some(ChannelMsg::Eof) => out.close_stdout().await,
                Some(ChannelMsg::Success) => answered = true,
                Some(ChannelMsg::Failure) if !answered => {
                    stdin_task.abort();
                    if let Some(conn) = conn {
                        conn.close().await;
                    }
                    return Err(Error::Connection(format!("{target} refused {}", start.describe())));
                }
                Some(ChannelMsg::Close) | None => break,
                Some(msg) => match exit_outcome(&msg) {
                    Some(Outcome::Exited(status)) => code = Some(status),
                    Some(outcome @ Outcome::Signaled { signal, .. }) => {
                        debug!(%outcome, "remote command killed by a signal");
                        // A signal this system does not know: no code a shell would give.
                        code = Some(if signal == 0 { exit_code::CONNECTION_FAILED } else { outcome.shell_code() });
                    }
                    None => {}
                },
            },
            _ = out.failed() => write_failed = true,
            Some(()) = async { resized.as_mut()?.recv().await } => {
                if let Some(size) = tty::window_size() {
                    let _ = tx.window_change(size).await;
                }
            }
            signo = stops.next() => {
                signals_sent += 1;
                if signals_sent >= SIGNALS_BEFORE_GIVING_UP {
                    debug!("giving up on the remote command after {signals_sent} signals");
                    tx.close().await;
                    code = Some(exit_code::from_signal(signo));
                    break;
                }
                debug!(signo, "forwarding a signal");
                let _ = tx.signal(signal_to_sig(signo)).await;
            }
        }
        if write_failed {
            // Our reader is gone (`| head`) or the file is full: closing the
            // channel ends the remote command; nothing more is worth waiting for.
            tx.close().await;
            break;
        }
    }
    stdin_task.abort();
    let failure = out.finish().await;
    match conn {
        Some(conn) => conn.close().await,
        None => tx.close().await,
    }
    if let Some((fd, e)) = failure {
        debug!(stream = fd.name(), error = %e, "a write failed: the copy ends");
        if let Some(line) = stdio::failure_line("mn-ssh", fd, &e) {
            stdio::eprint(&line);
        }
        return Ok(stdio::failure_code());
    }
    match code {
        Some(code) => Ok(code),
        None => Err(lost(target, "the channel closed without an exit status")),
    }
}

fn lost(target: &Target, detail: &str) -> Error {
    Error::Connection(format!("connection to {target} lost: {detail}"))
}
