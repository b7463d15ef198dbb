//! Where the client connects ([`Target`]) and why a connection could not be
//! made ([`ConnectError`], each saying what to do).

use std::net::IpAddr;

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
