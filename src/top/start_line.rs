//! Where the ranks' start went, while they start (pure): one line under
//! the straggler line, and its numbers in the JSON.
//!
//! Each agent knows, of each command it runs, when it started (its spawn),
//! and when its first output line and first heartbeat came. While a rank
//! has printed nothing, the line counts the ranks that did and names the
//! ones still waiting, the longest first, with how long each has been up;
//! a node whose agent runs nothing of the job yet (exec_all has not reached
//! it, or it was skipped) is "not started". Once every rank printed, the
//! line names the last to print and how long after its start, for
//! [`SHOWN_FOR`] after that first line; then it goes.
//!
//! The phases before a spawn (connect, login) are exec_all's to know: where
//! its machine's agent was shown them (`snapshot::run_start`), a waiting
//! rank is told with them, a node exec_all has not reached yet is named as
//! such with the time its run has been up, and the last rank to print is
//! told with every phase of its start and the longest, as exec_all's own
//! start line tells it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::rows::Row;
use crate::snapshot::run_start::{Seen, listed, told};

/// What the runs shown to the agents tell of each rank's start, by rank
/// and host (`run_start::by_rank`).
pub(crate) type Starts = BTreeMap<(usize, String), Seen>;

/// The "started" line stays this long after the last rank's first line.
pub(crate) const SHOWN_FOR: f64 = 30.0;
/// Ranks named on the line; the others are counted.
const NAMED: usize = 3;

/// The start of the ranks this refresh.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Start {
    /// Ranks with a first output line, of `ranks` (ranks whose node did
    /// not answer are left out of both).
    pub printed: usize,
    pub ranks: usize,
    /// The ranks with no output yet, the longest up first.
    pub waiting: Vec<Waiting>,
    /// Once every rank printed: the last rank to, and how long after its start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_first_output_s: Option<f64>,
    /// The last rank's start, each phase and its seconds, as exec_all
    /// knows it (absent: it was not shown).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub last_phases: Vec<(&'static str, f64)>,
    pub line: String,
}

/// A rank still starting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waiting {
    pub rank: usize,
    pub host: String,
    /// Since its command started; absent: its agent runs none yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_s: Option<f64>,
    pub heartbeat: bool,
    /// Its start before its spawn as exec_all knows it: each phase and
    /// its seconds (connect, login, spawn).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<(&'static str, f64)>,
    /// Not started, and exec_all has not reached it though its run has
    /// been up this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreached_for_s: Option<f64>,
    /// What exec_all runs on it is the health check before an attempt.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub health_check: bool,
}

/// Whether a row printed: its agent saw it (its own output, or what
/// exec_all passed on for its node), or exec_all says so (a rank that the
/// head agent sees inside `multinode agent -- JOB`'s tree, whose output
/// goes to JOB, not through the agent).
fn printed(r: &Row, starts: &Starts) -> bool {
    r.first_output_s.is_some()
        || r.output_age_s.is_some()
        || seen(r, starts).is_some_and(|s| s.rank.first_output_ms.is_some())
}

fn seen<'a>(r: &Row, starts: &'a Starts) -> Option<&'a Seen> {
    starts.get(&(r.rank, r.host.clone()))
}

/// When a row printed its first line: seconds after its start, and how
/// long ago; from its agent, else from exec_all's word.
fn first_line(r: &Row, starts: &Starts) -> Option<(f64, f64)> {
    if let (Some(up), Some(first)) = (r.up_s, r.first_output_s) {
        return Some((first, up - first));
    }
    let s = seen(r, starts)?;
    let (spawn, first) = (s.rank.spawn_ms?, s.rank.first_output_ms?);
    let first_s = first as f64 / 1000.0;
    Some((first_s - spawn as f64 / 1000.0, s.run_up_s - first_s))
}

fn describe(w: &Waiting) -> String {
    let (run, what) = match w.health_check {
        true => ("its health check", " in its health check,"),
        false => ("exec_all", ""),
    };
    match (w.up_s, w.unreached_for_s) {
        (None, Some(up)) => format!(
            "rank {} ({}) not started: {run} has not reached it in {up:.1} s",
            w.rank, w.host
        ),
        (None, None) => format!("rank {} ({}) not started", w.rank, w.host),
        (Some(up), _) => format!(
            "rank {} ({}){what} up {up:.1} s, no output{}{}",
            w.rank,
            w.host,
            if w.heartbeat { "" } else { " or heartbeat" },
            match w.phases.is_empty() {
                true => String::new(),
                false => format!(" (its start: {})", listed(&w.phases)),
            }
        ),
    }
}

/// A row that has not printed, with its start before its spawn from the
/// runs shown: its own (by rank and host), or for a node that runs
/// nothing yet (one row, keyed by the node's rank) whether exec_all
/// reached any of its ranks, and whether that was its health check.
fn waiting_of(r: &Row, starts: &Starts) -> Waiting {
    let own = seen(r, starts);
    let (phases, unreached_for_s, health_check) = match own {
        Some(s) if s.rank.spawn_ms.is_some() || r.up_s.is_some() => {
            (s.rank.phases(), None, s.health_check)
        }
        Some(s) => (Vec::new(), Some(s.run_up_s), s.health_check),
        None => {
            let of_host: Vec<&Seen> = starts.values().filter(|s| s.rank.host == r.host).collect();
            let unreached = r.up_s.is_none()
                && !of_host.is_empty()
                && of_host.iter().all(|s| s.rank.spawn_ms.is_none());
            let run_up = of_host.iter().map(|s| s.run_up_s).fold(0.0, f64::max);
            let health_check = of_host.first().is_some_and(|s| s.health_check);
            (Vec::new(), unreached.then_some(run_up), health_check)
        }
    };
    // Up since its spawn: its agent's, else exec_all's word.
    let up_s = r.up_s.or_else(|| {
        let s = own?;
        Some(s.run_up_s - s.rank.spawn_ms? as f64 / 1000.0)
    });
    Waiting {
        rank: r.rank,
        host: r.host.clone(),
        up_s,
        heartbeat: r.heartbeat_age_s.is_some(),
        phases,
        unreached_for_s,
        health_check,
    }
}

/// The start line of `rows`, while there is one to show; `starts`, what
/// the runs shown to the agents tell of each rank's start.
pub(crate) fn judge(rows: &[Row], starts: &Starts) -> Option<Start> {
    let answered: Vec<&Row> = rows.iter().filter(|r| r.error.is_none()).collect();
    if answered.is_empty() {
        return None;
    }
    let mut waiting: Vec<Waiting> = answered
        .iter()
        .filter(|r| !printed(r, starts))
        .map(|r| waiting_of(r, starts))
        .collect();
    // Not started first, then the longest up.
    waiting.sort_by(|a, b| {
        let key = |w: &Waiting| w.up_s.unwrap_or(f64::INFINITY);
        key(b).total_cmp(&key(a)).then(a.rank.cmp(&b.rank))
    });
    let printed = answered.len() - waiting.len();
    if !waiting.is_empty() {
        let mut named: Vec<String> = waiting.iter().take(NAMED).map(describe).collect();
        if waiting.len() > NAMED {
            named.push(format!("{} more", waiting.len() - NAMED));
        }
        let line = format!(
            "starting: {printed} of {} ranks printed; waiting: {}",
            answered.len(),
            named.join("; ")
        );
        return Some(Start {
            printed,
            ranks: answered.len(),
            waiting,
            last_rank: None,
            last_first_output_s: None,
            last_phases: Vec::new(),
            line,
        });
    }
    // Every rank printed: the last first line, while it is recent.
    let (last, first, ago) = answered
        .iter()
        .filter_map(|r| {
            let (first, ago) = first_line(r, starts)?;
            Some((r, first, ago))
        })
        .min_by(|a, b| a.2.total_cmp(&b.2).then(b.1.total_cmp(&a.1)))?;
    if ago > SHOWN_FOR {
        return None;
    }
    let beat = last.first_heartbeat_s.map_or(String::new(), |b| {
        format!(", first heartbeat after {b:.1} s")
    });
    // Every phase, as exec_all's own start line tells them, once the run
    // shown has its first line too.
    let phases = seen(last, starts)
        .filter(|s| s.rank.first_output_ms.is_some())
        .map(|s| s.rank.phases())
        .unwrap_or_default();
    let line = match told(&phases) {
        Some(phases) => format!(
            "started: every rank printed; the last was rank {} ({}): {phases}{beat}",
            last.rank, last.host
        ),
        None => format!(
            "started: every rank printed; the last was rank {} ({}), {first:.1} s after its start{beat}",
            last.rank, last.host
        ),
    };
    Some(Start {
        printed,
        ranks: answered.len(),
        waiting: Vec::new(),
        last_rank: Some(last.rank),
        last_first_output_s: Some(first),
        last_phases: phases,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rank: usize, up: Option<f64>, first: Option<f64>) -> Row {
        Row {
            rank,
            host: format!("n{rank}"),
            up_s: up,
            first_output_s: first,
            output_age_s: first.zip(up).map(|(f, u)| u - f),
            ..Row::default()
        }
    }

    #[test]
    fn names_the_ranks_still_starting_the_longest_first() {
        let mut rows = vec![
            row(0, Some(6.0), Some(0.5)),
            row(1, Some(6.0), None),
            row(2, None, None),
            row(3, Some(2.0), None),
            row(4, Some(9.0), None),
            row(5, Some(1.0), None),
        ];
        rows[3].heartbeat_age_s = Some(0.5);
        rows.push(Row {
            rank: 6,
            error: Some("the agent did not answer".into()),
            ..Row::default()
        });
        let start = judge(&rows, &Starts::new()).expect("a line");
        assert_eq!((start.printed, start.ranks), (1, 6));
        let order: Vec<usize> = start.waiting.iter().map(|w| w.rank).collect();
        assert_eq!(order, [2, 4, 1, 3, 5]);
        assert_eq!(
            start.line,
            "starting: 1 of 6 ranks printed; waiting: rank 2 (n2) not started; \
             rank 4 (n4) up 9.0 s, no output or heartbeat; rank 1 (n1) up 6.0 s, no output or heartbeat; 2 more"
        );
        let one = judge(
            &[row(0, Some(4.0), None), {
                let mut r = row(1, Some(4.0), None);
                r.heartbeat_age_s = Some(1.0);
                r
            }],
            &Starts::new(),
        )
        .expect("a line");
        assert!(
            one.line.ends_with("rank 1 (n1) up 4.0 s, no output"),
            "{}",
            one.line
        );
    }

    #[test]
    fn once_all_printed_names_the_last_for_a_while_then_goes() {
        let mut rows = vec![
            row(0, Some(10.0), Some(0.2)),
            row(1, Some(10.0), Some(4.5)),
            row(2, Some(8.0), Some(1.0)),
        ];
        rows[1].first_heartbeat_s = Some(5.0);
        let start = judge(&rows, &Starts::new()).expect("a line");
        assert_eq!(start.last_rank, Some(1));
        assert_eq!(
            start.line,
            "started: every rank printed; the last was rank 1 (n1), 4.5 s after its start, first heartbeat after 5.0 s"
        );
        for r in &mut rows {
            r.up_s = r.up_s.map(|u| u + SHOWN_FOR);
        }
        assert_eq!(judge(&rows, &Starts::new()), None);
        // An agent older than these fields: its output age alone, no line.
        let old = Row {
            output_age_s: Some(1.0),
            ..Row::default()
        };
        assert_eq!(judge(&[old], &Starts::new()), None);
    }

    fn seen(rank: usize, run_up_s: f64, marks: [Option<u64>; 4]) -> ((usize, String), Seen) {
        let [connect_ms, login_ms, spawn_ms, first_output_ms] = marks;
        let host = format!("n{rank}");
        let rank_start = crate::snapshot::run_start::RankStart {
            rank,
            host: host.clone(),
            connect_ms,
            login_ms,
            spawn_ms,
            first_output_ms,
            ..Default::default()
        };
        (
            (rank, host),
            Seen {
                run_up_s,
                health_check: false,
                rank: rank_start,
            },
        )
    }

    #[test]
    fn with_the_runs_start_a_waiting_rank_is_told_with_its_phases_and_an_unreached_node_named() {
        let mut rows = vec![
            row(0, Some(12.0), Some(0.5)),
            row(1, Some(3.0), None),
            row(2, None, None),
            row(3, None, None),
        ];
        let mut starts: Starts = [
            seen(0, 12.3, [None, None, Some(5), Some(400)]),
            seen(1, 12.3, [Some(10), Some(30), Some(9_300), None]),
            seen(2, 12.3, [None, None, None, None]),
        ]
        .into_iter()
        .collect();
        let start = judge(&rows, &starts).expect("a line");
        assert_eq!(
            start.line,
            "starting: 1 of 4 ranks printed; waiting: rank 2 (n2) not started: exec_all has not \
             reached it in 12.3 s; rank 3 (n3) not started; rank 1 (n1) up 3.0 s, no output or \
             heartbeat (its start: connect 0.01 s, login 0.02 s, spawn 9.27 s)"
        );
        assert_eq!(start.waiting[0].unreached_for_s, Some(12.3));
        assert_eq!(
            start.waiting[2].phases,
            [("connect", 0.01), ("login", 0.02), ("spawn", 9.27)]
        );
        let json = serde_json::to_value(&start).unwrap();
        assert_eq!(
            json["waiting"][2]["phases"][2],
            serde_json::json!(["spawn", 9.27])
        );

        // Every rank printed: the last one's every phase, as exec_all tells it.
        rows.truncate(2);
        rows[1] = row(1, Some(6.0), Some(4.5));
        let (key, printed) = seen(1, 15.3, [Some(10), Some(30), Some(9_300), Some(13_800)]);
        starts.insert(key, printed);
        let start = judge(&rows, &starts).expect("a line");
        assert_eq!(
            start.line,
            "started: every rank printed; the last was rank 1 (n1): connect 0.01 s, login 0.02 s, \
             spawn 9.27 s, first line 4.50 s: spawn the longest"
        );
        assert_eq!(start.last_phases.len(), 4);
    }

    #[test]
    fn a_rank_whose_output_its_agent_does_not_see_printed_by_exec_alls_word() {
        // Inside `multinode agent -- JOB`: the head's agent sees rank 0 as
        // part of JOB's tree, one row with no times of its own.
        let rows = [row(0, None, None), row(1, Some(4.0), Some(3.0))];
        let waiting: Starts = [seen(0, 9.0, [None, None, Some(20), None])]
            .into_iter()
            .collect();
        let line = judge(&rows, &waiting).unwrap().line;
        assert_eq!(
            line,
            "starting: 1 of 2 ranks printed; waiting: rank 0 (n0) up 9.0 s, no output or \
             heartbeat (its start: spawn 0.02 s)"
        );
        // Once exec_all saw its first line: printed, and the last to.
        let printed: Starts = [seen(0, 9.5, [None, None, Some(20), Some(9_200)])]
            .into_iter()
            .collect();
        let start = judge(&rows, &printed).unwrap();
        assert_eq!((start.printed, start.last_rank), (2, Some(0)));
        assert_eq!(
            start.line,
            "started: every rank printed; the last was rank 0 (n0): spawn 0.02 s, first line \
             9.18 s: first line the longest"
        );
    }

    #[test]
    fn while_the_health_check_runs_its_ranks_are_told_as_in_it() {
        let rows = [row(0, Some(2.0), None), row(1, None, None)];
        let mut starts: Starts = [
            seen(0, 2.5, [Some(10), Some(20), Some(500), None]),
            seen(1, 2.5, [None, None, None, None]),
        ]
        .into_iter()
        .collect();
        for s in starts.values_mut() {
            s.health_check = true;
        }
        let start = judge(&rows, &starts).unwrap();
        assert_eq!(
            start.line,
            "starting: 0 of 2 ranks printed; waiting: rank 1 (n1) not started: its health check \
             has not reached it in 2.5 s; rank 0 (n0) in its health check, up 2.0 s, no output or \
             heartbeat (its start: connect 0.01 s, login 0.01 s, spawn 0.48 s)"
        );
        assert!(start.waiting.iter().all(|w| w.health_check));
        // The attempt's word wins over its check's, whatever it knows.
        let attempt = crate::snapshot::run_start::RunStart {
            up_ms: Some(100),
            ranks: vec![crate::snapshot::run_start::RankStart {
                rank: 0,
                host: "n0".into(),
                ..Default::default()
            }]
            .into(),
            ..Default::default()
        };
        let check = crate::snapshot::run_start::RunStart {
            up_ms: Some(3_000),
            health_check: true,
            ranks: vec![starts[&(0, "n0".to_string())].rank.clone()].into(),
            ..Default::default()
        };
        let merged = crate::snapshot::run_start::by_rank([&check, &attempt]);
        assert!(!merged[&(0, "n0".to_string())].health_check);
    }
}
