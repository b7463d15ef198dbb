//! Text from outside never reaches a terminal raw (issue 51, findings 2 and
//! 8): a server that disconnects before the key exchange (so before any
//! host key is checked) with control sequences in its reason, and a rank
//! that prints them before it fails. Every command that shows such text
//! shows it escaped.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Output, Stdio};

use crate::util::*;

/// What the hostile server says: retitle, clear the screen, a fake
/// coloured verdict, a fake line.
const FORGED: &str = "\x1b]0;PWNED\x07\x1b[2J\x1b[H\x1b[31mrank 3: all good\x1b[0m\nFAKE LINE";

/// An unencrypted SSH_MSG_DISCONNECT (RFC 4253 6 and 11.1), written by
/// hand: uint32 packet length, byte padding length, the payload (byte 1,
/// uint32 reason, string description, string language), the padding.
fn disconnect_packet(text: &str) -> Vec<u8> {
    let mut payload = vec![1u8];
    payload.extend_from_slice(&2u32.to_be_bytes()); // SSH_DISCONNECT_PROTOCOL_ERROR
    payload.extend_from_slice(&(text.len() as u32).to_be_bytes());
    payload.extend_from_slice(text.as_bytes());
    payload.extend_from_slice(&0u32.to_be_bytes());
    // The length, padding length, payload and padding: a multiple of 8,
    // with at least 4 bytes of padding.
    let mut padding = 8 - (4 + 1 + payload.len()) % 8;
    if padding < 4 {
        padding += 8;
    }
    let mut packet = Vec::new();
    packet.extend_from_slice(&((1 + payload.len() + padding) as u32).to_be_bytes());
    packet.push(padding as u8);
    packet.extend_from_slice(&payload);
    packet.extend(std::iter::repeat_n(0u8, padding));
    packet
}

/// A server at `host`:port (a fresh port) that greets every connection as
/// OpenSSH would, then disconnects with [`FORGED`]. Returns the port.
fn hostile_server(host: &str) -> u16 {
    let listener = TcpListener::bind((host, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
                let _ = s.write_all(&disconnect_packet(FORGED));
                // Read what the client sends until it closes.
                let mut sink = [0u8; 4096];
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    port
}

/// Neither ESC nor BEL reached `out`'s stdout or stderr, and the forged
/// text did, escaped (what it shows is the server's, not ours).
fn assert_escaped(what: &str, out: &Output) {
    let text = format!("{}{}", stdout(out), stderr(out));
    assert!(
        !text.contains(['\x1b', '\x07']),
        "{what}: raw control characters in {text:?}"
    );
    assert!(
        text.contains(r"\e]0;PWNED\x07\e[2J\e[H\e[31mrank 3: all good\e[0m\nFAKE LINE"),
        "{what}: the server's reason, escaped, in {text}"
    );
}

#[test]
fn a_servers_disconnect_text_is_escaped_by_every_command() {
    let [head, node]: [String; 2] = fresh_loopbacks(2).try_into().expect("two");
    let port = hostile_server(&node);
    let port_text = port.to_string();
    let hostlist = one_slot_each(&[head.clone(), node.clone()]);
    let job = |args: &[&str]| -> Output {
        cmd(&multinode())
            .env("MULTINODE_HOSTLIST", &hostlist)
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", &port_text)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run")
    };

    let out = cmd(&mn_ssh())
        .args(["-p", &port_text, &node, "true"])
        .stdin(Stdio::null())
        .output()
        .expect("mn-ssh");
    assert_eq!(out.status.code(), Some(255), "{}", stderr(&out));
    assert_escaped("mn-ssh", &out);

    let out = cmd(&mn_exec_all())
        .env("MULTINODE_HOSTLIST", &hostlist)
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_AGENT_PORT", &port_text)
        .args(["--connect-timeout", "5", "-c", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("mn-exec-all");
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_escaped("mn-exec-all", &out);

    let out = job(&["top", "--once"]);
    assert_escaped("top --once", &out);

    let out = job(&["shell", "1", "--", "true"]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_escaped("shell", &out);

    let out = job(&["check"]);
    assert_escaped("check", &out);
}

/// A rank that prints control sequences and fails: the failure table's
/// LAST OUTPUT and the verdict's last lines show them escaped.
#[test]
fn what_a_failed_rank_printed_is_escaped_in_the_verdict() {
    let out = cmd(&mn_exec_all())
        .args([
            "--hosts",
            &fresh_loopback(),
            "--node-rank",
            "0",
            "-c",
            r#"printf "\033]0;PWN\007\033[2J\033[Hfake verdict: all ok\n" >&2; exit 3"#,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("mn-exec-all");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    // The rank's own output streams raw (by design); the table and the
    // verdict under it do not.
    let summary = err
        .split_once("did not succeed")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no failure table: {err}"));
    assert!(!summary.contains(['\x1b', '\x07']), "{summary:?}");
    assert!(
        summary.contains(r"\e]0;PWN\x07\e[2J\e[Hfake verdict: all ok"),
        "{summary}"
    );
    assert!(
        summary.contains("  last lines:\n    \\e]0;PWN"),
        "{summary}"
    );
}
