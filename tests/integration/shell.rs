//! `multinode shell` (issue 31): onto one node of a running job by rank or
//! host, with that node's job environment, a terminal when stdin is one
//! (driven by `script`'s pty), the remote status as the exit code, nothing
//! left when the client is killed, and one line for a node not in the job.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::terminal::Term;
use crate::util::*;

/// Three agents of one job on fresh loopback addresses.
struct Job {
    hosts: Vec<String>,
    port: u16,
    _agents: Vec<Agent>,
}

impl Job {
    fn start(port: u16) -> Job {
        let hosts = fresh_loopbacks(3);
        let agents = hosts
            .iter()
            .map(|h| Agent::start_with(h, port, &[], &[]))
            .collect();
        Job {
            hosts,
            port,
            _agents: agents,
        }
    }

    /// The job's environment on the head, as `multinode ps` reads it.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MULTINODE_HOSTLIST", one_slot_each(&self.hosts)),
            ("MULTINODE_NODE_RANK", "0".into()),
            ("MULTINODE_AGENT_PORT", self.port.to_string()),
        ]
    }

    fn shell(&self, args: &[&str]) -> Command {
        let mut c = cmd(&multinode());
        c.envs(self.env()).arg("shell").args(args);
        c
    }

    /// `multinode shell ARGS` as one line for `script`.
    fn shell_line(&self, args: &str) -> String {
        let vars: Vec<String> = self.env().iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "env {} MULTINODE_SECRET={SECRET} {} shell {args}",
            vars.join(" "),
            multinode().display()
        )
    }
}

fn run(mut c: Command) -> Output {
    c.stdin(Stdio::null()).output().unwrap()
}

#[test]
fn a_command_runs_on_the_named_node_with_its_job_environment() {
    let job = Job::start(29951);
    let dir = tempfile::tempdir().unwrap();
    let show = "echo $RANK $MULTINODE_NNODES $MULTINODE_LOCAL_IP $MULTINODE_NODE_IP $FROM_HEAD; pwd; tty; exit 7";
    let mut by_rank = job.shell(&["1", "--", show]);
    by_rank.env("FROM_HEAD", "x y").current_dir(dir.path());
    let out = run(by_rank);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "1 3 {} {} x y\n{}\nnot a tty\n",
            job.hosts[1],
            job.hosts[0],
            dir.path().display()
        ),
        "{}",
        stderr(&out)
    );
    // By host, by address (the same here), and rank 0 without either.
    let out = run(job.shell(&[&job.hosts[2], "--", "echo", "$RANK"]));
    assert_eq!((stdout(&out), out.status.code()), ("2\n".into(), Some(0)));
    let out = run(job.shell(&["--", "echo $RANK"]));
    assert_eq!((stdout(&out), out.status.code()), ("0\n".into(), Some(0)));
    // No command and no terminal: the shell reads its commands from stdin.
    let mut piped = job.shell(&["2"]);
    piped.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = piped.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo rank=$RANK; exit 4\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        (stdout(&out), out.status.code()),
        ("rank=2\n".into(), Some(4))
    );
}

#[test]
fn a_node_not_in_the_job_is_one_line_naming_the_valid_ranks() {
    let hosts = ["n1", "n2", "n3"].join(",");
    for (node, expected) in [
        (
            "3",
            "multinode: error: rank 3 is not in this job of 3 nodes: give a rank 0-2 or a host of the job (n[1-3])\n",
        ),
        (
            "gpu9",
            "multinode: error: no node \"gpu9\" in this job: give a rank 0-2 or a host of the job (n[1-3])\n",
        ),
    ] {
        let out = run({
            let mut c = cmd(&multinode());
            c.args(["shell", "--hosts", &hosts, "--node-rank", "0", node]);
            c
        });
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(stderr(&out), expected);
        assert_eq!(stdout(&out), "");
    }
}

#[test]
fn from_a_terminal_it_is_an_interactive_shell_with_a_pty() {
    let job = Job::start(29952);
    let dir = tempfile::tempdir().unwrap();
    let mut term = Term::start(&job.shell_line("1"), &dir.path().join("never"));
    term.send("echo r=$RANK; case $- in *i*) echo inter''active;; esac; tty; stty size\r");
    term.expect("r=1\r\n", 1);
    term.expect("interactive\r\n", 1);
    term.expect("30 100\r\n", 1);
    assert!(term.text().contains("\r\n/dev/pts/"), "{}", term.text());
    // A person's terminal claims no rank, though its shell has a RANK:
    // `top` and the next `shell --rank` see the process that does.
    let mut ps = cmd(&multinode());
    ps.envs(job.env()).args(["ps", "--format", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&run(ps).stdout).expect("ps json");
    let commands: Vec<&serde_json::Value> = doc["snapshots"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["commands"].as_array().into_iter().flatten())
        .collect();
    assert!(!commands.is_empty(), "{doc:#}");
    assert!(commands.iter().all(|c| c.get("rank").is_none()), "{doc:#}");
    term.send("exit 3\r");
    assert_eq!(
        term.child.wait().unwrap().code(),
        Some(3),
        "{}",
        term.text()
    );
    // A command from a terminal gets one too (`htop`, `nvidia-smi -l 1`), -T none.
    let mut term = Term::start(
        &job.shell_line("2 -- 'tty; exit 6'"),
        &dir.path().join("never"),
    );
    term.expect("/dev/pts/", 1);
    assert_eq!(
        term.child.wait().unwrap().code(),
        Some(6),
        "{}",
        term.text()
    );
    let mut term = Term::start(&job.shell_line("-T 2 -- tty"), &dir.path().join("never"));
    term.expect("not a tty", 1);
    assert_eq!(
        term.child.wait().unwrap().code(),
        Some(1),
        "{}",
        term.text()
    );
}

#[test]
fn a_killed_shell_client_leaves_nothing_on_the_node() {
    let job = Job::start(29953);
    let dir = tempfile::tempdir().unwrap();
    let line = job.shell_line("--connect-timeout 11 1");
    let mut term = Term::start(&line, &dir.path().join("never"));
    let tag = sleep_tag();
    term.send(&format!("sleep {tag} & sleep {tag}\r"));
    assert!(eventually(Duration::from_secs(10), || sleepers(&tag).len() == 2));
    let clients: Vec<u32> = pids_matching("shell --connect-timeout 11 1")
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe.file_name() == Path::new(&multinode()).file_name())
        })
        .collect();
    assert_eq!(clients.len(), 1, "{clients:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(clients[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(15), || sleepers(&tag).is_empty()),
        "left {:?}",
        sleepers(&tag)
    );
    let _ = term.child.kill();
    let _ = term.child.wait();
}

/// docs/diagnose.md's hang walk-through, every `$ ` line as written, in one
/// bash, in namespaces of its own (network: the page's addresses and port
/// meet no other test; PID: `ps -C tail` sees this walk's only). Its output
/// and stderr are the page's, but for the times and for the words of
/// `multinode ps`'s headline after the rank, which are the kernel's wait
/// channels.
#[test]
fn the_hang_walk_through_of_diagnose_md_runs_as_written() {
    use std::os::unix::process::CommandExt;
    let (script, want) = crate::docs::console(&crate::docs::doc_block(
        "docs/diagnose.md",
        "diagnose-hang-walk",
    ));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("page.sh"), &script).unwrap();
    let path = format!(
        "{}:{}",
        multinode().parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let child = Command::new("unshare")
        .args(["-rnpf", "--mount-proc", "sh", "-c"])
        .arg("exec 2>&1; ip link set lo up && exec timeout 120 bash page.sh")
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", path)
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("unshare (util-linux), ip (iproute2)");
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let out = child.wait_with_output().unwrap();
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let text = stdout(&out);
    assert!(out.status.success(), "{}: {text}", out.status);
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got.len(), want.len(), "{text}");
    let headline = |l: &str| {
        let (rank, rest) = l.split_once(": ").unwrap_or((l, ""));
        let others = rest.split_once("; the others, ").map(|(_, o)| o);
        (
            rank.to_string(),
            rest.split(' ').next().map(String::from),
            others
                .and_then(|o| o.split(' ').take(3).last())
                .map(String::from),
        )
    };
    assert_eq!(headline(got[0]), headline(&want[0]), "{text}");
    let words = |lines: &[String]| -> Vec<Vec<String>> {
        lines
            .iter()
            .map(|l| crate::docs::words_but_times(l))
            .collect()
    };
    let got: Vec<String> = got.iter().map(|l| l.to_string()).collect();
    assert_eq!(words(&got[1..]), words(&want[1..]), "{text}");
}

/// With several processes a node (`mn-exec-all --nproc-per-node 2`, run
/// outside any agent as a job script runs it), `--rank R` opens on the node
/// of the process with `RANK=R`, found by asking every agent, the shell's
/// `RANK` and `LOCAL_RANK` the process's; a rank that no node runs is one
/// line and exit code 2.
#[test]
fn by_a_process_rank_it_lands_on_that_processs_node() {
    let job = Job::start(29954);
    let tag = sleep_tag();
    let mut exec_all = cmd(&mn_exec_all())
        .envs(job.env())
        .args(["--nproc-per-node", "2", "--bind", "none", "-c"])
        .arg(format!("exec sleep {tag}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || sleepers(&tag).len() == 6),
        "{:?}",
        sleepers(&tag)
    );
    // Node 0's processes are exec_all's own, shown to its agent: found
    // once exec_all showed them, as `multinode ps` sees them.
    let ps = || {
        let mut c = cmd(&multinode());
        c.envs(job.env()).args(["ps", "--format", "json"]);
        serde_json::from_slice::<serde_json::Value>(&run(c).stdout).unwrap_or_default()
    };
    let labelled = |doc: &serde_json::Value| -> usize {
        doc["snapshots"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["commands"].as_array().cloned().unwrap_or_default())
            .filter(|c| c["local_rank"].is_u64())
            .count()
    };
    assert!(
        eventually(Duration::from_secs(20), || labelled(&ps()) == 6),
        "{:#}",
        ps()
    );
    let show = "echo $MULTINODE_LOCAL_IP $MULTINODE_NODE_RANK $RANK $LOCAL_RANK";
    for (rank, node) in [(0, 0), (1, 0), (3, 1), (4, 2), (5, 2)] {
        let r = rank.to_string();
        let out = run(job.shell(&["--rank", &r, "--", show]));
        assert_eq!(
            (stdout(&out), out.status.code()),
            (
                format!("{} {node} {rank} {}\n", job.hosts[node], rank % 2),
                Some(0)
            ),
            "rank {rank}: {}",
            stderr(&out)
        );
    }
    let out = run(job.shell(&["--rank", "9", "--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "multinode: error: no process of the job runs with RANK=9 on the 3 nodes that answered; `multinode ps` lists the ranks that run\n"
    );
    // A second process that claims rank 3 (a command started with its
    // RANK, left running): neither is guessed, and `ps` says so.
    let other = sleep_tag();
    let mut second = job
        .shell(&["--rank", "3", "--", &format!("exec sleep {other}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || sleepers(&other)
        .len()
        == 1));
    let out = run(job.shell(&["--rank", "3", "--", "true"]));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "multinode: error: rank 3 is claimed by 2 processes: node 1 ({}, group ",
            job.hosts[1]
        )),
        "{err}"
    );
    let mut ps = cmd(&multinode());
    ps.envs(job.env()).arg("ps");
    let table = stdout(&run(ps));
    assert!(
        table.contains("rank 3 is claimed by 2 processes: node 1 ("),
        "{table}"
    );
    let _ = second.kill();
    let _ = second.wait();
    assert!(eventually(Duration::from_secs(20), || sleepers(&other).is_empty()));
    // A node and a rank at once: one line, exit 2 (clap's).
    let out = run(job.shell(&["--rank", "1", "2"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(exec_all.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    assert!(wait_exit(&mut exec_all, Duration::from_secs(20)).is_some());
}
