//! One launch of the script over a job's nodes: the plan, one task a node,
//! the dispatcher, the writer; returns when every node has ended. An
//! attempt and a health check are each one launch, on exec_all's one
//! runtime, with the stop signals its caller holds.

use std::io::IsTerminal;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::dispatch::{self, Dispatch};
use super::options::RunOptions;
use super::reach::{Reach, RunCtx};
use super::record::{NodeRecord, RunResult};
use super::{files, node, plan, writer};
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::signals::Stops;

/// Runs `options.script` on the selected nodes of `job`; a stop signal
/// that comes meanwhile (from `stops`) is passed on to every node.
pub(crate) async fn launch(
    job: &Job,
    env: &EnvMap,
    options: RunOptions,
    stops: &mut Stops,
) -> Result<RunResult, Error> {
    crate::process::raise_fd_limit();
    let reach = Reach::decide(job, env, options.connect_timeout)?;
    let plan = plan::plan(job, &options, reach.kind(), env)?;
    if let Some(dir) = &options.output_dir {
        files::prepare(dir).map_err(Error::Usage)?;
    }
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
        .map(|&r| NodeRecord::new(r, job.topology.nodes[r].host.clone()))
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
    };
    let node::Started {
        handles,
        events,
        mut tasks,
        stdin,
    } = started;
    let channels = dispatch::Channels {
        events,
        output_closed: closed_rx,
    };
    let mut result = dispatch::run(&spec, records, handles, channels, writer, stops).await;
    while tasks.join_next().await.is_some() {}
    if let Some(reader) = stdin {
        reader.abort();
    }
    // Every sink is gone with its task: the writer thread drains and ends.
    let failure = tokio::task::spawn_blocking(move || writer_thread.join())
        .await
        .ok()
        .flatten();
    result.agents_stay = agents_stay;
    result.output_failure =
        failure.and_then(|(fd, e)| crate::stdio::failure_line(crate::logging::program(), fd, &e));
    Ok(result)
}
