//! `multinode agent -- JOB` on every node: the head waits for the workers,
//! runs JOB and releases them; workers follow the head.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// `multinode agent --listen HOST:PORT [extra] -- JOB...` for rank `rank` of `hosts`.
pub(crate) fn node(
    hosts: &[String],
    rank: usize,
    port: u16,
    extra: &[&str],
    job: &[&str],
) -> Command {
    let hostlist = one_slot_each(hosts);
    let mut c = cmd(&multinode());
    c.env("MULTINODE_HOSTLIST", hostlist)
        .env("MULTINODE_NODE_RANK", rank.to_string())
        .env("MULTINODE_AGENT_PORT", port.to_string())
        .env(
            "PATH",
            format!(
                "{}:{}",
                multinode().parent().unwrap().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .args(["agent", "--listen", &format!("{}:{port}", hosts[rank])])
        .args(extra)
        .arg("--")
        .args(job)
        .stdin(Stdio::null());
    c
}

#[test]
fn the_head_runs_the_job_across_the_workers_and_releases_them() {
    let hosts = fresh_loopbacks(3);
    let port = 29970;
    let job = [
        "sh",
        "-c",
        "mn-exec-all --label -c 'echo rank $RANK of $MULTINODE_NNODES head $MULTINODE_NODE_IP'; exit 3",
    ];
    let mut workers: Vec<Child> = (1..3)
        .map(|r| {
            node(&hosts, r, port, &[], &job)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let head = node(&hosts, 0, port, &[], &job).output().unwrap();
    assert_eq!(
        head.status.code(),
        Some(3),
        "JOB's status: {}",
        stderr(&head)
    );
    let out = stdout(&head);
    for rank in 0..3 {
        let line = format!(
            "{rank} {}: rank {rank} of 3 head {}\n",
            hosts[rank], hosts[0]
        );
        assert!(out.contains(&line), "{line:?} not in {out}");
    }
    for worker in &mut workers {
        assert_eq!(
            wait_exit(worker, Duration::from_secs(10)),
            Some(0),
            "released workers exit 0"
        );
    }
}

#[test]
fn a_late_worker_is_waited_for_and_a_missing_one_is_named() {
    let hosts = fresh_loopbacks(3);
    let port = 29971;
    let job = [
        "sh",
        "-c",
        "mn-exec-all -c 'echo $RANK' | sort | tr '\\n' ' '",
    ];
    let mut head = node(&hosts, 0, port, &[], &job)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut early = node(&hosts, 1, port, &[], &job).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut late = node(&hosts, 2, port, &[], &job).spawn().unwrap();
    assert_eq!(wait_exit(&mut head, Duration::from_secs(20)), Some(0));
    let mut out = String::new();
    use std::io::Read;
    head.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "0 1 2 ");
    assert_eq!(wait_exit(&mut early, Duration::from_secs(10)), Some(0));
    assert_eq!(wait_exit(&mut late, Duration::from_secs(10)), Some(0));

    // Rank 2 never comes: the head gives up at its deadline and names it.
    let hosts = fresh_loopbacks(3);
    let mut worker = node(
        &hosts,
        1,
        port,
        &["--wait-timeout", "2", "--idle-timeout", "2"],
        &["true"],
    )
    .spawn()
    .unwrap();
    let start = Instant::now();
    let head = node(
        &hosts,
        0,
        port,
        &["--wait-timeout", "2"],
        &["touch", "/nonexistent/should-not-run"],
    )
    .output()
    .unwrap();
    assert_eq!(head.status.code(), Some(255));
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    let err = stderr(&head);
    assert!(err.contains("rank 2") && err.contains(&hosts[2]), "{err}");
    assert!(!err.contains("rank 1 "), "rank 1 answered: {err}");
    // A head that gives up releases the workers that did answer: they end at once.
    assert_eq!(wait_exit(&mut worker, Duration::from_secs(5)), Some(0));
}

#[test]
fn workers_end_their_commands_and_exit_when_the_head_dies() {
    let hosts = fresh_loopbacks(3);
    let port = 29972;
    let tag = sleep_tag();
    let job_text = format!("mn-exec-all -c 'exec sleep {tag}'");
    let job = ["sh", "-c", job_text.as_str()];
    let extra = ["--idle-timeout", "3"];
    let mut workers: Vec<Child> = (1..3)
        .map(|r| node(&hosts, r, port, &extra, &job).spawn().unwrap())
        .collect();
    let mut head = node(&hosts, 0, port, &extra, &job).spawn().unwrap();
    assert!(
        eventually(Duration::from_secs(15), || sleepers(&tag).len() == 3),
        "{:?}",
        sleepers(&tag)
    );
    // The head vanishes: kill -9 of its agent (its JOB's exec_all dies with the group? no: only the agent).
    head.kill().unwrap();
    head.wait().unwrap();
    let start = Instant::now();
    for worker in &mut workers {
        let code = wait_exit(worker, Duration::from_secs(20));
        assert_eq!(
            code,
            Some(255),
            "a worker whose head is gone exits with an error"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    // The workers' commands are gone; the head's own local command lost its
    // agent to SIGKILL, but its exec_all is supervised and ends it.
    assert!(
        eventually(Duration::from_secs(10), || sleepers(&tag).is_empty()),
        "left: {:?}",
        sleepers(&tag)
    );
}

/// `scancel` sends SIGTERM to every agent of the step (a pod's deletion, to
/// each pod's). The
/// reference script is a shell running exec_all: the shell dies of the
/// signal at once, while exec_all passes it to every node. Each node's
/// command gets SIGTERM once and its grace: here it "saves a checkpoint" for
/// a second, which it could not do if the signal turned into a SIGKILL.
/// The same SIGTERM reaching exec_all twice at once (a batch system that
/// signals every process of the job, and the agent passing it on) is one
/// signal, not the second one that means SIGKILL. A process that ignores
/// SIGTERM is killed when the grace (3 s) is over, counted from the signal:
/// the shell's exit after its checkpoint does not start a new one.
#[test]
fn a_sigterm_to_the_head_gives_every_node_its_grace() {
    let hosts = fresh_loopbacks(3);
    let port = 29973;
    let dir = tempfile::tempdir().unwrap();
    let tag = sleep_tag();
    let deaf = sleep_tag();
    let script = format!(
        "mn-exec-all -c '(trap \"\" TERM; exec sleep {deaf}) &
         trap \"sleep 1; echo saved > {dir}/ckpt.$RANK; exit 0\" TERM; sleep {tag} & wait'",
        dir = dir.path().display()
    );
    let job = ["sh", "-c", &script];
    let mut workers: Vec<Child> = (1..3)
        .map(|r| node(&hosts, r, port, &[], &job).spawn().unwrap())
        .collect();
    let mut head = node(&hosts, 0, port, &[], &job).spawn().unwrap();
    assert!(
        eventually(Duration::from_secs(20), || sleepers(&tag).len() == 3
            && sleepers(&deaf).len() == 3),
        "the job did not start on every node"
    );
    let start = Instant::now();
    // As scancel does: SIGTERM to every agent of the step.
    for agent in workers.iter().chain(std::iter::once(&head)) {
        let pid = nix::unistd::Pid::from_raw(agent.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }
    // What proctrack/cgroup adds: exec_all gets the same signal directly.
    let exec_all = pids_matching(&tag).into_iter().filter(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.starts_with(b"mn-exec-all\0-c\0"))
    });
    for pid in exec_all {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    assert!(eventually(Duration::from_secs(20), || sleepers(&deaf).is_empty()));
    // A grace restarted when the shells' group is ended (their exit after 1 s,
    // then 1 s for the pipes) would end them at 5 s.
    let deaf_took = start.elapsed();
    assert!(
        deaf_took < Duration::from_millis(4500),
        "the processes that ignore SIGTERM lived {deaf_took:?} (grace 3 s)"
    );
    assert_eq!(
        wait_exit(&mut head, Duration::from_secs(20)),
        Some(143),
        "the head exits as its job did: killed by SIGTERM"
    );
    let took = start.elapsed();
    for rank in 0..3 {
        let saved = std::fs::read_to_string(dir.path().join(format!("ckpt.{rank}")));
        assert_eq!(
            saved.ok().as_deref(),
            Some("saved\n"),
            "rank {rank} had no time to save its checkpoint"
        );
    }
    assert!(sleepers(&tag).is_empty(), "a job process outlived the job");
    // The checkpoints took 1 s; the grace is 3 s and then the agent waits
    // 3 s more at most (generous bounds for a loaded machine).
    assert!(took < Duration::from_secs(10), "the head took {took:?}");
    for worker in &mut workers {
        // Stopped by the signal (0), or released by the head first (0 too).
        assert_eq!(wait_exit(worker, Duration::from_secs(10)), Some(0));
    }
}

/// A head whose JOB ignores SIGTERM ends within `--grace` + 3 s of the
/// signal (it waited for JOB for ever): JOB's group, leader and all, is
/// SIGKILLed then, and the worker is released.
#[test]
fn a_head_whose_job_ignores_sigterm_ends_within_its_grace() {
    let hosts = fresh_loopbacks(2);
    let port = 29612;
    let tag = sleep_tag();
    let script = format!("trap '' TERM; sleep {tag}");
    let job = ["sh", "-c", &script];
    let mut worker = node(&hosts, 1, port, &["--grace", "1"], &job)
        .spawn()
        .unwrap();
    let mut head = node(&hosts, 0, port, &["--grace", "1"], &job)
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || sleepers(&tag).len() == 1),
        "the job did not start"
    );
    let start = Instant::now();
    signal(head.id(), nix::sys::signal::Signal::SIGTERM);
    let code = wait_exit(&mut head, Duration::from_secs(15));
    let took = start.elapsed();
    println!("a head whose JOB ignores SIGTERM (--grace 1): ended in {took:?}, exit {code:?}");
    assert_eq!(code, Some(137), "JOB is SIGKILLed, after {took:?}");
    // Grace 1 s and 3 s more, then at most 2 s to release the worker
    // (and slack for a loaded machine).
    assert!(took < Duration::from_secs(8), "the head took {took:?}");
    assert!(took >= Duration::from_secs(4), "JOB had no grace: {took:?}");
    assert!(sleepers(&tag).is_empty(), "JOB outlived the head");
    assert_eq!(wait_exit(&mut worker, Duration::from_secs(10)), Some(0));
}
