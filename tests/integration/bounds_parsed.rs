//! Issue 51's "memory is bounded by what is parsed": a client of the job
//! that sends show-start lines of empty ranks, forges a command's record
//! through show-group, opens channels without end, asks for `top` many
//! times at once, or a rank with megabytes of argv. Each test prints the
//! figures docs/security.md gives (run with `--no-capture`).

use std::time::{Duration, Instant};

use multinode::transport::client::Connection;

use crate::util::*;

/// Runs a request on a channel of its own: exit status, stdout, stderr.
async fn ask(conn: &Connection, command: &[u8]) -> (Option<u32>, Vec<u8>, String) {
    let mut channel = conn.exec(command, &[]).await.unwrap();
    let _ = channel.eof().await;
    let (mut code, mut out, mut err) = (None, Vec::new(), Vec::new());
    while let Some(msg) = channel.wait().await {
        match msg {
            russh::ChannelMsg::Data { data } => out.extend_from_slice(&data),
            russh::ChannelMsg::ExtendedData { data, .. } => err.extend_from_slice(&data),
            russh::ChannelMsg::ExitStatus { exit_status } => code = Some(exit_status),
            _ => {}
        }
    }
    (code, out, String::from_utf8_lossy(&err).into_owned())
}

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

/// Issue 51's line: `{}` 2,796,201 times, 8,388,606 bytes with its newline.
fn empty_ranks_line() -> Vec<u8> {
    let mut line = br#"{"started_ms":1,"ranks":["#.to_vec();
    while line.len() + 3 + 3 <= 8_388_606 {
        line.extend_from_slice(b"{},");
    }
    line.extend_from_slice(b"{}]}\n");
    line
}

#[test]
fn show_start_holds_what_it_parses_within_its_bounds() {
    let agent = Agent::start(&fresh_loopback());
    let pid = agent.pid();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (start, _) = (rss_anon_kib(pid), peak_rss_kib(pid));
    rt.block_on(async {
        let conn = connect_as_job(&agent).await;
        // Two channels of issue 51's line (it measured 16: 4.41 GB).
        let line = empty_ranks_line();
        let mut channels = Vec::new();
        let took = Instant::now();
        for _ in 0..2 {
            let channel = conn.exec(b"#multinode:show-start", &[]).await.unwrap();
            channel.data(&line[..]).await.unwrap();
            channels.push(channel);
        }
        // Each line parsed once a later request is answered on a channel
        // sent after it (the agent reads a connection's messages in order).
        let (code, _, err) = ask(&conn, b"#multinode:ranks").await;
        assert_eq!(code, Some(0), "{err}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let during = rss_anon_kib(pid);
        eprintln!(
            "show-start x2 of 8 MiB of `{{}}`: agent RssAnon {start} -> {during} KiB (peak VmHWM {} \
             KiB) in {:?}",
            peak_rss_kib(pid),
            took.elapsed()
        );
        assert!(
            during < start + 64 * 1024,
            "the agent holds {during} KiB after two lines of empty ranks ({start} KiB at the start)"
        );
        // Such a line is not kept: `top` carries no run of it.
        let (code, out, err) = ask(&conn, b"#multinode:top").await;
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(json(&out)["runs"], serde_json::Value::Null);

        // Runs of the most ranks a run holds (65,536, hosts of 20 bytes):
        // two are kept, the third is past the agent's budget.
        let big = |n: usize| {
            let ranks: Vec<String> = (0..n)
                .map(|r| format!(r#"{{"rank":{r},"host":"gpu-node-{r:010}","spawn_ms":5}}"#))
                .collect();
            format!(r#"{{"started_ms":1,"ranks":[{}]}}"#, ranks.join(",")) + "\n"
        };
        let big = big(65_536);
        for _ in 0..3 {
            let channel = conn.exec(b"#multinode:show-start", &[]).await.unwrap();
            channel.data(big.as_bytes()).await.unwrap();
            channels.push(channel);
        }
        let (code, _, err) = ask(&conn, b"#multinode:ranks").await;
        assert_eq!(code, Some(0), "{err}");
        let mut kept = false;
        let until = Instant::now() + Duration::from_secs(20);
        while !kept && Instant::now() < until {
            let (_, out, _) = ask(&conn, b"#multinode:top").await;
            kept = json(&out)["runs"].as_array().map_or(0, Vec::len) == 2;
        }
        assert!(kept, "two runs of 65,536 ranks kept, the third refused");
        // Eight `top`s at once: each answer carries both runs, one copy held.
        let before = rss_anon_kib(pid);
        let took = Instant::now();
        let conn = std::sync::Arc::new(conn);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let conn = conn.clone();
            set.spawn(async move { ask(&conn, b"#multinode:top").await });
        }
        let answers = set.join_all().await;
        let size = answers.iter().map(|(_, out, _)| out.len()).max().unwrap();
        eprintln!(
            "8 x top with two runs of 65,536 ranks shown: answers of {} KiB in {:?}; agent RssAnon \
             {before} KiB before, peak VmHWM {} KiB",
            size / 1024,
            took.elapsed(),
            peak_rss_kib(pid)
        );
        for (code, out, err) in &answers {
            assert_eq!(*code, Some(0), "{err}");
            assert_eq!(json(out)["runs"][1]["ranks"].as_array().unwrap().len(), 65_536);
        }
        assert!(size < 16 << 20, "{size}");
        drop(channels);
        conn.close().await;
    });
    mn_ssh_true(&agent);
}

/// The inode of this process's PID namespace, as show-group names it.
fn pid_ns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").unwrap().ino()
}

#[test]
fn show_group_never_writes_a_commands_record_nor_shows_a_made_up_group() {
    let agent = Agent::start(&fresh_loopback());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = connect_as_job(&agent).await;
        let tag = sleep_tag();
        let env = [("RANK".to_string(), "1".to_string())];
        let script = format!("echo step 5; exec sleep {tag}");
        let command = conn.exec(script.as_bytes(), &env).await.unwrap();
        assert!(eventually(Duration::from_secs(10), || !sleepers(&tag).is_empty()));
        let (_, out, _) = ask(&conn, b"#multinode:ranks").await;
        let pgid = json(&out)["commands"][0]["pgid"].as_i64().unwrap();
        // Issue 51's forged step, over rank 1's own group.
        let request = format!("#multinode:show-group {pgid} {}", pid_ns());
        let mut shown = conn.exec(request.as_bytes(), &[]).await.unwrap();
        shown
            .data(&br#"{"last_output_ms":1,"out":"step 999999999\n"}"#[..])
            .await
            .unwrap();
        shown.data(&b"\n"[..]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (code, out, err) = ask(&conn, b"#multinode:top tail").await;
        assert_eq!(code, Some(0), "{err}");
        let tail = json(&out)["commands"][0]["tail"].to_string();
        assert!(tail.contains("step 5") && !tail.contains("999999999"), "{tail}");
        let _ = shown.eof().await;
        let (mut code, mut err) = (None, Vec::new());
        while let Some(msg) = shown.wait().await {
            match msg {
                russh::ChannelMsg::ExtendedData { data, .. } => err.extend_from_slice(&data),
                russh::ChannelMsg::ExitStatus { exit_status } => code = Some(exit_status),
                _ => {}
            }
        }
        assert_eq!(code, Some(1));
        assert_eq!(
            String::from_utf8_lossy(&err),
            format!(
                "multinode agent: process group {pgid} is already shown or run by this agent: not shown\n"
            )
        );
        // A made-up group (issue 51: 30,000 of them, a record each in every
        // `top`): refused at once.
        let free = (400_000..4_000_000)
            .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
            .unwrap();
        let request = format!("#multinode:show-group {free} {}", pid_ns());
        let (code, _, err) = ask(&conn, request.as_bytes()).await;
        assert_eq!(code, Some(1), "{err}");
        assert_eq!(
            err,
            format!(
                "multinode agent: process group {free} is not a live process group of this \
                 agent's user: not shown\n"
            )
        );
        let (_, out, _) = ask(&conn, b"#multinode:top").await;
        assert_eq!(json(&out)["commands"].as_array().unwrap().len(), 1);
        drop(command);
        conn.close().await;
    });
}

#[test]
fn session_channels_are_bounded_and_their_memory_given_back() {
    let agent = Agent::start(&fresh_loopback());
    let pid = agent.pid();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let start = rss_anon_kib(pid);
    rt.block_on(async {
        let conn = connect_as_job(&agent).await;
        let took = Instant::now();
        let mut channels = Vec::new();
        let mut refused = None;
        // Issue 51 opened 10,000 on one connection: +88 MB, 92 MB kept.
        for _ in 0..10_000 {
            match conn.open_session().await {
                Ok(channel) => channels.push(channel),
                Err(e) => {
                    refused = Some(e.to_string());
                    break;
                }
            }
        }
        let during = rss_anon_kib(pid);
        eprintln!(
            "open_session x10,000 on one connection: {} opened, then {refused:?}, in {:?}; agent \
             RssAnon {start} -> {during} KiB",
            channels.len(),
            took.elapsed()
        );
        assert_eq!(channels.len(), 4160, "{refused:?}");
        // The connection still serves (its requests need a channel: one given back).
        let _ = channels.pop().unwrap().close().await;
        let mut pinged = None;
        for _ in 0..50 {
            if let Ok(channel) = conn.exec(b"#multinode:ping", &[]).await {
                pinged = Some(channel);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut pinged = pinged.expect("a channel again once one closed");
        let mut out = Vec::new();
        while let Some(msg) = pinged.wait().await {
            if let russh::ChannelMsg::Data { data } = msg {
                out.extend_from_slice(&data);
            }
        }
        assert!(json(&out)["pid"].as_u64().is_some());
        drop(channels);
        conn.close().await;
    });
    let back = eventually(Duration::from_secs(20), || {
        rss_anon_kib(pid) < start + 8 * 1024
    });
    eprintln!(
        "agent RssAnon {} KiB after the client left ({start} KiB at the start)",
        rss_anon_kib(pid)
    );
    assert!(back, "the agent kept its channels' memory");
    mn_ssh_true(&agent);
}

/// A fake `py-spy` that notes its start and end: how many ran at once.
fn counting_py_spy(dir: &std::path::Path) -> std::path::PathBuf {
    let log = dir.join("py-spy.log");
    let script = format!(
        "#!/bin/sh\necho + >> {0}\nsleep 0.3\necho - >> {0}\n",
        log.display()
    );
    let path = dir.join("py-spy");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    log
}

/// The most `+` lines ahead of `-` lines in the log.
fn most_at_once(log: &std::path::Path) -> (usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (mut now, mut most, mut all) = (0i64, 0i64, 0);
    for line in text.lines() {
        if line == "+" {
            now += 1;
            all += 1;
        } else {
            now -= 1;
        }
        most = most.max(now);
    }
    (most as usize, all)
}

#[test]
fn py_spy_and_snapshots_are_bounded_for_the_whole_agent() {
    let dir = tempfile::tempdir().unwrap();
    let log = counting_py_spy(dir.path());
    // Processes whose name is `python3` (a copy of sleep).
    let python = dir.path().join("python3");
    std::fs::copy("/bin/sleep", &python).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let agent = Agent::start_with(&fresh_loopback(), 29922, &[], &[("PATH", &path)]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = std::sync::Arc::new(connect_as_job(&agent).await);
        let tag = sleep_tag();
        let script = format!(
            "for i in $(seq 40); do {} {tag} & done; wait",
            python.display()
        );
        let command = conn.exec(script.as_bytes(), &[]).await.unwrap();
        // The 40, and the shell that started them.
        assert!(eventually(Duration::from_secs(10), || pids_matching(&tag)
            .len()
            == 41));
        // Issue 51: 100 `top`s at once ran 41 py-spy at once (16 a snapshot).
        let took = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let conn = conn.clone();
            set.spawn(async move { ask(&conn, b"#multinode:top").await });
        }
        for (code, _, err) in set.join_all().await {
            assert_eq!(code, Some(0), "{err}");
        }
        let (most, all) = most_at_once(&log);
        eprintln!(
            "8 x top at once over 40 Python processes: {all} py-spy runs, at most {most} at once, \
             in {:?}",
            took.elapsed()
        );
        assert!(all >= 40, "{all}");
        assert!(most <= 16, "{most} py-spy at once");
        drop(command);
        conn.close().await;
    });
}

#[test]
fn a_snapshot_holds_4_kib_of_a_command_line_and_1024_processes() {
    let agent = Agent::start(&fresh_loopback());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = connect_as_job(&agent).await;
        let tag = sleep_tag();
        // 8 arguments of 100 KiB of \x01 each (issue 51: 50 MiB of them).
        let script = format!(
            "a=$(head -c 102400 /dev/zero | tr '\\0' '\\001'); sh -c 'sleep {tag}; :' x {} & \
             for i in $(seq 1100); do sleep {tag} & done; wait",
            ["\"$a\""; 8].join(" ")
        );
        let command = conn.exec(script.as_bytes(), &[]).await.unwrap();
        assert!(eventually(Duration::from_secs(30), || sleepers(&tag).len() >= 1101));
        let took = Instant::now();
        let (code, out, err) = ask(&conn, b"#multinode:snapshot").await;
        eprintln!(
            "snapshot of 1,103 processes, one with 800 KiB of argv: {} KiB in {:?}",
            out.len() / 1024,
            took.elapsed()
        );
        assert_eq!(code, Some(0), "{err}");
        let snap = json(&out);
        let processes = snap["processes"].as_array().unwrap();
        let long = processes
            .iter()
            .map(|p| p["cmdline"].as_str().unwrap())
            .find(|c| c.starts_with("sh -c sleep"))
            .expect("the long command line");
        assert!(long.len() <= 4096 + 32, "{}", long.len());
        assert!(long.ends_with(" …[cut at 4 KiB]"), "{long}");
        assert_eq!(processes.len(), 1024);
        assert!(
            snap["processes_left_out"].as_u64().unwrap() >= 79,
            "{}",
            snap["processes_left_out"]
        );
        drop(command);
        conn.close().await;
    });
}

/// One show-start line of `n` ranks whose hosts are 255 bytes of `\x01`
/// (1,530 bytes each as JSON): within every bound, and as large as an
/// answer that passes it on can get.
fn escaped_hosts_line(n: usize) -> Vec<u8> {
    let host = "\\u0001".repeat(255);
    let ranks: Vec<String> = (0..n)
        .map(|r| format!(r#"{{"rank":{r},"host":"{host}"}}"#))
        .collect();
    let line = format!(r#"{{"started_ms":1,"ranks":[{}]}}"#, ranks.join(",")) + "\n";
    assert!(line.len() <= 8 << 20, "{}", line.len());
    line.into_bytes()
}

#[test]
fn an_answer_past_64_mib_is_that_nodes_error_in_top() {
    let host = fresh_loopback();
    let agent = Agent::start(&host);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let conn = rt.block_on(connect_as_job(&agent));
    // 8 runs of 5,390 ranks (15.1 MB parsed, within the runs' budget) and
    // 16 processes with 4 KiB of `\x01` arguments: a `top` answer of
    // about 67.4 MB, past the 64 MiB a client reads.
    let tag = sleep_tag();
    let script = format!(
        "a=$(head -c 4096 /dev/zero | tr '\\0' '\\001'); for i in $(seq 16); do \
         sh -c 'sleep {tag}; :' x \"$a\" & done; wait"
    );
    let (command, channels) = rt.block_on(async {
        let command = conn.exec(script.as_bytes(), &[]).await.unwrap();
        let line = escaped_hosts_line(5_390);
        let mut channels = Vec::new();
        for _ in 0..8 {
            let channel = conn.exec(b"#multinode:show-start", &[]).await.unwrap();
            channel.data(&line[..]).await.unwrap();
            channels.push(channel);
        }
        (command, channels)
    });
    assert!(eventually(Duration::from_secs(20), || sleepers(&tag).len() == 16));
    let top = || {
        let took = Instant::now();
        let out = cmd(&multinode())
            .env(
                "MULTINODE_HOSTLIST",
                one_slot_each(std::slice::from_ref(&host)),
            )
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", agent.port.to_string())
            .args(["top", "--once", "--format", "json"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (out, took.elapsed())
    };
    // The runs are kept once parsed: until then the answer is small.
    let mut said = String::new();
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let (out, took) = top();
        said = stdout(&out);
        eprintln!(
            "top --once: {} bytes of stdout in {took:?}",
            out.stdout.len()
        );
        if said.contains("larger than") {
            break;
        }
    }
    assert!(
        said.contains(r#""error":"the agent's answer is larger than 64 MiB: not read""#),
        "{said}"
    );
    rt.block_on(async {
        drop(channels);
        drop(command);
        conn.close().await;
    });
}
