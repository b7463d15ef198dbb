//! NCCL's RAS service (NCCL 2.24 and later) on this node: every NCCL
//! process listens on `localhost:28028` (`NCCL_RAS_ADDR` moves it) and
//! answers a client with the job's health as text, as NCCL's own `ncclras`
//! client asks it (`src/ras/client.cc` of NVIDIA/nccl): `CLIENT PROTOCOL 2`,
//! `TIMEOUT SECS`, `STATUS`, then text until the service closes.
//!
//! Quiet and bounded: no service there (no NCCL, an older one, RAS off) is
//! `None`, never an error; the whole exchange gets [`LIMIT`], the text
//! [`TEXT_MAX`] bytes. Reading the text is `top`'s (`top::ras`).

use std::time::Duration;

use crate::defaults;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tracing::debug;

/// The variable that moves it.
pub(crate) const ADDR_VAR: &str = "NCCL_RAS_ADDR";
/// The whole exchange, connection included.
pub(crate) const LIMIT: Duration = Duration::from_secs(4);
/// How long the service may wait for the other processes' answers (the
/// `TIMEOUT` request; NCCL's default is 5 s a leg).
const GATHER_SECS: u32 = 2;
/// The most text kept (a job of thousands of ranks prints a few KiB unless
/// many are in trouble; each is one line then).
pub(crate) const TEXT_MAX: usize = 256 * 1024;

/// The status text of the RAS service at `addr` (`host:port`), or `None`.
pub(crate) async fn status(addr: &str) -> Option<String> {
    match tokio::time::timeout(LIMIT, ask(addr)).await {
        Ok(Ok(text)) => Some(text),
        Ok(Err(e)) => {
            debug!(addr, error = %e, "no NCCL RAS service");
            None
        }
        Err(_) => {
            debug!(addr, "the NCCL RAS service did not answer in time");
            None
        }
    }
}

async fn ask(addr: &str) -> std::io::Result<String> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read.take(TEXT_MAX as u64));
    let mut line = String::new();
    write.write_all(b"CLIENT PROTOCOL 2\n").await?;
    read.read_line(&mut line).await?;
    if !line.to_ascii_uppercase().starts_with("SERVER PROTOCOL ") {
        return Err(std::io::Error::other(format!(
            "not a RAS service: {:?}",
            line.trim_end()
        )));
    }
    write
        .write_all(format!("TIMEOUT {GATHER_SECS}\n").as_bytes())
        .await?;
    line.clear();
    read.read_line(&mut line).await?;
    write.write_all(b"STATUS\n").await?;
    let mut bytes = Vec::new();
    read.read_to_end(&mut bytes).await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Where this node's RAS service listens: `NCCL_RAS_ADDR` as the job set
/// it (a command's variables first, then the agent's), else NCCL's default.
pub(crate) fn address<'a>(vars: impl IntoIterator<Item = Option<&'a str>>) -> String {
    vars.into_iter()
        .flatten()
        .map(str::trim)
        .find(|a| !a.is_empty())
        .unwrap_or(defaults::NCCL_RAS_ADDR)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_service_is_none_and_quick() {
        // A port nobody listens on: refused at once.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let t = std::time::Instant::now();
        assert_eq!(status(&addr).await, None);
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn speaks_as_ncclras_does() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let service = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let mut asked = Vec::new();
            let mut line = String::new();
            read.read_line(&mut line).await.expect("protocol");
            asked.push(line.clone());
            write.write_all(b"SERVER PROTOCOL 2\n").await.expect("w");
            line.clear();
            read.read_line(&mut line).await.expect("timeout");
            asked.push(line.clone());
            write.write_all(b"OK\n").await.expect("w");
            line.clear();
            read.read_line(&mut line).await.expect("status");
            asked.push(line.clone());
            write
                .write_all(b"Job summary\n===========\n")
                .await
                .expect("w");
            asked
        });
        assert_eq!(
            status(&addr).await.as_deref(),
            Some("Job summary\n===========\n")
        );
        assert_eq!(
            service.await.expect("service"),
            ["CLIENT PROTOCOL 2\n", "TIMEOUT 2\n", "STATUS\n"]
        );
        assert_eq!(
            address([None, Some(""), Some("10.0.0.1:2000")]),
            "10.0.0.1:2000"
        );
        assert_eq!(address([None]), defaults::NCCL_RAS_ADDR);
    }
}
