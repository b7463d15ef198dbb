//! The bounds on session channels (`ssh`'s sessions: commands, terminals,
//! `sftp`, the agent's own requests): [`PER_CONNECTION`] a connection and
//! [`IN_ALL`] for the agent, each channel held to its end. OpenSSH's
//! `MaxSessions` is 10; an agent takes more, because the head's agent
//! shares one connection to a node among every process exec_all runs there
//! (`--nproc-per-node`) and the job's other clients of that node. What a
//! connection's channels held goes back to the system when a connection
//! that opened many ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Session channels open at once on one connection: 4,096 processes on a
/// node (exec_all's bound on `--nproc-per-node`) over the head agent's
/// shared connection, and 64 more for the job's other clients.
pub(crate) const PER_CONNECTION: usize = 4096 + 64;
/// Session channels open at once on all of an agent's connections.
pub(crate) const IN_ALL: usize = 16_384;
/// A connection that opened this many channels gives their memory back to
/// the system when it ends.
const TRIM_AFTER: usize = 256;

/// The agent's count, in its `Shared`.
#[derive(Debug)]
pub(crate) struct SessionBounds {
    all: Arc<Semaphore>,
}

impl Default for SessionBounds {
    fn default() -> Self {
        SessionBounds {
            all: Arc::new(Semaphore::new(IN_ALL)),
        }
    }
}

impl SessionBounds {
    /// A new connection's count.
    pub(crate) fn connection(&self) -> Arc<ConnectionSessions> {
        Arc::new(ConnectionSessions {
            mine: Arc::new(Semaphore::new(PER_CONNECTION)),
            all: self.all.clone(),
            opened: AtomicUsize::new(0),
        })
    }
}

/// One connection's count, held by its handler and by each of its
/// channels: the last to go trims the heap when the connection opened many.
#[derive(Debug)]
pub(crate) struct ConnectionSessions {
    mine: Arc<Semaphore>,
    all: Arc<Semaphore>,
    opened: AtomicUsize,
}

impl Drop for ConnectionSessions {
    fn drop(&mut self) {
        if self.opened.load(Ordering::Relaxed) >= TRIM_AFTER {
            super::heap::trim_heap();
        }
    }
}

/// A session channel's place in both counts, given back when dropped.
#[derive(Debug)]
pub(crate) struct SessionSlot {
    _mine: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
    _conn: Arc<ConnectionSessions>,
}

impl ConnectionSessions {
    /// A place for one more channel, or why there is none.
    pub(crate) fn slot(self: &Arc<Self>) -> Result<SessionSlot, String> {
        let Ok(mine) = self.mine.clone().try_acquire_owned() else {
            return Err(format!(
                "this connection already has {PER_CONNECTION} session channels open; close some"
            ));
        };
        let Ok(all) = self.all.clone().try_acquire_owned() else {
            return Err(format!(
                "the agent already has {IN_ALL} session channels open in all; close some"
            ));
        };
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(SessionSlot {
            _mine: mine,
            _all: all,
            _conn: self.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_bounded_per_connection_and_in_all() {
        let bounds = SessionBounds::default();
        let one = bounds.connection();
        let mut held: Vec<SessionSlot> = (0..PER_CONNECTION).map(|_| one.slot().unwrap()).collect();
        assert!(
            one.slot()
                .unwrap_err()
                .contains("this connection already has 4160")
        );
        held.pop();
        held.push(one.slot().unwrap());
        for _ in 0..(IN_ALL / PER_CONNECTION) {
            let other = bounds.connection();
            for _ in 0..PER_CONNECTION {
                match other.slot() {
                    Ok(slot) => held.push(slot),
                    Err(why) => {
                        assert!(why.contains("16384 session channels open in all"), "{why}");
                        assert_eq!(held.len(), IN_ALL);
                        return;
                    }
                }
            }
        }
        panic!("no bound in all");
    }
}
