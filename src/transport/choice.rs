//! Which server a client talks to, and how it proves who it is: the one
//! place `MULTINODE_TRANSPORT` is read. `mn-ssh` and exec_all both ask
//! [`Route::from_env`]; neither builds the other's input to get there.
//!
//! - `MULTINODE_TRANSPORT=agent`, or unset with a job secret: the job's
//!   `multinode agent`s, keys derived from the secret.
//! - `MULTINODE_TRANSPORT=openssh`, or unset without a secret: a stock
//!   OpenSSH server, with the user's keys and known hosts.
//! - `MULTINODE_MUX_SOCKET` (set by the head's agent for JOB): agents are
//!   reached through the head agent's own connections where it can.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::client::{Auth, Connector, HostKeyPolicy, OpenSshAuth, lost_after};
use super::mux::MuxClient;
use crate::defaults;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::keys::{JobKeys, Secret};
use crate::vars;

/// Which server a client talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    Agent,
    OpenSsh,
}

/// What `MULTINODE_TRANSPORT` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    /// Unset: the agent when a job secret is found, else OpenSSH.
    Auto,
    Exactly(TransportKind),
}

impl Requested {
    /// `MULTINODE_TRANSPORT`: `agent`, `openssh` or unset.
    pub fn from_env(env: &EnvMap) -> Result<Self, Error> {
        match env.get(vars::TRANSPORT) {
            None => Ok(Requested::Auto),
            Some("agent") => Ok(Requested::Exactly(TransportKind::Agent)),
            Some("openssh") => Ok(Requested::Exactly(TransportKind::OpenSsh)),
            Some(other) => Err(Error::usage(format!(
                "{}={other:?} is not 'agent' or 'openssh'",
                vars::TRANSPORT
            ))),
        }
    }
}

/// What the caller asks of the client, each unset by default: `mn-ssh`
/// fills it from ssh's options, exec_all leaves it to the environment.
#[derive(Debug, Clone, Default)]
pub struct ClientSpec {
    /// `-l USER`; default: `multinode` for an agent, `$USER` for OpenSSH.
    pub user: Option<String>,
    /// `-p PORT`; default: the agents' port, or 22.
    pub port: Option<u16>,
    /// `-i KEY`s for OpenSSH; default: `~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`.
    pub identities: Vec<PathBuf>,
    /// Default: [`crate::defaults::CONNECT_TIMEOUT`].
    pub connect_timeout: Option<Duration>,
    /// `-b ADDR`: the source address; default: the system's choice.
    pub bind_address: Option<std::net::IpAddr>,
    /// `StrictHostKeyChecking` (OpenSSH); default: refuse changed keys.
    pub host_key_checking: Option<HostKeyPolicy>,
    /// `UserKnownHostsFile` (OpenSSH), `~` not yet expanded; default:
    /// `~/.ssh/known_hosts` and `/etc/ssh/ssh_known_hosts`.
    pub known_hosts: Option<Vec<PathBuf>>,
}

/// How to reach a node: the connector (keys, algorithms, timeout) and the
/// user and port to ask for.
pub struct Route {
    pub kind: TransportKind,
    pub connector: Connector,
    pub user: String,
    pub port: u16,
    /// The head agent's socket, when this runs inside `multinode agent --
    /// JOB` (agents only): its logged-in connections to the nodes are shared.
    pub mux: Option<MuxClient>,
}

impl Route {
    /// Chooses the transport from the environment (`MULTINODE_TRANSPORT`,
    /// the job secret, `MULTINODE_AGENT_PORT`, `USER`, `HOME`) and `spec`.
    pub fn from_env(spec: &ClientSpec, env: &EnvMap) -> Result<Route, Error> {
        let timeout = spec
            .connect_timeout
            .unwrap_or(defaults::CONNECT_TIMEOUT.duration);
        let secret = Secret::find(None, env)?;
        let requested = Requested::from_env(env)?;
        // OpenSSH for want of a secret: a failure then says so.
        let for_want_of_secret = matches!(requested, Requested::Auto);
        let kind = match requested {
            Requested::Exactly(kind) => kind,
            Requested::Auto if secret.is_some() => TransportKind::Agent,
            Requested::Auto => TransportKind::OpenSsh,
        };
        debug!(?kind, "transport chosen");
        match kind {
            TransportKind::Agent => {
                let secret = secret.ok_or_else(|| {
                    Error::usage(format!(
                        "{}=agent needs the job secret: set {} or {}",
                        vars::TRANSPORT,
                        vars::SECRET,
                        vars::SECRET_FILE
                    ))
                })?;
                let port = match spec.port {
                    Some(p) => p,
                    None => crate::env::agent_port(env)?,
                };
                let keys = Arc::new(JobKeys::derive(&secret));
                // A source address asks for a connection of this process's
                // own: the head agent's shared ones come from its address.
                let mux = env
                    .get(vars::MUX_SOCKET)
                    .filter(|path| !path.is_empty() && spec.bind_address.is_none())
                    .map(|path| MuxClient::new(path.into(), &keys));
                Ok(Route {
                    kind,
                    connector: Connector::new(Auth::Agent(keys), timeout)
                        .with_lost_after(lost_after(env)?)
                        .with_bind_address(spec.bind_address),
                    user: spec.user.clone().unwrap_or_else(|| "multinode".into()),
                    port,
                    mux,
                })
            }
            TransportKind::OpenSsh => {
                let user = match &spec.user {
                    Some(u) => u.clone(),
                    None => current_user(env),
                };
                let mut auth = openssh_auth(spec, env)?;
                auth.for_want_of_secret = for_want_of_secret;
                let auth = Auth::OpenSsh(Arc::new(auth));
                Ok(Route {
                    kind,
                    connector: Connector::new(auth, timeout)
                        .with_lost_after(lost_after(env)?)
                        .with_bind_address(spec.bind_address),
                    user,
                    port: spec.port.unwrap_or(22),
                    mux: None,
                })
            }
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
fn openssh_auth(spec: &ClientSpec, env: &EnvMap) -> Result<OpenSshAuth, Error> {
    let home = home(env);
    let explicit = !spec.identities.is_empty();
    let paths: Vec<PathBuf> = if explicit {
        spec.identities
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
    let known_hosts = match spec.known_hosts.as_deref() {
        Some(list) => list.iter().map(|p| expand_tilde(p, &home)).collect(),
        None => vec![
            home.join(".ssh/known_hosts"),
            PathBuf::from("/etc/ssh/ssh_known_hosts"),
        ],
    };
    Ok(OpenSshAuth {
        identities,
        known_hosts,
        policy: spec
            .host_key_checking
            .unwrap_or(HostKeyPolicy::RefuseChanged),
        for_want_of_secret: false,
    })
}

fn expand_tilde(path: &Path, home: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) => home.join(rest),
        Err(_) => path.to_path_buf(),
    }
}
