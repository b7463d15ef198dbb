//! `multinode ps` on loopback agents running small Python programs: the
//! snapshot names the odd rank and folds the rest, with Python stacks when
//! py-spy is installed (tests/install-deps.sh installs it from PyPI) and
//! wait channels when it is not.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The Python of the tests (Debian's): py-spy reads its memory.
const PYTHON: &str = "/usr/bin/python3";

/// Every rank runs `work(rank)` from this program: named functions, so
/// the stacks are recognisable.
const PROGRAM: &str = r#"
import os, socket, sys, time

def read_reply(sock):
    return sock.recv(1)           # blocks: nobody ever writes

def compute():
    x = 0
    while True:
        x += 1

def all_reduce(sock):
    return sock.recv(1)           # a collective stand-in: waits for the others

def load_batch():
    time.sleep(100000)

def main(mode, rank, odd):
    a, b = socket.socketpair()
    if mode == "socket":
        if rank == odd:
            read_reply(a)
        else:
            compute()
    else:
        if rank == odd:
            load_batch()
        else:
            all_reduce(a)

main(sys.argv[1], int(os.environ["RANK"]), int(sys.argv[2]))
"#;

/// A job run by the agents' lifecycle: the head's JOB is mn-exec-all.
struct Job {
    hosts: Vec<String>,
    port: u16,
    agents: Vec<Child>,
    path: String,
}

impl Job {
    /// `n` nodes, each running `PYTHON prog MODE ODD`; `path` is every agent's PATH.
    fn start(n: usize, port: u16, prog: &Path, mode: &str, odd: usize, path: &str) -> Job {
        let hosts = fresh_loopbacks(n);
        let script = format!("exec {PYTHON} {} {mode} {odd}", prog.display());
        let job = ["mn-exec-all", "-c", script.as_str()];
        let mut j = Job {
            hosts,
            port,
            agents: Vec::new(),
            path: path.to_string(),
        };
        for rank in (0..n).rev() {
            let child = j
                .command(&multinode(), rank)
                .args(["agent", "--listen", &format!("{}:{port}", j.hosts[rank])])
                .arg("--")
                .args(job)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start an agent");
            j.agents.push(child);
        }
        j
    }

    fn command(&self, program: &Path, rank: usize) -> Command {
        let hostlist = one_slot_each(&self.hosts);
        let mut c = cmd(program);
        c.env("MULTINODE_HOSTLIST", hostlist)
            .env("MULTINODE_NODE_RANK", rank.to_string())
            .env("MULTINODE_AGENT_PORT", self.port.to_string())
            .env("PATH", &self.path);
        c
    }

    fn ps(&self, format: &str) -> Output {
        self.command(&multinode(), 0)
            .args(["ps", "--format", format])
            .stdin(Stdio::null())
            .output()
            .expect("run multinode ps")
    }

    /// `multinode ps --format json` until every node shows a Python process
    /// in the expected shape (the programs take a moment to get there).
    fn ps_until(&self, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let start = Instant::now();
        loop {
            let out = self.ps("json");
            let doc: Option<serde_json::Value> = serde_json::from_slice(&out.stdout).ok();
            if let Some(doc) = doc {
                if out.status.code() == Some(0) && ready(&doc) {
                    return doc;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "the snapshot never took shape: {doc:#}\n{}",
                    stderr(&out)
                );
            } else {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "no snapshot: {} {}",
                    stdout(&out),
                    stderr(&out)
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Job {
    /// SIGTERM to every agent (the head's ends the job), SIGKILL to stragglers.
    fn drop(&mut self) {
        for a in &self.agents {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(a.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        for a in &mut self.agents {
            if !eventually(Duration::from_secs(15), || {
                matches!(a.try_wait(), Ok(Some(_)))
            }) {
                let _ = a.kill();
            }
            let _ = a.wait();
        }
    }
}

fn write_program(dir: &Path) -> PathBuf {
    let prog = dir.join("prog.py");
    std::fs::write(&prog, PROGRAM).expect("write the program");
    prog
}

/// The folder holding py-spy on this PATH: the tests need it (no skipping).
fn py_spy_dir() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|d| d.join("py-spy").is_file())
        .expect("py-spy is not on PATH: tests/install-deps.sh installs it from PyPI")
}

/// A PATH with our binaries and the system's, without py-spy.
fn path_without_py_spy() -> String {
    let path = format!("{}:/usr/bin:/bin", multinode().parent().unwrap().display());
    for d in std::env::split_paths(&path) {
        assert!(!d.join("py-spy").exists(), "py-spy in {}", d.display());
    }
    path
}

/// Every node has exactly one leaf Python process in `state` (R or S) or
/// with a stack; `doc` is `multinode ps --format json`.
fn pythons(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    doc["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| {
            s["processes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| {
                    p["comm"] == "python3" && p["cmdline"].as_str().unwrap().contains("prog.py")
                })
                .cloned()
        })
        .collect()
}

#[test]
fn ps_names_the_rank_blocked_in_a_socket_read_and_folds_the_spinners() {
    let dir = tempfile::tempdir().unwrap();
    let prog = write_program(dir.path());
    let path = format!(
        "{}:{}:{}",
        multinode().parent().unwrap().display(),
        py_spy_dir().display(),
        std::env::var("PATH").unwrap()
    );
    let job = Job::start(4, 29940, &prog, "socket", 2, &path);
    let doc = job.ps_until(|doc| {
        let py = pythons(doc);
        py.len() == 4
            && py
                .iter()
                .all(|p| p["stack"].as_array().is_some_and(|s| s.len() >= 2))
    });
    let groups = doc["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{doc:#}");
    assert_eq!(groups[0]["ranks"], "2", "{doc:#}");
    assert_eq!(groups[0]["odd"], true);
    assert_eq!(
        groups[0]["summary"], "python3 sleeping in read_reply <- main <- <module>",
        "{doc:#}"
    );
    assert_eq!(groups[1]["ranks"], "0-1,3");
    assert_eq!(groups[1]["odd"], false);
    assert_eq!(
        groups[1]["summary"],
        "python3 running in compute <- main <- <module>"
    );
    for p in pythons(&doc) {
        let spinning = p["stack"][0]["function"] == "compute";
        if spinning {
            assert!(p["cpu_pct"].as_f64().unwrap() > 1.0, "{p:#}");
        } else {
            assert_eq!(p["stack"][0]["function"], "read_reply", "{p:#}");
            assert_eq!(p["state"], "S");
            assert_eq!(p["stack_idle"], true);
        }
        assert!(p["rss_kib"].as_u64().unwrap() > 1000, "{p:#}");
        assert!(p["elapsed_s"].as_f64().unwrap() < 120.0);
    }
    // The head's tree holds exec_all itself (the agent runs JOB).
    let head = &doc["snapshots"][0];
    assert_eq!(head["host"], job.hosts[0]);
    assert!(
        head["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["cmdline"].as_str().unwrap().starts_with("mn-exec-all")),
        "{head:#}"
    );

    // The table for people: the headline names the odd rank first.
    let out = job.ps("table");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    let first = table.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "rank 2 ({}): python3 sleeping in read_reply <- main <- <module>; the others, ranks 0-1,3: python3 running in compute <- main <- <module>",
            job.hosts[2]
        )
    );
    // The way onto the odd rank, and it leads there with the job's environment.
    assert_eq!(
        table.lines().nth(1),
        Some("shell into it: multinode shell 2"),
        "{table}"
    );
    let there = job
        .command(&multinode(), 0)
        .args(["shell", "2", "--", "echo $RANK $MULTINODE_LOCAL_IP"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(there.status.code(), Some(0), "{}", stderr(&there));
    assert_eq!(stdout(&there), format!("2 {}\n", job.hosts[2]));
    assert!(
        table.contains("        read_reply (prog.py:5)\n"),
        "{table}"
    );
    assert!(
        table.contains("(shown for the 3 ranks 0-1,3 alike)"),
        "{table}"
    );
}

/// The hang of the real GPU run of bench/gpu/ps_hang.py, with torch's
/// frames where torch 2.11 has them (py-spy's stacks of that run,
/// bench/gpu/results/h200-ps-hang-2026-12-03.log: rank 1 `synchronize
/// (torch/cuda/__init__.py) <- spin_forever (ps_hang.py) <- main`, rank 0
/// `all_reduce (torch/distributed/distributed_c10d.py) <-
/// _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py) <-
/// main (ps_hang.py)`): a stand-in `torch` whose
/// `synchronize` spins as a host thread waiting for a busy GPU does, and
/// whose `all_reduce` waits for a peer that never sends, as gloo's does.
/// Neither prints anything, as neither does in torch.
const TORCH_STAND_IN: &[(&str, &str)] = &[
    ("torch/__init__.py", "from . import cuda, distributed\n"),
    (
        "torch/cuda/__init__.py",
        "def synchronize(device=None):\n    while True:\n        pass\n",
    ),
    (
        "torch/distributed/__init__.py",
        "from .distributed_c10d import all_reduce\n",
    ),
    (
        "torch/distributed/c10d_logger.py",
        "import functools\n\n\ndef _exception_logger(func):\n    @functools.wraps(func)\n    def wrapper(*args, **kwargs):\n        return func(*args, **kwargs)\n\n    return wrapper\n",
    ),
    (
        "torch/distributed/distributed_c10d.py",
        "import socket\n\nfrom .c10d_logger import _exception_logger\n\n_peer, _ = socket.socketpair()\n\n\n@_exception_logger\ndef all_reduce(tensor, op=None, group=None, async_op=False):\n    return _peer.recv(1)\n",
    ),
    (
        "ps_hang.py",
        "import os\n\nimport torch\nimport torch.distributed as dist\n\n\ndef spin_forever():\n    while True:\n        torch.cuda.synchronize()\n\n\ndef main():\n    if int(os.environ[\"RANK\"]) == 1:\n        spin_forever()\n    dist.all_reduce(None)\n\n\nmain()\n",
    ),
];

/// Writes the stand-in torch and `ps_hang.py` under `dir`; returns `ps_hang.py`.
fn write_torch_stand_in(dir: &Path) -> PathBuf {
    for (path, text) in TORCH_STAND_IN {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    dir.join("ps_hang.py")
}

#[test]
fn of_two_ranks_the_one_in_synchronize_comes_before_the_one_in_all_reduce() {
    let dir = tempfile::tempdir().unwrap();
    let spin = write_torch_stand_in(dir.path());
    let path = format!(
        "{}:{}:{}",
        multinode().parent().unwrap().display(),
        py_spy_dir().display(),
        std::env::var("PATH").unwrap()
    );
    // The program takes no arguments; these two are ignored.
    let job = Job::start(2, 29945, &spin, "gpu", 1, &path);
    let doc = job.ps_until(|doc| {
        doc["snapshots"].as_array().unwrap().iter().all(|s| {
            s["processes"].as_array().unwrap().iter().any(|p| {
                p["stack"][0]["function"] == "synchronize"
                    || p["stack"][0]["function"] == "all_reduce"
            })
        })
    });
    let groups = doc["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{doc:#}");
    assert_eq!(groups[0]["ranks"], "1", "{doc:#}");
    assert_eq!(groups[0]["odd"], true);
    assert_eq!(
        groups[0]["summary"], "python3 running in synchronize <- spin_forever <- main",
        "{doc:#}"
    );
    assert_eq!(groups[1]["ranks"], "0");
    assert_eq!(
        groups[1]["summary"],
        "python3 sleeping in all_reduce <- _exception_logger.<locals>.wrapper <- main"
    );
    let out = job.ps("table");
    let table = stdout(&out);
    assert!(
        table.starts_with(&format!(
            "rank 1 ({}): python3 running in synchronize <- spin_forever <- main; the others, rank 0 ({}): ",
            job.hosts[1], job.hosts[0]
        )),
        "{table}"
    );
    for frame in [
        "        synchronize (torch/cuda/__init__.py:",
        "        spin_forever (ps_hang.py:",
        "        all_reduce (torch/distributed/distributed_c10d.py:",
        "        _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:",
    ] {
        assert!(table.contains(frame), "{frame}: {table}");
    }
}

#[test]
fn without_py_spy_the_wait_channel_names_the_rank_asleep_outside_the_collective() {
    let dir = tempfile::tempdir().unwrap();
    let prog = write_program(dir.path());
    let job = Job::start(3, 29941, &prog, "collective", 1, &path_without_py_spy());
    let doc = job.ps_until(|doc| {
        let py = pythons(doc);
        py.len() == 3
            && py
                .iter()
                .all(|p| p["state"] == "S" && p["wchan"].is_string())
    });
    for s in doc["snapshots"].as_array().unwrap() {
        assert_eq!(s["py_spy"], "not installed (no Python stacks)");
    }
    for p in pythons(&doc) {
        assert!(p.get("stack").is_none(), "{p:#}");
    }
    let groups = doc["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{doc:#}");
    assert_eq!(groups[0]["ranks"], "1");
    assert_eq!(groups[0]["odd"], true);
    assert_eq!(groups[1]["ranks"], "0,2");
    // Sleeping in a timer, against reading a socket.
    let odd = &pythons(&doc)[1];
    let wait = odd["wchan"].as_str().unwrap();
    assert!(wait.contains("sleep"), "{odd:#}");
    assert_eq!(groups[0]["summary"], format!("python3 sleeping in {wait}"));
}

#[test]
fn ps_names_a_node_without_an_agent_and_exits_255() {
    let hosts = fresh_loopbacks(2);
    let _agent = Agent::start_with(&hosts[0], 29942, &[], &[]);
    let out = cmd(&multinode())
        .env(
            "MULTINODE_HOSTLIST",
            format!("{}:1,{}:1", hosts[0], hosts[1]),
        )
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_AGENT_PORT", "29942")
        .args(["ps", "--connect-timeout", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.starts_with(&format!("rank 1 ({}): no snapshot: ", hosts[1])),
        "{table}"
    );
    assert!(
        table.contains("no process of the job is running"),
        "{table}"
    );
    // No agent answers on rank 1: no way in to suggest.
    assert!(!table.contains("shell into"), "{table}");

    // Bad input: one line, exit 2.
    let out = cmd(&multinode())
        .args(["ps", "--hosts", "a[1-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

/// Agents on nodes 1.. (node 0 is this machine, run by exec_all itself),
/// and `mn-exec-all ARGS -c 'PYTHON prog collective 1'` as a command.
struct Plain {
    hosts: Vec<String>,
    _agents: Vec<Agent>,
    _dir: tempfile::TempDir,
    prog: PathBuf,
    port: u16,
}

impl Plain {
    fn start(n: usize, port: u16) -> Plain {
        let dir = tempfile::tempdir().unwrap();
        let prog = write_program(dir.path());
        let hosts = fresh_loopbacks(n);
        let agents = hosts[1..]
            .iter()
            .map(|h| Agent::start_with(h, port, &[], &[]))
            .collect();
        Plain {
            hosts,
            _agents: agents,
            _dir: dir,
            prog,
            port,
        }
    }

    fn exec_all(&self, args: &[&str]) -> Command {
        let hostlist = one_slot_each(&self.hosts);
        let mut c = cmd(&mn_exec_all());
        c.env("MULTINODE_HOSTLIST", hostlist)
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", self.port.to_string())
            .args(args)
            .arg("-c")
            .arg(format!(
                "exec {PYTHON} {} collective 1",
                self.prog.display()
            ))
            .stdin(Stdio::null());
        c
    }

    /// The Python programs running (not the shells and exec_all whose command lines name them).
    fn programs(&self) -> usize {
        let needle = format!("{PYTHON} {}", self.prog.display());
        pids_matching(&needle)
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with(format!("{PYTHON}\0").as_bytes()))
            })
            .count()
    }

    /// Waits until every node's Python program runs.
    fn wait_running(&self) {
        assert!(
            eventually(Duration::from_secs(20), || self.programs()
                == self.hosts.len()),
            "the programs did not start"
        );
        // Into their blocking calls.
        std::thread::sleep(Duration::from_millis(500));
    }

    fn headline(&self) -> String {
        format!(
            "rank 1 ({}): python3 sleeping in load_batch <- main <- <module>; the others, ranks 0,2: python3 sleeping in all_reduce <- main <- <module>",
            self.hosts[1]
        )
    }
}

/// A node's snapshot (JSON) whose first process is `multinode supervise`:
/// the node exec_all runs itself.
fn assert_led_by_supervise(node: &serde_json::Value) {
    assert!(
        node["processes"][0]["cmdline"]
            .as_str()
            .is_some_and(|c| c.contains("supervise")),
        "{node:#}"
    );
}

#[test]
fn snapshot_on_timeout_is_printed_and_kept_in_the_report() {
    py_spy_dir();
    let plain = Plain::start(3, 29943);
    let report = plain._dir.path().join("report.json");
    let child = plain
        .exec_all(&[
            "--timeout",
            "6",
            "--snapshot-on-timeout",
            "--report",
            report.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    plain.wait_running();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(124), "{err}");
    let block = err
        .split("mn-exec-all: --timeout 6s expired; what every node was doing:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no snapshot in: {err}"));
    assert!(block.starts_with(&plain.headline()), "{err}");
    assert!(block.contains("        load_batch (prog.py:16)\n"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(doc["cancelled"], "timeout");
    assert_eq!(doc["snapshot"]["nodes"], 3);
    assert_eq!(doc["snapshot"]["groups"][0]["ranks"], "1");
    assert_eq!(doc["snapshot"]["groups"][0]["odd"], true);
    // Node 0's snapshot is exec_all's own: its tree under `multinode supervise`.
    let node0 = &doc["snapshot"]["snapshots"][0];
    assert_eq!(node0["rank"], 0);
    assert_led_by_supervise(node0);
    // Nothing of the job is left.
    assert!(eventually(Duration::from_secs(10), || plain.programs() == 0));
}

#[test]
fn sigusr1_prints_the_snapshot_and_the_run_goes_on() {
    py_spy_dir();
    let plain = Plain::start(3, 29944);
    let mut child = plain
        .exec_all(&["--timeout", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0
                || tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
            {
                break;
            }
        }
    });
    plain.wait_running();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let asked = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR1).unwrap();
    let mut err = String::new();
    while !err.contains(&plain.headline()) {
        match rx.recv_timeout(Duration::from_secs(15)) {
            Ok(chunk) => err.push_str(&chunk),
            Err(_) => panic!("no snapshot after SIGUSR1: {err}"),
        }
    }
    let took = asked.elapsed();
    assert!(
        err.starts_with("mn-exec-all: snapshot on SIGUSR1, "),
        "{err}"
    );
    // The run goes on after it: still running, then ended by SIGTERM.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(child.try_wait().unwrap(), None, "{err}");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    reader.join().unwrap();
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// `multinode ps` of a job whose exec_all runs outside any agent, its own
/// node (rank 0) run by itself, with an agent on every node (rank 0's
/// machine included), as a job script started by a batch system has it.
#[test]
fn ps_sees_the_node_exec_all_runs_itself() {
    let hosts = fresh_loopbacks(3);
    let port = 29946;
    let agents: Vec<Agent> = hosts
        .iter()
        .map(|h| Agent::start_with(h, port, &[], &[]))
        .collect();
    let hostlist = one_slot_each(&hosts);
    let job = |program: &Path| {
        let mut c = cmd(program);
        c.env("MULTINODE_HOSTLIST", &hostlist)
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", port.to_string());
        c
    };
    let sleep = format!("sleep 100000.{}", std::process::id());
    let exec_all = job(&mn_exec_all())
        .args(["-c", &format!("exec {sleep}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ps = || {
        let out = job(&multinode())
            .args(["ps", "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let sleeps = |doc: &serde_json::Value, rank: usize| -> usize {
        doc["snapshots"][rank]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["cmdline"] == sleep.as_str())
            .count()
    };
    let mut doc = ps();
    let start = Instant::now();
    while !(0..3).all(|r| sleeps(&doc, r) == 1) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "rank 0's sleep never showed: {doc:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
        doc = ps();
    }
    // Rank 0's agent shows the group exec_all started here: `multinode
    // supervise`, and the sleep under it. Every node does the same.
    let node0 = &doc["snapshots"][0];
    assert_eq!(node0["host"], hosts[0]);
    assert_led_by_supervise(node0);
    let groups = doc["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{doc:#}");
    assert_eq!(groups[0]["ranks"], "0-2");
    assert!(
        groups[0]["summary"].as_str().unwrap().starts_with("sleep "),
        "{doc:#}"
    );

    // Once exec_all is gone, so is what rank 0's agent showed.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(exec_all.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = exec_all.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(
        eventually(Duration::from_secs(10), || {
            let doc = ps();
            (0..3).all(|r| doc["snapshots"][r]["processes"] == serde_json::json!([]))
        }),
        "{:#}",
        ps()
    );
    assert!(pids_matching(&sleep).is_empty());

    // An agent in another PID namespace refuses to show a group: its PIDs
    // are not the client's.
    let out = job(&mn_ssh())
        .args([&hosts[0], "#multinode:show-group 1 1"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "multinode agent: process group 1 is not in this agent's PID namespace: not shown\n"
    );
    drop(agents);
}

/// A job's process may name itself anything (`exec -a`): `multinode ps`
/// shows its control characters escaped, so a title, a cleared screen or
/// a fake line never reaches the operator's terminal; `--format json`
/// keeps them as they are (JSON escapes them).
#[test]
fn ps_shows_control_characters_of_a_command_line_escaped() {
    let agent = Agent::start(&fresh_loopback());
    let tag = sleep_tag();
    let name = "\x1b]0;PWNED\x07\x1b[2J";
    let mut command = cmd(&mn_ssh())
        .arg(&agent.host)
        .arg(format!(
            "exec bash -c 'exec -a \"$(printf \"\\033]0;PWNED\\007\\033[2J\")\" sleep {tag}'"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ps = |format: &str| {
        cmd(&multinode())
            .env("MULTINODE_HOSTLIST", format!("{}:1", agent.host))
            .env("MULTINODE_NODE_RANK", "0")
            .args(["ps", "--format", format])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let shown = format!("{name} {tag}");
    assert!(
        eventually(Duration::from_secs(10), || {
            let doc: serde_json::Value =
                serde_json::from_slice(&ps("json").stdout).unwrap_or_default();
            doc["snapshots"][0]["processes"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["cmdline"] == shown.as_str()))
        }),
        "the JSON has the command line as it is"
    );
    let out = ps("table");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        !table.chars().any(|c| c.is_control() && c != '\n'),
        "{table:?}"
    );
    assert!(
        table.contains(&format!(r"\e]0;PWNED\x07\e[2J {tag}")),
        "{table}"
    );
    let _ = command.kill();
    let _ = command.wait();
}

/// The `Cpus_allowed_list` of `/proc/PID/status`.
fn cpus_allowed(pid: u64) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

/// `multinode ps` of a `--nproc-per-node 2` job (exec_all outside any
/// agent, an agent on every node, node 0's processes shown to its agent):
/// every process under its global rank and local rank, with the CPUs the
/// kernel lets it run on (each pinned by `taskset` to the CPU of its local
/// rank), as `/proc/PID/status` has them.
#[test]
fn ps_shows_each_process_of_several_a_node_by_its_rank_with_its_cpus() {
    let hosts = fresh_loopbacks(3);
    let port = 29947;
    let agents: Vec<Agent> = hosts
        .iter()
        .map(|h| Agent::start_with(h, port, &[], &[]))
        .collect();
    let hostlist = one_slot_each(&hosts);
    let job = |program: &Path| {
        let mut c = cmd(program);
        c.env("MULTINODE_HOSTLIST", &hostlist)
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", port.to_string());
        c
    };
    // Rank r sleeps `10000r.TAG`: its own command line.
    let tag = std::process::id();
    let mut exec_all = job(&mn_exec_all())
        .args(["--nproc-per-node", "2", "--bind", "none", "-c"])
        .arg(format!(
            "exec taskset -c $LOCAL_RANK sleep 10000$RANK.{tag}"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ps = |format: &str| {
        let out = job(&multinode())
            .args(["ps", "--format", format])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    let sleep_of = |doc: &serde_json::Value, rank: usize| -> Option<serde_json::Value> {
        doc["snapshots"][rank / 2]["processes"]
            .as_array()?
            .iter()
            .find(|p| p["cmdline"] == format!("sleep 10000{rank}.{tag}").as_str())
            .cloned()
    };
    let mut doc: serde_json::Value = serde_json::from_str(&ps("json")).unwrap();
    let start = Instant::now();
    while !(0..6).all(|r| sleep_of(&doc, r).is_some_and(|p| p["rank"] == r)) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not every rank showed: {doc:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
        doc = serde_json::from_str(&ps("json")).unwrap();
    }
    assert_eq!(doc["per_process"], true, "{doc:#}");
    for rank in 0..6 {
        let p = sleep_of(&doc, rank).unwrap();
        assert_eq!(p["local_rank"], rank % 2, "{p:#}");
        let cpus = cpus_allowed(p["pid"].as_u64().unwrap());
        assert_eq!(p["cpus"], cpus.as_str(), "rank {rank}: {p:#}");
        assert_eq!(cpus, (rank % 2).to_string(), "taskset pinned it");
    }
    // The groups fold the six ranks; each block names its node and local rank.
    assert_eq!(doc["groups"][0]["ranks"], "0-5", "{doc:#}");
    let table = ps("table");
    assert!(table.starts_with("all 6 ranks: sleep "), "{table}");
    assert!(
        table.contains(&format!(
            "\nrank 0 ({}: node 0, local rank 0) (shown for the 6 ranks 0-5 alike):\n  PID ",
            hosts[0]
        )),
        "{table}"
    );
    assert!(table.contains("  CPUS  "), "{table}");

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(exec_all.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    assert!(wait_exit(&mut exec_all, Duration::from_secs(20)).is_some());
    drop(agents);
}
