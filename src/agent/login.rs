//! Who may try to log in, and for how long: the login deadline, limits on
//! connections that have not logged in yet (per source and in all), and
//! penalties for sources whose connections fail to log in. After OpenSSH's
//! `LoginGraceTime`, `MaxStartups`, `PerSourceMaxStartups`, `MaxAuthTries`
//! and `PerSourcePenalties`, with one difference: nobody is refused.
//!
//! Before it logs in, the job's own client cannot be told apart from anyone
//! else on its address (every connection of a job comes from the head's
//! address; behind NAT many hosts share one). Refusing a source, or
//! everyone once the table is full, locks that client out with the
//! attacker. So every accepted connection is admitted by the [`Gate`], and
//! the bounds are kept by closing the *oldest* connection not logged in:
//! of the newcomer's source when that source is at its limit, else of the
//! source holding the most when all sources together are. A client that
//! logs in takes milliseconds and is the youngest; connections held
//! without logging in are the oldest, and go first.
//!
//! A connection that ends without logging in adds to its source's penalty
//! in proportion to how long it held its slot, so closing just before the
//! deadline costs as much as the deadline; rejected keys add too. A
//! penalized source is still admitted, with a short deadline.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::login_limits::Source;
pub(crate) use super::login_limits::{Evicted, Limits};

/// Authentication requests one connection may have rejected before it is
/// disconnected (OpenSSH's `MaxAuthTries` default).
pub(crate) const MAX_AUTH_TRIES: usize = 6;
/// Added to a source's penalty by a connection that held its slot for the
/// whole login deadline; one closed earlier adds its share of this.
const PENALTY_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection that ends sooner than this, with no key rejected, adds
/// nothing: a port check, a client that found another job's host key.
const FREE_HOLD: Duration = Duration::from_secs(1);
/// Added by a connection that ended without logging in after at least one
/// of its keys was rejected.
const PENALTY_AUTH_FAILED: Duration = Duration::from_secs(5);
/// A source is penalized once its penalty reaches this, until it has run out.
const PENALTY_MIN: Duration = Duration::from_secs(15);
/// No penalty grows past this.
const PENALTY_MAX: Duration = Duration::from_secs(600);
/// The login deadline of a penalized source's connections (the usual one
/// if shorter): the job's client logs in within milliseconds.
const PENALIZED_LOGIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Penalized sources remembered at once; past this, new penalties are not
/// recorded (the limits on connections still hold).
const MAX_SOURCES: usize = 65_536;

const PENDING: u8 = 0;
const LOGGED_IN: u8 = 1;
const TIMED_OUT: u8 = 2;
const EVICTED: u8 = 3;
const ENDED: u8 = 4;

/// One admitted connection as the table sees it, until it logs in or ends.
/// Its state moves once from `PENDING`, whoever wins: the login, the
/// deadline, an eviction or the end of the connection; the winner gives the
/// slot back and records the penalty.
#[derive(Debug)]
struct Slot {
    since: Instant,
    /// This connection's login deadline (shorter for a penalized source).
    timeout: Duration,
    state: AtomicU8,
    /// Keys (or other requests) rejected so far.
    rejected: AtomicUsize,
    /// Cancelled when the connection is evicted; why is in `reason`.
    evicted: CancellationToken,
    reason: OnceLock<Evicted>,
}

impl Slot {
    fn leave(&self, to: u8) -> bool {
        self.state
            .compare_exchange(PENDING, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// What ending now without logging in adds to its source's penalty: its
    /// share of [`PENALTY_TIMEOUT`] for the time it held the slot, at least
    /// [`PENALTY_AUTH_FAILED`] once a key was rejected.
    fn penalty(&self, now: Instant) -> Option<Duration> {
        let held = now.saturating_duration_since(self.since);
        let share = (held >= FREE_HOLD).then(|| {
            PENALTY_TIMEOUT.mul_f64((held.as_secs_f64() / self.timeout.as_secs_f64()).min(1.0))
        });
        let failed = (self.rejected.load(Ordering::Relaxed) > 0).then_some(PENALTY_AUTH_FAILED);
        share.max(failed)
    }
}

/// A source's connections not logged in yet, oldest first.
#[derive(Debug, Default)]
struct Pending {
    slots: VecDeque<Arc<Slot>>,
    /// Of its connections, closed to make room since it last had room (logged once).
    evicted: u64,
}

#[derive(Debug)]
struct Penalty {
    until: Instant,
    /// Reached [`PENALTY_MIN`]: its connections get the short deadline until it runs out.
    active: bool,
}

#[derive(Debug, Default)]
struct Table {
    pending: HashMap<Source, Pending>,
    /// Connections not logged in yet, from every source.
    total: usize,
    penalties: HashMap<Source, Penalty>,
    /// Connections closed because of `total` since there was room (logged once).
    evicted: u64,
}

impl Table {
    /// The penalty `source` still has, forgetting one that has run out.
    fn penalty_left(&mut self, source: Source, now: Instant) -> Option<Duration> {
        let penalty = self.penalties.get(&source)?;
        if penalty.until <= now {
            self.penalties.remove(&source);
            return None;
        }
        penalty.active.then(|| penalty.until - now)
    }

    /// Takes `slot` of `source` out of the pending connections.
    fn remove(&mut self, source: Source, slot: &Arc<Slot>) {
        let Some(pending) = self.pending.get_mut(&source) else {
            return;
        };
        let Some(at) = pending.slots.iter().position(|s| Arc::ptr_eq(s, slot)) else {
            return;
        };
        pending.slots.remove(at);
        self.total -= 1;
        if pending.slots.is_empty() {
            if pending.evicted > 0 {
                info!(%source, evicted = pending.evicted, "no connection from {source} pending any more");
            }
            self.pending.remove(&source);
        }
    }

    /// Closes the oldest connection not logged in of `source`, for `why`.
    fn evict(&mut self, source: Source, why: Evicted, now: Instant) {
        let Some(slot) = self
            .pending
            .get(&source)
            .and_then(|p| p.slots.front().cloned())
        else {
            return;
        };
        // It cannot have logged in meanwhile: logging in takes this lock.
        let won = slot.leave(EVICTED);
        debug_assert!(won, "a slot in the table is pending");
        self.remove(source, &slot);
        if let Some(pending) = self.pending.get_mut(&source) {
            pending.evicted += 1;
        }
        if let Some(add) = slot.penalty(now) {
            self.penalize(source, add, now);
        }
        debug!(%source, "{why}");
        let _ = slot.reason.set(why);
        slot.evicted.cancel();
    }

    fn penalize(&mut self, source: Source, add: Duration, now: Instant) {
        if self.penalties.len() >= MAX_SOURCES {
            self.penalties.retain(|_, p| p.until > now);
        }
        if self.penalties.len() >= MAX_SOURCES && !self.penalties.contains_key(&source) {
            debug!(%source, "too many sources remembered: penalty not recorded");
            return;
        }
        let penalty = self.penalties.entry(source).or_insert(Penalty {
            until: now,
            active: false,
        });
        if penalty.until <= now {
            *penalty = Penalty {
                until: now,
                active: false,
            };
        }
        penalty.until = (penalty.until + add).min(now + PENALTY_MAX);
        if !penalty.active && penalty.until - now >= PENALTY_MIN {
            penalty.active = true;
            warn!(
                %source,
                "{source} penalized for {} s (connections that do not log in): its new connections get {} s to log in",
                (penalty.until - now).as_secs(),
                PENALIZED_LOGIN_TIMEOUT.as_secs()
            );
        }
    }
}

/// The agent's admission table; one per agent.
#[derive(Debug)]
pub(crate) struct Gate {
    limits: Limits,
    table: std::sync::Mutex<Table>,
}

impl Gate {
    pub(crate) fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Gate {
            limits,
            table: std::sync::Mutex::default(),
        })
    }

    /// Admits a connection from `peer`, closing the oldest one not logged
    /// in if a limit requires.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Login {
        let source = Source::of(peer);
        Login {
            gate: self.clone(),
            source,
            slot: self.admit_at(source, Instant::now()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table
            .lock()
            .expect("not poisoned: no panics while held")
    }

    fn admit_at(&self, source: Source, now: Instant) -> Arc<Slot> {
        let mut table = self.lock();
        let timeout = match table.penalty_left(source, now) {
            Some(_) => self.limits.login_timeout.min(PENALIZED_LOGIN_TIMEOUT),
            None => self.limits.login_timeout,
        };
        let own = table.pending.get(&source).map_or(0, |p| p.slots.len());
        if own >= self.limits.per_source {
            let why = Evicted::SourceFull(own);
            if table.pending[&source].evicted == 0 {
                warn!(%source, "{own} connections from {source} have not logged in: closing the oldest for each new one");
            }
            table.evict(source, why, now);
        } else if table.total >= self.limits.total {
            let total = table.total;
            // The source holding the most; of those, the one whose oldest is oldest.
            let heaviest = table
                .pending
                .iter()
                .max_by_key(|(_, p)| {
                    let oldest = p.slots.front().map(|s| s.since);
                    (p.slots.len(), std::cmp::Reverse(oldest))
                })
                .map(|(s, _)| *s);
            if table.evicted == 0 {
                warn!(
                    "{total} connections have not logged in: closing the oldest of the source holding the most for each new one"
                );
            }
            table.evicted += 1;
            if let Some(heaviest) = heaviest {
                table.evict(heaviest, Evicted::Full(total), now);
            }
        } else if table.evicted > 0 {
            info!(
                evicted = table.evicted,
                "room for connections not logged in again"
            );
            table.evicted = 0;
        }
        let slot = Arc::new(Slot {
            since: now,
            timeout,
            state: AtomicU8::new(PENDING),
            rejected: AtomicUsize::new(0),
            evicted: CancellationToken::new(),
            reason: OnceLock::new(),
        });
        table
            .pending
            .entry(source)
            .or_default()
            .slots
            .push_back(slot.clone());
        table.total += 1;
        slot
    }

    /// `slot` of `source` leaves the table for `to`, unless it already left:
    /// false then. What it adds to the source's penalty is taken from it
    /// by `penalty`.
    fn leave(
        &self,
        source: Source,
        slot: &Arc<Slot>,
        to: u8,
        penalty: impl FnOnce(&Slot, Instant) -> Option<Duration>,
        now: Instant,
    ) -> bool {
        let mut table = self.lock();
        if !slot.leave(to) {
            return false;
        }
        table.remove(source, slot);
        if let Some(add) = penalty(slot, now) {
            table.penalize(source, add, now);
        }
        true
    }
}

/// One admitted connection's way to a login. Shared by the connection's
/// task and its russh handler; dropped when both are done.
#[derive(Debug)]
pub(crate) struct Login {
    gate: Arc<Gate>,
    source: Source,
    slot: Arc<Slot>,
}

impl Login {
    /// This connection's login deadline, from its accept.
    pub(crate) fn timeout(&self) -> Duration {
        self.slot.timeout
    }

    /// The connection proved the job's key: true, unless the deadline or an
    /// eviction came first.
    pub(crate) fn log_in(&self) -> bool {
        self.gate.leave(
            self.source,
            &self.slot,
            LOGGED_IN,
            |_, _| None,
            Instant::now(),
        )
    }

    /// The deadline passed: true, unless the connection logged in (or was
    /// evicted) first. The slot is given back and the source's penalty
    /// grows now, before the connection is closed.
    pub(crate) fn time_out(&self) -> bool {
        self.gate.leave(
            self.source,
            &self.slot,
            TIMED_OUT,
            |slot, now| slot.penalty(now).max(Some(PENALTY_TIMEOUT)),
            Instant::now(),
        )
    }

    /// What a client closed at its deadline is told.
    pub(crate) fn deadline_reason(&self) -> String {
        if self.slot.timeout < self.gate.limits.login_timeout {
            format!(
                "not logged in in time ({} s: this address is penalized for connections that did not log in)",
                self.slot.timeout.as_secs_f64()
            )
        } else {
            "not logged in in time".into()
        }
    }

    pub(crate) fn logged_in(&self) -> bool {
        self.slot.state.load(Ordering::Acquire) == LOGGED_IN
    }

    /// Returns once the connection has been closed to admit a newer one,
    /// with the reason to give its client.
    pub(crate) async fn evicted(&self) -> &Evicted {
        self.slot.evicted.cancelled().await;
        self.slot
            .reason
            .get()
            .expect("the reason is set before the token is cancelled")
    }

    /// A key that is not the job's was offered or used.
    pub(crate) fn rejected(&self) {
        self.slot.rejected.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Login {
    /// A connection that ends without logging in gives its slot back and
    /// pays for the time it held it (and its rejected keys).
    fn drop(&mut self) {
        self.gate.leave(
            self.source,
            &self.slot,
            ENDED,
            Slot::penalty,
            Instant::now(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(per_source: usize, total: usize) -> Arc<Gate> {
        Gate::new(Limits {
            login_timeout: Duration::from_secs(30),
            per_source,
            total,
        })
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn evicted(login: &Login) -> Option<Evicted> {
        login.slot.reason.get().cloned()
    }

    fn penalty_left(gate: &Gate, src: &str, now: Instant) -> Option<Duration> {
        gate.lock()
            .penalties
            .get(&Source::of(ip(src)))
            .map(|p| p.until.saturating_duration_since(now))
    }

    #[test]
    fn a_full_source_loses_its_oldest_connection_not_the_newcomer() {
        let gate = gate(2, 10);
        let a1 = gate.admit(ip("10.0.0.1"));
        let a2 = gate.admit(ip("10.0.0.1"));
        let b1 = gate.admit(ip("10.0.0.2"));
        // The job's client, from the attacker's address, is admitted.
        let client = gate.admit(ip("10.0.0.1"));
        assert_eq!(evicted(&a1), Some(Evicted::SourceFull(2)));
        assert!(!a1.log_in(), "an evicted connection cannot log in");
        assert_eq!(evicted(&a2), None);
        assert_eq!(evicted(&b1), None, "other sources are not touched");
        assert!(client.log_in());
        // Logging in gives the slot back at once.
        let _a3 = gate.admit(ip("10.0.0.1"));
        assert_eq!(evicted(&a2), None);
        assert_eq!(gate.lock().total, 3);
        drop((a1, a2, b1, client));
        assert_eq!(gate.lock().total, 1);
    }

    #[test]
    fn a_full_table_loses_the_oldest_connection_of_the_source_holding_the_most() {
        let gate = gate(3, 5);
        let t0 = Instant::now();
        let at =
            |src: &str, ms: u64| gate.admit_at(Source::of(ip(src)), t0 + Duration::from_millis(ms));
        let gone = |slot: &Arc<Slot>| slot.reason.get().cloned();
        let b1 = at("10.0.0.2", 0);
        let a: Vec<_> = (1..4).map(|ms| at("10.0.0.1", ms)).collect();
        let c1 = at("10.0.0.3", 4);
        let client = at("10.0.0.9", 5);
        // 10.0.0.1 holds the most: its oldest goes, not b1, older still.
        assert_eq!(gone(&a[0]), Some(Evicted::Full(5)));
        assert!(
            [&a[1], &a[2], &b1, &c1, &client]
                .iter()
                .all(|s| gone(s).is_none())
        );
        let d1 = at("10.0.0.4", 6);
        assert_eq!(gone(&a[1]), Some(Evicted::Full(5)));
        // Every source holds one: the oldest goes, never the newcomer.
        let _e1 = at("10.0.0.5", 7);
        assert_eq!(gone(&b1), Some(Evicted::Full(5)));
        assert!([&a[2], &c1, &client, &d1].iter().all(|s| gone(s).is_none()));
        assert_eq!(gate.lock().total, 5);
        assert!(gate.leave(
            Source::of(ip("10.0.0.9")),
            &client,
            LOGGED_IN,
            |_, _| None,
            t0
        ));
        assert_eq!(gate.lock().total, 4);
    }

    #[test]
    fn ipv6_sources_are_counted_by_their_64() {
        let gate = gate(1, 10);
        let a = gate.admit(ip("fd00:1:2:3::1"));
        let _a2 = gate.admit(ip("fd00:1:2:3:ffff::9"));
        assert!(evicted(&a).is_some());
        let b = gate.admit(ip("fd00:1:2:4::1"));
        assert!(evicted(&b).is_none());
        // An IPv4 client of a dual-stack listener counts as its IPv4 address.
        let v4 = gate.admit(ip("10.1.1.1"));
        let _v4b = gate.admit(ip("::ffff:10.1.1.1"));
        assert!(evicted(&v4).is_some());
    }

    #[test]
    fn connections_pay_for_the_time_they_held_a_slot() {
        let gate = gate(10, 10);
        let src = Source::of(ip("10.0.0.9"));
        let t0 = Instant::now();
        // Closed just before the 30 s deadline: nearly the deadline's 10 s.
        let slot = gate.admit_at(src, t0);
        gate.leave(
            src,
            &slot,
            ENDED,
            Slot::penalty,
            t0 + Duration::from_secs(29),
        );
        let left = penalty_left(&gate, "10.0.0.9", t0 + Duration::from_secs(29)).unwrap();
        assert!(
            left > Duration::from_secs(9) && left < PENALTY_TIMEOUT,
            "{left:?}"
        );
        // A port check, a client that found another job's host key: nothing.
        let other = Source::of(ip("10.0.0.10"));
        let slot = gate.admit_at(other, t0);
        gate.leave(
            other,
            &slot,
            ENDED,
            Slot::penalty,
            t0 + Duration::from_millis(300),
        );
        assert!(penalty_left(&gate, "10.0.0.10", t0).is_none());
        // A rejected key: 5 s, however short the connection.
        let slot = gate.admit_at(other, t0);
        slot.rejected.fetch_add(1, Ordering::Relaxed);
        gate.leave(other, &slot, ENDED, Slot::penalty, t0);
        assert_eq!(
            penalty_left(&gate, "10.0.0.10", t0),
            Some(PENALTY_AUTH_FAILED)
        );
    }

    #[test]
    fn a_penalized_source_is_admitted_with_a_short_deadline_until_the_penalty_runs_out() {
        let gate = gate(10, 10);
        let src = Source::of(ip("10.0.0.9"));
        let t0 = Instant::now();
        // Two timeouts: 20 s of penalty, past the 15 s threshold.
        for _ in 0..2 {
            let slot = gate.admit_at(src, t0);
            assert!(gate.leave(src, &slot, TIMED_OUT, |_, _| Some(PENALTY_TIMEOUT), t0));
        }
        let slot = gate.admit_at(src, t0 + Duration::from_secs(1));
        assert_eq!(slot.timeout, PENALIZED_LOGIN_TIMEOUT);
        assert!(gate.leave(src, &slot, LOGGED_IN, |_, _| None, t0));
        // Another source is not affected.
        let other = gate.admit_at(Source::of(ip("10.0.0.10")), t0);
        assert_eq!(other.timeout, Duration::from_secs(30));
        // Once the penalty has run out, the usual deadline, and the source is forgotten.
        let slot = gate.admit_at(src, t0 + Duration::from_secs(21));
        assert_eq!(slot.timeout, Duration::from_secs(30));
        assert!(!gate.lock().penalties.contains_key(&src));
    }

    #[test]
    fn a_single_failure_is_remembered_but_not_enforced() {
        let gate = gate(10, 10);
        let src = Source::of(ip("10.0.0.9"));
        let t0 = Instant::now();
        let slot = gate.admit_at(src, t0);
        slot.rejected.fetch_add(1, Ordering::Relaxed);
        gate.leave(src, &slot, ENDED, Slot::penalty, t0);
        assert_eq!(gate.admit_at(src, t0).timeout, Duration::from_secs(30));
        assert!(
            gate.lock().penalties.contains_key(&src),
            "the penalty is remembered"
        );
    }

    #[test]
    fn penalties_are_capped() {
        let gate = gate(10, 10);
        let src = Source::of(ip("10.0.0.9"));
        let t0 = Instant::now();
        for _ in 0..200 {
            let slot = gate.admit_at(src, t0);
            gate.leave(src, &slot, TIMED_OUT, |_, _| Some(PENALTY_TIMEOUT), t0);
        }
        assert_eq!(penalty_left(&gate, "10.0.0.9", t0), Some(PENALTY_MAX));
    }

    #[test]
    fn a_login_after_the_deadline_loses() {
        let gate = gate(10, 10);
        let late = gate.admit(ip("10.0.0.1"));
        assert!(late.time_out());
        // Penalized at once, while its connection is still open, and its slot is free.
        assert!(penalty_left(&gate, "10.0.0.1", Instant::now()).is_some());
        assert_eq!(gate.lock().total, 0);
        assert!(!late.log_in());
        assert!(!late.logged_in());
        let early = gate.admit(ip("10.0.0.1"));
        assert!(early.log_in());
        assert!(!early.time_out());
        drop((late, early));
        let table = gate.lock();
        assert_eq!(table.total, 0);
        assert!(table.pending.is_empty());
    }

    #[test]
    fn a_port_check_costs_nothing() {
        let gate = gate(10, 10);
        drop(gate.admit(ip("10.0.0.1")));
        let table = gate.lock();
        assert!(table.pending.is_empty() && table.penalties.is_empty());
        assert_eq!(table.total, 0);
    }
}
