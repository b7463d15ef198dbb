//! The limits on connections not logged in (per source, in all), and whom
//! they count: a [`Source`] is an IPv4 address or an IPv6 /64; past a
//! limit the oldest is closed, and told why ([`Evicted`]).

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

/// Connections not logged in yet, at once, from one source (an IPv4
/// address, or an IPv6 /64); one more closes the source's oldest.
pub(crate) const PER_SOURCE_STARTUPS: usize = 64;
/// Connections not logged in yet, at once, from all sources together; a
/// lower open-file limit lowers it to a quarter of that limit.
pub(crate) const MAX_STARTUPS: usize = 256;

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
pub(super) struct Source(IpAddr);

impl Source {
    pub(super) fn of(ip: IpAddr) -> Self {
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

/// Why a connection not logged in was closed to admit a newer one; the
/// agent sends it as the SSH disconnect reason, which `mn-ssh` and `ssh`
/// print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Evicted {
    /// Its source had this many connections not logged in, its limit.
    SourceFull(usize),
    /// All sources together had this many, its source the most.
    Full(usize),
}

impl std::fmt::Display for Evicted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Evicted::SourceFull(n) => write!(
                f,
                "too many connections not logged in from this address ({n}, its limit): the oldest, this one, was closed; connect again"
            ),
            Evicted::Full(n) => write!(
                f,
                "too many connections not logged in ({n}, the limit; the most from this address): the oldest, this one, was closed; connect again"
            ),
        }
    }
}
