//! `multinode check --local` with a fake `nvidia-smi` and a controlled
//! environment, and `multinode check` on a one-node job (gathered in
//! process: no fan-out needed).

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::runner::{BIN, Output, run_program, run_usage_error};
use crate::util::{fresh_loopback, fresh_loopbacks, one_slot_each};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nvidia-smi");

/// A folder with a fake `nvidia-smi` answering from `fixture` (a folder of
/// tests/fixtures/nvidia-smi), or failing like a node without a driver.
struct FakeGpus {
    dir: tempfile::TempDir,
}

impl FakeGpus {
    fn node(fixture: &str) -> Self {
        let data = Path::new(FIXTURES).join(fixture);
        Self::with_script(&format!(
            "#!/bin/sh\n\
             case \"$*\" in\n\
             *--query-gpu=*) exec cat '{d}/query.csv' ;;\n\
             *--version*) exec cat '{d}/version.txt' ;;\n\
             *) exec cat '{d}/nvidia-smi.txt' ;;\n\
             esac\n",
            d = data.display()
        ))
    }

    fn without_driver() -> Self {
        Self::with_script(&format!(
            "#!/bin/sh\ncat '{FIXTURES}/no-driver.txt'\nexit 9\n"
        ))
    }

    fn with_script(script: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nvidia-smi");
        std::fs::write(&path, script).expect("write fake nvidia-smi");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        FakeGpus { dir }
    }

    /// `PATH` with the fake first.
    fn path(&self) -> String {
        format!("{}:/usr/bin:/bin", self.dir.path().display())
    }
}

/// A port nothing listens on (bound, then released).
/// A port no socket holds on any address now: `check` listens on the
/// rendezvous port on every address (as torchrun's store does), so a port
/// free on `ip` alone may be another test's client port on 127.0.0.1, and
/// the check then fails with "in use".
fn free_port() -> u16 {
    TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// Runs `multinode ARGS` under `sh` with the soft memlock limit at 1 MiB
/// (lowering it is always allowed), with only `vars` in the environment.
fn run_with_memlock_1mib(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut full = vec!["-c", "ulimit -S -l 1024 && exec \"$0\" \"$@\"", BIN];
    full.extend_from_slice(args);
    run_program(Path::new("/bin/sh"), &full, vars)
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"))
}

/// The row of `check` in `multinode check --format json`.
fn row<'a>(rows: &'a Value, check: &str) -> &'a Value {
    rows.as_array()
        .expect("an array")
        .iter()
        .find(|r| r["check"] == check)
        .unwrap_or_else(|| panic!("no row {check} in {rows}"))
}

/// A fake CUDA install (version.json) and a virtual environment with
/// PyTorch's version.py, both under `root`.
fn fake_toolkits(root: &Path) -> (PathBuf, PathBuf) {
    let cuda = root.join("cuda");
    std::fs::create_dir_all(&cuda).expect("mkdir");
    std::fs::write(
        cuda.join("version.json"),
        r#"{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}"#,
    )
    .expect("write");
    let venv = root.join("venv");
    let torch = venv.join("lib/python3.12/site-packages/torch");
    std::fs::create_dir_all(&torch).expect("mkdir");
    std::fs::create_dir_all(venv.join("bin")).expect("mkdir");
    std::fs::write(venv.join("bin/python3"), "").expect("write");
    std::fs::write(
        torch.join("version.py"),
        "__version__ = '2.7.1+cu126'\ndebug = False\ncuda: Optional[str] = '12.6'\n",
    )
    .expect("write");
    (cuda, venv.join("bin"))
}

#[test]
fn local_report_of_an_h200_worker() {
    let [head, me]: [String; 2] = fresh_loopbacks(2).try_into().expect("two");
    // The head's check listener: answers one connection with its clock.
    let listener = TcpListener::bind((head.as_str(), 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let head_ms = unix_ms();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.write_all(format!("multinode-check-clock {head_ms}\n").as_bytes())
            .expect("write");
    });
    let gpus = FakeGpus::node("h200-1gpu");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cuda, venv_bin) = fake_toolkits(tmp.path());
    let path = format!("{}:{}", venv_bin.display(), gpus.path());
    let hostlist = format!("{head}:8,{me}:8");
    let port_text = port.to_string();
    let out = run_with_memlock_1mib(
        &["check", "--local", "--port", &port_text],
        &[
            ("PATH", &path),
            ("MULTINODE_HOSTLIST", &hostlist),
            ("MULTINODE_NODE_RANK", "1"),
            ("CUDA_HOME", &cuda.display().to_string()),
            ("NCCL_IB_HCA", "=mlx5_0:1"),
            ("NCCL_SOCKET_IFNAME", "lo"),
            ("NCCL_DEBUG", "INFO"),
        ],
    );
    server.join().expect("listener thread");
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    let f = json(&out);

    // The schema: these keys, no others.
    let mut keys: Vec<&str> = f
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "affinity",
            "cuda_toolkits",
            "fabric",
            "gpus",
            "hostname",
            "job",
            "machine",
            "memlock",
            "names",
            "rendezvous",
            "schema",
            "settings",
            "time_ms",
            "version"
        ]
    );
    assert_eq!(f["schema"], 1);
    assert_eq!(f["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(f["hostname"], crate::runner::hostname());
    assert_eq!(
        f["job"],
        serde_json::json!({"rank": 1, "head_ip": head, "error": null})
    );
    let time_ms = f["time_ms"].as_u64().expect("time_ms");
    assert!(
        time_ms >= head_ms && time_ms < head_ms + 60_000,
        "{time_ms} vs {head_ms}"
    );
    assert!(f["machine"]["boot_id"].is_string());
    // The job's CPUs here are those `check --local` ran on: this test's.
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let cpus = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim();
    assert_eq!(f["affinity"]["allowed_cpus"], cpus);
    assert!(
        f["machine"]["netns"]
            .as_str()
            .is_some_and(|n| n.starts_with("net:["))
    );

    let r = &f["rendezvous"];
    assert_eq!(r["addr"], format!("{head}:{port}"));
    assert_eq!(r["connected"], true);
    assert_eq!(r["error"], Value::Null);
    let clock = &r["clock"];
    assert_eq!(clock["head_ms"], head_ms);
    let (sent, received) = (
        clock["sent_ms"].as_u64().expect("sent"),
        clock["received_ms"].as_u64().expect("received"),
    );
    assert!(sent <= received, "{clock}");

    // IP literals: no names to resolve.
    assert_eq!(f["names"], serde_json::json!({}));
    assert_eq!(f["memlock"]["soft"], serde_json::json!({"bytes": 1 << 20}));
    assert!(f["memlock"]["hard"].is_object() || f["memlock"]["hard"] == "unlimited");

    assert_eq!(
        f["gpus"],
        serde_json::json!({
            "smi": "ok",
            "error": null,
            "driver_version": "580.159.04",
            "cuda_version": "13.0",
            "devices": [{"index": 0, "name": "NVIDIA H200", "driver_version": "580.159.04", "compute_cap": "9.0"}],
        })
    );
    assert_eq!(
        f["cuda_toolkits"],
        serde_json::json!([
            {"source": "version.json", "path": cuda.join("version.json").display().to_string(), "version": "12.8"},
            {"source": "torch", "path": tmp.path().join("venv/lib/python3.12/site-packages/torch/version.py").display().to_string(), "version": "12.6"},
        ])
    );
    assert_eq!(
        f["fabric"]["env"],
        serde_json::json!({"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "lo"})
    );
    let lo = f["fabric"]["interfaces"]
        .as_array()
        .expect("interfaces")
        .iter()
        .find(|i| i["name"] == "lo")
        .expect("lo");
    assert!(
        lo["addrs"]
            .as_array()
            .expect("addrs")
            .contains(&Value::from("127.0.0.1"))
    );
}

#[test]
fn local_report_without_gpus_and_a_closed_port() {
    let ip = fresh_loopback();
    let port = free_port().to_string();
    let hostlist = format!("{ip}:1");
    let out = run_program(
        Path::new(BIN),
        &["check", "--local", "--port", &port],
        &[
            ("PATH", "/usr/bin:/bin"),
            ("MULTINODE_HOSTLIST", &hostlist),
            ("MULTINODE_NODE_RANK", "0"),
        ],
    );
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    let f = json(&out);
    assert_eq!(f["gpus"]["smi"], "absent");
    assert_eq!(f["gpus"]["devices"], serde_json::json!([]));
    assert_eq!(f["rendezvous"]["connected"], false);
    assert_eq!(f["rendezvous"]["error"], "connection refused");
    assert_eq!(f["rendezvous"]["clock"], Value::Null);
    assert_eq!(f["job"]["rank"], 0);
}

#[test]
fn local_report_of_a_node_without_a_driver() {
    let gpus = FakeGpus::without_driver();
    let ip = fresh_loopback();
    let port = free_port().to_string();
    let hostlist = format!("{ip}:1");
    let out = run_program(
        Path::new(BIN),
        &["check", "--local", "--port", &port],
        &[
            ("PATH", &gpus.path()),
            ("MULTINODE_HOSTLIST", &hostlist),
            ("MULTINODE_NODE_RANK", "0"),
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let f = json(&out);
    assert_eq!(f["gpus"]["smi"], "failed");
    assert_eq!(
        f["gpus"]["error"],
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running. (exit 9)"
    );
}

#[test]
fn local_report_of_a_node_whose_contract_does_not_resolve() {
    // This node's address must come from NCCL_SOCKET_IFNAME, which names no
    // interface here: the report says so instead of failing.
    let head = fresh_loopback();
    let port = free_port().to_string();
    let out = run_program(
        Path::new(BIN),
        &["check", "--local", "--port", &port],
        &[
            ("PATH", "/usr/bin:/bin"),
            ("MULTINODE_HOSTLIST", "head.invalid:1,worker.invalid:1"),
            ("MULTINODE_NODE_RANK", "1"),
            ("MULTINODE_NODE_IP", &head),
            ("NCCL_SOCKET_IFNAME", "=nosuchif0"),
        ],
    );
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    let f = json(&out);
    let error = f["job"]["error"].as_str().expect("an error");
    assert!(error.contains("NCCL_SOCKET_IFNAME='=nosuchif0'"), "{error}");
    assert_eq!(f["job"]["rank"], 1);
    assert_eq!(f["job"]["head_ip"], head);
    // It still tried the rendezvous address from the environment.
    assert_eq!(f["rendezvous"]["addr"], format!("{head}:{port}"));
    // ... and resolved the host names (which do not exist).
    for name in ["head.invalid", "worker.invalid"] {
        let res = &f["names"][name];
        assert!(res["error"].is_string(), "{name}: {res}");
        assert_eq!(res["addrs"], serde_json::json!([]));
    }
}

#[test]
fn bad_flags_are_usage_errors() {
    let err = run_usage_error(&["check", "--local", "--hosts", "gpu[9-3]"], &[]);
    assert!(err.contains("reversed range '9-3'"), "{err}");
    let err = run_usage_error(&["check", "--hosts", "gpu[9-3]"], &[]);
    assert!(err.contains("reversed range '9-3'"), "{err}");
    let err = run_usage_error(&["check", "--port", "0"], &[]);
    assert_eq!(
        err,
        "--port 0 is not a port; give the rendezvous port (1-65535)"
    );
    let err = run_usage_error(&["check", "--format", "yaml"], &[]);
    assert!(err.contains("yaml"), "{err}");
}

#[test]
fn check_runs_on_the_head_only() {
    let [a, b]: [String; 2] = fresh_loopbacks(2).try_into().expect("two");
    let hosts = format!("{a}:1,{b}:1");
    let err = run_usage_error(&["check", "--hosts", &hosts, "--node-rank", "1"], &[]);
    assert_eq!(
        err,
        format!(
            "`multinode check` runs on the head ({a}, rank 0), where the rendezvous port is; this is rank 1: run it there, or `multinode check --local` for this node alone"
        )
    );
}

#[test]
fn one_gpu_node_with_a_low_memlock_fails_by_name() {
    let ip = fresh_loopback();
    let port = free_port().to_string();
    let hosts = format!("{ip}:1");
    let gpus = FakeGpus::node("h200-1gpu");
    let out = run_with_memlock_1mib(
        &[
            "check",
            "--hosts",
            &hosts,
            "--node-rank",
            "0",
            "--port",
            &port,
            "--format",
            "json",
        ],
        &[("PATH", &gpus.path())],
    );
    assert_eq!((out.code, out.stderr.as_str()), (1, ""), "{out:?}");
    let rows = json(&out);
    assert_eq!(rows.as_array().map(Vec::len), Some(22));
    let memlock = row(&rows, "memlock");
    assert_eq!(memlock["status"], "fail");
    assert_eq!(memlock["nodes"], serde_json::json!([ip]));
    let detail = memlock["detail"].as_str().expect("detail");
    assert!(
        detail.starts_with("RLIMIT_MEMLOCK 1 MiB (hard "),
        "{detail}"
    );
    assert!(memlock["fix"].as_str().is_some_and(|f| !f.is_empty()));
    for check in [
        "nodes",
        "version",
        "environment",
        "head-address",
        "rendezvous-port",
        "rendezvous-connect",
        "host-names",
        "clock",
        "gpu-count",
        "gpu-driver",
    ] {
        let r = row(&rows, check);
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["fix"], Value::Null, "{r}");
        assert_eq!(r["nodes"], serde_json::json!([ip]), "{r}");
    }
    assert_eq!(row(&rows, "gpu-count")["detail"], "1 GPU on every node");
    assert_eq!(
        row(&rows, "gpu-driver")["detail"],
        "driver 580.159.04 with CUDA 13.0 on every node with GPUs"
    );
    assert_eq!(
        row(&rows, "rendezvous-port")["detail"],
        format!("port {port} is free on the head")
    );
    assert!(
        row(&rows, "rendezvous-connect")["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with(&format!("every node connects to {ip}:{port}"))),
        "{rows}"
    );
}

#[test]
fn warnings_pass_unless_strict() {
    // A CPU node with a 1 MiB memlock limit: a warning (no GPU, no RDMA here).
    let ip = fresh_loopback();
    let port = free_port().to_string();
    let hosts = format!("{ip}:1");
    let args = [
        "check",
        "--hosts",
        &hosts,
        "--node-rank",
        "0",
        "--port",
        &port,
    ];
    let vars = [("PATH", "/usr/bin:/bin")];
    let out = run_with_memlock_1mib(&args, &vars);
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["CHECK", "STATUS", "NODES", "FIX"]
    );
    let memlock: Vec<&str> = lines
        .iter()
        .find(|l| l.starts_with("memlock "))
        .expect("a memlock row")
        .split_whitespace()
        .collect();
    assert_eq!(&memlock[..3], ["memlock", "warn", ip.as_str()]);
    assert!(
        out.stdout
            .contains("memlock (warn): RLIMIT_MEMLOCK 1 MiB (hard "),
        "{}",
        out.stdout
    );
    // This machine's /dev/shm may be small too (a CI container's 64 MiB).
    let warns = if out.stdout.contains("\ndev-shm             warn") {
        2
    } else {
        1
    };
    assert!(
        out.stdout.ends_with(&format!(
            "22 checks: {} ok, {warns} warn, 0 fail\n",
            22 - warns
        )),
        "{}",
        out.stdout
    );
    let mut strict = args.to_vec();
    strict.push("--strict");
    let out = run_with_memlock_1mib(&strict, &vars);
    assert_eq!(out.code, 1, "{out:?}");
}

#[test]
fn a_rendezvous_port_in_use_fails() {
    let ip = fresh_loopback();
    let taken = TcpListener::bind(("0.0.0.0", 0)).expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let hosts = format!("{ip}:1");
    let gpus = FakeGpus::node("h200-1gpu");
    let out = run_program(
        Path::new(BIN),
        &[
            "check",
            "--hosts",
            &hosts,
            "--node-rank",
            "0",
            "--port",
            &port,
            "--format",
            "json",
            "--nproc-per-node",
            "1",
        ],
        &[("PATH", &gpus.path())],
    );
    assert_eq!(out.code, 1, "{out:?}");
    let rows = json(&out);
    let r = row(&rows, "rendezvous-port");
    assert_eq!(r["status"], "fail");
    let detail = r["detail"].as_str().expect("detail");
    assert!(
        detail.starts_with(&format!("cannot listen on port {port} on the head: ")),
        "{detail}"
    );
    assert!(detail.contains("in use"), "{detail}");
    // The node still reached the port: our listener holds it (and sends no clock).
    let c = row(&rows, "rendezvous-connect");
    assert_eq!(c["status"], "ok", "{c}");
    drop(taken);
}

/// The whole fan-out: `multinode check` on the head gathers every node's
/// report through its agent, and names the node that did not answer.
#[test]
fn check_fans_out_to_every_node_and_names_the_missing_one() {
    use crate::util::{Agent, cmd, fresh_loopbacks, multinode};
    let hosts = fresh_loopbacks(4);
    let port = 29980;
    // Ranks 1 and 2 have agents; rank 3 has none.
    let _agents: Vec<Agent> = hosts[1..3]
        .iter()
        .map(|h| Agent::start_with(h, port, &[], &[]))
        .collect();
    let hostlist = one_slot_each(&hosts);
    let check = |extra: &[&str]| {
        cmd(&multinode())
            .env("MULTINODE_HOSTLIST", &hostlist)
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", port.to_string())
            .args([
                "check",
                "--format",
                "json",
                "--port",
                &free_port().to_string(),
            ])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = check(&[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = row(&rows, "nodes");
    assert_eq!(nodes["status"], "fail");
    assert_eq!(nodes["nodes"], serde_json::json!([hosts[3]]));
    // The nodes that answered were all connected to the head's rendezvous port.
    let connect = row(&rows, "rendezvous-connect");
    assert_eq!(connect["status"], "ok", "{connect}");
    let answered: Vec<&str> = connect["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(answered, [&hosts[0], &hosts[1], &hosts[2]]);
    // Two processes per node asked of machines without any GPU: a CPU job
    // (gloo) is fine, so every answering node is named in a warning.
    let out = check(&["--nproc-per-node", "2"]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let gpus = row(&rows, "gpu-count");
    assert_eq!(gpus["status"], "warn", "{gpus}");
    assert_eq!(gpus["nodes"].as_array().unwrap().len(), 3, "{gpus}");
}

/// Across real agents: `OMPI_MCA_plm=isolated` on the head fails
/// `mpi-launcher` (exec_all passes it to every node), and a variable one
/// worker's environment sets (as its image would) is named in `same-settings`
/// with both values.
#[test]
fn launcher_pitfalls_and_settings_that_differ_across_nodes() {
    use crate::util::{Agent, cmd, fresh_loopbacks, multinode};
    let hosts = fresh_loopbacks(3);
    let port = 29981;
    let _plain = Agent::start_with(&hosts[1], port, &[], &[]);
    let _odd = Agent::start_with(&hosts[2], port, &[], &[("NCCL_IB_DISABLE", "1")]);
    let hostlist = one_slot_each(&hosts);
    let out = cmd(&multinode())
        .env("MULTINODE_HOSTLIST", &hostlist)
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_AGENT_PORT", port.to_string())
        .env("OMPI_MCA_plm", "isolated")
        .args(["check", "--format", "json", "--port"])
        .arg(free_port().to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mpi = row(&rows, "mpi-launcher");
    assert_eq!(mpi["status"], "fail", "{mpi}");
    assert_eq!(mpi["nodes"], serde_json::json!(hosts));
    assert!(
        mpi["detail"]
            .as_str()
            .unwrap()
            .starts_with("OMPI_MCA_plm=isolated: "),
        "{mpi}"
    );
    let same = row(&rows, "same-settings");
    assert_eq!(same["status"], "warn", "{same}");
    assert_eq!(same["nodes"], serde_json::json!([hosts[2]]));
    assert_eq!(
        same["detail"],
        format!("NCCL_IB_DISABLE 1 (the head: unset) on {}", hosts[2])
    );
}
