//! `multinode top` on loopback agents running real Python ranks: a loop of
//! CPU work and a barrier over TCP (rank 0 serves it), one rank doing twice
//! the work; an even job; a rank whose output stopped; a rank in D state.
//!
//! Rank 0 is run by exec_all itself (shown to its node's agent, which tells
//! `top` its output through show-group), the others by their agents. The
//! agents' PATH has no py-spy, so the wait share comes from the ranks'
//! states: the same on every machine (py-spy's stacks are classified by
//! `snapshot::samples`' unit tests).
//!
//! The D state is real: the rank calls `vfork()` and its child sleeps, so
//! the parent waits in `wait_for_vfork_done`, uninterruptibly (shown as D
//! since Linux 2.6.x; killable, so the test ends it). A FUSE or NFS file
//! that never answers would need /dev/fuse or a mount, which neither this
//! machine's container nor CI's Docker runner grants without privileges.

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

const PYTHON: &str = "/usr/bin/python3";

/// `RANK` from the environment; argv: world size, barrier address, mode,
/// the odd rank.
const PROGRAM: &str = r#"
import os, socket, sys, threading, time

rank = int(os.environ["RANK"])
n, addr, mode, odd = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
host, port = addr.rsplit(":", 1)
STEP_CPU = 0.02

def compute(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def serve(listener):
    conns = [listener.accept()[0] for _ in range(n)]
    while True:
        for c in conns:
            if c.recv(1) != b"a":
                os._exit(1)
        for c in conns:
            c.sendall(b"g")

def connect():
    while True:
        try:
            return socket.create_connection((host, int(port)))
        except OSError:
            time.sleep(0.05)

def barrier(sock):
    sock.sendall(b"a")
    if sock.recv(1) != b"g":
        os._exit(1)

def hang():
    time.sleep(100000)

def vfork_and_wait():
    import ctypes, platform
    libc = ctypes.CDLL(None, use_errno=True)
    # clone(CLONE_VM | CLONE_VFORK | SIGCHLD): vfork() on every architecture.
    nr = {"x86_64": 56, "aarch64": 220}[platform.machine()]
    if libc.syscall(nr, 0x4000 | 0x100 | 17, 0, 0, 0, 0) == 0:
        time.sleep(100000)
        os._exit(0)

if mode in ("slow", "even"):
    if rank == 0:
        listener = socket.create_server((host, int(port)))
        threading.Thread(target=serve, args=(listener,), daemon=True).start()
    sock = connect()
    step = 0
    while True:
        compute(STEP_CPU * (2 if mode == "slow" and rank == odd else 1))
        barrier(sock)
        step += 1
        if step % 5 == 0:
            print(f"step {step}", flush=True)
else:
    if mode == "late" and rank == odd:
        time.sleep(5)
    step = 0
    while True:
        time.sleep(0.1)
        step += 1
        print(f"step {step}", flush=True)
        if rank == odd and step == 5:
            if mode == "frozen":
                hang()
            else:
                vfork_and_wait()
"#;

/// Agents on every node (node 0's is shown exec_all's own rank), and
/// `mn-exec-all` running the program.
struct TopJob {
    hosts: Vec<String>,
    port: u16,
    agents: Vec<Agent>,
    /// Ended (SIGTERM, then SIGKILL) when the job is dropped: exec_all, or
    /// the lifecycle's agents.
    ended: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl TopJob {
    fn start(n: usize, port: u16, mode: &str, odd: usize) -> TopJob {
        TopJob::start_with(n, port, mode, odd, &[])
    }

    /// As [`TopJob::start`], exec_all given `extra` arguments too.
    fn start_with(n: usize, port: u16, mode: &str, odd: usize, extra: &[&str]) -> TopJob {
        TopJob::start_on(n, port, mode, odd, extra, &path_without_py_spy())
    }

    /// As [`TopJob::start_with`], the agents and exec_all on `path`.
    fn start_on(n: usize, port: u16, mode: &str, odd: usize, extra: &[&str], path: &str) -> TopJob {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("ranks.py");
        std::fs::write(&prog, PROGRAM).unwrap();
        let hosts = fresh_loopbacks(n);
        let path = path.to_string();
        let agents = hosts
            .iter()
            .map(|h| Agent::start_with(h, port, &[], &[("PATH", path.as_str())]))
            .collect();
        let barrier = {
            let l = std::net::TcpListener::bind(format!("{}:0", hosts[0])).unwrap();
            l.local_addr().unwrap().to_string()
        };
        let exec_all = cmd(&mn_exec_all())
            .env("MULTINODE_HOSTLIST", one_slot_each(&hosts))
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", port.to_string())
            .env("PATH", &path)
            .args(extra)
            .arg("-c")
            .arg(format!(
                "exec {PYTHON} {} {n} {barrier} {mode} {odd}",
                prog.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        TopJob {
            hosts,
            port,
            agents,
            ended: vec![exec_all],
            _dir: dir,
        }
    }

    fn top(&self, args: &[&str]) -> Output {
        cmd(&multinode())
            .env("MULTINODE_HOSTLIST", one_slot_each(&self.hosts))
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", self.port.to_string())
            .arg("top")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// A live `top --format json --interval 1`, its stdout piped.
    fn live_top(&self) -> Child {
        cmd(&multinode())
            .env("MULTINODE_HOSTLIST", one_slot_each(&self.hosts))
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", self.port.to_string())
            .args(["top", "--format", "json", "--interval", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `top --once --format json ARGS` until `ready` holds of a refresh.
    fn top_until(
        &self,
        args: &[&str],
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let start = Instant::now();
        let mut all = vec!["--once", "--format", "json", "--interval", "1"];
        all.extend(args);
        loop {
            let out = self.top(&all);
            let doc: Option<serde_json::Value> = serde_json::from_slice(&out.stdout).ok();
            if let Some(doc) = &doc
                && out.status.code() == Some(0)
                && ready(doc)
            {
                return doc.clone();
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "top never showed it: {} {}",
                stdout(&out),
                stderr(&out)
            );
        }
    }
}

impl Drop for TopJob {
    fn drop(&mut self) {
        for child in &mut self.ended {
            signal(child.id(), nix::sys::signal::Signal::SIGTERM);
        }
        for child in &mut self.ended {
            if wait_exit(child, Duration::from_secs(15)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A PATH with our binaries and the system's, without py-spy.
fn path_without_py_spy() -> String {
    let path = format!("{}:/usr/bin:/bin", multinode().parent().unwrap().display());
    for d in std::env::split_paths(&path) {
        assert!(!d.join("py-spy").exists(), "py-spy in {}", d.display());
    }
    path
}

fn stragglers(doc: &serde_json::Value) -> Vec<u64> {
    doc["straggler"]["stragglers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rank"].as_u64().unwrap())
        .collect()
}

/// Every rank has a row with a Python main process, enough samples, and
/// a step rate (a rank's first line may come after `top`'s first refresh).
fn all_running(doc: &serde_json::Value, n: usize) -> bool {
    let rows = doc["rows"].as_array().unwrap();
    rows.len() == n
        && rows.iter().all(|r| {
            r["comm"] == "python3"
                && r["wait_samples"].as_u64().unwrap_or(0) >= 20
                && r["step"].is_number()
                && r["step_rate"].is_number()
        })
}

#[test]
fn top_names_the_rank_doing_twice_the_work() {
    let job = TopJob::start(3, 29955, "slow", 2);
    let doc = job.top_until(&["--progress", r"step (\d+)"], |doc| {
        all_running(doc, 3) && !stragglers(doc).is_empty()
    });
    assert_eq!(stragglers(&doc), [2], "{doc:#}");
    let reasons = doc["straggler"]["stragglers"][0]["reasons"][0]
        .as_str()
        .unwrap();
    assert!(reasons.starts_with("waits "), "{doc:#}");
    let line = doc["straggler"]["line"].as_str().unwrap();
    assert!(
        line.starts_with(&format!("straggler: rank 2 ({}): waits", job.hosts[2])),
        "{line}"
    );
    // Its row carries the fields; the waiters wait more than it.
    let rows = doc["rows"].as_array().unwrap();
    let slow = &rows[2];
    assert_eq!(slow["rank"], 2);
    assert_eq!(slow["host"], job.hosts[2].as_str());
    assert!(
        ["R", "S"].contains(&slow["state"].as_str().unwrap()),
        "{slow:#}"
    );
    assert!(slow["cpu_pct"].as_f64().unwrap() > 20.0, "{slow:#}");
    assert!(slow["rss_kib"].as_u64().unwrap() > 1000, "{slow:#}");
    assert!(slow["output_age_s"].as_f64().unwrap() < 10.0, "{slow:#}");
    assert!(slow["step"].as_f64().unwrap() >= 5.0, "{slow:#}");
    assert!(slow["step_rate"].as_f64().unwrap() > 0.0, "{slow:#}");
    assert_eq!(slow["wait_from"], "state");
    // The waiters wait more than it, by the rule's margin over their
    // median (one of them may, in a refresh, wait less than the other).
    let share = |r: &serde_json::Value| r["wait_share"].as_f64().unwrap();
    let others = (share(&rows[0]) + share(&rows[1])) / 2.0;
    assert!(others > share(slow) + 0.25, "{doc:#}");
    for r in &rows[..2] {
        assert!(share(r) > share(slow), "{doc:#}");
        // Rank 0 is exec_all's own: its output age came through show-group.
        assert!(r["output_age_s"].as_f64().unwrap() < 10.0, "{r:#}");
    }
    // The table says the same at its top.
    let out = job.top(&["--once"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("multinode top: 3 ranks"), "{text}");
    // The straggler line, the start line (every rank printed, within its
    // 30 s), then the table.
    assert!(
        lines[2].starts_with("started: every rank printed"),
        "{text}"
    );
    assert!(lines[3].starts_with("RANK  HOST  "), "{text}");
}

#[test]
fn an_even_job_has_no_straggler() {
    let job = TopJob::start(3, 29956, "even", 0);
    // Several refreshes: none may name a rank.
    let mut seen = 0;
    let start = Instant::now();
    while seen < 3 {
        let doc = job.top_until(&["--progress", r"step (\d+)"], |doc| all_running(doc, 3));
        assert_eq!(stragglers(&doc), Vec::<u64>::new(), "{doc:#}");
        assert_eq!(doc["straggler"]["line"], "no straggler (3 ranks even)");
        seen += 1;
        assert!(start.elapsed() < Duration::from_secs(120));
    }
}

#[test]
fn while_ranks_start_top_names_the_one_that_has_not_printed_then_the_last_to() {
    let job = TopJob::start(3, 29961, "late", 1);
    // exec_all shows its agent where each rank's start is from 0.5 s on.
    let waiting = job.top_until(&[], |doc| {
        doc["start"]["printed"] == 2 && doc["start"]["waiting"][0]["phases"].is_array()
    });
    let start = &waiting["start"];
    assert_eq!(start["ranks"], 3, "{waiting:#}");
    assert_eq!(start["waiting"][0]["rank"], 1, "{waiting:#}");
    let line = start["line"].as_str().unwrap();
    let prefix = format!(
        "starting: 2 of 3 ranks printed; waiting: rank 1 ({}) up ",
        job.hosts[1]
    );
    assert!(line.starts_with(&prefix), "{line}");
    // Rank 1 is reached on a connection of its own: connect, login, spawn.
    let phases: Vec<&str> = start["waiting"][0]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["connect", "login", "spawn"], "{waiting:#}");
    assert!(
        line.contains(" s, no output or heartbeat (its start: connect "),
        "{line}"
    );
    assert!(waiting["rows"][1]["up_s"].as_f64().unwrap() > 0.0);
    assert!(
        waiting["rows"][1]["first_output_s"].is_null(),
        "{waiting:#}"
    );

    let started = job.top_until(&[], |doc| {
        doc["start"]["last_rank"] == 1 && doc["start"]["last_phases"].is_array()
    });
    let line = started["start"]["line"].as_str().unwrap();
    assert!(
        line.starts_with(&format!(
            "started: every rank printed; the last was rank 1 ({}): connect ",
            job.hosts[1]
        )),
        "{line}"
    );
    assert!(line.ends_with(": first line the longest"), "{line}");
    let first_line = &started["start"]["last_phases"][3];
    assert_eq!(first_line[0], "first line", "{started:#}");
    assert!(first_line[1].as_f64().unwrap() >= 5.0, "{started:#}");
    let first = |r: usize| started["rows"][r]["first_output_s"].as_f64().unwrap();
    assert!(first(1) >= 5.0, "{started:#}");
    // Rank 0 (exec_all's own, shown to its agent) and rank 2 printed within
    // their first second.
    assert!(first(0) < 3.0 && first(2) < 3.0, "{started:#}");
}

#[test]
fn inside_the_lifecycle_top_tells_a_waiting_ranks_start_from_exec_all_on_shared_connections() {
    // `multinode agent -- JOB` on every node, JOB the head's exec_all: it
    // reaches the workers through the head agent's shared connections (no
    // connect, no login of its own) and tells that agent where each start is.
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("ranks.py");
    std::fs::write(&prog, PROGRAM).unwrap();
    let hosts = fresh_loopbacks(3);
    let port = 29962;
    let script = format!("exec {PYTHON} {} 3 127.0.0.1:9 late 1", prog.display());
    let job = ["mn-exec-all", "-c", script.as_str()];
    let path = path_without_py_spy();
    let nodes: Vec<Child> = (0..3)
        .rev()
        .map(|r| {
            crate::lifecycle::node(&hosts, r, port, &[], &job)
                .env("PATH", &path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let top = TopJob {
        hosts: hosts.clone(),
        port,
        agents: Vec::new(),
        ended: nodes,
        _dir: dir,
    };
    let waiting = top.top_until(&[], |doc| {
        doc["start"]["printed"] == 2 && doc["start"]["waiting"][0]["phases"].is_array()
    });
    let rank1 = &waiting["start"]["waiting"][0];
    assert_eq!(rank1["rank"], 1, "{waiting:#}");
    assert_eq!(rank1["phases"].as_array().unwrap().len(), 1, "{waiting:#}");
    assert_eq!(rank1["phases"][0][0], "spawn", "{waiting:#}");
    let started = top.top_until(&[], |doc| doc["start"]["last_phases"].is_array());
    let line = started["start"]["line"].as_str().unwrap();
    assert!(
        line.starts_with(&format!(
            "started: every rank printed; the last was rank 1 ({}): spawn ",
            hosts[1]
        )),
        "{line}"
    );
    assert!(line.ends_with(": first line the longest"), "{line}");
}

#[test]
fn while_the_health_check_runs_top_tells_its_ranks_as_in_it() {
    // Every node's check sleeps 4 s (rank 2's 8 s) and prints nothing.
    let check = "sleep $((4 + 4 * (RANK / 2)))";
    let job = TopJob::start_with(3, 29963, "even", 1, &["--health-check", check]);
    let doc = job.top_until(&[], |doc| {
        doc["start"]["waiting"]
            .as_array()
            .is_some_and(|w| w.len() == 3 && w.iter().all(|w| w["health_check"] == true))
    });
    let line = doc["start"]["line"].as_str().unwrap();
    assert!(
        line.contains(&format!(
            "rank 2 ({}) in its health check, up ",
            job.hosts[2]
        )),
        "{line}"
    );
    // Then the attempt: its ranks start and print, the check's word gone.
    let started = job.top_until(&[], |doc| doc["start"]["last_phases"].is_array());
    let line = started["start"]["line"].as_str().unwrap();
    assert!(line.starts_with("started: every rank printed; "), "{line}");
    assert!(!line.contains("health check"), "{line}");
}

#[test]
fn a_rank_whose_output_stopped_is_named() {
    let job = TopJob::start(3, 29957, "frozen", 1);
    let doc = job.top_until(&[], |doc| stragglers(doc) == [1]);
    let reasons = doc["straggler"]["stragglers"][0]["reasons"][0]
        .as_str()
        .unwrap();
    assert!(reasons.starts_with("output stopped: last line "), "{doc:#}");
    assert!(
        doc["rows"][1]["output_age_s"].as_f64().unwrap() > 5.0,
        "{doc:#}"
    );
}

#[test]
fn a_rank_in_d_state_is_named() {
    let job = TopJob::start(3, 29958, "dstate", 2);
    let doc = job.top_until(&[], |doc| {
        stragglers(doc) == [2] && doc["rows"][2]["state"] == "D"
    });
    let finding = &doc["straggler"]["stragglers"][0];
    assert!(
        finding["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("in D state (uninterruptible) in "),
        "{doc:#}"
    );
    let (d, looks) = (&doc["rows"][2]["d_looks"], &doc["rows"][2]["looks"]);
    assert!(
        d.as_u64().unwrap() * 2 >= looks.as_u64().unwrap(),
        "{doc:#}"
    );
    for r in &doc["rows"].as_array().unwrap()[..2] {
        assert_eq!(r["d_looks"], 0, "{doc:#}");
    }
}

/// The TCP connections `pid` holds (their sockets' inodes).
fn tcp_sockets_of(pid: u32) -> std::collections::BTreeSet<String> {
    let tcp: std::collections::BTreeSet<String> = ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().nth(9).map(|i| format!("socket:[{i}]")))
                .collect::<Vec<_>>()
        })
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|l| l.display().to_string())
        .filter(|l| tcp.contains(l))
        .collect()
}

#[test]
fn a_live_top_keeps_one_connection_a_node_across_refreshes() {
    use std::io::BufRead;
    let job = TopJob::start(3, 29948, "even", 0);
    let mut top = job.live_top();
    let pid = top.id();
    let mut lines = std::io::BufReader::new(top.stdout.take().unwrap()).lines();
    let mut refresh = || {
        let line = lines.next().expect("a refresh").unwrap();
        let doc: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(doc["ranks"], 3, "{doc:#}");
        doc
    };
    // Until every node answers (the job starting), then twice more.
    let start = Instant::now();
    while !refresh()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r.get("error").is_none() && r["comm"] == "python3")
    {
        assert!(start.elapsed() < Duration::from_secs(60));
    }
    let before = tcp_sockets_of(pid);
    refresh();
    refresh();
    let after = tcp_sockets_of(pid);
    signal(pid, nix::sys::signal::Signal::SIGTERM);
    let _ = wait_exit(&mut top, Duration::from_secs(10));
    // One a node, the same ones: no new login each refresh.
    assert_eq!(before.len(), 3, "{before:?}");
    assert_eq!(before, after);
}

/// A fake `nvidia-smi` in `dir`: a GPU as an H100's driver prints it for
/// top's two queries, every process running `ranks.py` a compute process
/// on it, once or, with `--loop-ms`, a sample each period; every start
/// logged to `dir/starts` (its pid, its parent's, its arguments).
/// Anything else fails, as with no GPU. It ignores SIGPIPE: a loop
/// whose reader died goes on, as only its parent-death signal ends it.
fn fake_nvidia_smi(dir: &std::path::Path) {
    let path = dir.join("nvidia-smi");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ntrap '' PIPE\necho \"$$ $PPID $*\" >> {}/starts\n\
             sample() {{ case \"$1\" in\n\
             --query-compute-apps=*) for d in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" in\n\
               *ranks.py*) echo \"${{d#/proc/}}, 40210, GPU-5f0e6b1c-0000-0000-0000-000000000000\";; esac; done;;\n\
             --query-gpu=index,uuid,utilization.gpu,memory.used,*) echo '0, GPU-5f0e6b1c-0000-0000-0000-000000000000, 97, 40213, 81559, 512.33, 1980, 1980, 0x0000000000000000';;\n\
             *) exit 9;;\n\
             esac; }}\n\
             case \"$3\" in\n\
             --loop-ms=*) while :; do sample \"$1\"; sleep $(awk \"BEGIN {{ print ${{3#--loop-ms=}} / 1000 }}\"); done;;\n\
             *) sample \"$1\";;\n\
             esac\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

#[test]
fn a_live_top_reads_the_gpus_from_loops_of_nvidia_smi_that_end_with_the_agent() {
    use std::io::BufRead;
    let fake = tempfile::tempdir().unwrap();
    fake_nvidia_smi(fake.path());
    let path = format!("{}:{}", fake.path().display(), path_without_py_spy());
    let mut job = TopJob::start_on(3, 29964, "even", 0, &[], &path);
    let mut top = job.live_top();
    let mut lines = std::io::BufReader::new(top.stdout.take().unwrap()).lines();
    let mut refresh = || -> serde_json::Value {
        let line = lines.next().expect("a refresh").unwrap();
        serde_json::from_str(&line).unwrap()
    };
    // Each rank's GPU with the fake's values, every refresh once the job
    // runs, 4 times.
    let start = Instant::now();
    let mut filled = 0;
    while filled < 4 {
        let doc = refresh();
        let rows = doc["rows"].as_array().unwrap();
        let running = rows.len() == 3 && rows.iter().all(|r| r["comm"] == "python3");
        if running || filled > 0 {
            for r in rows {
                assert_eq!(r["gpus"][0]["sm_clock_mhz"], 1980, "{doc:#}");
                assert_eq!(r["gpus"][0]["memory_used_mib"], 40213, "{doc:#}");
                assert_eq!(r["gpus"][0]["power_w"], 512.33, "{doc:#}");
            }
            filled += 1;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{doc:#}");
    }
    signal(top.id(), nix::sys::signal::Signal::SIGTERM);
    let _ = wait_exit(&mut top, Duration::from_secs(10));
    // Each agent ran both queries once, then kept one loop of each: two
    // runs and two loops, however many refreshes.
    let starts: Vec<(u32, u32, String)> = std::fs::read_to_string(fake.path().join("starts"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.splitn(3, ' ');
            let pid = f.next().unwrap().parse().unwrap();
            let parent = f.next().unwrap().parse().unwrap();
            (pid, parent, f.next().unwrap_or_default().to_string())
        })
        .collect();
    for agent in &job.agents {
        let of: Vec<_> = starts
            .iter()
            .filter(|(_, p, _)| *p == agent.pid())
            .collect();
        let loops = of
            .iter()
            .filter(|(_, _, a)| a.contains("--loop-ms=1000"))
            .count();
        assert_eq!((of.len(), loops), (4, 2), "{starts:?}");
    }
    // An agent killed with SIGKILL: its loops end with it.
    let agent = job.agents.remove(1);
    let loops: Vec<u32> = starts
        .iter()
        .filter(|(_, p, a)| *p == agent.pid() && a.contains("--loop-ms"))
        .map(|(pid, _, _)| *pid)
        .collect();
    assert!(loops.iter().all(|pid| alive(*pid)), "{loops:?}");
    signal(agent.pid(), nix::sys::signal::Signal::SIGKILL);
    assert!(
        eventually(Duration::from_secs(10), || loops
            .iter()
            .all(|pid| !alive(*pid))),
        "nvidia-smi outlived its agent: {loops:?}"
    );
}

#[test]
fn top_bad_input_and_no_nccl_is_quiet() {
    // A pattern without a group, a bad interval: one line, exit 2.
    for args in [
        &["top", "--hosts", "a,b", "--progress", r"step \d+"][..],
        &["top", "--hosts", "a,b", "--interval", "0"],
        &["top", "--hosts", "a,b", "--progress", "step (\\d+"],
    ] {
        let out = cmd(&multinode()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    // No NCCL on these nodes: no RAS line, no ras field, nothing on stderr.
    let job = TopJob::start(2, 29959, "frozen", 9);
    let doc = job.top_until(&[], |doc| doc["rows"].as_array().unwrap().len() == 2);
    assert!(doc.get("ras").is_none(), "{doc:#}");
    let out = job.top(&["--once"]);
    assert_eq!(stderr(&out), "");
    assert!(!stdout(&out).contains("NCCL"), "{}", stdout(&out));
}

/// A live `top` on a pipe whose reader stopped reading: once the pipe is
/// full its write waits, and SIGTERM still ends it at once (the write
/// blocked the runtime's thread before, and the signal waited for a
/// reader that never came).
#[test]
fn a_live_top_blocked_on_a_full_pipe_still_ends_on_sigterm() {
    use std::os::fd::AsRawFd;
    let job = TopJob::start(2, 29947, "even", 0);
    let mut top = cmd(&multinode())
        .env("MULTINODE_HOSTLIST", one_slot_each(&job.hosts))
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_AGENT_PORT", job.port.to_string())
        .args(["top", "--format", "json", "--interval", "0.05"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = top.stdout.take().unwrap();
    let fd = out.as_raw_fd();
    // The smallest pipe the kernel gives (a page): full after a few refreshes.
    unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, 4096) };
    let queued = || {
        let mut n: libc::c_int = 0;
        unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
        n
    };
    // Full: a refresh's line no longer fits, and nothing more comes.
    let full = eventually(Duration::from_secs(60), || {
        let before = queued();
        std::thread::sleep(Duration::from_millis(500));
        before > 2048 && queued() == before
    });
    assert!(full, "the pipe never filled: {} bytes", queued());
    assert!(alive(top.id()));
    let sent = Instant::now();
    signal(top.id(), nix::sys::signal::Signal::SIGTERM);
    let code = wait_exit(&mut top, Duration::from_secs(10));
    assert_eq!(
        code,
        Some(0),
        "top did not end on SIGTERM with its pipe full"
    );
    assert!(
        sent.elapsed() < Duration::from_secs(3),
        "{:?}",
        sent.elapsed()
    );
    drop(out);
}
