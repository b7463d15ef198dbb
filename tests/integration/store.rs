//! The job's store hosted by exec_all (`--nproc-per-node`, `--store auto`;
//! docs/torchrun.md), with real torch on agents at loopback addresses:
//! gloo's rendezvous through it, rank 0's death that leaves it answering,
//! a restart on the same port, nothing left after `kill -9` of exec_all,
//! and the line and rank 0's store where the head's python3 has no torch.
//!
//! Torch comes from the tests' venv (`tests/install-deps.sh`):
//! `TEST_TORCH_PYTHON`, else `target/test-venv/bin/python`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::util::*;

/// The python with torch the tests run (docs/testing.md).
fn torch_python() -> PathBuf {
    let python = std::env::var_os("TEST_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-venv/bin/python")
        });
    assert!(
        python.exists(),
        "no python with torch at {}: run tests/install-deps.sh (or set TEST_TORCH_PYTHON)",
        python.display()
    );
    python
}

/// `PATH` with a `python3` that runs `python ARGS...` first: the head's
/// python3, the one exec_all hosts the store with. (A script, not a link:
/// a venv's python finds its venv by the path it was started as.)
fn path_with_python3(dir: &std::path::Path, python: &std::path::Path, args: &str) -> String {
    let wrapper = dir.join("python3");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {} {args} \"$@\"\n", python.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The store processes exec_all started for `host:port` (its supervisor
/// and its python3), by their command line's last words.
fn store_pids(host: &str, port: u16) -> Vec<u32> {
    pids_matching(&format!("{host} {port}"))
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("multinode-store"))
        })
        .collect()
}

/// Every process meets (gloo) and all-reduces; in attempt 0, rank 1 sets a
/// key, rank 0 then kills itself (`kill -9`) and the others, ended by
/// exec_all, read that key from the store before they go.
const MEET: &str = r#"
import datetime, os, signal, sys, time
import torch
import torch.distributed as dist
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
x = torch.ones(1) * (rank + 1)
dist.all_reduce(x)
print("met rank=%d attempt=%d sum=%d port=%s agent_store=%s" % (rank, attempt, int(x.item()),
      os.environ["MASTER_PORT"], os.environ["TORCHELASTIC_USE_AGENT_STORE"]), flush=True)
if attempt > 0:
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)
store = dist.distributed_c10d._get_default_store()
if rank == 1:
    store.set("seen", "attempt-0")
def ended(signo, frame):
    try:
        store.set_timeout(datetime.timedelta(seconds=5))
        print("after rank 0 died: rank=%d store=%s" % (rank, store.get("seen").decode()), flush=True)
    except Exception as e:
        print("after rank 0 died: rank=%d store=gone (%s)" % (rank, type(e).__name__), flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, ended)
dist.barrier()
if rank == 0:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(120)
"#;

#[test]
fn rank_zeros_death_leaves_the_store_and_the_restart_meets_there_on_the_same_port() {
    let python = torch_python();
    let cluster = Cluster::start(4);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("meet.py");
    std::fs::write(&script, MEET).unwrap();
    let run = format!(
        "GLOO_SOCKET_IFNAME=lo {} {}",
        python.display(),
        script.display()
    );
    let out = cluster
        .command(&mn_exec_all())
        .env("PATH", path_with_python3(dir.path(), &python, ""))
        .args(["--nproc-per-node", "2", "--master-port", "29581"])
        .args(["--max-restarts", "1", "-c", &run])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}\n{err}");
    for attempt in 0..2 {
        let met: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(&format!("attempt={attempt} ")))
            .collect();
        let want = (0..8)
            .map(|r| format!("met rank={r} attempt={attempt} sum=36 port=29581 agent_store=True"))
            .collect::<Vec<_>>();
        let mut got: Vec<String> = met.iter().map(|l| l.to_string()).collect();
        got.sort_by_key(|l| number_after::<usize>(l, "rank=").unwrap_or(99));
        assert_eq!(got, want, "attempt {attempt}: {text}\n{err}");
    }
    // The store outlived rank 0: every other process of attempt 0 read
    // rank 1's key from it after rank 0 was gone.
    let after: Vec<&str> = text.lines().filter(|l| l.starts_with("after")).collect();
    assert_eq!(after.len(), 7, "{text}\n{err}");
    assert!(
        after.iter().all(|l| l.ends_with("store=attempt-0")),
        "{text}"
    );
    assert!(err.contains("rank 0 (") && err.contains("SIGKILL"), "{err}");
    assert!(store_pids(&cluster.hosts[0], 29581).is_empty());
}

/// exec_all ended by `sig` while its processes run: nothing of its store
/// (nor of its processes) is left.
fn nothing_of_the_store_is_left_after(sig: nix::sys::signal::Signal, port: u16) {
    let python = torch_python();
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let tag = sleep_tag();
    let mut child = cluster
        .command(&mn_exec_all())
        .env("PATH", path_with_python3(dir.path(), &python, ""))
        .args(["--nproc-per-node", "2", "--master-port", &port.to_string()])
        .args(["-c", &format!("exec sleep {tag}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let head = &cluster.hosts[0];
    assert!(eventually(Duration::from_secs(60), || sleepers(&tag).len() == 4));
    // Its supervisor and its python3.
    assert_eq!(store_pids(head, port).len(), 2, "the store runs");
    signal(child.id(), sig);
    let _ = child.wait();
    assert!(
        eventually(Duration::from_secs(15), || store_pids(head, port)
            .is_empty()
            && sleepers(&tag).is_empty()),
        "{sig}: left running: store {:?}, sleepers {:?}",
        store_pids(head, port),
        sleepers(&tag)
    );
}

#[test]
fn nothing_of_the_store_is_left_after_kill_9_of_exec_all() {
    nothing_of_the_store_is_left_after(nix::sys::signal::Signal::SIGKILL, 29582);
}

#[test]
fn nothing_of_the_store_is_left_after_sigterm_or_sigint_to_exec_all() {
    nothing_of_the_store_is_left_after(nix::sys::signal::Signal::SIGTERM, 29584);
    nothing_of_the_store_is_left_after(nix::sys::signal::Signal::SIGINT, 29585);
}

#[test]
fn a_python3_without_torch_is_one_line_and_rank_zero_hosts_the_store() {
    let python = torch_python();
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    // The same python, without its site-packages (-S): no torch.
    let out = cluster
        .command(&mn_exec_all())
        .env("PATH", path_with_python3(dir.path(), &python, "-S"))
        .args(["--nproc-per-node", "2", "--master-port", "29583", "-c"])
        .arg("echo RANK=$RANK PORT=$MASTER_PORT STORE=$TORCHELASTIC_USE_AGENT_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("the job's store is not exec_all's")
            && lines[0].contains("cannot import torch")
            && lines[0].contains("rank 0's process hosts it"),
        "{err}"
    );
    for rank in 0..4 {
        assert!(
            text.contains(&format!("RANK={rank} PORT=29583 STORE=False")),
            "{text}"
        );
    }
    // --store off: not tried, nothing said.
    let with_torch = tempfile::tempdir().unwrap();
    let out = cluster
        .command(&mn_exec_all())
        .env("PATH", path_with_python3(with_torch.path(), &python, ""))
        .args(["--nproc-per-node", "1", "--store", "off", "-c"])
        .arg("echo STORE=$TORCHELASTIC_USE_AGENT_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    assert_eq!(stdout(&out), "STORE=False\nSTORE=False\n");
}

#[test]
fn a_taken_port_is_one_line_and_rank_zero_hosts_the_store() {
    let python = torch_python();
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let held = std::net::TcpListener::bind((cluster.hosts[0].as_str(), 29586)).unwrap();
    let out = cluster
        .command(&mn_exec_all())
        .env("PATH", path_with_python3(dir.path(), &python, ""))
        .args(["--nproc-per-node", "1", "--master-port", "29586", "-c"])
        .arg("echo STORE=$TORCHELASTIC_USE_AGENT_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    drop(held);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot serve a store at") && err.contains("Address already in use"),
        "{err}"
    );
    assert_eq!(stdout(&out), "STORE=False\n");
}
