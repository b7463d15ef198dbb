//! What restarts say on stderr: each attempt's end and what the pool
//! decided, why the run stopped, the summary of every attempt.

use std::fmt::Write as _;

use super::record::{CancelReason, RunResult};
use super::run_report::AttemptReport;
use super::verdict::Verdict;
use crate::env::Job;
use crate::restart::{Exclusion, Pool, Stop};

pub(super) fn host(job: &Job, node: usize) -> String {
    job.topology.nodes[node].host.clone()
}

/// `attempt 0: rank 2 (node3) lost; node3 excluded, spare node5 joins; restart 1 of 3 on node1,...`
pub(super) fn restart_line(
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
pub(super) fn failure(result: &RunResult, verdict: Option<&Verdict>) -> String {
    if result.cancelled == Some(CancelReason::Hung) {
        return "hung (no output or heartbeat for --hang-timeout)".into();
    }
    match verdict {
        Some(v) => format!("{} {}", v.who(), v.how),
        None => format!("exit {}", result.exit_code),
    }
}

pub(super) fn stop_line(job: &Job, stop: &Stop) -> String {
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
pub(super) fn summary(records: &[AttemptReport]) -> String {
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

pub(super) fn say(line: &str) {
    crate::stdio::eprint(&format!("{}: {line}\n", crate::logging::program()));
}
