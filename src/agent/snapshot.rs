//! `#multinode:snapshot`: what the commands this agent runs are doing now.
//! The agent keeps the process groups of its running commands (and of a
//! head's JOB); the snapshot covers their trees (`crate::snapshot::take`).

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::Shared;
use crate::snapshot::{NodeSnapshot, Options};

/// The process groups of the commands running now.
#[derive(Debug, Default)]
pub(crate) struct Running {
    groups: Mutex<BTreeSet<i32>>,
}

impl Running {
    pub(crate) fn add(&self, pgid: nix::unistd::Pid) {
        self.lock().insert(pgid.as_raw());
    }

    pub(crate) fn remove(&self, pgid: nix::unistd::Pid) {
        self.lock().remove(&pgid.as_raw());
    }

    pub(crate) fn groups(&self) -> BTreeSet<i32> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        self.groups
            .lock()
            .expect("not poisoned: no panics while held")
    }
}

/// The snapshot of every running command of this agent.
pub(crate) async fn take(shared: &Shared) -> NodeSnapshot {
    let mut snap = crate::snapshot::take(&shared.running.groups(), &Options::from_env()).await;
    snap.rank = shared.rank.unwrap_or(0);
    if !shared.host.is_empty() {
        snap.host = shared.host.clone();
    }
    snap
}
