//! Restarts, spares and the health check (docs/restarts.md), on agents at
//! loopback addresses: node 0 is this machine, nodes 1.. are agents.

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use crate::util::*;

/// What is left to read of a child's piped stdout or stderr, once it has
/// ended.
fn all_of(pipe: Option<impl Read>) -> String {
    let mut text = String::new();
    pipe.expect("piped").read_to_string(&mut text).unwrap();
    text
}

fn hosts_of(attempt: &serde_json::Value) -> Vec<String> {
    attempt["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_string())
        .collect()
}

/// exec_all on the cluster's head with `flags` (words without spaces) and
/// `args`, no stdin, its stdout and stderr piped: it runs while the test
/// acts on the nodes.
fn spawn_exec_all(cluster: &Cluster, flags: &str, args: &[&str]) -> std::process::Child {
    cluster
        .command(&mn_exec_all())
        .args(flags.split_whitespace())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A spawned exec_all's exit code (it must end within `limit`), stdout and
/// stderr.
fn ended(child: &mut std::process::Child, limit: Duration) -> (i32, String, String) {
    let code = wait_exit(child, limit).expect("exec_all must end");
    (
        code,
        all_of(child.stdout.take()),
        all_of(child.stderr.take()),
    )
}

/// An agent stopped with SIGSTOP: its kernel still accepts and acknowledges,
/// nothing of it runs. Continued when dropped, whatever the test found.
struct Frozen(u32);

impl Frozen {
    fn agent(agent: &Agent) -> Self {
        signal(agent.pid(), nix::sys::signal::Signal::SIGSTOP);
        Frozen(agent.pid())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // Not `signal`: a panic here, while a failed assertion unwinds, would abort.
        let pid = nix::unistd::Pid::from_raw(self.0 as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
    }
}

/// Asserts that every `sleep TAG` has ended within `limit`.
fn assert_no_sleeper_left(tag: &str, limit: Duration) {
    assert!(
        eventually(limit, || sleepers(tag).is_empty()),
        "{:?}",
        sleepers(tag)
    );
}

/// What every node prints: `RESTART RANK NNODES NOSLOTS WHERE`.
const SHOW: &str = "echo \"attempt=$MULTINODE_RESTART_COUNT/$MULTINODE_MAX_RESTARTS rank=$RANK \
                    nnodes=$MULTINODE_NNODES hosts=$MULTINODE_HOSTLIST_NOSLOTS on=${AGENT_ID:-head}\"";

#[test]
fn a_lost_node_is_replaced_by_the_spare_and_the_job_ends_0() {
    let mut cluster = Cluster::start(5);
    let tag = sleep_tag();
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let script =
        format!("{SHOW}; [ \"$MULTINODE_RESTART_COUNT\" = 0 ] && exec sleep {tag}; exit 0");
    let mut child = spawn_exec_all(
        &cluster,
        "--spares 1 --max-restarts 2 --grace 1",
        &["--report", report_path.to_str().unwrap(), "-c", &script],
    );
    // Attempt 0 runs on the first four nodes only: the fifth is the spare.
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 4));
    let victim = &mut cluster.agents[1]; // hosts[2], rank 2
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    let (code, out, err) = ended(&mut child, Duration::from_secs(30));
    assert_eq!(code, 0, "{out}\n{err}");

    let h = &cluster.hosts;
    let attempt0 = [&h[0], &h[1], &h[2], &h[3]].map(|s| s.as_str()).join(",");
    let attempt1 = [&h[0], &h[1], &h[3], &h[4]].map(|s| s.as_str()).join(",");
    for rank in 0..4 {
        let on = |i: usize| {
            if i == 0 {
                "head".to_string()
            } else {
                h[i].clone()
            }
        };
        let first = [0, 1, 2, 3][rank];
        let second = [0, 1, 3, 4][rank];
        assert!(
            out.contains(&format!(
                "attempt=0/2 rank={rank} nnodes=4 hosts={attempt0} on={}",
                on(first)
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "attempt=1/2 rank={rank} nnodes=4 hosts={attempt1} on={}",
                on(second)
            )),
            "{out}"
        );
    }
    assert!(
        err.contains(&format!("attempt 0: rank 2 ({}) lost; {} excluded (lost), spare {} as rank 3; restart 1 on 4 node(s)", h[2], h[2], h[4])),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "attempt 0: rank 2 ({}) lost, {} excluded; attempt 1: succeeded",
            h[2], h[2]
        )),
        "{err}"
    );

    let json = report(&report_path);
    assert_eq!(json["exit_code"], 0);
    let attempts = json["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{json}");
    assert_eq!(
        hosts_of(&attempts[0]),
        [&h[0], &h[1], &h[2], &h[3]].map(String::clone)
    );
    assert_eq!(
        hosts_of(&attempts[1]),
        [&h[0], &h[1], &h[3], &h[4]].map(String::clone)
    );
    assert_eq!(attempts[0]["verdict"]["rank"], 2);
    assert_eq!(attempts[0]["verdict"]["how"], "lost");
    assert_eq!(attempts[0]["excluded"][0]["host"], h[2].as_str());
    assert_eq!(attempts[0]["excluded"][0]["why"], "lost");
    assert_eq!(attempts[0]["then"], "restart");
    assert!(attempts[0]["restart_s"].is_null());
    assert!(attempts[1]["restart_s"].as_f64().unwrap() > 0.0, "{json}");
    assert_eq!(attempts[1]["then"], "succeeded");
    // The last attempt's nodes are the report's nodes.
    assert_eq!(json["nodes"][3]["host"], h[4].as_str());
    // Nothing of attempt 0 is left but what the dead agent could not end.
    assert!(eventually(Duration::from_secs(5), || sleepers(&tag).len() <= 1));
    for pid in sleepers(&tag) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[test]
fn a_program_failing_on_whichever_node_holds_rank_2_stops_after_three_attempts() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let out = cluster.exec_all(&[
        "--spares",
        "1",
        "--max-restarts",
        "10",
        "--grace",
        "1",
        "--report",
        report_path.to_str().unwrap(),
        "-c",
        "if [ $RANK = 2 ]; then sleep 0.3; echo 'ValueError: bad batch' >&2; exit 3; fi; sleep 30",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let json = report(&report_path);
    let attempts = json["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{json}");
    let h = &cluster.hosts;
    // Attempt 1: the same node failed first again, so it is excluded once.
    assert_eq!(attempts[1]["excluded"][0]["host"], h[2].as_str());
    assert_eq!(
        attempts[1]["excluded"][0]["why"],
        "failed first in two attempts in a row"
    );
    // Attempt 2: rank 2 is another node, and fails the same way: the program.
    assert_eq!(attempts[2]["verdict"]["host"], h[3].as_str());
    let stop = format!(
        "the fault is in the program, not a node: exit 3 first on {} and then on {}",
        h[2], h[3]
    );
    assert_eq!(attempts[2]["then"], stop.as_str());
    assert!(err.contains(&stop), "{err}");
    assert!(err.contains("ValueError: bad batch"), "{err}");
}

#[test]
fn a_node_failing_the_health_check_is_skipped_at_the_start() {
    let cluster = Cluster::start(4);
    let h = &cluster.hosts;
    let check = format!(
        "[ \"${{AGENT_ID:-head}}\" != {} ] || {{ echo 'GPU 0: Xid 79' >&2; exit 1; }}",
        h[2]
    );
    let out = cluster.exec_all(&["--spares", "1", "--health-check", &check, "-c", SHOW]);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{text}\n{err}");
    assert!(
        err.contains(&format!("health check: {} failed; excluded", h[2])),
        "{err}"
    );
    assert!(
        err.contains("GPU 0: Xid 79"),
        "the check's output is shown: {err}"
    );
    let hosts = [&h[0], &h[1], &h[3]].map(|s| s.as_str()).join(",");
    assert!(
        text.contains(&format!(
            "attempt=0/0 rank=2 nnodes=3 hosts={hosts} on={}",
            h[3]
        )),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("attempt=")).count(),
        3,
        "{text}"
    );

    // A health check that fails on the head stops the run: it cannot be
    // replaced. The report says so, with the check's run as its nodes.
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let out = cluster.exec_all(&[
        "--spares",
        "1",
        "--report",
        report_path.to_str().unwrap(),
        "--health-check",
        "[ -n \"$AGENT_ID\" ] || { echo 'no GPU here' >&2; exit 3; }",
        "-c",
        SHOW,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let stop = format!(
        "the head ({}) failed the health check; it runs exec_all and cannot be replaced",
        h[0]
    );
    assert!(
        err.contains(&format!("attempt 0: not started: {stop}")),
        "{err}"
    );
    assert!(
        err.contains("no GPU here"),
        "the check's output is shown: {err}"
    );
    assert!(!stdout(&out).contains("attempt="), "the job did not run");
    let json = report(&report_path);
    assert_eq!(json["exit_code"], 1, "{json}");
    let attempts = json["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{json}");
    assert_eq!(attempts[0]["health_failed"], serde_json::json!([h[0]]));
    assert_eq!(attempts[0]["then"], stop.as_str());
    assert_eq!(attempts[0]["failure"], "not started");
    // The report's nodes are the check's: the head's ended with its code.
    let head = &json["nodes"][0];
    assert_eq!(head["host"], h[0].as_str(), "{json}");
    assert_eq!(head["exit"], 3, "{json}");
    assert_eq!(head["last_lines"], serde_json::json!(["no GPU here"]));
}

#[test]
fn the_reference_script_with_spares_from_the_environment_counts_the_working_nodes() {
    let cluster = Cluster::start(4);
    let dir = tempfile::tempdir().unwrap();
    let helper_dir = dir.path().join("multinode");
    let install = cmd(&multinode())
        .args(["install-helper", helper_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(install.status.success(), "{}", stderr(&install));
    // The reference example, with torchrun replaced by what it would get.
    let script = format!(
        ". {}/generic-helper\n\
         NNODES=$(echo \"$MULTINODE_HOSTLIST_NOSLOTS\" | awk -F, '{{print NF}}')\n\
         echo \"spares=$MULTINODE_SPARE_HOSTLIST\"\n\
         exec_all - \"$MULTINODE_NODE_IP\" \"$NNODES\" <<'EOF'\n\
         echo \"torchrun --nnodes=$2 --node-rank=$RANK --master-addr=$1 attempt=$MULTINODE_RESTART_COUNT\"\n\
         EOF\n",
        helper_dir.display()
    );
    let out = cluster
        .command(std::path::Path::new("/bin/sh"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                multinode().parent().unwrap().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .env("MULTINODE_SPARES", "1")
        .env("MULTINODE_MAX_RESTARTS", "2")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(
        text.contains(&format!("spares={}:2", cluster.hosts[3])),
        "{text}"
    );
    for rank in 0..3 {
        assert!(
            text.contains(&format!(
                "torchrun --nnodes=3 --node-rank={rank} --master-addr={} attempt=0",
                cluster.hosts[0]
            )),
            "{text}"
        );
    }
    assert_eq!(
        text.lines().filter(|l| l.starts_with("torchrun")).count(),
        3,
        "{text}"
    );
}

#[test]
fn restart_options_that_cannot_work_are_one_clear_line() {
    let cluster = Cluster::start(3);
    for (args, env, says) in [
        (
            vec!["--spares", "3"],
            None,
            "3 spare node(s) leave no node for the job",
        ),
        (
            vec!["--max-restarts", "1", "--nodes", "0,1"],
            None,
            "--nodes and --exclude choose ranks of one run",
        ),
        (
            vec!["--spares", "1", "--min-nodes", "3"],
            None,
            "--min-nodes 3 must be between 1 and the 2 node(s)",
        ),
        (
            vec![],
            Some(("MULTINODE_MAX_RESTARTS", "many")),
            "MULTINODE_MAX_RESTARTS='many' is not a number",
        ),
        (
            vec![],
            Some(("MULTINODE_SPARES", "-1")),
            "MULTINODE_SPARES='-1' is not a number of spare nodes",
        ),
    ] {
        let mut c = cluster.command(&mn_exec_all());
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        let out = c
            .args(&args)
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn a_hung_attempt_is_ended_with_its_snapshot_kept_and_run_again() {
    let cluster = Cluster::start(3);
    let tag = sleep_tag();
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let script = format!(
        "echo \"start $RANK $MULTINODE_RESTART_COUNT\"; \
         [ \"$MULTINODE_RESTART_COUNT\" = 0 ] && exec sleep {tag}; echo \"done $RANK\""
    );
    let out = cluster.exec_all(&[
        "--hang-timeout",
        "1.5",
        "--max-restarts",
        "1",
        "--grace",
        "1",
        "--report",
        report_path.to_str().unwrap(),
        "-c",
        &script,
    ]);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{text}\n{err}");
    assert!(
        err.contains("no node printed anything or touched its heartbeat file for 1.5s (--hang-timeout): the run is hung; what every node was doing:"),
        "{err}"
    );
    assert!(
        err.contains(&format!("sleep {tag}")),
        "the snapshot names the sleepers: {err}"
    );
    assert!(
        err.contains(
            "attempt 0: hung (no output or heartbeat for --hang-timeout); restart 1 on 3 node(s)"
        ),
        "{err}"
    );
    for rank in 0..3 {
        assert!(
            text.contains(&format!("start {rank} 1")) && text.contains(&format!("done {rank}")),
            "{text}"
        );
    }
    let json = report(&report_path);
    let attempts = json["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{json}");
    assert_eq!(attempts[0]["exit_code"], 124);
    assert_eq!(attempts[0]["then"], "restart");
    assert!(
        attempts[0]["snapshot"].is_object(),
        "the hang's snapshot is kept: {json}"
    );
    assert!(attempts[1]["snapshot"].is_null(), "{json}");
    assert_no_sleeper_left(&tag, Duration::from_secs(5));

    // Without restarts, a hang ends the run: exit code 124, as --timeout.
    let out = cluster.exec_all(&[
        "--hang-timeout",
        "1",
        "--grace",
        "1",
        "-c",
        &format!("exec sleep {tag}"),
    ]);
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("hung: no output or heartbeat from any node for --hang-timeout"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_signal_during_the_health_check_stops_the_run_with_the_signals_code() {
    // Found by the slurm-restart cluster scenario: scancel while a restart's
    // health check ran was read as every node failing the check ("the
    // head failed the health check", exit 1, no report).
    let cluster = Cluster::start(3);
    let tag = sleep_tag();
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let check = format!("exec sleep {tag}");
    let mut child = spawn_exec_all(
        &cluster,
        "--spares 1 --max-restarts 2 --grace 1",
        &[
            "--health-check",
            &check,
            "--report",
            report_path.to_str().unwrap(),
            "-c",
            "echo ran",
        ],
    );
    // The check runs on every node, the spare too.
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 3));
    signal(child.id(), nix::sys::signal::Signal::SIGTERM);
    let (code, out, err) = ended(&mut child, Duration::from_secs(15));
    assert_eq!(code, 143, "128 + SIGTERM, as any run it ends: {err}");
    assert!(!err.contains("failed the health check"), "{err}");
    assert!(
        err.contains("attempt 0: not started: stopped during the health check"),
        "{err}"
    );
    assert!(!out.contains("ran"), "no attempt ran: {out}");
    let json = report(&report_path);
    assert_eq!(json["exit_code"], 143, "{json}");
    let attempts = json["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{json}");
    assert_eq!(
        attempts[0]["then"],
        "stopped (a signal, --timeout or closed output): not restarted"
    );
    assert_eq!(attempts[0]["health_failed"], serde_json::json!([]));
    assert_eq!(hosts_of(&attempts[0]), cluster.hosts[..2].to_vec());
    assert_no_sleeper_left(&tag, Duration::from_secs(5));
}

#[test]
fn a_node_frozen_in_a_hung_attempt_is_excluded_and_the_spare_takes_its_place() {
    // Found with the restart-frozen cluster scenario's settings turned
    // around: a hang timeout below the client liveness (4 s) ends the
    // attempt as hung before the frozen node is found lost; it was lost
    // while the attempt ended, yet ran again in every attempt (each hung
    // while connecting to it) until the restarts were spent.
    let cluster = Cluster::start(4);
    let tag = sleep_tag();
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let script =
        format!("[ \"$MULTINODE_RESTART_COUNT\" = 0 ] && exec sleep {tag}; echo \"done $RANK\"");
    let mut child = spawn_exec_all(
        &cluster,
        "--spares 1 --max-restarts 1 --grace 1 --hang-timeout 2",
        &["--report", report_path.to_str().unwrap(), "-c", &script],
    );
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 3));
    // hosts[2]'s agent.
    let frozen = Frozen::agent(&cluster.agents[1]);
    let (code, out, err) = ended(&mut child, Duration::from_secs(40));
    drop(frozen);
    assert_eq!(code, 0, "{out}\n{err}");
    let h = &cluster.hosts;
    let json = report(&report_path);
    let attempts = json["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{json}");
    assert_eq!(attempts[0]["exit_code"], 124, "{json}");
    assert!(attempts[0]["snapshot"].is_object(), "{json}");
    assert_eq!(attempts[0]["excluded"][0]["host"], h[2].as_str(), "{json}");
    assert_eq!(attempts[0]["excluded"][0]["why"], "lost", "{json}");
    assert_eq!(
        hosts_of(&attempts[1]),
        [&h[0], &h[1], &h[3]].map(String::clone)
    );
    assert_eq!(attempts[1]["then"], "succeeded");
    assert!(
        err.contains(&format!(
            "attempt 0: hung (no output or heartbeat for --hang-timeout); {} excluded (lost), spare {} as rank 2; restart 1 on 3 node(s)",
            h[2], h[3]
        )),
        "{err}"
    );
    for rank in 0..3 {
        assert!(out.contains(&format!("done {rank}")), "{out}");
    }
    // Running again, the frozen agent finds its client gone and ends the sleep.
    assert_no_sleeper_left(&tag, Duration::from_secs(15));
}

#[test]
fn a_node_frozen_before_an_attempt_is_unreachable_not_a_hang() {
    // The hang watchdog counts from when every node runs its script: a
    // node still connecting is bounded by --connect-timeout. Counted from
    // the start, a node frozen before the run made every attempt "hung"
    // while connecting to it, never excluded, until the restarts were spent.
    let cluster = Cluster::start(4);
    let frozen = Frozen::agent(&cluster.agents[1]);
    let out = cluster.exec_all(&[
        "--spares",
        "1",
        "--max-restarts",
        "1",
        "--grace",
        "1",
        "--hang-timeout",
        "1",
        // Longer than a snapshot's wait for a frozen node (5 s).
        "--connect-timeout",
        "8",
        "-c",
        "echo \"done $RANK\"",
    ]);
    drop(frozen);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{text}\n{err}");
    let h = &cluster.hosts;
    assert!(!err.contains("hung"), "{err}");
    assert!(
        err.contains(&format!(
            "attempt 0: rank 2 ({}) unreachable; {} excluded (unreachable), spare {} as rank 2; restart 1 on 3 node(s)",
            h[2], h[2], h[3]
        )),
        "{err}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("done ")).count(),
        2 + 3,
        "ranks 0 and 1 of attempt 0, then the 3 of attempt 1: {text}"
    );
}

/// A pipe whose write end is full: a process given it as stderr blocks at
/// its first write there, until the read end is drained.
fn full_pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
    fcntl(&write, FcntlArg::F_SETPIPE_SZ(4096)).unwrap();
    // O_NONBLOCK only while filling: the child shares this file description.
    fcntl(&write, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
    while nix::unistd::write(&write, &[b'.'; 512]).is_ok() {}
    fcntl(&write, FcntlArg::F_SETFL(OFlag::empty())).unwrap();
    (read, write)
}

#[test]
fn a_signal_between_two_attempts_stops_the_run_before_the_next() {
    // Each attempt runs on a runtime of its own. A SIGTERM that came after
    // one attempt's end and before the next one listened was lost: tokio
    // keeps the handler it installed (the default effect is gone) and
    // drops a signal nobody listens for, so the next attempt ran and the
    // batch system's stop was ignored. exec_all's stderr is a full pipe
    // here: it blocks writing attempt 0's table there, between the two.
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let (err_read, err_write) = full_pipe();
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["--max-restarts", "3", "--grace", "1"])
        .args(["--report", report_path.to_str().unwrap(), "-c"])
        .arg("echo \"attempt=$MULTINODE_RESTART_COUNT rank=$RANK\"; [ \"$RANK\" = 1 ] && exit 3; exit 0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(err_write))
        .spawn()
        .unwrap();
    let pid = child.id();
    // Attempt 0 has ended and exec_all's main thread waits to write its table.
    let blocked = eventually(Duration::from_secs(20), || {
        // In `write(2, ...)`: the system call's number, then its first argument.
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"))
            .is_ok_and(|w| w.starts_with(&format!("{} 0x2 ", libc::SYS_write)))
    });
    assert!(blocked, "exec_all never blocked writing its stderr");
    signal(pid, nix::sys::signal::Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    let drain = std::thread::spawn(move || {
        let mut err = Vec::new();
        std::fs::File::from(err_read).read_to_end(&mut err).unwrap();
        String::from_utf8_lossy(&err)
            .trim_start_matches('.')
            .to_string()
    });
    let code = wait_exit(&mut child, Duration::from_secs(30)).expect("exec_all must end");
    let out = all_of(child.stdout.take());
    let err = drain.join().unwrap();
    assert_eq!(code, 143, "{out}\n{err}");
    assert!(!out.contains("attempt=1"), "attempt 1 ran: {out}\n{err}");
    assert!(out.contains("attempt=0 rank=1"), "{out}");
    assert!(
        err.contains("attempt 1: not started: stopped by signal 15"),
        "{err}"
    );
    let json = report(&report_path);
    assert_eq!(json["exit_code"], 143);
    let attempts = json["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{json}");
    assert_eq!(attempts[0]["then"], "restart");
    assert_eq!(attempts[1]["failure"], "not started: stopped by signal 15");
    assert_eq!(
        attempts[1]["then"],
        "stopped (a signal, --timeout or closed output): not restarted"
    );
}
