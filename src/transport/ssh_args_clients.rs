//! Tests of `ssh_args` against the command lines its clients give their ssh
//! program (OpenSSH's scp and sftp, git), the options it refuses by name,
//! ssh_config's patterns, and OpenSSH's terminal rules.

use std::ffi::OsString;

use super::ssh_args::*;
use super::ssh_invocation::*;

fn os(s: &str) -> OsString {
    OsString::from(s)
}

fn p(args: &[&str]) -> Result<SshInvocation, SshArgsError> {
    parse(&args.iter().map(|a| os(a)).collect::<Vec<_>>())
}

/// What OpenSSH 9.2's scp and sftp pass to `-S PROGRAM`.
#[test]
fn scp_and_sftp_argv_request_the_subsystem() {
    let scp = p(&[
        "-x",
        "-oPermitLocalCommand=no",
        "-oClearAllForwardings=yes",
        "-oRemoteCommand=none",
        "-oRequestTTY=no",
        "-oForwardAgent=no",
        "-p",
        "22877",
        "-s",
        "--",
        "127.0.0.1",
        "sftp",
    ])
    .unwrap();
    assert!(scp.subsystem);
    assert_eq!((scp.host.as_str(), scp.port), ("127.0.0.1", Some(22877)));
    assert_eq!(scp.command, b"sftp");
    let sftp = p(&[
        "-oForwardX11 no",
        "-oPermitLocalCommand no",
        "-oClearAllForwardings yes",
        "-obatchmode yes",
        "-oForwardAgent no",
        "-oPort 22877",
        "-s",
        "--",
        "h",
        "sftp",
    ])
    .unwrap();
    assert!(sftp.subsystem);
    assert_eq!(sftp.port, Some(22877));
    let legacy = p(&["-x", "-oRemoteCommand=none", "--", "h", "scp -t /tmp/f"]).unwrap();
    assert!(!legacy.subsystem);
    assert_eq!(legacy.command, b"scp -t /tmp/f");
}

/// What git passes: a `-G` probe first, then the command with SendEnv.
#[test]
fn git_probe_and_send_env() {
    let probe = p(&["-G", "-o", "SendEnv=GIT_PROTOCOL", "-p", "22", "h"]).unwrap();
    assert!(probe.print_config);
    let inv = p(&[
        "-o",
        "SendEnv=GIT_PROTOCOL",
        "-o",
        "SendEnv LANG LC_*",
        "-o",
        "SetEnv=A=1 B=2",
        "h",
        "git-upload-pack '/r'",
    ])
    .unwrap();
    let env = [
        ("GIT_PROTOCOL", "version=2"),
        ("LC_ALL", "C"),
        ("LANG", "C.UTF-8"),
        ("LANGUAGE", "x"),
        ("HOME", "/root"),
    ];
    assert_eq!(
        inv.env_to_send(env.iter().copied()),
        [
            ("A", "1"),
            ("B", "2"),
            ("GIT_PROTOCOL", "version=2"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let undone = p(&["-o", "SendEnv=LC_*", "-o", "SendEnv=-LC_*", "h"]).unwrap();
    assert!(undone.send_env.is_empty());
}

#[test]
fn forwarding_and_proxies_are_refused_by_name() {
    for args in [
        &["-NR", "9:h:9", "h"][..],
        &["-D", "1080", "h"],
        &["-X", "h"],
        &["-A", "h", "true"],
        &["-J", "jump", "h", "true"],
        &["-o", "ProxyCommand=nc %h %p", "h", "true"],
        &["-oForwardAgent=yes", "h", "true"],
        &["-o", "RemoteForward 1 h:1", "h"],
        &["-f", "h", "true"],
    ] {
        let e = p(args).unwrap_err().to_string();
        assert!(e.contains("which mn-ssh does not do"), "{args:?}: {e}");
    }
    assert!(p(&["-o", "ProxyCommand=none", "-o", "ForwardX11=no", "h"]).is_ok());
}

#[test]
fn local_forwards_and_no_command() {
    let inv = p(&[
        "-N",
        "-L",
        "6006:localhost:6006",
        "-oLocalForward=7 h:8",
        "h",
    ])
    .unwrap();
    assert!(inv.no_command && inv.command.is_empty());
    assert_eq!(inv.forward.local.len(), 2);
    assert_eq!(
        (inv.forward.local[1].port, inv.forward.local[1].host_port),
        (7, 8)
    );
    let e = p(&["-L", "6006", "h"]).unwrap_err().to_string();
    assert!(e.starts_with("bad -L \"6006\""), "{e}");
}

#[test]
fn glob_patterns() {
    assert!(glob_match("LC_*", "LC_ALL"));
    assert!(glob_match("LC_*", "LC_"));
    assert!(!glob_match("LC_*", "LANG"));
    assert!(glob_match("*", "X"));
    assert!(glob_match("L?NG", "LANG"));
    assert!(glob_match("*_PROTO*", "GIT_PROTOCOL"));
    assert!(!glob_match("GIT", "GIT_PROTOCOL"));
}

#[test]
fn terminal_requests_follow_openssh() {
    let tty = |args: &[&str]| p(args).unwrap().tty;
    assert_eq!(tty(&["h"]), RequestTty::Auto);
    assert_eq!(tty(&["-t", "h"]), RequestTty::Yes);
    assert_eq!(tty(&["-tt", "h"]), RequestTty::Force);
    assert_eq!(tty(&["-t", "h", "-t", "top"]), RequestTty::Force);
    assert_eq!(tty(&["-tt", "-T", "h"]), RequestTty::No);
    assert_eq!(tty(&["-o", "RequestTTY=force", "h"]), RequestTty::Force);
    let e = p(&["-o", "RequestTTY=maybe", "h"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "-o RequestTTY=\"maybe\": give yes, no, force or auto"
    );
    // A shell from a terminal gets one; a command only with -t; -tt always; -T never.
    assert!(RequestTty::Auto.wanted(false, true));
    assert!(!RequestTty::Auto.wanted(true, true));
    assert!(!RequestTty::Auto.wanted(false, false));
    assert!(RequestTty::Yes.wanted(true, true));
    assert!(!RequestTty::Yes.wanted(true, false));
    assert!(RequestTty::Force.wanted(true, false));
    assert!(!RequestTty::No.wanted(false, true));
}
