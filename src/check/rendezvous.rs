//! The rendezvous port during a check: the head listens on it (which also
//! proves it free) and answers each connection with one line holding its
//! clock, `multinode-check-clock MS\n`; every node connects to
//! `MULTINODE_NODE_IP:PORT` and, when that line comes back, has a clock
//! sample for free.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::facts::{ClockSample, Rendezvous};

const CLOCK_PREFIX: &str = "multinode-check-clock ";

/// How long a node waits for the head's clock line after connecting.
const CLOCK_READ_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) fn clock_line(ms: u64) -> String {
    format!("{CLOCK_PREFIX}{ms}\n")
}

/// The head's time from its line; `None` for anything else (another program
/// holds the port).
pub(crate) fn parse_clock_line(buf: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(buf).ok()?;
    let line = text.strip_prefix(CLOCK_PREFIX)?.split('\n').next()?;
    line.trim().parse().ok()
}

/// Listens on `port` on every address of `head_ip`'s family, as torchrun's
/// store does, so that a port held on any address counts as taken.
pub(crate) async fn bind(head_ip: IpAddr, port: u16) -> std::io::Result<TcpListener> {
    let any = match head_ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    TcpListener::bind(SocketAddr::new(any, port)).await
}

/// Accepts connections until `stop`, answering each with the clock line.
pub(crate) async fn serve(listener: TcpListener, stop: CancellationToken, now_ms: fn() -> u64) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((mut stream, peer)) => {
                debug!(%peer, "rendezvous connection");
                tokio::spawn(async move {
                    let line = clock_line(now_ms());
                    // A peer that closed at once is no error of ours.
                    let _ = stream.write_all(line.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
            Err(e) => {
                debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// `connection refused`, `timed out after 3 s`, ...: the words the fixes key on.
fn describe(e: &std::io::Error, timeout: Duration) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionRefused => "connection refused".to_string(),
        ErrorKind::TimedOut | ErrorKind::WouldBlock => {
            format!("timed out after {} s", timeout.as_secs_f64())
        }
        ErrorKind::HostUnreachable => "host unreachable".to_string(),
        ErrorKind::NetworkUnreachable => "network unreachable".to_string(),
        _ => e.to_string(),
    }
}

/// Connects to `addr` within `timeout`, then reads the head's clock line.
/// Blocking; `now_ms` is the node's clock.
pub(crate) fn connect(addr: SocketAddr, timeout: Duration, now_ms: &dyn Fn() -> u64) -> Rendezvous {
    let sent_ms = now_ms();
    let start = Instant::now();
    let result = TcpStream::connect_timeout(&addr, timeout);
    let elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut stream = match result {
        Ok(stream) => stream,
        Err(e) => {
            debug!(%addr, error = %e, "rendezvous connect failed");
            return Rendezvous {
                addr: addr.to_string(),
                connected: false,
                error: Some(describe(&e, timeout)),
                elapsed_ms,
                clock: None,
            };
        }
    };
    let clock = read_clock(&mut stream).map(|head_ms| ClockSample {
        sent_ms,
        head_ms,
        received_ms: now_ms(),
    });
    Rendezvous {
        addr: addr.to_string(),
        connected: true,
        error: None,
        elapsed_ms,
        clock,
    }
}

fn read_clock(stream: &mut TcpStream) -> Option<u64> {
    stream.set_read_timeout(Some(CLOCK_READ_TIMEOUT)).ok()?;
    let mut buf = Vec::with_capacity(64);
    let mut chunk = [0u8; 64];
    while buf.len() < 64 && !buf.contains(&b'\n') {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    parse_clock_line(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_lines_round_trip() {
        assert_eq!(
            parse_clock_line(clock_line(1_764_513_000_123).as_bytes()),
            Some(1_764_513_000_123)
        );
        assert_eq!(parse_clock_line(b"SSH-2.0-OpenSSH_9.2\r\n"), None);
        assert_eq!(parse_clock_line(b"multinode-check-clock x\n"), None);
        assert_eq!(parse_clock_line(b""), None);
        assert_eq!(parse_clock_line(&[0xff, 0xfe]), None);
    }

    #[tokio::test]
    async fn the_listener_answers_with_its_clock() {
        let listener = bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, stop.clone(), || 42));
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let got =
            tokio::task::spawn_blocking(move || connect(addr, Duration::from_secs(3), &|| 40))
                .await
                .expect("join");
        assert!(got.connected, "{got:?}");
        assert_eq!(
            got.clock,
            Some(ClockSample {
                sent_ms: 40,
                head_ms: 42,
                received_ms: 40
            })
        );
        stop.cancel();
        server.await.expect("server ends");
    }

    #[test]
    fn a_closed_port_is_refused() {
        // Bind then drop: the port is free and nothing listens.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let got = connect(addr, Duration::from_secs(3), &|| 0);
        assert!(!got.connected);
        assert_eq!(got.error.as_deref(), Some("connection refused"));
        assert_eq!(got.addr, format!("127.0.0.1:{port}"));
        assert_eq!(got.clock, None);
    }

    #[test]
    fn another_program_on_the_port_gives_no_clock() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let other = std::thread::spawn(move || {
            use std::io::Write;
            let (mut s, _) = listener.accept().expect("accept");
            let _ = s.write_all(b"hello\n");
        });
        let got = connect(addr, Duration::from_secs(3), &|| 0);
        assert!(got.connected);
        assert_eq!(got.clock, None);
        other.join().expect("thread");
    }
}
