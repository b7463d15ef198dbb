//! Where the start of a run went, as its exec_all knows it: each rank's
//! connect, login, spawn and first output line, in milliseconds after the
//! run's start. exec_all shows it to its machine's agent while it runs
//! (`#multinode:show-start`, [`show_start`]); the agent passes it on in its
//! `top` snapshots, as an age (`up_ms`), not a time; `multinode top` names
//! with it the phase a rank is in, or was slow in, while ranks start.
//!
//! Only exec_all sees the phases before a spawn: an agent knows a command
//! from its spawn on, and a node exec_all has not reached runs nothing.
//! Each exec_all of a run tells its own nodes: a relay's, its group.
//!
//! The phases of a start, each the time from the end of the one before
//! (the run's start first): `connect` (TCP up), `login`, `spawn`, `first
//! line` ([`phases`], the one reckoning of them, which exec_all's own start
//! line uses too).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::tell_agent::Telling;
use crate::protocol::control::Control;
use crate::transport::client::{Connector, Target};

/// The largest line a show-start channel takes: a run of 65,536 ranks.
pub(crate) const RUN_START_MAX: usize = 8 << 20;
/// The runs an agent keeps at once (one a channel; past it one is refused).
pub(crate) const SHOWN_RUNS_MAX: usize = 16;
/// The most ranks one run's start holds, however its line is written
/// (`{}` is a rank): as many names as a folded hostlist may expand to.
pub const RANKS_MAX: usize = 65_536;
/// The longest host name a rank's start holds (a DNS name is at most 253).
pub const HOST_MAX: usize = 255;
/// What the runs an agent is shown may hold together, reckoned as parsed
/// ([`Ranks::held_bytes`]): two runs of 65,536 ranks with 20-byte names.
pub(crate) const SHOWN_RUNS_BUDGET: usize = 16 << 20;
/// exec_all tells its agent of a change at most this often, and the first
/// time this long into the run: a run that ends sooner opens no channel.
pub(crate) const TELL_EVERY: Duration = Duration::from_millis(500);

/// One run's start, one JSON line on a show-start channel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunStart {
    /// When the run (its attempt) started, ms since the Unix epoch: what
    /// exec_all sends (it shares its agent's clock); not passed on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// Since the run started, as the agent passes it on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_ms: Option<u64>,
    /// The run is the health check before an attempt (`--health-check`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub health_check: bool,
    pub ranks: Ranks,
}

/// A run's ranks, shared by every `top` answer that passes them on (an
/// agent keeps one copy however many ask), read with their bounds: at
/// most [`RANKS_MAX`], hosts of at most [`HOST_MAX`] bytes, each rank once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranks(std::sync::Arc<Vec<RankStart>>);

impl Ranks {
    /// What they hold in memory, parsed (not as text: `{}` is 2 bytes of
    /// text and a whole [`RankStart`] parsed).
    pub(crate) fn held_bytes(&self) -> usize {
        self.0
            .iter()
            .map(|r| std::mem::size_of::<RankStart>() + r.host.len())
            .sum()
    }
}

impl From<Vec<RankStart>> for Ranks {
    fn from(ranks: Vec<RankStart>) -> Self {
        Ranks(std::sync::Arc::new(ranks))
    }
}

impl std::ops::Deref for Ranks {
    type Target = [RankStart];
    fn deref(&self) -> &[RankStart] {
        &self.0
    }
}

impl Serialize for Ranks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for Ranks {
    /// Stops at the first rank past a bound: what a line parses into is
    /// bounded before it is held, not after.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bounded;
        impl<'de> serde::de::Visitor<'de> for Bounded {
            type Value = Vec<RankStart>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "at most {RANKS_MAX} ranks, each once")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                use serde::de::Error;
                let mut ranks = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some(rank) = seq.next_element::<RankStart>()? {
                    if ranks.len() == RANKS_MAX {
                        return Err(A::Error::custom(format!("more than {RANKS_MAX} ranks")));
                    }
                    if rank.host.len() > HOST_MAX {
                        return Err(A::Error::custom(format!(
                            "a host name longer than {HOST_MAX} bytes"
                        )));
                    }
                    if !seen.insert(rank.rank) {
                        return Err(A::Error::custom(format!("rank {} twice", rank.rank)));
                    }
                    ranks.push(rank);
                }
                Ok(ranks)
            }
        }
        d.deserialize_seq(Bounded).map(Ranks::from)
    }
}

/// One rank (a node, or a process with `--nproc-per-node`) of a run:
/// milliseconds after the run's start it reached each phase; absent: not
/// yet (connect and login only for a node on a connection of its own, or
/// a process on its node's: `connection_shared_by`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RankStart {
    pub rank: usize,
    pub host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spawn_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_output_ms: Option<u64>,
    /// Its connect and login are its node's, shared by this many processes
    /// (`--nproc-per-node`: one login a node; at most 4,096). A `u32`: an
    /// agent reckons what it keeps by this type's size, and two runs of the
    /// most ranks must fit its budget (`SHOWN_RUNS_BUDGET`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_shared_by: Option<u32>,
}

impl RankStart {
    /// The time each of its phases took, in seconds ([`phases`]); a
    /// connect and login shared by its node's processes are named the node's.
    pub fn phases(&self) -> Vec<(&'static str, f64)> {
        let (connect, login) = match self.connection_shared_by {
            Some(_) => ("node's connect", "node's login"),
            None => ("connect", "login"),
        };
        phases(&[
            (connect, self.connect_ms),
            (login, self.login_ms),
            ("spawn", self.spawn_ms),
            ("first line", self.first_output_ms),
        ])
    }
}

/// Each phase reached (ms after the run's start, in order; `None`: not
/// reached, or not this rank's) and the seconds it took: from the end of
/// the last phase reached before it, the run's start first.
pub fn phases(marks: &[(&'static str, Option<u64>)]) -> Vec<(&'static str, f64)> {
    let mut at = 0;
    let mut out = Vec::new();
    for &(name, mark) in marks {
        if let Some(mark) = mark {
            out.push((name, mark.saturating_sub(at) as f64 / 1000.0));
            at = mark.max(at);
        }
    }
    out
}

/// `connect 0.01 s, login 2.31 s, spawn 0.02 s`.
pub fn listed(phases: &[(&'static str, f64)]) -> String {
    let each: Vec<String> = phases
        .iter()
        .map(|(name, s)| format!("{name} {s:.2} s"))
        .collect();
    each.join(", ")
}

/// `connect 0.01 s, login 2.31 s, spawn 0.02 s, first line 1.78 s: login
/// the longest`; `None` without a phase.
pub fn told(phases: &[(&'static str, f64)]) -> Option<String> {
    let (longest, _) = phases.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(format!("{}: {longest} the longest", listed(phases)))
}

/// The runs an agent is shown, one a channel, each the last line it got.
#[derive(Debug)]
pub(crate) struct ShownRuns {
    runs: std::sync::Mutex<Vec<(u64, RunStart)>>,
    next: std::sync::atomic::AtomicU64,
    /// One line parsed at a time, whichever channel sent it: what parsing
    /// holds for a moment is one run's, not one a channel.
    pub(crate) parsing: tokio::sync::Semaphore,
}

impl Default for ShownRuns {
    fn default() -> Self {
        ShownRuns {
            runs: Default::default(),
            next: Default::default(),
            parsing: tokio::sync::Semaphore::new(1),
        }
    }
}

impl ShownRuns {
    /// A place for one channel's run; `None` past [`SHOWN_RUNS_MAX`].
    pub(crate) fn hold(&self) -> Option<u64> {
        let mut runs = self.lock();
        if runs.len() >= SHOWN_RUNS_MAX {
            return None;
        }
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        runs.push((id, RunStart::default()));
        Some(id)
    }

    /// Keeps `run` as channel `id`'s, unless the runs would then hold more
    /// than [`SHOWN_RUNS_BUDGET`] together: then `Err` with why, and the
    /// channel's last run stays.
    pub(crate) fn set(&self, id: u64, run: RunStart) -> Result<(), String> {
        let mut runs = self.lock();
        let others: usize = runs
            .iter()
            .filter(|(i, _)| *i != id)
            .map(|(_, r)| r.ranks.held_bytes())
            .sum();
        let held = run.ranks.held_bytes();
        if others + held > SHOWN_RUNS_BUDGET {
            return Err(format!(
                "a run's start of {} ranks ({held} bytes parsed) is past what the runs shown \
                 to this agent may hold together ({SHOWN_RUNS_BUDGET} bytes; the others hold \
                 {others})",
                run.ranks.len()
            ));
        }
        if let Some(slot) = runs.iter_mut().find(|(i, _)| *i == id) {
            slot.1 = run;
        }
        Ok(())
    }

    pub(crate) fn drop_run(&self, id: u64) {
        self.lock().retain(|(i, _)| *i != id);
    }

    /// The runs as `top` gets them at `now_ms`: their age, not their start.
    pub(crate) fn aged(&self, now_ms: u64) -> Vec<RunStart> {
        self.lock()
            .iter()
            .filter_map(|(_, run)| {
                let started = run.started_ms?;
                Some(RunStart {
                    started_ms: None,
                    up_ms: Some(now_ms.saturating_sub(started)),
                    health_check: run.health_check,
                    ranks: run.ranks.clone(),
                })
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, RunStart)>> {
        self.runs
            .lock()
            .expect("not poisoned: no panics while held")
    }
}

/// What `top` knows of one rank's start from every run it was shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Since its run started.
    pub run_up_s: f64,
    /// Its run is the health check before an attempt.
    pub health_check: bool,
    pub rank: RankStart,
}

/// Each rank's start from the runs the agents were shown (a head's and
/// its relays' tell the same rank: the one that knows most of it).
pub fn by_rank<'a>(
    runs: impl IntoIterator<Item = &'a RunStart>,
) -> std::collections::BTreeMap<(usize, String), Seen> {
    let mut seen = std::collections::BTreeMap::new();
    for run in runs {
        let Some(up) = run.up_ms else { continue };
        for rank in run.ranks.iter() {
            let new = Seen {
                run_up_s: up as f64 / 1000.0,
                health_check: run.health_check,
                rank: rank.clone(),
            };
            // An attempt's word over its health check's (the check's
            // channel may outlive it by a moment); then the most phases;
            // then the newest run.
            let key = |s: &Seen| (!s.health_check, s.rank.phases().len(), -s.run_up_s);
            seen.entry((rank.rank, rank.host.clone()))
                .and_modify(|old: &mut Seen| {
                    if key(&new) > key(old) {
                        *old = new.clone();
                    }
                })
                .or_insert(new);
        }
    }
    seen
}

/// Shows the run's start to this machine's agent at `target` for `top`,
/// each value `starts` gets sent as a line once it changed, until its
/// sender is dropped (the run's end). The channel opens on the first
/// value: a run that never sends one costs no connection. No agent there
/// (or an older one) only means `top` does not see it.
pub(crate) fn show_start(
    connector: Connector,
    target: Target,
    mut starts: watch::Receiver<Option<RunStart>>,
) {
    tokio::spawn(async move {
        if starts.changed().await.is_err() {
            return;
        }
        let mut ended = starts.clone();
        let mut telling = tokio::select! {
            telling = Telling::open(&connector, &target, Control::ShowStart) => match telling {
                Some(telling) => telling,
                None => return,
            },
            () = async { while ended.changed().await.is_ok() {} } => return,
        };
        loop {
            let line = starts.borrow_and_update().as_ref().map(|run| {
                let mut line = serde_json::to_vec(run).expect("a plain struct serialises");
                line.push(b'\n');
                line
            });
            if let Some(line) = line
                && !telling.send(&line).await
            {
                break;
            }
            tokio::select! {
                changed = starts.changed() => if changed.is_err() { break },
                open = telling.open_still() => if !open { break },
            }
        }
        telling.close().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_from_the_end_of_the_one_before() {
        let got = phases(&[
            ("connect", Some(500)),
            ("login", Some(2_000)),
            ("spawn", None),
            ("first line", Some(5_000)),
        ]);
        assert_eq!(got, [("connect", 0.5), ("login", 1.5), ("first line", 3.0)]);
        assert_eq!(
            told(&got).unwrap(),
            "connect 0.50 s, login 1.50 s, first line 3.00 s: first line the longest"
        );
        assert_eq!(told(&[]), None);
        // A clock step backwards never makes a phase negative.
        assert_eq!(
            phases(&[("spawn", Some(2_000)), ("first line", Some(1_500))]),
            [("spawn", 2.0), ("first line", 0.0)]
        );
    }

    #[test]
    fn an_agent_keeps_each_channels_last_run_and_passes_on_its_age() {
        let shown = ShownRuns::default();
        let ids: Vec<u64> = (0..SHOWN_RUNS_MAX).map(|_| shown.hold().unwrap()).collect();
        assert_eq!(shown.hold(), None, "bounded");
        let run = RunStart {
            started_ms: Some(10_000),
            up_ms: None,
            health_check: false,
            ranks: vec![RankStart {
                rank: 1,
                host: "n1".into(),
                spawn_ms: Some(300),
                ..RankStart::default()
            }]
            .into(),
        };
        shown.set(ids[3], run.clone()).unwrap();
        // A channel that sent nothing yet is not passed on.
        let aged = shown.aged(12_500);
        assert_eq!(aged.len(), 1);
        assert_eq!((aged[0].up_ms, aged[0].started_ms), (Some(2_500), None));
        assert_eq!(aged[0].ranks, run.ranks);
        shown.drop_run(ids[3]);
        assert!(shown.aged(12_500).is_empty());
        assert!(shown.hold().is_some(), "a place again");
    }

    #[test]
    fn a_runs_ranks_are_bounded_as_they_are_parsed() {
        let line = |ranks: &str| format!(r#"{{"started_ms":1,"ranks":[{ranks}]}}"#);
        let many = |n: usize| {
            (0..n)
                .map(|r| format!(r#"{{"rank":{r}}}"#))
                .collect::<Vec<_>>()
                .join(",")
        };
        let run: RunStart = serde_json::from_str(&line(&many(RANKS_MAX))).unwrap();
        assert_eq!(run.ranks.len(), RANKS_MAX);
        let err = serde_json::from_str::<RunStart>(&line(&many(RANKS_MAX + 1))).unwrap_err();
        assert!(err.to_string().contains("more than 65536 ranks"), "{err}");
        // Issue 51's line: `{}` is a rank (rank 0), each the same one.
        let err = serde_json::from_str::<RunStart>(&line("{},{},{}")).unwrap_err();
        assert!(err.to_string().contains("rank 0 twice"), "{err}");
        let host = |n: usize| format!(r#"{{"rank":1,"host":"{}"}}"#, "h".repeat(n));
        assert!(serde_json::from_str::<RunStart>(&line(&host(HOST_MAX))).is_ok());
        let err = serde_json::from_str::<RunStart>(&line(&host(HOST_MAX + 1))).unwrap_err();
        assert!(err.to_string().contains("longer than 255 bytes"), "{err}");
    }

    #[test]
    fn the_runs_an_agent_keeps_are_within_one_budget_and_shared_by_askers() {
        let shown = ShownRuns::default();
        let run = |n: usize| RunStart {
            started_ms: Some(1),
            ranks: (0..n)
                .map(|rank| RankStart {
                    rank,
                    host: "gpu-node-0001".into(),
                    ..RankStart::default()
                })
                .collect::<Vec<_>>()
                .into(),
            ..RunStart::default()
        };
        let (a, b, c) = (
            shown.hold().unwrap(),
            shown.hold().unwrap(),
            shown.hold().unwrap(),
        );
        shown.set(a, run(RANKS_MAX)).unwrap();
        shown.set(b, run(RANKS_MAX)).unwrap();
        let err = shown.set(c, run(RANKS_MAX)).unwrap_err();
        assert!(err.contains("past what the runs shown"), "{err}");
        // A channel's own run is replaced, not added to.
        shown.set(a, run(RANKS_MAX)).unwrap();
        // Every asker gets the one copy.
        let (one, two) = (shown.aged(5), shown.aged(6));
        assert!(std::sync::Arc::ptr_eq(&one[0].ranks.0, &two[0].ranks.0));
    }

    #[test]
    fn a_rank_told_by_a_head_and_its_relay_is_the_one_that_knows_most() {
        let rank = |spawn: Option<u64>, first: Option<u64>| RankStart {
            rank: 4,
            host: "n4".into(),
            spawn_ms: spawn,
            first_output_ms: first,
            ..RankStart::default()
        };
        let head = RunStart {
            up_ms: Some(9_000),
            ranks: vec![rank(Some(100), None)].into(),
            ..RunStart::default()
        };
        let relay = RunStart {
            up_ms: Some(8_500),
            ranks: vec![rank(Some(50), Some(900))].into(),
            ..RunStart::default()
        };
        for runs in [[&head, &relay], [&relay, &head]] {
            let seen = by_rank(runs);
            let s = &seen[&(4, "n4".to_string())];
            assert_eq!((s.run_up_s, s.rank.first_output_ms), (8.5, Some(900)));
        }
        let wire = serde_json::to_string(&relay).unwrap();
        assert_eq!(
            wire,
            r#"{"up_ms":8500,"ranks":[{"rank":4,"host":"n4","spawn_ms":50,"first_output_ms":900}]}"#
        );
    }

    #[test]
    fn two_runs_of_the_most_ranks_fit_the_agents_budget() {
        // What `top` promises: two runs of 65,536 ranks with 20-byte host
        // names are kept together; a field added to a rank must not push
        // them past the budget.
        let one = std::mem::size_of::<RankStart>() + 20;
        assert!(
            2 * RANKS_MAX * one <= SHOWN_RUNS_BUDGET,
            "{one} bytes a rank: two runs of {RANKS_MAX} take {} of {SHOWN_RUNS_BUDGET}",
            2 * RANKS_MAX * one
        );
    }
}
