//! The head's wait for its workers: each pinged until it answers (within
//! the wait timeout; a worker of another job ends the wait at once), the
//! workers still waited for named on stderr every so often, and the
//! connections pinged on kept for JOB when it asks.

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::mux_pool::ConnectionPool;
use crate::env::Job;
use crate::error::Error;
use crate::transport::client::{ConnectError, Connection, Connector, Target};

/// Between two attempts to reach a node that is not up yet.
pub(super) const RETRY: Duration = Duration::from_millis(250);
/// One attempt's limit.
pub(super) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a head still waiting for workers says which, on stderr.
const WAITING_REPORT_EVERY: Duration = Duration::from_secs(10);
/// A waiting report names this many workers in full; the others by rank.
const WAITING_REPORT_NAMES: usize = 8;
pub(super) fn target(job: &Job, rank: usize) -> Target {
    Target {
        host: job.topology.nodes[rank].host.clone(),
        port: job.agent_port,
        user: "multinode".into(),
    }
}

/// Why a worker is not ready for the job.
enum NotReady {
    /// No answer before the deadline: the last error seen.
    NoAnswer(String),
    /// It answered, but cannot take part (another job's agent, another
    /// rank): waiting longer will not change that.
    Rejected(String),
}

/// The workers not answered yet, by rank: their address and the last error
/// seen (`None`: no attempt has failed yet).
#[derive(Default)]
struct Waiting(std::sync::Mutex<std::collections::BTreeMap<usize, (Target, Option<String>)>>);

impl Waiting {
    fn map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<usize, (Target, Option<String>)>>
    {
        self.0.lock().expect("not poisoned: no panics while held")
    }

    fn failed(&self, rank: usize, error: &str) {
        if let Some((_, last)) = self.map().get_mut(&rank) {
            *last = Some(error.to_string());
        }
    }

    /// The line a head still waiting prints: which workers, where, and why
    /// not yet (as torchrun's rendezvous says what it waits for).
    fn report(&self, workers: usize, waited: Duration, limit: Duration) -> String {
        let map = self.map();
        let mut named = map
            .iter()
            .take(WAITING_REPORT_NAMES)
            .map(|(rank, (target, last))| {
                let why = last.as_deref().unwrap_or("no answer yet");
                format!("rank {rank} {target} ({why})")
            })
            .collect::<Vec<_>>();
        let rest = map
            .keys()
            .skip(WAITING_REPORT_NAMES)
            .copied()
            .collect::<Vec<_>>();
        if !rest.is_empty() {
            named.push(format!(
                "and {} more (ranks {})",
                rest.len(),
                crate::topology::nodeset::fold_ranks(&rest)
            ));
        }
        format!(
            "multinode: waiting for {} of {workers} workers ({:.0} s of {:.0} s): {}\n",
            map.len(),
            waited.as_secs_f64(),
            limit.as_secs_f64(),
            named.join("; ")
        )
    }
}

/// Pings every worker until it answers as the rank it should be. A worker
/// that rejects this job ends the wait at once. While it waits, every
/// [`WAITING_REPORT_EVERY`] it says on stderr which workers it waits for.
/// With `keep`, the connections of the workers that answered are kept there.
pub(super) async fn wait_for_workers(
    job: &Job,
    connector: &Connector,
    limit: Duration,
    keep: Option<Arc<ConnectionPool>>,
) -> Result<(), Error> {
    let started = tokio::time::Instant::now();
    let deadline = started + limit;
    let waiting = Arc::new(Waiting::default());
    let mut tasks = tokio::task::JoinSet::new();
    for rank in 1..job.topology.nodes.len() {
        let target = target(job, rank);
        waiting.map().insert(rank, (target.clone(), None));
        let connector = connector.clone();
        let keep = keep.clone();
        let waiting = waiting.clone();
        tasks.spawn(async move {
            let result = match probe(&connector, &target, rank, deadline, &waiting).await {
                Ok(conn) => {
                    match keep {
                        Some(pool) => pool.keep(&target, conn).await,
                        None => conn.close().await,
                    }
                    Ok(())
                }
                Err(why) => Err(why),
            };
            (rank, target, result)
        });
    }
    let workers = job.topology.nodes.len() - 1;
    let mut report = tokio::time::interval_at(started + WAITING_REPORT_EVERY, WAITING_REPORT_EVERY);
    let mut missing = Vec::new();
    loop {
        let done = tokio::select! {
            done = tasks.join_next() => match done {
                Some(done) => done,
                None => break,
            },
            at = report.tick() => {
                // The error at the deadline says it all: no report just before it.
                if at + RETRY < deadline {
                    crate::stdio::eprint(&waiting.report(workers, at - started, limit));
                }
                continue;
            }
        };
        let (rank, target, result) = match done {
            Ok(done) => done,
            Err(e) if e.is_cancelled() => continue,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        waiting.map().remove(&rank);
        if let Err(why) = result {
            if matches!(why, NotReady::Rejected(_)) {
                // The job cannot start: the others need not be waited for.
                tasks.abort_all();
            }
            missing.push((rank, target, why));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    missing.sort_by_key(|(rank, _, _)| *rank);
    let rejected = missing
        .iter()
        .any(|(_, _, why)| matches!(why, NotReady::Rejected(_)));
    let list = missing
        .iter()
        .map(|(rank, target, why)| match why {
            NotReady::NoAnswer(e) if rejected => {
                format!("rank {rank} {target} (no answer: {e})")
            }
            NotReady::NoAnswer(e) | NotReady::Rejected(e) => format!("rank {rank} {target} ({e})"),
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(Error::Connection(if rejected {
        format!(
            "{} of {workers} workers cannot join this job: {list}",
            missing.len()
        )
    } else {
        format!(
            "{} of {workers} workers did not answer within {:.0} s: {list}",
            missing.len(),
            limit.as_secs_f64()
        )
    }))
}

/// Tries one worker until it answers as `rank`, it rejects this job, or the
/// deadline; returns the connection it answered on.
async fn probe(
    connector: &Connector,
    target: &Target,
    rank: usize,
    deadline: tokio::time::Instant,
    waiting: &Waiting,
) -> Result<Connection, NotReady> {
    let mut last = None;
    loop {
        let attempt = async {
            let conn = connector.connect(target).await?;
            match conn.ping().await {
                Ok(reply) => Ok::<_, ConnectError>(Ok((reply, conn))),
                Err(e) => {
                    conn.close().await;
                    Ok(Err(e))
                }
            }
        };
        // No attempt outlives the deadline: the wait is what --wait-timeout says.
        match tokio::time::timeout_at(deadline, attempt).await {
            Ok(Ok(Ok((reply, conn)))) if reply.rank.is_none_or(|r| r == rank) => {
                debug!(rank, host = %target.host, "worker answered");
                return Ok(conn);
            }
            Ok(Ok(Ok((reply, conn)))) => {
                conn.close().await;
                return Err(NotReady::Rejected(format!(
                    "answers as rank {} ({}): is the hostlist the same on every node?",
                    reply.rank.unwrap_or_default(),
                    reply.host
                )));
            }
            Ok(Ok(Err(e))) => last = Some(e),
            // Another job's agent: a secret does not fix itself, say so at once.
            Ok(Err(e)) if e.is_wrong_job() => return Err(NotReady::Rejected(e.to_string())),
            Ok(Err(e)) => last = Some(e.to_string()),
            Err(_) => {}
        }
        if let Some(e) = &last {
            waiting.failed(rank, e);
        }
        if tokio::time::Instant::now() + RETRY >= deadline {
            return Err(NotReady::NoAnswer(
                last.unwrap_or_else(|| "no answer before the deadline".into()),
            ));
        }
        tokio::time::sleep(RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(ranks: impl Iterator<Item = usize>) -> Waiting {
        let waiting = Waiting::default();
        for rank in ranks {
            let target = Target {
                host: format!("gpu{rank:02}"),
                port: 29922,
                user: "multinode".into(),
            };
            waiting.map().insert(rank, (target, None));
        }
        waiting
    }

    #[test]
    fn the_waiting_report_names_each_worker_and_its_last_error() {
        let board = waiting([1, 3].into_iter());
        board.failed(
            3,
            "cannot connect to gpu03:29922: Connection refused (os error 111)",
        );
        board.failed(2, "a worker that answered is not reported");
        assert_eq!(
            board.report(3, Duration::from_secs(20), Duration::from_secs(120)),
            "multinode: waiting for 2 of 3 workers (20 s of 120 s): rank 1 gpu01:29922 \
             (no answer yet); rank 3 gpu03:29922 (cannot connect to gpu03:29922: \
             Connection refused (os error 111))\n"
        );
    }

    #[test]
    fn the_waiting_report_folds_many_workers_into_ranks() {
        let board = waiting((1..=100).filter(|r| *r != 50));
        let line = board.report(100, Duration::from_secs(10), Duration::from_secs(120));
        assert!(
            line.ends_with("rank 8 gpu08:29922 (no answer yet); and 91 more (ranks 9-49,51-100)\n"),
            "{line}"
        );
        assert!(
            line.starts_with("multinode: waiting for 99 of 100 workers"),
            "{line}"
        );
    }
}
