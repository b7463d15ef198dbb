//! Authentication, both ways: how the client proves who it is ([`Auth`]:
//! the job's keys for an agent, the user's identities for OpenSSH), and how
//! it checks who the server is (the host key derived from the secret, or
//! known_hosts as `StrictHostKeyChecking` says).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use russh::client::{self, Handle};
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use tracing::debug;

use super::target::{ConnectError, Target};
use crate::keys::JobKeys;
use crate::table::printable_cut;

/// What is kept of a text a server sends (a disconnect's reason, a channel
/// refusal's), in characters: a few lines' worth; the rest is a peer's to
/// fill a terminal with.
pub(crate) const PEER_TEXT_MAX: usize = 200;

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

impl HostKeyPolicy {
    /// `-o StrictHostKeyChecking=VALUE`, as OpenSSH reads it: `yes`;
    /// `no` or `off`; anything else (`ask`, `accept-new`) refuses a changed
    /// key and accepts an unknown host without recording it.
    pub fn from_option(value: &str) -> Self {
        match value.to_ascii_lowercase().as_str() {
            "yes" => HostKeyPolicy::Strict,
            "no" | "off" => HostKeyPolicy::AcceptAll,
            _ => HostKeyPolicy::RefuseChanged,
        }
    }
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

/// The client's russh handler: it only checks the server's key.
pub struct ClientHandler {
    pub(super) auth: Auth,
    pub(super) target: Target,
    /// Set when the key check failed, to tell it apart from other handshake errors.
    pub(super) rejection: Arc<Mutex<Option<ConnectError>>>,
    /// Why the session ended, once it has: russh answers an authentication
    /// whose session died with a plain failure, which is not a refused key.
    pub(super) ended: Arc<Mutex<Option<String>>>,
    /// Channel open failures in OpenSSH's words, oldest first, for
    /// `forward.rs` (russh's error has no description).
    pub(super) open_failures: OpenFailures,
}

/// See [`ClientHandler::open_failures`].
pub(super) type OpenFailures = Arc<Mutex<std::collections::VecDeque<String>>>;

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
            d => format!("{name}: {}", printable_cut(d.trim_end(), PEER_TEXT_MAX)),
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
            // Its text comes before any host key is checked, from whoever
            // answers at the address: escaped and cut here, its source.
            client::DisconnectReason::ReceivedDisconnect(info) => (
                format!(
                    "the server closed the connection: {}",
                    printable_cut(&info.message, PEER_TEXT_MAX)
                ),
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

/// Logs in on `handle` as `auth` says: the job's client key to an agent,
/// else each of the user's identities in turn. `ended` is the session's end
/// as the handler saw it: a failure on a session that is gone was no refusal.
pub(super) async fn authenticate(
    handle: &mut Handle<ClientHandler>,
    auth: &Auth,
    target: &Target,
    ended: &Mutex<Option<String>>,
) -> Result<(), ConnectError> {
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
    match auth {
        Auth::Agent(keys) => {
            let key = PrivateKeyWithHashAlg::new(Arc::new(keys.client.clone()), None);
            let result = handle
                .authenticate_publickey(target.user.clone(), key)
                .await
                .map_err(|e| ssh_err(handle, e))?;
            if !result.success() {
                return Err(lost_in_auth(handle).unwrap_or(ConnectError::AgentAuth {
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
                    .map_err(|e| ssh_err(handle, e))?
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
                    .map_err(|e| ssh_err(handle, e))?;
                if result.success() {
                    ok = true;
                    break;
                }
            }
            if !ok {
                if let Some(lost) = lost_in_auth(handle) {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_host_key_checking_is_read_as_openssh_reads_it() {
        for (value, policy) in [
            ("yes", HostKeyPolicy::Strict),
            ("YES", HostKeyPolicy::Strict),
            ("no", HostKeyPolicy::AcceptAll),
            ("off", HostKeyPolicy::AcceptAll),
            ("accept-new", HostKeyPolicy::RefuseChanged),
            ("ask", HostKeyPolicy::RefuseChanged),
        ] {
            assert_eq!(HostKeyPolicy::from_option(value), policy, "{value}");
        }
    }
}
