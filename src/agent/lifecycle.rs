//! `multinode agent -- JOB`, the same command on every node.
//!
//! A worker serves, and holds a `#multinode:wait-release` open to the head's
//! agent: it ends when the head releases it, when the head has been
//! unreachable for the idle timeout, or as soon as a head found to be of
//! another job (another secret) is gone. The head waits until every worker
//! answers a ping (up to a deadline; the error names the missing nodes; a
//! worker of another job ends the wait at once), runs JOB with the
//! environment contract, releases the workers and exits with JOB's status. A
//! head that ends without running JOB (a missing worker, a signal) releases
//! the workers too: they have nothing left to wait for.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tracing::{debug, info, warn};

use super::head_wait::{ATTEMPT_TIMEOUT, RETRY, target, wait_for_workers};
use super::mux_pool::ConnectionPool;
use super::shared::Shared;
use crate::env::Job;
use crate::error::Error;
use crate::process::{GroupChild, Spawn};
use crate::signals::{STOP_SIGNALS, Stops};
use crate::transport::client::{Auth, ConnectError, Connector, Target};

/// One release's limit when the head gives up before the job.
const RELEASE_ON_GIVE_UP: Duration = Duration::from_secs(2);
/// After a signal was passed to JOB, how long past the grace period JOB's
/// group has to end on its own (exec_all's SIGKILL to its nodes and its
/// report) before it is SIGKILLed, its leader with it: a JOB that ignores
/// the signal does not keep the head.
const SIGNALLED_JOB_MARGIN: Duration = Duration::from_secs(3);

pub(crate) struct JobRun {
    pub job: Job,
    pub argv: Vec<OsString>,
    pub idle_timeout: Duration,
    pub wait_timeout: Duration,
    /// On the head: the shared connections and their socket, for JOB.
    pub mux: Option<(Arc<ConnectionPool>, PathBuf)>,
}

/// Up to this many workers, the head keeps the connections it pinged them
/// on for JOB's exec_all (a flat run, at exec_all's default fan-out); past
/// it, exec_all reaches the nodes through relays and the shared
/// connections are made as it asks for them.
const KEEP_PINGED_UP_TO: usize = 256;

/// A plain agent: serve until SIGTERM/SIGINT/SIGHUP or a release.
pub(crate) async fn serve_until_stopped(shared: &Shared) -> Result<i32, Error> {
    let mut stops = Stops::new(STOP_SIGNALS)?;
    tokio::select! {
        sig = stops.next() => info!(?sig, "stopping"),
        () = shared.released.cancelled() => info!("released: stopping"),
    }
    Ok(0)
}

pub(crate) async fn run(shared: &Arc<Shared>, plan: JobRun) -> Result<i32, Error> {
    let connector = Connector::new(Auth::Agent(Arc::new(shared.keys.clone())), ATTEMPT_TIMEOUT);
    if plan.job.rank == 0 {
        head(shared, &plan, &connector).await
    } else {
        worker(shared, &plan, &connector).await
    }
}

async fn head(shared: &Arc<Shared>, plan: &JobRun, connector: &Connector) -> Result<i32, Error> {
    let mut stops = Stops::new(STOP_SIGNALS)?;
    let workers = plan.job.topology.nodes.len().saturating_sub(1);
    let keep = match &plan.mux {
        Some((pool, _)) if workers <= KEEP_PINGED_UP_TO => Some(pool.clone()),
        _ => None,
    };
    let waiting = wait_for_workers(&plan.job, connector, plan.wait_timeout, keep);
    // Some(how the head ends) when JOB will not run.
    let gave_up = tokio::select! {
        ready = waiting => ready.err().map(Err),
        sig = stops.next() => {
            info!(?sig, "stopped while waiting for the workers");
            Some(Ok(crate::exit_code::from_signal(sig)))
        }
    };
    if let Some(end) = gave_up {
        // The workers that are up have nothing left to wait for, and must not
        // wait out their idle timeout. Those that are not up cost a short try.
        let connector = connector.clone().with_timeout(RELEASE_ON_GIVE_UP);
        release(shared, &plan.job, &connector).await;
        return end;
    }
    info!(
        nodes = plan.job.topology.nodes.len(),
        "every worker answered: starting the job"
    );
    // JOB's `multinode env` (the helper's) sees the list folded already and
    // says nothing: the note is the agent's, once.
    if let Some(note) =
        crate::env::Contract::new(&plan.job).folded_note(&crate::env_map::EnvMap::default())
    {
        warn!("{note}");
    }

    // Under `multinode supervise`: JOB ends even if this agent is killed.
    let mut cmd = Spawn::from_std(&crate::supervise::wrap(
        &shared.bin,
        shared.grace,
        None,
        &plan.argv,
    ));
    cmd.envs(shared.base_env.iter().map(|(k, v)| (k, v)));
    if let Some((_, path)) = &plan.mux {
        cmd.env(crate::vars::MUX_SOCKET, path);
    }
    let mut child = GroupChild::spawn(&cmd).map_err(|e| {
        Error::usage(format!(
            "cannot run the job {:?}: {e}",
            plan.argv[0].to_string_lossy()
        ))
    })?;
    // `multinode ps` shows the job's tree: exec_all and the head's own node.
    shared.running.add(child.pgid());
    let mut signals = 0;
    let mut first_signal = None;
    // Once signalled: when the group is SIGKILLed, leader and all.
    let mut kill_at: Option<tokio::time::Instant> = None;
    let outcome = loop {
        let kill = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => break status,
            () = kill => {
                warn!(
                    grace = ?shared.grace,
                    "the job did not end within the grace period after the signal: SIGKILL"
                );
                child.signal(Signal::SIGKILL);
                kill_at = None;
            }
            sig = stops.next_distinct() => {
                signals += 1;
                let at = *first_signal.get_or_insert_with(tokio::time::Instant::now);
                if signals == 1 {
                    kill_at = Some(at + shared.grace + SIGNALLED_JOB_MARGIN);
                }
                let sent = if signals == 1 {
                    Signal::try_from(sig).unwrap_or(Signal::SIGTERM)
                } else {
                    Signal::SIGKILL
                };
                info!(?sent, "forwarding a signal to the job");
                child.signal(sent);
            }
        }
    };
    // The leader is gone; nothing it started outlives it.
    match first_signal {
        // The group has the signal already. A shell that ran exec_all dies of
        // it at once while exec_all is still ending its nodes: another
        // SIGTERM would be a second signal to exec_all (SIGKILL everywhere, no
        // grace). Let the group end, then SIGKILL what is left.
        Some(at) => {
            let deadline = at + shared.grace + SIGNALLED_JOB_MARGIN;
            crate::process::kill_group_at(child.pgid(), deadline).await;
        }
        None => crate::process::end_group(child.pgid(), shared.grace).await,
    }
    child.disarm();
    shared.running.remove(child.pgid());
    let outcome = outcome.map_err(|e| Error::Failed(format!("cannot wait for the job: {e}")))?;
    info!(%outcome, "job ended: releasing the workers");
    // Stopped by a signal: a worker that does not answer holds the head's
    // end no longer than a short try.
    let connector = match first_signal {
        Some(_) => &connector.clone().with_timeout(RELEASE_ON_GIVE_UP),
        None => connector,
    };
    release(shared, &plan.job, connector).await;
    Ok(outcome.shell_code())
}

/// Releases the workers: those holding a wait-release on this agent at once,
/// and every worker through its own agent too (one between two connections
/// to the head, or not connected yet, would miss the first).
async fn release(shared: &Shared, job: &Job, connector: &Connector) {
    shared.released.cancel();
    let mut tasks = tokio::task::JoinSet::new();
    for rank in 1..job.topology.nodes.len() {
        let target = target(job, rank);
        let connector = connector.clone();
        tasks.spawn(async move {
            match connector.connect(&target).await {
                Ok(conn) => {
                    if let Err(e) = conn.release().await {
                        debug!(rank, error = %e, "release not acknowledged");
                    }
                    conn.close().await;
                }
                Err(e) => debug!(rank, error = %e, "worker not reachable for release"),
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

async fn worker(shared: &Arc<Shared>, plan: &JobRun, connector: &Connector) -> Result<i32, Error> {
    let mut stops = Stops::new(STOP_SIGNALS)?;
    let head = target(&plan.job, 0);
    tokio::select! {
        result = follow_head(shared, &head, connector, plan) => result,
        () = shared.released.cancelled() => {
            info!("released by the head");
            Ok(0)
        }
        sig = stops.next() => {
            info!(?sig, "stopping");
            Ok(0)
        }
    }
}

/// Holds a wait-release request open to the head; reconnects while the head
/// is unreachable for less than the idle timeout.
///
/// A head of another job (another secret) is not this node's head: once
/// seen, this node stops as soon as that head is gone (it gave up: it found
/// this node to be of another job too, so its error says so), or after the
/// usual limit. Stopping at once instead would often leave the head to wait
/// out its --wait-timeout for a node that is no longer there.
///
/// Until the job first reaches this node (its head connecting to ping it, or
/// this node reaching the head) the head may still be starting, so the wait
/// is then as long as the head's own wait for its workers; after that, the
/// idle timeout counts from the last sign of the job.
async fn follow_head(
    shared: &Shared,
    head: &Target,
    connector: &Connector,
    plan: &JobRun,
) -> Result<i32, Error> {
    let started = tokio::time::Instant::now();
    let mut lost_at: Option<tokio::time::Instant> = None;
    // Unreachable since when, and for how long that may last.
    let since_and_limit =
        |lost_at: Option<tokio::time::Instant>| match lost_at.max(shared.last_contact()) {
            Some(at) => (at, plan.idle_timeout),
            None => (started, plan.wait_timeout.max(plan.idle_timeout)),
        };
    let mut wrong_job: Option<ConnectError> = None;
    loop {
        match connector.connect(head).await {
            Ok(conn) => {
                wrong_job = None;
                debug!(head = %head, "following the head");
                let result = conn.wait_release().await;
                conn.close().await;
                match result {
                    Ok(()) => {
                        info!("the head released this node");
                        return Ok(0);
                    }
                    Err(e) => warn!(head = %head, error = %e, "lost the head; reconnecting"),
                }
                lost_at = Some(tokio::time::Instant::now());
            }
            Err(e) if e.is_wrong_job() => {
                if wrong_job.is_none() {
                    warn!(head = %head, error = %e, "the head is of another job");
                }
                let (since, limit) = since_and_limit(lost_at);
                if since.elapsed() >= limit {
                    return Err(wrong_head(&e));
                }
                wrong_job = Some(e);
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => {
                debug!(head = %head, error = %e, "head not reachable");
                if let Some(wrong) = &wrong_job {
                    return Err(wrong_head(wrong));
                }
                let (since, limit) = since_and_limit(lost_at);
                if since.elapsed() >= limit {
                    return Err(Error::Connection(format!(
                        "the head {head} has been unreachable for {:.0} s ({e}); ending this node's commands",
                        limit.as_secs_f64()
                    )));
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

fn wrong_head(e: &ConnectError) -> Error {
    Error::Connection(format!("cannot follow the head: {e}"))
}
