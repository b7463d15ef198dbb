//! The tools an agent or exec_all asks on a node: `nvidia-smi` never
//! outlives its asker, even one killed with `kill -9` while it waits for a
//! hung one; NCCL's RAS service is asked only where the job's user listens
//! on the loopback, and a silent one does not hold `top`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::*;

/// A fake `nvidia-smi` in `dir` that logs its pid to `dir/starts` and
/// hangs (as one on a GPU that fell off the bus); a PATH with it first.
fn hung_nvidia_smi(dir: &std::path::Path) -> String {
    let path = dir.join("nvidia-smi");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho $$ >> {}/starts\nexec sleep 1000\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn started(dir: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("starts"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Waits until the fake started, kills `asker` with SIGKILL, and asserts
/// that every fake started ends within 5 s (killing what is left).
fn kill_9_leaves_no_nvidia_smi(dir: &std::path::Path, asker: u32, what: &str) {
    assert!(
        eventually(Duration::from_secs(20), || !started(dir).is_empty()),
        "nvidia-smi never started"
    );
    let fakes = started(dir);
    assert!(fakes.iter().all(|pid| alive(*pid)), "{fakes:?}");
    signal(asker, nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    let gone = eventually(Duration::from_secs(5), || {
        fakes.iter().all(|pid| !alive(*pid))
    });
    println!(
        "kill -9 of {what}: {} hung nvidia-smi, gone: {gone} ({:?})",
        fakes.len(),
        killed.elapsed()
    );
    for pid in fakes.iter().filter(|pid| alive(**pid)) {
        signal(*pid, nix::sys::signal::Signal::SIGKILL);
    }
    assert!(gone, "a hung nvidia-smi outlived {what}: {fakes:?}");
}

#[test]
fn kill_9_of_an_agent_mid_snapshot_leaves_no_nvidia_smi() {
    let fake = tempfile::tempdir().unwrap();
    let path = hung_nvidia_smi(fake.path());
    let host = fresh_loopback();
    let mut agent = Agent::start_with(&host, 29922, &[], &[("PATH", path.as_str())]);
    let mut ps = cmd(&multinode())
        .env("MULTINODE_HOSTLIST", &host)
        .env("MULTINODE_NODE_RANK", "0")
        .args(["ps"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kill_9_leaves_no_nvidia_smi(fake.path(), agent.pid(), "its agent");
    let _ = agent.child.wait();
    let _ = ps.kill();
    let _ = ps.wait();
}

#[test]
fn kill_9_of_exec_all_while_its_node_counts_its_gpus_leaves_no_nvidia_smi() {
    let fake = tempfile::tempdir().unwrap();
    let path = hung_nvidia_smi(fake.path());
    let host = fresh_loopback();
    let mut exec_all = cmd(&mn_exec_all())
        .env("MULTINODE_HOSTLIST", &host)
        .env("MULTINODE_NODE_RANK", "0")
        .env("PATH", &path)
        .args(["--nproc-per-node", "gpu", "-c", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kill_9_leaves_no_nvidia_smi(fake.path(), exec_all.id(), "exec_all");
    let _ = exec_all.wait();
}

/// A TCP listener on 127.0.0.1 run as `user` (`setpriv`) or as this one,
/// that logs each connection to `log` and never answers. Its port.
fn silent_listener(user: Option<&str>, log: &std::path::Path) -> (std::process::Child, u16) {
    let script = format!(
        "import socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(64)\n\
         print(s.getsockname()[1], flush=True)\nheld = []\n\
         while True:\n    held.append(s.accept()[0]); open({:?}, 'a').write('asked\\n')\n",
        log.display().to_string()
    );
    let mut c = match user {
        Some(user) => {
            let mut c = std::process::Command::new("setpriv");
            c.args([
                &format!("--reuid={user}"),
                &format!("--regid={user}"),
                "--clear-groups",
                "/usr/bin/python3",
            ]);
            c
        }
        None => std::process::Command::new("/usr/bin/python3"),
    };
    let mut child = c
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut port,
    )
    .unwrap();
    (child, port.trim().parse().unwrap())
}

#[test]
fn a_silent_ras_listener_holds_top_at_most_a_second_and_another_users_is_never_asked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let (ours_log, theirs_log) = (dir.path().join("ours"), dir.path().join("theirs"));
    let (mut ours, ours_port) = silent_listener(None, &ours_log);
    let (mut theirs, theirs_port) = silent_listener(Some("65534"), &theirs_log);
    let host = fresh_loopback();
    let agent = Agent::start(&host);
    let top = |ras_port: u16| {
        let tag = sleep_tag();
        let mut command = cmd(&mn_ssh())
            .args([
                "-o",
                &format!("SetEnv=NCCL_RAS_ADDR=127.0.0.1:{ras_port}"),
                &host,
                &format!("sleep {tag}"),
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 1));
        let start = Instant::now();
        let out = cmd(&multinode())
            .env("MULTINODE_HOSTLIST", &host)
            .env("MULTINODE_NODE_RANK", "0")
            .args(["top", "--once"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let took = start.elapsed();
        let _ = command.kill();
        let _ = command.wait();
        assert!(out.status.success(), "{}", stderr(&out));
        took
    };
    // Ours says nothing: top waits for it a second, not the ask's 4 s.
    let took = top(ours_port);
    println!("top --once with a silent RAS listener of the job's user: {took:?}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert_eq!(
        std::fs::read_to_string(&ours_log).unwrap_or_default(),
        "asked\n"
    );
    // Another user's: never connected to, and no wait.
    let took = top(theirs_port);
    println!("top --once with another user's silent RAS listener: {took:?}");
    let _ = theirs.kill();
    let _ = theirs.wait();
    let _ = ours.kill();
    let _ = ours.wait();
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(
        std::fs::read_to_string(&theirs_log).unwrap_or_default(),
        "",
        "another user's listener was asked"
    );
    drop(agent);
}
