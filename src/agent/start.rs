//! `multinode agent [OPTIONS] [-- JOB...]`: its options checked, the state
//! every connection shares built, the server started, the head's
//! connections shared with the job, the lifecycle run, and the end: every
//! command's group ended and waited for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use super::sftp_bounds::SftpBounds;
use super::shared::Shared;
use super::{
    env_limit, forward, init, keeper, lifecycle, login, mux, mux_pool, pty, running, server, shards,
};
use crate::cli::AgentArgs;
use crate::env::hostlists;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::keys::{JobKeys, Secret};

fn listen_addr(args: &AgentArgs, env: &EnvMap) -> Result<SocketAddr, Error> {
    let Some(listen) = args.listen.as_deref() else {
        return Ok(SocketAddr::from((
            [0, 0, 0, 0],
            crate::env::agent_port(env)?,
        )));
    };
    if let Ok(port) = listen.parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    listen.parse::<SocketAddr>().map_err(|_| {
        Error::usage(format!(
            "--listen {listen:?} is not ADDR:PORT; use for example 0.0.0.0:{port}, \
             127.0.0.2:{port} or [::]:{port}",
            port = crate::defaults::AGENT_PORT
        ))
    })
}

/// `multinode agent [OPTIONS] [-- JOB...]`
pub fn main(args: AgentArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let secret = Secret::require(args.secret_file.as_deref(), &env, "multinode agent")?;
    let listen = listen_addr(&args, &env)?;
    if args.login_timeout.is_zero() {
        return Err(Error::usage(
            "--login-timeout 0 would close every connection before it logs in; give seconds > 0 (default 30)",
        ));
    }
    let secret_file = args
        .secret_file
        .as_deref()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
        .map(|p| p.to_string_lossy().into_owned());
    let (grace, idle_timeout, wait_timeout) = (args.grace, args.idle_timeout, args.wait_timeout);
    let mux_socket = args.mux_socket.clone();
    let lost_after = crate::transport::client::lost_after(&env)?;
    // The job's topology is only needed for the lifecycle; a plain agent
    // serves alone, but says at once that a topology it was given is broken
    // (its commands would find out later, one by one).
    let mut set_topology = None;
    let job = if args.job.is_empty() {
        set_topology = crate::topology::check_topology(&args.topology.inputs(), &env)?;
        None
    } else {
        // The head may be starting too: wait for its name as long as it waits for us.
        Some(crate::env::resolve_job_waiting(
            &args.topology.inputs(),
            &env,
            args.wait_timeout,
        )?)
    };

    // Forwarded ports reach the job's nodes, as far as this agent knows them.
    let destinations = {
        let topology = job.as_ref().map(|j| &j.topology).or(set_topology.as_ref());
        let hosts = topology.map(|t| t.nodes.as_slice()).unwrap_or_default();
        forward::Destinations::new(hosts.iter().map(|n| n.host.as_str()))
    };
    let bin = std::env::current_exe()
        .map_err(|e| Error::Failed(format!("cannot find this program's path: {e}")))?;
    // In a container the agent is often PID 1: keep a small init in front of it.
    init::become_init_if_pid1()?;
    // One descriptor per connection and three per running command.
    crate::process::raise_fd_limit();
    let limits = login::Limits::new(args.login_timeout);
    tracing::debug!(?limits, "login limits");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the async runtime: {e}")))?;
    // Connections run on threads of their own (the runtime above runs the
    // rest: the job, the shared connections); they stop after it.
    let shards = Arc::new(shards::Shards::per_cpu());
    let outcome = runtime.block_on(async move {
        let listener = TcpListener::bind(listen).await.map_err(|e| {
            Error::usage(format!(
                "cannot listen on {listen}: {e}; is another agent running there? \
                 choose another with --listen or MULTINODE_AGENT_PORT"
            ))
        })?;
        info!(%listen, "agent listening");
        let (keeper, keeper_child) = keeper::Keeper::start(&bin, grace)?;
        // Where the hostfiles of folded hostlists go: a directory of this
        // agent's own, which its keeper removes if it is killed.
        let hostfiles = hostlists::private_dir(&env);
        match &hostfiles {
            Ok(dir) => keeper.remove_on_death(dir),
            Err(e) => tracing::warn!(
                "cannot make a directory for the hostfiles of large jobs: {e}; commands that need one are told"
            ),
        }
        let shared = Arc::new(Shared {
            keys: JobKeys::derive(&secret),
            bin: bin.clone(),
            keeper,
            running: running::Running::default(),
            runs: Default::default(),
            gpus: Arc::new(crate::nvidia_smi::Watch::new(
                crate::nvidia_smi::PROGRAM,
                crate::nvidia_smi::TIMING,
            )),
            ras: Default::default(),
            gate: login::Gate::new(limits),
            grace,
            base_env: {
                let mut vars = job.as_ref().map(crate::env::contract).unwrap_or_default();
                // Commands (mn-ssh, exec_all in the job) find the secret the way the agent did.
                if let Some(path) = &secret_file {
                    vars.push((crate::vars::SECRET_FILE.into(), path.clone()));
                }
                vars
            },
            wire: hostlists::WireCache::new(hostfiles),
            shutdown: CancellationToken::new(),
            released: CancellationToken::new(),
            tracker: TaskTracker::new(),
            sftp: SftpBounds::new(),
            env: env_limit::AgentEnv::default(),
            ptys: pty::PtyBounds::new(),
            destinations,
            forwards: forward::ForwardBounds::new(),
            sessions: Default::default(),
            host: hostname::get()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            rank: job.as_ref().map(|j| j.rank),
            last_contact: std::sync::Mutex::new(None),
        });
        let configs = server::Configs::new(&shared);
        let server = tokio::spawn(server::serve(listener, shared.clone(), configs, shards.clone()));
        // The head of a job (or an agent asked to) shares its connections.
        let is_head = job.as_ref().is_some_and(|j| j.rank == 0);
        let socket = match &mux_socket {
            Some(path) => Some(mux::Socket::bind_path(path).map_err(|e| {
                Error::usage(format!(
                    "cannot listen on --mux-socket {}: {e}; choose a path in a directory you own",
                    path.display()
                ))
            })?),
            None if is_head => match mux::Socket::bind() {
                Ok(socket) => Some(socket),
                Err(e) => {
                    tracing::warn!(
                        "cannot share connections with the job (exec_all connects itself): {e}"
                    );
                    None
                }
            },
            None => None,
        };
        let stop_mux = CancellationToken::new();
        // A head killed outright leaves no socket behind: its keeper removes it.
        let socket_paths = socket.as_ref().map(mux::Socket::paths).unwrap_or_default();
        for path in &socket_paths {
            shared.keeper.remove_on_death(path);
        }
        let (pool, sharing) = match socket {
            Some(mut socket) => {
                let pool = Arc::new(mux_pool::ConnectionPool::new(&shared.keys, lost_after));
                let path = socket.path().to_path_buf();
                let task = tokio::spawn({
                    let (pool, tracker, stop) =
                        (pool.clone(), shared.tracker.clone(), stop_mux.clone());
                    async move {
                        mux::serve(&mut socket, pool, tracker, stop).await;
                        socket
                    }
                });
                (Some((pool, path)), Some(task))
            }
            None => (None, None),
        };
        let serving = async {
            match job {
                None => lifecycle::serve_until_stopped(&shared).await,
                Some(job) => {
                    let plan = lifecycle::JobRun {
                        job,
                        argv: args.job,
                        idle_timeout,
                        wait_timeout,
                        mux: pool.clone(),
                    };
                    lifecycle::run(&shared, plan).await
                }
            }
        };
        let result = tokio::select! {
            result = serving => result,
            // Without a keeper the no-orphan guarantee is gone: stop serving.
            error = shared.keeper.watch(keeper_child) => Err(error),
        };
        // No more shared channels; the kept connections close (their nodes
        // end what is left of those channels' commands), the socket goes.
        stop_mux.cancel();
        if let Some(task) = sharing {
            drop(task.await);
        }
        if let Some((pool, _)) = &pool {
            pool.close().await;
        }
        for path in &socket_paths {
            shared.keeper.forget_path(path);
        }
        // End every command (their groups get SIGTERM, grace, SIGKILL), then wait for them.
        shared.shutdown.cancel();
        let _ = server.await;
        shared.tracker.close();
        shared.tracker.wait().await;
        if let Some(dir) = shared.wire.dir() {
            keeper::remove_path(dir);
            shared.keeper.forget_path(dir);
        }
        result
    });
    // Reader threads (none expected) must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_millis(100));
    outcome
}
