//! The russh client shared by `mn-ssh`, `exec_all` and the agent lifecycle:
//! the connector (TCP, handshake, login, one retry of a login whose session
//! ended) and the connection it gives, on which exec channels are opened.
//! Its other jobs have files of their own: [`super::auth`] (who each side
//! is), [`super::target`] (where, and the errors), [`super::lost_after`]
//! (the environment's say), [`super::tcp_health`] (the socket's watch),
//! [`super::control_requests`] (the agent's own requests).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use russh::Channel;
use russh::client::{self, Handle, Msg};
use tokio::net::TcpStream;
use tracing::debug;

pub use super::auth::{Auth, HostKeyPolicy, OpenSshAuth};
use super::auth::{ClientHandler, OpenFailures, authenticate};
pub use super::lost_after::lost_after;
pub use super::target::{ConnectError, Target};
use super::tcp_health::{abort_on_close, liveness, socket_state};
use super::tty::PtyRequest;
use crate::defaults;
use crate::protocol;
use crate::vars;

/// Keepalives sent to a silent server per `lost_after`.
const PROBES: u32 = 4;
/// A login whose session ended with no key refused is tried this often in
/// all ([`Connector::connect`]).
const LOGIN_TRIES: u32 = 2;

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
            config: Arc::new(Self::config(&auth, Some(defaults::LOST_AFTER))),
            auth,
            connect_timeout,
            lost_after: Some(defaults::LOST_AFTER),
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
            // An agent gives a client that names itself so the large window
            // `liveness` stands on.
            client_id: russh::SshId::Standard(protocol::client_id().into()),
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
        let tcp_up = std::time::SystemTime::now();
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
        let stream = tokio::io::BufReader::with_capacity(protocol::SOCKET_READ_BUFFER, stream);
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
        authenticate(&mut handle, &self.auth, target, &ended).await?;
        let logged_in = std::time::SystemTime::now();
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
            times: ConnectTimes { tcp_up, logged_in },
            packs_env: matches!(self.auth, Auth::Agent(_)),
            socket,
            open_failures,
            _watch: watch.drop_guard(),
        })
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
    pub(super) handle: Handle<ClientHandler>,
    peer: SocketAddr,
    times: ConnectTimes,
    /// An agent of this job: the variables go as one packed `env` request.
    packs_env: bool,
    /// A descriptor of the socket russh owns, to read its state and reset it.
    socket: Option<Arc<std::os::fd::OwnedFd>>,
    /// Why channels failed to open (`forward.rs` reads them).
    pub(super) open_failures: OpenFailures,
    /// Ends the liveness watch with the connection.
    _watch: tokio_util::sync::DropGuard,
}

/// When a connection's TCP connection was up and when its login was done
/// (the last try's, when a login was tried again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectTimes {
    pub tcp_up: std::time::SystemTime,
    pub logged_in: std::time::SystemTime,
}

impl Connection {
    /// The address the connection went to.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// When it was connected and logged in.
    pub fn times(&self) -> ConnectTimes {
        self.times
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
                    .set_env(false, vars::ENV_PACK, packed.as_str())
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
    use crate::keys::JobKeys;

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

    #[test]
    fn the_client_names_itself_so_that_an_agent_gives_it_the_large_window() {
        let keys = Arc::new(JobKeys::derive(
            &crate::keys::Secret::new(b"0123456789abcdef0123456789abcdef".to_vec(), "test")
                .unwrap(),
        ));
        let config = Connector::config(&Auth::Agent(keys), None);
        let russh::SshId::Standard(id) = &config.client_id else {
            panic!("a raw identification string");
        };
        assert!(id.starts_with(protocol::CLIENT_ID_PREFIX), "{id}");
        assert!(
            id.len() > protocol::CLIENT_ID_PREFIX.len(),
            "{id}: no version"
        );
    }
}
