//! What an adversarial run found (issue 19) beyond the login: a dead group
//! keeper, unbounded input, secrets that are not UTF-8 or end with a
//! newline, and host names resolved one after another.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::agent_login::start_agent;
use crate::util::*;

/// The agent's group keepers (its children running `keep-groups`).
fn keepers_of(agent: u32) -> Vec<u32> {
    pids_matching("keep-groups")
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = stat.rsplit_once(") ")?.1.to_string();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(agent)
        })
        .collect()
}

fn one_keeper(agent: u32) -> u32 {
    let mut found = Vec::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            found = keepers_of(agent);
            found.len() == 1
        }),
        "one keeper per agent: {found:?}"
    );
    found[0]
}

/// `mn-ssh HOST 'sleep TAG'` in the background, once its sleeper runs.
fn sleeper(agent: &Agent, tag: &str) -> Child {
    let child = cmd(&mn_ssh())
        .args([&agent.host, &format!("sleep {tag}")])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || sleepers(tag).len() == 1));
    child
}

fn kill9(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

#[test]
fn a_dead_group_keeper_is_replaced_and_every_group_is_still_kept() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let mut agent = start_agent(&fresh_loopback(), &[], &[], None, &log);
    let (before, after) = (sleep_tag(), sleep_tag());
    let mut old_client = sleeper(&agent, &before);
    let old = one_keeper(agent.pid());
    kill9(old);
    // Noticed at once, reaped (no zombie), logged, replaced.
    let mut new = 0;
    assert!(
        eventually(Duration::from_secs(5), || {
            let now = keepers_of(agent.pid());
            new = now.first().copied().unwrap_or(0);
            now.len() == 1 && new != old
        }),
        "no new keeper after kill -9 of {old}: {}",
        log_text(&log)
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{old}")).exists(),
        "the dead keeper {old} is left a zombie"
    );
    assert!(
        log_text(&log).contains("the group keeper (multinode keep-groups) died"),
        "{}",
        log_text(&log)
    );
    // Commands run as before (they were "killed by SIGPIPE", 141).
    let out = cmd(&mn_ssh())
        .args([&agent.host, "echo still"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "still\n");
    // The new keeper keeps a group started before it and one started after:
    // kill -9 of the agent leaves neither.
    let mut new_client = sleeper(&agent, &after);
    kill9(agent.pid());
    let _ = agent.child.wait();
    assert!(
        eventually(Duration::from_secs(15), || sleepers(&before).is_empty()
            && sleepers(&after).is_empty()),
        "orphans after kill -9 of the agent: {:?} {:?}",
        sleepers(&before),
        sleepers(&after)
    );
    assert!(eventually(Duration::from_secs(10), || !alive(new)));
    let _ = old_client.wait();
    let _ = new_client.wait();
}

#[test]
fn a_keeper_that_keeps_dying_stops_the_agent_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let mut agent = start_agent(&fresh_loopback(), &[], &[], None, &log);
    let tag = sleep_tag();
    let mut client = sleeper(&agent, &tag);
    // Five deaths are replaced; the sixth within a minute stops the agent.
    for _ in 0..6 {
        let keeper = one_keeper(agent.pid());
        kill9(keeper);
        assert!(eventually(Duration::from_secs(5), || !keepers_of(
            agent.pid()
        )
        .contains(&keeper)));
    }
    let mut status = None;
    assert!(
        eventually(Duration::from_secs(15), || {
            status = agent.child.try_wait().unwrap();
            status.is_some()
        }),
        "the agent keeps serving without a keeper"
    );
    assert_eq!(status.unwrap().code(), Some(1));
    let text = log_text(&log);
    assert!(
        text.contains("died 6 times within 60 s") && text.contains("stopping the agent"),
        "{text}"
    );
    // It ended its commands on the way out.
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).is_empty()));
    let _ = client.wait();
}

/// Runs `c`, feeding `stdin` endlessly when given, and kills it if it runs
/// past 60 s or grows past 512 MiB: unbounded input must end in an error.
fn run_bounded(mut c: std::process::Command, endless_stdin: bool) -> std::process::Output {
    c.stdin(if endless_stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(mut stdin) = child.stdin.take() {
        std::thread::spawn(move || {
            let block = vec![b'y'; 64 * 1024];
            while stdin.write_all(&block).is_ok() {}
        });
    }
    let pid = child.id();
    let start = Instant::now();
    let mut peak_kib = 0;
    let ended = eventually(Duration::from_secs(60), || {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            && let Some(kib) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak_kib = peak_kib.max(kib);
        }
        peak_kib > 512 * 1024 || matches!(child.try_wait(), Ok(Some(_)))
    });
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(
        ended && peak_kib <= 512 * 1024,
        "still reading after {:?}, {peak_kib} KiB resident",
        start.elapsed()
    );
    out
}

fn assert_one_line_usage_error(out: &std::process::Output, what: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
    assert!(err.contains("larger than"), "{what}: {err}");
}

#[test]
fn unbounded_input_is_refused_with_one_line_and_exit_2() {
    let mut keygen = cmd(&multinode());
    keygen.args(["keygen", "--secret-file", "/dev/zero", "-o", "/dev/null"]);
    assert_one_line_usage_error(
        &run_bounded(keygen, false),
        "keygen --secret-file /dev/zero",
    );

    let mut agent = cmd(&multinode());
    agent.args(["agent", "--listen", &format!("{}:29922", fresh_loopback())]);
    agent
        .env("MULTINODE_SECRET_FILE", "/dev/zero")
        .env_remove("MULTINODE_SECRET");
    assert_one_line_usage_error(
        &run_bounded(agent, false),
        "agent with MULTINODE_SECRET_FILE=/dev/zero",
    );

    let mut agent = cmd(&multinode());
    agent.args([
        "agent",
        "--secret-file",
        "/dev/urandom",
        "--listen",
        &format!("{}:29922", fresh_loopback()),
    ]);
    assert_one_line_usage_error(
        &run_bounded(agent, false),
        "agent --secret-file /dev/urandom",
    );

    let mut ssh = cmd(&mn_ssh());
    ssh.args(["127.0.0.1", "true"])
        .env("MULTINODE_SECRET_FILE", "/dev/zero")
        .env_remove("MULTINODE_SECRET");
    assert_one_line_usage_error(
        &run_bounded(ssh, false),
        "mn-ssh with MULTINODE_SECRET_FILE=/dev/zero",
    );

    for file in ["/dev/zero", "/dev/urandom", "/dev/stdin"] {
        let mut hosts = cmd(&multinode());
        hosts.args(["hosts", "--no-resolve", "--hostfile", file]);
        assert_one_line_usage_error(
            &run_bounded(hosts, file == "/dev/stdin"),
            &format!("hosts --hostfile {file}"),
        );
    }

    let mut exec_all = cmd(&mn_exec_all());
    exec_all.args(["--hosts", "127.0.0.1", "-"]);
    assert_one_line_usage_error(
        &run_bounded(exec_all, true),
        "mn-exec-all - with an endless stdin",
    );
    let mut exec_all = cmd(&mn_exec_all());
    exec_all.args(["--hosts", "127.0.0.1", "/dev/zero"]);
    assert_one_line_usage_error(&run_bounded(exec_all, false), "mn-exec-all /dev/zero");
}

/// A secret that is not UTF-8 is its bytes on both sides, and one with a
/// trailing newline is the same secret, from the variable or from a file.
#[test]
fn secrets_are_bytes_and_trailing_newlines_do_not_count_on_either_side() {
    let bytes: &[u8] = b"\xff\xfe not UTF-8 \xc3\x28 secret bytes";
    let mut with_newline = bytes.to_vec();
    with_newline.extend_from_slice(b"\r\n");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let agent = start_agent(
        &fresh_loopback(),
        &[],
        &[("MULTINODE_SECRET", OsStr::from_bytes(bytes))],
        None,
        &log,
    );
    let file = dir.path().join("secret");
    std::fs::write(&file, &with_newline).unwrap();
    // A path that is not UTF-8 names a file all the same.
    let odd_path = dir.path().join(OsStr::from_bytes(b"secret-\xff"));
    std::fs::write(&odd_path, &with_newline).unwrap();
    let run = |var: Option<&[u8]>, file: Option<&std::path::Path>| {
        let mut c = cmd(&mn_ssh());
        c.env_remove("MULTINODE_SECRET")
            .env("MULTINODE_TRANSPORT", "agent")
            .args([&agent.host, "echo in"])
            .stdin(Stdio::null());
        if let Some(v) = var {
            c.env("MULTINODE_SECRET", OsStr::from_bytes(v));
        }
        if let Some(f) = file {
            c.env("MULTINODE_SECRET_FILE", f);
        }
        c.output().unwrap()
    };
    for (what, out) in [
        ("the same bytes", run(Some(bytes), None)),
        ("the bytes and a newline", run(Some(&with_newline), None)),
        ("a file of the bytes and a newline", run(None, Some(&file))),
        (
            "the same file at a path that is not UTF-8",
            run(None, Some(&odd_path)),
        ),
    ] {
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
        assert_eq!(stdout(&out), "in\n", "{what}");
    }
    // Other bytes are another secret: refused, and named.
    let other = run(Some(b"\xff\xfe not UTF-8 \xc3\x28 secret bytez"), None);
    assert_eq!(other.status.code(), Some(255));
    assert!(
        stderr(&other).contains("not an agent of this job"),
        "{}",
        stderr(&other)
    );
    // An agent started from the file with its newline is the same agent.
    let agent2 = start_agent(
        &fresh_loopback(),
        &["--secret-file", file.to_str().unwrap()],
        &[],
        None,
        &dir.path().join("agent2.log"),
    );
    let mut c = cmd(&mn_ssh());
    c.env_remove("MULTINODE_SECRET")
        .env("MULTINODE_SECRET", OsStr::from_bytes(bytes))
        .args([&agent2.host, "true"])
        .stdin(Stdio::null());
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// `multinode hosts` on 100 names whose every DNS answer takes 1 s, through
/// the C library's resolver and a real (tiny, slow) DNS server in a private
/// network namespace: one after another that is 100 s; at once, a few.
#[test]
fn host_names_are_resolved_at_once_through_a_slow_dns_server() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/with-slow-dns.sh");
    let mut child = cmd(&script)
        .arg("1")
        .arg(multinode())
        .args(["hosts", "--hosts", "n[0000-0099]", "--format", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("tests/fixtures/with-slow-dns.sh (unshare, ip, python3)");
    let start = Instant::now();
    let ended = eventually(Duration::from_secs(40), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    assert!(
        ended,
        "100 names at 1 s each still resolving after {took:?}: one after another?"
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 100);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["host"], format!("n{i:04}"));
        assert_eq!(row["address"], format!("10.77.0.{}", i + 1), "{row}");
    }
    // 64 names at once: two rounds of lookups, the head's, and this machine's name.
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let report = stderr(&out);
    let most: usize = number_after(&report, "at most ")
        .unwrap_or_else(|| panic!("no report from the DNS server: {report}"));
    assert!(
        most >= 32,
        "the DNS server saw at most {most} queries at once"
    );
}

/// Huge numbers from outside (issue 51, finding 9) are one line and exit
/// code 2, never a panic nor an allocation that aborts; a node's processes
/// are capped (4,096) before any is started: a slot count of 100000 with
/// `--nproc-per-node slots` started spawning 100,001 processes.
#[test]
fn huge_counts_are_one_line_and_exit_2_before_anything_starts() {
    let one_line = |out: &std::process::Output, what: &str| {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    };
    let out = cmd(&multinode())
        .env("LOCAL_RANK", "18446744073709551615")
        .args(["bind", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    one_line(&out, "bind with LOCAL_RANK=2^64-1");
    assert!(
        stderr(&out).contains("LOCAL_RANK=18446744073709551615"),
        "{}",
        stderr(&out)
    );
    let host = fresh_loopback();
    for (hosts, count) in [
        (host.clone(), "18446744073709551615"),
        (
            format!("{host},{}", fresh_loopback()),
            "1,1x18446744073709551615",
        ),
        (host.clone(), "1000000000"),
        (format!("{host}:100000"), "slots"),
    ] {
        let start = Instant::now();
        let out = cmd(&mn_exec_all())
            .args(["--hosts", &hosts, "--node-rank", "0", "--bind", "none"])
            .args(["--nproc-per-node", count, "-c", "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let what = format!("--hosts {hosts} --nproc-per-node {count}");
        one_line(&out, &what);
        let err = stderr(&out);
        assert!(
            err.contains("4096") || err.contains("is not a list of process counts"),
            "{what}: {err}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: {:?}",
            start.elapsed()
        );
    }
}
