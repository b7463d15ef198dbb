//! The agent and `mn-ssh` between themselves: exit codes, signals, streams,
//! memory, orphans, bad input.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

fn ssh(agent: &Agent, command: &[&str]) -> std::process::Output {
    cmd(&mn_ssh())
        .arg(&agent.host)
        .args(command)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn exit_codes_and_signals_come_back() {
    let agent = Agent::start(&fresh_loopback());
    assert_eq!(ssh(&agent, &["true"]).status.code(), Some(0));
    assert_eq!(ssh(&agent, &["exit 3"]).status.code(), Some(3));
    assert_eq!(ssh(&agent, &["kill -9 $$"]).status.code(), Some(137));
    assert_eq!(ssh(&agent, &["kill -TERM $$"]).status.code(), Some(143));
    assert_eq!(
        ssh(&agent, &["kill -USR2 $$"]).status.code(),
        Some(128 + libc::SIGUSR2)
    );
    let missing = ssh(&agent, &["no-such-command-here"]);
    assert_eq!(missing.status.code(), Some(127));
    assert!(
        stderr(&missing).contains("not found"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn stdout_and_stderr_stay_apart() {
    let agent = Agent::start(&fresh_loopback());
    let out = ssh(&agent, &["echo out; echo err >&2; printf tail"]);
    assert_eq!(stdout(&out), "out\ntail");
    assert_eq!(stderr(&out), "err\n");
}

#[test]
fn output_in_pieces_of_every_size_arrives_byte_for_byte() {
    // The agent's buffer for a stream grows with what the pipe holds: a
    // byte, a pause, megabytes at once, a byte again; both streams at once.
    let agent = Agent::start(&fresh_loopback());
    let out = ssh(
        &agent,
        &[
            "printf a; printf E >&2; sleep 0.2; seq 1 400000; seq 7 9 >&2; sleep 0.2; \
           printf z; head -c 3000000 /dev/zero | tr '\\0' e >&2",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let seq: String = (1..=400000).map(|i| format!("{i}\n")).collect();
    assert_eq!(stdout(&out), format!("a{seq}z"));
    assert_eq!(stderr(&out), format!("E7\n8\n9\n{}", "e".repeat(3_000_000)));
}

#[test]
fn stdin_stream_of_100_mb_arrives_intact() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c 100000000 /dev/urandom > {}",
            data.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    let local = Command::new("sha256sum")
        .stdin(std::fs::File::open(&data).unwrap())
        .output()
        .unwrap();
    let remote = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg("sha256sum")
        .stdin(std::fs::File::open(&data).unwrap())
        .output()
        .unwrap();
    assert!(remote.status.success(), "{}", stderr(&remote));
    assert_eq!(stdout(&remote), stdout(&local));
}

#[test]
fn stdin_eof_is_forwarded() {
    let agent = Agent::start(&fresh_loopback());
    let mut child = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg("wc -c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"12345").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out).trim(), "5");
}

#[test]
fn agent_memory_stays_bounded_under_a_1_gb_upload_to_a_slow_reader() {
    let agent = Agent::start(&fresh_loopback());
    let script = format!(
        "head -c 1000000000 /dev/zero | '{}' {} 'sleep 5; cat >/dev/null; echo done'",
        mn_ssh().display(),
        agent.host
    );
    let out = sh(&script, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "done\n");
    let peak_mib = peak_rss_kib(agent.pid()) / 1024;
    assert!(peak_mib < 64, "agent peak RSS {peak_mib} MiB, limit 64 MiB");
}

#[test]
fn many_connections_at_once() {
    let agent = Agent::start(&fresh_loopback());
    let children: Vec<_> = (0..40)
        .map(|i| {
            cmd(&mn_ssh())
                .arg(&agent.host)
                .arg(format!("echo {i}; exit $(({i} % 7))"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(stdout(&out), format!("{i}\n"));
        assert_eq!(out.status.code(), Some((i % 7) as i32));
    }
}

#[test]
fn many_channels_on_one_connection() {
    let agent = Agent::start(&fresh_loopback());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = connect_as_job(&agent).await;
        let mut tasks = Vec::new();
        for i in 0..20u32 {
            let channel = conn
                .exec(
                    b"sleep 0.3; echo \"$X\"; exit $Y",
                    &[
                        ("X".into(), format!("v{i}")),
                        ("Y".into(), (i % 5).to_string()),
                    ],
                )
                .await
                .unwrap();
            tasks.push(tokio::spawn(async move {
                let mut channel = channel;
                let mut out = Vec::new();
                let mut code = None;
                while let Some(msg) = channel.wait().await {
                    match msg {
                        russh::ChannelMsg::Data { data } => out.extend_from_slice(&data),
                        russh::ChannelMsg::ExitStatus { exit_status } => code = Some(exit_status),
                        _ => {}
                    }
                }
                (out, code)
            }));
        }
        let start = Instant::now();
        for (i, task) in tasks.into_iter().enumerate() {
            let (out, code) = task.await.unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), format!("v{i}\n"));
            assert_eq!(code, Some(i as u32 % 5));
        }
        // 20 x sleep 0.3 ran at the same time, not one after another.
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        conn.close().await;
    });
}

/// The remote starts `sleep 1000` and a child of it, prints both pids, then waits.
fn start_sleepers(agent: &Agent, tag: &str) -> (std::process::Child, Vec<u32>) {
    let mut child = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg(format!(
            "sleep {tag} & echo $!; sh -c 'sleep {tag} & echo $!; wait' & wait"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pids = Vec::new();
    let mut out = child.stdout.take().unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while pids.len() < 2 {
        use std::io::Read;
        assert_eq!(out.read(&mut byte).unwrap(), 1, "remote ended early");
        if byte[0] == b'\n' {
            pids.push(String::from_utf8_lossy(&buf).trim().parse().unwrap());
            buf.clear();
        } else {
            buf.push(byte[0]);
        }
    }
    (child, pids)
}

#[test]
fn kill_9_of_mn_ssh_leaves_no_remote_process() {
    let agent = Agent::start(&fresh_loopback());
    let (mut client, pids) = start_sleepers(&agent, &sleep_tag());
    assert!(pids.iter().all(|p| alive(*p)));
    client.kill().unwrap();
    client.wait().unwrap();
    // Documented: the TCP close is seen within 1 s, then SIGTERM (sleep dies at once).
    assert!(
        eventually(Duration::from_secs(5), || pids.iter().all(|p| !alive(*p))),
        "remote processes {pids:?} survived kill -9 of mn-ssh"
    );
}

#[test]
fn a_peer_that_vanishes_without_closing_is_noticed_by_keepalive() {
    let agent = Agent::start(&fresh_loopback());
    let (mut client, pids) = start_sleepers(&agent, &sleep_tag());
    // A stopped client keeps its socket open but answers nothing.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.id() as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let start = Instant::now();
    // Documented: keepalive every 3 s, 3 unanswered, so within about 15 s.
    let gone = eventually(Duration::from_secs(20), || pids.iter().all(|p| !alive(*p)));
    let took = start.elapsed();
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(gone, "remote processes {pids:?} survived a vanished peer");
    assert!(
        took > Duration::from_secs(5),
        "ended too early ({took:?}): not by keepalive"
    );
}

/// The agent's read loop waits while a command does not read its stdin
/// (its pipe and the channel's queue are full), so it cannot see the
/// client's FIN: the connection's watch on the socket does.
#[test]
fn a_client_killed_while_its_commands_stdin_is_full_is_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = crate::agent_login::start_agent(&fresh_loopback(), &["-v"], &[], None, &log);
    let tag = sleep_tag();
    let mut client = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg(format!("echo $$; exec sleep {tag}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(client.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let pid: u32 = line.trim().parse().expect("the remote shell's pid");
    // Only now megabytes of zeros go out and fill every buffer on the way.
    // Sent before the pid is read, they can stall mn-ssh's one loop on a
    // write before it reads the pid line, and the test would wait forever.
    let mut stdin = client.stdin.take().unwrap();
    std::thread::spawn(move || {
        let zeros = vec![0u8; 1 << 16];
        while std::io::Write::write_all(&mut stdin, &zeros).is_ok() {}
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(alive(pid), "the sleeper ended early");
    client.kill().unwrap();
    client.wait().unwrap();
    let start = Instant::now();
    let gone = eventually(Duration::from_secs(8), || !alive(pid));
    let log_text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
    assert!(gone, "the sleeper {pid} survived its client: {log_text}");
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "ended after {:?}: not by the watch on the socket",
        start.elapsed()
    );
    assert!(
        log_text.contains("peer gone (TCP closed or unresponsive)"),
        "not ended by the watch on the socket: {log_text}"
    );
}

#[test]
fn a_grandchild_holding_stdout_does_not_hang_the_session() {
    let agent = Agent::start(&fresh_loopback());
    let start = Instant::now();
    let out = ssh(&agent, &["sleep 1000 & echo started; exit 4"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(stdout(&out), "started\n");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn background_jobs_end_with_the_command() {
    let agent = Agent::start(&fresh_loopback());
    let tag = sleep_tag();
    let out = ssh(
        &agent,
        &[&format!(
            "sleep {tag} >/dev/null 2>&1 & echo $!; sleep 0.2; kill -0 $! && echo alive"
        )],
    );
    assert!(out.status.success());
    let text = stdout(&out);
    let (pid, state) = text.split_once('\n').unwrap();
    assert_eq!(state, "alive\n", "the background job must have run");
    let pid: u32 = pid.trim().parse().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !alive(pid)),
        "background job {pid} survived"
    );
}

#[test]
fn signals_to_mn_ssh_reach_the_remote_command() {
    let agent = Agent::start(&fresh_loopback());
    for (sig, code) in [
        (nix::sys::signal::Signal::SIGINT, 130),
        (nix::sys::signal::Signal::SIGTERM, 143),
        (nix::sys::signal::Signal::SIGHUP, 129),
    ] {
        let mut child = cmd(&mn_ssh())
            .arg(&agent.host)
            .arg("echo ready; exec sleep 1000")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = [0u8; 6];
        use std::io::Read;
        child
            .stdout
            .as_mut()
            .unwrap()
            .read_exact(&mut line)
            .unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{sig:?}");
    }
}

#[test]
fn remote_signal_handlers_see_the_signal() {
    let agent = Agent::start(&fresh_loopback());
    let mut child = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg("trap 'echo got-int; exit 7' INT; echo ready; while :; do sleep 0.1; done")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 6];
    use std::io::Read;
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut line)
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(stdout(&out), "got-int\n");
}

#[test]
fn unreachable_host_is_255_with_a_clear_message() {
    let out = cmd(&mn_ssh())
        .arg(fresh_loopback())
        .arg("true")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("mn-ssh: error: cannot connect to"), "{err}");
}

#[test]
fn wrong_secret_is_rejected_and_named() {
    let agent = Agent::start(&fresh_loopback());
    let out = cmd(&mn_ssh())
        .env("MULTINODE_SECRET", "another-secret-0123456789")
        .arg(&agent.host)
        .arg("touch /tmp/should-not-exist-mn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255));
    let err = stderr(&out);
    assert!(err.contains("MULTINODE_SECRET"), "{err}");
    assert!(err.contains(&agent.host), "{err}");
}

#[test]
fn agent_refuses_to_start_without_a_good_secret() {
    let out = cmd(&multinode())
        .env_remove("MULTINODE_SECRET")
        .args(["agent", "--listen", &format!("{}:29922", fresh_loopback())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("MULTINODE_SECRET"),
        "{}",
        stderr(&out)
    );
    let out = cmd(&multinode())
        .env("MULTINODE_SECRET", "short")
        .args(["agent", "--listen", &format!("{}:29922", fresh_loopback())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("at least 16"), "{}", stderr(&out));
}

#[test]
fn port_in_use_is_a_clear_error() {
    let agent = Agent::start(&fresh_loopback());
    let out = cmd(&multinode())
        .args(["agent", "--listen", &agent.addr().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot listen on") && err.contains("in use"),
        "{err}"
    );
}

/// A plain agent (no JOB) given a broken topology says so at start, with the
/// line `multinode env` gives, instead of serving on until a job uses it.
#[test]
fn a_plain_agent_refuses_a_broken_hostlist_at_start() {
    let broken = "node[1-3";
    for (args, vars) in [
        (&["--hosts", broken][..], &[][..]),
        (&[][..], &[("MULTINODE_HOSTLIST", broken)][..]),
    ] {
        let mut env = cmd(&multinode());
        let expected = env.arg("env").args(args).envs(vars.iter().copied());
        let expected = stderr(&expected.output().unwrap());
        assert!(expected.contains("unmatched '['"), "{expected}");
        let mut agent = cmd(&multinode())
            .args(["agent", "--listen", &format!("{}:29922", fresh_loopback())])
            .args(args)
            .envs(vars.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let code = wait_exit(&mut agent, Duration::from_secs(10));
        let mut err = String::new();
        std::io::Read::read_to_string(&mut agent.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!((code, err), (Some(2), expected), "{args:?} {vars:?}");
    }
}

#[test]
fn missing_host_and_bad_options_are_usage_errors() {
    for args in [
        &[][..],
        &["-p"][..],
        &["--", "-oProxyCommand=x"][..],
        &["-Z", "h"][..],
    ] {
        let out = cmd(&mn_ssh()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("mn-ssh: error:"), "{err}");
    }
}

#[test]
fn working_directory_and_environment_requests_are_honoured() {
    let agent = Agent::start(&fresh_loopback());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = connect_as_job(&agent).await;
        let mut channel = conn
            .exec(
                b"pwd; printf '%s' \"$WEIRD\"",
                &[
                    ("MULTINODE_CWD".into(), "/tmp".into()),
                    ("WEIRD".into(), "a 'b' \"c\" $d \\e\nf".into()),
                ],
            )
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(msg) = channel.wait().await {
            if let russh::ChannelMsg::Data { data } = msg {
                out.extend_from_slice(&data);
            }
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "/tmp\na 'b' \"c\" $d \\e\nf"
        );
        conn.close().await;
    });
}

#[test]
fn commands_inherit_no_socket_of_the_agent() {
    let agent = Agent::start(&fresh_loopback());
    // A second connection held open while the command starts.
    let (mut holder, _) = start_sleepers(&agent, &sleep_tag());
    let out = ssh(&agent, &["ls -l /proc/$$/fd"]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let listing = stdout(&out);
    assert!(
        !listing.contains("socket:"),
        "the command holds the agent's sockets:\n{listing}"
    );
}

#[test]
fn ping_and_release_control_requests() {
    let mut agent = Agent::start(&fresh_loopback());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = connect_as_job(&agent).await;
        let reply = conn.ping().await.unwrap();
        assert_eq!(reply.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(reply.pid, agent.pid());
        conn.release().await.unwrap();
        conn.close().await;
    });
    let exited = eventually(Duration::from_secs(5), || {
        matches!(agent.child.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "the agent did not exit after release");
}

#[test]
fn a_stopping_agent_still_reports_how_commands_ended() {
    let mut agent = Agent::start(&fresh_loopback());
    let mut child = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg("echo ready; exec sleep 1000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 6];
    use std::io::Read;
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut line)
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(eventually(Duration::from_secs(10), || matches!(
        agent.child.try_wait(),
        Ok(Some(_))
    )));
}

#[test]
fn a_closed_stdout_ends_mn_ssh_and_the_remote_command() {
    let agent = Agent::start(&fresh_loopback());
    let start = Instant::now();
    let out = sh(
        &format!(
            "'{}' {} 'seq 1 100000000' | head -n 1; echo \"status ${{PIPESTATUS:-?}}\"",
            mn_ssh().display(),
            agent.host
        ),
        &[],
    );
    assert!(stdout(&out).starts_with("1\n"), "{}", stdout(&out));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(5), || pids_matching("seq 1 100000000")
            .is_empty()),
        "the remote seq survived"
    );
}

#[test]
fn secret_file_reaches_the_agents_commands() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let agent = Agent::start_with(
        &fresh_loopback(),
        29922,
        &["--secret-file", file.to_str().unwrap()],
        &[],
    );
    let out = ssh(&agent, &["echo \"${MULTINODE_SECRET_FILE:-none}\""]);
    assert_eq!(stdout(&out).trim(), file.to_str().unwrap());
}

#[test]
fn mn_ssh_help_and_version() {
    let help = cmd(&mn_ssh()).arg("--help").output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(
        stdout(&help).contains("\nUsage: mn-ssh "),
        "{}",
        stdout(&help)
    );
    let version = cmd(&mn_ssh()).arg("-V").output().unwrap();
    assert_eq!(
        stdout(&version),
        format!("mn-ssh (multinode) {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn kill_9_of_the_agent_leaves_no_command_behind() {
    let mut agent = Agent::start(&fresh_loopback());
    let tag = sleep_tag();
    let mut client = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg(format!("sleep {tag} & sh -c 'sleep {tag}; :' & wait"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 2));
    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    // Its keeper sees the agent gone and ends the command's group (SIGTERM first).
    let gone = eventually(Duration::from_secs(6), || sleepers(&tag).is_empty());
    let left = sleepers(&tag);
    for pid in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = client.kill();
    let _ = client.wait();
    assert!(gone, "left after kill -9 of the agent: {left:?}");
}

#[test]
fn a_client_that_stops_reading_for_longer_than_lost_after_does_not_lose_the_agent() {
    // mn-ssh's own output is blocked 6 s (more than the 4 s of silence after
    // which a server is lost): the agent's bytes wait, unread, on this side.
    let agent = Agent::start(&fresh_loopback());
    let script = format!(
        "'{}' {} 'head -c 20000000 /dev/zero; echo end' | (sleep 6; wc -c)",
        mn_ssh().display(),
        agent.host
    );
    let out = sh(&script, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "20000004");
    assert_eq!(stderr(&out), "");
}

/// An agent given SIGTERM ends within its grace (`--grace 1`, and 2 s
/// more for a loaded machine) while it runs a command that ignores
/// SIGTERM, one with a terminal that ignores SIGHUP too, and a forward
/// whose destination takes nothing; none of them outlives it.
#[test]
fn sigterm_ends_an_agent_within_its_grace_whatever_it_runs() {
    let host = fresh_loopback();
    let mut agent = Agent::start_with(&host, 29922, &["--grace", "1"], &[]);
    let (deaf, tty) = (sleep_tag(), sleep_tag());
    let mut clients = vec![
        cmd(&mn_ssh())
            .args([&host, &format!("trap '' TERM; sleep {deaf}")])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
        cmd(&mn_ssh())
            .args(["-tt", &host, &format!("trap '' TERM HUP; sleep {tty}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    ];
    // A destination that accepts and never reads; the forward is full.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let to = silent.local_addr().unwrap().port();
    let from = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    clients.push(
        cmd(&mn_ssh())
            .args([
                "-N",
                "-L",
                &format!("127.0.0.1:{from}:127.0.0.1:{to}"),
                &host,
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(
        &format!("127.0.0.1:{from}").parse().unwrap(),
        Duration::from_secs(10),
    );
    let mut sender = std::net::TcpStream::connect(("127.0.0.1", from)).unwrap();
    let _held = silent.accept().unwrap();
    sender.set_nonblocking(true).unwrap();
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..64 {
        let _ = std::io::Write::write(&mut sender, &chunk);
    }
    assert!(eventually(Duration::from_secs(10), || sleepers(&deaf)
        .len()
        == 1
        && sleepers(&tty).len() == 1));
    let start = Instant::now();
    signal(agent.pid(), nix::sys::signal::Signal::SIGTERM);
    let ended = wait_within(&mut agent.child, Duration::from_secs(15));
    let took = start.elapsed();
    for client in &mut clients {
        let _ = client.kill();
        let _ = client.wait();
    }
    println!(
        "SIGTERM to an agent (--grace 1) running a deaf command, a terminal, a full forward: ended in {took:?}"
    );
    assert_eq!(ended.and_then(|s| s.code()), Some(0), "after {took:?}");
    assert!(took < Duration::from_secs(3), "the agent took {took:?}");
    assert!(sleepers(&deaf).is_empty() && sleepers(&tty).is_empty());
}
