//! The health check before an attempt (`--health-check CMD`): run on every
//! node still in the run, spares included; the nodes that fail it are
//! excluded, and the run ends there when exec_all was stopped meanwhile,
//! the head failed it, or too few nodes passed it.

use std::time::Duration;

use super::attempt_lines::{host, say, stop_line};
use super::one_launch::launch;
use super::options::{Restarts, RunOptions};
use super::record::{CancelReason, NodeOutcome, RunResult};
use super::run_report::AttemptReport;
use super::script::Script;
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::restart::{Pool, Stop};
use crate::signals::Stops;

/// What the health check before an attempt let happen.
pub(super) enum HealthStep {
    /// The attempt starts; the check's nodes that failed it and were
    /// excluded, and how long it took on each.
    Passed(Health),
    /// The run ends before the attempt: its result, the attempt's record,
    /// and whether exec_all was stopped (else too few nodes passed).
    End(Box<(RunResult, AttemptReport)>, bool),
}

/// The health check before the pool's next attempt: the nodes that fail it
/// are excluded; the run ends here when exec_all was stopped meanwhile,
/// the head failed it, or too few nodes passed it.
pub(super) async fn health_step(
    job: &Job,
    env: &EnvMap,
    restarts: &Restarts,
    cmd: &str,
    pool: &mut Pool,
    stops: &mut Stops,
) -> Result<HealthStep, Error> {
    let attempt = pool.restarts();
    let (failing, check) = match health(job, env, pool, cmd, restarts.health_timeout, stops).await?
    {
        Checked::Failing(nodes, check) => (nodes, check),
        // A signal or closed output while the check ran: the run
        // stops there, as it would in an attempt; no node failed.
        Checked::Stopped(result) => {
            let failure = "not started: stopped during the health check";
            let record = stopped_before(job, pool, failure, result.exit_code);
            return Ok(HealthStep::End(Box::new((result, record)), true));
        }
    };
    let health_failed: Vec<String> = failing.iter().map(|&i| host(job, i)).collect();
    if !failing.is_empty() {
        say(&format!(
            "health check: {} failed; excluded",
            health_failed.join(", ")
        ));
    }
    let took = check
        .nodes
        .iter()
        .filter_map(|n| Some((n.host.clone(), n.duration()?.as_secs_f64())))
        .collect();
    let Err(stop) = pool.health_failed(&failing) else {
        return Ok(HealthStep::Passed(Health {
            failed: health_failed,
            took,
        }));
    };
    // No attempt can start (the head failed the check, or too few nodes
    // passed it): the run ends here, with the check's run as its result
    // (its table names each failing node and its last lines) and exit 1.
    let why = stop_line(job, &stop);
    say(&format!("attempt {attempt}: not started: {why}"));
    let record = AttemptReport {
        attempt,
        hosts: pool.active().iter().map(|&i| host(job, i)).collect(),
        health_failed,
        health_check_s: took,
        exit_code: crate::exit_code::RUN_STOPPED,
        failure: Some("not started".into()),
        verdict: None,
        snapshot: None,
        excluded: Vec::new(),
        restart_s: None,
        then: why,
    };
    let result = RunResult {
        exit_code: crate::exit_code::RUN_STOPPED,
        ..check
    };
    Ok(HealthStep::End(Box::new((result, record)), false))
}

/// What the health check before an attempt left: the nodes that failed it,
/// and how long it took on each (by host).
#[derive(Default)]
pub(super) struct Health {
    pub(super) failed: Vec<String>,
    pub(super) took: std::collections::BTreeMap<String, f64>,
}

/// The record of the pool's next attempt, which a stop signal kept from
/// starting (`failure` says when it came); says its line.
pub(super) fn stopped_before(
    job: &Job,
    pool: &Pool,
    failure: &str,
    exit_code: i32,
) -> AttemptReport {
    let attempt = pool.restarts();
    say(&format!("attempt {attempt}: {failure}"));
    AttemptReport {
        attempt,
        hosts: pool.active().iter().map(|&i| host(job, i)).collect(),
        health_failed: Vec::new(),
        health_check_s: Default::default(),
        exit_code,
        failure: Some(failure.to_string()),
        verdict: None,
        snapshot: None,
        excluded: Vec::new(),
        restart_s: None,
        then: stop_line(job, &Stop::Stopped),
    }
}

/// What the health check before an attempt found.
enum Checked {
    /// These nodes failed it, or did not end it within its timeout; the
    /// check's run.
    Failing(Vec<usize>, RunResult),
    /// exec_all was stopped while it ran (a signal, its output closed):
    /// the check's run, which says how.
    Stopped(RunResult),
}

/// Runs `cmd` on every node still in the run, spares included: the nodes
/// that fail it (or do not end it within `timeout`), unless exec_all was
/// stopped meanwhile.
async fn health(
    job: &Job,
    env: &EnvMap,
    pool: &Pool,
    cmd: &str,
    timeout: Duration,
    stops: &mut Stops,
) -> Result<Checked, Error> {
    let mut candidates = pool.active();
    candidates.extend(pool.spares());
    let options = RunOptions {
        fail_fast: false,
        timeout: Some(timeout),
        label: true,
        health_check: true,
        ..RunOptions::new(Script::Inline(cmd.as_bytes().to_vec()))
    };
    let result = launch(&job.attempt(&candidates), env, options, stops).await?;
    // `--health-timeout` is the check's own `Timeout`: the nodes still in it fail.
    if matches!(
        result.cancelled,
        Some(CancelReason::Signal(_) | CancelReason::SecondSignal | CancelReason::OutputClosed)
    ) {
        return Ok(Checked::Stopped(result));
    }
    let failing = result
        .nodes
        .iter()
        .filter(|n| !n.outcome.as_ref().is_some_and(NodeOutcome::success))
        .map(|n| candidates[n.node_rank()])
        .collect();
    Ok(Checked::Failing(failing, result))
}
