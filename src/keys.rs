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
use std::path::Path;

use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{PrivateKey, PublicKey};
use sha2::{Digest, Sha256};

use crate::env_map::EnvMap;
use crate::error::Error;
use crate::read_limit::read_file_at_most;
use crate::vars;

/// Secrets shorter than this are refused: they could be guessed.
pub const MIN_SECRET_LEN: usize = 16;
/// Secrets longer than this are refused, and a secret file is never read
/// past it (`--secret-file /dev/zero` must not fill the memory).
pub const MAX_SECRET_LEN: usize = 64 * 1024;

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
    /// The one rule for every source: the bytes as given, less every trailing
    /// `\r` and `\n` (a file written by `echo`, a variable set from one), of
    /// [`MIN_SECRET_LEN`] to [`MAX_SECRET_LEN`] bytes, any bytes allowed
    /// (UTF-8 or not). `source` names where it came from, for the error.
    pub fn new(mut bytes: Vec<u8>, source: &str) -> Result<Self, Error> {
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        if bytes.len() > MAX_SECRET_LEN {
            return Err(Error::usage(format!(
                "the job secret from {source} is {} bytes; at most {MAX_SECRET_LEN} (64 KiB) \
                 are allowed (for example: export MULTINODE_SECRET=$(head -c 32 /dev/urandom | base64))",
                bytes.len()
            )));
        }
        if bytes.len() < MIN_SECRET_LEN {
            return Err(Error::usage(format!(
                "the job secret from {source} is {} bytes; it needs at least {MIN_SECRET_LEN} \
                 (for example: export MULTINODE_SECRET=$(head -c 32 /dev/urandom | base64))",
                bytes.len()
            )));
        }
        Ok(Secret(bytes))
    }

    /// Finds the secret: `--secret-file`, else `MULTINODE_SECRET` (its bytes,
    /// UTF-8 or not), else `MULTINODE_SECRET_FILE` (a path, UTF-8 or not).
    /// `None` when none of them is set.
    pub fn find(secret_file: Option<&Path>, env: &EnvMap) -> Result<Option<Self>, Error> {
        if let Some(path) = secret_file {
            return Self::from_file(path).map(Some);
        }
        if let Some(value) = env.get_bytes(vars::SECRET) {
            return Self::new(value.to_vec(), vars::SECRET).map(Some);
        }
        if let Some(path) = env.get_bytes(vars::SECRET_FILE) {
            use std::os::unix::ffi::OsStrExt;
            return Self::from_file(Path::new(std::ffi::OsStr::from_bytes(path))).map(Some);
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
        let bytes = read_file_at_most(path, MAX_SECRET_LEN as u64).map_err(|e| {
            Error::usage(format!(
                "cannot read the secret file {}: {e}; a secret file holds the secret alone \
                 ({MIN_SECRET_LEN} bytes to 64 KiB)",
                path.display()
            ))
        })?;
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
/// With `known_hosts`, also prints a known_hosts line for the agents' host key.
pub fn cmd_keygen(
    secret_file: Option<&Path>,
    output: &Path,
    known_hosts: bool,
) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let secret = Secret::require(secret_file, &env, "multinode keygen")?;
    let keys = JobKeys::derive(&secret);
    let private = keys
        .client
        .to_openssh(LineEnding::LF)
        .map_err(|e| Error::Failed(format!("cannot encode the client key: {e}")))?;
    let public = openssh_public(keys.client_public(), "multinode-client")?;
    let mut pub_path = output.as_os_str().to_owned();
    pub_path.push(".pub");
    let pub_path = Path::new(&pub_path);
    // Both places checked before either is touched: FILE is never written
    // (nor an old one removed) when FILE.pub cannot be.
    can_replace(output)?;
    can_replace(pub_path)?;
    write_new(output, private.as_bytes(), 0o600)?;
    write_new(pub_path, format!("{public}\n").as_bytes(), 0o644)?;
    if known_hosts {
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

/// Refuses a `path` whose entry this user cannot remove, before anything is
/// written: a directory, or another user's file or link in a sticky
/// directory (`/tmp`: only its owner, the directory's or root may remove
/// it). Nothing there is fine; so is an entry of this user's, or any entry
/// in a directory this user may write to that is not sticky.
fn can_replace(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entry) = fs::symlink_metadata(path) else {
        return Ok(());
    };
    let refuse = |why: String| {
        Error::usage(format!(
            "cannot replace {}: {why}; remove it or choose another --output",
            path.display()
        ))
    };
    if entry.is_dir() {
        return Err(refuse("it is a directory".into()));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let me = nix::unistd::geteuid().as_raw();
    let Ok(parent) = fs::metadata(dir) else {
        return Ok(()); // the write says what is wrong
    };
    let sticky = parent.mode() & 0o1000 != 0;
    if sticky && me != 0 && entry.uid() != me && parent.uid() != me {
        return Err(refuse(format!(
            "it belongs to uid {}, and in {} (sticky) only its owner may remove it",
            entry.uid(),
            dir.display()
        )));
    }
    Ok(())
}

/// Writes `bytes` to a new file at `path` with `mode`, replacing what is there.
/// Replace rather than truncate: an existing file with loose permissions never
/// holds the key for a moment, and a link planted at `path` (by another user,
/// in a shared directory) is removed, never followed: `O_EXCL` refuses to
/// create through one.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
    let fail = |e: std::io::Error| Error::Failed(format!("cannot write {}: {e}", path.display()));
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::usage(format!(
                "cannot replace {}: {e}; remove it or choose another --output",
                path.display()
            )));
        }
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
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

    /// One rule for both sources: `S\n`, `S\r\n` and `S` give the same keys
    /// whether they come from a file or from MULTINODE_SECRET.
    #[test]
    fn trailing_newlines_are_dropped_alike_from_a_file_and_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let plain = JobKeys::derive(&secret("0123456789abcdef"));
        for written in [
            "0123456789abcdef",
            "0123456789abcdef\n",
            "0123456789abcdef\r\n\n",
        ] {
            fs::write(&path, written).unwrap();
            let from_file = Secret::find(Some(&path), &EnvMap::default())
                .unwrap()
                .unwrap();
            let env = crate::topology::machine::fake::env(&[("MULTINODE_SECRET", written)]);
            let from_var = Secret::find(None, &env).unwrap().unwrap();
            for found in [from_file, from_var] {
                assert_eq!(
                    JobKeys::derive(&found).client_public(),
                    plain.client_public(),
                    "{written:?}"
                );
            }
        }
        // Only trailing ones: inner and leading bytes are the secret's.
        let inner = secret("\n0123456789\nabcdef");
        assert_ne!(
            JobKeys::derive(&inner).client_public(),
            plain.client_public()
        );
    }

    #[test]
    fn secrets_are_at_most_64_kib_from_either_source() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        fs::write(&path, vec![b'x'; MAX_SECRET_LEN]).unwrap();
        assert!(Secret::find(Some(&path), &EnvMap::default()).is_ok());
        fs::write(&path, vec![b'x'; MAX_SECRET_LEN + 1]).unwrap();
        let err = Secret::find(Some(&path), &EnvMap::default()).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("larger than 64 KiB"), "{err}");
        let long = "x".repeat(MAX_SECRET_LEN + 1);
        let env = crate::topology::machine::fake::env(&[("MULTINODE_SECRET", &long)]);
        let err = Secret::find(None, &env).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("at most 65536"), "{err}");
        let err = Secret::find(Some(Path::new("/dev/zero")), &EnvMap::default()).unwrap_err();
        assert!(!err.to_string().contains('\n'), "one line: {err}");
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

    /// Where `FILE.pub` cannot be replaced, `FILE` is not written either:
    /// one error, exit code 2, and nothing changed.
    #[test]
    fn keygen_writes_nothing_when_either_place_cannot_be_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        fs::write(&secret, "0123456789abcdef-keygen").unwrap();
        let key = dir.path().join("k");
        fs::create_dir(dir.path().join("k.pub")).unwrap();
        let err = cmd_keygen(Some(&secret), &key, false).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");
        assert!(
            err.to_string().contains("k.pub: it is a directory"),
            "{err}"
        );
        assert!(fs::symlink_metadata(&key).is_err(), "FILE was written");
        fs::remove_dir(dir.path().join("k.pub")).unwrap();
        cmd_keygen(Some(&secret), &key, false).expect("written");
        assert!(key.is_file() && dir.path().join("k.pub").is_file());
    }
}
