//! The russh handler of one connection ([`ConnHandler`]): who may log in
//! (the job's key, within the login deadline), which channels and requests
//! are taken (sessions, `direct-tcpip`, terminals, the `sftp` subsystem) and
//! which are refused (remote and agent forwarding, X11). Its methods only
//! answer and hand channels to tasks: russh awaits them inside the
//! connection's read loop.

use std::net::SocketAddr;
use std::sync::Arc;

use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info};

use super::env_limit::ConnectionEnv;
use super::login::Login;
use super::pty::ConnectionPtys;
use super::session_bounds::ConnectionSessions;
use super::session_channel::serve_channel;
use super::shared::Shared;
use super::{forward, sftp};

/// One per connection. Its methods only answer requests and hand channels to
/// tasks: russh awaits them inside the connection's read loop.
pub(super) struct ConnHandler {
    pub shared: Arc<Shared>,
    pub conn: CancellationToken,
    /// This connection's channel tasks.
    pub channels: TaskTracker,
    pub login: Arc<Login>,
    pub peer: SocketAddr,
    /// The environment this connection's channels hold.
    pub env: ConnectionEnv,
    /// Its terminals open at once.
    pub ptys: ConnectionPtys,
    /// Its forwarded (`direct-tcpip`) channels open at once.
    pub forwards: Arc<tokio::sync::Semaphore>,
    /// Its session channels open at once (and the agent's).
    pub sessions: Arc<ConnectionSessions>,
}

impl ConnHandler {
    fn is_job_client(&self, key: &russh::keys::PublicKey) -> bool {
        key.key_data() == self.shared.keys.client_public().key_data()
    }

    /// Every rejected key leaves a line at `-v`: a scan or a client with the
    /// wrong secret is visible in the agent's log.
    fn reject(&self, user: &str, key: &russh::keys::PublicKey) -> Auth {
        self.login.rejected();
        info!(
            peer = %self.peer,
            user,
            key = %key.fingerprint(russh::keys::HashAlg::Sha256),
            "rejected a key that is not this job's (another job's client, or a wrong secret?)"
        );
        Auth::reject()
    }
}

impl russh::server::Handler for ConnHandler {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.is_job_client(offer.public_key) {
            Auth::Accept
        } else {
            self.reject(user, offer.public_key)
        })
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        if !self.is_job_client(key.public_key) {
            return Ok(self.reject(user, key.public_key));
        }
        if !self.login.log_in() {
            info!(peer = %self.peer, user, "the job's key came after the login deadline: rejected");
            return Ok(Auth::reject());
        }
        debug!(peer = %self.peer, user, "authenticated");
        self.shared.touch();
        Ok(Auth::Accept)
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let slot = match self.sessions.slot() {
            Ok(slot) => slot,
            Err(why) => {
                info!(peer = %self.peer, "session channel refused: {why}");
                // RFC 4254's SSH_OPEN_RESOURCE_SHORTAGE.
                let failure = russh::ChannelOpenFailure::Other {
                    code: 4,
                    reason: why,
                };
                reply.reject(failure).await;
                return Ok(());
            }
        };
        reply.accept().await;
        let shared = self.shared.clone();
        let conn = self.conn.clone();
        let handle = session.handle();
        let env = self.env.channel();
        let ptys = self.ptys.clone();
        self.channels.spawn(async move {
            serve_channel(channel, handle, env, ptys, shared, conn).await;
            drop(slot);
        });
        Ok(())
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        channel: Channel<Msg>,
        host_to_connect: &str,
        port_to_connect: u32,
        originator_address: &str,
        originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        let open = forward::DirectTcpip {
            channel,
            host: host_to_connect.to_string(),
            port: port_to_connect,
            originator: format!("{originator_address}:{originator_port} via {}", self.peer),
        };
        let scope = forward::Scope {
            destinations: &self.shared.destinations,
            slots: &self.forwards,
            bounds: &self.shared.forwards,
            tracker: &self.channels,
            conn: &self.conn,
            shutdown: &self.shared.shutdown,
        };
        forward::open(open, reply, scope).await;
        Ok(())
    }

    // Remote forwarding (`ssh -R`), agent forwarding (`-A`) and X11 (`-X`)
    // are refused: OpenSSH's ssh reports each refusal.
    async fn tcpip_forward(
        &mut self,
        address: &str,
        port: &mut u32,
        _session: &mut Session,
    ) -> Result<bool, Self::Error> {
        info!(peer = %self.peer, address, port = *port, "remote forwarding refused");
        Ok(false)
    }

    async fn agent_request(
        &mut self,
        _channel: ChannelId,
        _session: &mut Session,
    ) -> Result<bool, Self::Error> {
        debug!(peer = %self.peer, "agent forwarding refused");
        Ok(false)
    }

    async fn x11_request(
        &mut self,
        channel: ChannelId,
        _single_connection: bool,
        _x11_auth_protocol: &str,
        _x11_auth_cookie: &str,
        _x11_screen_number: u32,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        debug!(peer = %self.peer, "X11 forwarding refused");
        session.channel_failure(channel)?;
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        _data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)?;
        Ok(())
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)?;
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _term: &str,
        _col_width: u32,
        _row_height: u32,
        _pix_width: u32,
        _pix_height: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        // The channel's task opens it (it gets the request too).
        session.channel_success(channel)?;
        Ok(())
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        // The channel's task serves it (it gets the request too).
        if name == sftp::NAME {
            session.channel_success(channel)?;
        } else {
            debug!(peer = %self.peer, name, "unknown subsystem refused");
            session.channel_failure(channel)?;
        }
        Ok(())
    }
}
