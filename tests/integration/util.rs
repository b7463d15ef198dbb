//! Helpers shared by the integration tests: the binaries, agents on random
//! loopback addresses, waiting for conditions, process checks.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const SECRET: &str = "integration-test-secret-0123456789";

pub fn multinode() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_multinode"))
}

pub fn mn_ssh() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mn-ssh"))
}

pub fn mn_exec_all() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mn-exec-all"))
}

/// A loopback address no other test uses: 127.A.B.C from the pid and a counter.
pub fn fresh_loopback() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let a = 10 + (pid % 200);
    let b = ((pid / 200) * 8 + n / 250) % 250 + 1;
    format!("127.{a}.{b}.{}", 2 + n % 250)
}

/// `MULTINODE_HOSTLIST` of `hosts`, one slot each: `h1:1,h2:1`.
pub fn one_slot_each(hosts: &[String]) -> String {
    hosts
        .iter()
        .map(|h| format!("{h}:1"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `n` consecutive fresh loopback addresses.
pub fn fresh_loopbacks(n: usize) -> Vec<String> {
    (0..n).map(|_| fresh_loopback()).collect()
}

/// A command for one of our binaries with a clean, known environment.
pub fn cmd(program: &Path) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
        )
        .env(
            "USER",
            std::env::var_os("USER").unwrap_or_else(|| "root".into()),
        )
        .env("MULTINODE_SECRET", SECRET)
        .env("MULTINODE_AGENT_PORT", "29922");
    c
}

/// A running `multinode agent`; killed (SIGKILL) and reaped on drop.
pub struct Agent {
    pub child: Child,
    pub host: String,
    pub port: u16,
}

impl Agent {
    pub fn start(host: &str) -> Agent {
        Agent::start_with(host, 29922, &[], &[])
    }

    pub fn start_with(host: &str, port: u16, args: &[&str], env: &[(&str, &str)]) -> Agent {
        let mut c = cmd(&multinode());
        c.arg("agent")
            .arg("--listen")
            .arg(format!("{host}:{port}"))
            .args(args)
            .env("MULTINODE_AGENT_PORT", port.to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = c.spawn().expect("start the agent");
        let agent = Agent {
            child,
            host: host.to_string(),
            port,
        };
        wait_for_port(&agent.addr(), Duration::from_secs(10));
        agent
    }

    pub fn addr(&self) -> SocketAddr {
        format!("{}:{}", self.host, self.port).parse().unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Agent {
    /// SIGTERM, so the agent ends its commands' groups, then SIGKILL if it lingers.
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let ended = eventually(Duration::from_secs(10), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if !ended {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Node 0 is this machine (run locally by exec_all); nodes 1.. are agents.
pub struct Cluster {
    pub hosts: Vec<String>,
    pub agents: Vec<Agent>,
    pub port: u16,
}

impl Cluster {
    pub fn start(n: usize) -> Cluster {
        Cluster::start_on_port(n, 29922)
    }

    pub fn start_on_port(n: usize, port: u16) -> Cluster {
        let hosts = fresh_loopbacks(n);
        let agents = hosts[1..]
            .iter()
            .map(|h| Agent::start_with(h, port, &[], &[("AGENT_ID", h)]))
            .collect();
        Cluster {
            hosts,
            agents,
            port,
        }
    }

    pub fn hostlist(&self, slots: u32) -> String {
        self.hosts
            .iter()
            .map(|h| format!("{h}:{slots}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `mn-exec-all` (or any program) with the job's environment.
    pub fn command(&self, program: &Path) -> Command {
        let mut c = cmd(program);
        c.env("MULTINODE_HOSTLIST", self.hostlist(2))
            .env("MULTINODE_NODE_RANK", "0")
            .env("MULTINODE_AGENT_PORT", self.port.to_string());
        c
    }

    pub fn exec_all(&self, args: &[&str]) -> Output {
        self.command(&mn_exec_all())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

pub fn wait_for_port(addr: &SocketAddr, limit: Duration) {
    let start = Instant::now();
    while TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_err() {
        assert!(
            start.elapsed() < limit,
            "nothing listens on {addr} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `cond` every 50 ms until it holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `sig` to process `pid`, which must exist.
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

/// The number that follows `label` in `text` (up to the next whitespace).
pub fn number_after<T: std::str::FromStr>(text: &str, label: &str) -> Option<T> {
    text.split(label)
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Pids of processes whose command line contains `needle`.
pub fn pids_matching(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) && alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// A `sleep` duration no other process uses, to find this test's sleepers
/// by their command line (`sleep 100000.PIDN`): `exec -a` is not in dash.
pub fn sleep_tag() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "100000.{}{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed) + 10
    )
}

/// Pids of the `sleep TAG` processes (see [`sleep_tag`]).
pub fn sleepers(tag: &str) -> Vec<u32> {
    let exact = format!("sleep {tag}");
    pids_matching(&exact)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim_end() == exact)
                .unwrap_or(false)
        })
        .collect()
}

/// Peak resident memory of a process in KiB (VmHWM).
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `sh -c script` with the test environment plus `env`.
pub fn sh(script: &str, env: &[(&str, &str)]) -> Output {
    let mut c = cmd(Path::new("/bin/sh"));
    c.arg("-c").arg(script).envs(env.iter().copied());
    c.output().expect("run sh")
}

/// Waits up to `limit` for `child` to exit: its code (-1 for a signal), or
/// `None` after killing and reaping it when it did not.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<i32> {
    wait_within(child, limit).map(|status| status.code().unwrap_or(-1))
}

/// Waits up to `limit` for `child` to exit: its status, or `None` after
/// killing it (and the process group it leads, if it leads one) and
/// reaping it when it did not.
pub fn wait_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if start.elapsed() > limit {
            let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A log file's text so far (empty when it is not there yet).
pub fn log_text(log: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned()
}

/// `--report FILE` as JSON.
pub fn report(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The job's derived client key and a known_hosts file with the agents'
/// host key (`multinode keygen --known-hosts`), written into `dir`:
/// `(dir/id_job, dir/known_hosts)`, for OpenSSH's clients.
pub fn job_key_files(dir: &Path) -> (PathBuf, PathBuf) {
    let key = dir.join("id_job");
    let kh = cmd(&multinode())
        .args(["keygen", "--known-hosts", "-o"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(kh.status.success(), "{}", stderr(&kh));
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, &kh.stdout).unwrap();
    (key, known_hosts)
}

/// OpenSSH's `ssh` options that log into `agent` with the job's derived key
/// and check its host key ([`job_key_files`] in `dir`): `ssh OPTIONS HOST ...`.
pub fn openssh_options(agent: &Agent, dir: &Path) -> Vec<String> {
    let (key, known_hosts) = job_key_files(dir);
    [
        "-i",
        &key.display().to_string(),
        "-p",
        &agent.port.to_string(),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        &format!("UserKnownHostsFile={}", known_hosts.display()),
        "-o",
        "StrictHostKeyChecking=yes",
    ]
    .map(str::to_string)
    .to_vec()
}

/// A connection to `agent` as the job's own client (the keys derived from
/// [`SECRET`]), for tests that speak SSH to it themselves.
pub async fn connect_as_job(agent: &Agent) -> multinode::transport::client::Connection {
    use multinode::keys::{JobKeys, Secret};
    use multinode::transport::client::{Auth, Connector, Target};
    let secret = Secret::new(SECRET.as_bytes().to_vec(), "test").unwrap();
    let connector = Connector::new(
        Auth::Agent(std::sync::Arc::new(JobKeys::derive(&secret))),
        Duration::from_secs(10),
    );
    let target = Target {
        host: agent.host.clone(),
        port: agent.port,
        user: "u".into(),
    };
    connector.connect(&target).await.unwrap()
}

/// What is left of a child's piped stdout, read to its end (empty when it
/// was not piped).
pub fn stdout_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        std::io::Read::read_to_string(&mut out, &mut text).unwrap();
    }
    text
}

/// What is left of a child's piped stderr, read to its end (empty when it
/// was not piped).
pub fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut err) = child.stderr.take() {
        std::io::Read::read_to_string(&mut err, &mut text).unwrap();
    }
    text
}

/// A process's anonymous resident memory now (RssAnon), in KiB: what its
/// allocations hold; the pages of the program file it runs are not.
pub fn rss_anon_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    number_after(&status, "RssAnon:").expect("RssAnon in /proc/PID/status")
}

/// A process's open descriptors now (0 once it is gone).
pub fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `mn-ssh HOST true` to `agent`: how long it took, whether it succeeded,
/// and its stderr.
pub fn mn_ssh_true(agent: &Agent) -> (Duration, bool, String) {
    let start = Instant::now();
    let out = cmd(&mn_ssh())
        .args([&agent.host, "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (start.elapsed(), out.status.success(), stderr(&out))
}
