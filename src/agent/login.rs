//! Who may try to log in, and for how long: the login deadline, limits on
//! connections that have not logged in yet (per source and in all), and
//! penalties for sources whose connections fail to log in. After OpenSSH's
//! `LoginGraceTime`, `MaxStartups`, `PerSourceMaxStartups`, `MaxAuthTries`
//! and `PerSourcePenalties`.
//!
//! Every accepted connection asks the [`Gate`] first: a source over its
//! limit, or penalized, is closed at once, before any SSH byte is read, so
//! it costs the agent a descriptor for microseconds and no memory. An
//! admitted connection holds its [`Login`] until it logs in (the slot is
//! given back then) or ends; a connection that ends without logging in
//! after its keys were rejected, or that ran out of time, adds to its
//! source's penalty.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

/// Authentication requests one connection may have rejected before it is
/// disconnected (OpenSSH's `MaxAuthTries` default).
pub(crate) const MAX_AUTH_TRIES: usize = 6;
/// Connections not logged in yet, at once, from one source (an IPv4
/// address, or an IPv6 /64); more from it are closed at once.
pub(crate) const PER_SOURCE_STARTUPS: usize = 64;
/// Connections not logged in yet, at once, from all sources together; a
/// lower open-file limit lowers it to a quarter of that limit.
pub(crate) const MAX_STARTUPS: usize = 256;
/// Added to a source's penalty by a connection that did not log in within
/// the deadline.
const PENALTY_TIMEOUT: Duration = Duration::from_secs(10);
/// Added by a connection that ended without logging in after at least one
/// of its keys was rejected.
const PENALTY_AUTH_FAILED: Duration = Duration::from_secs(5);
/// A source is refused once its penalty reaches this, until it has run out.
const PENALTY_MIN: Duration = Duration::from_secs(15);
/// No penalty grows past this.
const PENALTY_MAX: Duration = Duration::from_secs(600);
/// Sources remembered at once; past this, new penalties are not recorded
/// (the limits on connections still hold).
const MAX_SOURCES: usize = 65_536;

/// The limits of one agent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// From the connection's accept to its successful login.
    pub login_timeout: Duration,
    pub per_source: usize,
    pub total: usize,
}

impl Limits {
    /// The defaults, with the total lowered to a quarter of the open-file
    /// limit (the rest stays for commands and logged-in connections).
    pub(crate) fn new(login_timeout: Duration) -> Self {
        let files = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(soft, _)| usize::try_from(soft).unwrap_or(usize::MAX))
            .unwrap_or(1024);
        let total = MAX_STARTUPS.min(files / 4).max(1);
        Limits {
            login_timeout,
            per_source: PER_SOURCE_STARTUPS.min(total),
            total,
        }
    }
}

/// Where connections come from, as limits count them: an IPv4 address, or
/// the /64 of an IPv6 address (one host usually holds a whole /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Source(IpAddr);

impl Source {
    fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Source(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let net = u128::from(v6) & !((1u128 << 64) - 1);
                Source(IpAddr::V6(Ipv6Addr::from(net)))
            }
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// Why a connection was closed at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its source already has this many connections not logged in.
    SourceBusy(usize),
    /// All sources together have this many.
    Busy(usize),
    /// Its source is penalized for this much longer.
    Penalized(Duration),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::SourceBusy(n) => write!(f, "{n} of its connections have not logged in yet"),
            Refused::Busy(n) => write!(f, "{n} connections have not logged in yet"),
            Refused::Penalized(left) => {
                write!(
                    f,
                    "penalized for failed logins, {} s more",
                    left.as_secs().max(1)
                )
            }
        }
    }
}

#[derive(Debug, Default)]
struct Entry {
    /// Admitted connections of this source that have not logged in yet.
    pending: usize,
    /// The penalty runs out then.
    penalty_until: Option<Instant>,
    /// The penalty reached [`PENALTY_MIN`]: refused until it runs out.
    blocked: bool,
    /// Connections refused since the last one admitted (logged once).
    refused: u64,
}

impl Entry {
    /// Drops a penalty that has run out.
    fn expire(&mut self, now: Instant) {
        if self.penalty_until.is_some_and(|until| until <= now) {
            self.penalty_until = None;
            self.blocked = false;
        }
    }

    fn idle(&self) -> bool {
        self.pending == 0 && self.penalty_until.is_none()
    }
}

#[derive(Debug, Default)]
struct Table {
    sources: HashMap<Source, Entry>,
    /// Connections admitted that have not logged in yet, from every source.
    pending: usize,
    /// Connections refused because of `pending` since the last one admitted.
    refused: u64,
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

    /// Admits a connection from `peer`, or says why not.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Login, Refused> {
        let source = Source::of(peer);
        self.admit_at(source, Instant::now())?;
        Ok(Login {
            gate: self.clone(),
            source,
            state: AtomicU8::new(PENDING),
            rejected: AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table
            .lock()
            .expect("not poisoned: no panics while held")
    }

    fn admit_at(&self, source: Source, now: Instant) -> Result<(), Refused> {
        let mut table = self.lock();
        let total = table.pending;
        let entry = table.sources.entry(source).or_default();
        entry.expire(now);
        let refusal = if let (true, Some(until)) = (entry.blocked, entry.penalty_until) {
            Refused::Penalized(until - now)
        } else if entry.pending >= self.limits.per_source {
            Refused::SourceBusy(entry.pending)
        } else if total >= self.limits.total {
            if entry.idle() && entry.refused == 0 {
                table.sources.remove(&source);
            }
            table.refused += 1;
            if table.refused == 1 {
                warn!("refusing connections: {}", Refused::Busy(total));
            }
            debug!(%source, "connection refused: {}", Refused::Busy(total));
            return Err(Refused::Busy(total));
        } else {
            if entry.refused > 0 {
                info!(%source, refused = entry.refused, "admitting connections from {source} again");
                entry.refused = 0;
            }
            entry.pending += 1;
            table.pending += 1;
            if table.refused > 0 {
                info!(refused = table.refused, "admitting connections again");
                table.refused = 0;
            }
            return Ok(());
        };
        // Only a source with connections pending or a penalty gets here:
        // its entry stays, and counts its refusals.
        entry.refused += 1;
        if entry.refused == 1 {
            warn!(%source, "refusing connections from {source}: {refusal}");
        } else {
            debug!(%source, "connection refused: {refusal}");
        }
        Err(refusal)
    }

    /// A connection of `source` logged in or ended; `penalty` is added to the source's.
    fn release_at(&self, source: Source, penalty: Option<Duration>, now: Instant) {
        let mut table = self.lock();
        table.pending = table.pending.saturating_sub(1);
        if let Some(entry) = table.sources.get_mut(&source) {
            entry.pending = entry.pending.saturating_sub(1);
        }
        if let Some(add) = penalty {
            penalize(&mut table, source, add, now);
        }
        let Some(entry) = table.sources.get_mut(&source) else {
            return;
        };
        entry.expire(now);
        if entry.idle() {
            if entry.refused > 0 {
                info!(%source, refused = entry.refused, "no connection from {source} pending any more");
            }
            table.sources.remove(&source);
        }
    }

    /// Adds to a source's penalty while its connection is still open: the
    /// next connection, made as soon as this one is closed, already pays it.
    fn penalize_at(&self, source: Source, add: Duration, now: Instant) {
        penalize(&mut self.lock(), source, add, now);
    }
}

fn penalize(table: &mut Table, source: Source, add: Duration, now: Instant) {
    if table.sources.len() >= MAX_SOURCES {
        table
            .sources
            .retain(|_, e| e.pending > 0 || e.penalty_until.is_some_and(|u| u > now));
    }
    let crowded = table.sources.len() >= MAX_SOURCES;
    let Some(entry) = table.sources.get_mut(&source) else {
        return;
    };
    entry.expire(now);
    if crowded && entry.penalty_until.is_none() {
        debug!(%source, "too many sources remembered: penalty not recorded");
        return;
    }
    let until = (entry.penalty_until.unwrap_or(now).max(now) + add).min(now + PENALTY_MAX);
    entry.penalty_until = Some(until);
    if !entry.blocked && until - now >= PENALTY_MIN {
        entry.blocked = true;
        warn!(
            %source,
            "refusing connections from {source} for {} s: repeated failed logins",
            (until - now).as_secs()
        );
    }
}

const PENDING: u8 = 0;
const LOGGED_IN: u8 = 1;
const TIMED_OUT: u8 = 2;

/// One admitted connection's way to a login. Shared by the connection's
/// task and its russh handler; dropped when both are done.
#[derive(Debug)]
pub(crate) struct Login {
    gate: Arc<Gate>,
    source: Source,
    state: AtomicU8,
    /// Keys (or other requests) rejected so far.
    rejected: AtomicUsize,
}

impl Login {
    pub(crate) fn timeout(&self) -> Duration {
        self.gate.limits.login_timeout
    }

    /// The connection proved the job's key: true, unless the deadline came first.
    pub(crate) fn log_in(&self) -> bool {
        let won = self
            .state
            .compare_exchange(PENDING, LOGGED_IN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.gate.release_at(self.source, None, Instant::now());
        }
        won
    }

    /// The deadline passed: true, unless the connection logged in first.
    /// The source's penalty grows now, before the connection is closed.
    pub(crate) fn time_out(&self) -> bool {
        let won = self
            .state
            .compare_exchange(PENDING, TIMED_OUT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.gate
                .penalize_at(self.source, PENALTY_TIMEOUT, Instant::now());
        }
        won
    }

    pub(crate) fn logged_in(&self) -> bool {
        self.state.load(Ordering::Acquire) == LOGGED_IN
    }

    /// A key that is not the job's was offered or used.
    pub(crate) fn rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Login {
    fn drop(&mut self) {
        let penalty = match self.state.load(Ordering::Acquire) {
            LOGGED_IN => return,
            // Penalized when it timed out.
            TIMED_OUT => None,
            _ if self.rejected.load(Ordering::Relaxed) > 0 => Some(PENALTY_AUTH_FAILED),
            // Closed before offering a wrong key: a port check, or a client
            // that found another job's host key. No penalty.
            _ => None,
        };
        self.gate.release_at(self.source, penalty, Instant::now());
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

    #[test]
    fn one_source_cannot_take_every_slot() {
        let gate = gate(2, 3);
        let a1 = gate.admit(ip("10.0.0.1")).unwrap();
        let _a2 = gate.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(
            gate.admit(ip("10.0.0.1")).unwrap_err(),
            Refused::SourceBusy(2)
        );
        let _b1 = gate.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(gate.admit(ip("10.0.0.3")).unwrap_err(), Refused::Busy(3));
        // Logging in gives the slot back at once.
        assert!(a1.log_in());
        let _c1 = gate.admit(ip("10.0.0.3")).unwrap();
        drop(a1);
        assert_eq!(gate.lock().pending, 3);
    }

    #[test]
    fn ipv6_sources_are_counted_by_their_64() {
        let gate = gate(1, 10);
        let _a = gate.admit(ip("fd00:1:2:3::1")).unwrap();
        assert!(gate.admit(ip("fd00:1:2:3:ffff::9")).is_err());
        assert!(gate.admit(ip("fd00:1:2:4::1")).is_ok());
        // An IPv4 client of a dual-stack listener counts as its IPv4 address.
        let _v4 = gate.admit(ip("10.1.1.1")).unwrap();
        assert!(gate.admit(ip("::ffff:10.1.1.1")).is_err());
    }

    #[test]
    fn sources_that_fail_repeatedly_are_refused_until_the_penalty_runs_out() {
        let gate = gate(10, 10);
        let src = Source::of(ip("10.0.0.9"));
        let t0 = Instant::now();
        // Two timeouts: 20 s of penalty, past the 15 s threshold.
        for _ in 0..2 {
            gate.admit_at(src, t0).unwrap();
            gate.release_at(src, Some(PENALTY_TIMEOUT), t0);
        }
        assert!(matches!(
            gate.admit_at(src, t0 + Duration::from_secs(1)),
            Err(Refused::Penalized(_))
        ));
        // Another source is not affected.
        gate.admit_at(Source::of(ip("10.0.0.10")), t0).unwrap();
        // Once the penalty has run out the source is admitted again, and forgotten when idle.
        gate.admit_at(src, t0 + Duration::from_secs(21)).unwrap();
        gate.release_at(src, None, t0 + Duration::from_secs(21));
        assert!(!gate.lock().sources.contains_key(&src));
    }

    #[test]
    fn a_single_failure_is_remembered_but_not_enforced() {
        let gate = gate(10, 10);
        let src = Source::of(ip("10.0.0.9"));
        let t0 = Instant::now();
        gate.admit_at(src, t0).unwrap();
        gate.release_at(src, Some(PENALTY_AUTH_FAILED), t0);
        gate.admit_at(src, t0).unwrap();
        gate.release_at(src, None, t0);
        assert!(
            gate.lock().sources.contains_key(&src),
            "the penalty is remembered"
        );
    }

    #[test]
    fn penalties_are_capped() {
        let gate = gate(10, 10);
        let src = Source::of(ip("10.0.0.9"));
        let t0 = Instant::now();
        for _ in 0..200 {
            gate.admit_at(src, t0).ok();
            gate.release_at(src, Some(PENALTY_TIMEOUT), t0);
        }
        let Err(Refused::Penalized(left)) = gate.admit_at(src, t0) else {
            panic!("penalized");
        };
        assert!(left <= PENALTY_MAX);
    }

    #[test]
    fn a_login_after_the_deadline_loses() {
        let gate = gate(10, 10);
        let late = gate.admit(ip("10.0.0.1")).unwrap();
        assert!(late.time_out());
        // Penalized at once, while its connection is still open.
        assert!(
            gate.lock().sources[&Source::of(ip("10.0.0.1"))]
                .penalty_until
                .is_some()
        );
        assert!(!late.log_in());
        assert!(!late.logged_in());
        let early = gate.admit(ip("10.0.0.1")).unwrap();
        assert!(early.log_in());
        assert!(!early.time_out());
        drop((late, early));
        let table = gate.lock();
        assert_eq!(table.pending, 0);
        let entry = &table.sources[&Source::of(ip("10.0.0.1"))];
        assert!(entry.penalty_until.is_some(), "the late one is penalized");
    }

    #[test]
    fn a_port_check_costs_nothing() {
        let gate = gate(10, 10);
        drop(gate.admit(ip("10.0.0.1")).unwrap());
        assert!(gate.lock().sources.is_empty());
        let failed = gate.admit(ip("10.0.0.2")).unwrap();
        failed.rejected();
        drop(failed);
        assert_eq!(gate.lock().sources.len(), 1);
    }
}
