//! `#multinode:snapshot`: what the commands this agent runs are doing now.
//! The agent keeps the process groups of its running commands (and of a
//! head's JOB, and of groups a client of the job asked it to show:
//! `#multinode:show-group`); the snapshot covers their trees
//! (`crate::snapshot::take`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use super::Shared;
use crate::snapshot::{NodeSnapshot, Options};

/// The process groups of the commands running now, each with how many
/// times it was added (a group shown by a client may also be a command's).
#[derive(Debug, Default)]
pub(crate) struct Running {
    groups: Mutex<BTreeMap<i32, usize>>,
}

impl Running {
    pub(crate) fn add(&self, pgid: nix::unistd::Pid) {
        *self.lock().entry(pgid.as_raw()).or_default() += 1;
    }

    pub(crate) fn remove(&self, pgid: nix::unistd::Pid) {
        let mut groups = self.lock();
        if let Some(n) = groups.get_mut(&pgid.as_raw()) {
            *n -= 1;
            if *n == 0 {
                groups.remove(&pgid.as_raw());
            }
        }
    }

    pub(crate) fn groups(&self) -> BTreeSet<i32> {
        self.lock().keys().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, usize>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use nix::unistd::Pid;

    #[test]
    fn a_group_added_twice_stays_until_removed_twice() {
        let running = Running::default();
        running.add(Pid::from_raw(7));
        running.add(Pid::from_raw(7));
        running.add(Pid::from_raw(9));
        running.remove(Pid::from_raw(7));
        assert_eq!(running.groups(), BTreeSet::from([7, 9]));
        running.remove(Pid::from_raw(7));
        running.remove(Pid::from_raw(11));
        assert_eq!(running.groups(), BTreeSet::from([9]));
    }
}
