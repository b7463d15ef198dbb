//! OpenSSH as a real peer: `ssh` against the agent, `mn-ssh` against `sshd`,
//! and the same argv through both giving the same bytes.

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::*;

/// A private `sshd` on 127.0.0.1 with throwaway host and client keys; it
/// serves `sftp` (internal-sftp) and accepts `LANG`, `LC_*` and
/// `GIT_PROTOCOL` from clients, as distributions' configurations do.
pub(crate) struct Sshd {
    child: Child,
    pub(crate) port: u16,
    dir: tempfile::TempDir,
}

impl Sshd {
    pub(crate) fn start() -> Sshd {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for name in ["host_key", "client_key"] {
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(name))
                .status()
                .expect("ssh-keygen (Debian package openssh-client)");
            assert!(st.success());
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = format!(
            "ListenAddress 127.0.0.1:{port}\nHostKey {d}/host_key\nPidFile none\n\
             AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n\
             PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             UsePAM no\nStrictModes no\nUseDNS no\nPrintMotd no\nLogLevel ERROR\nMaxStartups 100\n\
             Subsystem sftp internal-sftp\nAcceptEnv LANG LC_* GIT_PROTOCOL\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .spawn()
            .expect("sshd (Debian package openssh-server)");
        wait_for_port(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(10),
        );
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {host_pub}"),
        )
        .unwrap();
        let client_config = format!(
            "Host *\n  Port {port}\n  IdentityFile {d}/client_key\n  IdentitiesOnly yes\n  \
             UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n  \
             KexAlgorithms curve25519-sha256\n  LogLevel ERROR\n",
            d = d.display()
        );
        std::fs::write(d.join("ssh_config"), client_config).unwrap();
        Sshd { child, port, dir }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// OpenSSH's `ssh` to this sshd.
    fn ssh(&self) -> Command {
        let mut c = Command::new("ssh");
        c.arg("-F").arg(self.path("ssh_config")).arg("127.0.0.1");
        c
    }

    /// `mn-ssh` to this sshd with the user's key (no job secret: OpenSSH mode).
    pub(crate) fn mn_ssh(&self) -> Command {
        let mut c = cmd(&mn_ssh());
        c.env_remove("MULTINODE_SECRET")
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-i")
            .arg(self.path("client_key"))
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}",
                self.path("known_hosts").display()
            ))
            .arg("-o")
            .arg("StrictHostKeyChecking=yes")
            .arg("127.0.0.1");
        c
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Words that a remote shell must see exactly as ssh(1) delivers them.
const TRICKY_WORDS: &[&str] = &[
    "plain",
    "two words",
    "'single quoted'",
    "\"double $UNSET_VAR quoted\"",
    "back\\\\slash",
    "dollar$UNSET_VAR",
    "'semi;colon'",
    "'new\nline'",
    "\"tab\there\"",
    "ünïcödé ✓",
    "\"\\\"escaped\\\"\"",
    " leading-space",
];

#[test]
fn argv_through_mn_ssh_matches_openssh_byte_for_byte() {
    let sshd = Sshd::start();
    let agent = Agent::start(&fresh_loopback());
    let mut reference = sshd.ssh();
    reference
        .arg("printf")
        .arg("'[%s]\\n'")
        .args(TRICKY_WORDS)
        .stdin(Stdio::null());
    let reference = reference.output().unwrap();
    assert!(reference.status.success(), "ssh: {}", stderr(&reference));
    let ours = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg("printf")
        .arg("'[%s]\\n'")
        .args(TRICKY_WORDS)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(ours.status.success(), "mn-ssh: {}", stderr(&ours));
    assert_eq!(stdout(&ours), stdout(&reference));
    assert_eq!(stderr(&ours), stderr(&reference));
    // And mn-ssh to the same sshd gives the same bytes too.
    let via_sshd = sshd
        .mn_ssh()
        .arg("printf")
        .arg("'[%s]\\n'")
        .args(TRICKY_WORDS)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        stdout(&via_sshd),
        stdout(&reference),
        "{}",
        stderr(&via_sshd)
    );
}

#[test]
fn openssh_client_logs_in_to_the_agent_with_the_derived_key() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let options = openssh_options(&agent, dir.path());
    let key = dir.path().join("id_job");
    let ssh = |command: &str| {
        let mut c = Command::new("ssh");
        c.args(&options).args([&agent.host, command]);
        c
    };
    let out = ssh("echo hi; echo err >&2; exit 5")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hi\n");
    assert!(stderr(&out).contains("err"), "{}", stderr(&out));
    let mut child = ssh("wc -c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&[b'x'; 70000])
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out).trim(), "70000");
    // `ssh-keygen -y` accepts the private key file.
    let derived = Command::new("ssh-keygen")
        .arg("-y")
        .arg("-f")
        .arg(&key)
        .output()
        .unwrap();
    assert!(derived.status.success());
    let public = std::fs::read_to_string(format!("{}.pub", key.display())).unwrap();
    assert!(public.starts_with(stdout(&derived).trim()), "{public}");
}

#[test]
fn mn_ssh_runs_commands_on_a_stock_sshd() {
    let sshd = Sshd::start();
    let out = sshd
        .mn_ssh()
        .arg("echo out; echo err >&2; exit 6")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert_eq!(stdout(&out), "out\n");
    assert!(stderr(&out).ends_with("err\n"), "{}", stderr(&out));
    let mut child = sshd
        .mn_ssh()
        .arg("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let data = vec![7u8; 3_000_000];
    child.stdin.take().unwrap().write_all(&data).unwrap();
    let out = child.wait_with_output().unwrap();
    let local = {
        let mut c = Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(&data).unwrap();
        c.wait_with_output().unwrap()
    };
    assert_eq!(stdout(&out), stdout(&local));
}

#[test]
fn mn_ssh_refuses_a_changed_host_key() {
    let sshd = Sshd::start();
    // Record another key for the host.
    let other = sshd.path("other");
    Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other)
        .status()
        .unwrap();
    let other_pub = std::fs::read_to_string(format!("{}.pub", other.display())).unwrap();
    std::fs::write(
        sshd.path("known_hosts"),
        format!("[127.0.0.1]:{} {other_pub}", sshd.port),
    )
    .unwrap();
    let out = sshd
        .mn_ssh()
        .arg("true")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255));
    assert!(
        stderr(&out).contains("differs from known_hosts"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn mn_ssh_without_a_usable_key_says_so() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let out = cmd(&mn_ssh())
        .env_remove("MULTINODE_SECRET")
        .env("HOME", dir.path())
        .args([
            "-p",
            &sshd.port.to_string(),
            "-o",
            "StrictHostKeyChecking=no",
            "127.0.0.1",
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255));
    assert!(
        stderr(&out).contains("refused every key"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn exec_all_over_a_stock_sshd_keeps_rank_environment_and_directory() {
    let sshd = Sshd::start();
    // The user's own key, where OpenSSH keeps it: no job secret, so exec_all talks to sshd.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::copy(sshd.path("client_key"), home.path().join(".ssh/id_ed25519")).unwrap();
    let work = tempfile::tempdir().unwrap();
    let head = fresh_loopback();
    let out = cmd(&mn_exec_all())
        .env_remove("MULTINODE_SECRET")
        .env("HOME", home.path())
        .env("MULTINODE_HOSTLIST", format!("{head}:1,127.0.0.1:1"))
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_SSH_PORT", sshd.port.to_string())
        .env("NCCL_DEBUG", "WARN")
        .current_dir(work.path())
        .args([
            "--label",
            "-c",
            "echo \"$RANK $NCCL_DEBUG $(pwd) $1\"",
            "an arg",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let cwd = work.path().canonicalize().unwrap();
    let text = stdout(&out);
    for (rank, host) in [(0, head.as_str()), (1, "127.0.0.1")] {
        let line = format!("{rank} {host}: {rank} WARN {} an arg\n", cwd.display());
        assert!(text.contains(&line), "{line:?} not in {text:?}");
    }
}

/// `mn-ssh -b ADDR` connects from ADDR, as `ssh -b` does: sshd's
/// `SSH_CLIENT` and the agent's log name it. An address that is not this
/// machine's cannot be bound (exit 255, said so); a value that is no
/// address is one line and exit 2.
#[test]
fn mn_ssh_b_connects_from_the_address_given_as_ssh_b_does() {
    let sshd = Sshd::start();
    let from = fresh_loopback();
    let mut ssh_client = Vec::new();
    for mut c in [sshd.ssh(), sshd.mn_ssh()] {
        let out = c
            .args(["-b", &from, "echo $SSH_CLIENT"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        ssh_client.push(stdout(&out).split(' ').next().unwrap().to_string());
    }
    assert_eq!(ssh_client, [from.clone(), from.clone()], "ssh, mn-ssh");

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let rust_log = std::ffi::OsStr::new("multinode=debug");
    let agent = crate::agent_login::start_agent(
        &fresh_loopback(),
        &[],
        &[("RUST_LOG", rust_log)],
        None,
        &log,
    );
    let run = |args: &[&str]| {
        cmd(&mn_ssh())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let from = fresh_loopback();
    let out = run(&["-o", &format!("BindAddress={from}"), &agent.host, "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("authenticated") && l.contains(&format!("peer={from}:"))),
        "{text}"
    );

    let out = run(&["-b", "192.0.2.1", &agent.host, "true"]);
    assert_eq!(out.status.code(), Some(255), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot bind to 192.0.2.1 (-b) to connect to"),
        "{}",
        stderr(&out)
    );
    let out = run(&["-b", "eth0", &agent.host, "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mn-ssh: error: -b eth0: \"eth0\" is not an IP address; give one of this machine's addresses (for example -b 10.0.0.5)\n"
    );
}
