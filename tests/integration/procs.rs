//! `--nproc-per-node` (docs/exec-all.md, "Several processes a node"), on
//! agents at loopback addresses (node 0 is this machine, run by exec_all
//! itself; nodes 1.. are agents): every process started with torchrun's
//! worker contract, ranks dense node by node, per-process output, records
//! and verdict, binding before the script, restarts, and a rendezvous of
//! real Python processes at MASTER_ADDR:MASTER_PORT as
//! `init_process_group()` makes it (rank 0 holds the store).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::*;

/// Every `KEY=VALUE` word of each output line, by the line's `RANK`.
fn by_rank(out: &str) -> BTreeMap<usize, BTreeMap<String, String>> {
    out.lines()
        .map(|line| {
            line.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<String, String>>()
        })
        .map(|vars| (vars["RANK"].parse().unwrap(), vars))
        .collect()
}

const SHOW: &str = "echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE \
    LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE \
    ROLE_RANK=$ROLE_RANK ROLE_WORLD_SIZE=$ROLE_WORLD_SIZE ROLE_NAME=$ROLE_NAME \
    MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT OMP=${OMP_NUM_THREADS:-unset} \
    NODE=$MULTINODE_NODE_RANK AT=${AGENT_ID:-head} RESTARTS=$TORCHELASTIC_RESTART_COUNT \
    MAX=$TORCHELASTIC_MAX_RESTARTS RUN_ID=$TORCHELASTIC_RUN_ID STORE=$TORCHELASTIC_USE_AGENT_STORE";

#[test]
fn every_node_starts_n_processes_with_torchruns_worker_contract() {
    let cluster = Cluster::start(3);
    let out = cluster.exec_all(&["--nproc-per-node", "2", "-c", SHOW]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ranks = by_rank(&stdout(&out));
    assert_eq!(
        ranks.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    let run_id = &ranks[&0]["RUN_ID"];
    assert!(!run_id.is_empty());
    for (rank, vars) in &ranks {
        let node = rank / 2;
        let at = if node == 0 {
            "head"
        } else {
            &cluster.hosts[node]
        };
        let want = [
            ("LOCAL_RANK", (rank % 2).to_string()),
            ("WORLD_SIZE", "6".into()),
            ("LOCAL_WORLD_SIZE", "2".into()),
            ("GROUP_RANK", node.to_string()),
            ("GROUP_WORLD_SIZE", "3".into()),
            ("ROLE_RANK", rank.to_string()),
            ("ROLE_WORLD_SIZE", "6".into()),
            ("ROLE_NAME", "default".into()),
            ("MASTER_ADDR", cluster.hosts[0].clone()),
            ("MASTER_PORT", "29500".into()),
            ("OMP", "1".into()),
            ("NODE", node.to_string()),
            ("AT", at.to_string()),
            ("RESTARTS", "0".into()),
            ("MAX", "0".into()),
            ("RUN_ID", run_id.clone()),
            ("STORE", "False".into()),
        ];
        for (name, value) in want {
            assert_eq!(vars[name], value, "rank {rank}: {name} in {vars:?}");
        }
    }
}

#[test]
fn slots_and_gpus_give_each_node_its_own_count_and_ranks_stay_dense() {
    let cluster = Cluster::start(3);
    let list = format!(
        "{}:1,{}:3,{}:2",
        cluster.hosts[0], cluster.hosts[1], cluster.hosts[2]
    );
    let out = cluster
        .command(&mn_exec_all())
        .env("MULTINODE_HOSTLIST", &list)
        .args(["--nproc-per-node", "slots", "-c", SHOW])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let got: Vec<(usize, String, String)> = by_rank(&stdout(&out))
        .into_iter()
        .map(|(r, v)| (r, v["NODE"].clone(), v["LOCAL_RANK"].clone()))
        .collect();
    let want: Vec<(usize, String, String)> = [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
        .iter()
        .enumerate()
        .map(|(r, (n, l))| (r, n.to_string(), l.to_string()))
        .collect();
    assert_eq!(got, want);
}

/// A fake `nvidia-smi` that lists the 8 GPUs of a real H200 host
/// (tests/fixtures/nvidia-smi/h200-8gpu/pci.csv), in a directory for PATH.
fn fake_nvidia_smi() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let csv = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/nvidia-smi/h200-8gpu/pci.csv"
    );
    let bin = dir.path().join("nvidia-smi");
    std::fs::write(
        &bin,
        format!("#!/bin/sh\ncase \"$*\" in\n*--query-gpu=index,uuid,pci.bus_id*) exec cat '{csv}' ;;\nesac\nexit 1\n"),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn gpu_counts_each_nodes_visible_gpus_and_a_node_without_is_one_line() {
    let fake = fake_nvidia_smi();
    let path = format!(
        "{}:{}",
        fake.path().display(),
        std::env::var("PATH").unwrap()
    );
    // Node 1 sees three GPUs (by index and UUID), node 2 all eight.
    let hosts = fresh_loopbacks(3);
    let uuid = "GPU-00000000-0000-0000-0000-000000000000";
    let pci = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/nvidia-smi/h200-8gpu/pci.csv"
    ))
    .unwrap();
    let second_uuid = pci.lines().nth(1).unwrap().split(", ").nth(1).unwrap();
    let one = Agent::start_with(
        &hosts[1],
        29922,
        &[],
        &[
            ("AGENT_ID", hosts[1].as_str()),
            (
                "CUDA_VISIBLE_DEVICES",
                &format!("0,{second_uuid},5,{uuid},7"),
            ),
        ],
    );
    let two = Agent::start_with(&hosts[2], 29922, &[], &[("AGENT_ID", hosts[2].as_str())]);
    let cluster = Cluster {
        hosts,
        agents: vec![one, two],
        port: 29922,
    };
    let run = |head_gpus: &str| {
        cluster
            .command(&mn_exec_all())
            .env("PATH", &path)
            .env("CUDA_VISIBLE_DEVICES", head_gpus)
            .args(["--nproc-per-node", "gpu", "-c", SHOW])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run("2");
    assert!(out.status.success(), "{}", stderr(&out));
    let per_node: Vec<(String, String)> = by_rank(&stdout(&out))
        .into_values()
        .map(|v| (v["NODE"].clone(), v["LOCAL_WORLD_SIZE"].clone()))
        .collect();
    let mut want = vec![("0".to_string(), "1".to_string())];
    want.extend(std::iter::repeat_n(("1".into(), "3".into()), 3));
    want.extend(std::iter::repeat_n(("2".into(), "8".into()), 8));
    assert_eq!(per_node, want);
    // The head hides every GPU: one line, exit 2, nothing run.
    let out = run("");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("rank 0 ({}) sees no GPU", cluster.hosts[0])),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}

#[test]
fn a_failing_process_ends_the_others_and_each_process_has_its_label_file_and_record() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let files = dir.path().join("out");
    let tag = sleep_tag();
    let script = format!(
        "echo out of $RANK; echo err of $RANK >&2; \
         if [ $RANK = 3 ]; then sleep 0.3; exit 7; fi; exec sleep {tag}"
    );
    let started = Instant::now();
    let out = cluster.exec_all(&[
        "--nproc-per-node",
        "2",
        "--label",
        "--grace",
        "1",
        "--report",
        report.to_str().unwrap(),
        "--output",
        files.to_str().unwrap(),
        "-c",
        &script,
    ]);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(sleepers(&tag).is_empty(), "every process ended");
    let text = stdout(&out);
    for rank in 0..6 {
        let host = &cluster.hosts[rank / 2];
        assert!(
            text.contains(&format!("{rank} {host}: out of {rank}")),
            "{text}"
        );
        let got = std::fs::read_to_string(files.join(format!("{rank}.out"))).unwrap();
        assert_eq!(got, format!("out of {rank}\n"));
    }
    let err = stderr(&out);
    let who = format!("rank 3 ({}: node 1, local rank 1)", cluster.hosts[1]);
    assert!(err.contains(&format!("first failure: {who}")), "{err}");
    assert!(err.contains("of 6 processes did not succeed"), "{err}");
    let json = crate::util::report(&report);
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6);
    for (rank, node) in nodes.iter().enumerate() {
        assert_eq!(node["rank"], rank);
        assert_eq!(node["process"]["node"], rank / 2, "{node}");
        assert_eq!(node["process"]["local_rank"], rank % 2, "{node}");
    }
    assert_eq!(nodes[3]["exit"], 7);
    assert_eq!(json["verdict"]["process"]["node"], 1, "{json}");
}

#[test]
fn past_the_fanout_relays_start_their_nodes_processes_with_the_same_contract() {
    let cluster = Cluster::start(5);
    let out = cluster.exec_all(&["--nproc-per-node", "2", "--fanout", "2", "-c", SHOW]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ranks = by_rank(&stdout(&out));
    assert_eq!(ranks.len(), 10, "{}", stdout(&out));
    let run_id = &ranks[&0]["RUN_ID"];
    for (rank, vars) in &ranks {
        assert_eq!(vars["NODE"], (rank / 2).to_string(), "{vars:?}");
        assert_eq!(vars["WORLD_SIZE"], "10");
        assert_eq!(vars["MASTER_ADDR"], cluster.hosts[0]);
        assert_eq!(&vars["RUN_ID"], run_id, "one run id, relays too");
    }
    // A process of a relay's group fails: the head names it.
    let out = cluster.exec_all(&[
        "--nproc-per-node",
        "2",
        "--fanout",
        "2",
        "-c",
        "[ $RANK = 7 ] && exit 5; exit 0",
    ]);
    assert_eq!(out.status.code(), Some(5));
    let err = stderr(&out);
    let who = format!("rank 7 ({}: node 3, local rank 1)", cluster.hosts[3]);
    assert!(err.contains(&format!("first failure: {who}")), "{err}");
}

#[test]
fn options_that_need_processes_a_node_or_make_no_sense_are_one_line() {
    let cluster = Cluster::start(1);
    for (args, want) in [
        (
            vec!["--bind", "numa", "-c", "true"],
            "go with --nproc-per-node",
        ),
        (
            vec!["--nproc-per-node", "0", "-c", "true"],
            "give N (1, 2, ...), gpu or slots",
        ),
        (
            vec!["--nproc-per-node", "2x2", "-c", "true"],
            "2 counts for 1 nodes",
        ),
        (
            vec!["--nproc-per-node", "2", "--master-port", "0", "-c", "true"],
            "'--master-port <PORT>': \"0\" is not a port number (1-65535)",
        ),
        (
            vec!["--nproc-per-node", "2", "--bind", "tight", "-c", "true"],
            "unknown binding mode",
        ),
        (
            vec!["--store", "off", "-c", "true"],
            "go with --nproc-per-node",
        ),
        (
            vec!["--nproc-per-node", "2", "--store", "on", "-c", "true"],
            "--store: 'on' is not a store mode: give auto or off",
        ),
    ] {
        let out = cluster.exec_all(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(err.trim_end().lines().count() <= 2, "{args:?}: {err}");
    }
    let out = cluster
        .command(&mn_exec_all())
        .env("MULTINODE_NPROC_PER_NODE", "many")
        .args(["-c", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("MULTINODE_NPROC_PER_NODE='many' is not a number of processes"),
        "{}",
        stderr(&out)
    );
    let out = cluster
        .command(&mn_exec_all())
        .env("MULTINODE_STORE", "yes")
        .args(["--nproc-per-node", "1", "-c", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("MULTINODE_STORE='yes' is not a store mode (auto or off)"),
        "{}",
        stderr(&out)
    );
}

/// The processes meet as `torch.distributed.init_process_group()` makes
/// them meet with no torchrun (`env://`): rank 0 listens at
/// MASTER_ADDR:MASTER_PORT (its store), every other rank connects and
/// says its RANK; rank 0 checks it heard WORLD_SIZE - 1 distinct ranks.
const RENDEZVOUS: &str = r#"
import os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
if rank == 0:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(addr); s.listen(world)
    heard = set()
    while len(heard) < world - 1:
        c, _ = s.accept(); heard.add(int(c.recv(16))); c.close()
    print("store", sorted(heard) == list(range(1, world)), len(heard) + 1)
else:
    for _ in range(200):
        try:
            c = socket.create_connection(addr); break
        except OSError:
            time.sleep(0.05)
    c.sendall(str(rank).encode()); c.close()
    print("joined", rank)
"#;

#[test]
fn processes_meet_at_rank_zeros_store_and_a_restart_does_not_reuse_a_taken_port() {
    let cluster = Cluster::start(4);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("meet.py");
    std::fs::write(&script, RENDEZVOUS).unwrap();
    let run = format!("python3 {}", script.display());
    let out = cluster.exec_all(&[
        "--nproc-per-node",
        "2",
        "--nodes",
        "0-2",
        "--master-port",
        "29571",
        "-c",
        &run,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("store True 6"), "{}", stdout(&out));
}

#[test]
fn a_lost_node_is_replaced_by_the_spare_ranks_are_dense_again_and_the_store_port_moves() {
    let cluster = Cluster::start(4);
    // The last attempt's store port is still held (by this test, as a
    // lingering rank 0 would): the next attempt gets another, the same on
    // every process.
    let held = std::net::TcpListener::bind(("0.0.0.0", 29572)).unwrap();
    let tag = sleep_tag();
    let script = format!(
        "echo RANK=$RANK NODE=$MULTINODE_NODE_RANK AT=${{AGENT_ID:-head}} PORT=$MASTER_PORT \
         COUNT=$TORCHELASTIC_RESTART_COUNT MAX=$TORCHELASTIC_MAX_RESTARTS WORLD=$WORLD_SIZE; \
         [ $TORCHELASTIC_RESTART_COUNT = 0 ] && exec sleep {tag}; exit 0"
    );
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["--nproc-per-node", "2", "--master-port", "29572"])
        .args(["--max-restarts", "1", "--spares", "1", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || sleepers(&tag).len() == 6),
        "attempt 0 runs 6 processes on nodes 0-2"
    );
    // Node 1 goes: its agent is killed, its processes with it.
    signal(cluster.agents[0].pid(), nix::sys::signal::Signal::SIGKILL);
    let code = wait_exit(&mut child, Duration::from_secs(60)).expect("exec_all ends");
    drop(held);
    let text = stdout_of(&mut child);
    let err = stderr_of(&mut child);
    assert_eq!(code, 0, "{err}");
    assert!(sleepers(&tag).is_empty());
    let second: Vec<BTreeMap<String, String>> = text
        .lines()
        .filter(|l| l.contains("COUNT=1"))
        .map(|l| by_rank(l).into_values().next().unwrap())
        .collect();
    let mut got: Vec<(String, String, String)> = second
        .iter()
        .map(|v| (v["RANK"].clone(), v["NODE"].clone(), v["AT"].clone()))
        .collect();
    got.sort();
    let want: Vec<(String, String, String)> = (0..6)
        .map(|r| {
            let at = match r / 2 {
                0 => "head".to_string(),
                n => cluster.hosts[n + 1].clone(),
            };
            (r.to_string(), (r / 2).to_string(), at)
        })
        .collect();
    assert_eq!(got, want, "{text}");
    let ports: Vec<&String> = second.iter().map(|v| &v["PORT"]).collect();
    assert!(
        ports.iter().all(|p| *p == ports[0] && *p != "29572"),
        "{text}"
    );
    assert!(second.iter().all(|v| v["WORLD"] == "6" && v["MAX"] == "1"));
    assert!(
        err.contains(&format!("{} excluded", cluster.hosts[1])),
        "{err}"
    );
}

#[test]
fn nothing_is_left_running_after_kill_9_of_exec_all() {
    let cluster = Cluster::start(3);
    let tag = sleep_tag();
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["--nproc-per-node", "3", "-c", &format!("exec sleep {tag}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || sleepers(&tag).len() == 9));
    signal(child.id(), nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    assert!(
        eventually(Duration::from_secs(15), || sleepers(&tag).is_empty()),
        "left running: {:?}",
        sleepers(&tag)
    );
}
