//! One connection a node (`--nproc-per-node`, docs/exec-all.md "Several
//! processes a node"): the head logs in to each node's agent once and
//! starts every process of the node as its own channel on it. Each process
//! keeps its own rank, label, record and exit; fail-fast still ends the
//! processes of every node; a node whose agent dies loses all its processes.
//! Logins are counted in each agent's debug log (`authenticated`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::*;

/// Nodes 1.. as agents that log every login (`-vv`), each to its own file;
/// node 0 is this machine.
struct LoggedCluster {
    cluster: Cluster,
    logs: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

impl LoggedCluster {
    fn start(n: usize) -> LoggedCluster {
        let dir = tempfile::tempdir().unwrap();
        let hosts = fresh_loopbacks(n);
        let mut logs = Vec::new();
        let mut agents = Vec::new();
        for host in &hosts[1..] {
            let log = dir.path().join(format!("{host}.log"));
            let child = cmd(&multinode())
                .args(["-vv", "agent", "--listen", &format!("{host}:29922")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start the agent");
            let agent = Agent {
                child,
                host: host.clone(),
                port: 29922,
            };
            wait_for_port(&agent.addr(), Duration::from_secs(10));
            agents.push(agent);
            logs.push(log);
        }
        LoggedCluster {
            cluster: Cluster {
                hosts,
                agents,
                port: 29922,
            },
            logs,
            _dir: dir,
        }
    }

    /// How many logins each agent saw (nodes 1..).
    fn logins(&self) -> Vec<usize> {
        self.logs.iter().map(|l| logins_in(l)).collect()
    }
}

fn logins_in(log: &Path) -> usize {
    log_text(log).matches("authenticated").count()
}

#[test]
fn one_login_a_node_and_every_process_keeps_its_rank_label_and_exit() {
    let lc = LoggedCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let out = lc.cluster.exec_all(&[
        "--nproc-per-node",
        "4",
        "--no-fail-fast",
        "--label",
        "--report",
        report.to_str().unwrap(),
        "-c",
        "echo hi $RANK; exit $RANK",
    ]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lc.logins(), [1, 1], "one login a node for its 4 processes");
    let text = stdout(&out);
    for rank in 0..12 {
        let host = &lc.cluster.hosts[rank / 4];
        assert!(
            text.contains(&format!("{rank} {host}: hi {rank}\n")),
            "{text}"
        );
    }
    let json = crate::util::report(&report);
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 12);
    for (rank, node) in nodes.iter().enumerate() {
        assert_eq!(node["rank"], rank, "{node}");
        assert_eq!(node["exit"], rank, "{node}");
        assert_eq!(node["process"]["node"], rank / 4, "{node}");
        assert_eq!(node["process"]["local_rank"], rank % 4, "{node}");
    }
    // The verdict names the first process that failed, by its own rank.
    let first = json["verdict"]["rank"].as_u64().unwrap() as usize;
    assert_eq!(json["verdict"]["exit"], first, "{json}");
    assert_eq!(out.status.code(), Some(first as i32));
    // The remote processes' report says who shared the node's login.
    assert_eq!(
        nodes[5]["timeline"]["connection_shared_by"], 4,
        "{}",
        nodes[5]
    );
    assert!(nodes[0]["timeline"].get("connection_shared_by").is_none());
}

#[test]
fn fail_fast_ends_the_other_processes_of_the_node_and_of_the_others() {
    let lc = LoggedCluster::start(3);
    let tag = sleep_tag();
    let script = format!("if [ $RANK = 5 ]; then sleep 0.3; exit 7; fi; exec sleep {tag}");
    let started = Instant::now();
    let out = lc
        .cluster
        .exec_all(&["--nproc-per-node", "4", "--grace", "1", "-c", &script]);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(sleepers(&tag).is_empty(), "every process ended");
    let who = format!("rank 5 ({}: node 1, local rank 1)", lc.cluster.hosts[1]);
    assert!(
        stderr(&out).contains(&format!("first failure: {who}")),
        "{}",
        stderr(&out)
    );
    assert_eq!(lc.logins(), [1, 1]);
}

#[test]
fn a_node_whose_agent_dies_loses_all_its_processes_and_only_them() {
    let lc = LoggedCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let tag = sleep_tag();
    let script = format!("exec sleep {tag}");
    let mut child = lc
        .cluster
        .command(&mn_exec_all())
        .args(["--nproc-per-node", "4", "--grace", "1", "--report"])
        .arg(&report)
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || sleepers(&tag).len() == 12),
        "12 processes run"
    );
    signal(
        lc.cluster.agents[1].pid(),
        nix::sys::signal::Signal::SIGKILL,
    );
    let code = wait_exit(&mut child, Duration::from_secs(30)).expect("exec_all ends");
    let err = stderr_of(&mut child);
    assert_ne!(code, 0, "{err}");
    assert!(
        eventually(Duration::from_secs(10), || sleepers(&tag).is_empty()),
        "every process ended"
    );
    let json = crate::util::report(&report);
    let status: Vec<&str> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["status"].as_str().unwrap())
        .collect();
    assert!(status[8..].iter().all(|s| *s == "lost"), "{status:?} {err}");
    assert!(status[..8].iter().all(|s| *s != "lost"), "{status:?} {err}");
}

#[test]
fn past_the_fanout_a_relay_logs_in_once_to_each_node_of_its_group() {
    let lc = LoggedCluster::start(5);
    let out = lc.cluster.exec_all(&[
        "--nproc-per-node",
        "4",
        "--fanout",
        "2",
        "--label",
        "-c",
        "echo hi $RANK",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for rank in 0..20 {
        let host = &lc.cluster.hosts[rank / 4];
        assert!(
            text.contains(&format!("{rank} {host}: hi {rank}\n")),
            "{text}"
        );
    }
    // Nodes 1 and 3 are the relays (one login each from the head); nodes 2
    // and 4 their groups' others (one login each from their relay).
    assert_eq!(lc.logins(), [1, 1, 1, 1]);
}
