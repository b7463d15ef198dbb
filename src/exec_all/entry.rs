//! exec_all's entry points: an invocation run (`run`: one launch, or
//! attempts with restarts and spares), `collect` for `check` (every node's
//! output gathered), and [`on_runtime`], the one runtime a run or all its
//! attempts run on, with the stop signals listened for from its start.

use std::time::Duration;

use super::attempts;
use super::finish;
use super::job_store::{StoreLink, StoreMode};
use super::one_launch::launch;
use super::options::{Invocation, Role, RunOptions};
use super::record::NodeOutcome;
use super::script::Script;
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::signals::{STOP_SIGNALS, Stops};

/// Runs what exec-all was asked (`invocation.rs` read it): one launch, or
/// attempts with restarts and spares; then the end the user, or the head
/// of a relay, reads.
pub(crate) fn run(invocation: Invocation, env: &EnvMap) -> Result<i32, Error> {
    let Invocation {
        job,
        mut options,
        role,
    } = invocation;
    let restarts = match &role {
        Role::Head(head) => head.restarts.as_ref(),
        Role::Relay => None,
    };
    let (result, attempts) = on_runtime(async |stops| {
        // The job's store, one for the whole run (the head's alone),
        // started by its first attempt.
        let store = options
            .procs
            .as_mut()
            .filter(|p| p.head && p.store == StoreMode::Auto)
            .map(|procs| procs.hosted.insert(StoreLink::new()).clone());
        let ran = match restarts {
            None => launch(&job, env, options, stops).await.map(|r| (r, None)),
            Some(restarts) => attempts::run(&job, env, restarts, options, stops)
                .await
                .map(|(result, attempts)| (result, Some(attempts))),
        };
        if let Some(store) = store {
            store.end().await;
        }
        ran
    })?;
    finish::end(result, attempts, &role)
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

/// What one node's command left, for callers that gather output instead of passing it on.
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
        show_start: false,
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
