//! `mn-ssh -L [bind_address:]port:host:hostport` and `-N`: local port
//! forwarding as OpenSSH's ssh does it, through `direct-tcpip` channels.
//!
//! The listeners are bound once the connection is logged in (as ssh does):
//! on the loopback addresses when no bind address is given (OpenSSH's
//! `GatewayPorts no`), on every address for `*` or an empty one (or with
//! `-g`), else on the address given. A port that cannot be bound is said in
//! ssh's words and the rest goes on, unless `-o ExitOnForwardFailure=yes`.
//! Each accepted connection gets a channel of its own; every one of them
//! ends with the connection or when `mn-ssh` returns (their tasks are owned
//! by [`Forwarding`], aborted when it is dropped).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use russh::Channel;
use russh::client::Msg;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tracing::debug;

use super::client::{Connection, Target};
use crate::error::Error;
use crate::signals::Stops;
use crate::stdio;

/// How often `-N` looks whether its connection is still there.
const CONNECTION_CHECK: Duration = Duration::from_millis(200);
/// Each direction's copy buffer: a few SSH packets (32 KiB each) at a time.
const COPY_BUFFER: usize = 256 * 1024;

/// One `-L` forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalForward {
    /// `None`: loopback (or every address with `-g`); `Some("")` or
    /// `Some("*")`: every address; else an address or a name.
    pub bind: Option<String>,
    pub port: u16,
    /// As the agent (or sshd) is to connect to it, IPv6 without brackets.
    pub host: String,
    pub host_port: u16,
}

/// What ssh's command line asks of forwarding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardOptions {
    /// `-L`, `-o LocalForward`, in order.
    pub local: Vec<LocalForward>,
    /// `-g`, `-o GatewayPorts=yes`: listen on every address when none is given.
    pub gateway_ports: bool,
    /// `-o ExitOnForwardFailure=yes`: a port that cannot be bound ends `mn-ssh` (255).
    pub exit_on_failure: bool,
}

/// `-L`'s value: `[bind_address:]port:host:hostport`, IPv6 addresses in
/// brackets (`[::1]:8080:[::1]:80`). Forwarding to or from a Unix socket
/// is not done.
pub fn parse_spec(spec: &str) -> Result<LocalForward, String> {
    let usage = || {
        format!(
            "bad -L {spec:?}: give [bind_address:]port:host:hostport, for example -L 6006:localhost:6006"
        )
    };
    let fields = split_fields(spec).ok_or_else(usage)?;
    let (bind, rest) = match fields.as_slice() {
        [port, host, host_port] => (None, [port, host, host_port]),
        [bind, port, host, host_port] => (Some(bind.clone()), [port, host, host_port]),
        _ if spec.contains('/') => {
            return Err(format!(
                "-L {spec:?}: forwarding to or from a Unix socket is not done by mn-ssh; give ports"
            ));
        }
        _ => return Err(usage()),
    };
    let port_of = |what: &str, text: &str| {
        crate::values::port(text)
            .ok_or_else(|| format!("bad -L {spec:?}: {what} {text:?} is not a port 1..65535"))
    };
    let host = rest[1].clone();
    if host.is_empty() {
        return Err(usage());
    }
    Ok(LocalForward {
        bind,
        port: port_of("port", rest[0])?,
        host,
        host_port: port_of("hostport", rest[2])?,
    })
}

/// `-o LocalForward`'s value, as ssh_config writes it: `[bind_address:]port host:hostport`.
pub fn parse_option(value: &str) -> Result<LocalForward, String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    match words.as_slice() {
        [listen, target] => parse_spec(&format!("{listen}:{target}")),
        _ => Err(format!(
            "-o LocalForward={value:?}: give \"[bind_address:]port host:hostport\", \
             for example -o \"LocalForward 6006 localhost:6006\""
        )),
    }
}

/// Splits at the colons outside brackets; brackets are taken off.
fn split_fields(spec: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut in_brackets = false;
    for c in spec.chars() {
        match c {
            '[' if !in_brackets => in_brackets = true,
            ']' if in_brackets => in_brackets = false,
            ':' if !in_brackets => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (!in_brackets).then_some(fields)
}

/// The addresses a forward listens on (ssh's `GatewayPorts` rules).
async fn listen_addresses(fwd: &LocalForward, gateway_ports: bool) -> Result<Vec<IpAddr>, String> {
    let every = [
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    ];
    let loopback = [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    match fwd.bind.as_deref() {
        None if gateway_ports => Ok(every.to_vec()),
        None | Some("localhost") => Ok(loopback.to_vec()),
        Some("" | "*") => Ok(every.to_vec()),
        Some(name) => match name.parse::<IpAddr>() {
            Ok(ip) => Ok(vec![ip]),
            Err(_) => tokio::net::lookup_host((name, fwd.port))
                .await
                .map(|addrs| addrs.map(|a| a.ip()).collect())
                .map_err(|e| format!("bind address {name:?}: {e}")),
        },
    }
}

/// Binds every forward's listeners. A failed address is said as ssh says it
/// (`bind [127.0.0.1]:6006: Address already in use`); a forward with no
/// listener at all is not set up, which ends `mn-ssh` with
/// `ExitOnForwardFailure`, and otherwise is said and skipped.
pub async fn listen(opts: &ForwardOptions) -> Result<Vec<(TcpListener, LocalForward)>, Error> {
    let mut listeners = Vec::new();
    let mut failed = false;
    for fwd in &opts.local {
        let mut bound = 0;
        let addresses = match listen_addresses(fwd, opts.gateway_ports).await {
            Ok(a) => a,
            Err(e) => {
                stdio::eprint(&format!("{e}\n"));
                Vec::new()
            }
        };
        for ip in addresses {
            match bind(SocketAddr::new(ip, fwd.port)) {
                Ok(listener) => {
                    bound += 1;
                    listeners.push((listener, fwd.clone()));
                }
                // A machine without IPv6 has no ::1: as ssh, no word of it
                // when another address of the forward was bound.
                Err(e) if ip.is_ipv6() && e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {}
                Err(e) => stdio::eprint(&format!("bind [{ip}]:{}: {}\n", fwd.port, strerror(&e))),
            }
        }
        if bound == 0 {
            failed = true;
            stdio::eprint(&format!("cannot listen to port: {}\n", fwd.port));
        }
    }
    if failed {
        if opts.exit_on_failure {
            return Err(Error::Connection(
                "Could not request local forwarding (ExitOnForwardFailure=yes).".into(),
            ));
        }
        stdio::eprint("Could not request local forwarding.\n");
    }
    Ok(listeners)
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    if addr.is_ipv6() {
        // [::] must not take 0.0.0.0's port too (ssh binds both, each for its own).
        nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::Ipv6V6Only, &true)
            .map_err(std::io::Error::from)?;
    }
    socket.bind(addr)?;
    socket.listen(128)
}

/// The C library's words for an error, as ssh prints them.
fn strerror(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => nix::errno::Errno::from_raw(n).desc().to_string(),
        None => e.to_string(),
    }
}

/// The forwards being served: their listeners and connections end when it
/// is dropped.
pub struct Forwarding {
    _tasks: JoinSet<()>,
}

/// Serves the listeners on `conn` until the returned [`Forwarding`] is dropped.
pub fn serve(conn: &Arc<Connection>, listeners: Vec<(TcpListener, LocalForward)>) -> Forwarding {
    let mut tasks = JoinSet::new();
    let count = Arc::new(AtomicU64::new(0));
    for (listener, fwd) in listeners {
        let conn = conn.clone();
        let count = count.clone();
        tasks.spawn(async move {
            // A connection's task ends with the listener's (aborted with it).
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, from)) => {
                            let n = count.fetch_add(1, Ordering::Relaxed) + 1;
                            connections.spawn(copy_both_ways(conn.clone(), stream, from, fwd.clone(), n));
                        }
                        Err(e) => {
                            debug!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    },
                    Some(_) = connections.join_next() => {}
                }
            }
        });
    }
    Forwarding { _tasks: tasks }
}

/// One forwarded connection: a `direct-tcpip` channel, bytes both ways.
async fn copy_both_ways(
    conn: Arc<Connection>,
    mut stream: TcpStream,
    from: SocketAddr,
    fwd: LocalForward,
    n: u64,
) {
    let _ = stream.set_nodelay(true);
    let channel = match open_channel(&conn, &fwd.host, fwd.host_port, from).await {
        Ok(channel) => channel,
        Err(why) => {
            // OpenSSH's words: `channel 3: open failed: administratively prohibited: ...`.
            stdio::eprint(&format!("channel {n}: open failed: {why}\n"));
            return;
        }
    };
    let mut remote = channel.into_stream();
    match tokio::io::copy_bidirectional_with_sizes(
        &mut stream,
        &mut remote,
        COPY_BUFFER,
        COPY_BUFFER,
    )
    .await
    {
        Ok((up, down)) => debug!(n, up, down, "forwarded connection ended"),
        Err(e) => debug!(n, error = %e, "forwarded connection ended with an error"),
    }
}

/// The signals that end `-N` (as ssh's client loop catches them).
pub const HOLD_SIGNALS: &[i32] = &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// A `direct-tcpip` channel to `host:port`; a refusal is the server's
/// reason in OpenSSH's words (`administratively prohibited: ...`). Two
/// refusals at once may swap their reasons: they come without the request
/// they answer.
async fn open_channel(
    conn: &Connection,
    host: &str,
    port: u16,
    from: SocketAddr,
) -> Result<Channel<Msg>, String> {
    let opened = conn
        .handle
        .channel_open_direct_tcpip(host, port.into(), from.ip().to_string(), from.port().into())
        .await;
    match opened {
        Ok(channel) => Ok(channel),
        Err(russh::Error::ChannelOpenFailure(_)) => Err(conn
            .open_failures
            .lock()
            .expect("not poisoned: no panics while held")
            .pop_front()
            .unwrap_or_else(|| "refused".into())),
        Err(e) => Err(e.to_string()),
    }
}

/// `-N`: keeps the connection and its forwards until a signal, or until the
/// connection is gone (255). OpenSSH 9.2's ssh, measured: SIGTERM ends it
/// with 0, SIGINT, SIGHUP and SIGQUIT with 255, without a word.
pub async fn hold(conn: &Connection, target: &Target, stops: &mut Stops) -> Result<i32, Error> {
    loop {
        tokio::select! {
            signo = stops.next() => {
                debug!(signo, "-N: ending on a signal");
                conn.close().await;
                return Ok(if signo == libc::SIGTERM {
                    crate::exit_code::SUCCESS
                } else {
                    crate::exit_code::CONNECTION_FAILED
                });
            }
            () = tokio::time::sleep(CONNECTION_CHECK) => {
                if conn.is_closed() {
                    return Err(Error::Connection(format!("connection to {target} closed")));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fwd(bind: Option<&str>, port: u16, host: &str, host_port: u16) -> LocalForward {
        LocalForward {
            bind: bind.map(str::to_string),
            port,
            host: host.into(),
            host_port,
        }
    }

    #[test]
    fn specs_as_openssh_writes_them() {
        assert_eq!(
            parse_spec("6006:localhost:6006"),
            Ok(fwd(None, 6006, "localhost", 6006))
        );
        assert_eq!(
            parse_spec("0.0.0.0:8080:node2:80"),
            Ok(fwd(Some("0.0.0.0"), 8080, "node2", 80))
        );
        assert_eq!(parse_spec("*:1:h:2"), Ok(fwd(Some("*"), 1, "h", 2)));
        assert_eq!(parse_spec(":1:h:2"), Ok(fwd(Some(""), 1, "h", 2)));
        assert_eq!(
            parse_spec("[::1]:8080:[fd00::2]:80"),
            Ok(fwd(Some("::1"), 8080, "fd00::2", 80))
        );
        assert_eq!(
            parse_option("localhost:6006 127.0.0.1:6006"),
            Ok(fwd(Some("localhost"), 6006, "127.0.0.1", 6006))
        );
        assert_eq!(parse_option("6006  h:1"), Ok(fwd(None, 6006, "h", 1)));
    }

    #[test]
    fn bad_specs_say_what_to_give() {
        for spec in [
            "6006",
            "6006:localhost",
            "a:b:c:d:e",
            "0:h:1",
            "1:h:70000",
            "1::2",
            "[::1:1:h:2",
        ] {
            let e = parse_spec(spec).unwrap_err();
            assert!(e.starts_with(&format!("bad -L {spec:?}")), "{e}");
        }
        assert!(
            parse_spec("/tmp/s:h:1:2:3")
                .unwrap_err()
                .contains("Unix socket")
        );
        let e = parse_option("6006:localhost:6006").unwrap_err();
        assert!(e.contains("\"[bind_address:]port host:hostport\""), "{e}");
    }

    #[tokio::test]
    async fn listen_addresses_follow_gateway_ports() {
        let lo: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        let any: Vec<IpAddr> = vec!["0.0.0.0".parse().unwrap(), "::".parse().unwrap()];
        let f = |bind: Option<&str>| fwd(bind, 1, "h", 1);
        assert_eq!(listen_addresses(&f(None), false).await.unwrap(), lo);
        assert_eq!(
            listen_addresses(&f(Some("localhost")), true).await.unwrap(),
            lo
        );
        assert_eq!(listen_addresses(&f(None), true).await.unwrap(), any);
        assert_eq!(listen_addresses(&f(Some("*")), false).await.unwrap(), any);
        assert_eq!(
            listen_addresses(&f(Some("127.0.0.9")), false)
                .await
                .unwrap(),
            vec!["127.0.0.9".parse::<IpAddr>().unwrap()]
        );
    }
}
