//! exec_all on agents at loopback addresses: the reference script, exit
//! codes, fail-fast, lost nodes, signals, kill -9, output, wrappers, scale.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn the_reference_script_runs_torchrun_on_every_node_with_its_rank() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let record = dir.path().join("record");
    // A stand-in torchrun: records its arguments, RANK and where it ran.
    std::fs::write(
        bin.join("torchrun"),
        format!(
            "#!/bin/sh\nprintf '%s|%s|%s\\n' \"$RANK\" \"${{AGENT_ID:-head}}\" \"$*\" >> '{}'\n",
            record.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        bin.join("torchrun"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("helpers/generic-helper");
    // The reference document's script, verbatim but for the helper's path.
    let script = format!(
        r#". {helper}
NNODES=$(echo "$MULTINODE_HOSTLIST_NOSLOTS" | awk -F, '{{print NF}}')
exec_all - "$MULTINODE_NODE_IP" "$NNODES" <<'EOF'
torchrun \
  --nnodes="$2" \
  --node-rank="$RANK" \
  --nproc-per-node=2 \
  --master-addr="$1" \
  --master-port=29500 \
  /workspace/train.py
EOF
"#,
        helper = helper.display()
    );
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        multinode().parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let out = cluster
        .command(Path::new("/bin/sh"))
        .env("PATH", &path)
        .arg("-c")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let text = std::fs::read_to_string(&record).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    let head = &cluster.hosts[0];
    let expected: Vec<String> = (0..3)
        .map(|rank| {
            let place = if rank == 0 { "head".to_string() } else { cluster.hosts[rank].clone() };
            format!(
                "{rank}|{place}|--nnodes=3 --node-rank={rank} --nproc-per-node=2 --master-addr={head} --master-port=29500 /workspace/train.py"
            )
        })
        .collect();
    assert_eq!(lines, expected);
}

#[test]
fn exit_codes_aggregate_to_the_first_failure() {
    let cluster = Cluster::start(4);
    assert_eq!(cluster.exec_all(&["-c", "true"]).status.code(), Some(0));
    let out = cluster.exec_all(&[
        "--no-fail-fast",
        "-c",
        "[ $RANK = 2 ] && exit 7; [ $RANK = 3 ] && { sleep 0.5; exit 9; }; exit 0",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("rank 2 (") && err.contains("exit 7 first"),
        "{err}"
    );
    assert!(
        err.contains("exit 9"),
        "--no-fail-fast waits for all: {err}"
    );
    let killed = cluster.exec_all(&["-c", "[ $RANK = 1 ] && kill -KILL $$; exit 0"]);
    assert_eq!(killed.status.code(), Some(137));
    assert!(
        stderr(&killed).contains("killed by SIGKILL"),
        "{}",
        stderr(&killed)
    );
}

#[test]
fn fail_fast_ends_every_other_node_and_keeps_the_status() {
    let cluster = Cluster::start(4);
    let tag = sleep_tag();
    let script = format!(
        "sleep {tag} & sh -c 'sleep {tag}; :' & \
         if [ $RANK = 2 ]; then sleep 0.5; echo failing >&2; exit 3; fi; wait"
    );
    let start = Instant::now();
    let out = cluster.exec_all(&["--grace", "2", "-c", &script]);
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(took < Duration::from_secs(6), "fail-fast took {took:?}");
    assert!(
        eventually(Duration::from_secs(5), || sleepers(&tag).is_empty()),
        "processes left: {:?}",
        sleepers(&tag)
    );
    let err = stderr(&out);
    assert!(
        err.contains("failing") && err.contains("killed by SIGTERM"),
        "{err}"
    );
}

fn kill_all(pids: Vec<u32>) {
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[test]
fn a_node_whose_agent_dies_is_lost_and_the_run_ends() {
    let mut cluster = Cluster::start(3);
    let tag = sleep_tag();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["--report", report.to_str().unwrap(), "-c"])
        .arg(format!("exec sleep {tag}"))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 3));
    let victim = &mut cluster.agents[1];
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
    let start = Instant::now();
    let status = wait_within(&mut child, Duration::from_secs(20)).expect("exec_all must end");
    assert_eq!(status.code(), Some(255));
    // A SIGKILLed agent's TCP connection closes, which ends the session at once.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let node = &json["nodes"][2];
    assert_eq!(node["host"], cluster.hosts[2].as_str());
    assert_eq!(node["status"], "lost");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains(&cluster.hosts[2]) && err.contains("lost"),
        "{err}"
    );
    // The other nodes were ended. The dead agent's own command lost its parent
    // with it (the Docker cluster tests cover a whole node vanishing).
    let left = sleepers(&tag);
    assert!(
        left.len() <= 1,
        "more than the dead agent's command left: {left:?}"
    );
    kill_all(left);
}

#[test]
fn sigint_reaches_every_node_and_a_second_one_kills() {
    let cluster = Cluster::start(3);
    let tag = sleep_tag();
    let mut child = cluster
        .command(&mn_exec_all())
        .arg("-c")
        .arg(format!(
            "trap 'echo got-int-$RANK' INT; sh -c 'trap \"\" INT; sleep {tag}; :' & wait; wait"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 3));
    // The output as it comes, line by line.
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    signal(child.id(), nix::sys::signal::Signal::SIGINT);
    let first = std::time::Instant::now();
    // Every shell answers SIGINT (its line is the condition waited for); the
    // sleeps ignore it, so the run goes on...
    let mut out = String::new();
    while (0..3).any(|rank| !out.contains(&format!("got-int-{rank}"))) {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("not every rank answered SIGINT ({e}): {out}"));
        out.push_str(&line);
        out.push('\n');
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "ended on the first SIGINT"
    );
    assert_eq!(sleepers(&tag).len(), 3);
    // ...until a second SIGINT, which is SIGKILL for everyone. A person's
    // second Ctrl-C: the same signal within 250 ms of the first counts once
    // (`Stops::next_distinct`), so it comes after that.
    std::thread::sleep(
        (first + Duration::from_millis(400)).saturating_duration_since(std::time::Instant::now()),
    );
    signal(child.id(), nix::sys::signal::Signal::SIGINT);
    let status = wait_within(&mut child, Duration::from_secs(10)).expect("exec_all must end");
    out.extend(lines.try_iter().map(|l| l + "\n"));
    for rank in 0..3 {
        assert!(
            out.contains(&format!("got-int-{rank}")),
            "rank {rank} did not see SIGINT: {out}"
        );
    }
    assert_eq!(status.code(), Some(137));
    assert!(
        eventually(Duration::from_secs(5), || sleepers(&tag).is_empty()),
        "left: {:?}",
        sleepers(&tag)
    );
}

#[test]
fn sigterm_to_exec_all_is_passed_on() {
    let cluster = Cluster::start(3);
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["-c", "echo up; exec sleep 1000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 9];
    child.stdout.as_mut().unwrap().read_exact(&mut buf).unwrap();
    signal(child.id(), nix::sys::signal::Signal::SIGTERM);
    let status = wait_within(&mut child, Duration::from_secs(10)).expect("exec_all must end");
    assert_eq!(status.code(), Some(143));
}

#[test]
fn kill_9_of_exec_all_leaves_no_process_on_any_node() {
    let cluster = Cluster::start(4);
    let tag = sleep_tag();
    let mut child = cluster
        .command(&mn_exec_all())
        .arg("-c")
        .arg(format!("sh -c 'sleep {tag}; :' & exec sleep {tag}"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 8));
    child.kill().unwrap();
    child.wait().unwrap();
    // Remote: the agents see the connections close (within 1 s) and end the groups.
    // Local: the supervisor's parent died; it ends its group.
    let gone = eventually(Duration::from_secs(8), || sleepers(&tag).is_empty());
    let left = sleepers(&tag);
    kill_all(left.clone());
    assert!(gone, "left after kill -9 of exec_all: {left:?}");
}

#[test]
fn heavy_output_from_16_nodes_keeps_lines_whole_and_complete() {
    let cluster = Cluster::start(16);
    let lines_per_node = 20_000;
    // Lines of exactly 64 bytes: sed's 4 KiB writes hold whole lines, so a
    // line is partial in transit only where SSH cuts a packet or the window
    // ends, and the rest follows at once. (A node that stalls mid-line for
    // the quiet time, 150 ms, has its partial line written: a loaded machine
    // must not turn this test into a test of that.)
    let pad = "x".repeat(44);
    let script = format!(
        "r=$(printf %02d \"$RANK\"); seq -f %05g 0 {} | sed \"s/.*/rank=$r line=& {pad}/\"; \
         printf 'tail-%s' \"$RANK\"",
        lines_per_node - 1
    );
    for label in [false, true] {
        let mut args = vec!["-c", script.as_str()];
        if label {
            args.insert(0, "--label");
        }
        let out = cluster.exec_all(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        let mut per_rank: BTreeMap<usize, usize> = BTreeMap::new();
        let mut tails = 0;
        let mut body_bytes = 0;
        for line in text.split_inclusive('\n') {
            let (label_rank, body) = if label {
                let (prefix, body) = line
                    .split_once(": ")
                    .unwrap_or_else(|| panic!("no label: {line:?}"));
                let (rank, host) = prefix.split_once(' ').unwrap();
                let rank: usize = rank.parse().unwrap();
                assert_eq!(host, cluster.hosts[rank]);
                (Some(rank), body)
            } else {
                (None, line)
            };
            body_bytes += body.len();
            if let Some(rest) = body.strip_prefix("tail-") {
                tails += 1;
                let rank: usize = rest
                    .trim_end()
                    .parse()
                    .unwrap_or_else(|_| panic!("mixed: {line:?}"));
                if let Some(l) = label_rank {
                    assert_eq!(l, rank);
                }
                // With several nodes, a partial last line is ended so the next line stays whole.
                assert!(line.ends_with('\n'), "{line:?}");
                body_bytes -= 1;
                continue;
            }
            let fields: Vec<&str> = body.trim_end().split(' ').collect();
            assert_eq!(fields.len(), 3, "mixed line: {line:?}");
            assert_eq!(fields[2], pad, "mixed line: {line:?}");
            let rank: usize = fields[0].strip_prefix("rank=").unwrap().parse().unwrap();
            if let Some(l) = label_rank {
                assert_eq!(l, rank, "label and content disagree: {line:?}");
            }
            *per_rank.entry(rank).or_default() += 1;
        }
        assert_eq!(tails, 16);
        assert_eq!(per_rank.len(), 16);
        assert!(
            per_rank.values().all(|&n| n == lines_per_node),
            "{per_rank:?}"
        );
        // Nothing lost or added: the bytes the nodes printed, exactly.
        let expected: usize = (0..16)
            .map(|rank| {
                (0..lines_per_node)
                    .map(|i| format!("rank={rank:02} line={i:05} {pad}\n").len())
                    .sum::<usize>()
                    + format!("tail-{rank}").len()
            })
            .sum();
        assert_eq!(body_bytes, expected);
    }
}

#[test]
fn only_the_heads_output_when_forward_streams_is_0() {
    let cluster = Cluster::start(3);
    let out = cluster
        .command(&mn_exec_all())
        .env("MULTINODE_WRAPPER_FORWARD_STREAMS", "0")
        .args(["-c", "echo out-$RANK; echo err-$RANK >&2"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(stdout(&out), "out-0\n");
    assert_eq!(stderr(&out), "err-0\n");
}

#[test]
fn environment_and_working_directory_follow_the_head() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let out = cluster
        .command(&mn_exec_all())
        .current_dir(dir.path())
        .env("NCCL_DEBUG", "INFO")
        .env("PYTHONPATH", "/opt/x y")
        .env("CUDA_VISIBLE_DEVICES", "7")
        .args([
            "--label",
            "-c",
            "echo \"$NCCL_DEBUG|$PYTHONPATH|${CUDA_VISIBLE_DEVICES:-unset}|$(pwd)\"",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let cwd = dir.path().canonicalize().unwrap();
    for rank in 0..3 {
        // The local node keeps its own CUDA_VISIBLE_DEVICES; remote ones never get the head's.
        let cuda = if rank == 0 { "7" } else { "unset" };
        let line = format!(
            "{rank} {}: INFO|/opt/x y|{cuda}|{}\n",
            cluster.hosts[rank],
            cwd.display()
        );
        assert!(text.contains(&line), "{line:?} not in {text:?}");
    }
    let none = cluster
        .command(&mn_exec_all())
        .env("NCCL_DEBUG", "INFO")
        .args([
            "--export",
            "NONE",
            "--nodes",
            "1",
            "-c",
            "echo \"${NCCL_DEBUG:-none} $RANK\"",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(stdout(&none), "none 1\n");
}

#[test]
fn stdin_goes_to_inline_scripts_and_args_stay_whole() {
    let cluster = Cluster::start(3);
    let mut child = cluster
        .command(&mn_exec_all())
        .args([
            "--label",
            "-c",
            "printf '%s|' \"$@\"; wc -c",
            "a b",
            "it's",
            "$x",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&[b'z'; 100_000])
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    for rank in 0..3 {
        let line = format!("{rank} {}: a b|it's|$x|100000\n", cluster.hosts[rank]);
        assert!(text.contains(&line), "{line:?} not in {text:?}");
    }
}

#[test]
fn node_selection_timeout_and_report() {
    let cluster = Cluster::start(4);
    let out = cluster.exec_all(&["--nodes", "1-3", "--exclude", "2", "-c", "echo $RANK"]);
    let mut ranks: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    ranks.sort();
    assert_eq!(ranks, ["1", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let start = Instant::now();
    let out = cluster.exec_all(&[
        "--timeout",
        "1",
        "--report",
        report.to_str().unwrap(),
        "-c",
        "echo hi; exec sleep 100",
    ]);
    assert_eq!(out.status.code(), Some(124));
    assert!(start.elapsed() < Duration::from_secs(6));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["exit_code"], 124);
    assert_eq!(json["cancelled"], "timeout");
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    for (rank, node) in nodes.iter().enumerate() {
        assert_eq!(node["rank"], rank);
        assert_eq!(node["host"], cluster.hosts[rank].as_str());
        assert_eq!(node["signal"], "SIGTERM");
        assert_eq!(node["bytes_out"], 3);
        assert!(node["started"].as_f64().unwrap() <= node["ended"].as_f64().unwrap());
        if rank > 0 {
            assert!(
                node["address"]
                    .as_str()
                    .unwrap()
                    .starts_with(&cluster.hosts[rank])
            );
        }
    }
    let bad = cluster.exec_all(&["--nodes", "9", "-c", "true"]);
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(stderr(&bad).lines().count(), 1, "{}", stderr(&bad));
    // A count of 0 is refused, not taken as 1.
    for option in ["--fanout", "--max-connecting"] {
        let bad = cluster.exec_all(&[option, "0", "-c", "true"]);
        assert_eq!(bad.status.code(), Some(2), "{option}");
        let err = stderr(&bad);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(option) && err.contains("give 1 or more"),
            "{err}"
        );
    }
}

#[test]
fn an_external_wrapper_script_is_used_as_is() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wrapper.log");
    let wrapper = dir.path().join("wrapper.sh");
    // A platform's own wrapper: logs the host, then runs the command through mn-ssh.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            mn_ssh().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let out = cluster
        .command(&mn_exec_all())
        .current_dir(dir2.path())
        .env("MULTINODE_SSH_WRAPPER", &wrapper)
        .env("NCCL_ALGO", "Ring")
        .args([
            "--label",
            "-c",
            "echo \"$RANK $NCCL_ALGO $MULTINODE_SSH_WRAPPER $(pwd) $1\"",
            "arg one",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut called: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    called.sort();
    let mut want = cluster.hosts[1..].to_vec();
    want.sort();
    assert_eq!(called, want, "the wrapper is called once per remote node");
    let cwd = dir2.path().canonicalize().unwrap();
    for rank in 0..3 {
        let line = format!(
            "{rank} {}: {rank} Ring {} {} arg one\n",
            cluster.hosts[rank],
            wrapper.display(),
            cwd.display()
        );
        assert!(
            stdout(&out).contains(&line),
            "{line:?} not in {}",
            stdout(&out)
        );
    }
    let failing = cluster
        .command(&mn_exec_all())
        .env("MULTINODE_SSH_WRAPPER", &wrapper)
        .args(["-c", "[ $RANK = 1 ] && exit 4; exec sleep 100"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(failing.status.code(), Some(4), "{}", stderr(&failing));
}

#[test]
fn two_hundred_fifty_six_nodes() {
    let cluster = Cluster::start_on_port(256, 29951);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let out = cluster.exec_all(&[
        "--report",
        report.to_str().unwrap(),
        "-c",
        "echo \"$RANK ${AGENT_ID:-head}\"",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut got: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    got.sort();
    let mut want: Vec<String> = (0..256)
        .map(|r| {
            let place = if r == 0 {
                "head".to_string()
            } else {
                cluster.hosts[r].clone()
            };
            format!("{r} {place}")
        })
        .collect();
    want.sort();
    assert_eq!(got, want);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["nodes"].as_array().unwrap().len(), 256);
}

#[test]
fn demo_runs_a_real_multi_node_job_and_cleans_up() {
    let port = 29960 + (std::process::id() % 30) as u16;
    let out = cmd(&multinode())
        .env_remove("MULTINODE_SECRET")
        .args([
            "demo",
            "--nodes",
            "4",
            "--port",
            &port.to_string(),
            "--label",
            "--",
        ])
        .arg("echo rank $RANK of $MULTINODE_NNODES")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for rank in 0..4 {
        let line = format!("{rank} 127.0.0.{}: rank {rank} of 4\n", rank + 2);
        assert!(text.contains(&line), "{line:?} not in {text}");
    }
    let listen = format!("127.0.0.3:{port}");
    assert!(
        eventually(Duration::from_secs(5), || pids_matching(&listen).is_empty()),
        "demo agents left running"
    );
}

#[test]
fn demo_without_mn_ssh_beside_links_a_wrapper_and_removes_it() {
    // `cargo run -- demo` builds the multinode binary alone.
    let dir = tempfile::tempdir().unwrap();
    let lonely = dir.path().join("multinode");
    std::fs::copy(multinode(), &lonely).unwrap();
    let port = 29930 + (std::process::id() % 30) as u16;
    let out = cmd(&lonely)
        .env_remove("MULTINODE_SECRET")
        .env_remove("MULTINODE_SSH_WRAPPER")
        .args(["demo", "--nodes", "2", "--port", &port.to_string(), "--"])
        .arg("echo \"$RANK $MULTINODE_SSH_WRAPPER\"; \"$MULTINODE_SSH_WRAPPER\" -V")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let wrapper = format!(
        "{}/multinode-demo-{}/mn-ssh",
        std::env::temp_dir().display(),
        out_pid_hint(&text)
    );
    for rank in 0..2 {
        assert!(
            text.contains(&format!("{rank} {wrapper}\n")),
            "rank {rank} with {wrapper:?} not in {text}"
        );
    }
    // The link answered as mn-ssh (its -V) on both nodes.
    assert_eq!(text.matches("mn-ssh").count(), 4, "{text}");
    assert!(
        !std::path::Path::new(&wrapper).exists(),
        "{wrapper} left behind"
    );
}

/// The pid in `.../multinode-demo-PID/mn-ssh` of the demo's output.
fn out_pid_hint(text: &str) -> String {
    text.split("multinode-demo-")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_tree_of_relays_reaches_every_node_with_a_small_fanout() {
    let cluster = Cluster::start(10);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    // 9 remote nodes, at most 2 direct children: two relays of 5 and 4 nodes.
    let out = cluster.exec_all(&[
        "--fanout",
        "2",
        "--label",
        "--report",
        report.to_str().unwrap(),
        "-c",
        "echo \"$RANK ${AGENT_ID:-head} $1\"; printf partial",
        "arg one",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for rank in 0..10 {
        let host = &cluster.hosts[rank];
        let place = if rank == 0 { "head" } else { host.as_str() };
        let line = format!("{rank} {host}: {rank} {place} arg one\n");
        assert!(text.contains(&line), "{line:?} not in {text}");
        assert!(
            text.contains(&format!("{rank} {host}: partial\n")),
            "{text}"
        );
    }
    assert_eq!(text.lines().count(), 20, "{text}");
    assert_eq!(
        stderr(&out),
        "",
        "the relays' reports stay out of the output"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 10);
    for (rank, node) in nodes.iter().enumerate() {
        assert_eq!(node["rank"], rank);
        assert_eq!(node["status"], "ok", "{node}");
        let place = if rank == 0 {
            "head"
        } else {
            cluster.hosts[rank].as_str()
        };
        let printed = format!("{rank} {place} arg one\npartial");
        assert_eq!(node["bytes_out"], printed.len(), "{node}");
    }
}

#[test]
fn a_failure_inside_a_relays_group_fails_the_run_and_names_the_node() {
    let cluster = Cluster::start(8);
    let tag = sleep_tag();
    let script = format!("[ $RANK = 6 ] && {{ echo broken >&2; exit 6; }}; exec sleep {tag}");
    let start = Instant::now();
    let out = cluster.exec_all(&["--fanout", "2", "-c", &script]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    let err = stderr(&out);
    assert!(
        err.contains("rank 6 (") && err.contains("exit 6 first"),
        "{err}"
    );
    assert!(err.contains("broken"), "{err}");
    assert!(
        eventually(Duration::from_secs(5), || sleepers(&tag).is_empty()),
        "left: {:?}",
        sleepers(&tag)
    );
}

#[test]
fn kill_9_of_exec_all_over_a_tree_leaves_nothing() {
    let cluster = Cluster::start(7);
    let tag = sleep_tag();
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["--fanout", "2", "-c"])
        .arg(format!("exec sleep {tag}"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 7));
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = eventually(Duration::from_secs(10), || sleepers(&tag).is_empty());
    let left = sleepers(&tag);
    kill_all(left.clone());
    assert!(gone, "left after kill -9 of exec_all: {left:?}");
}

/// Node 0-3 real (this machine and 3 agents), 4 to `nodes - 1` names as a
/// cluster has them: the helper sourced on the head, a report of the lists
/// there, `multinode env` again, and the report on the 4 real nodes through
/// exec_all. Returns the lines (the head's, `multinode env`'s, then the four
/// nodes' sorted) and stderr. The report: RANK, the lengths of both lists,
/// the reference script's node count (the commas of the list without slots),
/// MULTINODE_NNODES, _TOTAL_SLOTS, the hostfile's lines and its last line
/// (`-` when there is none), `multinode hosts`'s count of the names.
fn many_nodes_through_the_helper(nodes: usize) -> (Vec<String>, String) {
    let cluster = Cluster::start(4);
    let hostlist = format!("{},gpu-node-[00005-{nodes:05}]:8", cluster.hostlist(8));
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("helpers/generic-helper");
    let report = r#"echo "$RANK ${#MULTINODE_HOSTLIST} ${#MULTINODE_HOSTLIST_NOSLOTS} $(echo "$MULTINODE_HOSTLIST_NOSLOTS" | awk -F, '{print NF}') $MULTINODE_NNODES $MULTINODE_TOTAL_SLOTS $(wc -l < "${MULTINODE_HOSTFILE:-/dev/null}") $(tail -n 1 "${MULTINODE_HOSTFILE:-/dev/null}" | grep . || echo -) $(multinode hosts --no-resolve | grep -c gpu-node-)""#;
    let script = format!(
        ". {helper} || exit 9\n{report}\nmultinode env --format json | grep -c '\"MULTINODE_HOSTFILE\"'\n\
         exec_all --nodes 0-3 --fanout 2 - <<'EOF'\n{report}\nEOF\n",
        helper = helper.display()
    );
    let path = format!(
        "{}:{}",
        multinode().parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let out = cmd(Path::new("/bin/sh"))
        .env("MULTINODE_HOSTLIST", &hostlist)
        .env("MULTINODE_NODE_RANK", "0")
        .env("MULTINODE_AGENT_PORT", cluster.port.to_string())
        .env("PATH", &path)
        .arg("-c")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    // The head's own line, then `multinode env`'s, then the four nodes' in any order.
    assert_eq!(lines.len(), 6, "{text}");
    lines[2..].sort();
    (lines, stderr(&out))
}

#[test]
fn ten_thousand_nodes_through_env_the_helper_and_exec_all() {
    // Written out, MULTINODE_HOSTLIST would be ~170 KB and the list without
    // slots ~150 KB: each more than Linux passes in one environment string
    // (128 KiB). Both are folded, and the helper says once how to count.
    let (lines, stderr) = many_nodes_through_the_helper(10_000);
    assert_eq!(lines[1], "1", "multinode env names the hostfile");
    for (rank, line) in lines[2..].iter().enumerate() {
        let fields: Vec<&str> = line.splitn(5, ' ').collect();
        assert_eq!(fields[0], rank.to_string(), "{lines:?}");
        // Both lists folded: a few dozen bytes, not ~170,000; the commas
        // of the list without slots no longer count the nodes.
        let (list, noslots): (usize, usize) =
            (fields[1].parse().unwrap(), fields[2].parse().unwrap());
        assert!(list < 100 && noslots < list, "{lines:?}");
        assert_ne!(fields[3], "10000", "{lines:?}");
        assert_eq!(
            fields[4], "10000 80000 10000 gpu-node-10000 slots=8 9996",
            "{lines:?}"
        );
    }
    assert_eq!(lines[0], lines[2], "the head sees what node 0 sees");
    // Once, from the helper's `multinode env`: not again from the second
    // `multinode env`, nor from the nodes.
    let notes: Vec<&str> = stderr.lines().collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(
        notes[0].starts_with("multinode: warning: MULTINODE_HOSTLIST_NOSLOTS is folded (")
            && notes[0].ends_with(
                "count the nodes with MULTINODE_NNODES (10000), not with the commas of the list"
            ),
        "{stderr}"
    );
}

#[test]
fn eight_thousand_nodes_keep_the_names_written_out_for_the_reference_count() {
    // MULTINODE_HOSTLIST written out would be ~136 KB: folded, with the
    // hostfile. The names alone are ~120 KB, a string of their own that
    // Linux passes: written out, the reference script counts 8,000 nodes on
    // every node (it counted 2 when both lists were folded past 64 KiB).
    let (lines, stderr) = many_nodes_through_the_helper(8_000);
    assert_eq!(lines[1], "1", "multinode env names the hostfile");
    for (rank, line) in lines[2..].iter().enumerate() {
        let fields: Vec<&str> = line.splitn(4, ' ').collect();
        assert_eq!(fields[0], rank.to_string(), "{lines:?}");
        assert!(fields[1].parse::<usize>().unwrap() < 100, "{lines:?}");
        assert!(fields[2].parse::<usize>().unwrap() > 119_000, "{lines:?}");
        assert_eq!(
            fields[3], "8000 8000 64000 8000 gpu-node-08000 slots=8 7996",
            "{lines:?}"
        );
    }
    assert_eq!(lines[0], lines[2], "the head sees what node 0 sees");
    assert_eq!(stderr, "");
}

#[test]
fn a_frozen_agent_is_lost_in_under_5_seconds() {
    // SIGSTOP: the kernel still acknowledges its TCP, nothing answers (as
    // `docker pause`); only the keepalives can tell.
    let cluster = Cluster::start(3);
    let tag = sleep_tag();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let mut child = cluster
        .command(&mn_exec_all())
        .args(["--report", report.to_str().unwrap(), "-c"])
        .arg(format!("exec sleep {tag}"))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 3));
    let frozen = nix::unistd::Pid::from_raw(cluster.agents[1].pid() as i32);
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let start = Instant::now();
    let status = wait_within(&mut child, Duration::from_secs(20));
    let took = start.elapsed();
    nix::sys::signal::kill(frozen, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_eq!(status.expect("exec_all must end").code(), Some(255));
    assert!(took < Duration::from_secs(5), "lost after {took:?}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["nodes"][2]["status"], "lost", "{json}");
    assert_eq!(json["nodes"][1]["status"], "killed", "{json}");
    // Thawed, the agent sees its client gone and ends its command.
    assert!(
        eventually(Duration::from_secs(15), || sleepers(&tag).is_empty()),
        "{:?}",
        sleepers(&tag)
    );
}

#[test]
fn a_bad_lost_after_is_one_clear_error() {
    let cluster = Cluster::start(2);
    for bad in ["soon", "0.1", "-1"] {
        let out = cluster
            .command(&mn_exec_all())
            .env("MULTINODE_LOST_AFTER", bad)
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            stderr(&out),
            format!(
                "mn-exec-all: error: MULTINODE_LOST_AFTER='{bad}' is not a number of seconds of at least 0.4 (or 0 for never); fix it, or unset it for the default 4\n"
            )
        );
    }
}

/// One parser a value: `--hang-timeout 0` would call every run hung at
/// once, and is refused as its variable is, with one line and exit code 2.
#[test]
fn a_hang_timeout_of_zero_is_refused_as_flag_and_as_variable() {
    let cluster = Cluster::start(1);
    let flag = cluster
        .command(&mn_exec_all())
        .args(["--hang-timeout", "0", "-c", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(flag.status.code(), Some(2), "{}", stderr(&flag));
    let err = stderr(&flag);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("'--hang-timeout <SECONDS>': \"0\" is not a number of seconds > 0"),
        "{err}"
    );
    let var = cluster
        .command(&mn_exec_all())
        .env("MULTINODE_HANG_TIMEOUT", "0")
        .args(["-c", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(var.status.code(), Some(2), "{}", stderr(&var));
    assert_eq!(
        stderr(&var),
        "mn-exec-all: error: MULTINODE_HANG_TIMEOUT='0' is not a number of seconds > 0; fix it or unset it\n"
    );
}

/// `--report` tells where each node's start went (issue 42): seconds from
/// the run's start to its connection and login (the agents' nodes, on
/// connections of their own; none for the node run here), its spawn, its
/// first heartbeat and its first line, in that order; and, with a health
/// check, how long the check took on each node.
#[test]
fn the_report_tells_where_each_nodes_start_went() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("r.json");
    let out = cluster.exec_all(&[
        "--hang-timeout",
        "30",
        "--health-check",
        "true",
        "--report",
        report_path.to_str().unwrap(),
        "-c",
        "touch \"$MULTINODE_HEARTBEAT_FILE\"; sleep 0.8; echo up $RANK",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json = report(&report_path);
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for node in nodes {
        let t = &node["timeline"];
        let s = |k: &str| t[k].as_f64();
        let (spawn, beat, line) = (s("spawn_s"), s("first_heartbeat_s"), s("first_output_s"));
        let (spawn, beat, line) = (spawn.unwrap(), beat.unwrap(), line.unwrap());
        assert!(spawn <= beat && beat < line, "{t}");
        assert!(
            line - spawn >= 0.7,
            "the first line came after the sleep: {t}"
        );
        if node["rank"] == 0 {
            assert!(
                t.get("connect_s").is_none() && t.get("login_s").is_none(),
                "{t}"
            );
        } else {
            let (connect, login) = (s("connect_s").unwrap(), s("login_s").unwrap());
            assert!(connect <= login && login <= spawn, "{t}");
        }
    }
    let checked = &json["attempts"][0]["health_check_s"];
    for host in &cluster.hosts {
        assert!(checked[host].as_f64().is_some(), "{checked}");
    }
    // Each node's own timeline has its check's time too.
    for node in json["nodes"].as_array().unwrap() {
        let host = node["host"].as_str().unwrap();
        assert_eq!(node["timeline"]["health_check_s"], checked[host], "{node}");
    }
}
