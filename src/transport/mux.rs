//! The client end of connection sharing ([`crate::protocol::mux`]): a remote
//! command through the head agent's connection to its node.

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::BufReader;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tracing::{debug, warn};

use super::channel::{ChannelRx, ChannelTx};
use super::client::Target;
use super::mux_frames::MuxReader;
use crate::keys::JobKeys;
use crate::protocol::mux::{self as wire, read_frame, write_frame};
use crate::vars;

/// The head agent's socket, from [`crate::vars::MUX_SOCKET`].
#[derive(Debug, Clone)]
pub struct MuxClient {
    path: PathBuf,
    /// This job's client key (OpenSSH form): the head's agent serves only
    /// clients of its own job.
    job: String,
    /// This job's host key: the head's agent proves it holds it.
    host: russh::keys::PublicKey,
    /// Set once the socket was refused (another user's, or no proof): the
    /// warning is given once, and no later command of this process tries it.
    refused: Arc<AtomicBool>,
}

/// Why a command did not start through the head's agent.
#[derive(Debug)]
pub enum MuxError {
    /// Nothing runs: the head's agent could not reach the node (or gave no
    /// address for it).
    Unreachable(String),
    /// Reached, but the command did not start (or the socket broke after).
    Failed(String),
}

/// A command running through the head agent's connection.
pub struct MuxChannel {
    /// The node's address, as the head's agent reached it.
    pub peer: SocketAddr,
    pub rx: ChannelRx,
    pub tx: ChannelTx,
}

/// Why the socket could not be used.
enum OpenError {
    /// The socket did not answer (no head agent there any more), or it
    /// serves another job: the caller connects itself.
    NoMaster(std::io::Error),
    /// Not the job's head agent: another user could have made the socket,
    /// or it could not prove it knows the secret. Nothing was sent but the
    /// target and a challenge; the caller connects itself.
    Refused(String),
    Mux(MuxError),
}

impl MuxClient {
    pub fn new(path: PathBuf, keys: &JobKeys) -> Self {
        MuxClient {
            path,
            job: wire::job_id(keys.client_public()),
            host: keys.host_public().clone(),
            refused: Arc::default(),
        }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Runs a command on `target` through the head agent's connection.
    /// `request` gets the node's address (which the variables may name) and
    /// gives the command line and the variables. `Ok(None)`: the socket does
    /// not answer, or serves another job; the caller connects itself.
    pub async fn exec(
        &self,
        target: &Target,
        request: impl FnOnce(SocketAddr) -> (Vec<u8>, Vec<(String, String)>),
    ) -> Result<Option<MuxChannel>, MuxError> {
        if self.refused.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let (peer, mut r, mut w) = match self.open(target).await {
            Ok(opened) => opened,
            Err(OpenError::NoMaster(e)) => {
                debug!(socket = %self.path.display(), error = %e, "no shared connection: connecting");
                return Ok(None);
            }
            Err(OpenError::Refused(why)) => {
                if !self.refused.swap(true, Ordering::Relaxed) {
                    warn!(
                        socket = %self.path.display(),
                        "not using {}: {why}; connecting to the nodes directly",
                        vars::MUX_SOCKET
                    );
                }
                return Ok(None);
            }
            Err(OpenError::Mux(e)) => return Err(e),
        };
        let (command, env) = request(peer);
        let broken = |e: std::io::Error| MuxError::Failed(format!("the head's agent: {e}"));
        let json = serde_json::to_vec(&env).expect("plain strings serialize");
        write_frame(&mut w, wire::ENV, &json)
            .await
            .map_err(broken)?;
        write_frame(&mut w, wire::COMMAND, &command)
            .await
            .map_err(broken)?;
        match read_frame(&mut r).await {
            Ok(Some((wire::STARTED, _))) => Ok(Some(MuxChannel {
                peer,
                rx: ChannelRx::Mux(MuxReader::new(r)),
                tx: ChannelTx::Mux(tokio::sync::Mutex::new(w)),
            })),
            Ok(Some((wire::FAILED, payload))) => Err(match failed(&payload) {
                OpenError::Mux(e) => e,
                OpenError::NoMaster(e) => MuxError::Failed(e.to_string()),
                OpenError::Refused(why) => MuxError::Failed(why),
            }),
            Ok(_) => Err(MuxError::Failed(
                "the head's agent closed the socket".into(),
            )),
            Err(e) => Err(broken(e)),
        }
    }

    /// Connects to the head's agent, makes sure it is the job's (this
    /// user's or root's socket, in a place only they control, and a proof
    /// that it knows the secret), and asks for `target`: the node's address
    /// and the socket's halves.
    async fn open(
        &self,
        target: &Target,
    ) -> Result<(SocketAddr, BufReader<OwnedReadHalf>, OwnedWriteHalf), OpenError> {
        check_place(&self.path)?;
        let stream = UnixStream::connect(&self.path)
            .await
            .map_err(OpenError::NoMaster)?;
        let cred = stream.peer_cred().map_err(OpenError::NoMaster)?;
        if !trusted(cred.uid()) {
            return Err(OpenError::Refused(format!(
                "the process listening on it runs as uid {}, not as this user",
                cred.uid()
            )));
        }
        let (r, mut w) = stream.into_split();
        let mut r = BufReader::new(r);
        let challenge = wire::challenge()
            .map_err(|e| OpenError::Refused(format!("no random challenge for it: {e}")))?;
        let open = wire::Open {
            host: target.host.clone(),
            port: target.port,
            user: target.user.clone(),
            job: self.job.clone(),
            challenge: challenge.clone(),
        };
        let json = serde_json::to_vec(&open).expect("plain strings serialize");
        write_frame(&mut w, wire::OPEN, &json)
            .await
            .map_err(OpenError::NoMaster)?;
        match read_frame(&mut r).await {
            Ok(Some((wire::PROOF, proof))) if wire::verify(&self.host, &challenge, &proof) => {}
            Ok(Some((wire::FAILED, payload))) => match failed(&payload) {
                e @ OpenError::NoMaster(_) => return Err(e),
                _ => return Err(no_proof()),
            },
            Ok(Some(_)) => return Err(no_proof()),
            Ok(None) => {
                return Err(OpenError::NoMaster(std::io::Error::other(
                    "the head's agent closed the socket",
                )));
            }
            Err(e) => return Err(OpenError::NoMaster(e)),
        }
        let peer = match read_frame(&mut r).await {
            Ok(Some((wire::OPENED, payload))) => std::str::from_utf8(&payload)
                .ok()
                .and_then(|s| s.parse::<SocketAddr>().ok())
                .ok_or_else(|| {
                    OpenError::Mux(MuxError::Unreachable(
                        "the head's agent sent no address".into(),
                    ))
                })?,
            Ok(Some((wire::FAILED, payload))) => return Err(failed(&payload)),
            Ok(_) => {
                return Err(OpenError::NoMaster(std::io::Error::other(
                    "the head's agent closed the socket",
                )));
            }
            Err(e) => return Err(OpenError::NoMaster(e)),
        };
        Ok((peer, r, w))
    }
}

fn no_proof() -> OpenError {
    OpenError::Refused("it did not prove that it knows the job's secret".into())
}

/// This user, or root: whose socket may be the head agent's.
fn trusted(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

/// Refuses a socket that another user made or could have made: it must be a
/// socket of this user (or root), in a directory of this user (or root) that
/// others cannot write to, unless it is sticky (as `/tmp`: others cannot
/// replace what is there). A socket that is not there is no head agent.
fn check_place(path: &Path) -> Result<(), OpenError> {
    let socket = std::fs::symlink_metadata(path).map_err(OpenError::NoMaster)?;
    if !socket.file_type().is_socket() {
        return Err(OpenError::Refused("it is not a socket".into()));
    }
    if !trusted(socket.uid()) {
        return Err(OpenError::Refused(format!(
            "it belongs to uid {}, not to this user",
            socket.uid()
        )));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).map_err(OpenError::NoMaster)?;
    if !trusted(meta.uid()) {
        return Err(OpenError::Refused(format!(
            "its directory {} belongs to uid {}, not to this user",
            dir.display(),
            meta.uid()
        )));
    }
    if let Some(why) = crate::private_files::others_can_replace(&meta) {
        return Err(OpenError::Refused(format!(
            "its directory {} {why}",
            dir.display()
        )));
    }
    Ok(())
}

fn failed(payload: &[u8]) -> OpenError {
    match serde_json::from_slice::<wire::Failed>(payload) {
        Ok(f) if f.other_job => OpenError::NoMaster(std::io::Error::other(f.message)),
        Ok(f) if f.unreachable => OpenError::Mux(MuxError::Unreachable(f.message)),
        Ok(f) => OpenError::Mux(MuxError::Failed(f.message)),
        Err(e) => OpenError::Mux(MuxError::Failed(format!(
            "unreadable answer from the head's agent: {e}"
        ))),
    }
}
