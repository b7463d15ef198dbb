//! `multinode demo [--nodes N] [-- CMD...]`: a real multi-node job on this
//! machine with no setup. Node 0 is this process's machine at 127.0.0.2;
//! nodes 1.. are `multinode agent`s started on 127.0.0.3, 127.0.0.4, ...
//! with a fresh job secret, and ended when the run is over (they are
//! supervised, so they end even if the demo is killed).

use std::ffi::OsString;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cli::DemoArgs;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::exec_all::script::Script;
use crate::exec_all::{RunOptions, finish_output, launch, on_runtime};
use crate::vars;

const DEFAULT_COMMAND: &str = "echo \"rank $RANK of $MULTINODE_NNODES: address $MULTINODE_LOCAL_IP, \
head $MULTINODE_NODE_IP, slots $MULTINODE_TOTAL_SLOTS in all\"";

pub fn main(args: DemoArgs) -> Result<i32, Error> {
    if !(1..=250).contains(&args.nodes) {
        return Err(Error::usage(format!(
            "--nodes {} is out of range: the demo uses 127.0.0.2 to 127.0.0.251 (1 to 250 nodes)",
            args.nodes
        )));
    }
    if args.slots == 0 {
        return Err(Error::usage("--slots must be at least 1"));
    }
    let hosts: Vec<String> = (0..args.nodes)
        .map(|i| format!("127.0.0.{}", i + 2))
        .collect();
    let secret = fresh_secret()?;
    let bin = std::env::current_exe()
        .map_err(|e| Error::Failed(format!("cannot find this program's path: {e}")))?;

    let mut env = EnvMap::from_process();
    let hostlist = hosts
        .iter()
        .map(|h| format!("{h}:{}", args.slots))
        .collect::<Vec<_>>()
        .join(",");
    for (k, v) in [
        (vars::HOSTLIST, hostlist),
        (vars::NODE_RANK, "0".to_string()),
        (vars::SECRET, secret.clone()),
        (vars::AGENT_PORT, args.port.to_string()),
    ] {
        env.0.insert(k.to_string(), v);
    }
    for k in [
        vars::HOSTLIST_NOSLOTS,
        vars::TOTAL_SLOTS,
        vars::NNODES,
        vars::HEAD,
        vars::NODE_IP,
        vars::LOCAL_IP,
        vars::SSH_WRAPPER,
        vars::RSH_WRAPPER,
        vars::TRANSPORT,
        "RANK",
    ] {
        env.0.remove(k);
    }
    // `cargo run -- demo` builds `multinode` alone: without `mn-ssh` beside
    // it, the job's MULTINODE_SSH_WRAPPER is a link to this binary (which
    // acts as mn-ssh by that name) in a folder of the demo's own.
    let _wrapper_dir = match crate::env::programs::ThisBinary::current().mn_ssh() {
        Ok(_) => None,
        Err(_) => {
            let dir = WrapperDir::create(&bin)?;
            env.0.insert(vars::SSH_WRAPPER.into(), dir.mn_ssh_string()?);
            Some(dir)
        }
    };
    let job = crate::env::resolve_job(&Default::default(), &env)?;

    ports_free(&hosts[1..], args.port)?;
    let mut agents = Agents::start(&bin, &hosts[1..], args.port, &secret)?;
    agents.wait_ready(Duration::from_secs(10))?;

    let command = if args.command.is_empty() {
        DEFAULT_COMMAND.as_bytes().to_vec()
    } else {
        join_words(&args.command)
    };
    let options = RunOptions {
        label: args.label,
        connect_timeout: Duration::from_secs(10),
        ..RunOptions::new(Script::Inline(command))
    };
    // The secret reaches the agents through their environment; mn-ssh in this
    // process's children finds it the same way.
    // SAFETY: single-threaded here: no runtime or other thread exists yet.
    unsafe {
        std::env::set_var(vars::SECRET, &secret);
        std::env::set_var(vars::AGENT_PORT, args.port.to_string());
    }
    let result = on_runtime(async |stops| launch(&job, &env, options, stops).await)?;
    drop(agents);
    finish_output(&result);
    Ok(result.exit_code)
}

/// The words of `-- CMD...` joined by spaces, as ssh does.
fn join_words(words: &[OsString]) -> Vec<u8> {
    words
        .iter()
        .map(|w| w.as_encoded_bytes())
        .collect::<Vec<_>>()
        .join(&b' ')
}

fn fresh_secret() -> Result<String, Error> {
    use std::io::Read;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::Failed(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A folder holding `mn-ssh`, a link to this binary; removed on drop.
struct WrapperDir {
    dir: std::path::PathBuf,
}

impl WrapperDir {
    fn create(bin: &Path) -> Result<Self, Error> {
        let dir = std::env::temp_dir().join(format!("multinode-demo-{}", std::process::id()));
        let shown = dir.display().to_string();
        let failed = |e: std::io::Error| {
            Error::Failed(format!(
                "mn-ssh is not beside {} and cannot be linked in {shown}: {e}; build it (cargo build --release)",
                bin.display(),
            ))
        };
        // A folder left by an earlier process of the same pid is stale.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).map_err(failed)?;
        let made = WrapperDir { dir };
        std::os::unix::fs::symlink(bin, made.dir.join("mn-ssh")).map_err(failed)?;
        Ok(made)
    }

    fn mn_ssh_string(&self) -> Result<String, Error> {
        let path = self.dir.join("mn-ssh");
        path.to_str().map(String::from).ok_or_else(|| {
            Error::Failed(format!(
                "the temporary folder's path is not UTF-8: {}",
                path.display()
            ))
        })
    }
}

impl Drop for WrapperDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every demo agent's address is free: another demo or agent there would
/// answer in place of ours (and with another key), so stop before starting.
fn ports_free(hosts: &[String], port: u16) -> Result<(), Error> {
    for host in hosts {
        let addr = format!("{host}:{port}");
        if let Err(e) = std::net::TcpListener::bind(&addr) {
            return Err(Error::usage(format!(
                "cannot listen on {addr} for the demo's agents: {e}; is another demo or agent running? choose another port with --port"
            )));
        }
    }
    Ok(())
}

/// The demo's agents, each under `multinode supervise`; ended on drop.
struct Agents {
    children: Vec<(std::process::Child, SocketAddr)>,
}

impl Agents {
    fn start(bin: &Path, hosts: &[String], port: u16, secret: &str) -> Result<Self, Error> {
        let mut children = Vec::new();
        for host in hosts {
            let addr: SocketAddr = format!("{host}:{port}")
                .parse()
                .expect("a loopback address and a port");
            let agent: Vec<OsString> = vec![
                bin.as_os_str().to_os_string(),
                "agent".into(),
                "--listen".into(),
                addr.to_string().into(),
            ];
            let mut cmd = crate::supervise::wrap(bin, Duration::from_secs(2), None, &agent);
            cmd.env(vars::SECRET, secret)
                .env(vars::AGENT_PORT, port.to_string())
                .env_remove(vars::HOSTLIST)
                .stdin(std::process::Stdio::null());
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
            let child = cmd
                .spawn()
                .map_err(|e| Error::Failed(format!("cannot start an agent: {e}")))?;
            children.push((child, addr));
        }
        Ok(Agents { children })
    }

    fn wait_ready(&mut self, limit: Duration) -> Result<(), Error> {
        let start = Instant::now();
        for (child, addr) in &mut self.children {
            while TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_err() {
                // An agent that could not start said why on stderr: stop
                // there rather than run with a node missing.
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(Error::usage(format!(
                        "the demo's agent on {addr} could not start ({status}); if its port is in use, choose another with --port"
                    )));
                }
                if start.elapsed() > limit {
                    return Err(Error::Failed(format!(
                        "the demo's agent on {addr} (pid {}) did not start within {:.0} s; is port {} free?",
                        child.id(),
                        limit.as_secs_f64(),
                        addr.port()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for (child, _) in &self.children {
            let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
            crate::process::signal_group(pgid, nix::sys::signal::Signal::SIGTERM);
        }
        for (child, _) in &mut self.children {
            let _ = child.wait();
        }
    }
}
