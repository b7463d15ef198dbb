//! Restarts (docs/restarts.md): a run as attempts. Each attempt runs on
//! the nodes `restart::Pool` gives, ranked 0.. in hostlist order
//! (`Job::attempt`), with `MULTINODE_RESTART_COUNT` and
//! `MULTINODE_MAX_RESTARTS`; before it, an optional health check on every
//! node still in the run. After a failed attempt the pool says which node
//! leaves, which spare joins, and whether to run again.

use std::time::{SystemTime, UNIX_EPOCH};

use super::attempt_lines::{failure, host, restart_line, say, stop_line, summary};
use super::health_check::{Health, HealthStep, health_step, stopped_before};
use super::one_launch::launch;
use super::options::{Restarts, RunOptions};
use super::record::{CancelReason, NodeOutcome, RunResult};
use super::run_report::{self, AttemptReport, Excluded};
use super::verdict;
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::restart::{AttemptEnd, Cause, Decision, Pool, Stop};
use crate::signals::Stops;
use crate::vars;

/// Runs `base` over the pool's nodes until success, a stop, or the
/// restarts are spent, each attempt and health check a launch on the
/// caller's runtime, with its stop signals. Returns the last attempt's
/// result and every attempt's record.
pub(crate) async fn run(
    job: &Job,
    env: &EnvMap,
    restarts: &Restarts,
    base: RunOptions,
    stops: &mut Stops,
) -> Result<(RunResult, Vec<AttemptReport>), Error> {
    if job.rank != 0 {
        return Err(Error::usage(format!(
            "restarts and spares need exec_all on the head (rank 0, {}); this machine is rank {}",
            job.topology.nodes[0].host, job.rank
        )));
    }
    let nodes = job.topology.nodes.len();
    let mut pool = Pool::new(nodes, job.spares, restarts.min_nodes, restarts.max_restarts)
        .map_err(|e| Error::usage(e.to_string()))?;
    let mut records: Vec<AttemptReport> = Vec::new();
    let mut failed_at: Option<f64> = None;
    loop {
        let attempt = pool.restarts();
        let health = match &restarts.health_check {
            Some(cmd) => match health_step(job, env, restarts, cmd, &mut pool, stops).await? {
                HealthStep::Passed(health) => health,
                HealthStep::End(ended, stopped) => {
                    let (result, record) = *ended;
                    records.push(record);
                    if stopped || attempt > 0 {
                        say(&summary(&records));
                    }
                    return Ok((result, records));
                }
            },
            None => Health::default(),
        };
        let active = pool.active();
        let options = attempt_options(&base, restarts, attempt);
        let result = launch(&job.attempt(&active), env, options, stops).await?;
        let decision = pool.after(&attempt_end(&result, &active));
        let restart_s = failed_at.and_then(|at| all_started(&result).map(|s| s - at));
        let record = attempt_record(job, attempt, &active, &result, &decision, health);
        failed_at = record.verdict.as_ref().map(|v| v.at);
        let failure = record.failure.clone().unwrap_or_default();
        records.push(AttemptReport {
            restart_s,
            ..record
        });
        match decision {
            Decision::Restart { excluded } => {
                // What the user would have read had the run ended here.
                crate::stdio::eprint(&run_report::table(&result));
                say(&restart_line(job, attempt, &failure, &excluded, &pool));
                // A signal since the attempt's end waited in `stops`: the
                // next attempt does not start.
                if let Some(signo) = stops.try_next() {
                    let exit_code = crate::exit_code::from_signal(signo);
                    let failure = format!("not started: stopped by signal {signo}");
                    records.push(stopped_before(job, &pool, &failure, exit_code));
                    say(&summary(&records));
                    let result = RunResult {
                        exit_code,
                        cancelled: Some(CancelReason::Signal(signo)),
                        ..result
                    };
                    return Ok((result, records));
                }
            }
            Decision::Stop(stop) => {
                if attempt > 0 || stop != Stop::Succeeded {
                    say(&summary(&records));
                }
                return Ok((result, records));
            }
        }
    }
}

/// The options of attempt `attempt`: its restart count, no spare in its
/// lists, stdin for the first alone, `--output` in a folder of its own.
fn attempt_options(base: &RunOptions, restarts: &Restarts, attempt: u32) -> RunOptions {
    RunOptions {
        attempt_env: vec![
            (vars::RESTART_COUNT.into(), attempt.to_string()),
            (vars::MAX_RESTARTS.into(), restarts.max_restarts.to_string()),
            // The attempt's lists hold no spare: `multinode env` on a
            // node must not split one off again.
            (vars::SPARES.into(), "0".into()),
        ],
        // Stdin is read once: later attempts get none.
        forward_stdin: base.forward_stdin && attempt == 0,
        output_dir: base.output_dir.as_ref().map(|dir| {
            if restarts.max_restarts > 0 {
                dir.join(format!("attempt-{attempt}"))
            } else {
                dir.clone()
            }
        }),
        ..base.clone()
    }
}

/// An attempt's record, from its result and what the pool decided after it
/// (`restart_s` is the caller's).
fn attempt_record(
    job: &Job,
    attempt: u32,
    active: &[usize],
    result: &RunResult,
    decision: &Decision,
    health: Health,
) -> AttemptReport {
    // Built once: it reads every node's record and last lines.
    let verdict = verdict::build(result);
    let excluded = match decision {
        Decision::Restart { excluded } => excluded.clone(),
        Decision::Stop(Stop::HeadFailed(why)) => vec![(0, why.clone())],
        Decision::Stop(_) => Vec::new(),
    };
    AttemptReport {
        attempt,
        hosts: active.iter().map(|&i| host(job, i)).collect(),
        health_failed: health.failed,
        health_check_s: health.took,
        exit_code: result.exit_code,
        failure: (result.exit_code != 0).then(|| failure(result, verdict.as_ref())),
        verdict,
        snapshot: (result.cancelled == Some(CancelReason::Hung))
            .then(|| result.snapshot.clone())
            .flatten(),
        excluded: excluded
            .iter()
            .map(|(i, why)| Excluded {
                host: host(job, *i),
                why: why.to_string(),
            })
            .collect(),
        restart_s: None,
        then: match decision {
            Decision::Restart { .. } => "restart".into(),
            Decision::Stop(stop) => stop_line(job, stop),
        },
    }
}

/// How the attempt ended, for the pool; `nodes[rank]` is a rank's node.
fn attempt_end(result: &RunResult, nodes: &[usize]) -> AttemptEnd {
    if result.exit_code == 0 {
        return AttemptEnd::Succeeded;
    }
    let lost = lost_besides(result, nodes);
    match result.cancelled {
        Some(CancelReason::Hung) => {
            return AttemptEnd::Failed {
                node: None,
                cause: Cause::Hung,
                lost,
            };
        }
        Some(
            CancelReason::Signal(_)
            | CancelReason::SecondSignal
            | CancelReason::Timeout
            | CancelReason::OutputClosed,
        ) => return AttemptEnd::Stopped,
        Some(CancelReason::NodeFailed) | None => {}
    }
    let Some(rank) = result.first_failure else {
        return AttemptEnd::Stopped;
    };
    // With several processes a node, the failed process's node.
    let failed = result.nodes.iter().find(|n| n.rank == rank);
    let node = failed.map_or(rank, |n| n.node_rank());
    let cause = failed
        .and_then(|n| n.outcome.as_ref())
        .map_or(Cause::Lost, NodeOutcome::cause);
    AttemptEnd::Failed {
        node: nodes.get(node).copied(),
        cause,
        lost: lost
            .into_iter()
            .filter(|(n, _)| Some(n) != nodes.get(node))
            .collect(),
    }
}

/// The nodes, other than the first failure, that were lost or unreachable
/// themselves: not the ranks of a relay that died, which were never heard
/// of (no record of their own, no end) and may be fine.
fn lost_besides(result: &RunResult, nodes: &[usize]) -> Vec<(usize, Cause)> {
    let mut lost: Vec<(usize, Cause)> = Vec::new();
    let others = result
        .nodes
        .iter()
        .filter(|n| Some(n.rank) != result.first_failure && n.ended.is_some());
    for n in others {
        // Only a node that was there and went: unreachable or lost (once,
        // whichever of its processes tells).
        let Some(outcome) = n.outcome.as_ref().filter(|o| o.error().is_some()) else {
            continue;
        };
        let Some(&node) = nodes.get(n.node_rank()) else {
            continue;
        };
        if !lost.iter().any(|(l, _)| *l == node) {
            lost.push((node, outcome.cause()));
        }
    }
    lost
}

/// When the last node of the run started (seconds since the epoch).
fn all_started(result: &RunResult) -> Option<f64> {
    result
        .nodes
        .iter()
        .map(|n| n.started)
        .collect::<Option<Vec<SystemTime>>>()?
        .into_iter()
        .max()
        .map(|t| {
            t.duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64()
        })
}
