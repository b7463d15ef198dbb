//! Keys derived from the per-job secret.
//!
//! Every node of a job holds the same secret (`MULTINODE_SECRET`, or a file).
//! From it both sides derive two Ed25519 keys: the client key, which `mn-ssh`
//! and `exec_all` log in with, and the host key, which every agent presents.
//! Each side thereby authenticates the other with no `ssh-keygen`, no
//! `known_hosts` and no `sshd` in the image. The derivation is a domain-separated
//! SHA-256 of the secret, so the keys are the same on every node and every run.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{PrivateKey, PublicKey};
use sha2::{Digest, Sha256};

use crate::cli::KeygenArgs;
use crate::error::Error;
use crate::topology::EnvMap;

/// Secrets shorter than this are refused: they could be guessed.
pub const MIN_SECRET_LEN: usize = 16;

const CLIENT_LABEL: &[u8] = b"multinode/v1/client-key\0";
const HOST_LABEL: &[u8] = b"multinode/v1/host-key\0";

/// The per-job secret. Its bytes are never logged or printed.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

impl Secret {
    /// Checks the length; `source` names where it came from, for the error.
    pub fn new(bytes: Vec<u8>, source: &str) -> Result<Self, Error> {
        if bytes.len() < MIN_SECRET_LEN {
            return Err(Error::usage(format!(
                "the job secret from {source} is {} bytes; it needs at least {MIN_SECRET_LEN} \
                 (for example: export MULTINODE_SECRET=$(head -c 32 /dev/urandom | base64))",
                bytes.len()
            )));
        }
        Ok(Secret(bytes))
    }

    /// Finds the secret: `--secret-file`, else `MULTINODE_SECRET`, else
    /// `MULTINODE_SECRET_FILE`. `None` when none of them is set.
    pub fn find(secret_file: Option<&Path>, env: &EnvMap) -> Result<Option<Self>, Error> {
        if let Some(path) = secret_file {
            return Self::from_file(path).map(Some);
        }
        if let Some(value) = env.get("MULTINODE_SECRET") {
            return Self::new(value.as_bytes().to_vec(), "MULTINODE_SECRET").map(Some);
        }
        if let Some(path) = env.get("MULTINODE_SECRET_FILE") {
            return Self::from_file(Path::new(path)).map(Some);
        }
        Ok(None)
    }

    /// Like [`Secret::find`], but a missing secret is an error saying what to set.
    pub fn require(secret_file: Option<&Path>, env: &EnvMap, who: &str) -> Result<Self, Error> {
        Self::find(secret_file, env)?.ok_or_else(|| {
            Error::usage(format!(
                "{who} needs the job secret: set MULTINODE_SECRET (the same value, at least \
                 {MIN_SECRET_LEN} bytes, on every node) or pass --secret-file FILE"
            ))
        })
    }

    fn from_file(path: &Path) -> Result<Self, Error> {
        let mut bytes = fs::read(path).map_err(|e| {
            Error::usage(format!(
                "cannot read the secret file {}: {e}",
                path.display()
            ))
        })?;
        // A file written by `echo` ends with a newline that is not part of the secret.
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        Self::new(bytes, &path.display().to_string())
    }

    fn derive(&self, label: &[u8]) -> PrivateKey {
        let seed: [u8; 32] = Sha256::new()
            .chain_update(label)
            .chain_update(&self.0)
            .finalize()
            .into();
        PrivateKey::from(Ed25519Keypair::from_seed(&seed))
    }
}

/// The two keys of a job.
#[derive(Clone)]
pub struct JobKeys {
    /// What clients log in with.
    pub client: PrivateKey,
    /// What agents present as their host key.
    pub host: PrivateKey,
}

impl JobKeys {
    pub fn derive(secret: &Secret) -> Self {
        JobKeys {
            client: secret.derive(CLIENT_LABEL),
            host: secret.derive(HOST_LABEL),
        }
    }

    pub fn client_public(&self) -> &PublicKey {
        self.client.public_key()
    }

    pub fn host_public(&self) -> &PublicKey {
        self.host.public_key()
    }
}

/// `multinode keygen -o FILE`: the client key in OpenSSH format, for `ssh -i FILE`.
pub fn cmd_keygen(args: &KeygenArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let secret = Secret::require(args.secret_file.as_deref(), &env, "multinode keygen")?;
    let keys = JobKeys::derive(&secret);
    let private = keys
        .client
        .to_openssh(LineEnding::LF)
        .map_err(|e| Error::Failed(format!("cannot encode the client key: {e}")))?;
    write_private(&args.output, private.as_bytes())?;
    let public = openssh_public(keys.client_public(), "multinode-client")?;
    let pub_path = PathBuf::from(format!("{}.pub", args.output.display()));
    fs::write(&pub_path, format!("{public}\n"))
        .map_err(|e| Error::Failed(format!("cannot write {}: {e}", pub_path.display())))?;
    if args.known_hosts {
        let line = format!(
            "* {}\n",
            openssh_public(keys.host_public(), "multinode-agent")?
        );
        return Ok(crate::stdio::print_or_code("multinode", &line));
    }
    Ok(0)
}

/// `ssh-ed25519 AAAA... comment`
pub fn openssh_public(key: &PublicKey, comment: &str) -> Result<String, Error> {
    let mut key = key.clone();
    key.set_comment(comment);
    key.to_openssh()
        .map_err(|e| Error::Failed(format!("cannot encode a public key: {e}")))
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let fail = |e: std::io::Error| Error::Failed(format!("cannot write {}: {e}", path.display()));
    // Replace rather than truncate, so an existing file with loose permissions
    // never holds the key for a moment.
    let _ = fs::remove_file(path);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(fail)?;
    file.write_all(bytes).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> Secret {
        Secret::new(s.as_bytes().to_vec(), "test").expect("long enough")
    }

    #[test]
    fn short_secret_is_refused_with_advice() {
        let err = Secret::new(b"short".to_vec(), "MULTINODE_SECRET").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("5 bytes"), "{msg}");
        assert!(msg.contains("at least 16"), "{msg}");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn derivation_is_deterministic_and_separated() {
        let a = JobKeys::derive(&secret("0123456789abcdef-job-a"));
        let a2 = JobKeys::derive(&secret("0123456789abcdef-job-a"));
        let b = JobKeys::derive(&secret("0123456789abcdef-job-b"));
        assert_eq!(a.client_public(), a2.client_public());
        assert_eq!(a.host_public(), a2.host_public());
        assert_ne!(a.client_public(), a.host_public());
        assert_ne!(a.client_public(), b.client_public());
        assert_ne!(a.host_public(), b.host_public());
    }

    #[test]
    fn openssh_encoding_is_byte_identical_across_runs() {
        let k1 = JobKeys::derive(&secret("a secret of enough length"));
        let k2 = JobKeys::derive(&secret("a secret of enough length"));
        let p1 = k1.client.to_openssh(LineEnding::LF).unwrap();
        let p2 = k2.client.to_openssh(LineEnding::LF).unwrap();
        assert_eq!(p1.as_str(), p2.as_str());
        assert!(p1.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
    }

    #[test]
    fn secret_file_newline_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        fs::write(&path, "0123456789abcdef\n").unwrap();
        let env = EnvMap::default();
        let from_file = Secret::find(Some(&path), &env).unwrap().unwrap();
        let direct = secret("0123456789abcdef");
        assert_eq!(
            JobKeys::derive(&from_file).client_public(),
            JobKeys::derive(&direct).client_public()
        );
    }

    #[test]
    fn missing_secret_names_what_to_set() {
        let err = Secret::require(None, &EnvMap::default(), "multinode agent").unwrap_err();
        assert!(err.to_string().contains("MULTINODE_SECRET"));
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let s = secret("do-not-print-this-secret");
        assert!(!format!("{s:?}").contains("do-not-print"));
    }
}
