//! Local port forwarding through the agent (issue 31): `curl` through
//! `mn-ssh -L` and OpenSSH's `ssh -L` to `python3 -m http.server` on the
//! node's loopback, destinations the agent refuses, a port in use, `-N`
//! and SIGTERM, a killed client, and what stays refused (`-R`, `-A`, `-X`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::*;

/// `python3 -m http.server` on `ADDR:8000` (a loopback address of its
/// own), serving a directory that holds `hello.txt`.
struct Http {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Http {
    fn start(body: &str) -> Http {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hello.txt"), body).unwrap();
        let host = fresh_loopback();
        let child = Command::new("python3")
            .args(["-m", "http.server", "--bind", &host, "8000", "--directory"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let addr = format!("{host}:8000");
        wait_for_port(&addr.parse().unwrap(), Duration::from_secs(10));
        Http {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl` of `url`: its exit code and body.
fn curl(url: &str) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", url])
        .output()
        .expect("curl");
    (out.status.code().unwrap_or(-1), stdout(&out))
}

/// A client started with stderr collected.
fn spawn(program: &str, args: &[String]) -> Child {
    let mut c = if program == "mn-ssh" {
        cmd(&mn_ssh())
    } else {
        Command::new(program)
    };
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `PROGRAM ARGS -N -L LISTEN:6006:TO AGENT`, once it listens; `LISTEN` is
/// a loopback address of its own.
fn forward_n(program: &str, mut args: Vec<String>, to: &str, agent: &Agent) -> (Child, String) {
    let listen = fresh_loopback();
    args.extend([
        "-N".into(),
        "-L".into(),
        format!("{listen}:6006:{to}"),
        agent.host.clone(),
    ]);
    let client = spawn(program, &args);
    wait_for_port(
        &format!("{listen}:6006").parse().unwrap(),
        Duration::from_secs(10),
    );
    (client, listen)
}

/// Both clients, as `(program, options before the host)`: `mn-ssh` with the
/// job's secret, OpenSSH's `ssh` with the job's derived key.
fn clients(agent: &Agent, dir: &Path) -> [(&'static str, Vec<String>); 2] {
    [("mn-ssh", Vec::new()), ("ssh", openssh_options(agent, dir))]
}

#[test]
fn curl_through_l_reaches_a_server_on_the_nodes_loopback_and_n_ends_on_sigterm() {
    let agent = Agent::start(&fresh_loopback());
    let http = Http::start("through the agent\n");
    let dir = tempfile::tempdir().unwrap();
    for (program, args) in clients(&agent, dir.path()) {
        let (mut client, listen) = forward_n(program, args, &http.addr, &agent);
        for _ in 0..3 {
            let (code, body) = curl(&format!("http://{listen}:6006/hello.txt"));
            assert_eq!(
                (code, body.as_str()),
                (0, "through the agent\n"),
                "{program}"
            );
        }
        signal(client.id(), nix::sys::signal::Signal::SIGTERM);
        let code = wait_exit(&mut client, Duration::from_secs(10));
        // OpenSSH's ssh -N ends on SIGTERM with 0, without a word.
        assert_eq!(code, Some(0), "{program}");
        assert_eq!(stderr_of(&mut client), "", "{program}");
        assert!(
            TcpStream::connect(format!("{listen}:6006")).is_err(),
            "{program}: the forward outlived its client"
        );
    }
}

#[test]
fn openssh_gets_the_window_sshd_gives_a_forwarded_channel() {
    // A larger one (the 1 GiB `mn-ssh` gets) makes OpenSSH's client read
    // the local port far ahead of the network: its buffers balloon and an
    // upload runs at 40% of its speed to sshd (docs/benchmarks.md).
    let agent = Agent::start(&fresh_loopback());
    let http = Http::start("windowed\n");
    let dir = tempfile::tempdir().unwrap();
    let mut args = openssh_options(&agent, dir.path());
    args.push("-vv".into());
    let (mut client, listen) = forward_n("ssh", args, &http.addr, &agent);
    let (code, body) = curl(&format!("http://{listen}:6006/hello.txt"));
    assert_eq!((code, body.as_str()), (0, "windowed\n"));
    signal(client.id(), nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut client, Duration::from_secs(10));
    let log = stderr_of(&mut client);
    // OpenSSH's `debug2: channel 2: open confirm rwindow 2097152 rmax 32768`.
    let windows: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("open confirm rwindow "))
        .map(|(_, rest)| rest.split(' ').next().unwrap_or(""))
        .collect();
    // One channel for each connection (`wait_for_port`'s included).
    assert!(!windows.is_empty(), "{log}");
    assert!(windows.iter().all(|w| *w == "2097152"), "{windows:?}");
}

#[test]
fn a_destination_outside_the_node_and_the_job_is_refused_with_what_is_allowed() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    for (program, args) in clients(&agent, dir.path()) {
        let (mut client, listen) = forward_n(program, args, "192.0.2.1:80", &agent);
        let (code, body) = curl(&format!("http://{listen}:6006/"));
        // curl: "Empty reply from server" (52) or a reset (56).
        assert!(matches!(code, 52 | 56), "{program}: curl {code} {body}");
        // On SIGINT, 255.
        signal(client.id(), nix::sys::signal::Signal::SIGINT);
        assert_eq!(
            wait_exit(&mut client, Duration::from_secs(10)),
            Some(255),
            "{program}"
        );
        let err = stderr_of(&mut client);
        let line = err
            .lines()
            .find(|l| l.contains("open failed"))
            .unwrap_or_else(|| panic!("{program}: no refusal in {err:?}"));
        assert!(line.starts_with("channel "), "{program}: {line}");
        assert!(
            line.contains(
                ": open failed: administratively prohibited: 192.0.2.1:80 is not forwarded to: \
                 an agent forwards only to its node's loopback (127.0.0.0/8, ::1, localhost) \
                 and to the job's nodes"
            ),
            "{program}: {line}"
        );
    }
}

#[test]
fn l_with_a_command_forwards_while_the_command_runs() {
    let agent = Agent::start(&fresh_loopback());
    let http = Http::start("while it runs\n");
    let listen = fresh_loopback();
    let mut client = cmd(&mn_ssh())
        .args([
            "-L",
            &format!("{listen}:6006:{}", http.addr),
            &agent.host,
            "read line; echo got $line; exit 3",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_port(
        &format!("{listen}:6006").parse().unwrap(),
        Duration::from_secs(10),
    );
    assert_eq!(
        curl(&format!("http://{listen}:6006/hello.txt")),
        (0, "while it runs\n".to_string())
    );
    client.stdin.take().unwrap().write_all(b"it\n").unwrap();
    let out = client.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out), "got it\n");
    assert!(TcpStream::connect(format!("{listen}:6006")).is_err());
}

#[test]
fn a_port_in_use_is_said_in_ssh_words_and_exit_on_forward_failure_ends_the_client() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let listen = fresh_loopback();
    let _taken = std::net::TcpListener::bind(format!("{listen}:6006")).unwrap();
    for (program, opts) in clients(&agent, dir.path()) {
        let run = |extra: &[&str]| {
            let mut args = opts.clone();
            args.extend(extra.iter().map(|a| a.to_string()));
            args.extend([
                "-L".into(),
                format!("{listen}:6006:127.0.0.1:9"),
                agent.host.clone(),
                "echo ran".into(),
            ]);
            let mut c = if program == "mn-ssh" {
                cmd(&mn_ssh())
            } else {
                Command::new(program)
            };
            c.args(&args).stdin(Stdio::null()).output().unwrap()
        };
        let out = run(&[]);
        assert_eq!(out.status.code(), Some(0), "{program}: {}", stderr(&out));
        assert_eq!(stdout(&out), "ran\n", "{program}");
        // OpenSSH ends its lines with \r\n.
        let err = stderr(&out).replace("\r\n", "\n");
        assert!(
            err.starts_with(&format!("bind [{listen}]:6006: Address already in use\n")),
            "{program}: {err}"
        );
        assert!(
            err.ends_with("Could not request local forwarding.\n"),
            "{program}: {err}"
        );
        let out = run(&["-o", "ExitOnForwardFailure=yes"]);
        assert_eq!(out.status.code(), Some(255), "{program}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{program}");
        assert!(
            stderr(&out).contains("Could not request local forwarding"),
            "{program}: {}",
            stderr(&out)
        );
    }
}

/// The agent's sockets (TCP and others) now.
fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

#[test]
fn a_killed_client_ends_its_forwarded_connections_on_the_node() {
    let agent = Agent::start(&fresh_loopback());
    // A server that says when its client's connection opens and closes.
    let host = fresh_loopback();
    let mut server = Command::new("python3")
        .args([
            "-uc",
            "import socket,sys\n\
             s=socket.create_server((sys.argv[1],8001))\n\
             print('listening',flush=True)\n\
             c,_=s.accept()\n\
             print('open',flush=True)\n\
             while c.recv(65536): pass\n\
             print('closed',flush=True)\n",
            &host,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(server.stdout.take().unwrap()).lines();
    assert_eq!(said.next().unwrap().unwrap(), "listening");
    let baseline = sockets_of(agent.pid());
    let (mut client, listen) = forward_n("mn-ssh", Vec::new(), &format!("{host}:8001"), &agent);
    let mut local = TcpStream::connect(format!("{listen}:6006")).unwrap();
    local.write_all(b"hello").unwrap();
    assert_eq!(said.next().unwrap().unwrap(), "open");
    client.kill().unwrap();
    client.wait().unwrap();
    // The agent sees its client gone, and the forwarded connection with it.
    assert_eq!(said.next().unwrap().unwrap(), "closed");
    assert!(
        eventually(Duration::from_secs(10), || sockets_of(agent.pid())
            <= baseline),
        "the agent holds {} sockets, {baseline} before",
        sockets_of(agent.pid())
    );
    assert_eq!(wait_exit(&mut server, Duration::from_secs(5)), Some(0));
}

#[test]
fn remote_agent_and_x11_forwarding_stay_refused_by_both_ends() {
    let agent = Agent::start(&fresh_loopback());
    for (flag, what) in [
        ("-R", "remote port forwarding"),
        ("-D", "dynamic port forwarding"),
        ("-A", "agent forwarding"),
        ("-X", "X11 forwarding"),
        ("-Y", "X11 forwarding"),
    ] {
        let mut args = vec![flag];
        if matches!(flag, "-R" | "-D") {
            args.push("8080:localhost:80");
        }
        args.extend([agent.host.as_str(), "true"]);
        let out = cmd(&mn_ssh()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{flag}: {err}");
        assert!(
            err.contains(&format!("{flag} asks for {what}")),
            "{flag}: {err}"
        );
    }
    // OpenSSH's ssh is told no by the agent, and says so.
    let dir = tempfile::tempdir().unwrap();
    let ssh = |extra: &[&str]| {
        Command::new("ssh")
            .args(openssh_options(&agent, dir.path()))
            .args(extra)
            .args([&agent.host, "echo ran"])
            .env("DISPLAY", ":47")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = ssh(&["-o", "ExitOnForwardFailure=yes", "-R", "0:localhost:9"]);
    assert_eq!(out.status.code(), Some(255), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("remote port forwarding failed"),
        "{}",
        stderr(&out)
    );
    let out = ssh(&["-X"]);
    assert_eq!(stdout(&out), "ran\n");
    assert!(
        stderr(&out).contains("X11 forwarding request failed"),
        "{}",
        stderr(&out)
    );
}

/// A server on `HOST:0` that accepts every connection and never reads
/// from it (each is held until the test process ends): a destination
/// whose kernel buffers fill. Its port.
fn never_reads(host: &str) -> u16 {
    let listener = std::net::TcpListener::bind(format!("{host}:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    port
}

/// An echo server on `HOST:0`, a thread a connection. Its port.
fn echo_server(host: &str) -> u16 {
    let listener = std::net::TcpListener::bind(format!("{host}:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A line sent to `addr` and read back: how long it took, or `None`
/// when nothing came back within `limit`.
fn echo_time(addr: &str, limit: Duration) -> Option<Duration> {
    let start = std::time::Instant::now();
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(limit)).unwrap();
    conn.write_all(b"ping\n").unwrap();
    let mut got = [0u8; 5];
    conn.read_exact(&mut got).ok()?;
    assert_eq!(&got, b"ping\n");
    Some(start.elapsed())
}

/// Pushes up to 10 MB into `addr` on a thread of its own, counting what
/// the socket took; the thread returns whether the connection was ended
/// under it (a write failed) and when.
fn push_10_mb(
    addr: String,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::thread::JoinHandle<Option<std::time::Instant>>,
) {
    let pushed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = pushed.clone();
    let pusher = std::thread::spawn(move || {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_write_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let block = vec![7u8; 64 * 1024];
        while count.load(std::sync::atomic::Ordering::Relaxed) < 10_000_000 {
            match conn.write(&block) {
                Ok(n) => count.fetch_add(n, std::sync::atomic::Ordering::Relaxed),
                Err(_) => return Some(std::time::Instant::now()),
            };
        }
        // All of it taken: held open, as a client waiting for an answer.
        let mut rest = Vec::new();
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let _ = conn.read_to_end(&mut rest);
        Some(std::time::Instant::now())
    });
    (pushed, pusher)
}

/// Waits until the pusher has pushed `at_least` bytes, or `limit` passed.
fn until_pushed(pushed: &std::sync::atomic::AtomicUsize, at_least: usize, limit: Duration) {
    eventually(limit, || {
        pushed.load(std::sync::atomic::Ordering::Relaxed) >= at_least
    });
}

/// Issue 44, point 4: a forward whose destination accepts and never reads
/// froze the whole SSH connection (the agent's read loop waited on that
/// channel's queue), so another forward of it, and a command's stdin,
/// waited for good. Now the stuck forward alone waits; past its stall
/// limit it is ended, and the rest of the connection goes on. OpenSSH's
/// `ssh` (the 2 MiB window): -L A to the sink, -L B to an echo server.
#[test]
fn a_destination_that_never_reads_freezes_no_other_forward() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let host = fresh_loopback();
    let (sink, echo) = (never_reads(&host), echo_server(&host));
    let listen = fresh_loopback();
    let mut args = openssh_options(&agent, dir.path());
    args.extend([
        "-N".into(),
        "-L".into(),
        format!("{listen}:6006:{host}:{sink}"),
        "-L".into(),
        format!("{listen}:6007:{host}:{echo}"),
        agent.host.clone(),
    ]);
    let mut ssh = spawn("ssh", &args);
    for port in [6006, 6007] {
        wait_for_port(
            &format!("{listen}:{port}").parse().unwrap(),
            Duration::from_secs(10),
        );
    }
    let b = format!("{listen}:6007");
    let quiet = echo_time(&b, Duration::from_secs(5)).expect("an echo through B");
    let (pushed, pusher) = push_10_mb(format!("{listen}:6006"));
    until_pushed(&pushed, 6_000_000, Duration::from_secs(5));
    let start = std::time::Instant::now();
    let during = echo_time(&b, Duration::from_secs(20));
    eprintln!(
        "ssh -L: an echo through B took {quiet:?} before, {during:?} while A's destination \
         did not read ({} bytes pushed into A)",
        pushed.load(std::sync::atomic::Ordering::Relaxed)
    );
    let during = during.expect("B's echo waited 20 s behind A's destination: the connection froze");
    assert!(during < Duration::from_secs(10), "{during:?}");
    // A was ended (its local socket closed under the pusher), not left hanging.
    let ended = pusher.join().unwrap().expect("A was ended");
    eprintln!(
        "ssh -L: A ended {:?} after the echo was sent",
        ended.saturating_duration_since(start)
    );
    assert!(alive(ssh.id()), "ssh ended: {}", stderr_of(&mut ssh));
    assert!(echo_time(&b, Duration::from_secs(5)).is_some());
    signal(ssh.id(), nix::sys::signal::Signal::SIGTERM);
    assert_eq!(wait_exit(&mut ssh, Duration::from_secs(10)), Some(0));
}

/// Issue 44, point 4, with `mn-ssh` (the 1 GiB window `multinode`'s
/// clients get): a command of the connection that holds the stuck forward
/// gets a line of its stdin and answers.
#[test]
fn a_destination_that_never_reads_freezes_no_command_of_its_connection() {
    let agent = Agent::start(&fresh_loopback());
    let host = fresh_loopback();
    let sink = never_reads(&host);
    // -L A to the sink and a command on the same connection that waits
    // for a line of its stdin.
    let listen = fresh_loopback();
    let mut client = cmd(&mn_ssh())
        .args([
            "-L",
            &format!("{listen}:6006:{host}:{sink}"),
            &agent.host,
            "read line; echo got $line",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_port(
        &format!("{listen}:6006").parse().unwrap(),
        Duration::from_secs(10),
    );
    let (pushed, pusher) = push_10_mb(format!("{listen}:6006"));
    until_pushed(&pushed, 6_000_000, Duration::from_secs(5));
    let (lines, got) = std::sync::mpsc::channel();
    let out = client.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let start = std::time::Instant::now();
    client.stdin.take().unwrap().write_all(b"it\n").unwrap();
    let answer = got.recv_timeout(Duration::from_secs(20));
    let took = start.elapsed();
    eprintln!(
        "mn-ssh -L + command: the command's answer to a line of stdin took {took:?} while A's \
         destination did not read ({} bytes pushed into A): {answer:?}",
        pushed.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert_eq!(
        answer.as_deref(),
        Ok("got it"),
        "the command's stdin waited behind A's destination: the connection froze"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(
        wait_exit(&mut client, Duration::from_secs(10)),
        Some(0),
        "{}",
        stderr_of(&mut client)
    );
    assert!(pusher.join().unwrap().is_some());
}

/// A russh client with the job's key that accepts the agent's host key
/// and keeps the reasons the agent gives for refused channels.
#[derive(Clone, Default)]
struct RawClient {
    refusals: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl russh::client::Handler for RawClient {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        _key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }

    async fn channel_open_failure(
        &mut self,
        _channel: russh::ChannelId,
        reason: russh::ChannelOpenFailure,
        description: &str,
        _language: &str,
        _session: &mut russh::client::Session,
    ) -> Result<(), Self::Error> {
        self.refusals
            .lock()
            .unwrap()
            .push(format!("{reason:?}: {description}"));
        Ok(())
    }
}

/// A logged-in connection of `client` to `agent`.
async fn raw_connect(agent: &Agent, client: RawClient) -> russh::client::Handle<RawClient> {
    use multinode::keys::{JobKeys, Secret};
    let keys = JobKeys::derive(&Secret::new(SECRET.as_bytes().to_vec(), "test").unwrap());
    let config = std::sync::Arc::new(russh::client::Config::default());
    let mut handle = russh::client::connect(config, agent.addr(), client)
        .await
        .unwrap();
    let key = russh::keys::PrivateKeyWithHashAlg::new(std::sync::Arc::new(keys.client), None);
    let login = handle.authenticate_publickey("u", key).await.unwrap();
    assert!(login.success(), "{login:?}");
    handle
}

/// The agent's TCP sockets now (its connections, listener and forwards;
/// not the Unix sockets a connection thread's runtime keeps).
fn tcp_sockets_of(pid: u32) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        inodes.extend(
            text.lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().nth(9).map(str::to_string)),
        );
    }
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .filter(|inode| inodes.contains(inode))
        .count()
}

/// Issue 44, point 2: 256 forwards a connection were allowed on any number
/// of connections: 8 x 256 used every descriptor of an agent whose limit
/// was 2048, and the job's own `mn-ssh` got no answer. Now the agent's
/// forwards in all are bounded (a quarter of its open-file limit), the
/// next is refused with the limit it met, and the memory the forwards
/// took goes back once they end. Each forward carries 32 KiB to a
/// destination that holds its connection and never reads.
#[test]
fn forwards_are_bounded_in_all_and_their_memory_goes_back() {
    const CONNECTIONS: usize = 9;
    const PER_CONNECTION: usize = 256;
    // The destination holds every connection: room for them in this process.
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        hard.min(65536),
        hard,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = crate::agent_login::start_agent(&fresh_loopback(), &[], &[], Some(2048), &log);
    let host = fresh_loopback();
    let listener = never_reads(&host);
    let pid = agent.pid();
    // A first round of the job's client: the runtime's threads and arenas.
    assert!(mn_ssh_true(&agent).1);
    let (fds_start, rss_start) = (fds_of(pid), rss_anon_kib(pid));
    let sockets_start = tcp_sockets_of(pid);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = RawClient::default();
    let (opened, conns) = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..CONNECTIONS {
            let handle = raw_connect(&agent, client.clone()).await;
            let host = host.clone();
            tasks.push(tokio::spawn(async move {
                let mut channels = Vec::new();
                for i in 0..PER_CONNECTION {
                    let opened = tokio::time::timeout(
                        Duration::from_secs(20),
                        handle.channel_open_direct_tcpip(
                            host.as_str(),
                            u32::from(listener),
                            "127.0.0.1",
                            40000 + i as u32,
                        ),
                    )
                    .await;
                    match opened {
                        Ok(Ok(channel)) => {
                            // One packet through it, to the destination's kernel buffers.
                            channel.data(&[7u8; 32 * 1024][..]).await.unwrap();
                            channels.push(channel);
                        }
                        Ok(Err(_)) => {}
                        Err(_) => break,
                    }
                }
                (channels, handle)
            }));
        }
        let mut opened = Vec::new();
        let mut conns = Vec::new();
        for task in tasks {
            let (channels, handle) = task.await.unwrap();
            opened.extend(channels);
            conns.push(handle);
        }
        (opened, conns)
    });
    let (fds_during, rss_during) = (fds_of(pid), rss_anon_kib(pid));
    let (took, served, err) = mn_ssh_true(&agent);
    let refusals = client.refusals.lock().unwrap().clone();
    let opened_count = opened.len();
    eprintln!(
        "{CONNECTIONS} connections x {PER_CONNECTION} forwards: {opened_count} opened, {} \
         refused; agent descriptors {fds_start} -> {fds_during}, RssAnon {rss_start} -> \
         {rss_during} KiB; the job's mn-ssh HOST true: {took:?}, {}",
        refusals.len(),
        if served {
            "served".to_string()
        } else {
            format!("failed: {err}")
        },
    );
    eprintln!("first refusal: {:?}", refusals.first());

    // The clients leave: the descriptors and the memory come back.
    rt.block_on(async {
        for conn in &conns {
            let _ = conn
                .disconnect(russh::Disconnect::ByApplication, "", "en")
                .await;
        }
        drop(opened);
        drop(conns);
    });
    // A connection thread started meanwhile keeps its runtime's few
    // descriptors (agent/shards.rs): the TCP sockets are counted.
    let back = eventually(Duration::from_secs(20), || {
        tcp_sockets_of(pid) <= sockets_start && rss_anon_kib(pid) < rss_start + 4 * 1024
    });
    eprintln!(
        "after the clients left: agent descriptors {} (TCP sockets {} against {sockets_start} \
         at the start), RssAnon {} KiB",
        fds_of(pid),
        tcp_sockets_of(pid),
        rss_anon_kib(pid)
    );
    assert!(served, "the job's mn-ssh was not served: {err}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // A quarter of 2048 descriptors.
    assert_eq!(opened_count, 512, "{:?}", refusals.first());
    assert_eq!(refusals.len(), CONNECTIONS * PER_CONNECTION - 512);
    assert!(
        refusals
            .iter()
            .all(|r| r.starts_with("ResourceShortage: ") && r.contains("512 connections in all")),
        "{:?}",
        refusals.first()
    );
    assert!(
        back,
        "TCP sockets or memory not back to {sockets_start}, {rss_start} KiB"
    );
    assert!(mn_ssh_true(&agent).1);
}

/// The stall limit ends only a destination that takes nothing: one that
/// reads slowly, and pauses for less than the limit, gets every byte.
#[test]
fn a_slow_destination_gets_every_byte() {
    const SIZE: usize = 4 << 20;
    let agent = Agent::start(&fresh_loopback());
    let host = fresh_loopback();
    let listener = std::net::TcpListener::bind(format!("{host}:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (done, got) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The first connection is `wait_for_port`'s probe.
        for conn in listener.incoming().flatten() {
            let mut conn = conn;
            let (mut total, mut sum, mut paused) = (0usize, 0u64, false);
            let mut buf = [0u8; 64 * 1024];
            while let Ok(n @ 1..) = conn.read(&mut buf) {
                total += n;
                sum += buf[..n].iter().map(|&b| u64::from(b)).sum::<u64>();
                std::thread::sleep(Duration::from_millis(20));
                if total > SIZE / 2 && !paused {
                    paused = true;
                    std::thread::sleep(Duration::from_secs(3));
                }
            }
            if total > 0 {
                let _ = done.send((total, sum));
            }
        }
    });
    let (mut client, listen) = forward_n("mn-ssh", Vec::new(), &format!("{host}:{port}"), &agent);
    let data: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    let expected: u64 = data.iter().map(|&b| u64::from(b)).sum();
    let mut local = TcpStream::connect(format!("{listen}:6006")).unwrap();
    let start = std::time::Instant::now();
    local.write_all(&data).unwrap();
    local.shutdown(std::net::Shutdown::Write).unwrap();
    let (total, sum) = got.recv_timeout(Duration::from_secs(60)).unwrap();
    eprintln!(
        "{total} bytes to a destination reading 64 KiB every 20 ms, with a 3 s pause: {:?}",
        start.elapsed()
    );
    assert_eq!((total, sum), (SIZE, expected));
    signal(client.id(), nix::sys::signal::Signal::SIGTERM);
    assert_eq!(wait_exit(&mut client, Duration::from_secs(10)), Some(0));
}
