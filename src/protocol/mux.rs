//! Connection sharing, like OpenSSH's ControlMaster: inside `multinode agent
//! -- JOB`, the head's agent keeps its logged-in connections to the workers
//! and listens on a Unix socket named by [`crate::vars::MUX_SOCKET`]. A client of the job
//! (exec_all) opens one Unix connection per remote command; the head's agent
//! opens a channel on its connection to that node and forwards it. No key
//! exchange, no login, no TCP handshake per command.
//!
//! Each Unix connection carries one channel as frames: a kind byte, a 4-byte
//! big-endian length, the payload. The client sends [`OPEN`] (the target and
//! a random challenge, JSON); the head's agent answers [`PROOF`] (the
//! challenge signed with the job's host key: only an agent that knows the
//! secret can make it, so another user's socket at the same path gets no
//! variables and no command), then [`OPENED`] (the node's address, which the
//! variables may name) or [`FAILED`] (why, JSON). The client then sends
//! [`ENV`] (the variables, JSON) and [`COMMAND`] (the command line, raw); the
//! head's agent answers [`STARTED`] or [`FAILED`]. Then the client sends
//! [`DATA`], [`EOF`] and [`SIGNAL`] as they come, and the head's agent the
//! channel's messages: [`SUCCESS`] or [`FAILURE`] (the node's answer to the
//! request), [`DATA`], [`EXT`], [`EOF`], [`EXIT_STATUS`], [`EXIT_SIGNAL`] and
//! [`CLOSE`]. A Unix connection that ends without
//! [`CLOSE`] means the connection to the node was lost; a client that closes
//! its end closes the channel, and the node ends the command's group.

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Client → head: the target ([`Open`], JSON).
pub const OPEN: u8 = 1;
/// Client → head: the command line; the channel starts on it.
pub const COMMAND: u8 = 2;
/// Client → head: the variables, before [`COMMAND`] (JSON pairs).
pub const ENV: u8 = 6;
/// Both ways: stdin (client → head), stdout (head → client).
pub const DATA: u8 = 3;
/// Both ways: no more input, no more output.
pub const EOF: u8 = 4;
/// Client → head: a signal by its SSH name (`TERM`).
pub const SIGNAL: u8 = 5;
/// Head → client: [`OPEN`]'s challenge signed with the host key ([`prove`]).
pub const PROOF: u8 = 25;
/// Head → client: connected; the payload is the node's address (`IP:PORT`).
pub const OPENED: u8 = 16;
/// Head → client: the command runs.
pub const STARTED: u8 = 22;
/// Head → client: the node's answer to the request (its `success` or `failure`).
pub const SUCCESS: u8 = 23;
pub const FAILURE: u8 = 24;
/// Head → client: no channel ([`Failed`], JSON); the connection ends after it.
pub const FAILED: u8 = 17;
/// Head → client: extended data: a 4-byte big-endian code, then the bytes.
pub const EXT: u8 = 18;
/// Head → client: the exit status, 4 bytes big-endian.
pub const EXIT_STATUS: u8 = 19;
/// Head → client: an exit signal ([`ExitSignal`], JSON).
pub const EXIT_SIGNAL: u8 = 20;
/// Head → client: the channel closed; nothing follows.
pub const CLOSE: u8 = 21;

/// The largest frame either end accepts (the command line and the variables
/// of one node are far smaller; data frames are cut to [`DATA_CHUNK`]).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;
/// Data is sent in frames of at most this many bytes.
pub const DATA_CHUNK: usize = 64 * 1024;

/// What the client asks for first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Open {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// [`job_id`] of the client's job.
    pub job: String,
    /// [`CHALLENGE_LEN`] random bytes, hex: what the head's agent signs.
    #[serde(default)]
    pub challenge: String,
}

/// The bytes of a challenge.
pub const CHALLENGE_LEN: usize = 32;
/// The SSHSIG namespace of a [`PROOF`]: a signature made for anything else
/// (another protocol, another purpose) is not one.
const PROOF_NAMESPACE: &str = "multinode-mux-proof@v1";

/// A fresh challenge: [`CHALLENGE_LEN`] bytes from the system's random source, hex.
pub fn challenge() -> std::io::Result<String> {
    let mut bytes = [0u8; CHALLENGE_LEN];
    getrandom::fill(&mut bytes).map_err(std::io::Error::from)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The [`PROOF`] for `challenge`: an SSHSIG (PEM) made with the job's host key.
pub fn prove(host: &russh::keys::PrivateKey, challenge: &str) -> Result<Vec<u8>, String> {
    let signed = host
        .sign(
            PROOF_NAMESPACE,
            russh::keys::HashAlg::Sha512,
            challenge.as_bytes(),
        )
        .and_then(|sig| sig.to_pem(russh::keys::ssh_key::LineEnding::LF))
        .map_err(|e| format!("cannot sign the challenge: {e}"))?;
    Ok(signed.into_bytes())
}

/// Whether `proof` is [`prove`]'s answer to `challenge` from the holder of
/// the job's host key (`host`).
pub fn verify(host: &russh::keys::PublicKey, challenge: &str, proof: &[u8]) -> bool {
    russh::keys::ssh_key::SshSig::from_pem(proof)
        .and_then(|sig| host.verify(PROOF_NAMESPACE, challenge.as_bytes(), &sig))
        .is_ok()
}

/// Which job a client belongs to: its client key in OpenSSH form. A client
/// of another job (another secret) is refused and connects itself.
pub fn job_id(client_public: &russh::keys::PublicKey) -> String {
    client_public.to_openssh().unwrap_or_default()
}

/// Why no channel was opened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failed {
    /// The node could not be reached (not even connected).
    pub unreachable: bool,
    /// The client is of another job: it must connect itself.
    #[serde(default)]
    pub other_job: bool,
    pub message: String,
}

/// A remote command's end by a signal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExitSignal {
    /// The SSH name (`TERM`).
    pub name: String,
    pub core_dumped: bool,
    pub message: String,
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    write_frame_parts(w, kind, &[payload]).await
}

/// Writes one frame whose payload is `parts`, one after another.
async fn write_frame_parts<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: u8,
    parts: &[&[u8]],
) -> std::io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(total).map_err(|_| std::io::Error::other("frame too long"))?;
    let mut frame = Vec::with_capacity(5 + total);
    frame.push(kind);
    frame.extend_from_slice(&len.to_be_bytes());
    for part in parts {
        frame.extend_from_slice(part);
    }
    w.write_all(&frame).await
}

/// Writes `data` as [`DATA`] frames (or [`EXT`] frames, each with the
/// extended data's code first) of at most [`DATA_CHUNK`] bytes: both ends'
/// one way of sending a stream.
pub async fn write_data<W: AsyncWrite + Unpin>(
    w: &mut W,
    ext: Option<u32>,
    data: &[u8],
) -> std::io::Result<()> {
    for chunk in data.chunks(DATA_CHUNK) {
        match ext {
            Some(code) => write_frame_parts(w, EXT, &[&code.to_be_bytes(), chunk]).await?,
            None => write_frame(w, DATA, chunk).await?,
        }
    }
    Ok(())
}

/// Reads one frame; `None` at a clean end of the stream (between frames).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<(u8, Bytes)>> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    r.read_exact(&mut head[1..]).await?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (at most {MAX_FRAME})"),
        ));
    }
    let mut payload = BytesMut::zeroed(len);
    r.read_exact(&mut payload).await?;
    Ok(Some((head[0], payload.freeze())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_a_clean_end_is_none() {
        let mut buf = Vec::new();
        write_frame(&mut buf, DATA, b"hello").await.unwrap();
        write_frame(&mut buf, EOF, b"").await.unwrap();
        let mut r = buf.as_slice();
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Some((DATA, Bytes::from_static(b"hello")))
        );
        assert_eq!(read_frame(&mut r).await.unwrap(), Some((EOF, Bytes::new())));
        assert_eq!(read_frame(&mut r).await.unwrap(), None);
    }

    #[tokio::test]
    async fn data_is_cut_into_chunks_and_extended_data_carries_its_code() {
        let data = vec![7u8; DATA_CHUNK + 3];
        let mut buf = Vec::new();
        write_data(&mut buf, None, &data).await.unwrap();
        write_data(&mut buf, Some(1), b"err").await.unwrap();
        let mut r = buf.as_slice();
        let (kind, first) = read_frame(&mut r).await.unwrap().unwrap();
        assert_eq!((kind, first.len()), (DATA, DATA_CHUNK));
        let (kind, rest) = read_frame(&mut r).await.unwrap().unwrap();
        assert_eq!((kind, rest.len()), (DATA, 3));
        let (kind, ext) = read_frame(&mut r).await.unwrap().unwrap();
        assert_eq!((kind, &ext[..]), (EXT, &b"\0\0\0\x01err"[..]));
        assert_eq!(read_frame(&mut r).await.unwrap(), None);
    }

    #[test]
    fn only_the_host_key_proves_a_challenge_and_only_that_one() {
        let key = |seed: u8| {
            russh::keys::PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(
                &[seed; 32],
            ))
        };
        let (host, other) = (key(1), key(2));
        let asked = challenge().unwrap();
        assert_eq!(asked.len(), 2 * CHALLENGE_LEN);
        assert_ne!(asked, challenge().unwrap(), "challenges are random");
        let proof = prove(&host, &asked).unwrap();
        assert!(verify(host.public_key(), &asked, &proof));
        assert!(!verify(host.public_key(), &challenge().unwrap(), &proof));
        let forged = prove(&other, &asked).unwrap();
        assert!(!verify(host.public_key(), &asked, &forged));
        // The same key's signature for another purpose is no proof.
        let elsewhere = host
            .sign("file", russh::keys::HashAlg::Sha512, asked.as_bytes())
            .unwrap()
            .to_pem(russh::keys::ssh_key::LineEnding::LF)
            .unwrap();
        assert!(!verify(host.public_key(), &asked, elsewhere.as_bytes()));
        assert!(!verify(host.public_key(), &asked, b"garbage"));
    }

    #[tokio::test]
    async fn a_cut_frame_and_an_oversized_one_are_errors() {
        let mut buf = Vec::new();
        write_frame(&mut buf, DATA, b"hello").await.unwrap();
        buf.truncate(7);
        assert!(read_frame(&mut buf.as_slice()).await.is_err());
        let mut big = vec![DATA];
        big.extend_from_slice(&(MAX_FRAME as u32 + 1).to_be_bytes());
        let e = read_frame(&mut big.as_slice()).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }
}
