//! `mn-ssh` as a byte pipe under real clients (git, rsync, scp, sftp), to an
//! agent and to a stock sshd; partial lines through `mn-ssh` and
//! `mn-exec-all`; closed and failing stdout/stderr.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::openssh::Sshd;
use crate::util::*;

/// Where `mn-ssh` goes: an agent (job secret) or a stock sshd (the user's key).
enum Peer {
    Agent(Agent),
    Sshd(Sshd),
}

impl Peer {
    fn agent() -> Peer {
        Peer::Agent(Agent::start(&fresh_loopback()))
    }

    fn sshd() -> Peer {
        Peer::Sshd(Sshd::start())
    }

    fn host(&self) -> String {
        match self {
            Peer::Agent(a) => a.host.clone(),
            Peer::Sshd(_) => "127.0.0.1".into(),
        }
    }

    fn port(&self) -> u16 {
        match self {
            Peer::Agent(a) => a.port,
            Peer::Sshd(s) => s.port,
        }
    }

    /// The key and host-key options for sshd (none for an agent: the secret
    /// in the environment does it). scp and sftp pass these on to `-S PROGRAM`.
    fn key_options(&self) -> Vec<String> {
        match self {
            Peer::Agent(_) => Vec::new(),
            Peer::Sshd(s) => vec![
                "-i".into(),
                s.path("client_key").display().to_string(),
                "-o".into(),
                format!("UserKnownHostsFile={}", s.path("known_hosts").display()),
                "-o".into(),
                "StrictHostKeyChecking=yes".into(),
            ],
        }
    }

    /// `mn-ssh -p PORT ...`, as one line for GIT_SSH_COMMAND and `rsync -e`.
    fn ssh_command(&self) -> String {
        let mut words = vec![
            mn_ssh().display().to_string(),
            "-p".into(),
            self.port().to_string(),
        ];
        words.extend(self.key_options());
        words.join(" ")
    }

    /// A command with the environment `mn-ssh` needs for this peer.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = cmd(Path::new(program.as_ref()));
        if let Peer::Sshd(_) = self {
            c.env_remove("MULTINODE_SECRET");
        }
        c.stdin(Stdio::null());
        c
    }

    fn mn_ssh(&self) -> Command {
        let mut c = self.command(mn_ssh());
        c.arg("-p")
            .arg(self.port().to_string())
            .args(self.key_options());
        c
    }
}

/// Runs `cmd` to its end, at most `limit`; a hang fails the test (and is ended).
fn run_within(cmd: &mut Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let readers = [
        read_all_later(child.stdout.take().unwrap()),
        read_all_later(child.stderr.take().unwrap()),
    ];
    let status = wait_within(&mut child, limit)
        .unwrap_or_else(|| panic!("{what} did not end within {limit:?}"));
    let [out, err] = readers.map(|r| r.join().unwrap());
    Output {
        status,
        stdout: out,
        stderr: err,
    }
}

fn read_all_later(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

const LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------- git

fn git(dir: &Path, peer: &Peer, home: &Path) -> Command {
    let mut c = peer.command("git");
    c.current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .env("GIT_SSH_COMMAND", peer.ssh_command());
    c
}

fn git_clone_push_and_protocol_v2(peer: &Peer) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = d.join("origin.git");
    let run = |args: &[&str], at: &Path| {
        let out = run_within(git(at, peer, d).args(args), LIMIT);
        ok(&out, &format!("git {args:?}"));
        out
    };
    run(
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            origin.to_str().unwrap(),
        ],
        d,
    );
    run(&["init", "-q", "-b", "main", "seed"], d);
    let seed = d.join("seed");
    std::fs::write(seed.join("file"), "one\n").unwrap();
    run(&["add", "file"], &seed);
    run(&["commit", "-qm", "one"], &seed);
    let url = format!("{}:{}", peer.host(), origin.display());
    // Both directions through mn-ssh: push (receive-pack), clone (upload-pack).
    run(&["push", "-q", &url, "main"], &seed);
    run(&["clone", "-q", &url, "clone"], d);
    let clone = d.join("clone");
    assert_eq!(
        std::fs::read_to_string(clone.join("file")).unwrap(),
        "one\n"
    );
    std::fs::write(clone.join("file"), "two\n").unwrap();
    run(&["commit", "-qam", "two"], &clone);
    run(&["push", "-q", "origin", "main"], &clone);
    let log = run(
        &["--git-dir", origin.to_str().unwrap(), "log", "--format=%s"],
        d,
    );
    assert_eq!(stdout(&log), "two\none\n");
    // git probes mn-ssh with -G, then sends GIT_PROTOCOL (SendEnv): the
    // server side speaks protocol v2.
    let out = run_within(
        git(d, peer, d)
            .env("GIT_TRACE_PACKET", "1")
            .args(["ls-remote", &url]),
        LIMIT,
    );
    ok(&out, "git ls-remote");
    assert!(
        stderr(&out).contains("< version 2"),
        "no protocol v2 in {}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("refs/heads/main"), "{}", stdout(&out));
}

#[test]
fn git_clone_and_push_through_mn_ssh_to_an_agent() {
    git_clone_push_and_protocol_v2(&Peer::agent());
}

#[test]
fn git_clone_and_push_through_mn_ssh_to_sshd() {
    git_clone_push_and_protocol_v2(&Peer::sshd());
}

// ---------------------------------------------------------------- rsync

/// 50 MB of pseudo-random bytes, a small file, an empty one, an executable,
/// a symlink and a subfolder.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut big = Vec::with_capacity(50_000_000);
    while big.len() < 50_000_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        big.extend_from_slice(&state.to_le_bytes());
    }
    big.truncate(50_000_000);
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("sub/small.txt"), "small\nfile\n").unwrap();
    std::fs::write(root.join("sub/deeper/empty"), "").unwrap();
    std::fs::write(root.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("sub/small.txt", root.join("link")).unwrap();
}

/// Every entry of `a` is in `b` with the same bytes, link target, mode and
/// (for files) mtime, and nothing else is in `b`.
fn assert_same_tree(a: &Path, b: &Path) {
    fn entries(root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut todo = vec![root.to_path_buf()];
        while let Some(dir) = todo.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.symlink_metadata().unwrap().is_dir() {
                    todo.push(p.clone());
                }
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
        out.sort();
        out
    }
    let (ea, eb) = (entries(a), entries(b));
    assert_eq!(
        ea,
        eb,
        "different entries in {} and {}",
        a.display(),
        b.display()
    );
    for rel in ea {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let (ma, mb) = (
            pa.symlink_metadata().unwrap(),
            pb.symlink_metadata().unwrap(),
        );
        assert_eq!(ma.mode(), mb.mode(), "mode of {}", rel.display());
        if ma.is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap()
            );
        } else if ma.is_file() {
            assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", rel.display());
            assert!(
                std::fs::read(&pa).unwrap() == std::fs::read(&pb).unwrap(),
                "{} differs",
                rel.display()
            );
        }
    }
}

fn rsync_both_ways(peer: &Peer) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (src, dst, back) = (d.join("src"), d.join("dst"), d.join("back"));
    make_tree(&src);
    let rsync = |from: String, to: String| {
        let out = run_within(
            peer.command("rsync")
                .args(["-a", "-e", &peer.ssh_command()])
                .arg(&from)
                .arg(&to),
            LIMIT,
        );
        ok(&out, &format!("rsync {from} {to}"));
    };
    let host = peer.host();
    rsync(
        format!("{}/", src.display()),
        format!("{host}:{}/", dst.display()),
    );
    assert_same_tree(&src, &dst);
    rsync(
        format!("{host}:{}/", dst.display()),
        format!("{}/", back.display()),
    );
    assert_same_tree(&src, &back);
}

#[test]
fn rsync_a_tree_with_a_50_mb_file_both_ways_through_an_agent() {
    rsync_both_ways(&Peer::agent());
}

#[test]
fn rsync_a_tree_with_a_50_mb_file_both_ways_through_sshd() {
    rsync_both_ways(&Peer::sshd());
}

// ---------------------------------------------------------------- scp, sftp

fn random_file(path: &Path, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut data)
        .unwrap();
    std::fs::write(path, &data).unwrap();
    data
}

fn scp_and_sftp_both_ways(peer: &Peer) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = random_file(&d.join("f"), 3_000_000);
    let remote = d.join("remote");
    std::fs::create_dir(&remote).unwrap();
    let host = peer.host();
    let port = peer.port().to_string();
    let scp = |extra: &[&str], from: String, to: String| {
        let mut c = peer.command("scp");
        c.args(extra)
            .args(["-q", "-P", &port, "-S"])
            .arg(mn_ssh())
            .args(peer.key_options())
            .arg(&from)
            .arg(&to);
        let out = run_within(&mut c, LIMIT);
        ok(&out, &format!("scp {extra:?} {from} {to}"));
    };
    for (mode, extra) in [("legacy", &["-O"][..]), ("sftp", &[][..])] {
        let up = remote.join(format!("up-{mode}"));
        scp(
            extra,
            d.join("f").display().to_string(),
            format!("{host}:{}", up.display()),
        );
        assert!(std::fs::read(&up).unwrap() == data, "scp {mode} up differs");
        let down = d.join(format!("down-{mode}"));
        scp(
            extra,
            format!("{host}:{}", up.display()),
            down.display().to_string(),
        );
        assert!(
            std::fs::read(&down).unwrap() == data,
            "scp {mode} down differs"
        );
    }
    let r = remote.display();
    let batch = format!(
        "mkdir {r}/d\nput {f} {r}/d/x\nrename {r}/d/x {r}/d/y\nls {r}/d\nget {r}/d/y {local}\n\
         rm {r}/d/y\nrmdir {r}/d\n",
        f = d.join("f").display(),
        local = d.join("got").display()
    );
    std::fs::write(d.join("batch"), batch).unwrap();
    let mut c = peer.command("sftp");
    c.args(["-P", &port, "-S"])
        .arg(mn_ssh())
        .args(peer.key_options())
        .arg("-b")
        .arg(d.join("batch"))
        .arg(&host);
    let out = run_within(&mut c, LIMIT);
    ok(&out, "sftp -b");
    assert!(
        stdout(&out).contains("/d/y"),
        "ls shows y: {}",
        stdout(&out)
    );
    assert!(
        std::fs::read(d.join("got")).unwrap() == data,
        "sftp get differs"
    );
    assert!(!remote.join("d").exists(), "rmdir through sftp");
}

#[test]
fn scp_and_sftp_through_mn_ssh_to_an_agent() {
    scp_and_sftp_both_ways(&Peer::agent());
}

#[test]
fn scp_and_sftp_through_mn_ssh_to_sshd() {
    scp_and_sftp_both_ways(&Peer::sshd());
}

#[test]
fn openssh_scp_and_sftp_into_an_agent_with_the_keygen_key() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, known_hosts) = job_key_files(d);
    let options = |c: &mut Command| {
        c.arg("-i")
            .arg(&key)
            .args(["-P", &agent.port.to_string()])
            .args(["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-o", "StrictHostKeyChecking=yes"])
            .stdin(Stdio::null());
    };
    let data = random_file(&d.join("f"), 1_000_000);
    let up = d.join("up");
    let mut c = Command::new("scp");
    options(&mut c);
    c.arg(d.join("f"))
        .arg(format!("{}:{}", agent.host, up.display()));
    ok(&run_within(&mut c, LIMIT), "scp into the agent");
    assert!(std::fs::read(&up).unwrap() == data);
    std::fs::write(
        d.join("batch"),
        format!("get {} {}\n", up.display(), d.join("down").display()),
    )
    .unwrap();
    let mut c = Command::new("sftp");
    options(&mut c);
    c.arg("-b").arg(d.join("batch")).arg(&agent.host);
    ok(&run_within(&mut c, LIMIT), "sftp from the agent");
    assert!(std::fs::read(d.join("down")).unwrap() == data);
}

#[test]
fn an_sftp_session_ends_with_its_connection() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A sparse 8 GB file: an upload that is still going when it is cut.
    File::create(d.join("huge"))
        .unwrap()
        .set_len(8_000_000_000)
        .unwrap();
    let target = d.join("uploaded");
    std::fs::write(
        d.join("batch"),
        format!("put {} {}\n", d.join("huge").display(), target.display()),
    )
    .unwrap();
    let mut child = cmd(Path::new("sftp"))
        .arg("-S")
        .arg(mn_ssh())
        .arg("-b")
        .arg(d.join("batch"))
        .arg(&agent.host)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let agent_has_it_open = || {
        std::fs::read_dir(format!("/proc/{}/fd", agent.pid()))
            .unwrap()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == target))
    };
    assert!(
        eventually(LIMIT, || target.metadata().is_ok_and(|m| m.len() > 0)
            && agent_has_it_open()),
        "the upload did not start"
    );
    // The client and its mn-ssh vanish: the connection closes.
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let _ = child.wait();
    assert!(
        eventually(Duration::from_secs(10), || !agent_has_it_open()),
        "the agent still holds the file open after the client was killed"
    );
    // The agent goes on serving.
    let out = run_within(
        cmd(&mn_ssh()).arg(&agent.host).arg("echo still here"),
        LIMIT,
    );
    assert_eq!(stdout(&out), "still here\n");
}

#[test]
fn an_unknown_subsystem_is_refused_by_name() {
    let agent = Agent::start(&fresh_loopback());
    let out = run_within(
        cmd(&mn_ssh())
            .args(["-s", &agent.host, "nosuch"])
            .stdin(Stdio::null()),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(255), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused the nosuch subsystem"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn send_env_and_set_env_reach_the_command_on_both_transports() {
    for peer in [Peer::agent(), Peer::sshd()] {
        let out = run_within(
            peer.mn_ssh()
                .env("LC_ALL", "C")
                .env("GIT_PROTOCOL", "version=2")
                .env("LANG_NOT_SENT", "x")
                .args([
                    "-o",
                    "SendEnv=LC_* GIT_PROTOCOL",
                    "-o",
                    "SetEnv=LANG=C.UTF-8",
                ])
                .arg(peer.host())
                .arg("echo \"$LC_ALL|$GIT_PROTOCOL|$LANG|${LANG_NOT_SENT-unset}\""),
            LIMIT,
        );
        ok(&out, "mn-ssh with SendEnv");
        assert_eq!(stdout(&out), "C|version=2|C.UTF-8|unset\n");
    }
}

#[test]
fn g_prints_the_configuration_without_connecting() {
    // Nothing listens there: -G must not try.
    let out = run_within(
        cmd(&mn_ssh())
            .args(["-G", "-p", "9", "-o", "SendEnv=GIT_PROTOCOL", "127.0.0.1"])
            .stdin(Stdio::null()),
        LIMIT,
    );
    ok(&out, "mn-ssh -G");
    assert!(stdout(&out).contains("port 9\n"), "{}", stdout(&out));
}

// ---------------------------------------------------------------- partial lines

/// Reads `r` as it comes, with the time each chunk arrived.
fn timed_reader(r: impl Read + Send + 'static) -> mpsc::Receiver<(Instant, Vec<u8>)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = r;
        let mut buf = vec![0u8; 65536];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// Every chunk until EOF; `when(text)`: when the bytes so far first held `text`.
struct Arrivals(Vec<(Instant, Vec<u8>)>);

impl Arrivals {
    fn collect(rx: mpsc::Receiver<(Instant, Vec<u8>)>) -> Arrivals {
        Arrivals(rx.into_iter().collect())
    }

    fn when(&self, text: &str) -> Instant {
        let mut seen = Vec::new();
        for (at, chunk) in &self.0 {
            seen.extend_from_slice(chunk);
            if memchr_find(&seen, text.as_bytes()) {
                return *at;
            }
        }
        panic!(
            "{text:?} never came; got {:?}",
            String::from_utf8_lossy(&seen)
        );
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .iter()
                .flat_map(|(_, c)| c.clone())
                .collect::<Vec<_>>(),
        )
        .into_owned()
    }
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// How soon a partial line must follow the full line written just before it.
const PROMPT: Duration = Duration::from_millis(500);

fn spawn_timed(c: &mut Command) -> (Child, Arrivals, Arrivals) {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let out = timed_reader(child.stdout.take().unwrap());
    let err = timed_reader(child.stderr.take().unwrap());
    let status = wait_within(&mut child, LIMIT).expect("ends");
    assert!(status.success(), "{status:?}");
    (child, Arrivals::collect(out), Arrivals::collect(err))
}

#[test]
fn a_partial_line_through_mn_ssh_arrives_at_once() {
    for peer in [Peer::agent(), Peer::sshd()] {
        let (_, out, err) = spawn_timed(
            peer.mn_ssh()
                .arg(peer.host())
                .arg("printf 'go\\n'; printf abc; printf xyz >&2; sleep 2; printf def"),
        );
        let go = out.when("go\n");
        assert!(out.when("go\nabc") - go < PROMPT, "abc was held");
        assert!(err.when("xyz") - go < PROMPT, "xyz was held");
        assert!(out.when("abcdef") - go > Duration::from_millis(1500));
        assert_eq!(out.text(), "go\nabcdef");
    }
}

/// Node 0 here, node 1 an agent.
fn two_nodes(agent: &Agent, head: &str) -> Command {
    let mut c = cmd(&mn_exec_all());
    c.env("MULTINODE_HOSTLIST", format!("{head}:1,{}:1", agent.host))
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_AGENT_PORT", agent.port.to_string());
    c
}

#[test]
fn a_partial_line_through_mn_exec_all_arrives_at_once() {
    let agent = Agent::start(&fresh_loopback());
    let head = fresh_loopback();
    let script =
        "printf \"go$RANK\\n\"; printf \"bar$RANK\\r\"; printf \"abc$RANK\"; sleep 2; printf def";
    // One node alone, then two sharing the streams, then labelled.
    let (_, out, _) = spawn_timed(two_nodes(&agent, &head).args(["--nodes", "1", "-c", script]));
    let go = out.when("go1\n");
    assert!(
        out.when("go1\nbar1\rabc1") - go < PROMPT,
        "{:?}",
        out.text()
    );
    assert_eq!(out.text(), "go1\nbar1\rabc1def");

    let (_, out, _) = spawn_timed(two_nodes(&agent, &head).args(["-c", script]));
    for rank in 0..2 {
        let go = out.when(&format!("go{rank}\n"));
        assert!(
            out.when(&format!("bar{rank}\r")) - go < PROMPT,
            "{:?}",
            out.text()
        );
        assert!(
            out.when(&format!("abc{rank}")) - go < PROMPT,
            "{:?}",
            out.text()
        );
    }
    let text = out.text();
    assert_eq!(text.matches("def").count(), 2, "{text:?}");

    let (_, out, _) = spawn_timed(two_nodes(&agent, &head).args(["--label", "-c", script]));
    for (rank, host) in [(0, head.as_str()), (1, agent.host.as_str())] {
        let go = out.when(&format!("{rank} {host}: go{rank}\n"));
        let bar = format!("{rank} {host}: bar{rank}\r");
        let abc = format!("{rank} {host}: abc{rank}\n");
        assert!(out.when(&bar) - go < PROMPT, "{:?}", out.text());
        assert!(out.when(&abc) - go < PROMPT, "{:?}", out.text());
        assert!(out.text().contains(&format!("{rank} {host}: def\n")));
    }
}

// ---------------------------------------------------------------- closed output

/// Where one of the command's streams goes.
#[derive(Clone, Copy, PartialEq)]
enum To {
    /// A pipe that is closed after its first line (`| head -1`).
    Head,
    Null,
    /// /dev/full: every write fails with ENOSPC.
    Full,
    /// Kept for the test to read.
    Keep,
}

/// Runs `c` with stdout and stderr sent as asked (both `Head`: `2>&1 |
/// head -1`); returns the first line read, the exit status and what `Keep`
/// kept.
fn with_output(c: &mut Command, out: To, err: To) -> (String, ExitStatus, String) {
    // Close-on-exec: a read end inherited by the child would keep the pipe open.
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let stdio = |to: To| match to {
        To::Head => Stdio::from(write_end.try_clone().unwrap()),
        To::Null => Stdio::null(),
        To::Full => Stdio::from(File::options().write(true).open("/dev/full").unwrap()),
        To::Keep => Stdio::piped(),
    };
    let mut child = c
        .stdin(Stdio::null())
        .stdout(stdio(out))
        .stderr(stdio(err))
        .process_group(0)
        .spawn()
        .unwrap();
    drop(write_end);
    let kept = child
        .stdout
        .take()
        .map(read_all_later)
        .or_else(|| child.stderr.take().map(read_all_later));
    let mut first = String::new();
    if out == To::Head || err == To::Head {
        let mut reader = BufReader::new(File::from(read_end));
        let _ = reader.read_line(&mut first);
        // `head` is done: the pipe closes.
    }
    let status = wait_within(&mut child, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{c:?} did not end after its output closed"));
    let kept = kept
        .map(|k| String::from_utf8_lossy(&k.join().unwrap()).into_owned())
        .unwrap_or_default();
    (first, status, kept)
}

static TAGS: AtomicU32 = AtomicU32::new(0);

/// A word no other process has on its command line.
fn tag() -> String {
    format!(
        "bytepipe-{}-{}",
        std::process::id(),
        TAGS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Processes whose command line is exactly `yes TAG`.
fn yes_processes(tag: &str) -> Vec<u32> {
    pids_matching(tag)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c == format!("yes\0{tag}\0").as_bytes())
        })
        .collect()
}

fn assert_nothing_left(tag: &str) {
    assert!(
        eventually(Duration::from_secs(10), || yes_processes(tag).is_empty()),
        "`yes {tag}` still runs: {:?}",
        yes_processes(tag)
    );
}

const SIGPIPE_CODE: i32 = 141;

/// The cases of issue 12 and 19: `| head -1` on stdout, on stderr (with
/// stdout elsewhere), stderr on /dev/full, stdout on /dev/full.
fn closed_output_cases(mut command: impl FnMut(&str) -> Command, what: &str) {
    let cases = [
        ("yes TAG 2>&1 | head -1", "yes {}", To::Head, To::Head),
        (
            "'yes TAG >&2' 2>&1 >/dev/null | head -1",
            "yes {} >&2",
            To::Null,
            To::Head,
        ),
        (
            "'yes TAG >&2' 2>/dev/full",
            "yes {} >&2",
            To::Null,
            To::Full,
        ),
        ("yes TAG >/dev/full", "yes {}", To::Full, To::Keep),
    ];
    for (name, script, out, err) in cases {
        let tag = tag();
        let script = script.replace("{}", &tag);
        let (first, status, kept) = with_output(&mut command(&script), out, err);
        assert_eq!(
            status.code(),
            Some(SIGPIPE_CODE),
            "{what} {name}: {status:?}, first line {first:?}, stderr {kept:?}"
        );
        if out == To::Head {
            assert_eq!(first, format!("{tag}\n"), "{what} {name}");
        }
        assert!(!kept.contains("panicked"), "{what} {name}: {kept}");
        if out == To::Full {
            assert!(
                kept.contains("cannot write to stdout: No space left on device"),
                "{what} {name}: {kept}"
            );
        }
        assert_nothing_left(&tag);
    }
}

#[test]
fn mn_ssh_ends_when_its_output_is_closed_and_so_does_the_remote_command() {
    for peer in [Peer::agent(), Peer::sshd()] {
        let host = peer.host();
        closed_output_cases(
            |script| {
                let mut c = peer.mn_ssh();
                c.arg(&host).arg(script);
                c
            },
            "mn-ssh",
        );
    }
}

#[test]
fn mn_exec_all_ends_when_its_output_is_closed_and_so_do_the_nodes() {
    let agent = Agent::start(&fresh_loopback());
    let head = fresh_loopback();
    closed_output_cases(
        |script| {
            let mut c = two_nodes(&agent, &head);
            c.args(["--grace", "2", "-c", script]);
            c
        },
        "mn-exec-all",
    );
}

#[test]
fn demo_ends_when_its_output_is_closed() {
    let port = 29890 + (std::process::id() % 30) as u16;
    let demo = |words: &[&str]| {
        let mut c = cmd(&multinode());
        c.env_remove("MULTINODE_SECRET")
            .args(["demo", "--nodes", "2", "--port", &port.to_string()])
            .args(words);
        c
    };
    // As the issue wrote it: whether the pipe closes before the last line or
    // after it, never a panic (101).
    let (first, status, _) = with_output(&mut demo(&[]), To::Head, To::Head);
    assert!(first.starts_with("rank "), "{first:?}");
    assert!(
        matches!(status.code(), Some(0 | SIGPIPE_CODE)),
        "demo | head -1: {status:?}"
    );
    // Endless output: the closed pipe ends the run, 141, nothing left.
    let tag = tag();
    let (first, status, _) = with_output(&mut demo(&["--", "yes", &tag]), To::Head, To::Head);
    assert_eq!(first, format!("{tag}\n"));
    assert_eq!(status.code(), Some(SIGPIPE_CODE));
    assert_nothing_left(&tag);
    let listen = format!("127.0.0.3:{port}");
    assert!(
        eventually(Duration::from_secs(10), || pids_matching(&listen)
            .is_empty()),
        "demo agents left running"
    );
}
