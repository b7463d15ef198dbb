//! The processes of a node's command trees, found in `/proc` without
//! reading every process's `stat` each time.
//!
//! Finding the trees takes every process's parent, group and session: one
//! `/proc/PID/stat` read a process of the machine. On a node with many
//! processes that is most of a snapshot's cost (860 processes: about 5 ms
//! of a CPU), and `top` asks for one every refresh. So the last read is
//! kept: a process that was not in the trees keeps its place from the
//! last read, and only the trees' own processes and the processes new
//! since then are read again. A process is the same one when its
//! `/proc/PID` directory entry has the same inode number (`d_ino`, from
//! the directory listing alone): procfs gives each process's directory a
//! new inode, so a reused pid reads as new.
//!
//! Why the kept places hold: a process outside the trees cannot come
//! into them. Its parent, group and session change only by `setsid`,
//! `setpgid` within its own session, or being reparented when its parent
//! ends, to an ancestor (a subreaper) that is itself outside the trees.
//! What the kept reads cannot know is a change of the roots (a command
//! started or ended): then everything is read again, and at least every
//! [`FULL_READ_EVERY`] in any case.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::DirEntryExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::procfs::{self, Stat};

/// A full read at least this often, whatever was kept.
pub(crate) const FULL_READ_EVERY: Duration = Duration::from_secs(30);

/// What the last read found.
struct Kept {
    proc: PathBuf,
    roots: BTreeSet<i32>,
    at: Instant,
    /// Each process: its directory's inode number, its stat then, and
    /// whether it was in the trees.
    seen: HashMap<i32, (u64, Stat, bool)>,
}

/// The last read of this process (the agent's snapshots, one at a time
/// or a few at once: a second reader waits for the first).
static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

/// How a read went: processes listed, and stats read (for tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadCount {
    pub listed: usize,
    pub read: usize,
}

/// Every process in the trees of `roots` (`procfs::select`), parents first.
pub(crate) fn read(proc: &Path, roots: &BTreeSet<i32>) -> Vec<Stat> {
    read_counted(proc, roots).0
}

pub(crate) fn read_counted(proc: &Path, roots: &BTreeSet<i32>) -> (Vec<Stat>, ReadCount) {
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let usable = kept
        .take()
        .filter(|k| k.proc == proc && k.roots == *roots && k.at.elapsed() < FULL_READ_EVERY);
    let at = usable.as_ref().map_or_else(Instant::now, |k| k.at);
    let mut count = ReadCount::default();
    let Ok(dir) = std::fs::read_dir(proc) else {
        return (Vec::new(), count);
    };
    let mut all = Vec::new();
    let mut from_kept = BTreeSet::new();
    let mut seen = HashMap::new();
    for entry in dir.filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        count.listed += 1;
        let ino = entry.ino();
        let same = usable
            .as_ref()
            .and_then(|k| k.seen.get(&pid))
            .filter(|(i, _, member)| *i == ino && !member);
        let stat = match same {
            Some((_, stat, _)) => {
                from_kept.insert(pid);
                stat.clone()
            }
            None => {
                count.read += 1;
                match procfs::read_stat(proc, pid) {
                    Some(stat) => stat,
                    None => continue,
                }
            }
        };
        seen.insert(pid, (ino, stat.clone(), false));
        all.push(stat);
    }
    let chosen: Vec<Stat> = procfs::select(&all, roots)
        .into_iter()
        .filter_map(|s| {
            if !from_kept.contains(&s.pid) {
                return Some(s);
            }
            // Kept places cannot hold a tree's process (see above); were
            // one to, its numbers are read fresh.
            count.read += 1;
            procfs::read_stat(proc, s.pid)
        })
        .collect();
    for s in &chosen {
        if let Some(entry) = seen.get_mut(&s.pid) {
            entry.2 = true;
        }
    }
    *kept = Some(Kept {
        proc: proc.to_path_buf(),
        roots: roots.clone(),
        at,
        seen,
    });
    (chosen, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(proc: &Path, pid: i32, ppid: i32, pgrp: i32) {
        let dir = proc.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("stat"),
            format!(
                "{pid} (p{pid}) S {ppid} {pgrp} {pgrp} 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 100 0 12 0\n"
            ),
        )
        .unwrap();
    }

    fn pids(stats: &[Stat]) -> Vec<i32> {
        stats.iter().map(|s| s.pid).collect()
    }

    #[test]
    fn reads_only_the_trees_and_new_processes_again_and_a_new_directory_as_new() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        // Root 10 with child 11; 20 and 21 outside.
        write(proc, 10, 1, 10);
        write(proc, 11, 10, 10);
        write(proc, 20, 1, 20);
        write(proc, 21, 20, 20);
        std::fs::create_dir(proc.join("self")).unwrap();
        let roots = BTreeSet::from([10]);

        let (first, count) = read_counted(proc, &roots);
        assert_eq!(pids(&first), [10, 11]);
        assert_eq!(count, ReadCount { listed: 4, read: 4 });

        // Nothing new: the two tree processes are read again, nothing else.
        // A change to a kept process's stat in place is not read (the
        // kept place is used: what makes the read cheap).
        write(proc, 21, 11, 10);
        let (second, count) = read_counted(proc, &roots);
        assert_eq!(pids(&second), [10, 11]);
        assert_eq!(count, ReadCount { listed: 4, read: 2 });

        // A new process (a child of 11) is read and found.
        write(proc, 12, 11, 10);
        let (third, count) = read_counted(proc, &roots);
        assert_eq!(pids(&third), [10, 11, 12]);
        assert_eq!(count.read, 3);

        // Pid 21 reused: its directory is a new one (a new inode), read
        // again, and found in the tree it now belongs to.
        // (made beside the old one first, so that it cannot get its inode)
        let fresh = tempfile::tempdir_in(proc).unwrap();
        write(fresh.path(), 21, 11, 10);
        std::fs::remove_dir_all(proc.join("21")).unwrap();
        std::fs::rename(fresh.path().join("21"), proc.join("21")).unwrap();
        let (fourth, count) = read_counted(proc, &roots);
        assert_eq!(pids(&fourth), [10, 11, 12, 21]);
        assert_eq!(count.read, 4);

        // Other roots: everything read again.
        let (other, count) = read_counted(proc, &BTreeSet::from([20]));
        assert_eq!(pids(&other), [20]);
        assert_eq!(count.read, 5);

        // A process gone is gone from the trees.
        std::fs::remove_dir_all(proc.join("12")).unwrap();
        let (fifth, _) = read_counted(proc, &roots);
        assert_eq!(pids(&fifth), [10, 11, 21]);
    }

    #[test]
    fn the_trees_numbers_are_fresh_each_read() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path();
        write(proc, 10, 1, 10);
        write(proc, 30, 1, 30);
        let roots = BTreeSet::from([10]);
        let (first, _) = read_counted(proc, &roots);
        assert_eq!(first[0].cpu_ticks, 10);
        std::fs::write(
            proc.join("10/stat"),
            "10 (p10) R 1 10 10 0 -1 0 0 0 0 0 70 30 0 0 20 0 1 0 100 0 12 0\n",
        )
        .unwrap();
        let (second, _) = read_counted(proc, &roots);
        assert_eq!((second[0].state, second[0].cpu_ticks), ('R', 100));
    }
}
