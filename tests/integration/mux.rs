//! Connection sharing: inside `multinode agent -- JOB`, exec_all reaches the
//! workers through the head agent's logged-in connections
//! (`MULTINODE_MUX_SOCKET`), with no login on the workers; the same bytes,
//! exit codes, signals and ends as a connection of its own.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

const PORT: u16 = 29975;

/// `multinode agent -- sh -c JOB` for rank `rank` of `hosts`, logging at
/// debug level to `log` (the workers' logins are counted from there), with
/// a TMPDIR of its own beside `log`: Open MPI's daemons on one host race to
/// create one session directory otherwise (docs/mpi.md, as in mpi.rs).
fn node(hosts: &[String], rank: usize, job: &str, log: &std::path::Path) -> Command {
    let tmp = log.with_file_name(format!("tmp-{rank}"));
    std::fs::create_dir(&tmp).unwrap();
    let mut c = crate::lifecycle::node(hosts, rank, PORT, &[], &["sh", "-c", job]);
    c.env("RUST_LOG", "multinode=debug")
        .env("TMPDIR", &tmp)
        .stderr(std::fs::File::create(log).unwrap());
    c
}

struct Job {
    dir: tempfile::TempDir,
    head: std::process::Output,
    workers: Vec<Child>,
}

impl Job {
    /// The head's stderr: JOB's (exec_all's) and the agent's debug log.
    fn head_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("head.log")).unwrap()
    }
}

/// Runs `job` on the head of `n` nodes (the workers run it too, but only the
/// head's runs); returns when the head is done.
/// The worker's login counts the job printed as `logins A B ...`.
fn logins(out: &str, err: &str) -> Vec<u32> {
    out.lines()
        .find_map(|l| l.strip_prefix("logins "))
        .unwrap_or_else(|| panic!("no logins line in {out}\n{err}"))
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect()
}

fn run_job(n: usize, job: &str) -> Job {
    let hosts = fresh_loopbacks(n);
    let dir = tempfile::tempdir().unwrap();
    let workers: Vec<Child> = (1..n)
        .map(|r| {
            node(&hosts, r, job, &dir.path().join(format!("w{r}.log")))
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let head = node(&hosts, 0, job, &dir.path().join("head.log"))
        .env("W1_LOG", dir.path().join("w1.log"))
        .env("W1_HOST", &hosts[1])
        .output()
        .unwrap();
    Job { dir, head, workers }
}

impl Drop for Job {
    fn drop(&mut self) {
        // (A worker that lingers is killed by wait_exit.)
        for w in &mut self.workers {
            wait_exit(w, Duration::from_secs(10));
        }
    }
}

#[test]
fn exec_all_in_the_job_goes_through_the_heads_connections_with_no_login() {
    // Logins on worker 1 before, after 5 shared runs, after 5 runs of its own.
    let job = r#"
        set -e
        test -S "$MULTINODE_MUX_SOCKET"
        echo "socket $MULTINODE_MUX_SOCKET"
        logins() { grep -c authenticated "$W1_LOG" || true; }
        a=$(logins)
        for i in 1 2 3 4 5; do
            mn-exec-all --label -c 'echo "out $RANK $MULTINODE_LOCAL_IP $MULTINODE_MUX_SOCKET"; echo "err $RANK" >&2' >/dev/null 2>&1
        done
        # mn-ssh (mpirun's plm_rsh_agent) goes the same way: bytes both ways, the status.
        set +e
        printf 'a\0b' | mn-ssh "$W1_HOST" 'od -An -c; exit 3'
        echo "ssh status $?"
        set -e
        b=$(logins)
        for i in 1 2 3 4 5; do
            env -u MULTINODE_MUX_SOCKET mn-exec-all -c true
        done
        c=$(logins)
        echo "logins $a $b $c"
        mn-exec-all --no-fail-fast --label -c 'echo "out $RANK $MULTINODE_LOCAL_IP [$MULTINODE_MUX_SOCKET]"; echo "err $RANK" >&2; exit $((RANK + 4))'
    "#;
    let run = run_job(3, job);
    let out = stdout(&run.head);
    let err = run.head_log();
    // The last exec_all's status: the first failure's (every rank fails).
    assert_ne!(run.head.status.code(), Some(0), "{out}\n{err}");
    let logins = logins(&out, &err);
    assert_eq!(
        logins[0], logins[1],
        "shared runs logged in on the worker: {out}"
    );
    assert!(
        logins[2] >= logins[1] + 5,
        "runs of their own log in each time: {out}"
    );
    for rank in 1..3 {
        // The node's address as reached, and no head path forwarded to it.
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("out {rank} 127.")) && l.ends_with("[]")),
            "rank {rank} output in {out}"
        );
        assert!(
            err.contains(&format!("err {rank}")),
            "rank {rank} stderr in {err}"
        );
    }
    let socket = out
        .lines()
        .find_map(|l| l.strip_prefix("socket "))
        .expect("socket line")
        .to_string();
    let socket = std::path::Path::new(&socket);
    assert!(!socket.exists(), "the socket outlived the head");
    assert!(
        !socket.parent().unwrap().exists(),
        "its directory outlived the head"
    );
}

#[test]
fn stdin_exit_signals_and_a_kill_of_exec_all_through_the_heads_connections() {
    let tag = sleep_tag();
    let job = format!(
        r#"
        printf 'line one\nline two\n' | mn-exec-all --label -c 'wc -l'
        mn-exec-all --nodes 1 -c 'kill -USR1 $$'; echo "status $?"
        mn-exec-all --nodes 1,2 -c 'sleep {tag}' & pid=$!
        i=0; while [ $i -lt 400 ] && [ "$(pgrep -cxf 'sleep {tag}')" != 2 ]; do sleep 0.05; i=$((i+1)); done
        echo "sleepers $(pgrep -cxf 'sleep {tag}')"
        kill -9 $pid
        i=0; while [ $i -lt 400 ] && [ "$(pgrep -cxf 'sleep {tag}')" != 0 ]; do sleep 0.05; i=$((i+1)); done
        echo "left $(pgrep -cxf 'sleep {tag}')"
    "#
    );
    let run = run_job(3, &job);
    let out = stdout(&run.head);
    let err = run.head_log();
    // Every node read both lines of stdin.
    assert_eq!(
        out.lines().filter(|l| l.ends_with(": 2")).count(),
        3,
        "{out}\n{err}"
    );
    // 128 + SIGUSR1, as from a connection of its own.
    assert!(out.contains("status 138"), "{out}\n{err}");
    assert!(out.contains("sleepers 2"), "{out}\n{err}");
    assert!(
        out.contains("left 0"),
        "the channels' commands outlived exec_all: {out}\n{err}"
    );
    assert!(sleepers(&tag).is_empty());
}

/// A command that does not read its stdin stops its agent reading the
/// shared connection; a client killed then cannot close its channel through
/// it. The head's agent resets the connection (its commands end on the
/// node) and the next client gets a new one.
#[test]
fn a_client_killed_while_its_commands_stdin_is_full_does_not_wedge_the_connection() {
    let tag = sleep_tag();
    let job = format!(
        r#"
        mn-exec-all --nodes 1 -c 'exec sleep {tag}' < /dev/zero & pid=$!
        i=0; while [ $i -lt 400 ] && [ "$(pgrep -cxf 'sleep {tag}')" != 1 ]; do sleep 0.05; i=$((i+1)); done
        echo "sleepers $(pgrep -cxf 'sleep {tag}')"
        sleep 1  # the zeros fill every buffer on the way
        kill -9 $pid
        t0=$(date +%s%N)
        i=0; while [ $i -lt 400 ] && [ "$(pgrep -cxf 'sleep {tag}')" != 0 ]; do sleep 0.05; i=$((i+1)); done
        echo "left $(pgrep -cxf 'sleep {tag}') after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
        # Bounded: on a wedged connection the next client would wait for ever.
        timeout 20 mn-exec-all --nodes 1 -c 'echo "again $RANK"'; echo "status $?"
        pkill -xf 'sleep {tag}'
    "#
    );
    let run = run_job(2, &job);
    let out = stdout(&run.head);
    let err = run.head_log();
    assert!(out.contains("sleepers 1"), "{out}\n{err}");
    let left = out
        .lines()
        .find_map(|l| l.strip_prefix("left "))
        .unwrap_or_else(|| panic!("no left line: {out}\n{err}"));
    assert!(
        left.starts_with("0 after "),
        "the command outlived its client: {out}\n{err}"
    );
    assert!(
        err.contains("resetting the connection"),
        "not ended by the reset: {err}"
    );
    assert!(out.contains("again 1\nstatus 0"), "{out}\n{err}");
    assert!(sleepers(&tag).is_empty());
}

#[test]
fn a_client_of_another_job_does_not_get_the_heads_connections() {
    // Another secret: exec_all must log in itself, and the workers (this
    // job's agents) refuse it.
    let job = r#"
        MULTINODE_SECRET=another-jobs-secret-0123456789 mn-exec-all --nodes 1 -c 'echo through'
        echo "status $?"
    "#;
    let run = run_job(2, job);
    let out = stdout(&run.head);
    assert!(!out.contains("through"), "{out}");
    assert!(out.contains("status 255"), "{out}\n{}", run.head_log());
}

#[test]
fn a_worker_that_dies_is_lost_through_the_heads_connection() {
    let tag = sleep_tag();
    let job = format!(
        r#"
        mn-exec-all -c 'sleep {tag}' & pid=$!
        # Three sleepers: the head's own (local) and the two workers'.
        i=0; while [ $i -lt 400 ] && [ "$(pgrep -cxf 'sleep {tag}')" != 3 ]; do sleep 0.05; i=$((i+1)); done
        echo "sleepers $(pgrep -cxf 'sleep {tag}')"
        t0=$(date +%s%N)
        pkill -9 -f "agent --listen $W1_HOST"
        wait $pid; echo "status $?"
        echo "lost after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
        pkill -f 'sleep {tag}'
    "#
    );
    let hosts = fresh_loopbacks(3);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut workers: Vec<Child> = (1..3)
        .map(|r| {
            node(&hosts, r, &job, &dir.join(format!("w{r}.log")))
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let started = Instant::now();
    let head = node(&hosts, 0, &job, &dir.join("head.log"))
        .env("W1_HOST", format!("{}:{PORT}", hosts[1]))
        .output()
        .unwrap();
    let out = stdout(&head);
    assert!(out.contains("sleepers 3"), "{out}");
    // 255: a node lost, at once (its TCP connection closed with the agent).
    let ms: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("lost after "))
        .and_then(|l| l.strip_suffix(" ms"))
        .expect("lost after line")
        .parse()
        .unwrap();
    assert!(ms < 5000, "{out}");
    assert!(
        out.contains("status 255"),
        "{out}\n{}",
        std::fs::read_to_string(dir.join("head.log")).unwrap()
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    for w in &mut workers {
        assert!(wait_exit(w, Duration::from_secs(10)).is_some());
    }
    assert!(
        sleepers(&tag).is_empty(),
        "the lost worker's keeper ends its command"
    );
}

/// Plain agents on `n` hosts, the first sharing its connections on a
/// socket it is given (`--mux-socket`), outside any job.
struct Shared {
    _tmp: tempfile::TempDir,
    socket: std::path::PathBuf,
    hosts: Vec<String>,
    master: Agent,
    _workers: Vec<Agent>,
}

impl Shared {
    fn start(n: usize) -> Shared {
        let hosts = fresh_loopbacks(n);
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("s");
        let socket_arg = socket.to_str().unwrap();
        let master = Agent::start_with(&hosts[0], PORT, &["--mux-socket", socket_arg], &[]);
        let workers = hosts[1..]
            .iter()
            .map(|h| Agent::start_with(h, PORT, &[], &[]))
            .collect();
        assert!(eventually(Duration::from_secs(30), || socket.exists()));
        Shared {
            _tmp: tmp,
            socket,
            hosts,
            master,
            _workers: workers,
        }
    }

    /// exec_all on rank 0 of the hosts, through the socket.
    fn exec_all(&self) -> Command {
        let mut c = cmd(&mn_exec_all());
        c.env("MULTINODE_HOSTLIST", self.hosts.join(","))
            .env("MULTINODE_AGENT_PORT", PORT.to_string())
            .env("MULTINODE_MUX_SOCKET", &self.socket)
            .env("MULTINODE_NODE_RANK", "0");
        c
    }
}

#[test]
fn a_plain_agent_shares_its_connections_on_the_socket_it_is_given() {
    let shared = Shared::start(3);
    // Rank 0 (this host) runs locally; ranks 1 and 2 through the socket.
    let out = shared
        .exec_all()
        .env("RUST_LOG", "multinode=debug")
        .args([
            "--no-fail-fast",
            "--label",
            "-c",
            "echo via $RANK; [ $RANK = 2 ] && exit 7; exit 0",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(7), "{err}");
    let text = stdout(&out);
    assert!(text.contains("via 1") && text.contains("via 2"), "{text}");
    assert!(!err.contains("no shared connection"), "{err}");
    drop(shared.master);
    assert!(!shared.socket.exists(), "the agent removes its socket");
}

#[test]
fn open_mpi_inside_the_job_launches_through_the_heads_connections() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = crate::mpi::compile("mpicc.openmpi", tmp.path(), "allreduce_ompi");
    // rtc_hwloc_vmhole none: three orteds on one machine share hwloc.sm (docs/mpi.md).
    let job = format!(
        r#"
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        logins() {{ grep -c authenticated "$W1_LOG" || true; }}
        a=$(logins)
        mpirun.openmpi -H "$MULTINODE_HOSTLIST" -np 3 --mca plm_rsh_agent "$MULTINODE_SSH_WRAPPER" \
            --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo --mca pml ob1 \
            --mca rtc_hwloc_vmhole none {prog}
        echo "mpirun status $?"
        echo "logins $a $(logins)"
    "#,
        prog = prog.display()
    );
    let run = run_job(3, &job);
    let out = stdout(&run.head);
    let err = run.head_log();
    assert!(out.contains("mpirun status 0"), "{out}\n{err}");
    let ranks: Vec<&str> = out.lines().filter(|l| l.starts_with("rank=")).collect();
    assert_eq!(ranks.len(), 3, "{out}");
    let logins = logins(&out, &err);
    assert_eq!(
        logins[0], logins[1],
        "orted was launched with a login: {out}"
    );
}

#[test]
fn a_head_killed_outright_leaves_no_socket_behind() {
    // A one-node job: the head runs JOB at once; JOB says where the socket is.
    let hosts = fresh_loopbacks(1);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = dir.join("out");
    let job = format!(
        "echo \"$MULTINODE_MUX_SOCKET\" > {}; sleep 100",
        out.display()
    );
    let mut head = node(&hosts, 0, &job, &dir.join("head.log"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(30), || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.ends_with('\n'))
    }));
    let socket = std::path::PathBuf::from(std::fs::read_to_string(&out).unwrap().trim());
    assert!(socket.exists(), "{}", socket.display());
    head.kill().unwrap();
    head.wait().unwrap();
    // The keeper ends JOB (grace) and then removes the socket and its directory.
    assert!(
        eventually(Duration::from_secs(15), || !socket
            .parent()
            .unwrap()
            .exists()),
        "{} outlived the head's kill -9",
        socket.display()
    );
}

/// Output through the head's connections reaches the client while the
/// command still runs: the head's agent buffers what the node sent only
/// while more is ready, and writes it when nothing is.
#[test]
fn output_through_the_heads_connections_arrives_while_the_command_runs() {
    use std::io::BufRead;
    let shared = Shared::start(2);
    let mut child = shared
        .exec_all()
        .args(["--exclude", "0", "-c", "echo first; sleep 20; echo late"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (send, recv) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = send.send(line);
    });
    let line = recv.recv_timeout(Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        line.as_deref(),
        Ok("first\n"),
        "the first line, long before the command ends"
    );
}
