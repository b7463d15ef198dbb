//! The process groups of the agent's running commands (and of a head's
//! JOB, and of groups a client of the job asked it to show:
//! `#multinode:show-group`), each with its command's record.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::snapshot::watch::{MAX_TAILS, Watched};

/// The process groups of the commands running now, each with how many
/// times it was added (a group shown by a client may also be a command's)
/// and, for `top`, what it was started as and has printed (the first
/// record it was added with).
#[derive(Debug, Default)]
pub(crate) struct Running {
    groups: Mutex<BTreeMap<i32, Entry>>,
}

#[derive(Debug, Default)]
struct Entry {
    count: usize,
    watched: Option<Arc<Watched>>,
    /// Added by a client's show-group alone: its record is the client's word.
    shown: bool,
}

/// The groups clients may show at once (`#multinode:show-group`): as many
/// processes as one node may run, each shown by its exec_all.
pub(crate) const SHOWN_GROUPS_MAX: usize = 4096;

impl Running {
    pub(crate) fn add(&self, pgid: nix::unistd::Pid) {
        self.lock().entry(pgid.as_raw()).or_default().count += 1;
    }

    /// Adds a group with its record, made by `make(keeps_tail)`: a tail
    /// is kept for at most [`MAX_TAILS`] groups at once.
    pub(crate) fn add_watched(
        &self,
        pgid: nix::unistd::Pid,
        make: impl FnOnce(bool) -> Watched,
    ) -> Arc<Watched> {
        let mut groups = self.lock();
        let tails = groups.values().filter(|e| e.watched.is_some()).count();
        let entry = groups.entry(pgid.as_raw()).or_default();
        entry.count += 1;
        if entry.shown {
            // A command's record is the agent's own: a client's word for
            // the group (shown while its pid was free) gives way.
            entry.shown = false;
            entry.watched = None;
        }
        entry
            .watched
            .get_or_insert_with(|| Arc::new(make(tails < MAX_TAILS)))
            .clone()
    }

    /// Adds a group a client shows (`#multinode:show-group`) with its
    /// record: refused (`Err` with why, to follow "process group N") for a group already kept (a
    /// command's record is never a client's to write) and past
    /// [`SHOWN_GROUPS_MAX`].
    pub(crate) fn add_shown(
        &self,
        pgid: nix::unistd::Pid,
        make: impl FnOnce(bool) -> Watched,
    ) -> Result<Arc<Watched>, String> {
        let mut groups = self.lock();
        if groups.contains_key(&pgid.as_raw()) {
            return Err("is already shown or run by this agent".to_string());
        }
        if groups.values().filter(|e| e.shown).count() >= SHOWN_GROUPS_MAX {
            return Err(format!(
                "is one too many: {SHOWN_GROUPS_MAX} groups are already shown to this agent"
            ));
        }
        let tails = groups.values().filter(|e| e.watched.is_some()).count();
        let watched = Arc::new(make(tails < MAX_TAILS));
        groups.insert(
            pgid.as_raw(),
            Entry {
                count: 1,
                watched: Some(watched.clone()),
                shown: true,
            },
        );
        Ok(watched)
    }

    pub(crate) fn remove(&self, pgid: nix::unistd::Pid) {
        let mut groups = self.lock();
        if let Some(e) = groups.get_mut(&pgid.as_raw()) {
            e.count -= 1;
            if e.count == 0 {
                groups.remove(&pgid.as_raw());
            }
        }
    }

    pub(crate) fn groups(&self) -> BTreeSet<i32> {
        self.lock().keys().copied().collect()
    }

    /// Each group's record, as a snapshot carries it.
    pub(super) fn commands(&self, with_tail: bool) -> Vec<crate::snapshot::CommandInfo> {
        let now = crate::snapshot::unix_ms();
        let watched: Vec<(i32, Arc<Watched>)> = self
            .lock()
            .iter()
            .filter_map(|(pgid, e)| e.watched.clone().map(|w| (*pgid, w)))
            .collect();
        watched
            .iter()
            .map(|(pgid, w)| w.info(*pgid, now, with_tail))
            .collect()
    }

    /// The `NCCL_RAS_ADDR`s the running commands were started with.
    pub(super) fn ras_addrs(&self) -> Vec<String> {
        self.lock()
            .values()
            .filter_map(|e| e.watched.as_ref()?.ras_addr.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Entry>> {
        self.groups
            .lock()
            .expect("not poisoned: no panics while held")
    }
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

    #[test]
    fn a_shown_group_never_writes_a_commands_record_and_is_bounded() {
        let running = Running::default();
        let command =
            running.add_watched(Pid::from_raw(5), |tail| Watched::new(Some(1), None, tail));
        let refused = running.add_shown(Pid::from_raw(5), |tail| Watched::new(Some(9), None, tail));
        assert!(refused.unwrap_err().contains("already shown or run"));
        assert_eq!(running.commands(false)[0].rank, Some(1));
        // Shown first, then a command of the agent's takes the pid: its record.
        let shown = running.add_shown(Pid::from_raw(6), |tail| Watched::new(Some(9), None, tail));
        assert!(shown.is_ok());
        let again = running.add_watched(Pid::from_raw(6), |tail| Watched::new(Some(2), None, tail));
        assert!(!Arc::ptr_eq(&shown.unwrap(), &again));
        assert_eq!(running.commands(false)[1].rank, Some(2));
        assert!(Arc::ptr_eq(
            &command,
            &running.add_watched(Pid::from_raw(5), |t| Watched::new(None, None, t))
        ));
        for pgid in 0..SHOWN_GROUPS_MAX as i32 {
            running
                .add_shown(Pid::from_raw(pgid + 100), |t| Watched::new(None, None, t))
                .unwrap();
        }
        let past = running.add_shown(Pid::from_raw(99), |t| Watched::new(None, None, t));
        assert!(past.unwrap_err().contains("already shown to this agent"));
        running.remove(Pid::from_raw(100));
        assert!(
            running
                .add_shown(Pid::from_raw(99), |t| Watched::new(None, None, t))
                .is_ok()
        );
    }

    #[test]
    fn a_record_stays_with_its_group_and_tails_are_bounded() {
        let running = Running::default();
        let first = running.add_watched(Pid::from_raw(5), |tail| Watched::new(Some(1), None, tail));
        // Added again (shown by a client too): the first record stays.
        let again = running.add_watched(Pid::from_raw(5), |tail| Watched::new(Some(9), None, tail));
        assert!(Arc::ptr_eq(&first, &again));
        first.seen(crate::snapshot::watch::Stream::Out, b"step 1\n");
        let infos = running.commands(true);
        assert_eq!(infos.len(), 1);
        assert_eq!((infos[0].pgid, infos[0].rank), (5, Some(1)));
        assert_eq!(infos[0].tail, ["step 1"]);
        running.remove(Pid::from_raw(5));
        assert_eq!(running.commands(false).len(), 1);
        running.remove(Pid::from_raw(5));
        assert!(running.commands(false).is_empty());
        // Past MAX_TAILS groups, a record keeps no tail.
        for pgid in 0..MAX_TAILS as i32 + 1 {
            running.add_watched(Pid::from_raw(pgid + 100), |tail| {
                Watched::new(None, None, tail)
            });
        }
        let last = running.add_watched(Pid::from_raw(MAX_TAILS as i32 + 100), |tail| {
            Watched::new(None, None, tail)
        });
        last.seen(crate::snapshot::watch::Stream::Out, b"x\n");
        let kept: usize = running
            .commands(true)
            .iter()
            .filter(|c| !c.tail.is_empty())
            .count();
        assert_eq!(kept, 0, "the last group keeps no tail");
    }
}
