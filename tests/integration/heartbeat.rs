//! The heartbeat (docs/restarts.md, "Hangs"): a program that prints
//! nothing but touches `$MULTINODE_HEARTBEAT_FILE` is not hung, whichever
//! leg carries it (this node's, an agent's, a relay's); without the touch
//! it is; the file goes when the command ends; clients that did not ask
//! (OpenSSH's `ssh`, `mn-ssh`) see nothing of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// Prints nothing for 6 s; rank `beater` touches its heartbeat file every
/// 0.5 s. Every rank writes the file's path to `dir/path.RANK` first.
fn quiet_script(dir: &Path, beater: &str) -> String {
    format!(
        "echo \"$MULTINODE_HEARTBEAT_FILE\" > {dir}/path.$RANK; i=0; \
         while [ $i -lt 12 ]; do \
           if [ \"$RANK\" = {beater} ]; then touch \"$MULTINODE_HEARTBEAT_FILE\"; fi; \
           sleep 0.5; i=$((i + 1)); \
         done",
        dir = dir.display()
    )
}

/// Runs `quiet_script` under `--hang-timeout 2`; returns the exit code,
/// stdout, stderr and how long it ran.
fn run_quiet(
    cluster: &Cluster,
    dir: &Path,
    beater: &str,
    extra: &[&str],
) -> (Option<i32>, String, String, Duration) {
    let start = Instant::now();
    let script = quiet_script(dir, beater);
    let mut args = vec!["--hang-timeout", "2", "--grace", "1"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-c", &script]);
    let out = cluster.exec_all(&args);
    (
        out.status.code(),
        stdout(&out),
        stderr(&out),
        start.elapsed(),
    )
}

/// The heartbeat file each rank was given: set, and gone once the run ended.
fn check_paths(dir: &Path, ranks: std::ops::Range<usize>) {
    for rank in ranks {
        let written = std::fs::read_to_string(dir.join(format!("path.{rank}"))).unwrap();
        let path = written.trim();
        assert!(
            !path.is_empty(),
            "rank {rank} got no MULTINODE_HEARTBEAT_FILE"
        );
        assert!(
            !Path::new(path).exists(),
            "rank {rank}'s heartbeat file {path} is left"
        );
    }
}

#[test]
fn a_quiet_run_that_beats_on_this_node_or_an_agent_is_not_hung() {
    let cluster = Cluster::start(3);
    // Rank 0 is run by exec_all itself; rank 2 by an agent.
    for beater in ["0", "2"] {
        let dir = tempfile::tempdir().unwrap();
        let (code, out, err, took) = run_quiet(&cluster, dir.path(), beater, &[]);
        assert_eq!(code, Some(0), "beater {beater}: {out}\n{err}");
        assert_eq!(out, "", "beater {beater}: it prints nothing");
        assert!(
            took >= Duration::from_secs(5),
            "beater {beater}: it ran its 6 s: {took:?}"
        );
        check_paths(dir.path(), 0..3);
    }
    // The same program without the touch is hung.
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err, took) = run_quiet(&cluster, dir.path(), "none", &[]);
    assert_eq!(code, Some(124), "{out}\n{err}");
    assert!(
        err.contains("(--hang-timeout): the run is hung; what every node was doing:"),
        "the snapshot is printed: {err}"
    );
    assert!(took < Duration::from_secs(6), "ended as hung: {took:?}");
    check_paths(dir.path(), 0..3);
}

#[test]
fn a_relay_passes_its_nodes_heartbeats_on() {
    // --fanout 2 over 4 other nodes: ranks 1 and 3 relay for 1-2 and 3-4;
    // rank 4 is reached by rank 3's exec_all, through its agent.
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err, took) = run_quiet(&cluster, dir.path(), "4", &["--fanout", "2"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(out, "");
    assert!(took >= Duration::from_secs(5), "{took:?}");
    check_paths(dir.path(), 0..5);

    let dir = tempfile::tempdir().unwrap();
    let (code, _, err, _) = run_quiet(&cluster, dir.path(), "none", &["--fanout", "2"]);
    assert_eq!(code, Some(124), "{err}");
    check_paths(dir.path(), 0..5);
}

#[test]
fn clients_that_did_not_ask_see_no_heartbeat() {
    let agent = Agent::start(&fresh_loopback());
    let dir = tempfile::tempdir().unwrap();
    let options = openssh_options(&agent, dir.path());
    // A command that would beat, were it asked to: 2 s of polls.
    let command = "echo \"[$MULTINODE_HEARTBEAT_FILE]\"; \
                   for i in 1 2 3 4; do touch \"${MULTINODE_HEARTBEAT_FILE:-/dev/null}\"; sleep 0.5; done";
    let openssh = Command::new("ssh")
        .args(&options)
        .args([&agent.host, command])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(openssh.status.code(), Some(0), "{}", stderr(&openssh));
    assert_eq!(stdout(&openssh), "[]\n");
    assert_eq!(stderr(&openssh), "", "OpenSSH's ssh logs nothing more");
    let ours = cmd(&mn_ssh())
        .env("MULTINODE_AGENT_PORT", agent.port.to_string())
        .args([&agent.host, command])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(ours.status.code(), Some(0), "{}", stderr(&ours));
    assert_eq!(stdout(&ours), "[]\n");
    assert_eq!(stderr(&ours), "");
}

/// docs/restarts.md's training loop, as written, run by the page's two
/// commands as written on a cluster of three (rank 0 here, two agents):
/// with its heartbeat it ends 0 after its 6 s of silence; the same loop
/// with the variable removed is hung.
#[test]
fn the_restarts_pages_heartbeat_example_runs_as_written() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let program = crate::docs::doc_block("docs/restarts.md", "heartbeat-python").join("\n");
    std::fs::write(dir.path().join("train.py"), program).unwrap();
    let commands = crate::docs::doc_block("docs/restarts.md", "heartbeat-run");
    assert_eq!(commands.len(), 2, "{commands:?}");
    let path = format!(
        "{}:{}",
        mn_exec_all().parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let run = |line: &str| {
        let start = Instant::now();
        let out = cluster
            .command(Path::new("sh"))
            .env("PATH", &path)
            .args(["-c", line])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out, start.elapsed())
    };
    let (out, took) = run(&commands[0]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "the loop prints nothing");
    assert!(took >= Duration::from_secs(5), "it ran its 6 s: {took:?}");
    let (out, took) = run(&commands[1]);
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(took < Duration::from_secs(6), "ended as hung: {took:?}");
}

/// exec_all killed with SIGKILL: its own node's supervisor and the agent
/// end the commands and remove their heartbeat files all the same.
#[test]
fn the_heartbeat_files_go_when_exec_all_is_killed() {
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let tag = sleep_tag();
    let script = format!(
        "echo \"$MULTINODE_HEARTBEAT_FILE\" > {}/path.$RANK; exec sleep {tag}",
        dir.path().display()
    );
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["--hang-timeout", "60", "--grace", "1", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || sleepers(&tag).len() == 2),
        "both nodes run"
    );
    let paths: Vec<String> = (0..2)
        .map(|rank| {
            let written = std::fs::read_to_string(dir.path().join(format!("path.{rank}")));
            written.unwrap().trim().to_string()
        })
        .collect();
    for path in &paths {
        assert!(Path::new(path).exists(), "{path} is there while it runs");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(15), || sleepers(&tag).is_empty()),
        "{:?}",
        sleepers(&tag)
    );
    assert!(
        eventually(Duration::from_secs(5), || paths
            .iter()
            .all(|p| !Path::new(p).exists())),
        "left: {paths:?}"
    );
}

/// Runs `child` for at most `limit`; kills it past that. Its output, or
/// `None` when it had to be killed.
fn output_within(mut child: std::process::Child, limit: Duration) -> Option<std::process::Output> {
    let ended = eventually(limit, || matches!(child.try_wait(), Ok(Some(_))));
    if !ended {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    ended.then_some(out)
}

/// `MULTINODE_HEARTBEAT_FILE` names whatever the environment says: a FIFO
/// there is touched without being opened (an open for writing would wait
/// for a reader for good, and SIGTERM with it), and the run ends as usual.
#[test]
fn a_relay_whose_heartbeat_file_is_a_fifo_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("beat");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let child = cmd(&mn_exec_all())
        .env("MULTINODE_HOSTLIST", format!("{}:1", fresh_loopback()))
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_HEARTBEAT_FILE", &fifo)
        .args([
            "-c",
            "touch \"$MULTINODE_HEARTBEAT_FILE\"; sleep 1; echo done",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, Duration::from_secs(10)).expect("it ends within 10 s");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "done\n");
    let meta = std::fs::symlink_metadata(&fifo).unwrap();
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()),
        "the FIFO is left as it was"
    );
}

/// Writes the script's heartbeat file's path to `dir/path.$RANK`, makes
/// the file a directory with files in it, then sleeps `tag`.
fn heartbeat_made_a_directory(dir: &Path, tag: &str) -> String {
    format!(
        "f=\"$MULTINODE_HEARTBEAT_FILE\"; rm \"$f\"; mkdir -p \"$f/deeper\"; \
         touch \"$f/x\" \"$f/deeper/y\"; echo \"$f\" > {}/path.$RANK; exec sleep {tag}",
        dir.display()
    )
}

/// The paths `heartbeat_made_a_directory` wrote for `ranks`, once all are there.
fn written_paths(dir: &Path, ranks: std::ops::Range<usize>) -> Vec<String> {
    let read = |rank: usize| {
        std::fs::read_to_string(dir.join(format!("path.{rank}")))
            .map(|p| p.trim().to_string())
            .unwrap_or_default()
    };
    assert!(
        eventually(Duration::from_secs(10), || ranks
            .clone()
            .all(|r| !read(r).is_empty())),
        "every rank wrote its path"
    );
    ranks.map(read).collect()
}

/// A heartbeat file that the command made a directory with files in it
/// goes whole when exec_all is killed: on its own node (its supervisor's
/// `--remove`) and on an agent's (the command's end).
#[test]
fn a_heartbeat_file_made_a_directory_goes_when_exec_all_is_killed() {
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let tag = sleep_tag();
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["--hang-timeout", "60", "--grace", "1", "-c"])
        .arg(heartbeat_made_a_directory(dir.path(), &tag))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let paths = written_paths(dir.path(), 0..2);
    assert!(
        eventually(Duration::from_secs(10), || sleepers(&tag).len() == 2),
        "both nodes run"
    );
    for path in &paths {
        assert!(Path::new(path).is_dir(), "{path} is a directory now");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(15), || sleepers(&tag).is_empty()),
        "{:?}",
        sleepers(&tag)
    );
    assert!(
        eventually(Duration::from_secs(5), || paths
            .iter()
            .all(|p| std::fs::symlink_metadata(p).is_err())),
        "left: {paths:?}"
    );
}

/// The agent's private directory (`$XDG_RUNTIME_DIR/multinode-agent-*`)
/// goes when the agent is stopped (SIGTERM) or killed (its keeper removes
/// it), also with a running command's heartbeat file made a directory
/// with files in it.
#[test]
fn the_agents_private_directory_goes_with_a_heartbeat_directory_in_it() {
    for kill9 in [false, true] {
        let base = tempfile::tempdir().unwrap();
        let mut agent = Agent::start_with(
            &fresh_loopback(),
            29922,
            &[],
            &[("XDG_RUNTIME_DIR", base.path().to_str().unwrap())],
        );
        let dir = tempfile::tempdir().unwrap();
        let tag = sleep_tag();
        let mut client = cmd(&mn_ssh())
            .args(["-o", "SetEnv=MULTINODE_HEARTBEAT=1", &agent.host])
            .arg(heartbeat_made_a_directory(dir.path(), &tag).replace("$RANK", "0"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let file = PathBuf::from(&written_paths(dir.path(), 0..1)[0]);
        let private = file.parent().unwrap().to_path_buf();
        assert_eq!(private.parent(), Some(base.path()), "{}", file.display());
        assert!(file.join("deeper/y").exists());
        if kill9 {
            agent.child.kill().unwrap();
            let _ = agent.child.wait();
        } else {
            drop(agent);
        }
        assert!(
            eventually(Duration::from_secs(15), || !private.exists()),
            "{} left behind (kill -9: {kill9})",
            private.display()
        );
        assert!(
            eventually(Duration::from_secs(10), || sleepers(&tag).is_empty()),
            "kill -9: {kill9}"
        );
        let _ = client.kill();
        let _ = client.wait();
    }
}
