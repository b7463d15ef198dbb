//! Restarts (docs/restarts.md): a run as attempts. Each attempt runs on
//! the nodes `restart::Pool` gives, ranked 0.. in hostlist order
//! (`Job::attempt`), with `MULTINODE_RESTART_COUNT` and
//! `MULTINODE_MAX_RESTARTS`; before it, an optional health check on every
//! node still in the run. After a failed attempt the pool says which node
//! leaves, which spare joins, and whether to run again.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::one_launch::launch;
use super::options::{MAX_RESTARTS_VAR, RESTART_COUNT_VAR, Restarts, RunOptions};
use super::record::{CancelReason, NodeOutcome, RunResult};
use super::run_report::{self, AttemptReport, Excluded};
use super::script::Script;
use super::verdict::{self, Verdict};
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::restart::{AttemptEnd, Cause, Decision, Exclusion, Pool, Stop};
use crate::signals::Stops;

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
            (RESTART_COUNT_VAR.into(), attempt.to_string()),
            (MAX_RESTARTS_VAR.into(), restarts.max_restarts.to_string()),
            // The attempt's lists hold no spare: `multinode env` on a
            // node must not split one off again.
            (crate::topology::spares::SPARES_VAR.into(), "0".into()),
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

/// What the health check before an attempt let happen.
enum HealthStep {
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
async fn health_step(
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
struct Health {
    failed: Vec<String>,
    took: std::collections::BTreeMap<String, f64>,
}

/// The record of the pool's next attempt, which a stop signal kept from
/// starting (`failure` says when it came); says its line.
fn stopped_before(job: &Job, pool: &Pool, failure: &str, exit_code: i32) -> AttemptReport {
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

fn host(job: &Job, node: usize) -> String {
    job.topology.nodes[node].host.clone()
}

/// `attempt 0: rank 2 (node3) lost; node3 excluded, spare node5 joins; restart 1 of 3 on node1,...`
fn restart_line(
    job: &Job,
    attempt: u32,
    failure: &str,
    excluded: &[(usize, Exclusion)],
    pool: &Pool,
) -> String {
    let mut line = format!("attempt {attempt}: {failure}");
    for (node, why) in excluded {
        let _ = write!(line, "; {} excluded ({why})", host(job, *node));
    }
    let next = pool.active();
    let joined: Vec<String> = next
        .iter()
        .enumerate()
        .filter(|&(_, &i)| i >= job.topology.nodes.len() - job.spares)
        .map(|(rank, &i)| format!("{} as rank {rank}", host(job, i)))
        .collect();
    if !joined.is_empty() && !excluded.is_empty() {
        let _ = write!(line, ", spare {}", joined.join(", spare "));
    }
    let _ = write!(
        line,
        "; restart {} on {} node(s)",
        pool.restarts(),
        next.len()
    );
    line
}

/// `rank 2 (node3) lost`, `rank 1 (node2) exit 3`, or why it ended.
fn failure(result: &RunResult, verdict: Option<&Verdict>) -> String {
    if result.cancelled == Some(CancelReason::Hung) {
        return "hung (no output or heartbeat for --hang-timeout)".into();
    }
    match verdict {
        Some(v) => format!("{} {}", v.who(), v.how),
        None => format!("exit {}", result.exit_code),
    }
}

fn stop_line(job: &Job, stop: &Stop) -> String {
    match stop {
        Stop::Succeeded => "succeeded".into(),
        Stop::Stopped => "stopped (a signal, --timeout or closed output): not restarted".into(),
        Stop::NoRestartsLeft => "no restart left (--max-restarts)".into(),
        Stop::ProgramFault { cause, nodes } => format!(
            "the fault is in the program, not a node: {cause} first on {} and then on {}",
            host(job, nodes[0]),
            host(job, nodes[1])
        ),
        Stop::HeadFailed(why) => format!(
            "the head ({}) {why}; it runs exec_all and cannot be replaced",
            host(job, 0)
        ),
        Stop::NoSpareLeft { needed, left } => format!(
            "no spare left: {left} node(s) in the run, {needed} needed (--min-nodes lets it shrink)"
        ),
    }
}

/// `attempt 0: rank 2 (node3) lost; attempt 1 succeeded`.
fn summary(records: &[AttemptReport]) -> String {
    let parts: Vec<String> = records
        .iter()
        .map(|r| {
            let what = r.failure.as_deref().unwrap_or("succeeded");
            let mut part = format!("attempt {}: {what}", r.attempt);
            for x in &r.excluded {
                let _ = write!(part, ", {} excluded", x.host);
            }
            if r.then != "restart" && r.then != "succeeded" {
                let _ = write!(part, "; {}", r.then);
            }
            part
        })
        .collect();
    parts.join("; ")
}

fn say(line: &str) {
    crate::stdio::eprint(&format!("{}: {line}\n", crate::logging::program()));
}
