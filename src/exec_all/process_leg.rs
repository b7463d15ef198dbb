//! A node's command as a process here: this node's (the script itself), or
//! a node reached through an external wrapper (`WRAPPER HOST COMMAND`).
//! Either runs under `multinode supervise`, so it ends if exec_all is
//! killed, in its own group; its pipes are read by two pumps, and its end
//! is the agent's (`process::settle`): the pipes get their grace, then what
//! is left of the group is ended. This node's command gets a heartbeat file
//! when heartbeats are watched, looked at as an agent does.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::event::{Closed, LegMsg};
use super::plan::NodeSpec;
use super::reach::RunCtx;
use super::record::NodeOutcome;
use crate::exit_info::{self, ExitInfo};
use crate::heartbeat::{self, HeartbeatFile};
use crate::process::{self, GroupChild, Outcome, Spawn, Stdio};
use crate::snapshot::survey::{ShownGroup, show_in_agent};
use crate::snapshot::watch::OutputTap;
use crate::vars;

/// Chunks a pump may have read ahead of the node's sink.
const PUMP_QUEUE: usize = 4;

/// A started process and what reads it.
pub struct ProcessLeg {
    group: process::Group,
    /// The pumps' chunks; closed once both reached EOF or were cut.
    output: mpsc::Receiver<LegMsg>,
    /// The leader waited for and its group settled: how it ended.
    supervisor: JoinHandle<(Option<Outcome>, Option<ExitInfo>)>,
    /// Asks the supervisor to kill the group now (the node is abandoned).
    abandon: CancellationToken,
    stdin: JoinHandle<()>,
    /// The exit, once the supervisor told it (yielded after the output).
    ended: Option<(Option<Outcome>, Option<ExitInfo>)>,
    /// Both pumps reached EOF (the command may still run).
    output_done: bool,
    /// This node's heartbeat file, until its group has ended.
    heartbeat: Option<HeartbeatFile>,
}

/// What the supervisor runs: this node's script (a process's command line
/// with several a node: bound, then the script), or `wrapper` with the
/// node's host and its command line (the variables in it).
fn argv(ctx: &RunCtx, spec: &NodeSpec, wrapper: Option<&str>) -> Vec<OsString> {
    let Some(wrapper) = wrapper else {
        if spec.process.is_some() {
            let command = std::ffi::OsStr::from_bytes(&spec.command).to_os_string();
            return vec!["sh".into(), "-c".into(), command];
        }
        return ctx.script.local_argv(&ctx.args).into_iter().collect();
    };
    let command = super::script::wrapped_command(&spec.command, ctx.cwd.as_bytes(), &spec.env);
    vec![
        wrapper.into(),
        spec.host.clone().into(),
        std::ffi::OsStr::from_bytes(&command).to_os_string(),
    ]
}

/// The node run here gets a heartbeat file when heartbeats are watched;
/// its supervisor removes it if this process is killed.
fn heartbeat_file(ctx: &RunCtx) -> Option<HeartbeatFile> {
    let dir = ctx.heartbeat_dir.as_deref()?;
    HeartbeatFile::create(dir)
        .inspect_err(|e| {
            tracing::warn!(dir = %dir.display(), error = %e, "no heartbeat file for this node's command");
        })
        .ok()
}

impl ProcessLeg {
    /// Starts `spec`'s command as a process here: this node's script, or
    /// (`wrapper`) `WRAPPER HOST COMMAND` for a node it reaches.
    pub fn start(
        ctx: &RunCtx,
        spec: &mut NodeSpec,
        wrapper: Option<&str>,
        stdin: Option<mpsc::Receiver<Bytes>>,
    ) -> Result<ProcessLeg, NodeOutcome> {
        let local = wrapper.is_none();
        let argv = argv(ctx, spec, wrapper);
        // This machine's cgroup, for the node run here (a wrapper's node cannot tell).
        let watch =
            local.then(|| exit_info::Watch::start(&std::env::current_dir().unwrap_or_default()));
        let heartbeat = if local { heartbeat_file(ctx) } else { None };
        let supervised = crate::supervise::wrap(
            &ctx.bin,
            ctx.grace,
            heartbeat.as_ref().map(HeartbeatFile::path),
            &argv,
        );
        let mut cmd = Spawn::from_std(&supervised);
        if local {
            cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
        }
        if let Some(file) = &heartbeat {
            cmd.env(vars::HEARTBEAT_FILE, file.path());
        }
        cmd.stdio(Stdio::Piped);
        let mut child = GroupChild::spawn(&cmd).map_err(|e| {
            NodeOutcome::Unreachable(format!("cannot start {}: {e}", ctx.bin.display()))
        })?;
        spec.env = Vec::new();
        let group = child.group();
        // Shown to this machine's agent until the group is gone, for `multinode ps`.
        let shown = match (ctx.reach.agent_connector(), &ctx.local_agent) {
            (Some(connector), Some(agent)) if local => Some(show_in_agent(
                connector.clone(),
                agent.clone(),
                group.pgid().as_raw(),
            )),
            _ => None,
        };
        let (stdin_pipe, out, err) = child.take_stdio();
        let (tx, output) = mpsc::channel(PUMP_QUEUE);
        // What the node prints, told to the agent it is shown to (`multinode top`).
        let (tap_out, tap_err) = shown.as_ref().map(ShownGroup::taps).unzip();
        let pumps = [
            tokio::spawn(pump(out, tx.clone(), LegMsg::Out, tap_out)),
            tokio::spawn(pump(err, tx, LegMsg::Err, tap_err)),
        ];
        let abandon = CancellationToken::new();
        let supervisor = tokio::spawn(supervise(
            child,
            pumps,
            ctx.grace,
            abandon.clone(),
            watch,
            shown,
        ));
        let stdin = {
            let prefix = ctx.script.stdin_prefix().map(Bytes::copy_from_slice);
            tokio::spawn(feed_stdin(stdin_pipe, prefix, stdin))
        };
        Ok(ProcessLeg {
            group,
            output,
            supervisor,
            abandon,
            stdin,
            ended: None,
            output_done: false,
            heartbeat,
        })
    }

    /// The output and the heartbeats as they come; then the exit info and
    /// the exit, once the group has settled.
    pub async fn next(&mut self) -> Option<LegMsg> {
        while self.ended.is_none() {
            tokio::select! {
                biased;
                msg = self.output.recv(), if !self.output_done => match msg {
                    Some(msg) => return Some(msg),
                    None => self.output_done = true,
                },
                ended = &mut self.supervisor, if self.output_done => {
                    self.ended = Some(ended.unwrap_or((None, None)));
                    // The group is gone: nothing touches the file any more.
                    self.heartbeat = None;
                }
                () = heartbeat::next_beat(self.heartbeat.as_mut()) => return Some(LegMsg::Heartbeat),
            }
        }
        let (status, info) = self.ended.as_mut().expect("set above");
        if let Some(info) = info.take() {
            return Some(LegMsg::ExitInfo(info));
        }
        status.take().map(LegMsg::Exit)
    }

    pub fn signal(&self, signo: i32) {
        if let Ok(sig) = nix::sys::signal::Signal::try_from(signo) {
            self.group.signal(sig);
        }
    }

    pub async fn close(mut self, abandoned: bool) -> Closed {
        self.stdin.abort();
        if abandoned {
            self.abandon.cancel();
        }
        // The pumps stop with their reader: nothing waits on output nobody reads.
        drop(self.output);
        let (status, exit_info) = match self.ended.take() {
            Some(ended) => ended,
            None => (&mut self.supervisor).await.unwrap_or((None, None)),
        };
        Closed {
            status,
            exit_info,
            lost: "the local process could not be waited for",
        }
    }
}

/// Waits for the leader (or kills the group when the node is abandoned),
/// settles the group (`process::settle`), and tells how the command ended.
async fn supervise(
    mut child: GroupChild,
    mut pumps: [JoinHandle<()>; 2],
    grace: std::time::Duration,
    abandon: CancellationToken,
    watch: Option<exit_info::Watch>,
    shown: Option<crate::snapshot::survey::ShownGroup>,
) -> (Option<Outcome>, Option<ExitInfo>) {
    let group = child.group();
    let status = tokio::select! {
        status = child.wait() => Some(status.unwrap_or(Outcome::Exited(1))),
        () = abandon.cancelled() => None,
    };
    let status = match status {
        Some(outcome) => {
            let [out, err] = &mut pumps;
            let drained = async {
                let _ = out.await;
                let _ = err.await;
            };
            tokio::select! {
                _ = process::settle(&group, grace, false, drained) => {}
                // Abandoned meanwhile: nothing is read any more.
                () = abandon.cancelled() => {
                    group.signal(nix::sys::signal::Signal::SIGKILL);
                    process::end_group_after(group.pgid(), grace, group.signalled_at()).await;
                }
            }
            Some(outcome)
        }
        None => {
            child.signal(nix::sys::signal::Signal::SIGKILL);
            let status = child.wait().await.ok();
            process::end_group_after(group.pgid(), grace, group.signalled_at()).await;
            status
        }
    };
    for pump in &pumps {
        pump.abort();
    }
    child.disarm();
    drop(shown);
    let info = match (&watch, &status) {
        (Some(watch), Some(outcome)) => Some(watch.finish(exit_info::may_have_dumped(outcome))),
        _ => None,
    };
    (status, info)
}

/// Reads a pipe to EOF into `tx`, each chunk as it comes; stops when the
/// reader is gone.
async fn pump(
    pipe: Option<pipe::Receiver>,
    tx: mpsc::Sender<LegMsg>,
    message: fn(Bytes) -> LegMsg,
    tap: Option<OutputTap>,
) {
    let Some(pipe) = pipe else { return };
    let mut reader = process::PipeReader::new(pipe);
    while let Some(chunk) = reader.next().await {
        if let Some(tap) = &tap {
            tap.seen(&chunk);
        }
        if tx.send(message(chunk)).await.is_err() {
            return;
        }
    }
}

/// A process's stdin: the script (for `-`), then exec_all's stdin (for a
/// file or `-c`), then EOF. A remote node's goes the same way through
/// `transport::channel::send_input`.
async fn feed_stdin(
    pipe: Option<pipe::Sender>,
    prefix: Option<Bytes>,
    input: Option<mpsc::Receiver<Bytes>>,
) {
    let Some(mut pipe) = pipe else { return };
    if let Some(prefix) = prefix
        && pipe.write_all(&prefix).await.is_err()
    {
        return;
    }
    if let Some(mut input) = input {
        while let Some(chunk) = input.recv().await {
            if pipe.write_all(&chunk).await.is_err() {
                return;
            }
        }
    }
}
