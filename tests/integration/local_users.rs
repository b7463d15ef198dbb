//! Local tampering by another user of the same machine (issue 32): links
//! planted where `multinode` writes, a socket of another user where the job's
//! clients look for the head agent's, files in a shared temporary directory.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Stdio;

use crate::util::*;

/// `multinode keygen -o FILE` writes `FILE.pub` as it writes `FILE`: a link
/// planted at either is replaced, and what it points to is left alone.
#[test]
fn keygen_replaces_links_planted_at_its_files_and_never_writes_through_them() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let key = dir.path().join("id");
    let public = dir.path().join("id.pub");
    std::os::unix::fs::symlink(&victim, &key).unwrap();
    std::os::unix::fs::symlink(&victim, &public).unwrap();
    let out = cmd(&multinode())
        .args(["keygen", "-o"])
        .arg(&key)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    for (path, mode, starts) in [
        (&key, 0o600, "-----BEGIN OPENSSH PRIVATE KEY-----"),
        (&public, 0o644, "ssh-ed25519 "),
    ] {
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert!(meta.file_type().is_file(), "{}: {meta:?}", path.display());
        assert_eq!(meta.mode() & 0o777, mode, "{}", path.display());
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.starts_with(starts), "{}: {text}", path.display());
    }
}

/// A stand-in for the head's agent on a Unix socket, as another user (or a
/// process of this user without the secret) could make one: it answers as
/// the head's agent did before its proof (OPENED, then STARTED, a line of
/// output, exit status 0, CLOSE) and prints every frame it gets as
/// `frame KIND HEX`, and `connected` for each client. Run as `python3 -c
/// FAKE_MUX PATH [UID]`: with UID, it binds the socket, then becomes UID
/// before it listens (a socket file of this user, answered by another).
const FAKE_MUX: &str = r#"
import os, socket, struct, sys, threading
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
if len(sys.argv) > 2:
    os.setgroups([]); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[2]))
s.listen(16)
print("ready", flush=True)
lock = threading.Lock()
def say(line):
    with lock:
        print(line, flush=True)
def frame(kind, payload):
    return bytes([kind]) + struct.pack("!I", len(payload)) + payload
def serve(c):
    say("connected")
    got = b""
    while True:
        b = c.recv(65536)
        if not b:
            return
        got += b
        while len(got) >= 5 and len(got) >= 5 + struct.unpack("!I", got[1:5])[0]:
            n = struct.unpack("!I", got[1:5])[0]
            kind, payload, got = got[0], got[5:5 + n], got[5 + n:]
            say("frame %d %s" % (kind, payload.hex()))
            if kind == 1:
                c.sendall(frame(16, b"127.0.0.1:29922"))
            elif kind == 2:
                c.sendall(frame(22, b"") + frame(3, b"from the fake mux\n")
                          + frame(19, struct.pack("!I", 0)) + frame(4, b"") + frame(21, b""))
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

const NOBODY: u32 = 65534;

/// The fake head agent at `path`, run by `setpriv` as `uid` (root: as this
/// user), becoming `listen_as` before it listens; killed when dropped.
struct FakeMux {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl FakeMux {
    fn start(path: &std::path::Path, uid: u32, listen_as: Option<u32>) -> FakeMux {
        let mut c = std::process::Command::new("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .args(["/usr/bin/python3", "-c", FAKE_MUX])
            .arg(path)
            .args(listen_as.map(|u| u.to_string()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut child = c.spawn().expect("setpriv (util-linux) and python3");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let ready = lines.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(ready.as_deref(), Ok("ready"), "the fake mux at {path:?}");
        FakeMux { child, lines }
    }

    /// What it printed so far (after `ready`).
    fn seen(&self) -> Vec<String> {
        std::thread::sleep(std::time::Duration::from_millis(200));
        self.lines.try_iter().collect()
    }
}

impl Drop for FakeMux {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory under the system's temporary directory that `uid` owns with
/// `mode`, inside one every user can enter; removed with the returned guard.
fn shared_dir(uid: u32, mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
    let outer = tempfile::Builder::new()
        .prefix("multinode-local-users")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = outer.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    (outer, dir)
}

/// `MULTINODE_MUX_SOCKET` names a socket that is not the job's head agent:
/// made by another user, answered by another user, in a directory others
/// can write to, or of this user but without the secret. `mn-ssh` and
/// `mn-exec-all` send it neither the variables nor the command, say so in
/// one warning line, and reach the node themselves.
#[test]
fn a_socket_that_is_not_the_head_agents_gets_no_variables_and_no_command() {
    let agent = Agent::start(&fresh_loopback());
    let head = fresh_loopback();
    let cases: [(&str, u32, u32, Option<u32>, &str); 4] = [
        (
            "made by another user",
            NOBODY,
            NOBODY,
            None,
            "it belongs to uid 65534",
        ),
        (
            "answered by another user",
            0,
            0,
            Some(NOBODY),
            "the process listening on it runs as uid 65534",
        ),
        (
            "in a directory others can write to",
            0,
            0,
            None,
            "can be written by other users (mode 777)",
        ),
        (
            "of this user, without the secret",
            0,
            0,
            None,
            "it did not prove that it knows the job's secret",
        ),
    ];
    for (what, owner, runs_as, listen_as, why) in cases {
        let mode = if why.contains("mode 777") {
            0o777
        } else {
            0o700
        };
        let (_guard, dir) = shared_dir(owner, mode);
        let socket = dir.join("mux.sock");
        let fake = FakeMux::start(&socket, runs_as, listen_as);
        let ssh = cmd(&mn_ssh())
            .env("MULTINODE_MUX_SOCKET", &socket)
            .args([&agent.host, "echo real"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let exec_all = cmd(&mn_exec_all())
            .env("MULTINODE_MUX_SOCKET", &socket)
            .env("MULTINODE_HOSTLIST", format!("{head}:1,{}:1", agent.host))
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", agent.port.to_string())
            .env("HF_TOKEN", "hf_exported_token")
            .args(["--nodes", "1", "-c", "echo real $HF_TOKEN"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        for (who, out, expected) in [
            ("mn-ssh", &ssh, "real\n"),
            ("mn-exec-all", &exec_all, "real hf_exported_token\n"),
        ] {
            assert_eq!(out.status.code(), Some(0), "{what}, {who}: {}", stderr(out));
            assert_eq!(stdout(out), expected, "{what}, {who}");
            let err = stderr(out);
            assert_eq!(err.lines().count(), 1, "{what}, {who}: one line: {err}");
            assert!(
                err.contains("warning: not using MULTINODE_MUX_SOCKET")
                    && err.contains(why)
                    && err.contains("connecting to the nodes directly"),
                "{what}, {who}: {err}"
            );
        }
        let seen = fake.seen();
        // Nothing at all where another user could be listening; the target
        // and a challenge (one OPEN frame a client) to this user's own.
        let opens = if why.contains("prove") { 2 } else { 0 };
        assert_eq!(
            seen.iter().filter(|l| l.starts_with("frame ")).count(),
            opens,
            "{what}: {seen:?}"
        );
        assert!(
            seen.iter()
                .filter(|l| l.starts_with("frame "))
                .all(|l| l.starts_with("frame 1 ")),
            "{what}: {seen:?}"
        );
        let connected = seen.iter().filter(|l| *l == "connected").count();
        let expected = match listen_as {
            Some(_) => 2,
            None => opens,
        };
        assert_eq!(connected, expected, "{what}: {seen:?}");
    }
}

/// A folded list of 9,000 nodes, as exec_all sends it: the agent writes
/// `MULTINODE_HOSTFILE` for the command.
const FOLDED_9000: &str = "MULTINODE_HOSTLIST_FOLDED=gpu-node-[00001-09000]:8";

/// The hostfile an agent writes for a large job is in a directory of its
/// own (mode 0700, an unpredictable name, in `$XDG_RUNTIME_DIR`), where no
/// other user can plant anything, and the directory goes with the agent,
/// also when it is killed outright. Where it has no such directory, the
/// command is told on its stderr.
#[test]
fn an_agents_hostfiles_are_in_a_private_directory_that_goes_with_it() {
    let base = tempfile::tempdir().unwrap();
    let base_arg = base.path().to_str().unwrap();
    let script = "printf '%s\\n' \"${MULTINODE_HOSTFILE-unset}\"; wc -l < \"$MULTINODE_HOSTFILE\"";
    for kill9 in [false, true] {
        let mut agent = Agent::start_with(
            &fresh_loopback(),
            29922,
            &[],
            &[("XDG_RUNTIME_DIR", base_arg)],
        );
        let out = cmd(&mn_ssh())
            .args(["-o", &format!("SetEnv={FOLDED_9000}"), &agent.host, script])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stderr(&out), "");
        let text = stdout(&out);
        let (file, lines) = text.split_once('\n').unwrap();
        assert_eq!(lines.trim(), "9000");
        let file = std::path::Path::new(file);
        let dir = file.parent().unwrap();
        assert_eq!(dir.parent(), Some(base.path()), "{}", file.display());
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("multinode-agent-"), "{name}");
        assert_eq!(std::fs::metadata(dir).unwrap().mode() & 0o7777, 0o700);
        assert_eq!(std::fs::metadata(file).unwrap().mode() & 0o777, 0o600);
        let planted = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "touch"])
            .arg(dir.join("planted"))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(!planted.success(), "another user planted a file in {name}");
        if kill9 {
            agent.child.kill().unwrap();
            let _ = agent.child.wait();
        } else {
            drop(agent);
        }
        assert!(
            eventually(std::time::Duration::from_secs(10), || !dir.exists()),
            "{} left behind (kill -9: {kill9})",
            dir.display()
        );
    }
    let agent = Agent::start_with(
        &fresh_loopback(),
        29922,
        &[],
        &[("TMPDIR", "/nonexistent/multinode-test")],
    );
    let out = cmd(&mn_ssh())
        .args([
            "-o",
            &format!("SetEnv={FOLDED_9000}"),
            &agent.host,
            "printf '%s\\n' \"${MULTINODE_HOSTFILE-unset}\"",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "unset\n");
    assert_eq!(
        stderr(&out).lines().collect::<Vec<_>>(),
        [
            "multinode agent: warning: cannot write the hostfile of 9000 nodes (no directory \
          for it: /nonexistent/multinode-test: No such file or directory (os error 2)); \
          MULTINODE_HOSTFILE is not set"
        ],
    );
}

/// Runs `sh -c script sh ARGS...` as `uid` (`setpriv`); whether it succeeded.
fn as_user(uid: u32, script: &str, args: &[&std::path::Path]) -> bool {
    std::process::Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args(["--clear-groups", "sh", "-c", script, "sh"])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("setpriv (util-linux)")
        .success()
}

/// An `XDG_RUNTIME_DIR` of the job's user that other users can write to
/// (mode 0777) is not where the agent's private directory goes: there
/// another user could move it away and put one of their own in its place,
/// and later commands would get that user's hostfile. The system's
/// temporary directory (sticky) is used instead.
#[test]
fn an_xdg_runtime_dir_others_can_write_to_is_not_used() {
    let (_guard, base) = shared_dir(0, 0o777);
    let agent = Agent::start_with(
        &fresh_loopback(),
        29922,
        &[],
        &[("XDG_RUNTIME_DIR", base.to_str().unwrap())],
    );
    let out = cmd(&mn_ssh())
        .args([
            "-o",
            &format!("SetEnv={FOLDED_9000}"),
            &agent.host,
            "printf '%s\\n' \"$MULTINODE_HOSTFILE\"",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let text = stdout(&out);
    let private = std::path::Path::new(text.trim()).parent().unwrap();
    assert_ne!(private.parent(), Some(base.as_path()), "{text}");
    assert_eq!(
        std::fs::read_dir(&base).unwrap().count(),
        0,
        "nothing of the agent's in {}",
        base.display()
    );
    let moved = as_user(
        NOBODY,
        "mv \"$1\" \"$1.moved\" && mkdir -m 777 \"$1\"",
        &[private],
    );
    assert!(!moved, "another user replaced {}", private.display());
}

/// Another user planted `FILE.pub` (or `FILE`) in a sticky directory, where
/// nobody else can remove it: `multinode keygen -o FILE` writes nothing at
/// all and says so in one line, exit code 2; what was planted is left.
#[test]
fn keygen_writes_nothing_where_another_users_file_cannot_be_replaced() {
    let (_guard, dir) = shared_dir(0, 0o1777);
    // The job's user: neither root (which may remove anything) nor NOBODY.
    const JOB_USER: u32 = 65533;
    for planted in ["k.pub", "k"] {
        let key = dir.join("k");
        let target = dir.join(planted);
        assert!(as_user(NOBODY, "echo planted > \"$1\"", &[&target]));
        let out = cmd(std::path::Path::new("setpriv"))
            .arg(format!("--reuid={JOB_USER}"))
            .arg(format!("--regid={JOB_USER}"))
            .arg("--clear-groups")
            .arg(multinode())
            .args(["keygen", "-o"])
            .arg(&key)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{planted}: {err}");
        assert_eq!(err.lines().count(), 1, "{planted}: one line: {err}");
        assert!(
            err.contains(&target.display().to_string()) && err.contains("uid 65534"),
            "{planted}: {err}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "planted\n");
        let other = if planted == "k" {
            dir.join("k.pub")
        } else {
            key
        };
        assert!(
            std::fs::symlink_metadata(&other).is_err(),
            "{planted}: {} was written",
            other.display()
        );
        std::fs::remove_file(&target).unwrap();
    }
}
