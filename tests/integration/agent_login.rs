//! The agent against clients that do not log in: the login deadline, a
//! flood from one address, penalties, attempts per connection, and the
//! trace rejected keys and scans leave at `-v`. Raw TCP clients play the
//! attackers; OpenSSH's `ssh` plays the slow and the wrong-key clients.

use std::ffi::OsStr;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// `SSH_MSG_IGNORE` with an empty string, as a cleartext packet (16 bytes).
const IGNORE: [u8; 16] = [0, 0, 0, 12, 6, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// An agent whose stderr goes to a file, with extra arguments, environment
/// and optionally an open-file limit (soft and hard).
pub(crate) fn start_agent(
    host: &str,
    args: &[&str],
    env: &[(&str, &OsStr)],
    nofile: Option<u64>,
    log: &Path,
) -> Agent {
    let mut c = cmd(&multinode());
    c.arg("agent")
        .arg("--listen")
        .arg(format!("{host}:29922"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    if let Some(limit) = nofile {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs here.
        unsafe {
            c.pre_exec(move || {
                nix::sys::resource::setrlimit(
                    nix::sys::resource::Resource::RLIMIT_NOFILE,
                    limit,
                    limit,
                )
                .map_err(std::io::Error::from)
            });
        }
    }
    let agent = Agent {
        child: c.spawn().expect("start the agent"),
        host: host.to_string(),
        port: 29922,
    };
    wait_for_port(&agent.addr(), Duration::from_secs(10));
    agent
}

fn log_text(log: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned()
}

/// A TCP connection from the loopback address `from`.
fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let local: std::net::SocketAddrV4 = format!("{from}:0").parse().unwrap();
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::from(local),
    )?;
    let SocketAddr::V4(to) = to else {
        panic!("IPv4 only")
    };
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to))?;
    Ok(TcpStream::from(fd))
}

/// Keeps a connection busy, sending `packet` every `every`, and returns how
/// long after `start` the agent closed it (None: still open after `limit`).
fn held_until_closed(
    mut stream: TcpStream,
    start: Instant,
    packet: &[u8],
    every: Duration,
    limit: Duration,
) -> Option<Duration> {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut next_send = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        if Instant::now() >= next_send {
            if stream.write_all(packet).is_err() {
                return Some(start.elapsed());
            }
            next_send += every;
        }
        match stream.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// The client's `SSH_MSG_KEXINIT`, offering what the agent supports, as a
/// cleartext packet: the key exchange starts, and is never finished.
fn kexinit() -> Vec<u8> {
    let mut payload = vec![20u8];
    payload.extend_from_slice(&[7u8; 16]);
    for list in [
        "curve25519-sha256",
        "ssh-ed25519",
        "chacha20-poly1305@openssh.com",
        "chacha20-poly1305@openssh.com",
        "hmac-sha2-256",
        "hmac-sha2-256",
        "none",
        "none",
        "",
        "",
    ] {
        payload.extend_from_slice(&(list.len() as u32).to_be_bytes());
        payload.extend_from_slice(list.as_bytes());
    }
    payload.extend_from_slice(&[0, 0, 0, 0, 0]);
    let mut padding = 8 - (4 + 1 + payload.len()) % 8;
    if padding < 4 {
        padding += 8;
    }
    let mut packet = ((1 + payload.len() + padding) as u32)
        .to_be_bytes()
        .to_vec();
    packet.push(padding as u8);
    packet.extend_from_slice(&payload);
    packet.extend(std::iter::repeat_n(0u8, padding));
    packet
}

#[test]
fn an_ignore_packet_holder_is_closed_at_the_login_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = start_agent(
        &fresh_loopback(),
        &["--login-timeout", "2", "-v"],
        &[],
        None,
        &log,
    );
    let start = Instant::now();
    let mut stream = TcpStream::connect(agent.addr()).unwrap();
    stream.write_all(b"SSH-2.0-x\r\n").unwrap();
    // One ignore packet a second: never idle, never a key exchange.
    let closed = held_until_closed(
        stream,
        start,
        &IGNORE,
        Duration::from_secs(1),
        Duration::from_secs(20),
    );
    let closed =
        closed.expect("the agent closes a connection that does not log in within --login-timeout");
    assert!(
        closed >= Duration::from_millis(1900) && closed < Duration::from_secs(10),
        "closed after {closed:?}, expected at the 2 s deadline"
    );
    assert!(
        eventually(Duration::from_secs(5), || log_text(&log)
            .contains("not logged in within 2 s")),
        "{}",
        log_text(&log)
    );
}

#[test]
fn a_stalled_key_exchange_is_closed_at_the_login_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = start_agent(
        &fresh_loopback(),
        &["--login-timeout", "2"],
        &[],
        None,
        &log,
    );
    let start = Instant::now();
    let mut stream = TcpStream::connect(agent.addr()).unwrap();
    stream.write_all(b"SSH-2.0-x\r\n").unwrap();
    stream.write_all(&kexinit()).unwrap();
    // The agent answers with its own KEXINIT and waits for our key share, which never comes.
    let closed = held_until_closed(
        stream,
        start,
        &[],
        Duration::from_secs(3600),
        Duration::from_secs(20),
    );
    let closed = closed.expect("a stalled key exchange is closed at the login deadline");
    assert!(
        closed >= Duration::from_millis(1900) && closed < Duration::from_secs(10),
        "closed after {closed:?}, expected at the 2 s deadline"
    );
}

/// A job key encrypted with a passphrase that an askpass program gives
/// after `delay`: OpenSSH offers the key at once, and signs with it only then.
fn slow_key(dir: &Path, delay: &str) -> (PathBuf, PathBuf, PathBuf) {
    let key = dir.join("id_job");
    let keygen = cmd(&multinode())
        .args(["keygen", "--known-hosts", "-o"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(keygen.status.success(), "{}", stderr(&keygen));
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, &keygen.stdout).unwrap();
    let st = Command::new("ssh-keygen")
        .args(["-q", "-p", "-P", "", "-N", "slow-passphrase", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen (Debian package openssh-client)");
    assert!(st.success());
    let askpass = dir.join("askpass");
    std::fs::write(
        &askpass,
        format!("#!/bin/sh\nsleep {delay}\necho slow-passphrase\n"),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&askpass).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&askpass, perms).unwrap();
    (key, known_hosts, askpass)
}

#[test]
fn a_client_that_logs_in_after_the_deadline_gets_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = start_agent(
        &fresh_loopback(),
        &["--login-timeout", "2", "-v"],
        &[],
        None,
        &log,
    );
    let (key, known_hosts, askpass) = slow_key(dir.path(), "4");
    let marker = dir.path().join("ran");
    let mut ssh = Command::new("ssh")
        .arg("-i")
        .arg(&key)
        .args([
            "-p",
            "29922",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=yes",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args([&agent.host, "touch"])
        .arg(&marker)
        .env("SSH_ASKPASS", &askpass)
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("DISPLAY", ":0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("ssh (Debian package openssh-client)");
    let start = Instant::now();
    let ended = eventually(Duration::from_secs(20), || {
        matches!(ssh.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(ssh.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let out = ssh.wait_with_output().unwrap();
    assert!(ended, "ssh hangs after logging in past the deadline");
    assert_eq!(out.status.code(), Some(255), "{}", stderr(&out));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert!(
        !marker.exists(),
        "the command must not run after the deadline"
    );
    // Closed with a reason the client shows, not a channel that goes nowhere.
    assert!(
        stderr(&out).contains("not logged in in time"),
        "{}",
        stderr(&out)
    );
    assert!(
        log_text(&log).contains("not logged in within 2 s"),
        "{}",
        log_text(&log)
    );
}

/// Raises this process's open-file limit to hold `n` more sockets.
fn room_for_sockets(n: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let want = (n + 1024).max(soft);
    if soft < want {
        setrlimit(Resource::RLIMIT_NOFILE, want, want.max(hard)).expect(
            "raise the open-file limit for the flood (needs root when over the hard limit)",
        );
    }
}

#[test]
fn a_flood_of_stalled_connections_from_one_address_leaves_others_served() {
    const FLOOD: usize = 2000;
    room_for_sockets(FLOOD as u64);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    // 1,024 descriptors, as many machines give by default: without limits
    // per source, the flood takes them all.
    let agent = start_agent(&fresh_loopback(), &[], &[], Some(1024), &log);
    let attacker = fresh_loopback();
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        match connect_from(&attacker, agent.addr()) {
            Ok(mut s) => {
                let _ = s.write_all(b"SSH-2.0-x\r\n");
                s.set_nonblocking(true).unwrap();
                flood.push(s);
            }
            Err(e) => panic!("connecting the flood from {attacker}: {e}"),
        }
    }
    // Wait until the agent has taken each flood connection: served (its
    // banner arrived) or closed at once.
    let mut served = vec![false; FLOOD];
    let mut closed = vec![false; FLOOD];
    eventually(Duration::from_secs(30), || {
        let mut buf = [0u8; 4096];
        for (i, s) in flood.iter_mut().enumerate() {
            if closed[i] {
                continue;
            }
            match s.read(&mut buf) {
                Ok(0) => closed[i] = true,
                Ok(_) => served[i] = true,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => closed[i] = true,
            }
        }
        (0..FLOOD).all(|i| served[i] || closed[i])
    });
    let held = (0..FLOOD).filter(|&i| served[i] && !closed[i]).count();
    // A legitimate client from another address (127.0.0.1) logs in, runs, and is out within 1 s.
    let start = Instant::now();
    let out = cmd(&mn_ssh())
        .args(["-o", "ConnectTimeout=10", &agent.host, "echo served"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "served\n");
    assert!(
        took < Duration::from_secs(1),
        "mn-ssh took {took:?} against a flood of {FLOOD} from {attacker} ({held} held)"
    );
    assert!(
        held <= 64,
        "{held} flood connections held (per-source limit 64)"
    );
    assert!(
        log_text(&log).contains(&format!("refusing connections from {attacker}")),
        "{}",
        log_text(&log)
    );
    drop(flood);
}

#[test]
fn a_source_that_keeps_failing_is_refused_for_a_while_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = start_agent(
        &fresh_loopback(),
        &["--login-timeout", "1"],
        &[],
        None,
        &log,
    );
    let bad = fresh_loopback();
    // Two connections that run out of time: 2 x 10 s of penalty, past the 15 s threshold.
    let stalled: Vec<_> = (0..2)
        .map(|_| connect_from(&bad, agent.addr()).unwrap())
        .collect();
    let start = Instant::now();
    for s in stalled {
        assert!(
            held_until_closed(
                s,
                start,
                &[],
                Duration::from_secs(3600),
                Duration::from_secs(15)
            )
            .is_some()
        );
    }
    // The penalized source is closed before the agent sends its banner...
    let banner = |from: &str| {
        let mut s = connect_from(from, agent.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 8];
        let n = s.read(&mut buf).unwrap_or(0);
        buf[..n].starts_with(b"SSH-2.0")
    };
    assert!(
        eventually(Duration::from_secs(5), || !banner(&bad)),
        "a penalized source still gets the SSH banner"
    );
    // ...while another source is served.
    assert!(banner(&fresh_loopback()));
    assert!(
        log_text(&log).contains(&format!("refusing connections from {bad}")),
        "{}",
        log_text(&log)
    );
}

/// `n` throwaway Ed25519 keys, none of them the job's.
fn wrong_keys(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let key = dir.join(format!("wrong{i}"));
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(&key)
                .status()
                .expect("ssh-keygen");
            assert!(st.success());
            key
        })
        .collect()
}

#[test]
fn wrong_keys_are_logged_at_v_and_limited_per_connection() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = start_agent(&fresh_loopback(), &["-v"], &[], None, &log);
    let keys = wrong_keys(dir.path(), 8);
    let mut ssh = Command::new("ssh");
    ssh.args([
        "-p",
        "29922",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
    ])
    .args([
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
    ]);
    for key in &keys {
        ssh.arg("-i").arg(key);
    }
    let out = ssh
        .args([&agent.host, "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255));
    assert!(
        stderr(&out).contains("Too many authentication"),
        "6 attempts per connection: {}",
        stderr(&out)
    );
    let text = log_text(&log);
    let rejected = text
        .lines()
        .filter(|l| l.contains("rejected a key") && l.contains("SHA256:"))
        .count();
    // Six rejected requests: OpenSSH's first "none" probe, then five keys.
    assert_eq!(rejected, 5, "{text}");
    // A port scan (connect, close) leaves a line too.
    drop(TcpStream::connect(agent.addr()).unwrap());
    assert!(
        eventually(Duration::from_secs(5), || log_text(&log)
            .contains("connection closed before logging in")),
        "{}",
        log_text(&log)
    );
}

/// A russh client that accepts any host key: a raw SSH peer for the tests.
struct AnyHost;

impl russh::client::Handler for AnyHost {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        _key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// Issue 32, point 10: a connection closed at its login deadline (here one
/// that stopped after two `none` requests) panicked a task of the agent,
/// which polled russh's ended session again ("called after complete").
#[test]
fn none_requests_then_silence_are_refused_and_closed_at_the_deadline_without_a_panic() {
    use multinode::keys::{JobKeys, Secret};
    use russh::client::AuthResult;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = start_agent(
        &fresh_loopback(),
        &["--login-timeout", "2", "-v"],
        &[],
        None,
        &log,
    );
    let keys = JobKeys::derive(&Secret::new(SECRET.as_bytes().to_vec(), "test").unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let start = Instant::now();
    rt.block_on(async {
        let config = std::sync::Arc::new(russh::client::Config::default());
        let mut handle = russh::client::connect(config.clone(), agent.addr(), AnyHost)
            .await
            .unwrap();
        for i in 0..3 {
            let none = tokio::time::timeout(Duration::from_secs(5), handle.authenticate_none("u"))
                .await
                .unwrap_or_else(|_| panic!("`none` number {} was not answered", i + 1))
                .unwrap();
            assert!(matches!(none, AuthResult::Failure { .. }), "{none:?}");
        }
        let key = russh::keys::PrivateKeyWithHashAlg::new(std::sync::Arc::new(keys.client), None);
        let login = tokio::time::timeout(
            Duration::from_secs(5),
            handle.authenticate_publickey("u", key),
        )
        .await
        .expect("the job's key is answered after `none` requests")
        .unwrap();
        assert!(login.success(), "{login:?}");
        // Another connection stops after two `none` requests: closed at the
        // deadline, with the reason.
        let mut idle = russh::client::connect(config.clone(), agent.addr(), AnyHost)
            .await
            .unwrap();
        for _ in 0..2 {
            idle.authenticate_none("u").await.unwrap();
        }
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            while !idle.is_closed() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(closed.is_ok(), "not closed at the 2 s deadline");
    });
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(5), || log_text(&log)
            .contains("not logged in within 2 s")),
        "{}",
        log_text(&log)
    );
    // The panic came just after the deadline's log line.
    std::thread::sleep(Duration::from_millis(1500));
    let text = log_text(&log);
    assert!(!text.contains("panicked"), "{text}");
}
