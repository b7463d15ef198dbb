//! `multinode check --gpu` against a stand-in `nvidia-smi` and `dmesg` that
//! print what an H100 node printed (tests/fixtures/nvidia-smi/h100-health),
//! or variants of it, one a node: each check's verdict, the folding across
//! loopback agents, the JSON, the exit codes, and a health query that hangs.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{Agent, cmd, fresh_loopbacks, multinode, one_slot_each};

const H100: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/nvidia-smi/h100-health"
);

/// The stand-ins `nvidia-smi` and `dmesg` (tests/fixtures/nvidia-smi/h100-health/bin).
/// Each reads its variant from the environment of the node it runs on (an
/// agent's own): `STANDIN_HEALTH` (a CSV of the fixture folder),
/// `STANDIN_NVLINK` (a file; unset: nothing printed), `STANDIN_DMESG` (a file,
/// or `denied`), `STANDIN_HANG` (a file: the health query writes its pid
/// there and hangs).
struct StandIn {
    dir: tempfile::TempDir,
}

impl StandIn {
    fn new() -> Self {
        StandIn {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> String {
        format!("{H100}/bin:/usr/bin:/bin")
    }
}

/// A port no socket holds.
fn free_port() -> String {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string()
}

fn row<'a>(rows: &'a Value, check: &str) -> &'a Value {
    rows.as_array()
        .expect("an array")
        .iter()
        .find(|r| r["check"] == check)
        .unwrap_or_else(|| panic!("no row {check} in {rows}"))
}

/// `multinode check --gpu ARGS` on the head of `hosts` (agents on the
/// others at `port`), with the stand-ins first on `PATH`.
fn check_gpu(
    stand_in: &StandIn,
    hosts: &[String],
    port: u16,
    args: &[&str],
) -> std::process::Output {
    cmd(&multinode())
        .env("PATH", stand_in.path())
        .env("MULTINODE_HOSTLIST", one_slot_each(hosts))
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_AGENT_PORT", port.to_string())
        .args(["check", "--gpu", "--port", &free_port()])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run check")
}

/// Four nodes: the head as captured, an uncorrected ECC error, a clock held
/// down by hw_slowdown with an Xid 79 in the kernel log and an inactive
/// NVLink, a PCIe link below its maximum with an unreadable kernel log.
#[test]
fn every_gpu_check_names_its_node_across_agents() {
    let hosts = fresh_loopbacks(4);
    let port = 29982;
    let stand_in = StandIn::new();
    let _agents = [
        Agent::start_with(
            &hosts[1],
            port,
            &[],
            &[("STANDIN_HEALTH", "health-ecc.csv")],
        ),
        Agent::start_with(
            &hosts[2],
            port,
            &[],
            &[
                ("STANDIN_HEALTH", "health-hw-slowdown.csv"),
                ("STANDIN_DMESG", "dmesg-xid.txt"),
                ("STANDIN_NVLINK", "nvlink-inactive.txt"),
            ],
        ),
        Agent::start_with(
            &hosts[3],
            port,
            &[],
            &[
                ("STANDIN_HEALTH", "health-pcie.csv"),
                ("STANDIN_DMESG", "denied"),
            ],
        ),
    ];
    let out = check_gpu(&stand_in, &hosts, port, &["--format", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(rows.as_array().map(Vec::len), Some(31), "{rows}");
    let verdict = |check: &str| {
        let r = row(&rows, check);
        (
            r["status"].as_str().expect("status").to_string(),
            r["nodes"].clone(),
            r["detail"].as_str().expect("detail").to_string(),
        )
    };
    let h = |i: usize| hosts[i].clone();
    assert_eq!(
        verdict("gpu-count"),
        (
            "ok".into(),
            serde_json::json!(hosts),
            "1 GPU on every node".into()
        )
    );
    assert_eq!(
        verdict("gpu-health"),
        (
            "ok".into(),
            serde_json::json!(hosts),
            "nvidia-smi reported the health of 4 GPU(s)".into()
        )
    );
    assert_eq!(
        verdict("gpu-ecc"),
        (
            "fail".into(),
            serde_json::json!([h(1)]),
            format!(
                "GPU 0 2 uncorrected ECC error(s) since boot, 2 in its lifetime (ecc.errors.uncorrected.volatile/aggregate.total: 0 expected) on {}",
                h(1)
            )
        )
    );
    assert_eq!(
        verdict("gpu-clocks"),
        (
            "warn".into(),
            serde_json::json!([h(2)]),
            format!(
                "GPU 0 SM clock 1095 of 1980 MHz (55%), throttle: hw_slowdown on {}",
                h(2)
            )
        )
    );
    assert_eq!(
        verdict("gpu-pcie"),
        (
            "warn".into(),
            serde_json::json!([h(3)]),
            format!("GPU 0 PCIe gen 3 of 5, width 8 of 16 on {}", h(3))
        )
    );
    assert_eq!(
        verdict("gpu-xid"),
        (
            "fail".into(),
            serde_json::json!([h(2)]),
            format!(
                "GPU 0 Xid 79 (1 since boot, last: GPU has fallen off the bus.) on {}",
                h(2)
            )
        )
    );
    assert_eq!(
        verdict("gpu-nvlink"),
        (
            "fail".into(),
            serde_json::json!([h(2)]),
            format!("GPU 0 NVLink 2 inactive on {}", h(2))
        )
    );
    for check in ["gpu-remapped-rows", "gpu-persistence"] {
        assert_eq!(verdict(check).0, "ok", "{check}");
        assert_eq!(verdict(check).1, serde_json::json!(hosts), "{check}");
    }
    assert!(
        row(&rows, "gpu-ecc")["fix"]
            .as_str()
            .is_some_and(|f| f.contains("reset the GPU")),
        "{rows}"
    );
}

/// Healthy nodes as captured, one of them with an unreadable kernel log
/// (skipped, not failed), and remapped rows pending on another after.
#[test]
fn healthy_nodes_pass_and_pending_remapped_rows_fail() {
    let hosts = fresh_loopbacks(2);
    let port = 29983;
    let stand_in = StandIn::new();
    let denied = Agent::start_with(&hosts[1], port, &[], &[("STANDIN_DMESG", "denied")]);
    let out = check_gpu(&stand_in, &hosts, port, &["--format", "json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for r in rows.as_array().expect("rows") {
        if r["check"].as_str().is_some_and(|c| c.starts_with("gpu-")) {
            assert_eq!(r["status"], "ok", "{r}");
        }
    }
    assert_eq!(
        row(&rows, "gpu-xid")["detail"],
        format!(
            "no Xid since boot on {}; kernel log not readable on {} (dmesg failed (exit 1): dmesg: read kernel buffer failed: Operation not permitted): skipped",
            hosts[0], hosts[1]
        )
    );
    let failed_elsewhere = rows
        .as_array()
        .expect("rows")
        .iter()
        .any(|r| r["status"] == "fail");
    assert_eq!(
        out.status.code(),
        Some(if failed_elsewhere { 1 } else { 0 }),
        "{rows}"
    );
    drop(denied);
    let _pending = Agent::start_with(
        &hosts[1],
        port,
        &[],
        &[("STANDIN_HEALTH", "health-remap-pending.csv")],
    );
    let out = check_gpu(&stand_in, &hosts, port, &[]);
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with("gpu-remapped-rows "))
        .unwrap_or_else(|| panic!("no row in {table}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        &words[..3],
        ["gpu-remapped-rows", "fail", hosts[1].as_str()]
    );
    assert!(
        table.contains(&format!(
            "gpu-remapped-rows (fail): GPU 0 row remapping pending (remapped_rows.pending Yes; 1 uncorrectable, 0 correctable remapped) on {}",
            hosts[1]
        )),
        "{table}"
    );
}

/// A health query that hangs is killed at its limit, named, and leaves no process.
#[test]
fn a_hanging_health_query_is_killed_within_its_limit_and_named() {
    let hosts = fresh_loopbacks(1);
    let stand_in = StandIn::new();
    let pid_file = stand_in.dir.path().join("hung.pid");
    let start = Instant::now();
    let out = cmd(&multinode())
        .env("PATH", stand_in.path())
        .env("STANDIN_HANG", &pid_file)
        .args([
            "check",
            "--gpu",
            "--format",
            "json",
            "--hosts",
            &one_slot_each(&hosts),
            "--node-rank",
            "0",
            "--port",
            &free_port(),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run check");
    let took = start.elapsed();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The limit is 10 s; the rest of the report runs meanwhile.
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(25),
        "{took:?}"
    );
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r = row(&rows, "gpu-health");
    assert_eq!(r["status"], "fail");
    assert_eq!(
        r["detail"],
        format!(
            "nvidia-smi --query-gpu (health) did not answer in 10 s (killed): a GPU may have fallen off the bus on {}",
            hosts[0]
        )
    );
    let pid = std::fs::read_to_string(&pid_file).expect("the stand-in ran");
    // Killed: gone, or a zombie until init reaps it.
    let stat = format!("/proc/{}/stat", pid.trim());
    let ended = || {
        std::fs::read_to_string(&stat).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while !ended() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ended(), "{stat}: the hung stand-in is still running");
}

/// The speed probe with a stand-in of the job's python3 and torch (what
/// the H100 measured): another process hogging one node's GPU is named
/// against the model's floor and the job's median.
#[test]
fn a_hogged_gpu_is_slow_against_its_model_and_the_job() {
    let hosts = fresh_loopbacks(3);
    let port = 29984;
    let stand_in = StandIn::new();
    let _agents = [
        Agent::start_with(&hosts[1], port, &[], &[("STANDIN_SPEED", "hogged")]),
        Agent::start_with(&hosts[2], port, &[], &[]),
    ];
    let out = cmd(&multinode())
        .env("PATH", format!("{H100}/venv/bin:{}", stand_in.path()))
        .env("MULTINODE_HOSTLIST", one_slot_each(&hosts))
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_AGENT_PORT", port.to_string())
        .args(["check", "--gpu", "--format", "json", "--port", &free_port()])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run check");
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r = row(&rows, "gpu-speed");
    assert_eq!(r["status"], "warn", "{r}");
    assert_eq!(r["nodes"], serde_json::json!([hosts[1]]));
    assert_eq!(
        r["detail"],
        format!(
            "GPU 0 matmul 412.0 TFLOPs: below the NVIDIA H100 80GB HBM3 floor of 636.5 TFLOPs, 55% of the job's median 748.8 TFLOPs on {}",
            hosts[1]
        )
    );
    // The stand-in's torch is the job's: cuda-arch sees it too.
    assert!(
        row(&rows, "cuda-arch")["detail"]
            .as_str()
            .is_some_and(|d| d.contains("CUDA 13.0 (torch)")),
        "{rows}"
    );
}
