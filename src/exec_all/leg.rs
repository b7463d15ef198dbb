//! Legs: how a node's command is started and how its messages (stdout,
//! stderr, exit info, exit) come back. How the other nodes are reached is
//! decided once a run from the route ([`Reach::decide`]); a node's leg is
//! then one of four ([`LegKind`]): this node (a process here), an external
//! wrapper (`WRAPPER HOST COMMAND`, a process here), an agent or a stock
//! sshd (a russh channel in-process, on a connection of our own or on the
//! head agent's shared one). A started leg is a channel ([`ChannelLeg`]) or
//! a process ([`super::process_leg::ProcessLeg`]); `node` runs one loop over
//! either. A relay's leg takes the relay's record out of its stderr.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use russh::ChannelMsg;
use tokio::sync::{Semaphore, mpsc};
use tracing::debug;

use super::event::Order;
use super::options::RunOptions;
use super::plan::{LegKind, NodeSpec};
use super::process_leg::ProcessLeg;
use super::record::NodeOutcome;
use super::script::Script;
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::process::Outcome;
use crate::protocol::CWD_VAR;
use crate::protocol::exit_info::{self, ExitInfo};
use crate::protocol::relay_record::{RecordTap, RelayRecord};
use crate::protocol::signals::{exit_outcome, signal_to_sig};
use crate::transport::channel::{ChannelRx, ChannelTx, send_input};
use crate::transport::choice::{ClientSpec, Requested, Route, TransportKind};
use crate::transport::client::{Connection, Connector, Target};
use crate::transport::mux::{MuxClient, MuxError};

/// How the other nodes are reached, decided once a run.
#[expect(clippy::large_enum_variant, reason = "one a run, never moved")]
pub(crate) enum Reach {
    /// `WRAPPER HOST COMMAND`, one process here per node.
    Wrapper(String),
    /// In-process russh sessions to the nodes' agents (the job secret);
    /// inside `multinode agent -- JOB`, on the head agent's connections.
    Agent {
        connector: Connector,
        port: u16,
        user: String,
        mux: Option<MuxClient>,
    },
    /// In-process russh sessions to a stock sshd (the user's keys).
    Sshd {
        connector: Connector,
        port: u16,
        user: String,
    },
}

impl Reach {
    /// exec_all talks SSH itself when the job's wrapper is this program's
    /// own `mn-ssh` or agents are asked for; else it runs the wrapper.
    pub fn decide(job: &Job, env: &EnvMap, connect_timeout: Duration) -> Result<Reach, Error> {
        // An invalid MULTINODE_TRANSPORT only matters when exec_all talks SSH itself.
        let asked_agent = matches!(
            Requested::from_env(env),
            Ok(Requested::Exactly(TransportKind::Agent))
        );
        if !is_own_wrapper(&job.wrapper) && !asked_agent {
            return Ok(Reach::Wrapper(job.wrapper.clone()));
        }
        let spec = ClientSpec {
            connect_timeout: Some(connect_timeout),
            ..ClientSpec::default()
        };
        let route = Route::from_env(&spec, env)?;
        Ok(match route.kind {
            TransportKind::Agent => Reach::Agent {
                connector: route.connector,
                port: job.agent_port,
                user: route.user,
                mux: route.mux,
            },
            TransportKind::OpenSsh => Reach::Sshd {
                connector: route.connector,
                port: match env.get("MULTINODE_SSH_PORT") {
                    None => route.port,
                    Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                        Error::usage(format!(
                            "MULTINODE_SSH_PORT={p:?} is not a port number; set it to 1..65535 or unset it for 22"
                        ))
                    })?,
                },
                user: route.user,
            },
        })
    }

    /// The leg of every node but this one.
    pub fn kind(&self) -> LegKind {
        match self {
            Reach::Wrapper(_) => LegKind::Wrapper,
            Reach::Agent { .. } => LegKind::Agent,
            Reach::Sshd { .. } => LegKind::Sshd,
        }
    }

    /// The connector to the nodes' agents, when they are reached through them.
    pub fn agent_connector(&self) -> Option<&Connector> {
        match self {
            Reach::Agent { connector, .. } => Some(connector),
            _ => None,
        }
    }

    /// The port a node is reached on (0: through a wrapper).
    pub fn port(&self) -> u16 {
        match self {
            Reach::Wrapper(_) => 0,
            Reach::Agent { port, .. } | Reach::Sshd { port, .. } => *port,
        }
    }
}

/// Whether `wrapper` is this program's own `mn-ssh` (then exec_all talks
/// SSH in-process instead of running it once per node).
fn is_own_wrapper(wrapper: &str) -> bool {
    let Ok(exe) = std::env::current_exe() else {
        return false;
    };
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    let wrapper = canon(std::path::Path::new(wrapper));
    wrapper.is_some()
        && (wrapper == canon(&exe)
            || exe
                .parent()
                .is_some_and(|dir| wrapper == canon(&dir.join("mn-ssh"))))
}

/// What every node task shares.
pub(crate) struct RunCtx {
    pub reach: Reach,
    pub script: Script,
    pub args: Vec<OsString>,
    /// The head's working directory, for every node.
    pub cwd: String,
    pub grace: Duration,
    /// The `multinode` binary, for `multinode supervise`.
    pub bin: PathBuf,
    /// Bounds the connections being set up at once.
    pub connect_slots: Semaphore,
    /// This machine's agent of the job, which the node run here is shown to
    /// (`snapshot::survey::show_in_agent`): only when exec_all reaches
    /// agents itself and no agent runs it already.
    pub local_agent: Option<Target>,
}

impl RunCtx {
    /// `runs_here`: this node is one of the run's.
    pub fn new(reach: Reach, job: &Job, options: &RunOptions, runs_here: bool) -> Self {
        // Inside `multinode agent -- JOB` (the mux), the head's agent runs this
        // exec_all and so shows its node already.
        let local_agent = match &reach {
            Reach::Agent {
                mux: None,
                user,
                port,
                ..
            } if runs_here && options.show_local_to_agent => Some(Target {
                host: job.topology.nodes[job.rank].host.clone(),
                port: *port,
                user: user.clone(),
            }),
            _ => None,
        };
        RunCtx {
            reach,
            script: options.script.clone(),
            args: options.args.clone(),
            cwd: std::env::current_dir()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "/".into()),
            grace: options.grace,
            bin: PathBuf::from(&job.bin),
            connect_slots: Semaphore::new(options.max_connecting),
            local_agent,
        }
    }
}

/// What a leg yields.
#[derive(Debug)]
pub enum LegMsg {
    Out(Bytes),
    Err(Bytes),
    /// What the node saw of the command's end (OOM kills, a core).
    ExitInfo(ExitInfo),
    Exit(Outcome),
    /// A relay's record of its group, taken out of its stderr.
    Relayed(RelayRecord),
}

/// A started leg.
pub struct Leg {
    started: Started,
    /// A relay's: its record is taken out of its stderr.
    tap: Option<RecordTap>,
    /// A message that came with the one just yielded.
    queued: Option<LegMsg>,
    done: bool,
}

enum Started {
    Channel(ChannelLeg),
    Process(ProcessLeg),
}

/// How a leg ended, beyond its messages.
pub struct Closed {
    /// How its command ended, when only closing could tell (a process killed
    /// when abandoned).
    pub status: Option<Outcome>,
    pub exit_info: Option<ExitInfo>,
    /// Why there is no exit status, if there is none.
    pub lost: &'static str,
}

impl Leg {
    /// Starts `spec`'s command. `orders` stop it before it started (the run
    /// is ending); then the node did not start.
    pub async fn start(
        ctx: &RunCtx,
        spec: &mut NodeSpec,
        orders: &mut mpsc::UnboundedReceiver<Order>,
        stdin: Option<mpsc::Receiver<Bytes>>,
    ) -> Result<Leg, NodeOutcome> {
        let started = match spec.leg {
            LegKind::Local | LegKind::Wrapper => {
                Started::Process(ProcessLeg::start(ctx, spec, stdin)?)
            }
            LegKind::Agent | LegKind::Sshd => {
                Started::Channel(ChannelLeg::start(ctx, spec, orders, stdin).await?)
            }
        };
        Ok(Leg {
            started,
            tap: spec.relay.is_some().then(RecordTap::default),
            queued: None,
            done: false,
        })
    }

    /// The node's address as it was reached (`None`: a process here).
    pub fn address(&self) -> Option<String> {
        match &self.started {
            Started::Channel(leg) => Some(leg.peer.to_string()),
            Started::Process(_) => None,
        }
    }

    /// The next message; `None` once the command is over.
    pub async fn next(&mut self) -> Option<LegMsg> {
        if let Some(msg) = self.queued.take() {
            return Some(msg);
        }
        while !self.done {
            let msg = match &mut self.started {
                Started::Channel(leg) => leg.next().await,
                Started::Process(leg) => leg.next().await,
            };
            let Some(tap) = &mut self.tap else {
                self.done = msg.is_none();
                return msg;
            };
            let pass = match msg {
                Some(LegMsg::Err(data)) => tap.feed(&data),
                None => {
                    self.done = true;
                    tap.finish()
                }
                other => return other,
            };
            self.queued = tap.take().map(LegMsg::Relayed);
            if !pass.is_empty() {
                return Some(LegMsg::Err(Bytes::from(pass)));
            }
            if let Some(msg) = self.queued.take() {
                return Some(msg);
            }
        }
        None
    }

    /// Passes `signo` on to the command's group.
    pub async fn signal(&self, signo: i32) {
        match &self.started {
            // Boxed: a seldom awaited future, not part of the state the
            // task holds for the run.
            Started::Channel(leg) => {
                let _ = Box::pin(leg.tx.signal(signal_to_sig(signo))).await;
            }
            Started::Process(leg) => leg.signal(signo),
        }
    }

    /// Ends the leg: closing a connection (or a shared one's channel) makes
    /// the agent end whatever is left of the group; a process here is
    /// killed when `abandoned`, and its group ended.
    pub async fn close(self, abandoned: bool) -> Closed {
        match self.started {
            Started::Channel(leg) => Box::pin(leg.close(abandoned)).await,
            Started::Process(leg) => Box::pin(leg.close(abandoned)).await,
        }
    }
}

/// A command on a node reached over SSH: its channel, and the connection
/// of our own it runs on (`None`: the head agent's shared one).
pub struct ChannelLeg {
    peer: SocketAddr,
    rx: ChannelRx,
    tx: Arc<ChannelTx>,
    conn: Option<Connection>,
    stdin: tokio::task::JoinHandle<()>,
    /// The agent's report of the command's end (see `exit_info`), as it comes.
    info: Vec<u8>,
    /// The exit status, held while the exit info goes first.
    exit: Option<Outcome>,
}

impl ChannelLeg {
    async fn start(
        ctx: &RunCtx,
        spec: &mut NodeSpec,
        orders: &mut mpsc::UnboundedReceiver<Order>,
        stdin: Option<mpsc::Receiver<Bytes>>,
    ) -> Result<ChannelLeg, NodeOutcome> {
        let (connector, port, user, mux) = match &ctx.reach {
            Reach::Agent {
                connector,
                port,
                user,
                mux,
            } => (connector, *port, user, mux.as_ref()),
            Reach::Sshd {
                connector,
                port,
                user,
            } => (connector, *port, user, None),
            Reach::Wrapper(_) => unreachable!("a wrapper's nodes are processes here"),
        };
        let target = Target {
            host: spec.host.clone(),
            port,
            user: user.clone(),
        };
        // The node's variables leave the spec: sent once, not held for the run.
        let node_env = std::mem::take(&mut spec.env);
        // Inside `multinode agent -- JOB`: through the head agent's connection.
        if let Some(mux) = mux {
            let vars = agent_vars(ctx, node_env.clone());
            let command = spec.command.to_vec();
            let shared = tokio::select! {
                shared = mux.exec(&target, |peer| (command, with_address(vars, peer))) => shared,
                order = orders.recv() => {
                    debug!(rank = spec.rank, ?order, "stopped before connecting");
                    return Err(NodeOutcome::NotStarted);
                }
            };
            match shared {
                Ok(Some(s)) => return Ok(ChannelLeg::new(ctx, s.peer, s.rx, s.tx, None, stdin)),
                Ok(None) => {}
                Err(MuxError::Unreachable(e)) => return Err(NodeOutcome::Unreachable(e)),
                Err(MuxError::Failed(e)) => {
                    return Err(NodeOutcome::Lost(format!("cannot start the script: {e}")));
                }
            }
        }
        let connected = {
            let _slot = tokio::select! {
                slot = ctx.connect_slots.acquire() => slot.expect("the semaphore is never closed"),
                order = orders.recv() => {
                    debug!(rank = spec.rank, ?order, "stopped before connecting");
                    return Err(NodeOutcome::NotStarted);
                }
            };
            tokio::select! {
                // Boxed: the handshake's state (~3 KB) is freed once connected.
                conn = Box::pin(connector.connect(&target)) => conn,
                order = orders.recv() => {
                    debug!(rank = spec.rank, ?order, "stopped while connecting");
                    return Err(NodeOutcome::NotStarted);
                }
            }
        };
        let conn = connected.map_err(|e| NodeOutcome::Unreachable(e.to_string()))?;
        let peer = conn.peer();
        // An agent takes the variables and the directory as `env` requests; a
        // stock sshd drops those (AcceptEnv), so they go in the command line.
        let vars = match spec.leg {
            LegKind::Agent => with_address(agent_vars(ctx, node_env), peer),
            _ => with_address(node_env, peer),
        };
        let channel = match spec.leg {
            LegKind::Agent => Box::pin(conn.exec(&spec.command, &vars)).await,
            _ => {
                let command =
                    super::script::wrapped_command(&spec.command, ctx.cwd.as_bytes(), &vars);
                Box::pin(conn.exec(&command, &[])).await
            }
        };
        // Sent: not held for the command's whole run (a node's variables can
        // be tens of KB, times every node).
        drop(vars);
        let channel =
            channel.map_err(|e| NodeOutcome::Lost(format!("cannot start the script: {e}")))?;
        let (rx, tx) = channel.split();
        Ok(ChannelLeg::new(
            ctx,
            peer,
            ChannelRx::Ssh(rx),
            ChannelTx::Ssh(tx),
            Some(conn),
            stdin,
        ))
    }

    fn new(
        ctx: &RunCtx,
        peer: SocketAddr,
        rx: ChannelRx,
        tx: ChannelTx,
        conn: Option<Connection>,
        input: Option<mpsc::Receiver<Bytes>>,
    ) -> ChannelLeg {
        let tx = Arc::new(tx);
        let stdin = {
            let tx = tx.clone();
            let prefix = ctx.script.stdin_prefix().map(Bytes::copy_from_slice);
            tokio::spawn(async move { send_input(&tx, prefix, input).await })
        };
        ChannelLeg {
            peer,
            rx,
            tx,
            conn,
            stdin,
            info: Vec::new(),
            exit: None,
        }
    }

    async fn next(&mut self) -> Option<LegMsg> {
        if let Some(outcome) = self.exit.take() {
            return Some(LegMsg::Exit(outcome));
        }
        loop {
            match self.rx.wait().await? {
                ChannelMsg::Data { data } => return Some(LegMsg::Out(data)),
                ChannelMsg::ExtendedData {
                    data,
                    ext: exit_info::EXT_EXIT_INFO,
                } => {
                    if self.info.len() + data.len() <= exit_info::MAX_MESSAGE {
                        self.info.extend_from_slice(&data);
                    }
                }
                ChannelMsg::ExtendedData { data, .. } => return Some(LegMsg::Err(data)),
                ChannelMsg::Close => return None,
                msg => {
                    let Some(outcome) = exit_outcome(&msg) else {
                        continue;
                    };
                    match ExitInfo::from_message(&std::mem::take(&mut self.info)) {
                        Some(info) => {
                            self.exit = Some(outcome);
                            return Some(LegMsg::ExitInfo(info));
                        }
                        None => return Some(LegMsg::Exit(outcome)),
                    }
                }
            }
        }
    }

    async fn close(self, abandoned: bool) -> Closed {
        self.stdin.abort();
        match self.conn {
            Some(conn) => {
                let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
            }
            None => self.tx.close().await,
        }
        Closed {
            status: self.exit,
            exit_info: ExitInfo::from_message(&self.info),
            lost: if abandoned {
                "abandoned: it did not end after SIGKILL"
            } else {
                "connection lost (no keepalive answer, or the agent ended)"
            },
        }
    }
}

/// The variables for an agent, which takes the directory and the request
/// for exit info as `env` requests too ([`with_address`] completes them).
fn agent_vars(ctx: &RunCtx, mut vars: Vec<(String, String)>) -> Vec<(String, String)> {
    vars.push((CWD_VAR.to_string(), ctx.cwd.clone()));
    vars.push((exit_info::REQUEST_VAR.to_string(), "1".to_string()));
    vars
}

/// The variables with the node's address as it was reached.
fn with_address(mut vars: Vec<(String, String)>, peer: SocketAddr) -> Vec<(String, String)> {
    crate::env::fill_reached_address(&mut vars, peer.ip());
    vars
}
