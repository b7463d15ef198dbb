//! When a job fails: the first-failure verdict (which node, how, OOM, core,
//! its NCCL line and last lines, the time to the job being down), and the
//! output kept for later (`--output`, `--timestamps`, `--group`), on agents
//! at loopback addresses and through a stock sshd.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::openssh::Sshd;
use crate::util::*;

/// Node 0 runs locally; nodes 1.. are agents.
struct Nodes {
    hosts: Vec<String>,
    _agents: Vec<Agent>,
}

impl Nodes {
    fn start(n: usize) -> Nodes {
        let hosts = fresh_loopbacks(n);
        let agents = hosts[1..].iter().map(|h| Agent::start(h)).collect();
        Nodes {
            hosts,
            _agents: agents,
        }
    }

    fn exec_all(&self) -> Command {
        let mut c = cmd(&mn_exec_all());
        c.env("MULTINODE_HOSTLIST", self.hosts.join(","))
            .env("MULTINODE_NODE_RANK", "0")
            .stdin(Stdio::null());
        c
    }

    /// `mn-exec-all --report FILE -c SCRIPT`: its output and the report.
    fn run_reported(&self, script: &str) -> (Output, serde_json::Value) {
        let dir = tempfile::tempdir().unwrap();
        let report_path = dir.path().join("report.json");
        let out = self
            .exec_all()
            .arg("--report")
            .arg(&report_path)
            .args(["-c", script])
            .output()
            .unwrap();
        let report = report(&report_path);
        (out, report)
    }
}

/// What a node of this machine can say of OOM kills: a count where its
/// cgroup's counter is readable (as `exit_info` finds it), else nothing.
fn oom_counter_readable() -> bool {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let readable = |p: String| {
        std::fs::read_to_string(p).is_ok_and(|t| t.lines().any(|l| l.starts_with("oom_kill ")))
    };
    let v1 = text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    match v1 {
        Some(path) => {
            readable(format!("/sys/fs/cgroup/memory{path}/memory.oom_control"))
                || readable("/sys/fs/cgroup/memory/memory.oom_control".into())
        }
        None => match text.lines().find_map(|l| l.strip_prefix("0::")) {
            Some(path) => {
                readable(format!("/sys/fs/cgroup{path}/memory.events"))
                    || readable("/sys/fs/cgroup/memory.events".into())
            }
            None => false,
        },
    }
}

#[test]
fn the_verdict_names_the_first_failure_its_last_lines_and_the_time_to_down() {
    let nodes = Nodes::start(3);
    let (out, report) = nodes.run_reported(
        "if [ $RANK = 2 ]; then echo step 1; echo 'h2:7:7 [2] NCCL WARN socket closed' >&2; \
         sleep 0.3; echo 'fatal: out of cheese' >&2; exit 3; fi; exec sleep 100",
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let host = &nodes.hosts[2];
    assert!(
        err.contains(&format!("first failure: rank 2 ({host}), ")) && err.contains("): exit 3\n"),
        "{err}"
    );
    assert!(
        err.contains("  last NCCL warning/error: h2:7:7 [2] NCCL WARN socket closed\n"),
        "{err}"
    );
    assert!(err.contains("\n    fatal: out of cheese\n"), "{err}");
    assert!(err.contains("  the whole job was down "), "{err}");
    // Its agent is still up: the verdict ends with the way onto the node, which works.
    assert!(
        err.ends_with("\n  shell into it: multinode shell 2\n"),
        "{err}"
    );
    assert_eq!(report["verdict"]["shell"], "multinode shell 2");
    let there = cmd(&multinode())
        .env("MULTINODE_HOSTLIST", nodes.hosts.join(","))
        .env("MULTINODE_NODE_RANK", "0")
        .args(["shell", "2", "--", "echo", "$RANK"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        (stdout(&there), there.status.code()),
        ("2\n".into(), Some(0))
    );
    // The table stays short: its STATUS cell is "exit 3".
    let row = err
        .lines()
        .find(|l| l.starts_with("2 ") && l.contains(host.as_str()))
        .unwrap_or_else(|| panic!("no row for rank 2: {err}"));
    assert!(row.contains("  exit 3  "), "{row}");

    let v = &report["verdict"];
    assert_eq!(v["rank"], 2);
    assert_eq!(v["exit"], 3);
    assert_eq!(v["signal"], serde_json::Value::Null);
    assert_eq!(v["nccl_line"], "h2:7:7 [2] NCCL WARN socket closed");
    let down = v["down_after_s"].as_f64().unwrap();
    assert!(down < 3.0 + 2.0, "down {down} s after the failure");
    assert!(v["after_start_s"].as_f64().unwrap() >= 0.3, "{v}");
    // The agent of rank 2 and exec_all for rank 0 read their cgroup's counter.
    if oom_counter_readable() {
        assert_eq!(v["oom_killed"], false, "{v}");
        assert_eq!(report["nodes"][0]["oom_kills"], 0, "{report}");
        assert!(err.contains("  OOM-killed: no\n"), "{err}");
    } else {
        assert_eq!(v["oom_killed"], serde_json::Value::Null, "{v}");
        assert!(err.contains("  OOM-killed: unknown"), "{err}");
    }
}

/// Real torchrun failures, as rank 1's torchrun printed them on an H200
/// (tests/fixtures/torchrun: stdout and stderr).
const TORCHRUN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torchrun");

/// Rank 1's stand-in prints the fixture `case` exactly (its stdout, then its
/// stderr) and exits 1 as torchrun does; rank 0 waits. The verdict's
/// stderr and `--report`'s verdict.
fn torchrun_failure(case: &str) -> (String, serde_json::Value) {
    let (out, report) = Nodes::start(2).run_reported(&format!(
        "if [ $RANK = 1 ]; then cat {TORCHRUN}/{case}.stdout; cat {TORCHRUN}/{case}.stderr >&2; exit 1; fi; exec sleep 100"
    ));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("first failure: rank 1 ("), "{err}");
    // What the verdict showed before: the last lines are torchrun's summary.
    assert!(
        err.contains("\n      traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n    ====="),
        "{err}"
    );
    (err, report["verdict"].clone())
}

#[test]
fn the_verdict_names_the_programs_error_past_torchruns_summary() {
    let (err, v) = torchrun_failure("oom");
    let oom = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB. GPU 0 has a total capacity of 139.80 GiB";
    let line = err
        .lines()
        .find(|l| l.starts_with("  program error: "))
        .unwrap_or_else(|| panic!("no program error in the verdict: {err}"));
    assert!(
        line.starts_with(&format!("  program error: {oom}")),
        "{line}"
    );
    assert!(
        line.ends_with("#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"),
        "{line}"
    );
    assert!(v["program_error"].as_str().unwrap().starts_with(oom), "{v}");
    assert_eq!(v["nccl_cause"], serde_json::Value::Null, "{v}");
    assert!(!err.contains("NCCL cause:"), "{err}");
}

/// PyTorch's NCCL exception on rank 1 in both duplicate-GPU runs.
const DIST_BACKEND_ERROR: &str = "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9";

/// The verdict of the fixture `case` names PyTorch's exception as the
/// program's error and its last NCCL line, and `cause` as NCCL's cause,
/// on stderr and in the report.
fn assert_nccl_cause(case: &str, cause: &str) {
    let (err, v) = torchrun_failure(case);
    let error = DIST_BACKEND_ERROR;
    assert!(
        err.contains(&format!(
            "  program error: {error}\n  NCCL cause: {cause}\n  last NCCL warning/error: {error}\n"
        )),
        "{err}"
    );
    assert_eq!(v["program_error"], error, "{v}");
    assert_eq!(v["nccl_cause"], cause, "{v}");
    assert_eq!(v["nccl_line"], error, "{v}");
}

#[test]
fn the_verdict_keeps_nccls_cause_and_its_last_line() {
    assert_nccl_cause(
        "duplicate-gpu",
        "[2026-12-03 14:51:53] vm:726:726 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60",
    );
}

#[test]
fn without_nccl_debug_the_cause_is_what_pytorch_quotes_after_last_error() {
    assert_nccl_cause(
        "duplicate-gpu-quiet",
        "[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60",
    );
}

#[test]
fn the_verdict_names_the_signal_of_a_crash_and_its_core_file() {
    let nodes = Nodes::start(2);
    let work = tempfile::tempdir().unwrap();
    let report_path = work.path().join("report.json");
    // Rank 1's shell runs a program that dies of SIGSEGV (and dumps core).
    let out = nodes
        .exec_all()
        .current_dir(work.path())
        .arg("--report")
        .arg(&report_path)
        .args([
            "-c",
            "if [ $RANK = 1 ]; then ulimit -c unlimited; sh -c 'kill -SEGV $$'; exit $?; fi; exec sleep 100",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(139), "{err}");
    assert!(err.contains("): exit 139 (SIGSEGV)\n"), "{err}");
    let v = &report(&report_path)["verdict"];
    assert_eq!(v["signal"], "SIGSEGV");
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let core = v["core"].as_str().unwrap_or_else(|| panic!("no core: {v}"));
    if let Some(handler) = pattern.strip_prefix('|') {
        let program = handler.split_whitespace().next().unwrap();
        assert_eq!(core, format!("piped to {program} (core_pattern)"));
    } else {
        // A pattern relative to the command's directory: the head's, here.
        assert!(Path::new(core).is_file(), "{core}");
        assert!(err.contains(&format!("  core: {core}\n")), "{err}");
    }
}

/// A relay's record of its group is lossless: a node of the group that
/// dumped core is told as it ended (the signal, the core dump, the core
/// file, the OOM count its agent read), and one that fail-fast ended keeps
/// its signal (issue 29: the record was the user's report, re-read by its
/// status words, and `core_dumped` was lost on the way).
#[test]
fn through_a_relay_a_crash_keeps_its_signal_core_dump_and_oom_count() {
    let nodes = Nodes::start(4);
    let work = tempfile::tempdir().unwrap();
    let report_path = work.path().join("report.json");
    // --fanout 1: rank 1 relays for ranks 1-3; rank 3's own shell dies of SIGSEGV.
    let out = nodes
        .exec_all()
        .current_dir(work.path())
        .args(["--fanout", "1", "--report"])
        .arg(&report_path)
        .args([
            "-c",
            "if [ $RANK = 3 ]; then sleep 0.3; ulimit -c unlimited; kill -SEGV $$; fi; exec sleep 100",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(139), "{err}");
    let report = report(&report_path);
    let v = &report["verdict"];
    assert_eq!(v["rank"], 3, "{report}");
    assert_eq!(v["how"], "killed by SIGSEGV (core dumped)", "{report}");
    assert_eq!(v["signal"], "SIGSEGV", "{report}");
    assert!(v["core"].is_string(), "no core: {report}");
    let expected = if oom_counter_readable() {
        serde_json::json!(0)
    } else {
        serde_json::Value::Null
    };
    assert_eq!(report["nodes"][3]["oom_kills"], expected, "{report}");
    // Rank 2, in the relay's group, ended by its fail-fast.
    let two = &report["nodes"][2];
    assert_eq!(
        (two["status"].as_str(), two["signal"].as_str()),
        (Some("killed"), Some("SIGTERM")),
        "{report}"
    );
}

#[test]
fn a_node_behind_a_stock_sshd_cannot_tell_oom_kills() {
    let sshd = Sshd::start();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::copy(sshd.path("client_key"), home.path().join(".ssh/id_ed25519")).unwrap();
    let report_dir = tempfile::tempdir().unwrap();
    let report_path = report_dir.path().join("report.json");
    let out = cmd(&mn_exec_all())
        .env_remove("MULTINODE_SECRET")
        .env("HOME", home.path())
        .env(
            "MULTINODE_HOSTLIST",
            format!("{}:1,127.0.0.1:1", fresh_loopback()),
        )
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_SSH_PORT", sshd.port.to_string())
        .arg("--report")
        .arg(&report_path)
        .args(["-c", "if [ $RANK = 1 ]; then exit 5; fi; exec sleep 100"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("first failure: rank 1 (127.0.0.1)"), "{err}");
    assert!(
        err.contains("  OOM-killed: unknown (the node cannot tell"),
        "{err}"
    );
    // No agent there: `multinode shell` would be a dead end.
    assert!(!err.contains("shell into"), "{err}");
    let report = report(&report_path);
    assert_eq!(report["verdict"].get("shell"), None);
    assert_eq!(report["verdict"]["oom_killed"], serde_json::Value::Null);
    assert_eq!(report["nodes"][1]["oom_kills"], serde_json::Value::Null);
}

const THREE_RANKS: &str =
    "echo same; echo \"rank $RANK\" >&2; if [ $RANK = 1 ]; then echo different; fi";

#[test]
fn output_dir_keeps_each_ranks_streams_besides_the_console() {
    let nodes = Nodes::start(3);
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs/run");
    let out = nodes
        .exec_all()
        .arg("--output")
        .arg(&logs)
        .args(["-c", THREE_RANKS])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).matches("same\n").count(), 3);
    for rank in 0..3 {
        let read = |ext: &str| std::fs::read_to_string(logs.join(format!("{rank}.{ext}"))).unwrap();
        let expected = if rank == 1 {
            "same\ndifferent\n"
        } else {
            "same\n"
        };
        assert_eq!(read("out"), expected, "rank {rank}");
        assert_eq!(read("err"), format!("rank {rank}\n"));
    }
}

#[test]
fn output_dir_that_cannot_be_made_is_a_usage_error() {
    let nodes = Nodes::start(1);
    let out = nodes
        .exec_all()
        .args(["--output", "/proc/no/such", "-c", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with("mn-exec-all: error: cannot create the --output directory /proc/no/such"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn timestamps_prefix_every_line_with_its_time() {
    let nodes = Nodes::start(2);
    let out = nodes
        .exec_all()
        .args(["--timestamps", "--label", "-c", "echo a; echo b >&2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let stamp = |line: &str| -> String {
        // 2026-12-01T09:24:20.123Z, then a space.
        let (ts, rest) = line.split_at(24);
        let b = ts.as_bytes();
        assert!(
            b[4] == b'-' && b[10] == b'T' && b[19] == b'.' && b[23] == b'Z',
            "{line:?}"
        );
        rest.strip_prefix(' ').unwrap().to_string()
    };
    let mut lines: Vec<String> = stdout(&out).lines().map(stamp).collect();
    lines.sort();
    let h = &nodes.hosts;
    assert_eq!(lines, [format!("0 {}: a", h[0]), format!("1 {}: a", h[1])]);
    let err: Vec<String> = stderr(&out).lines().map(stamp).collect();
    assert_eq!(err.len(), 2, "{err:?}");
}

#[test]
fn group_prints_identical_outputs_once_with_their_ranks() {
    let nodes = Nodes::start(3);
    let out: Output = nodes
        .exec_all()
        .args(["--group", "-c", THREE_RANKS])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let rule = |who: &str| "-".repeat(who.len().clamp(16, 72));
    let header = |who: &str| format!("{}\n{who}\n{}\n", rule(who), rule(who));
    let one = format!("rank 1 ({})", nodes.hosts[1]);
    assert_eq!(
        stdout(&out),
        format!(
            "{}same\n{}same\ndifferent\n",
            header("ranks 0,2 (2 nodes)"),
            header(&one)
        )
    );
    let err = stderr(&out);
    for rank in 0..3 {
        let who = format!("rank {rank} ({})", nodes.hosts[rank]);
        assert!(
            err.contains(&format!("{}rank {rank}\n", header(&who))),
            "{err}"
        );
    }
}

#[test]
fn through_a_relay_the_verdict_and_the_files_are_the_nodes_own() {
    let nodes = Nodes::start(4);
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let logs = dir.path().join("logs");
    // --fanout 1: rank 1 relays for ranks 1-3 (its exec_all runs them).
    let out = nodes
        .exec_all()
        .args(["--fanout", "1", "--report"])
        .arg(&report_path)
        .arg("--output")
        .arg(&logs)
        .args([
            "-c",
            // Rank 3 fails once every rank has printed (fail-fast would cut them short).
            "echo \"out $RANK\"; if [ $RANK = 3 ]; then sleep 0.5; echo 'h3:1:1 [3] NCCL WARN peer gone' >&2; \
             echo 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2; exit 4; fi; exec sleep 100",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let report = report(&report_path);
    let v = &report["verdict"];
    assert_eq!(v["rank"], 3, "{report}");
    assert_eq!(v["nccl_line"], "h3:1:1 [3] NCCL WARN peer gone");
    assert_eq!(v["nccl_cause"], "h3:1:1 [3] NCCL WARN peer gone");
    assert_eq!(
        v["program_error"],
        "RuntimeError: CUDA error: an illegal memory access was encountered"
    );
    assert!(
        err.contains("  last NCCL warning/error: h3:1:1 [3] NCCL WARN peer gone\n"),
        "{err}"
    );
    // Rank 3's agent measured its cgroup; the relay's report brought it back.
    let expected = if oom_counter_readable() {
        serde_json::json!(0)
    } else {
        serde_json::Value::Null
    };
    assert_eq!(report["nodes"][3]["oom_kills"], expected, "{report}");
    for rank in 0..4 {
        let text = std::fs::read_to_string(logs.join(format!("{rank}.out"))).unwrap();
        assert_eq!(text, format!("out {rank}\n"), "rank {rank}");
    }
    assert_eq!(
        std::fs::read_to_string(logs.join("3.err")).unwrap(),
        "h3:1:1 [3] NCCL WARN peer gone\nRuntimeError: CUDA error: an illegal memory access was encountered\n"
    );
}

#[test]
fn group_past_the_fanout_is_a_usage_error() {
    let nodes = Nodes::start(1);
    let mut c = nodes.exec_all();
    c.env("MULTINODE_HOSTLIST", format!("{},h1,h2,h3", nodes.hosts[0]));
    let out = c
        .args(["--group", "--fanout", "2", "-c", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "mn-exec-all: error: --group gathers every node's output here, so it needs every node \
         reached directly: 3 other nodes but --fanout 2; raise --fanout to 3\n"
    );
}
