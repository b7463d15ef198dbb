//! `multinode agent -- JOB`, the same command on every node.
//!
//! A worker serves, and holds a `#multinode:wait-release` open to the head's
//! agent: it ends when the head releases it, or when the head has been
//! unreachable for the idle timeout. The head waits until every worker
//! answers a ping (up to a deadline; the error names the missing nodes), runs
//! JOB with the environment contract, releases the workers and exits with
//! JOB's status.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::Command;
use tracing::{debug, info, warn};

use super::Shared;
use crate::env::Job;
use crate::error::Error;
use crate::process::GroupChild;
use crate::stops::{STOP_SIGNALS, Stops};
use crate::transport::client::{Auth, Connector, Target};

/// Between two attempts to reach a node that is not up yet.
const RETRY: Duration = Duration::from_millis(250);
/// One attempt's limit.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct Plan {
    pub job: Job,
    pub argv: Vec<OsString>,
    pub idle_timeout: Duration,
    pub wait_timeout: Duration,
}

/// A plain agent: serve until SIGTERM/SIGINT/SIGHUP or a release.
pub(crate) async fn serve_until_stopped(shared: &Shared) -> Result<i32, Error> {
    let mut stops = Stops::new(STOP_SIGNALS)?;
    tokio::select! {
        sig = stops.next() => info!(?sig, "stopping"),
        () = shared.released.cancelled() => info!("released: stopping"),
    }
    Ok(0)
}

pub(crate) async fn run(shared: &Arc<Shared>, plan: Plan) -> Result<i32, Error> {
    let connector = Connector::new(Auth::Agent(Arc::new(shared.keys.clone())), ATTEMPT_TIMEOUT);
    if plan.job.rank == 0 {
        head(shared, &plan, &connector).await
    } else {
        worker(shared, &plan, &connector).await
    }
}

fn target(job: &Job, rank: usize) -> Target {
    Target {
        host: job.topology.nodes[rank].host.clone(),
        port: job.agent_port,
        user: "multinode".into(),
    }
}

async fn head(shared: &Arc<Shared>, plan: &Plan, connector: &Connector) -> Result<i32, Error> {
    let mut stops = Stops::new(STOP_SIGNALS)?;
    let waiting = wait_for_workers(&plan.job, connector, plan.wait_timeout);
    let ready = tokio::select! {
        ready = waiting => ready,
        sig = stops.next() => {
            info!(?sig, "stopped while waiting for the workers");
            return Ok(crate::exit_code::from_signal(sig));
        }
    };
    ready?;
    info!(
        nodes = plan.job.topology.nodes.len(),
        "every worker answered: starting the job"
    );

    // Under `multinode supervise`: JOB ends even if this agent is killed.
    let mut cmd = Command::from(crate::supervise::wrap(
        &shared.bin,
        shared.grace,
        &plan.argv,
    ));
    cmd.envs(shared.base_env.iter().map(|(k, v)| (k, v)));
    let mut child = GroupChild::spawn(&mut cmd).map_err(|e| {
        Error::usage(format!(
            "cannot run the job {:?}: {e}",
            plan.argv[0].to_string_lossy()
        ))
    })?;
    let mut signals = 0;
    let outcome = loop {
        tokio::select! {
            status = child.wait() => break status,
            sig = stops.next() => {
                signals += 1;
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
    crate::process::end_group(child.pgid(), shared.grace).await;
    child.disarm();
    let outcome = outcome.map_err(|e| Error::Failed(format!("cannot wait for the job: {e}")))?;
    info!(%outcome, "job ended: releasing the workers");
    shared.released.cancel();
    release_workers(&plan.job, connector).await;
    Ok(outcome.shell_code())
}

/// Pings every worker until it answers as the rank it should be.
async fn wait_for_workers(job: &Job, connector: &Connector, limit: Duration) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut tasks = tokio::task::JoinSet::new();
    for rank in 1..job.topology.nodes.len() {
        let target = target(job, rank);
        let connector = connector.clone();
        tasks.spawn(async move {
            let mut last;
            loop {
                match connector.connect(&target).await {
                    Ok(conn) => {
                        let reply = conn.ping().await;
                        conn.close().await;
                        match reply {
                            Ok(reply) if reply.rank.is_none_or(|r| r == rank) => {
                                debug!(rank, host = %target.host, "worker answered");
                                return (rank, target, Ok(()));
                            }
                            Ok(reply) => {
                                let msg = format!(
                                    "answers as rank {} ({}): is the hostlist the same on every node?",
                                    reply.rank.unwrap_or_default(),
                                    reply.host
                                );
                                return (rank, target, Err(msg));
                            }
                            Err(e) => last = e,
                        }
                    }
                    // A wrong secret will not fix itself: say so at once.
                    Err(e @ (crate::transport::client::ConnectError::WrongHostKey { .. }
                    | crate::transport::client::ConnectError::AgentAuth { .. })) => {
                        return (rank, target, Err(e.to_string()));
                    }
                    Err(e) => last = e.to_string(),
                }
                if tokio::time::Instant::now() + RETRY >= deadline {
                    let why = format!("no answer within {:.0} s; last: {last}", limit.as_secs_f64());
                    return (rank, target, Err(why));
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }
    let mut missing = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (rank, target, result) = done.expect("worker probes do not panic");
        if let Err(why) = result {
            missing.push((rank, target, why));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    missing.sort_by_key(|(rank, _, _)| *rank);
    let list = missing
        .iter()
        .map(|(rank, target, why)| format!("rank {rank} {target} ({why})"))
        .collect::<Vec<_>>()
        .join("; ");
    Err(Error::Connection(format!(
        "{} of {} workers are not ready, so the job does not start: {list}",
        missing.len(),
        job.topology.nodes.len() - 1,
    )))
}

async fn release_workers(job: &Job, connector: &Connector) {
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

async fn worker(shared: &Arc<Shared>, plan: &Plan, connector: &Connector) -> Result<i32, Error> {
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
/// is unreachable for less than the idle timeout. Until the job first
/// reaches this node the head may still be starting, so the wait is then as
/// long as the head's own wait for its workers.
async fn follow_head(
    shared: &Shared,
    head: &Target,
    connector: &Connector,
    plan: &Plan,
) -> Result<i32, Error> {
    let started = tokio::time::Instant::now();
    let mut lost_at: Option<tokio::time::Instant> = None;
    loop {
        match connector.connect(head).await {
            Ok(conn) => {
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
            Err(e) => {
                // Unreachable since the last sign of the job, or since we started.
                let (since, limit) = match lost_at.max(shared.last_contact()) {
                    Some(at) => (at, plan.idle_timeout),
                    None => (started, plan.wait_timeout.max(plan.idle_timeout)),
                };
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
