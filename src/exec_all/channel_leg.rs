//! A node's command over SSH, in-process: to its agent (the variables as
//! `env` requests) or to a stock sshd (the variables in the command line),
//! on a connection of our own (one a node, shared by its processes with
//! `--nproc-per-node`: `node_conn`) or, inside `multinode agent -- JOB`,
//! on the head agent's shared one (`transport::mux`). Its channel's
//! messages are the leg's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use russh::ChannelMsg;
use tokio::sync::mpsc;
use tracing::debug;

use super::event::{Closed, LegMsg, Order};
use super::node_conn::NodeConn;
use super::plan::NodeSpec;
use super::reach::{RunCtx, Ssh};
use super::record::NodeOutcome;
use crate::process::Outcome;
use crate::protocol::exit_info::{self, ExitInfo};
use crate::protocol::heartbeat;
use crate::protocol::signals::exit_outcome;
use crate::transport::channel::{ChannelRx, ChannelTx, send_input};
use crate::transport::client::{Connection, Target};
use crate::transport::mux::MuxError;

/// A command on a node reached over SSH: its channel, and the connection
/// of our own it runs on (`None`: the head agent's shared one).
pub struct ChannelLeg {
    pub(super) peer: SocketAddr,
    rx: ChannelRx,
    pub(super) tx: Arc<ChannelTx>,
    conn: Option<Arc<Connection>>,
    /// When its connection was up and logged in.
    pub(super) times: Option<crate::transport::client::ConnectTimes>,
    /// How many processes of its node share its connection (one login a
    /// node); `None`: a connection of its own.
    pub(super) shared_by: Option<usize>,
    stdin: tokio::task::JoinHandle<()>,
    /// The agent's report of the command's end (see `exit_info`), as it comes.
    info: Vec<u8>,
    /// The exit status, held while the exit info goes first.
    exit: Option<Outcome>,
}

/// A channel through the head agent's shared connection; `None` when it
/// has no connection to the node to share (then the node is connected to).
fn shared<T>(exec: Result<Option<T>, MuxError>) -> Result<Option<T>, NodeOutcome> {
    exec.map_err(|e| match e {
        MuxError::Unreachable(e) => NodeOutcome::Unreachable(e),
        MuxError::Failed(e) => NodeOutcome::Lost(format!("cannot start the script: {e}")),
    })
}

/// `work`, unless an order (a signal, abandon) comes first: then the node
/// was stopped `when` (before connecting, while connecting) and is not started.
async fn or_stopped<T>(
    work: impl std::future::Future<Output = T>,
    orders: &mut mpsc::UnboundedReceiver<Order>,
    rank: usize,
    when: &str,
) -> Result<T, NodeOutcome> {
    tokio::select! {
        out = work => Ok(out),
        order = orders.recv() => {
            debug!(rank, ?order, "stopped {when}");
            Err(NodeOutcome::NotStarted)
        }
    }
}

impl ChannelLeg {
    /// Starts `spec`'s command on its node, reached over `ssh` (an agent
    /// or a stock sshd: `spec.leg` says what the channel sends): on a
    /// connection of its own, or on `node`'s, shared by its processes.
    pub(super) async fn start(
        ctx: &RunCtx,
        ssh: &Ssh,
        spec: &mut NodeSpec,
        orders: &mut mpsc::UnboundedReceiver<Order>,
        stdin: Option<mpsc::Receiver<Bytes>>,
        node: Option<Arc<NodeConn>>,
    ) -> Result<ChannelLeg, NodeOutcome> {
        let target = ssh.target(&spec.host);
        // The node's variables leave the spec: sent once, not held for the run.
        let node_env = std::mem::take(&mut spec.env);
        let heartbeats = ctx.heartbeat_dir.is_some();
        // Inside `multinode agent -- JOB`: through the head agent's connection.
        if let Some(mux) = &ssh.mux {
            let (leg, vars) = (spec.leg, node_env.clone());
            let command = spec.command.to_vec();
            let exec = mux.exec(&target, |peer| {
                let request =
                    leg.channel_request(&command, with_address(vars, peer), &ctx.cwd, heartbeats);
                (request.command, request.env)
            });
            if let Some(s) =
                shared(or_stopped(exec, orders, spec.rank, "before connecting").await?)?
            {
                return Ok(ChannelLeg::new(ctx, s.peer, s.rx, s.tx, None, stdin));
            }
        }
        let connect = || connect(ctx, ssh, &target);
        // Boxed: the handshake's state (~3 KB) is freed once connected.
        let connected = match &node {
            Some(node) => {
                let shared = Box::pin(node.get(connect));
                or_stopped(shared, orders, spec.rank, "while connecting").await?
            }
            None => {
                let own = Box::pin(async { connect().await.map(Arc::new) });
                or_stopped(own, orders, spec.rank, "while connecting").await?
            }
        };
        let conn = connected.map_err(NodeOutcome::Unreachable)?;
        // The node's connection is held by its channels from now on.
        let shared_by = node.map(|n| n.processes);
        let peer = conn.peer();
        let request = spec.leg.channel_request(
            &spec.command,
            with_address(node_env, peer),
            &ctx.cwd,
            heartbeats,
        );
        let channel = Box::pin(conn.exec(&request.command, &request.env)).await;
        // Sent: not held for the command's whole run (a node's variables can
        // be tens of KB, times every node).
        drop(request);
        let channel =
            channel.map_err(|e| NodeOutcome::Lost(format!("cannot start the script: {e}")))?;
        let (rx, tx) = channel.split();
        let mut leg = ChannelLeg::new(
            ctx,
            peer,
            ChannelRx::Ssh(rx),
            ChannelTx::Ssh(tx),
            Some(conn),
            stdin,
        );
        leg.shared_by = shared_by;
        Ok(leg)
    }

    fn new(
        ctx: &RunCtx,
        peer: SocketAddr,
        rx: ChannelRx,
        tx: ChannelTx,
        conn: Option<Arc<Connection>>,
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
            times: conn.as_ref().map(|c| c.times()),
            shared_by: None,
            conn,
            stdin,
            info: Vec::new(),
            exit: None,
        }
    }

    pub(super) async fn next(&mut self) -> Option<LegMsg> {
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
                ChannelMsg::ExtendedData {
                    ext: heartbeat::EXT_HEARTBEAT,
                    ..
                } => return Some(LegMsg::Heartbeat),
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

    pub(super) async fn close(self, abandoned: bool) -> Closed {
        self.stdin.abort();
        // A channel on a connection shared with its node's other processes
        // is closed by itself (the agent ends what is left of its group);
        // the connection by the last of them.
        if self.conn.is_none() || self.shared_by.is_some() {
            self.tx.close().await;
        }
        if let Some(conn) = self.conn.and_then(Arc::into_inner) {
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
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

/// A connection of a node's own (within the run's connect slots), or why not.
async fn connect(ctx: &RunCtx, ssh: &Ssh, target: &Target) -> Result<Connection, String> {
    let _slot = ctx
        .connect_slots
        .acquire()
        .await
        .expect("the semaphore is never closed");
    ssh.connector
        .connect(target)
        .await
        .map_err(|e| e.to_string())
}

/// The variables with the node's address as it was reached.
fn with_address(mut vars: Vec<(String, String)>, peer: SocketAddr) -> Vec<(String, String)> {
    crate::env::fill_reached_address(&mut vars, peer.ip());
    vars
}
