//! How much environment a client may send in `env` requests: bytes and
//! variables per channel, bytes per connection (what its open channels
//! hold). A client of the job may set any variable, but not fill the node's
//! memory: past a bound the variables are dropped, and the command is
//! refused with a message instead of running without them.
//!
//! The bounds leave room for every legitimate use: Linux runs no command
//! whose environment passes `MAX_ARG_STRLEN` (128 KiB) for one string or a
//! quarter of the stack limit (2 MiB by default, 6 MiB at most) in all, and
//! exec_all sends a node ~300 bytes of contract (the hostlists folded) plus
//! the head's exported variables.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of names and values one channel may send.
pub(crate) const CHANNEL_BYTES: usize = 8 << 20;
/// Variables one channel may send (each costs ~100 bytes beyond its text).
pub(crate) const CHANNEL_VARS: usize = 65_536;
/// A channel that held this much gives the memory back to the system when
/// it ends ([`super::trim_heap`]).
const TRIM_AFTER: usize = 1 << 20;
/// Bytes of names and values the open channels of one connection may hold
/// together (the head's agent relays many commands over one connection).
pub(crate) const CONNECTION_BYTES: usize = 64 << 20;

/// The environment bytes held by one connection's channels.
#[derive(Clone, Default)]
pub(crate) struct ConnectionEnv(Arc<AtomicUsize>);

/// One channel's share; given back to its connection when dropped.
pub(crate) struct ChannelEnv {
    conn: ConnectionEnv,
    bytes: usize,
    vars: usize,
    refused: Option<String>,
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

impl ChannelEnv {
    /// Whether a variable of `name` and `value` may be kept: counts it if
    /// so. Once one is refused, every later one is too.
    pub(crate) fn admit(&mut self, name: &str, value: &str) -> bool {
        if self.refused.is_some() {
            return false;
        }
        let len = name.len() + value.len();
        let refusal = if self.vars + 1 > CHANNEL_VARS {
            Some(format!("more than {CHANNEL_VARS} variables"))
        } else if self.bytes + len > CHANNEL_BYTES {
            Some(format!("more than {} MiB", CHANNEL_BYTES >> 20))
        } else {
            let held = self.conn.0.fetch_add(len, Ordering::Relaxed);
            if held + len > CONNECTION_BYTES {
                self.conn.0.fetch_sub(len, Ordering::Relaxed);
                Some(format!(
                    "more than {} MiB together with the other commands of its connection",
                    CONNECTION_BYTES >> 20
                ))
            } else {
                None
            }
        };
        match refusal {
            Some(why) => {
                self.refused = Some(why);
                false
            }
            None => {
                self.bytes += len;
                self.vars += 1;
                true
            }
        }
    }

    /// The one line the client is told when its command is refused.
    pub(crate) fn refused(&self) -> Option<String> {
        self.refused.as_ref().map(|why| {
            format!(
                "multinode agent: error: the environment sent with this command is {why}, \
                 the agent's limit; nothing was run. Send fewer or smaller variables \
                 (a large value belongs in a file)\n"
            )
        })
    }
}

impl Drop for ChannelEnv {
    fn drop(&mut self) {
        self.conn.0.fetch_sub(self.bytes, Ordering::Relaxed);
        if self.bytes >= TRIM_AFTER || self.refused.is_some() {
            super::trim_heap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_is_bounded_in_bytes_and_variables_and_stays_refused() {
        let conn = ConnectionEnv::default();
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
        let conn = ConnectionEnv::default();
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
        assert!(late.refused().unwrap().contains("other commands"));
        drop(late);
        open.pop();
        let mut next = conn.channel();
        assert!(
            next.admit("A", &big),
            "a closed channel gave its bytes back"
        );
        drop(next);
        drop(open);
        assert_eq!(conn.0.load(Ordering::Relaxed), 0);
    }
}
