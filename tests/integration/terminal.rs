//! Terminals through the agent (issue 31): a real terminal (`script`'s pty)
//! drives `mn-ssh -tt` and OpenSSH's `ssh -tt` into an agent's login shell.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::util::*;

/// A client running under `script`: a real terminal of 100x30, its output
/// collected, keys written as bytes.
pub(crate) struct Term {
    pub(crate) child: Child,
    stdin: ChildStdin,
    out: Arc<Mutex<Vec<u8>>>,
}

impl Term {
    /// `client` is a shell command line; `resize_flag` appearing makes the
    /// local terminal 61x23 (the client then gets SIGWINCH).
    pub(crate) fn start(client: &str, resize_flag: &Path) -> Term {
        let inner = format!(
            "stty cols 100 rows 30; \
             (while [ ! -e {flag} ]; do sleep 0.1; done; stty cols 61 rows 23 </dev/tty) & \
             exec {client}",
            flag = resize_flag.display()
        );
        let mut child = cmd(Path::new("timeout"))
            .args(["60", "script", "-qfec", &inner, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("script (Debian package bsdutils)");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Term { child, stdin, out }
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    pub(crate) fn send(&mut self, keys: &str) {
        self.stdin.write_all(keys.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Waits until the output holds `what` `times` times.
    pub(crate) fn expect(&self, what: &str, times: usize) {
        assert!(
            eventually(Duration::from_secs(20), || self
                .text()
                .matches(what)
                .count()
                >= times),
            "no {what:?} (x{times}) in the terminal:\n{}",
            self.text()
        );
    }
}

/// The session every client goes through: a pts, the size and a resize,
/// Ctrl-C ending the foreground `sleep` but not the shell, `exit 7`.
fn drive(client: &str) {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("resize");
    let mut term = Term::start(client, &flag);
    term.send("echo st''art; tty; stty size\r");
    term.expect("start\r\n", 1);
    term.expect("30 100\r\n", 1);
    assert!(term.text().contains("\r\n/dev/pts/"), "{}", term.text());
    std::fs::write(&flag, "").unwrap();
    // The local resize reaches the remote terminal.
    assert!(
        eventually(Duration::from_secs(20), || {
            term.send("stty size\r");
            std::thread::sleep(Duration::from_millis(300));
            term.text().contains("23 61\r\n")
        }),
        "the remote size did not follow:\n{}",
        term.text()
    );
    let tag = sleep_tag();
    term.send(&format!("sleep {tag}\r"));
    assert!(eventually(Duration::from_secs(10), || !sleepers(&tag).is_empty()));
    term.send("\x03");
    assert!(
        eventually(Duration::from_secs(10), || sleepers(&tag).is_empty()),
        "Ctrl-C did not end the remote sleep"
    );
    term.send("echo after=$?\r");
    term.expect("after=130\r\n", 1);
    term.send("exit 7\r");
    let status = term.child.wait().unwrap();
    assert_eq!(status.code(), Some(7), "{}", term.text());
}

/// `ssh -tt -i KEY` into `agent` with the job's derived key.
fn openssh_client(agent: &Agent, dir: &Path) -> String {
    format!(
        "ssh -tt {} {}",
        openssh_options(agent, dir).join(" "),
        agent.host
    )
}

#[test]
fn mn_ssh_tt_gives_a_login_shell_with_a_terminal() {
    let agent = Agent::start(&fresh_loopback());
    drive(&format!("{} -tt {}", mn_ssh().display(), agent.host));
}

#[test]
fn openssh_ssh_tt_gives_a_login_shell_with_a_terminal() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    drive(&openssh_client(&agent, dir.path()));
}

/// A terminal session's keys and screen are read and written on mn-ssh's
/// runtime thread, through descriptions of the terminal of its own (no
/// `mn-stdin`/`mn-stdio` thread to hop through a keystroke, each way); a
/// screenful too large for the terminal at once waits for room and comes
/// whole; the description mn-ssh shares with its shell stays blocking.
#[test]
fn mn_ssh_tt_relays_the_terminal_on_its_own_thread_and_leaves_it_blocking() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let client = format!("{} -tt {}", mn_ssh().display(), agent.host);
    let script = dir.path().join("session.sh");
    std::fs::write(
        &script,
        format!(
            "{client}\n\
             echo \"mn-ssh exited $?\"\n\
             python3 -c 'import fcntl, os; \
             print(\"after: nonblock=%d\" % bool(fcntl.fcntl(0, fcntl.F_GETFL) & os.O_NONBLOCK))'\n"
        ),
    )
    .unwrap();
    let mut term = Term::start(
        &format!("sh {}", script.display()),
        &dir.path().join("never"),
    );
    term.send("echo st''art\r");
    term.expect("start\r\n", 1);
    let pids: Vec<u32> = pids_matching(&client)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim_end() == client)
        })
        .collect();
    assert_eq!(pids.len(), 1, "{client}: {pids:?}");
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", pids[0]))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .collect();
    assert!(
        !threads.iter().any(|t| t == "mn-stdin" || t == "mn-stdio"),
        "threads of mn-ssh: {threads:?}"
    );
    term.send("seq 1 200000; echo do''ne\r");
    term.expect("199999\r\n200000\r\ndone\r\n", 1);
    term.send("exit 3\r");
    term.expect("mn-ssh exited 3\r\n", 1);
    term.expect("after: nonblock=0\r\n", 1);
    let status = term.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", term.text());
}

#[test]
fn a_killed_terminal_client_leaves_nothing_on_the_node() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    for client in [
        format!("{} -tt {}", mn_ssh().display(), agent.host),
        openssh_client(&agent, dir.path()),
    ] {
        let mut term = Term::start(&client, &dir.path().join("never"));
        let tag = sleep_tag();
        // A foreground job, and one in the background (a group of its own).
        term.send(&format!("sleep {tag} & sleep {tag}\r"));
        assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 2));
        let pids: Vec<u32> = pids_matching(&client)
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    String::from_utf8_lossy(&c).replace('\0', " ").trim_end() == client
                })
            })
            .collect();
        assert_eq!(pids.len(), 1, "{client}: {pids:?}");
        signal(pids[0], nix::sys::signal::Signal::SIGKILL);
        assert!(
            eventually(Duration::from_secs(15), || sleepers(&tag).is_empty()),
            "{client}: left {:?}",
            sleepers(&tag)
        );
        let _ = term.child.kill();
        let _ = term.child.wait();
    }
}

#[test]
fn mn_ssh_t_without_a_terminal_runs_without_one() {
    let agent = Agent::start(&fresh_loopback());
    let out = cmd(&mn_ssh())
        .args(["-t", &agent.host, "tty"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "not a tty\n");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Pseudo-terminal will not be allocated because stdin is not a terminal.\n"
    );
    let forced = cmd(&mn_ssh())
        .args(["-tt", &agent.host, "tty; exit 3"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(forced.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&forced.stdout).starts_with("/dev/pts/"),
        "{forced:?}"
    );
}

#[test]
fn a_killed_agent_leaves_no_job_of_a_terminal_behind() {
    let mut agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let mut term = Term::start(
        &format!("{} -tt {}", mn_ssh().display(), agent.host),
        &dir.path().join("never"),
    );
    let tag = sleep_tag();
    // A background job that ignores the terminal's hangup, in a group of its own.
    term.send(&format!(
        "nohup sleep {tag} >/dev/null 2>&1 & sleep {tag}\r"
    ));
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 2));
    agent.child.kill().unwrap();
    assert!(
        eventually(Duration::from_secs(15), || sleepers(&tag).is_empty()),
        "left {:?}",
        sleepers(&tag)
    );
    let _ = term.child.kill();
    let _ = term.child.wait();
}

/// `input` on a pipe to `client` (a shell command line), then EOF; its
/// stdout and exit code, within 30 s.
fn piped(client: &str, input: &str) -> (String, Option<i32>) {
    let mut child = cmd(Path::new("timeout"))
        .args(["30", "sh", "-c", client])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (stdout(&out), out.status.code())
}

/// OpenSSH's client to the private `sshd` of openssh.rs.
fn ssh_to_sshd(sshd: &crate::openssh::Sshd, flags: &str) -> String {
    format!(
        "ssh -F {} {flags} 127.0.0.1",
        sshd.path("ssh_config").display()
    )
}

/// A `shell` request without a terminal (`ssh -T HOST`, commands on stdin):
/// sshd runs the user's login shell, at home; so does the agent, for
/// OpenSSH's `ssh -T` and for `mn-ssh -T`.
#[test]
fn a_shell_without_a_terminal_is_the_login_shell_as_under_sshd() {
    let script = "echo \"$0\"; pwd; echo done\n";
    let sshd = crate::openssh::Sshd::start();
    let (reference, code) = piped(&ssh_to_sshd(&sshd, "-T"), script);
    assert_eq!(code, Some(0), "{reference}");
    assert!(
        reference.starts_with('-'),
        "sshd's is a login shell: {reference}"
    );
    assert!(reference.ends_with("\ndone\n"), "{reference}");
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let openssh = openssh_client(&agent, dir.path()).replace(" -tt ", " -T ");
    for client in [format!("{} -T {}", mn_ssh().display(), agent.host), openssh] {
        assert_eq!(
            piped(&client, script),
            (reference.clone(), Some(0)),
            "{client}"
        );
    }
}

/// With a terminal, the client's EOF (stdin a pipe, `-tt`) does not end
/// the session: sshd keeps the pty open and the shell reads on, until it
/// exits. The agent does the same: the command still runs after the EOF,
/// prints and gives its status.
#[test]
fn with_a_terminal_the_clients_eof_leaves_the_shell_running_as_under_sshd() {
    let input = "sleep 1; echo af''ter; exit 5\n";
    let sshd = crate::openssh::Sshd::start();
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    for client in [
        ssh_to_sshd(&sshd, "-tt"),
        format!("{} -tt {}", mn_ssh().display(), agent.host),
        openssh_client(&agent, dir.path()),
    ] {
        let (out, code) = piped(&client, input);
        assert_eq!(code, Some(5), "{client}: {out}");
        assert!(out.contains("after\r\n"), "{client}: {out}");
    }
}

/// The one-letter state of process `pid` (`S` sleeping, `T` stopped), if it is there.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The shell's job control through `client`: Ctrl-Z stops the foreground
/// job and the shell says so, `jobs` lists it, `bg` resumes it, `fg` brings
/// it back, and Ctrl-C then ends it (`$?` 130).
fn job_control(client: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut term = Term::start(client, &dir.path().join("never"));
    term.send("echo st''art\r");
    term.expect("start\r\n", 1);
    let tag = sleep_tag();
    term.send(&format!("sleep {tag}\r"));
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 1));
    let pid = sleepers(&tag)[0];
    term.send("\x1a");
    term.expect("Stopped", 1);
    assert!(
        eventually(Duration::from_secs(5), || state(pid) == Some('T')),
        "{client}: Ctrl-Z did not stop the job: {:?}\n{}",
        state(pid),
        term.text()
    );
    term.send("jobs\r");
    term.expect("Stopped", 2);
    term.send("bg\r");
    assert!(
        eventually(Duration::from_secs(5), || state(pid) == Some('S')),
        "{client}: bg did not resume the job: {:?}\n{}",
        state(pid),
        term.text()
    );
    // In the foreground again, the job gets the terminal's Ctrl-C (in the
    // background it would not: the shell would).
    term.send("fg\r");
    std::thread::sleep(Duration::from_millis(500));
    term.send("\x03");
    assert!(
        eventually(Duration::from_secs(10), || sleepers(&tag).is_empty()),
        "{client}: Ctrl-C after fg did not end the job\n{}",
        term.text()
    );
    term.send("echo af''ter=$?\r");
    term.expect("after=130\r\n", 1);
    term.send("exit 0\r");
    let status = term.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{client}\n{}", term.text());
}

/// Job control as under sshd (the reference, first), through `mn-ssh -tt`
/// and OpenSSH's `ssh -tt` to an agent: the pty is the controlling terminal
/// of the shell's session, each job a process group of its own.
#[test]
fn ctrl_z_bg_and_fg_work_as_under_sshd() {
    let sshd = crate::openssh::Sshd::start();
    job_control(&ssh_to_sshd(&sshd, "-tt"));
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    job_control(&format!("{} -tt {}", mn_ssh().display(), agent.host));
    job_control(&openssh_client(&agent, dir.path()));
}

/// Full-screen programs through `client` (TERM=xterm): `top` draws its
/// screen and quits on `q`; `vi` edits a file and writes it on `:wq`.
fn full_screen(client: &str, file: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let mut term = Term::start(
        &format!("env TERM=xterm {client}"),
        &dir.path().join("never"),
    );
    term.send("echo st''art $TERM\r");
    term.expect("start xterm\r\n", 1);
    term.send("top -d 1\r");
    term.expect("load average", 1);
    term.send("q");
    back_at_the_shell(&mut term, "top", client);
    term.send(&format!("vi {}\r", file.display()));
    std::thread::sleep(Duration::from_millis(500));
    term.send("ihello from vi\x1b:wq\r");
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_to_string(file)
            .is_ok_and(|t| t == "hello from vi\n")),
        "{client}: vi did not write the file\n{}",
        term.text()
    );
    back_at_the_shell(&mut term, "vi", client);
    term.send("exit 0\r");
    let status = term.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{client}\n{}", term.text());
}

/// Waits until the shell, not the full-screen `program` that was quitting,
/// reads a line and prints `program=0`: a program flushes typeahead as it
/// quits, so the line is sent again until the shell has it.
fn back_at_the_shell(term: &mut Term, program: &str, client: &str) {
    let split = format!("{}''{}", &program[..1], &program[1..]);
    let marker = format!("{program}=0\r\n");
    assert!(
        (0..10).any(|_| {
            term.send(&format!("echo {split}=$?\r"));
            eventually(Duration::from_secs(2), || term.text().contains(&marker))
        }),
        "{client}: no {marker:?} after {program} quit\n{}",
        term.text()
    );
}

#[test]
fn top_and_vi_run_full_screen() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    full_screen(
        &format!("{} -tt {}", mn_ssh().display(), agent.host),
        &dir.path().join("mn-ssh.txt"),
    );
    full_screen(
        &openssh_client(&agent, dir.path()),
        &dir.path().join("openssh.txt"),
    );
}

/// `mn-ssh`'s pid among the processes whose command line holds `needle`
/// (the shell that started it holds it too).
fn mn_ssh_pid(needle: &str) -> Option<u32> {
    pids_matching(needle).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            c.split(|&b| b == 0)
                .next()
                .is_some_and(|arg0| arg0.ends_with(b"mn-ssh"))
        })
    })
}

#[test]
fn the_local_terminal_comes_back_from_raw_mode_on_every_exit_path() {
    let mut agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // How each session ends, and the exit code mn-ssh then gives.
    type End = fn(u32, &mut Agent, &Path);
    let ends: [(&str, End, i32); 4] = [
        (
            "the remote command's end",
            |_, _, go| std::fs::write(go, "").unwrap(),
            3,
        ),
        (
            "SIGTERM, sent on",
            |pid, _, _| signal(pid, nix::sys::signal::Signal::SIGTERM),
            143,
        ),
        (
            "SIGHUP, sent on",
            |pid, _, _| signal(pid, nix::sys::signal::Signal::SIGHUP),
            129,
        ),
        (
            "the connection lost (the agent killed)",
            |_, agent, _| {
                agent.child.kill().unwrap();
                agent.child.wait().unwrap();
            },
            255,
        ),
    ];
    let go = d.join("go");
    for (i, (how, end, want)) in ends.into_iter().enumerate() {
        let tag = sleep_tag();
        let remote = if want == 3 {
            // Until the test says: the session outlasts the check that it is raw.
            format!(
                ": {tag}; while [ ! -e {} ]; do sleep 0.1; done; exit 3",
                go.display()
            )
        } else {
            format!("sleep {tag}")
        };
        let needle = format!("-tt {} {remote}", agent.host);
        let client = format!(
            "sh -c 'tty >{d}/tty{i}; stty -g >{d}/before{i}; {mn_ssh} -tt {host} \"{remote}\"; \
             echo $? >{d}/rc{i}; stty -g >{d}/after{i}'",
            d = d.display(),
            mn_ssh = mn_ssh().display(),
            host = agent.host,
        );
        let mut term = Term::start(&client, &d.join("never"));
        let pid = {
            let mut pid = None;
            assert!(
                eventually(Duration::from_secs(10), || {
                    pid = mn_ssh_pid(&needle);
                    pid.is_some() && (want == 3 || !sleepers(&tag).is_empty())
                }),
                "{how}: no session"
            );
            pid.unwrap()
        };
        let tty = std::fs::read_to_string(d.join(format!("tty{i}"))).unwrap();
        let before = std::fs::read_to_string(d.join(format!("before{i}"))).unwrap();
        // Raw while the session lasts.
        let during = eventually(Duration::from_secs(5), || {
            let now = cmd(Path::new("stty"))
                .args(["-g", "-F", tty.trim()])
                .output()
                .unwrap();
            String::from_utf8_lossy(&now.stdout) != before
        });
        assert!(
            during,
            "{how}: the local terminal was never put in raw mode"
        );
        end(pid, &mut agent, &go);
        let status = term.child.wait().unwrap();
        assert!(status.success(), "{how}: {}", term.text());
        let rc = std::fs::read_to_string(d.join(format!("rc{i}"))).unwrap();
        assert_eq!(rc.trim(), want.to_string(), "{how}: {}", term.text());
        let after = std::fs::read_to_string(d.join(format!("after{i}"))).unwrap();
        assert_eq!(
            after, before,
            "{how}: the terminal's modes did not come back"
        );
    }
}

#[test]
fn a_terminal_shell_ends_on_the_third_sigterm_and_on_the_first_sighup() {
    use nix::sys::signal::Signal;
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let needle = format!("-tt {}", agent.host);
    for (sig, sent, want) in [(Signal::SIGTERM, 3, 143), (Signal::SIGHUP, 1, 129)] {
        let mut term = Term::start(
            &format!("sh -c '{} {needle}; echo rc=$?'", mn_ssh().display()),
            &dir.path().join("never"),
        );
        term.send("echo re''ady\r");
        term.expect("ready\r\n", 1);
        let pid = mn_ssh_pid(&needle).expect("mn-ssh runs");
        for n in 1..=sent {
            if n > 1 {
                // The interactive shell ignored the one before.
                std::thread::sleep(Duration::from_millis(300));
                assert!(
                    mn_ssh_pid(&needle).is_some(),
                    "{sig}: mn-ssh ended after {} signal(s)",
                    n - 1
                );
            }
            signal(pid, sig);
        }
        term.expect(&format!("rc={want}"), 1);
        let _ = term.child.wait();
    }
}
