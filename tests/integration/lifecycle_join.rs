//! `multinode agent -- JOB` on every node, agents at loopback addresses: the
//! head waits for the workers, runs JOB and releases them; a head that gives
//! up releases the workers that answered; a node of another job (another
//! secret) is rejected at once, on both sides.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// One node's `multinode agent [ARGS] -- JOB`, as a scheduler starts it.
fn node(hosts: &[String], rank: usize, args: &[&str], secret: &str, job: &str) -> Child {
    let hostlist = one_slot_each(hosts);
    cmd(&multinode())
        .arg("agent")
        .arg("--listen")
        .arg(format!("{}:29922", hosts[rank]))
        .args(args)
        .arg("--")
        .args(["sh", "-c", job])
        .env("MULTINODE_HOSTLIST", hostlist)
        .env("MULTINODE_NODE_RANK", rank.to_string())
        .env("MULTINODE_SECRET", secret)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start an agent")
}

#[test]
fn the_head_runs_the_job_once_every_worker_answers_then_releases_them() {
    let hosts = fresh_loopbacks(3);
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let job = format!("echo \"$RANK $MULTINODE_NNODES\" > '{}'", mark.display());
    let mut workers: Vec<Child> = (1..3).map(|r| node(&hosts, r, &[], SECRET, &job)).collect();
    let mut head = node(&hosts, 0, &[], SECRET, &job);
    let status = wait_within(&mut head, Duration::from_secs(30)).expect("the head ends");
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut head));
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "0 3\n");
    for worker in &mut workers {
        let status = wait_within(worker, Duration::from_secs(10)).expect("released");
        assert_eq!(status.code(), Some(0), "{}", stderr_of(worker));
    }
}

#[test]
fn a_head_that_gives_up_on_a_missing_worker_releases_those_that_answered() {
    // Node 2 never comes.
    let hosts = fresh_loopbacks(3);
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let job = format!("touch '{}'", mark.display());
    let mut worker = node(&hosts, 1, &["--idle-timeout", "60"], SECRET, &job);
    let start = Instant::now();
    let mut head = node(&hosts, 0, &["--wait-timeout", "2"], SECRET, &job);
    let status = wait_within(&mut head, Duration::from_secs(20)).expect("the head gives up");
    let waited = start.elapsed();
    let err = stderr_of(&mut head);
    assert_eq!(status.code(), Some(255), "{err}");
    assert!(
        waited < Duration::from_secs(5),
        "--wait-timeout 2 took {waited:?}"
    );
    assert!(
        err.contains(&format!("rank 2 {}:29922", hosts[2])) && !err.contains("rank 1 "),
        "the error names the missing node alone: {err}"
    );
    assert!(!mark.exists(), "the job must not run");
    // Released at once, not after its idle timeout of 60 s.
    let status = wait_within(&mut worker, Duration::from_secs(5))
        .expect("the worker that answered is released with the head");
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut worker));
}

/// A head waiting for a worker that is not there (here: nothing listens at
/// its address, as with a wrong port) says every 10 s which ranks it waits
/// for, where, and the last error, instead of waiting out --wait-timeout in
/// silence.
#[test]
fn a_waiting_head_says_which_workers_it_waits_for() {
    let hosts = fresh_loopbacks(3);
    let job = "true";
    let mut worker = node(&hosts, 1, &["--idle-timeout", "60"], SECRET, job);
    let mut head = node(&hosts, 0, &["--wait-timeout", "12"], SECRET, job);
    let status = wait_within(&mut head, Duration::from_secs(30)).expect("the head gives up");
    let err = stderr_of(&mut head);
    assert_eq!(status.code(), Some(255), "{err}");
    let missing = format!("{}:29922", hosts[2]);
    let waiting: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("multinode: waiting"))
        .collect();
    assert_eq!(
        waiting,
        [format!(
            "multinode: waiting for 1 of 2 workers (10 s of 12 s): rank 2 {missing} \
             (cannot connect to {missing}: Connection refused (os error 111))"
        )],
        "one report at 10 s, naming the missing worker alone: {err}"
    );
    let status = wait_within(&mut worker, Duration::from_secs(5)).expect("released");
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut worker));
}

#[test]
fn the_head_rejects_a_worker_of_another_job_at_once() {
    let hosts = fresh_loopbacks(3);
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let job = format!("touch '{}'", mark.display());
    let mut good = node(&hosts, 1, &[], SECRET, &job);
    let _other = Agent::start_with(
        &hosts[2],
        29922,
        &[],
        &[("MULTINODE_SECRET", "another-secret-0123456789abcdef")],
    );
    let start = Instant::now();
    // The head would wait 120 s for a worker that does not answer.
    let mut head = node(&hosts, 0, &[], SECRET, &job);
    let status = wait_within(&mut head, Duration::from_secs(20)).expect("the head gives up");
    let err = stderr_of(&mut head);
    assert_eq!(status.code(), Some(255), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(
        err.contains(&format!("rank 2 {}:29922", hosts[2]))
            && err.contains("MULTINODE_SECRET")
            && !err.contains("rank 1 "),
        "{err}"
    );
    assert!(!mark.exists(), "the job must not run");
    let status = wait_within(&mut good, Duration::from_secs(5)).expect("released");
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut good));
}

#[test]
fn a_worker_whose_head_is_of_another_job_ends_when_that_head_does() {
    let hosts = fresh_loopbacks(2);
    let other_head = Agent::start_with(
        &hosts[0],
        29922,
        &[],
        &[("MULTINODE_SECRET", "another-secret-0123456789abcdef")],
    );
    // Its limit before the first contact would be 120 s.
    let mut worker = node(&hosts, 1, &[], SECRET, "true");
    // Its stderr, line by line, so the test can wait for the first contact.
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stderr = worker.stderr.take().expect("the worker's stderr is piped");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let mut err = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !err.contains("the head is of another job") {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => err.push_str(&(line + "\n")),
            Err(_) => panic!("the worker never said it met a head of another job: {err}"),
        }
    }
    assert!(
        worker.try_wait().unwrap().is_none(),
        "it met that head and waits while it is up: {err}"
    );
    drop(other_head);
    let status = wait_within(&mut worker, Duration::from_secs(5)).expect("it ends with that head");
    reader.join().expect("the stderr reader");
    err.extend(lines.try_iter().map(|line| line + "\n"));
    assert_eq!(status.code(), Some(255), "{err}");
    assert!(
        err.contains(&hosts[0]) && err.contains("MULTINODE_SECRET"),
        "{err}"
    );
}
