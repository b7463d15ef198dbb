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

/// An agent on a fresh loopback address with `args`, its log in a
/// temporary directory (kept as long as the first value is).
fn agent_with_log(args: &[&str]) -> (tempfile::TempDir, PathBuf, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = start_agent(&fresh_loopback(), args, &[], None, &log);
    (dir, log, agent)
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
    let (_dir, log, agent) = agent_with_log(&["--login-timeout", "2", "-v"]);
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
    let (_dir, _log, agent) = agent_with_log(&["--login-timeout", "2"]);
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

/// OpenSSH's `ssh` into `agent` running `remote`, with the job's key
/// encrypted with a passphrase that an askpass program gives after `delay`
/// seconds: ssh offers the key at once, and signs with it only then.
/// `DIR/asked` appears when the passphrase is asked for. ssh runs in its
/// own process group, its stderr piped.
fn slow_ssh(dir: &Path, agent: &Agent, delay: &str, remote: &[&OsStr]) -> std::process::Child {
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
        format!(
            "#!/bin/sh\ntouch '{}'\nsleep {delay}\necho slow-passphrase\n",
            dir.join("asked").display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&askpass).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&askpass, perms).unwrap();
    Command::new("ssh")
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
        .arg(&agent.host)
        .args(remote)
        .env("SSH_ASKPASS", &askpass)
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("DISPLAY", ":0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("ssh (Debian package openssh-client)")
}

/// Waits up to `limit` for `ssh` to end, else ends its group: whether it
/// ended by itself, and its output.
fn ssh_ended(mut ssh: std::process::Child, limit: Duration) -> (bool, std::process::Output) {
    let ended = eventually(limit, || matches!(ssh.try_wait(), Ok(Some(_))));
    if !ended {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(ssh.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    (ended, ssh.wait_with_output().unwrap())
}

#[test]
fn a_client_that_logs_in_after_the_deadline_gets_a_clean_close() {
    let (dir, log, agent) = agent_with_log(&["--login-timeout", "2", "-v"]);
    let marker = dir.path().join("ran");
    let ssh = slow_ssh(
        dir.path(),
        &agent,
        "4",
        &["touch".as_ref(), marker.as_os_str()],
    );
    let start = Instant::now();
    let (ended, out) = ssh_ended(ssh, Duration::from_secs(20));
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

/// Connections that send the SSH banner and then nothing, as an attacker
/// holds them, and what the agent did with each: served (its banner came)
/// or closed.
struct Stalled {
    socks: Vec<TcpStream>,
    served: Vec<bool>,
    closed: Vec<bool>,
}

impl Stalled {
    fn open(from: &str, to: SocketAddr, n: usize) -> Stalled {
        let socks: Vec<_> = (0..n)
            .map(|_| {
                let mut s = connect_from(from, to)
                    .unwrap_or_else(|e| panic!("connecting from {from} to {to}: {e}"));
                let _ = s.write_all(b"SSH-2.0-x\r\n");
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        Stalled {
            served: vec![false; socks.len()],
            closed: vec![false; socks.len()],
            socks,
        }
    }

    /// Reads what the agent sent each socket.
    fn poll(&mut self) {
        let mut buf = [0u8; 4096];
        for (i, s) in self.socks.iter_mut().enumerate() {
            while !self.closed[i] {
                match s.read(&mut buf) {
                    Ok(0) => self.closed[i] = true,
                    Ok(_) => self.served[i] = true,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => self.closed[i] = true,
                }
            }
        }
    }

    /// Waits until the agent has served or closed every socket.
    fn settle(&mut self, limit: Duration) {
        let settled = eventually(limit, || {
            self.poll();
            (0..self.socks.len()).all(|i| self.served[i] || self.closed[i])
        });
        assert!(settled, "the agent took none of some connections");
    }

    /// Connections the agent served and still holds open.
    fn held(&mut self) -> usize {
        self.poll();
        (0..self.socks.len())
            .filter(|&i| self.served[i] && !self.closed[i])
            .count()
    }

    fn closed(&mut self) -> usize {
        self.poll();
        self.closed.iter().filter(|&&c| c).count()
    }
}

/// The job's client, `mn-ssh HOST echo served` from 127.0.0.1 (the source
/// the kernel picks for a loopback destination), logs in and runs within
/// `limit` while `during` goes on.
fn job_client_is_served(agent: &Agent, during: &str, limit: Duration) {
    let start = Instant::now();
    let out = cmd(&mn_ssh())
        .args(["-o", "ConnectTimeout=10", &agent.host, "echo served"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed();
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), "served\n"),
        "{during}: {}",
        stderr(&out)
    );
    assert!(took < limit, "{during}: mn-ssh took {took:?}");
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
    let mut flood = Stalled::open(&attacker, agent.addr(), FLOOD);
    flood.settle(Duration::from_secs(30));
    // A legitimate client from another address (127.0.0.1) logs in, runs, and is out within 1 s.
    job_client_is_served(
        &agent,
        &format!("a flood of {FLOOD} from {attacker}"),
        Duration::from_secs(1),
    );
    // The oldest of the flood are closed as newer ones come: 64 are left.
    assert!(
        eventually(Duration::from_secs(5), || flood.held() <= 64),
        "{} flood connections held (per-source limit 64)",
        flood.held()
    );
    assert!(
        log_text(&log).contains(&format!(
            "64 connections from {attacker} have not logged in: closing the oldest"
        )),
        "{}",
        log_text(&log)
    );
}

/// Issue 32, point 1: 50 connections from the job client's own address
/// that never logged in, cut at the deadline, made the agent refuse that
/// address for 8 minutes, the job's `mn-ssh` with it; 64 held open refused
/// it at once. Now the address is penalized with a short deadline, and the
/// oldest connection not logged in makes room for the client.
#[test]
fn connections_that_never_log_in_from_the_clients_own_address_do_not_keep_it_out() {
    let (_dir, log, agent) = agent_with_log(&["--login-timeout", "2", "-v"]);
    let own = "127.0.0.1";
    let mut cut = Stalled::open(own, agent.addr(), 50);
    assert!(
        eventually(Duration::from_secs(15), || cut.closed() == 50),
        "cut at the 2 s deadline: {} of 50",
        cut.closed()
    );
    job_client_is_served(
        &agent,
        "after 50 cut at the deadline",
        Duration::from_secs(3),
    );
    assert!(
        eventually(Duration::from_secs(5), || log_text(&log)
            .contains(&format!("{own} penalized for"))),
        "{}",
        log_text(&log)
    );
    // 64 more held open from the same address, its limit.
    let mut held = Stalled::open(own, agent.addr(), 64);
    held.settle(Duration::from_secs(10));
    job_client_is_served(&agent, "64 held from its address", Duration::from_secs(3));
    // It came from the same address: the oldest held one made room.
    assert!(
        log_text(&log).contains("from this address (64, its limit)"),
        "{}",
        log_text(&log)
    );
}

/// Issue 32, point 2: 4 addresses x 64 connections that never log in took
/// every one of the 256 slots, and the job's client was refused at once;
/// closing them just before the deadline cost nothing.
#[test]
fn four_addresses_holding_every_slot_do_not_keep_the_job_client_out() {
    let (_dir, log, agent) = agent_with_log(&["--login-timeout", "4", "-v"]);
    let start = Instant::now();
    let attackers = fresh_loopbacks(4);
    let mut held: Vec<_> = attackers
        .iter()
        .map(|from| Stalled::open(from, agent.addr(), 64))
        .collect();
    for h in &mut held {
        h.settle(Duration::from_secs(10));
    }
    job_client_is_served(&agent, "256 held by 4 addresses", Duration::from_secs(3));
    assert!(
        log_text(&log).contains("too many connections not logged in (256, the limit"),
        "{}",
        log_text(&log)
    );
    // Closed just before the 4 s deadline: each costs its source nearly
    // the deadline's penalty.
    let before = Duration::from_millis(3400);
    assert!(
        start.elapsed() < before,
        "the set-up took {:?}",
        start.elapsed()
    );
    std::thread::sleep(before - start.elapsed());
    drop(held);
    for from in &attackers {
        assert!(
            eventually(Duration::from_secs(5), || log_text(&log)
                .contains(&format!("{from} penalized for"))),
            "{from} closed its connections before the deadline at no cost: {}",
            log_text(&log)
        );
    }
}

/// A client closed to make room is told why: OpenSSH's `ssh`, waiting 3 s
/// for its key's passphrase, when 64 connections from its address come (it
/// reads the reason once the passphrase is in).
#[test]
fn a_client_closed_to_make_room_is_told_why() {
    let (dir, log, agent) = agent_with_log(&["-v"]);
    let ssh = slow_ssh(dir.path(), &agent, "3", &["true".as_ref()]);
    let asked = dir.path().join("asked");
    assert!(
        eventually(Duration::from_secs(10), || asked.exists()),
        "ssh never asked for the passphrase"
    );
    let mut flood = Stalled::open("127.0.0.1", agent.addr(), 64);
    flood.settle(Duration::from_secs(10));
    let (ended, out) = ssh_ended(ssh, Duration::from_secs(10));
    assert!(ended, "ssh was not closed to make room: {}", log_text(&log));
    assert!(
        stderr(&out)
            .contains("too many connections not logged in from this address (64, its limit)"),
        "{}",
        stderr(&out)
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
    let (dir, log, agent) = agent_with_log(&["-v"]);
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
    let (_dir, log, agent) = agent_with_log(&["--login-timeout", "2", "-v"]);
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

/// paramiko, a real SSH client of Python's, logs in with the job's key and
/// runs a command. Each of its authentication calls sends a service request
/// of its own; russh 0.65 answers only the first (its server ignores one in
/// the state after, `server/encrypted.rs`), so a second call on one
/// transport (`auth_none`, then the key) waits for the login deadline and is
/// then closed, as docs/security.md says: bounded, and other clients are
/// served meanwhile. This test fails when that changes, either way.
#[test]
fn paramiko_logs_in_and_a_second_service_request_waits_for_the_login_deadline() {
    let (dir, log, agent) = agent_with_log(&["--login-timeout", "3", "-v"]);
    let (key, _) = job_key_files(dir.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paramiko_login.py");
    let login = |mode: &str| {
        let start = Instant::now();
        let out = Command::new("python3")
            .arg(&script)
            .arg(&agent.host)
            .arg(agent.port.to_string())
            .arg(&key)
            .arg(mode)
            .stdin(Stdio::null())
            .output()
            .expect("python3 runs (paramiko: tests/install-deps.sh)");
        assert!(out.status.success(), "{}", stderr(&out));
        (stdout(&out), start.elapsed())
    };
    let (one, took) = login("one");
    assert_eq!(one, "ran: served\n");
    assert!(took < Duration::from_secs(3), "{took:?}");

    let (two, took) = std::thread::scope(|s| {
        let two = s.spawn(|| login("two"));
        // Meanwhile the agent serves the job's own client at once.
        std::thread::sleep(Duration::from_millis(500));
        let start = Instant::now();
        let out = cmd(&mn_ssh())
            .arg(&agent.host)
            .arg("echo served")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(stdout(&out), "served\n", "{}", stderr(&out));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        two.join().unwrap()
    });
    assert!(two.starts_with("closed after "), "{two}");
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(10),
        "closed after {took:?}, expected at the 3 s deadline"
    );
    assert!(
        eventually(Duration::from_secs(5), || log_text(&log)
            .contains("not logged in within 3 s")),
        "{}",
        log_text(&log)
    );
}
