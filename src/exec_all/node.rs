//! One task per node. A node runs the script locally (this machine), through
//! an agent or sshd in-process (a russh session, no process per node), or
//! through an external wrapper (`WRAPPER HOST COMMAND`). Each task reports to
//! the dispatcher by events that carry its rank, and takes its orders
//! (signals, abandon) from its own control channel.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use russh::ChannelMsg;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::debug;

use super::output::{NodeSink, Stream};
use super::relay;
use super::types::{Control, End, Event, NodeOutcome, RunCtx, Transport};
use crate::exit_info::{self, ExitInfo};
use crate::process::{GroupChild, Outcome, Spawn, Stdio};
use crate::protocol::signals::{exit_outcome, signal_to_sig};
use crate::protocol::{self, CWD_VAR, PIPE_GRACE};
use crate::snapshot::survey::show_in_agent;
use crate::transport::channel::{ChannelRx, ChannelTx, send_input};
use crate::transport::client::Target;
use crate::transport::mux::MuxError;

/// Everything one node task needs.
pub struct NodeTask {
    pub rank: usize,
    pub host: String,
    pub env: Vec<(String, String)>,
    pub events: mpsc::UnboundedSender<(usize, Event)>,
    pub control: mpsc::UnboundedReceiver<Control>,
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    pub sink: NodeSink,
    pub local: bool,
    /// For a relay: the ranks of its group (itself first) and the command
    /// that runs exec_all for them there.
    pub relay: Option<(Vec<usize>, Vec<u8>)>,
}

impl NodeTask {
    fn send(&self, event: Event) {
        // The dispatcher outlives every node task; a closed channel means it gave up.
        let _ = self.events.send((self.rank, event));
    }

    fn end(self, outcome: NodeOutcome) {
        self.end_with(outcome, None);
    }

    fn end_with(self, outcome: NodeOutcome, exit_info: Option<ExitInfo>) {
        let subtree = self.relay.as_ref().map(|(group, _)| {
            relay::subtree(
                group,
                &self.host,
                &outcome,
                self.sink.stats.relay_report.as_deref(),
            )
        });
        let end = End {
            outcome,
            stats: self.sink.stats.clone(),
            ended: SystemTime::now(),
            subtree,
            exit_info,
        };
        let _ = self.events.send((self.rank, Event::Ended(Box::new(end))));
    }
}

/// `task` is boxed: it is passed down through nested async fns, each of
/// which would otherwise keep its own copy (~570 bytes) in the state every
/// connection holds for the run.
pub async fn run(ctx: Arc<RunCtx>, task: Box<NodeTask>) {
    if task.local {
        run_local(ctx, task).await;
        return;
    }
    match &ctx.transport {
        Transport::Native(_) => run_native(ctx, task).await,
        Transport::External(_) => run_local(ctx, task).await,
    }
}

/// A local process's stdin: the script (for `-`), then exec_all's stdin
/// (for a file or `-c`), then EOF. A remote node's goes the same way through
/// `transport::channel::send_input`.
struct StdinSource {
    prefix: Option<Bytes>,
    rx: Option<mpsc::Receiver<Bytes>>,
}

impl StdinSource {
    fn new(ctx: &RunCtx, rx: Option<mpsc::Receiver<Bytes>>) -> Self {
        StdinSource {
            prefix: ctx.script.stdin_prefix().map(Bytes::copy_from_slice),
            rx,
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        if let Some(prefix) = self.prefix.take() {
            return Some(prefix);
        }
        self.rx.as_mut()?.recv().await
    }
}

async fn run_native(ctx: Arc<RunCtx>, mut task: Box<NodeTask>) {
    let Transport::Native(connector) = &ctx.transport else {
        unreachable!("run_native is only called for the native transport")
    };
    let target = Target {
        host: task.host.clone(),
        port: ctx.port,
        user: ctx.user.clone(),
    };
    // The node's variables leave the task: sent once, not held for the run.
    let node_env = std::mem::take(&mut task.env);
    // Inside `multinode agent -- JOB`: through the head agent's connection.
    if let Some(mux) = &ctx.mux {
        let (command, vars) = agent_request(&ctx, &task, node_env.clone());
        let shared = tokio::select! {
            shared = mux.exec(&target, |peer| (command, with_address(vars, peer))) => shared,
            ctl = task.control.recv() => {
                debug!(rank = task.rank, ?ctl, "stopped before connecting");
                return task.end(NodeOutcome::NotStarted);
            }
        };
        match shared {
            Ok(Some(s)) => return follow(&ctx, task, s.peer, s.rx, s.tx, None).await,
            Ok(None) => {}
            Err(MuxError::Unreachable(e)) => return task.end(NodeOutcome::Unreachable(e)),
            Err(MuxError::Failed(e)) => {
                return task.end(NodeOutcome::Lost(format!("cannot start the script: {e}")));
            }
        }
    }
    let connected = {
        let _slot = tokio::select! {
            slot = ctx.connect_slots.acquire() => slot.expect("the semaphore is never closed"),
            ctl = task.control.recv() => {
                debug!(rank = task.rank, ?ctl, "stopped before connecting");
                return task.end(NodeOutcome::NotStarted);
            }
        };
        tokio::select! {
            // Boxed: the handshake's state (~3 KB) is freed once connected,
            // not kept in the task for the run.
            conn = Box::pin(connector.connect(&target)) => conn,
            ctl = task.control.recv() => {
                debug!(rank = task.rank, ?ctl, "stopped while connecting");
                return task.end(NodeOutcome::NotStarted);
            }
        }
    };
    let conn = match connected {
        Ok(conn) => conn,
        Err(e) => return task.end(NodeOutcome::Unreachable(e.to_string())),
    };
    let peer = conn.peer();
    // An agent takes the variables and the directory as `env` requests; a stock
    // sshd drops those (AcceptEnv), so they go in the command line instead.
    let (command, env) = match connector.auth() {
        crate::transport::client::Auth::Agent(_) => {
            let (command, vars) = agent_request(&ctx, &task, node_env);
            (command, with_address(vars, peer))
        }
        crate::transport::client::Auth::OpenSsh(_) => {
            let vars = with_address(node_env, peer);
            (
                super::script::wrapped_command(
                    node_command(&ctx, &task),
                    ctx.cwd.as_bytes(),
                    &vars,
                ),
                Vec::new(),
            )
        }
    };
    let channel = match Box::pin(conn.exec(&command, &env)).await {
        Ok(channel) => channel,
        Err(e) => return task.end(NodeOutcome::Lost(format!("cannot start the script: {e}"))),
    };
    // Sent: not held for the command's whole run (a node's variables and an
    // inline script can be tens of KB, times every node).
    drop((command, env));
    let (rx, tx) = channel.split();
    follow(
        &ctx,
        task,
        peer,
        ChannelRx::Ssh(rx),
        ChannelTx::Ssh(tx),
        Some(conn),
    )
    .await;
}

/// What a node runs: the relay command for a subtree, else the job's.
fn node_command<'a>(ctx: &'a RunCtx, task: &'a NodeTask) -> &'a [u8] {
    match &task.relay {
        Some((_, command)) => command.as_slice(),
        None => ctx.command.as_slice(),
    }
}

/// The command and the variables for an agent, which takes the variables
/// and the directory as `env` requests ([`with_address`] completes them).
fn agent_request(
    ctx: &RunCtx,
    task: &NodeTask,
    mut vars: Vec<(String, String)>,
) -> (Vec<u8>, Vec<(String, String)>) {
    vars.push((CWD_VAR.to_string(), ctx.cwd.clone()));
    vars.push((
        protocol::exit_info::REQUEST_VAR.to_string(),
        "1".to_string(),
    ));
    (node_command(ctx, task).to_vec(), vars)
}

/// The variables with the node's address as it was reached.
fn with_address(
    mut vars: Vec<(String, String)>,
    peer: std::net::SocketAddr,
) -> Vec<(String, String)> {
    crate::env::fill_reached_address(&mut vars, peer.ip());
    vars
}

/// A started remote command to its end: input in, output and the exit
/// status out, orders (signals, abandon) passed on. `conn` is this process's
/// own connection, closed at the end; without one (a shared connection) the
/// channel is closed instead.
async fn follow(
    ctx: &RunCtx,
    mut task: Box<NodeTask>,
    peer: std::net::SocketAddr,
    mut rx: ChannelRx,
    tx: ChannelTx,
    conn: Option<crate::transport::client::Connection>,
) {
    task.send(Event::Started {
        address: Some(peer.to_string()),
    });
    let tx = Arc::new(tx);
    let stdin = {
        let tx = tx.clone();
        let prefix = ctx.script.stdin_prefix().map(Bytes::copy_from_slice);
        let input = task.stdin.take();
        tokio::spawn(async move { send_input(&tx, prefix, input).await })
    };
    let mut status = None;
    let mut abandoned = false;
    let mut timer = FlushTimer::new();
    // The agent's report of the script's end (see `exit_info`).
    let mut info_bytes: Vec<u8> = Vec::new();
    loop {
        timer.arm(task.sink.flush_at());
        // In this order: orders first; bytes already here before the timer of
        // a partial line, which is then only due if the node really is quiet.
        tokio::select! {
            biased;
            ctl = task.control.recv() => match ctl {
                Some(Control::Signal(signo)) => {
                    // Boxed, as the other seldom awaited futures below: not
                    // part of the state the task holds for the run.
                    let _ = Box::pin(tx.signal(signal_to_sig(signo))).await;
                }
                Some(Control::Abandon) | None => {
                    abandoned = true;
                    break;
                }
            },
            msg = rx.wait() => match msg {
                Some(ChannelMsg::Data { data }) => task.sink.feed(Stream::Out, &data).await,
                Some(ChannelMsg::ExtendedData { data, ext: protocol::exit_info::EXT_EXIT_INFO }) => {
                    if info_bytes.len() + data.len() <= protocol::exit_info::MAX_MESSAGE {
                        info_bytes.extend_from_slice(&data);
                    }
                }
                Some(ChannelMsg::ExtendedData { data, .. }) => task.sink.feed(Stream::Err, &data).await,
                Some(ChannelMsg::Close) | None => break,
                Some(msg) => {
                    if let Some(outcome) = exit_outcome(&msg) {
                        status = Some(outcome);
                    }
                }
            },
            () = timer.wait() => task.sink.flush_due().await,
        }
    }
    stdin.abort();
    task.sink.finish().await;
    // Closing the connection (or the shared one's channel) makes the agent
    // end whatever is left of the group.
    match conn {
        Some(conn) => {
            let _ = Box::pin(tokio::time::timeout(Duration::from_secs(2), conn.close())).await;
        }
        None => Box::pin(tx.close()).await,
    }
    let outcome = match status {
        Some(outcome) => NodeOutcome::Finished(outcome),
        None if abandoned => NodeOutcome::Lost("abandoned: it did not end after SIGKILL".into()),
        None => {
            NodeOutcome::Lost("connection lost (no keepalive answer, or the agent ended)".into())
        }
    };
    let info = ExitInfo::from_message(&info_bytes);
    task.end_with(outcome, info);
}

/// The local node, or a node reached through an external wrapper: a local
/// process under `multinode supervise`, so it ends if exec_all is killed.
async fn run_local(ctx: Arc<RunCtx>, mut task: Box<NodeTask>) {
    let mut argv: Vec<OsString> = Vec::new();
    if task.local {
        argv.extend(ctx.script.local_argv(&ctx.args));
    } else {
        let Transport::External(wrapper) = &ctx.transport else {
            unreachable!("remote nodes run locally only through an external wrapper")
        };
        let command = super::script::wrapped_command(&ctx.command, ctx.cwd.as_bytes(), &task.env);
        argv.push(wrapper.clone().into());
        argv.push(task.host.clone().into());
        argv.push(std::ffi::OsStr::from_bytes(&command).to_os_string());
    }
    // This machine's cgroup, for the node run here (a wrapper's node cannot tell).
    let watch = task
        .local
        .then(|| exit_info::Watch::start(&std::env::current_dir().unwrap_or_default()));
    let supervised = crate::supervise::wrap(&ctx.bin, ctx.grace, &argv);
    let mut cmd = Spawn::from_std(&supervised);
    if task.local {
        cmd.envs(task.env.iter().map(|(k, v)| (k, v)));
    }
    cmd.stdio(Stdio::Piped);
    let mut child = match GroupChild::spawn(&cmd) {
        Ok(child) => child,
        Err(e) => {
            return task.end(NodeOutcome::Unreachable(format!(
                "cannot start {}: {e}",
                ctx.bin.display()
            )));
        }
    };
    task.send(Event::Started { address: None });
    let pgid = child.pgid();
    // Shown to this machine's agent until the group is gone, for `multinode ps`.
    let shown = match (&ctx.transport, &ctx.local_agent) {
        (Transport::Native(connector), Some(agent)) if task.local => Some(show_in_agent(
            connector.clone(),
            agent.clone(),
            pgid.as_raw(),
        )),
        _ => None,
    };
    let (stdin_pipe, out, err) = child.take_stdio();
    let stdin = {
        let mut source = StdinSource::new(&ctx, task.stdin.take());
        tokio::spawn(async move {
            let Some(mut pipe) = stdin_pipe else { return };
            while let Some(chunk) = source.next().await {
                if pipe.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut out = Pipe::new(out);
    let mut err = Pipe::new(err);
    let mut status = None;
    let mut exited_at = None;
    let mut abandoned = false;
    let mut timer = FlushTimer::new();
    loop {
        if status.is_some() && out.done && err.done {
            break;
        }
        let grace_over = async {
            match exited_at {
                Some(at) => tokio::time::sleep_until(at + PIPE_GRACE).await,
                None => std::future::pending().await,
            }
        };
        timer.arm(task.sink.flush_at());
        tokio::select! {
            () = timer.wait() => task.sink.flush_due().await,
            chunk = out.read(), if !out.done => {
                if let Some(chunk) = chunk { task.sink.feed(Stream::Out, &chunk).await; }
            }
            chunk = err.read(), if !err.done => {
                if let Some(chunk) = chunk { task.sink.feed(Stream::Err, &chunk).await; }
            }
            result = child.wait(), if status.is_none() => {
                status = Some(result.unwrap_or(Outcome::Exited(1)));
                exited_at = Some(tokio::time::Instant::now());
            }
            () = grace_over => {
                // Something left in the group holds the pipes: end it, read what is left.
                crate::process::end_group_after(pgid, ctx.grace, child.signalled_at()).await;
                exited_at = None;
                if !(out.done && err.done) {
                    out.done = true;
                    err.done = true;
                }
            }
            ctl = task.control.recv() => match ctl {
                Some(Control::Signal(signo)) => {
                    if let Ok(sig) = nix::sys::signal::Signal::try_from(signo) {
                        child.signal(sig);
                    }
                }
                Some(Control::Abandon) | None => {
                    child.signal(nix::sys::signal::Signal::SIGKILL);
                    abandoned = true;
                    break;
                }
            },
        }
    }
    stdin.abort();
    task.sink.finish().await;
    if abandoned && status.is_none() {
        status = child.wait().await.ok();
    }
    crate::process::end_group_after(pgid, ctx.grace, child.signalled_at()).await;
    child.disarm();
    drop(shown);
    let info = match (&watch, &status) {
        (Some(watch), Some(outcome)) => Some(watch.finish(exit_info::may_have_dumped(outcome))),
        _ => None,
    };
    let outcome = match status {
        Some(outcome) => NodeOutcome::Finished(outcome),
        None => NodeOutcome::Lost("the local process could not be waited for".into()),
    };
    task.end_with(outcome, info);
}

/// The timer of a sink's held partial line, armed lazily: once when a line
/// starts to wait, not again for every chunk that moves its deadline on (a
/// timer per chunk cost the relay a wake-up of the runtime's driver each).
/// The deadline only moves later, so the timer fires at or before it; the
/// sink then writes only what is really due, and the timer is armed again.
struct FlushTimer {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    armed: bool,
}

impl FlushTimer {
    fn new() -> Self {
        FlushTimer {
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: false,
        }
    }

    fn arm(&mut self, due: Option<tokio::time::Instant>) {
        match due {
            None => self.armed = false,
            Some(at) if !self.armed => {
                self.sleep.as_mut().reset(at);
                self.armed = true;
            }
            Some(_) => {}
        }
    }

    /// Resolves when the timer fires (never while it is not armed).
    async fn wait(&mut self) {
        if !self.armed {
            return std::future::pending().await;
        }
        self.sleep.as_mut().await;
        self.armed = false;
    }
}

/// A child's pipe read in chunks; `done` once it reached EOF.
struct Pipe<R> {
    reader: Option<R>,
    buf: Vec<u8>,
    done: bool,
}

impl<R: AsyncRead + Unpin> Pipe<R> {
    fn new(reader: Option<R>) -> Self {
        Pipe {
            done: reader.is_none(),
            reader,
            buf: vec![0u8; 64 * 1024],
        }
    }

    async fn read(&mut self) -> Option<Vec<u8>> {
        let reader = self.reader.as_mut()?;
        match reader.read(&mut self.buf).await {
            Ok(0) | Err(_) => {
                self.done = true;
                None
            }
            Ok(n) => Some(self.buf[..n].to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an async fn returns, without calling it.
    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(Arc<RunCtx>, Box<NodeTask>) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// A node task is held by every connection for the whole run: its
    /// state must not keep the handshake's or the rare paths' futures (boxed
    /// while they run) nor copies of the task (6.5 KB in a release build
    /// before they were boxed; ~2 KB now).
    #[test]
    fn a_node_task_holds_little_for_its_run() {
        let size = future_size(run);
        eprintln!("node task future: {size} bytes");
        assert!(size <= 4096, "a node task's future is {size} bytes");
    }
}
