//! exec_all: one script on every node at once, `RANK` set per node. A run
//! is planned, then one task a node runs its leg, and the dispatcher collects.
//!
//! - `options`: the validated options of a run, from exec-all's arguments.
//! - `script`: what each node runs, and the environment it gets.
//! - `plan`: one spec per node task (rank, host, leg, command, variables,
//!   output settings, a relay's group); pure.
//! - `reach`: how the other nodes are reached, decided once a run (`Reach`).
//! - `leg`: a started command and its messages; `channel_leg`: over SSH (an
//!   agent, sshd); `process_leg`: a process here (this node, a wrapper).
//! - `node`: one task per node, one loop over any leg.
//! - `sink`: a node's output cut into lines; `writer`: the one writer thread.
//! - `files`: `--output DIR`, a file per rank and stream.
//! - `attempts`: restarts: a run as attempts over the nodes the restart policy gives.
//! - `dispatch`: the one owner of a run: events, signals, timers, fail-fast.
//! - `event`: what node tasks and the dispatcher tell each other.
//! - `record`: what a run keeps of each node, and how it ended.
//! - `relay`: past `--fanout` nodes, groups of nodes run through one of theirs.
//! - `relay_record`: a relay's records of its group, sent to its head on stderr.
//! - `report`: the failure table and `--report FILE`.
//! - `verdict`: the first failure: which node, how, OOM, core, its last lines.
//! - `nccl_line`: which output lines are NCCL's warnings and errors, and its cause.
//! - `error_line`: the program's own error in its output (a traceback's exception, ...).
//! - `group`: `--group`, identical outputs printed once with their ranks.
//! - `finish`: what the user reads at the end: groups, the table, `--report FILE`.

mod attempts;
mod channel_leg;
mod dispatch;
mod error_line;
mod event;
mod files;
mod finish;
mod group;
mod leg;
mod nccl_line;
mod node;
mod options;
mod plan;
mod process_leg;
mod progress;
mod reach;
mod record;
mod relay;
mod relay_record;
mod report;
pub mod script;
mod sink;
mod verdict;
mod writer;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use dispatch::Dispatch;
pub(crate) use finish::finish_output;
use finish::program_name;
pub(crate) use options::RunOptions;
use reach::{Reach, RunCtx};
pub(crate) use record::NodeOutcome;
use record::{NodeRecord, RunResult};
use script::Script;

use crate::cli::ExecAllArgs;
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;

pub fn main(args: ExecAllArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let mut inputs = args.topology.inputs();
    // A relay runs one attempt's group: the head has split off the spares.
    inputs.spares = if args.relay_report {
        Some(0)
    } else {
        args.spares
    };
    let job = crate::env::resolve_job(&inputs, &env)?;
    let restarts = if args.relay_report {
        None
    } else {
        attempts::Restarts::from_args(&args, &env)?
    };
    let options = RunOptions::from_args(&args, &env, job.topology.nodes.len())?;
    let (result, attempts) = if restarts.is_none() && job.spares == 0 {
        (run_blocking(&job, &env, options)?, None)
    } else {
        if args.nodes.is_some() || args.exclude.is_some() {
            return Err(Error::usage(
                "--nodes and --exclude choose ranks of one run; with restarts or spares the ranks \
                 change from one attempt to the next: drop them, or run without restarts and spares",
            ));
        }
        let (result, attempts) = attempts::run(&job, &env, &restarts.unwrap_or_default(), options)?;
        (result, Some(attempts))
    };
    finish::end(result, attempts, &args)
}

/// Plans and runs on a fresh runtime; returns when every node has ended.
pub(crate) fn run_blocking(
    job: &Job,
    env: &EnvMap,
    options: RunOptions,
) -> Result<RunResult, Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the async runtime: {e}")))?;
    let result = runtime.block_on(run(job, env, options));
    // A stdin reader may be parked in a blocking read: do not wait for it.
    runtime.shutdown_background();
    result
}

/// Runs `options.script` on the selected nodes of `job`.
pub(crate) async fn run(job: &Job, env: &EnvMap, options: RunOptions) -> Result<RunResult, Error> {
    crate::process::raise_fd_limit();
    let reach = Reach::decide(job, env, options.connect_timeout)?;
    let plan = plan::plan(job, &options, reach.kind(), env)?;
    if let Some(dir) = &options.output_dir {
        files::prepare(dir).map_err(Error::Usage)?;
    }
    let host = |rank: usize| job.topology.nodes[rank].host.clone();
    let runs_here = plan.ranks.contains(&job.rank);
    let snapshot = reach.snapshot_nodes(job, &plan.ranks);
    // The agents outlive this run, unless it runs inside `multinode agent
    // -- JOB`, whose agents end with JOB.
    let agents_stay = options.shell_hint
        && reach.agent_connector().is_some()
        && env.get(crate::protocol::mux::SOCKET_VAR).is_none();
    let ctx = Arc::new(RunCtx::new(reach, job, &options, runs_here, env));

    let (closed_tx, closed_rx) = mpsc::unbounded_channel();
    let (writer, writer_thread) = writer::start(closed_tx);
    let records: Vec<NodeRecord> = plan
        .ranks
        .iter()
        .map(|&r| NodeRecord::new(r, host(r)))
        .collect();
    let started = node::start_all(
        &ctx,
        plan.tasks,
        &writer,
        options.output_dir.as_deref(),
        options.forward_stdin,
    )?;
    let spec = Dispatch {
        fail_fast: options.fail_fast,
        grace: options.grace,
        timeout: options.timeout,
        progress: options.forward_output && std::io::stderr().is_terminal(),
        // Only a run that prints its output: `collect` (check) gathers it.
        snapshot: options.forward_output.then_some(snapshot),
        snapshot_on_timeout: options.snapshot_on_timeout,
        hang_timeout: options.hang_timeout,
        progress_seen: ctx.progress.clone(),
        stops: options.stops.clone(),
    };
    let node::Started {
        handles,
        events,
        mut tasks,
        stdin,
    } = started;
    let result = dispatch::run(&spec, records, handles, events, closed_rx, writer).await;
    while tasks.join_next().await.is_some() {}
    if let Some(reader) = stdin {
        reader.abort();
    }
    // Every sink is gone with its task: the writer thread drains and ends.
    let failure = tokio::task::spawn_blocking(move || writer_thread.join())
        .await
        .ok()
        .flatten();
    let mut result = result;
    result.agents_stay = agents_stay;
    result.output_failure =
        failure.and_then(|(fd, e)| crate::stdio::failure_line(program_name(), fd, &e));
    Ok(result)
}

/// What one node's command left, for callers that gather output instead of relaying it.
#[derive(Debug, Clone)]
pub struct NodeCapture {
    pub rank: usize,
    /// How the command ended, or why the node could not run it
    /// (unreachable, lost, not started within the time limit).
    pub outcome: NodeOutcome,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs the shell command line `command` on every node of `job` at once
/// (this node locally, the others through the transport exec_all uses),
/// with the environment contract of each node, and gathers each node's output.
/// Every node gets at most `timeout`.
pub async fn collect(
    job: &Job,
    command: &str,
    timeout: Duration,
) -> Result<Vec<NodeCapture>, Error> {
    let env = EnvMap::from_process();
    let options = RunOptions {
        fail_fast: false,
        grace: Duration::from_secs(1),
        timeout: Some(timeout),
        connect_timeout: timeout,
        forward_output: false,
        show_local_to_agent: false,
        ..RunOptions::new(Script::Inline(command.as_bytes().to_vec()))
    };
    let result = run(job, &env, options).await?;
    Ok(result
        .nodes
        .into_iter()
        .map(|n| NodeCapture {
            rank: n.rank,
            outcome: n.outcome.unwrap_or(NodeOutcome::NotStarted),
            stdout: n.stats.captured_out,
            stderr: n.stats.captured_err,
        })
        .collect())
}
