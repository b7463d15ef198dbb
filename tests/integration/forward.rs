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

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text
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
