//! `mn-ssh [options] [user@]HOST [COMMAND [ARGS...]]`: ssh semantics over
//! russh, to a `multinode agent` (with the job secret) or to a stock OpenSSH
//! server (with the user's keys).
//!
//! Exit code: the remote command's; 128+N when it died of signal N; 255 when
//! the connection failed or was lost. SIGINT, SIGTERM, SIGHUP, SIGQUIT,
//! SIGUSR1 and SIGUSR2 sent to `mn-ssh` are sent on to the remote command.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use russh::ChannelMsg;
use tracing::debug;

use super::client::{Auth, Connector, HostKeyPolicy, OpenSshAuth, Start, Target, lost_after};
use super::signals::{signal_number, signal_to_sig};
use super::ssh_args::{self, SshInvocation};
use crate::error::Error;
use crate::exit_code;
use crate::keys::{JobKeys, Secret};
use crate::stdio::{self, Fd, StdioWriter};
use crate::stops::{FORWARDED_SIGNALS, Stops};
use crate::topology::EnvMap;

/// Without `-o ConnectTimeout`, a connection must be up within this time.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// After this many signals the remote side did not end on, `mn-ssh` gives up
/// and closes the channel (the agent then ends the remote group).
const SIGNALS_BEFORE_GIVING_UP: u32 = 3;

/// Which server `mn-ssh` talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    Agent,
    OpenSsh,
}

const USAGE: &str = "usage: mn-ssh [ssh options] [user@]HOST [COMMAND [ARGS...]]

Runs COMMAND on HOST with ssh semantics: through the job's `multinode agent`
when MULTINODE_SECRET (or MULTINODE_SECRET_FILE) is set, else through the
host's OpenSSH server with your keys. Accepted options: -p PORT, -l USER,
-i KEY, -o Key=Value (Port, User, IdentityFile, ConnectTimeout,
StrictHostKeyChecking, UserKnownHostsFile, SendEnv, SetEnv), -s (a
subsystem: mn-ssh -s HOST sftp), -G, -n, -q, -v, and the flags mpirun,
MPICH, scp, sftp, rsync and git pass (-x, -T, -F FILE, ...). Forwarding
(-L, -R, -D, -A, -X, ...) is refused. See docs/mn-ssh.md.
";

pub fn main(args: Vec<OsString>) -> Result<i32, Error> {
    match args.first().and_then(|a| a.to_str()) {
        Some("--help" | "-h") if args.len() == 1 => {
            return Ok(stdio::print_or_code("mn-ssh", USAGE));
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
    crate::logging::init(inv.verbose);
    let env = EnvMap::from_process();
    let (connector, target) = prepare(&inv, &env)?;
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the async runtime: {e}")))?;
    // `-o SendEnv`/`SetEnv`: sent as `env` requests, as OpenSSH does.
    let send = inv.env_to_send(env.0.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let result = runtime.block_on(run(&inv, &connector, &target, &send));
    // The stdin reader may be parked in a blocking read: do not wait for it.
    runtime.shutdown_background();
    result
}

/// Chooses the transport and builds the connector and target.
pub fn prepare(inv: &SshInvocation, env: &EnvMap) -> Result<(Connector, Target), Error> {
    let timeout = match inv.option("ConnectTimeout") {
        Some(v) => Duration::from_secs(v.parse::<u64>().map_err(|_| {
            Error::usage(format!(
                "-o ConnectTimeout={v:?} is not a number of seconds"
            ))
        })?),
        None => DEFAULT_CONNECT_TIMEOUT,
    };
    let secret = Secret::find(None, env)?;
    let kind = match env.get("MULTINODE_TRANSPORT") {
        Some("agent") => TransportKind::Agent,
        Some("openssh") => TransportKind::OpenSsh,
        None if secret.is_some() => TransportKind::Agent,
        None => TransportKind::OpenSsh,
        Some(other) => {
            return Err(Error::usage(format!(
                "MULTINODE_TRANSPORT={other:?} is not 'agent' or 'openssh'"
            )));
        }
    };
    debug!(?kind, host = %inv.host, "transport chosen");
    match kind {
        TransportKind::Agent => {
            let secret = secret.ok_or_else(|| {
                Error::usage(
                    "MULTINODE_TRANSPORT=agent needs the job secret: set MULTINODE_SECRET or MULTINODE_SECRET_FILE",
                )
            })?;
            let port = match inv.port {
                Some(p) => p,
                None => crate::env::agent_port(env)?,
            };
            let target = Target {
                host: inv.host.clone(),
                port,
                user: inv.user.clone().unwrap_or_else(|| "multinode".into()),
            };
            let auth = Auth::Agent(Arc::new(JobKeys::derive(&secret)));
            Ok((
                Connector::new(auth, timeout).with_lost_after(lost_after(env)?),
                target,
            ))
        }
        TransportKind::OpenSsh => {
            let user = match &inv.user {
                Some(u) => u.clone(),
                None => current_user(env),
            };
            let target = Target {
                host: inv.host.clone(),
                port: inv.port.unwrap_or(22),
                user,
            };
            let auth = Auth::OpenSsh(Arc::new(openssh_auth(inv, env)?));
            Ok((
                Connector::new(auth, timeout).with_lost_after(lost_after(env)?),
                target,
            ))
        }
    }
}

fn current_user(env: &EnvMap) -> String {
    env.get("USER")
        .map(str::to_string)
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
        .unwrap_or_else(|| "root".into())
}

fn home(env: &EnvMap) -> PathBuf {
    env.get("HOME")
        .map(PathBuf::from)
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.dir)
        })
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The user's keys (`-i`, else `~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`) and
/// the host-key policy (`-o StrictHostKeyChecking`, `-o UserKnownHostsFile`).
fn openssh_auth(inv: &SshInvocation, env: &EnvMap) -> Result<OpenSshAuth, Error> {
    let home = home(env);
    let explicit = !inv.identities.is_empty();
    let paths: Vec<PathBuf> = if explicit {
        inv.identities
            .iter()
            .map(|p| expand_tilde(p, &home))
            .collect()
    } else {
        ["id_ed25519", "id_ecdsa", "id_rsa"]
            .iter()
            .map(|n| home.join(".ssh").join(n))
            .filter(|p| p.exists())
            .collect()
    };
    let mut identities = Vec::new();
    for path in paths {
        match russh::keys::load_secret_key(&path, None) {
            Ok(key) => identities.push((path, key)),
            Err(e) if explicit => {
                return Err(Error::usage(format!(
                    "cannot use the key {}: {e} (mn-ssh needs an unencrypted key)",
                    path.display()
                )));
            }
            Err(e) => debug!(path = %path.display(), error = %e, "key skipped"),
        }
    }
    let known_hosts = match inv.option("UserKnownHostsFile") {
        Some(list) => list
            .split_whitespace()
            .map(|p| expand_tilde(Path::new(p), &home))
            .collect(),
        None => vec![
            home.join(".ssh/known_hosts"),
            PathBuf::from("/etc/ssh/ssh_known_hosts"),
        ],
    };
    let policy = match inv
        .option("StrictHostKeyChecking")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("yes") => HostKeyPolicy::Strict,
        Some("no" | "off") => HostKeyPolicy::AcceptAll,
        _ => HostKeyPolicy::RefuseChanged,
    };
    Ok(OpenSshAuth {
        identities,
        known_hosts,
        policy,
    })
}

fn expand_tilde(path: &Path, home: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) => home.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

/// Connects, runs the command and relays everything until the channel closes.
///
/// A byte pipe both ways: every chunk that arrives is written to fd 1 or 2
/// at once (no line logic, no buffer), and stdin goes out as it is read.
/// The remote side's EOF reaches stdout's reader before the exit status
/// ends `mn-ssh`. A failed write to stdout or stderr closes the channel (the
/// agent then ends the remote group) and ends `mn-ssh` with 141.
pub async fn run(
    inv: &SshInvocation,
    connector: &Connector,
    target: &Target,
    env: &[(String, String)],
) -> Result<i32, Error> {
    let conn = connector
        .connect(target)
        .await
        .map_err(|e| Error::Connection(e.to_string()))?;
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
    let channel = conn
        .start(start, env)
        .await
        .map_err(|e| lost(target, &e.to_string()))?;
    let (mut rx, tx) = channel.split();
    let tx = Arc::new(tx);

    let stdin_task = {
        let tx = tx.clone();
        let no_stdin = inv.no_stdin;
        tokio::spawn(async move {
            if !no_stdin {
                let mut stdin = stdio::stdin_chunks();
                while let Some(chunk) = stdin.recv().await {
                    if tx.data_bytes(chunk).await.is_err() {
                        return;
                    }
                }
            }
            let _ = tx.eof().await;
        })
    };

    let mut stops = Stops::new(FORWARDED_SIGNALS)?;
    let mut out = StdioWriter::start()
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
                    conn.close().await;
                    return Err(Error::Connection(format!("{target} refused {}", start.describe())));
                }
                Some(ChannelMsg::ExitStatus { exit_status }) => code = Some(exit_status as i32),
                Some(ChannelMsg::ExitSignal { signal_name, core_dumped, .. }) => {
                    let signo = signal_number(&signal_name).map(|s| s as i32);
                    debug!(?signal_name, core_dumped, "remote command killed by a signal");
                    code = Some(signo.map(exit_code::from_signal).unwrap_or(exit_code::CONNECTION_FAILED));
                }
                Some(ChannelMsg::Close) | None => break,
                Some(_) => {}
            },
            _ = out.failed() => write_failed = true,
            signo = stops.next() => {
                signals_sent += 1;
                if signals_sent >= SIGNALS_BEFORE_GIVING_UP {
                    debug!("giving up on the remote command after {signals_sent} signals");
                    let _ = tx.close().await;
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
            let _ = tx.close().await;
            break;
        }
    }
    stdin_task.abort();
    let failure = out.finish().await;
    conn.close().await;
    if let Some((fd, e)) = failure {
        debug!(stream = fd.name(), error = %e, "a write failed: the relay ends");
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
