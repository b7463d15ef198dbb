//! How much environment a client may send in `env` requests: bytes and
//! variables per channel, bytes per connection (what its open channels
//! hold) and per agent (what all its connections hold). A client of the
//! job may set any variable, but not fill the node's memory: past a bound
//! the variables are dropped, and the command is refused with a message
//! instead of running without them.
//!
//! The hostlists a command's `MULTINODE_HOSTLIST_FOLDED` expands to count
//! as its environment too (they are, with its hostfile), reckoned from the
//! folded list before anything is expanded ([`hostlists::wire_cost`]).
//!
//! The bounds leave room for every legitimate use: Linux runs no command
//! whose environment passes `MAX_ARG_STRLEN` (128 KiB) for one string or a
//! quarter of the stack limit (2 MiB by default, 6 MiB at most) in all, and
//! exec_all sends a node ~300 bytes of contract (the hostlists folded) plus
//! the head's exported variables.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::env::hostlists;

/// Bytes of names and values one channel may send.
pub(crate) const CHANNEL_BYTES: usize = 8 << 20;
/// Variables one channel may send (each costs ~100 bytes beyond its text).
pub(crate) const CHANNEL_VARS: usize = 65_536;
/// A channel that held this much gives the memory back to the system when
/// it ends ([`super::heap::trim_heap`]).
const TRIM_AFTER: usize = 1 << 20;
/// Bytes of names and values the open channels of one connection may hold
/// together (the head's agent forwards many commands over one connection).
pub(crate) const CONNECTION_BYTES: usize = 64 << 20;
/// Bytes of names and values the open channels of all connections may hold
/// together: two connections' worth. Logged-in connections are not
/// bounded in number, so without it eight of them held 495 MB.
pub(crate) const AGENT_BYTES: usize = 128 << 20;

/// The environment bytes held by all the agent's channels (in `Shared`).
#[derive(Clone, Default)]
pub(crate) struct AgentEnv(Arc<AtomicUsize>);

/// The environment bytes held by one connection's channels.
#[derive(Clone)]
pub(crate) struct ConnectionEnv {
    held: Arc<AtomicUsize>,
    agent: AgentEnv,
}

/// One channel's share; given back to its connection and agent when dropped.
pub(crate) struct ChannelEnv {
    conn: ConnectionEnv,
    bytes: usize,
    vars: usize,
    refused: Option<Refusal>,
}

/// Why a channel's command is refused.
enum Refusal {
    /// Past a bound on bytes or variables: how (`more than 8 MiB`).
    Bound(String),
    /// The folded hostlist names more hosts than a client may send.
    Hostlist(String),
}

impl AgentEnv {
    /// The share of a new connection.
    pub(crate) fn connection(&self) -> ConnectionEnv {
        ConnectionEnv {
            held: Arc::default(),
            agent: self.clone(),
        }
    }
}

impl ConnectionEnv {
    pub(crate) fn channel(&self) -> ChannelEnv {
        ChannelEnv {
            conn: self.clone(),
            bytes: 0,
            vars: 0,
            refused: None,
        }
    }
}

/// Adds `len` to `held` unless that passes `max`.
fn take(held: &AtomicUsize, len: usize, max: usize) -> bool {
    let before = held.fetch_add(len, Ordering::Relaxed);
    if before.saturating_add(len) > max {
        held.fetch_sub(len, Ordering::Relaxed);
        return false;
    }
    true
}

impl ChannelEnv {
    /// Whether a variable of `name` and `value` may be kept: counts it if
    /// so. Once one is refused, every later one is too.
    pub(crate) fn admit(&mut self, name: &str, value: &str) -> bool {
        self.charge(name.len() + value.len(), 1, "")
    }

    /// Counts the hostlists that the variables' `MULTINODE_HOSTLIST_FOLDED`
    /// (if any) expands to, before it is expanded: false (the command is
    /// refused) past a bound.
    pub(crate) fn admit_hostlists(&mut self, env: &[(String, String)]) -> bool {
        if self.refused.is_some() {
            return false;
        }
        match hostlists::wire_cost(env) {
            Ok(0) => true,
            Ok(bytes) => self.charge(
                bytes,
                0,
                " once the hostlists of its MULTINODE_HOSTLIST_FOLDED are written out",
            ),
            Err(why) => {
                self.refused = Some(Refusal::Hostlist(why));
                false
            }
        }
    }

    /// Counts `len` bytes in `vars` variables against the channel's,
    /// connection's and agent's bounds; `counted` says what they were
    /// (for the message).
    fn charge(&mut self, len: usize, vars: usize, counted: &str) -> bool {
        if self.refused.is_some() {
            return false;
        }
        let conn = &self.conn;
        let why = if self.vars + vars > CHANNEL_VARS {
            Some(format!("more than {CHANNEL_VARS} variables"))
        } else if self.bytes.saturating_add(len) > CHANNEL_BYTES {
            Some(format!("more than {} MiB{counted}", CHANNEL_BYTES >> 20))
        } else if !take(&conn.held, len, CONNECTION_BYTES) {
            Some(format!(
                "more than {} MiB{counted} together with the other commands of its connection",
                CONNECTION_BYTES >> 20
            ))
        } else if !take(&conn.agent.0, len, AGENT_BYTES) {
            conn.held.fetch_sub(len, Ordering::Relaxed);
            Some(format!(
                "more than {} MiB{counted} together with the other commands of this agent",
                AGENT_BYTES >> 20
            ))
        } else {
            None
        };
        match why {
            Some(why) => {
                self.refused = Some(Refusal::Bound(why));
                false
            }
            None => {
                self.bytes += len;
                self.vars += vars;
                true
            }
        }
    }

    /// The one line the client is told when its command is refused.
    pub(crate) fn refused(&self) -> Option<String> {
        self.refused.as_ref().map(|refusal| match refusal {
            Refusal::Bound(why) => format!(
                "multinode agent: error: the environment sent with this command is {why}, \
                 the agent's limit; nothing was run. Send fewer or smaller variables \
                 (a large value belongs in a file)\n"
            ),
            Refusal::Hostlist(why) => format!(
                "multinode agent: error: {why}, the agent's limit for a hostlist a client \
                 sends; nothing was run. Send the job's own hostlist, or none\n"
            ),
        })
    }
}

impl Drop for ChannelEnv {
    fn drop(&mut self) {
        self.conn.held.fetch_sub(self.bytes, Ordering::Relaxed);
        self.conn.agent.0.fetch_sub(self.bytes, Ordering::Relaxed);
        if self.bytes >= TRIM_AFTER || self.refused.is_some() {
            super::heap::trim_heap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_is_bounded_in_bytes_and_variables_and_stays_refused() {
        let conn = AgentEnv::default().connection();
        let mut ch = conn.channel();
        let big = "x".repeat(128 * 1024);
        let fits = CHANNEL_BYTES / (big.len() + 1);
        for _ in 0..fits {
            assert!(ch.admit("A", &big));
        }
        assert!(!ch.admit("A", &big), "past the channel's bytes");
        assert!(!ch.admit("B", "1"), "refused stays refused");
        assert!(ch.refused().unwrap().contains("more than 8 MiB"));

        let mut ch = conn.channel();
        for _ in 0..CHANNEL_VARS {
            assert!(ch.admit("V", ""));
        }
        assert!(!ch.admit("V", ""));
        assert!(
            ch.refused().unwrap().contains("variables"),
            "{:?}",
            ch.refused()
        );
    }

    #[test]
    fn a_connection_is_bounded_across_its_channels_and_gets_bytes_back() {
        let agent = AgentEnv::default();
        let conn = agent.connection();
        let big = "x".repeat(CHANNEL_BYTES - 1);
        let mut open: Vec<ChannelEnv> = (0..CONNECTION_BYTES / CHANNEL_BYTES)
            .map(|_| {
                let mut ch = conn.channel();
                assert!(ch.admit("A", &big));
                ch
            })
            .collect();
        let mut late = conn.channel();
        assert!(!late.admit("A", "small"), "the connection is full");
        assert!(
            late.refused()
                .unwrap()
                .contains("other commands of its connection")
        );
        drop(late);
        open.pop();
        let mut next = conn.channel();
        assert!(
            next.admit("A", &big),
            "a closed channel gave its bytes back"
        );
        drop(next);
        drop(open);
        assert_eq!(conn.held.load(Ordering::Relaxed), 0);
        assert_eq!(agent.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_agent_is_bounded_across_its_connections_and_gets_bytes_back() {
        let agent = AgentEnv::default();
        let big = "x".repeat(CHANNEL_BYTES - 1);
        let per_conn = CONNECTION_BYTES / CHANNEL_BYTES;
        let conns: Vec<ConnectionEnv> = (0..AGENT_BYTES / CONNECTION_BYTES)
            .map(|_| agent.connection())
            .collect();
        let mut open: Vec<ChannelEnv> = conns
            .iter()
            .flat_map(|conn| (0..per_conn).map(|_| conn.channel()))
            .collect();
        for ch in &mut open {
            assert!(ch.admit("A", &big));
        }
        let other = agent.connection();
        let mut late = other.channel();
        assert!(!late.admit("A", "small"), "the agent is full");
        let message = late.refused().unwrap();
        assert!(
            message.contains("more than 128 MiB together with the other commands of this agent"),
            "{message}"
        );
        assert_eq!(message.lines().count(), 1);
        drop(late);
        assert_eq!(other.held.load(Ordering::Relaxed), 0, "given back at once");
        open.pop();
        let mut next = other.channel();
        assert!(
            next.admit("A", &big),
            "a closed channel gave its bytes back"
        );
        drop(next);
        drop(open);
        assert_eq!(agent.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn hostlists_count_before_they_are_expanded() {
        let folded =
            |list: &str| vec![(crate::vars::HOSTLIST_FOLDED.to_string(), list.to_string())];
        let conn = AgentEnv::default().connection();
        let mut ch = conn.channel();
        assert!(ch.admit_hostlists(&[]));
        assert!(ch.admit_hostlists(&folded("gpu-node-[00001-20000]:8")));
        assert!(ch.bytes > 20_000 * 17, "{}", ch.bytes);

        let mut ch = conn.channel();
        let attack = format!("{}[000001-999999]:8", "h".repeat(240));
        assert!(!ch.admit_hostlists(&folded(&attack)));
        let message = ch.refused().unwrap();
        assert!(message.contains("65536 names"), "{message}");
        assert_eq!(message.lines().count(), 1);

        // Few names, but long ones: the bytes they take.
        let mut ch = conn.channel();
        let long = format!("{}[00001-40000]:8", "h".repeat(240));
        assert!(!ch.admit_hostlists(&folded(&long)));
        let message = ch.refused().unwrap();
        assert!(
            message.contains("more than 8 MiB once the hostlists"),
            "{message}"
        );
    }
}
