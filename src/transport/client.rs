//! The russh client shared by `mn-ssh`, `exec_all` and the agent lifecycle:
//! connecting to an agent with the job keys, or to an OpenSSH server with
//! the user's keys, and opening exec channels on the connection.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use russh::client::{self, Handle, Msg};
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use russh::{Channel, ChannelMsg};
use tokio::net::TcpStream;
use tracing::debug;

use super::tty::PtyRequest;
use crate::keys::JobKeys;
use crate::protocol;
use crate::protocol::control::{Control, PingReply};
use crate::tcp_state;

/// A server that sends nothing for this long is lost (a frozen node: its
/// kernel still acknowledges, nothing answers; or a node gone: nothing
/// acknowledges), unless one side waits on the other: its kernel says it has
/// no room for our bytes (a zero window whose probes it answers: it is not
/// reading what we send, as an agent whose command leaves its stdin unread),
/// or bytes from it wait to be read here (our output is slow). Silent servers are probed
/// every quarter of it (an SSH keepalive, which a live server answers at
/// once, however busy its CPUs). `MULTINODE_LOST_AFTER` (seconds; 0 = never)
/// changes it.
pub const DEFAULT_LOST_AFTER: Duration = Duration::from_secs(4);
/// Keepalives sent to a silent server per `lost_after`.
const PROBES: u32 = 4;
/// A login whose session ended with no key refused is tried this often in
/// all ([`Connector::connect`]).
const LOGIN_TRIES: u32 = 2;
/// The variable that sets how long a silent server may take.
pub const LOST_AFTER_VAR: &str = "MULTINODE_LOST_AFTER";

/// How long a silent server may take: `MULTINODE_LOST_AFTER` (seconds, 0 for
/// never), else [`DEFAULT_LOST_AFTER`]. `None` is never.
pub fn lost_after(env: &crate::env_map::EnvMap) -> Result<Option<Duration>, crate::error::Error> {
    let Some(text) = env.get(LOST_AFTER_VAR) else {
        return Ok(Some(DEFAULT_LOST_AFTER));
    };
    match text
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
    {
        Some(d) if d.is_zero() => Ok(None),
        Some(d) if d >= Duration::from_millis(400) => Ok(Some(d)),
        _ => Err(crate::error::Error::usage(format!(
            "{LOST_AFTER_VAR}='{}' is not a number of seconds of at least 0.4 (or 0 for never); fix it, or unset it for the default {}",
            crate::topology::shorten(text),
            DEFAULT_LOST_AFTER.as_secs()
        ))),
    }
}

/// How the client proves who it is and checks who the server is.
#[derive(Clone)]
pub enum Auth {
    /// A `multinode agent` of this job: the keys derived from the secret.
    Agent(Arc<JobKeys>),
    /// A stock OpenSSH `sshd`: the user's keys and a known_hosts policy.
    OpenSsh(Arc<OpenSshAuth>),
}

/// What `-o StrictHostKeyChecking` chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKeyPolicy {
    /// A key that differs from known_hosts is refused; an unknown host is accepted (not recorded).
    RefuseChanged,
    /// Only hosts in known_hosts with the same key are accepted.
    Strict,
    /// Anything is accepted.
    AcceptAll,
}

pub struct OpenSshAuth {
    pub identities: Vec<(PathBuf, PrivateKey)>,
    pub known_hosts: Vec<PathBuf>,
    pub policy: HostKeyPolicy,
    /// OpenSSH was chosen only because no job secret is set: a failure then
    /// says so, since on a cluster the usual cause is a secret that was not
    /// passed on, not a broken sshd.
    pub for_want_of_secret: bool,
}

/// Where to connect.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Why a connection could not be made; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot resolve {target}: {source}")]
    Resolve {
        target: String,
        source: std::io::Error,
    },
    #[error("cannot connect to {target}: {source}")]
    Tcp {
        target: String,
        source: std::io::Error,
    },
    #[error("cannot bind to {bind} (-b) to connect to {target}: {source}")]
    Bind {
        target: String,
        bind: IpAddr,
        source: std::io::Error,
    },
    #[error("cannot connect to {target}: no answer within {secs:.1} s")]
    Timeout { target: String, secs: f64 },
    #[error(
        "{target} is not an agent of this job (its host key differs: a different MULTINODE_SECRET there, or another service on that port)"
    )]
    WrongHostKey { target: String },
    #[error("{target} presented a host key that differs from known_hosts ({detail}); refusing")]
    HostKeyChanged { target: String, detail: String },
    #[error(
        "{target} is not in known_hosts and StrictHostKeyChecking=yes; add its key (ssh-keyscan) or relax the option"
    )]
    UnknownHost { target: String },
    #[error("{target} refused this job's key (the agent there has a different MULTINODE_SECRET)")]
    AgentAuth { target: String },
    #[error(
        "{target} refused every key tried ({tried}); pass one with -i or add it to authorized_keys there"
    )]
    UserAuth { target: String, tried: String },
    #[error("ssh handshake with {target} failed: {detail}")]
    Ssh { target: String, detail: String },
    #[error(
        "ssh handshake with {target} failed: the connection ended during authentication: {reason}"
    )]
    EndedInLogin { target: String, reason: String },
    #[error(
        "{0}; MULTINODE_SECRET is unset, so this tried OpenSSH, not a multinode agent: set MULTINODE_SECRET"
    )]
    NoSecret(Box<ConnectError>),
}

impl ConnectError {
    /// The peer is an agent of another job (another secret): retrying will
    /// not change that.
    pub fn is_wrong_job(&self) -> bool {
        matches!(
            self,
            ConnectError::WrongHostKey { .. } | ConnectError::AgentAuth { .. }
        )
    }
}

/// The client's russh handler: it only checks the server's key.
pub struct ClientHandler {
    auth: Auth,
    target: Target,
    /// Set when the key check failed, to tell it apart from other handshake errors.
    rejection: Arc<std::sync::Mutex<Option<ConnectError>>>,
    /// Why the session ended, once it has: russh answers an authentication
    /// whose session died with a plain failure, which is not a refused key.
    ended: Arc<std::sync::Mutex<Option<String>>>,
    /// Channel open failures in OpenSSH's words, oldest first, for
    /// [`Connection::open_direct_tcpip`] (russh's error has no description).
    open_failures: OpenFailures,
}

type OpenFailures = Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

impl client::Handler for ClientHandler {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_public_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key: &PublicKey = match server_public_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            PublicKeyOrCertificate::Certificate(_) => {
                self.reject(ConnectError::Ssh {
                    target: self.target.to_string(),
                    detail: "host certificates are not supported".into(),
                });
                return Ok(false);
            }
        };
        match &self.auth {
            Auth::Agent(keys) => {
                if key.key_data() == keys.host_public().key_data() {
                    Ok(true)
                } else {
                    self.reject(ConnectError::WrongHostKey {
                        target: self.target.to_string(),
                    });
                    Ok(false)
                }
            }
            Auth::OpenSsh(auth) => {
                let verdict = check_known_hosts(auth, &self.target, key);
                match verdict {
                    Ok(()) => Ok(true),
                    Err(e) => {
                        self.reject(e);
                        Ok(false)
                    }
                }
            }
        }
    }

    async fn channel_open_failure(
        &mut self,
        channel: russh::ChannelId,
        reason: russh::ChannelOpenFailure,
        description: &str,
        _language: &str,
        _session: &mut client::Session,
    ) -> Result<(), Self::Error> {
        // OpenSSH's names of RFC 4254's reason codes.
        let name = match reason.code() {
            1 => "administratively prohibited",
            2 => "connect failed",
            3 => "unknown channel type",
            4 => "resource shortage",
            _ => "unknown reason",
        };
        let line = match description {
            "" => name.to_string(),
            d => format!("{name}: {}", d.trim_end()),
        };
        debug!(target = %self.target, ?channel, %line, "channel open failed");
        self.open_failures
            .lock()
            .expect("not poisoned: no panics while held")
            .push_back(line);
        Ok(())
    }

    async fn disconnected(
        &mut self,
        reason: client::DisconnectReason<Self::Error>,
    ) -> Result<(), Self::Error> {
        let (text, result) = match reason {
            // The agent says why it closes a connection that has not logged
            // in (its deadline, too many not logged in, a penalty).
            client::DisconnectReason::ReceivedDisconnect(info) => (
                format!("the server closed the connection: {}", info.message),
                Ok(()),
            ),
            client::DisconnectReason::Error(e) => (e.to_string(), Err(e)),
        };
        debug!(target = %self.target, reason = %text, "session ended");
        *self
            .ended
            .lock()
            .expect("not poisoned: no panics while held") = Some(text);
        result
    }
}

impl ClientHandler {
    fn reject(&mut self, e: ConnectError) {
        *self
            .rejection
            .lock()
            .expect("not poisoned: no panics while held") = Some(e);
    }
}

fn check_known_hosts(
    auth: &OpenSshAuth,
    target: &Target,
    key: &PublicKey,
) -> Result<(), ConnectError> {
    if auth.policy == HostKeyPolicy::AcceptAll {
        return Ok(());
    }
    for path in &auth.known_hosts {
        if !path.exists() {
            continue;
        }
        match russh::keys::check_known_hosts_path(&target.host, target.port, key, path) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => {
                return Err(ConnectError::HostKeyChanged {
                    target: target.to_string(),
                    detail: format!("{}: {e}", path.display()),
                });
            }
        }
    }
    match auth.policy {
        HostKeyPolicy::Strict => Err(ConnectError::UnknownHost {
            target: target.to_string(),
        }),
        _ => {
            debug!(target = %target, "host not in known_hosts: accepted (not recorded)");
            Ok(())
        }
    }
}

/// Connects to targets with one configuration; cheap to share across tasks.
#[derive(Clone)]
pub struct Connector {
    config: Arc<client::Config>,
    auth: Auth,
    connect_timeout: Duration,
    lost_after: Option<Duration>,
    /// The source address of every connection (`mn-ssh -b`); `None`: the system's choice.
    bind_address: Option<std::net::IpAddr>,
}

impl Connector {
    pub fn new(auth: Auth, connect_timeout: Duration) -> Self {
        Connector {
            config: Arc::new(Self::config(&auth, Some(DEFAULT_LOST_AFTER))),
            auth,
            connect_timeout,
            lost_after: Some(DEFAULT_LOST_AFTER),
            bind_address: None,
        }
    }

    /// The same, with connections made from `bind_address` (`None`: the system's choice).
    pub fn with_bind_address(mut self, bind_address: Option<std::net::IpAddr>) -> Self {
        self.bind_address = bind_address;
        self
    }

    /// The same, with servers lost after `lost_after` of silence (`None`: never).
    pub fn with_lost_after(mut self, lost_after: Option<Duration>) -> Self {
        self.config = Arc::new(Self::config(&self.auth, lost_after));
        self.lost_after = lost_after;
        self
    }

    fn config(auth: &Auth, lost_after: Option<Duration>) -> client::Config {
        let preferred = match auth {
            Auth::Agent(_) => protocol::algorithms::agent_preferred(),
            Auth::OpenSsh(_) => russh::Preferred::default(),
        };
        client::Config {
            preferred,
            inactivity_timeout: None,
            // Probes only: `liveness` decides, from the socket's state
            // (russh would count a server that waits on us as lost).
            keepalive_interval: lost_after.map(|d| d / PROBES),
            keepalive_max: 0,
            nodelay: true,
            channel_buffer_size: protocol::CHANNEL_BUFFER,
            ..Default::default()
        }
    }

    /// The same, with another connect timeout.
    pub fn with_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// TCP connect, handshake, server key check and authentication, all
    /// within the connect timeout.
    ///
    /// A session that ended during authentication, with no key refused, is
    /// tried once more within the same timeout: nothing ran on the node yet.
    /// A russh server with keepalives (every agent) sends its first one as
    /// soon as the client has been silent for the interval, even before the
    /// login is over, and a russh client waiting for its login's answer takes
    /// that as a protocol error ("Inconsistent state of the protocol"): one
    /// launch in twelve at 4,096 nodes on 2 cores lost a node to it.
    pub async fn connect(&self, target: &Target) -> Result<Connection, ConnectError> {
        let secs = self.connect_timeout.as_secs_f64();
        let deadline = tokio::time::Instant::now() + self.connect_timeout;
        let mut tries = 0;
        let result = loop {
            tries += 1;
            match tokio::time::timeout_at(deadline, self.connect_inner(target)).await {
                Ok(Err(e @ ConnectError::EndedInLogin { .. })) if tries < LOGIN_TRIES => {
                    debug!(%target, error = %e, "trying the connection again");
                }
                Ok(result) => break result,
                Err(_) => {
                    break Err(ConnectError::Timeout {
                        target: target.to_string(),
                        secs,
                    });
                }
            }
        };
        match &self.auth {
            Auth::OpenSsh(auth) if auth.for_want_of_secret => {
                result.map_err(|e| ConnectError::NoSecret(Box::new(e)))
            }
            _ => result,
        }
    }

    async fn connect_inner(&self, target: &Target) -> Result<Connection, ConnectError> {
        let (stream, peer) = tcp_connect(target, self.bind_address).await?;
        if matches!(self.auth, Auth::Agent(_)) {
            abort_on_close(&stream);
        }
        // For the liveness watch: a descriptor of the socket russh will own.
        let socket = std::os::fd::AsFd::as_fd(&stream)
            .try_clone_to_owned()
            .ok()
            .map(Arc::new);
        let rejection = Arc::new(std::sync::Mutex::new(None));
        let ended = Arc::new(std::sync::Mutex::new(None));
        let open_failures = OpenFailures::default();
        let handler = ClientHandler {
            auth: self.auth.clone(),
            target: target.clone(),
            rejection: rejection.clone(),
            ended: ended.clone(),
            open_failures: open_failures.clone(),
        };
        let mut handle = match client::connect_stream(self.config.clone(), stream, handler).await {
            Ok(handle) => handle,
            Err(e) => {
                let rejected = rejection.lock().expect("not poisoned").take();
                // russh's error is a bare "Disconnected": the server's reason says more.
                let ended = ended.lock().expect("not poisoned").take();
                return Err(rejected.unwrap_or_else(|| ConnectError::Ssh {
                    target: target.to_string(),
                    detail: ended.unwrap_or_else(|| e.to_string()),
                }));
            }
        };
        // A failed authentication on a session that is gone was no refusal:
        // russh reports a lost session as a failure with nothing to try.
        let lost_in_auth = |handle: &Handle<ClientHandler>| {
            handle.is_closed().then(|| ConnectError::EndedInLogin {
                target: target.to_string(),
                reason: ended
                    .lock()
                    .expect("not poisoned")
                    .take()
                    .unwrap_or_else(|| "no reason given".into()),
            })
        };
        // An error on a session that is gone is its end (russh answers a
        // request on it with "Channel send error").
        let ssh_err = |handle: &Handle<ClientHandler>, e: russh::Error| {
            lost_in_auth(handle).unwrap_or_else(|| ConnectError::Ssh {
                target: target.to_string(),
                detail: e.to_string(),
            })
        };
        match &self.auth {
            Auth::Agent(keys) => {
                let key = PrivateKeyWithHashAlg::new(Arc::new(keys.client.clone()), None);
                let result = handle
                    .authenticate_publickey(target.user.clone(), key)
                    .await
                    .map_err(|e| ssh_err(&handle, e))?;
                if !result.success() {
                    return Err(lost_in_auth(&handle).unwrap_or(ConnectError::AgentAuth {
                        target: target.to_string(),
                    }));
                }
            }
            Auth::OpenSsh(auth) => {
                let mut tried = Vec::new();
                let mut ok = false;
                let rsa_hash = if auth.identities.iter().any(|(_, k)| k.algorithm().is_rsa()) {
                    handle
                        .best_supported_rsa_hash()
                        .await
                        .map_err(|e| ssh_err(&handle, e))?
                        .flatten()
                } else {
                    None
                };
                for (path, key) in &auth.identities {
                    tried.push(path.display().to_string());
                    let hash = if key.algorithm().is_rsa() {
                        rsa_hash
                    } else {
                        None
                    };
                    let key = PrivateKeyWithHashAlg::new(Arc::new(key.clone()), hash);
                    let result = handle
                        .authenticate_publickey(target.user.clone(), key)
                        .await
                        .map_err(|e| ssh_err(&handle, e))?;
                    if result.success() {
                        ok = true;
                        break;
                    }
                }
                if !ok {
                    if let Some(lost) = lost_in_auth(&handle) {
                        return Err(lost);
                    }
                    return Err(ConnectError::UserAuth {
                        target: target.to_string(),
                        tried: if tried.is_empty() {
                            "no key found in ~/.ssh".into()
                        } else {
                            tried.join(", ")
                        },
                    });
                }
            }
        }
        let watch = tokio_util::sync::CancellationToken::new();
        if let (Some(lost_after), Some(socket)) = (self.lost_after, socket.clone()) {
            tokio::spawn(liveness(
                socket,
                lost_after,
                watch.clone(),
                target.to_string(),
            ));
        }
        Ok(Connection {
            handle,
            peer,
            packs_env: matches!(self.auth, Auth::Agent(_)),
            socket,
            open_failures,
            _watch: watch.drop_guard(),
        })
    }
}

/// A close of the socket (this process's end, `kill -9` included) resets
/// the connection (`SO_LINGER` 0) instead of queuing a FIN. An agent whose
/// command does not read its stdin stops reading the connection once the
/// command's pipe and russh's queue are full; a FIN would wait behind the
/// bytes this side still holds for it, for as long as its kernel answers
/// (minutes), and the command would outlive its client. A reset is seen at
/// once (the agent's watchdog ends the connection's commands). Bytes not yet
/// sent are dropped with it: this process has ended, or has what it waited
/// for (a command's exit status comes after the command read its input).
fn abort_on_close(stream: &TcpStream) {
    let abort = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    if let Err(e) = nix::sys::socket::setsockopt(stream, nix::sys::socket::sockopt::Linger, &abort)
    {
        debug!(error = %e, "SO_LINGER not set: a close sends a FIN");
    }
}

/// What the liveness watch and [`Connection::stuck`] read of one connection.
struct SocketState {
    established: bool,
    /// Since the last bytes came from the peer.
    since_recv: Duration,
    /// Bytes from the peer not read yet: we are the slow side.
    unread: bool,
    /// Bytes to the peer held back because its kernel says it has no room
    /// (a zero window whose probes it answers), or acknowledged a moment
    /// ago: the peer is alive and not reading what we send.
    peer_full: bool,
    /// Bytes to the peer held back, and its kernel's window is zero.
    peer_window_closed: bool,
    /// Bytes the peer has acknowledged on this connection.
    bytes_acked: u64,
}

fn socket_state(fd: &std::os::fd::OwnedFd, lost_after: Duration) -> Option<SocketState> {
    let tcp = tcp_state::read(fd)?;
    let zero_window = tcp.zero_window == Some(true);
    let acked_lately = tcp.since_ack_recv < lost_after;
    let unsent = tcp.unsent > 0;
    Some(SocketState {
        established: tcp.established,
        since_recv: tcp.since_recv,
        unread: tcp.unread > 0,
        peer_full: unsent && (zero_window || acked_lately),
        peer_window_closed: unsent && zero_window,
        bytes_acked: tcp.bytes_acked,
    })
}

/// Watches one connection until it is dropped or closed. When nothing has
/// come from the server for `lost_after` while neither side waits on the
/// other (see [`DEFAULT_LOST_AFTER`]), shuts the socket down: russh's session
/// then ends, and so does every channel (the node is lost).
async fn liveness(
    socket: Arc<std::os::fd::OwnedFd>,
    lost_after: Duration,
    done: tokio_util::sync::CancellationToken,
    target: String,
) {
    let least = Duration::from_millis(250);
    let mut wait = lost_after;
    loop {
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let Some(state) = socket_state(&socket, lost_after) else {
            return;
        };
        if !state.established {
            return;
        }
        // Waiting on each other is not silence: the peer has no room for
        // our bytes (alive, not reading), or its bytes wait to be read here.
        if state.since_recv < lost_after || state.peer_full || state.unread {
            wait = lost_after.saturating_sub(state.since_recv).max(least);
            continue;
        }
        debug!(target = %target, silent = ?state.since_recv, "lost: nothing from the server and nothing waits");
        let _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&socket),
            nix::sys::socket::Shutdown::Both,
        );
        return;
    }
}

/// Connects to the first of `target`'s addresses that answers; from
/// `bind_address` when given (as OpenSSH's `-b`: bound before the connect,
/// and only to addresses of its family).
async fn tcp_connect(
    target: &Target,
    bind_address: Option<IpAddr>,
) -> Result<(TcpStream, SocketAddr), ConnectError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|source| ConnectError::Resolve {
            target: target.to_string(),
            source,
        })?
        .filter(|addr| bind_address.is_none_or(|b| b.is_ipv4() == addr.is_ipv4()))
        .collect();
    let mut last = None;
    for addr in addrs {
        let connected = match bind_address {
            None => TcpStream::connect(addr).await,
            Some(bind) => match bound_socket(bind) {
                Ok(socket) => socket.connect(addr).await,
                Err(source) => {
                    return Err(ConnectError::Bind {
                        target: target.to_string(),
                        bind,
                        source,
                    });
                }
            },
        };
        match connected {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, addr));
            }
            Err(e) => last = Some(e),
        }
    }
    let source = last.unwrap_or_else(|| match bind_address {
        Some(bind) => std::io::Error::other(format!("the name has no address of {bind}'s family")),
        None => std::io::Error::other("the name has no address"),
    });
    Err(ConnectError::Tcp {
        target: target.to_string(),
        source,
    })
}

/// A TCP socket bound to `bind` (any port), ready to connect.
fn bound_socket(bind: IpAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = match bind {
        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(bind, 0))?;
    Ok(socket)
}

/// What a session channel runs.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    /// A command line, run by the remote shell.
    Exec(&'a [u8]),
    /// A shell reading commands from stdin.
    Shell,
    /// A subsystem by name (`sftp`).
    Subsystem(&'a str),
}

impl Start<'_> {
    /// For messages: "the command", "a shell", "the sftp subsystem".
    pub fn describe(&self) -> String {
        match self {
            Start::Exec(_) => "to run the command".into(),
            Start::Shell => "a shell".into(),
            Start::Subsystem(name) => format!("the {name} subsystem"),
        }
    }
}

/// An authenticated connection.
pub struct Connection {
    handle: Handle<ClientHandler>,
    peer: SocketAddr,
    /// An agent of this job: the variables go as one packed `env` request.
    packs_env: bool,
    /// A descriptor of the socket russh owns, to read its state and reset it.
    socket: Option<Arc<std::os::fd::OwnedFd>>,
    open_failures: OpenFailures,
    /// Ends the liveness watch with the connection.
    _watch: tokio_util::sync::DropGuard,
}

impl Connection {
    /// The address the connection went to.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Whether the connection is gone (closed, or lost).
    pub fn is_closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// While bytes for the peer wait here and the peer's kernel says it has
    /// no room for them, the bytes it has acknowledged so far: the same
    /// count a while later means that the agent has stopped reading the
    /// connection (a command of it does not read its stdin), so nothing
    /// sent now, a channel's close included, reaches it. `None` otherwise.
    pub fn stuck(&self) -> Option<u64> {
        self.socket
            .as_deref()
            .and_then(|fd| socket_state(fd, Duration::ZERO))
            .filter(|state| state.peer_window_closed)
            .map(|state| state.bytes_acked)
    }

    /// Resets the connection (RST) at once, dropping what is not sent yet:
    /// the agent then ends every command of it. `connect` to `AF_UNSPEC`
    /// is Linux's way to disconnect a TCP socket that other descriptors
    /// (russh's) still hold; a FIN would wait behind the unsent bytes.
    pub fn reset(&self) {
        let Some(fd) = self.socket.as_deref() else {
            return;
        };
        let unspec = libc::sockaddr {
            sa_family: libc::AF_UNSPEC as libc::sa_family_t,
            sa_data: [0; 14],
        };
        // SAFETY: a plain sockaddr of the size given; the descriptor is open.
        let rc = unsafe {
            libc::connect(
                std::os::fd::AsRawFd::as_raw_fd(fd),
                &unspec,
                std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            debug!(peer = %self.peer, error = %std::io::Error::last_os_error(), "reset failed");
        }
    }

    /// Opens a session channel.
    pub async fn open_session(&self) -> Result<Channel<Msg>, russh::Error> {
        self.handle.channel_open_session().await
    }

    /// Opens a `direct-tcpip` channel to `host:port` (local port
    /// forwarding); a refusal is the server's reason in OpenSSH's words
    /// (`administratively prohibited: ...`). Two refusals at once may
    /// swap their reasons: they come without the request they answer.
    pub async fn open_direct_tcpip(
        &self,
        host: &str,
        port: u16,
        from: SocketAddr,
    ) -> Result<Channel<Msg>, String> {
        let opened = self
            .handle
            .channel_open_direct_tcpip(host, port.into(), from.ip().to_string(), from.port().into())
            .await;
        let failure = || {
            self.open_failures
                .lock()
                .expect("not poisoned: no panics while held")
                .pop_front()
        };
        match opened {
            Ok(channel) => Ok(channel),
            Err(russh::Error::ChannelOpenFailure(_)) => {
                Err(failure().unwrap_or_else(|| "refused".into()))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Opens a channel, sends the variables as `env` requests (no reply
    /// wanted, as OpenSSH does) and starts `command`.
    pub async fn exec(
        &self,
        command: &[u8],
        env: &[(String, String)],
    ) -> Result<Channel<Msg>, russh::Error> {
        self.start(Start::Exec(command), env, None).await
    }

    /// Opens a channel, sends the variables as `env` requests (to an agent of
    /// this job, packed into one) and asks for
    /// `what`, wanting a reply: the channel's first `Success` or `Failure`
    /// answers it.
    pub async fn start(
        &self,
        what: Start<'_>,
        env: &[(String, String)],
        terminal: Option<&PtyRequest>,
    ) -> Result<Channel<Msg>, russh::Error> {
        let channel = self.handle.channel_open_session().await?;
        if self.packs_env && env.len() > 1 {
            // One SSH message instead of one a variable (a node's
            // environment is often a hundred variables or more); a few
            // past 128 KiB.
            for packed in protocol::env_pack::pack(env) {
                channel
                    .set_env(false, protocol::env_pack::NAME, packed.as_str())
                    .await?;
            }
        } else {
            for (name, value) in env {
                channel
                    .set_env(false, name.as_str(), value.as_str())
                    .await?;
            }
        }
        if let Some(t) = terminal {
            // No reply wanted, as OpenSSH's `-tt`: a server without one runs the command anyway.
            channel
                .request_pty(
                    false,
                    &t.term,
                    t.size.cols,
                    t.size.rows,
                    t.size.width,
                    t.size.height,
                    &t.modes,
                )
                .await?;
        }
        match what {
            Start::Exec(command) => channel.exec(true, command.to_vec()).await?,
            Start::Shell => channel.request_shell(true).await?,
            Start::Subsystem(name) => channel.request_subsystem(true, name).await?,
        }
        Ok(channel)
    }

    /// Sends an agent control request; returns its exit status and stdout.
    pub(crate) async fn control(&self, control: Control) -> Result<(u32, Vec<u8>), russh::Error> {
        let mut channel = self
            .exec(protocol::control::command(control).as_bytes(), &[])
            .await?;
        let _ = channel.eof().await;
        let mut out = Vec::new();
        let mut status = None;
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => out.extend_from_slice(&data),
                ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                _ => {}
            }
        }
        status.map(|s| (s, out)).ok_or(russh::Error::Disconnect)
    }

    /// Asks an agent who it is.
    pub async fn ping(&self) -> Result<PingReply, String> {
        let (status, out) = self
            .control(Control::Ping)
            .await
            .map_err(|e| e.to_string())?;
        if status != 0 {
            return Err(format!("ping answered with status {status}"));
        }
        serde_json::from_slice(&out).map_err(|e| format!("unreadable ping answer: {e}"))
    }

    /// Releases an agent (the job is over).
    pub async fn release(&self) -> Result<(), String> {
        self.control(Control::Release)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Waits until the agent is released; an error means the connection was lost.
    pub async fn wait_release(&self) -> Result<(), String> {
        match self.control(Control::WaitRelease).await {
            Ok((0, _)) => Ok(()),
            Ok((status, _)) => Err(format!("wait answered with status {status}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Closes the connection and waits until the disconnect is sent.
    pub async fn close(&self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a test server does at the client's key.
    #[derive(Clone, Copy)]
    enum AtKey {
        Refuse,
        Drop,
        Accept,
    }

    /// A test server with the job's host key.
    struct Server(AtKey);

    impl russh::server::Handler for Server {
        type Error = russh::Error;

        async fn auth_publickey_offered(
            &mut self,
            _user: &str,
            _offer: russh::server::PublicKeyOffer<'_>,
        ) -> Result<russh::server::Auth, Self::Error> {
            match self.0 {
                AtKey::Drop => Err(russh::Error::Disconnect),
                AtKey::Refuse => Ok(russh::server::Auth::reject()),
                AtKey::Accept => Ok(russh::server::Auth::Accept),
            }
        }

        async fn auth_publickey(
            &mut self,
            _user: &str,
            _key: russh::server::VerifiedPublicKey<'_>,
        ) -> Result<russh::server::Auth, Self::Error> {
            Ok(match self.0 {
                AtKey::Accept => russh::server::Auth::Accept,
                AtKey::Refuse | AtKey::Drop => russh::server::Auth::reject(),
            })
        }
    }

    /// How a test server runs one session.
    struct Session {
        at_key: AtKey,
        /// russh's server keepalive: sent after this long without a byte
        /// from the client, even before the login is over.
        keepalive: Option<Duration>,
        /// The client's bytes reach the server 100 ms late, as from a client
        /// too busy to answer at once.
        late: bool,
        /// The server disconnects at once with this reason, as an agent
        /// closes a connection not logged in to make room for a newer one.
        closes_with: Option<&'static str>,
    }

    /// The client's login to a test server whose `n`th connection (from 0)
    /// runs as `session(n)` says.
    async fn login(
        session: impl Fn(usize) -> Session + Send + 'static,
    ) -> Result<Connection, ConnectError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let secret = crate::keys::Secret::new(vec![7u8; 32], "test").expect("a valid secret");
        let keys = Arc::new(JobKeys::derive(&secret));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let host_key = keys.host.clone();
        tokio::spawn(async move {
            for n in 0.. {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let Session {
                    at_key,
                    keepalive,
                    late,
                    closes_with,
                } = session(n);
                let config = Arc::new(russh::server::Config {
                    methods: russh::MethodSet::from(&[russh::MethodKind::PublicKey][..]),
                    auth_rejection_time: Duration::ZERO,
                    auth_rejection_time_initial: Some(Duration::ZERO),
                    keys: vec![host_key.clone()],
                    preferred: protocol::algorithms::agent_preferred(),
                    keepalive_interval: keepalive,
                    keepalive_max: 0,
                    ..Default::default()
                });
                if !late {
                    tokio::spawn(async move {
                        if let Ok(s) =
                            russh::server::run_stream(config, stream, Server(at_key)).await
                        {
                            if let Some(reason) = closes_with {
                                let _ = s
                                    .handle()
                                    .disconnect(
                                        russh::Disconnect::ByApplication,
                                        reason.into(),
                                        "en".into(),
                                    )
                                    .await;
                            }
                            let _ = s.await;
                        }
                    });
                    continue;
                }
                let (ours, theirs) = tokio::io::duplex(1 << 16);
                tokio::spawn(async move {
                    if let Ok(s) = russh::server::run_stream(config, theirs, Server(at_key)).await {
                        let _ = s.await;
                    }
                });
                let (mut from_server, mut to_server) = tokio::io::split(ours);
                let (mut from_client, mut to_client) = stream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        if to_server.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let connector = Connector::new(Auth::Agent(keys), Duration::from_secs(10));
        let target = Target {
            host: "127.0.0.1".into(),
            port,
            user: "root".into(),
        };
        connector.connect(&target).await
    }

    /// The error of a login to a server that does `at_key` every time.
    async fn login_against(at_key: AtKey) -> ConnectError {
        let plain = move |_| Session {
            at_key,
            keepalive: None,
            late: false,
            closes_with: None,
        };
        match login(plain).await {
            Ok(_) => panic!("the login succeeded"),
            Err(e) => e,
        }
    }

    /// russh answers an authentication whose session died with the same
    /// failure as a refusal; only a refusal is "refused this job's key"
    /// (a session lost at 4,096 nodes was reported as a wrong secret).
    #[tokio::test]
    async fn a_session_lost_during_login_is_not_a_refused_key() {
        let refused = login_against(AtKey::Refuse).await;
        assert!(
            matches!(refused, ConnectError::AgentAuth { .. }),
            "{refused}"
        );
        let lost = login_against(AtKey::Drop).await;
        assert!(
            lost.to_string()
                .contains("the connection ended during authentication"),
            "{lost}"
        );
    }

    /// An agent says why it closes a connection that has not logged in
    /// (its deadline, too many not logged in): the error gives that
    /// reason, not russh's bare "Disconnected".
    #[tokio::test]
    async fn the_reason_of_a_server_that_closes_before_the_login_is_given() {
        let reason = "too many connections not logged in from this address (64, its limit)";
        let err = login(move |_| Session {
            at_key: AtKey::Accept,
            keepalive: None,
            late: false,
            closes_with: Some(reason),
        })
        .await
        .err()
        .expect("the server closed the connection");
        assert!(err.to_string().contains(reason), "{err}");
    }

    /// A login to a server whose first `early` sessions get the client's
    /// bytes late and send keepalives every 10 ms.
    async fn login_with_early_keepalives(early: usize) -> Result<Connection, ConnectError> {
        login(move |n| Session {
            at_key: AtKey::Accept,
            keepalive: (n < early).then_some(Duration::from_millis(10)),
            late: n < early,
            closes_with: None,
        })
        .await
    }

    /// A keepalive that came before the login's answer ends the session in
    /// russh's client; the login is tried once more, not reported as a lost
    /// node (one launch in twelve at 4,096 nodes lost a node to it).
    #[tokio::test]
    async fn a_login_ended_by_an_early_keepalive_is_tried_again_once() {
        let never = login_with_early_keepalives(0).await;
        assert!(never.is_ok(), "{:?}", never.err());
        let once = login_with_early_keepalives(1).await;
        assert!(once.is_ok(), "{:?}", once.err());
        let twice = login_with_early_keepalives(2).await;
        let err = twice.err().expect("two sessions ended in login");
        assert!(matches!(err, ConnectError::EndedInLogin { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("the connection ended during authentication"),
            "{err}"
        );
    }
}
