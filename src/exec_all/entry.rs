//! exec_all's entry points: the command (`main`: one run, or attempts with
//! restarts and spares), `collect` for `check` (every node's output
//! gathered), and [`on_runtime`], the one runtime a run or all its
//! attempts run on, with the stop signals listened for from its start.

use std::time::Duration;

use super::attempts;
use super::finish;
use super::launch::launch;
use super::options::RunOptions;
use super::record::NodeOutcome;
use super::script::Script;
use crate::cli::ExecAllArgs;
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::signals::{STOP_SIGNALS, Stops};

/// `multinode exec-all`, `mn-exec-all`, the helper's `exec_all`.
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
    if (restarts.is_some() || job.spares > 0) && (args.nodes.is_some() || args.exclude.is_some()) {
        return Err(Error::usage(
            "--nodes and --exclude choose ranks of one run; with restarts or spares the ranks \
             change from one attempt to the next: drop them, or run without restarts and spares",
        ));
    }
    let (result, attempts) = on_runtime(async |stops| {
        if restarts.is_none() && job.spares == 0 {
            return Ok((launch(&job, &env, options, stops).await?, None));
        }
        let restarts = restarts.unwrap_or_default();
        let (result, attempts) = attempts::run(&job, &env, &restarts, options, stops).await?;
        Ok((result, Some(attempts)))
    })?;
    finish::end(result, attempts, &args)
}

/// Runs `work` on a new runtime, with the stop signals (SIGINT, SIGTERM,
/// SIGHUP) listened for from before it starts until it returns: one
/// between two attempts waits in `stops` for the next.
pub(crate) fn on_runtime<T>(
    work: impl AsyncFnOnce(&mut Stops) -> Result<T, Error>,
) -> Result<T, Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the async runtime: {e}")))?;
    let result = runtime.block_on(async {
        let mut stops = Stops::new(STOP_SIGNALS)?;
        work(&mut stops).await
    });
    // A stdin reader may be parked in a blocking read: do not wait for it.
    runtime.shutdown_background();
    result
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
/// Every node gets at most `timeout`; a stop signal meanwhile is passed on.
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
    let mut stops = Stops::new(STOP_SIGNALS)?;
    let result = launch(job, &env, options, &mut stops).await?;
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
