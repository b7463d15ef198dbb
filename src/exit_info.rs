//! What the node a command ran on knows of how it ended, beyond its exit
//! status: whether the kernel OOM-killed a process of the node's cgroup (or
//! container) while the command ran, and where a core file went.
//!
//! The OOM kills are counted by the kernel per cgroup (`oom_kill` in cgroup
//! v2's `memory.events`, or v1's `memory.oom_control`); the count of the
//! node's cgroup before and after the command tells whether the kernel killed
//! something there meanwhile (another command of the same cgroup that was
//! killed at the same time would count too).
//!
//! Only the node itself can tell, so it is measured there: by the agent for
//! its commands, by exec_all for the one it runs locally. How the agent sends
//! it to a client that asked is `protocol::exit_info`'s. Clients that do not
//! ask (OpenSSH's `ssh`, `mn-ssh`) never see it; nodes that cannot tell (a
//! stock `sshd`, an external wrapper) send nothing, and the report says
//! "unknown".

use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use crate::protocol::exit_info::ExitInfo;

/// A core file search looks at no more than this many directory entries.
const MAX_DIR_ENTRIES: usize = 10_000;

/// Watches one command: `start` before it is spawned, `finish` once it ended.
#[derive(Debug)]
pub struct Watch {
    events: Option<PathBuf>,
    before: Option<u64>,
    started: SystemTime,
    cwd: PathBuf,
}

impl Watch {
    /// `cwd`: where the command runs (a relative `core_pattern` is there).
    pub fn start(cwd: &Path) -> Watch {
        let (events, before) = own_oom_kills().unzip();
        Watch {
            events,
            before,
            // File times have a coarser clock than this one: a second of slack.
            started: SystemTime::now() - std::time::Duration::from_secs(1),
            cwd: cwd.to_path_buf(),
        }
    }

    /// What the node saw; `dumped`: the command's status says it may have
    /// written a core (a signal that dumps core, or 128+ such a signal).
    pub fn finish(&self, dumped: bool) -> ExitInfo {
        let after = self.events.as_deref().and_then(read_oom_kills);
        let oom_kills = match (self.before, after) {
            (Some(before), Some(after)) => Some(after.saturating_sub(before)),
            _ => None,
        };
        let core = if dumped {
            std::fs::read_to_string("/proc/sys/kernel/core_pattern")
                .ok()
                .and_then(|pattern| find_core(pattern.trim_end(), &self.cwd, self.started))
        } else {
            None
        };
        ExitInfo {
            oom_kills,
            cgroup: oom_kills
                .and(self.events.as_ref())
                .map(|p| p.display().to_string()),
            core,
        }
    }
}

/// Signals whose default action writes a core (signal(7)).
pub fn dumps_core(signo: i32) -> bool {
    use libc::*;
    matches!(
        signo,
        SIGQUIT
            | SIGILL
            | SIGTRAP
            | SIGABRT
            | SIGBUS
            | SIGFPE
            | SIGSEGV
            | SIGSYS
            | SIGXCPU
            | SIGXFSZ
    )
}

/// Whether an outcome may have left a core: killed by a core signal, or a
/// shell that says one of its commands was (128+N).
pub fn may_have_dumped(outcome: &crate::process::Outcome) -> bool {
    match outcome {
        crate::process::Outcome::Signaled {
            signal,
            core_dumped,
        } => *core_dumped || dumps_core(*signal),
        crate::process::Outcome::Exited(code) => *code > 128 && dumps_core(code - 128),
    }
}

/// The file that counts this process's cgroup's OOM kills, and its count
/// now. The file is looked up once ([`own_memory_events`]: a process is not
/// moved between cgroups after it starts, as a rule) and again only when it
/// can no longer be read: reading `/proc/self/cgroup` and trying the
/// candidates cost an agent ~3-4% of its CPU a command.
fn own_oom_kills() -> Option<(PathBuf, u64)> {
    static FOUND: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    cached_or_found(&FOUND, own_memory_events)
}

/// The count of the file in `cache`, or of the one `find` finds (then kept).
fn cached_or_found(
    cache: &std::sync::Mutex<Option<PathBuf>>,
    find: impl FnOnce() -> Option<(PathBuf, u64)>,
) -> Option<(PathBuf, u64)> {
    let cached = cache
        .lock()
        .expect("not poisoned: no panics while held")
        .clone();
    if let Some(path) = cached
        && let Some(count) = read_oom_kills(&path)
    {
        return Some((path, count));
    }
    let (path, count) = find()?;
    *cache.lock().expect("not poisoned: no panics while held") = Some(path.clone());
    Some((path, count))
}

/// The file that counts this process's cgroup's OOM kills, and its count:
/// cgroup v2's `memory.events`, or the v1 memory controller's
/// `memory.oom_control` (both have an `oom_kill N` line). A container sees
/// its own cgroup at the root of `/sys/fs/cgroup`, so that is tried when the
/// full path is not there.
fn own_memory_events() -> Option<(PathBuf, u64)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let root = Path::new("/sys/fs/cgroup");
    let candidates = match cgroup_v1_memory_path(&text) {
        Some(path) => {
            let memory = root.join("memory");
            [
                memory
                    .join(path.trim_start_matches('/'))
                    .join("memory.oom_control"),
                memory.join("memory.oom_control"),
            ]
        }
        None => {
            let path = cgroup_v2_path(&text)?;
            [
                root.join(path.trim_start_matches('/'))
                    .join("memory.events"),
                root.join("memory.events"),
            ]
        }
    };
    candidates
        .into_iter()
        .find_map(|p| read_oom_kills(&p).map(|count| (p, count)))
}

/// The cgroup v2 path in `/proc/self/cgroup` (the `0::PATH` line).
fn cgroup_v2_path(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// The path of the v1 memory controller in `/proc/self/cgroup`
/// (`N:memory:PATH`), when it is mounted as v1.
fn cgroup_v1_memory_path(text: &str) -> Option<&str> {
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    })
}

fn read_oom_kills(path: &Path) -> Option<u64> {
    oom_kills(&std::fs::read_to_string(path).ok()?)
}

/// The `oom_kill` count of a `memory.events` file.
fn oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// Where a core went, after `pattern` (`/proc/sys/kernel/core_pattern`): the
/// handler it was piped to, or the newest file since `since` that the
/// pattern names (its directory, the name up to the first `%`).
fn find_core(pattern: &str, cwd: &Path, since: SystemTime) -> Option<String> {
    if let Some(handler) = pattern.strip_prefix('|') {
        let program = handler.split_whitespace().next().unwrap_or(handler);
        return Some(format!("piped to {program} (core_pattern)"));
    }
    if pattern.is_empty() {
        return None;
    }
    let fixed = &pattern[..pattern.find('%').unwrap_or(pattern.len())];
    let full = cwd.join(fixed);
    let (dir, prefix) = if fixed.ends_with('/') {
        (full.as_path(), String::new())
    } else {
        (
            full.parent()?,
            full.file_name()?.to_string_lossy().into_owned(),
        )
    };
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.take(MAX_DIR_ENTRIES).flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let Ok(modified) = meta.modified() else {
            continue;
        };
        if meta.is_file() && modified >= since && newest.as_ref().is_none_or(|(t, _)| modified > *t)
        {
            newest = Some((modified, entry.path()));
        }
    }
    newest.map(|(_, p)| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cgroup_and_its_oom_kills() {
        assert_eq!(
            cgroup_v2_path("12:cpu:/x\n0::/system.slice/docker-1.scope\n"),
            Some("/system.slice/docker-1.scope")
        );
        assert_eq!(cgroup_v2_path("4:memory:/x\n"), None);
        let hybrid = "5:devices:/\n4:memory:/docker/abc\n0::/\n";
        assert_eq!(cgroup_v1_memory_path(hybrid), Some("/docker/abc"));
        assert_eq!(cgroup_v1_memory_path("0::/user.slice\n"), None);
        // cgroup v1's memory.oom_control has the same line.
        assert_eq!(
            oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"),
            Some(3)
        );
        let events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(oom_kills(events), Some(2));
        assert_eq!(oom_kills("low 0\n"), None);
    }

    #[test]
    fn the_counter_file_is_looked_up_once_and_again_when_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory.events");
        std::fs::write(&file, "oom 0\noom_kill 3\n").unwrap();
        let cache = std::sync::Mutex::new(None);
        let lookups = std::cell::Cell::new(0);
        let find = |path: &Path| {
            lookups.set(lookups.get() + 1);
            read_oom_kills(path).map(|n| (path.to_path_buf(), n))
        };
        assert_eq!(
            cached_or_found(&cache, || find(&file)),
            Some((file.clone(), 3))
        );
        std::fs::write(&file, "oom 1\noom_kill 4\n").unwrap();
        // The kept file is read again, not looked up.
        assert_eq!(
            cached_or_found(&cache, || find(&file)),
            Some((file.clone(), 4))
        );
        assert_eq!(lookups.get(), 1);
        // Gone (the cgroup removed): looked up again, and the new one kept.
        std::fs::remove_file(&file).unwrap();
        let other = dir.path().join("memory.oom_control");
        std::fs::write(&other, "oom_kill_disable 0\noom_kill 7\n").unwrap();
        assert_eq!(
            cached_or_found(&cache, || find(&other)),
            Some((other.clone(), 7))
        );
        assert_eq!(lookups.get(), 2);
        assert_eq!(cache.lock().unwrap().as_deref(), Some(other.as_path()));
        // Nothing there any more: nothing.
        std::fs::remove_file(&other).unwrap();
        assert_eq!(cached_or_found(&cache, || find(&other)), None);
    }

    #[test]
    fn finds_a_new_core_file_by_its_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let before = SystemTime::now() - std::time::Duration::from_secs(1);
        std::fs::write(dir.path().join("unrelated"), b"x").unwrap();
        assert_eq!(find_core("core.%p", dir.path(), before), None);
        std::fs::write(dir.path().join("core.4242"), b"ELF").unwrap();
        let found = find_core("core.%p", dir.path(), before).unwrap();
        assert!(found.ends_with("/core.4242"), "{found}");
        // An absolute directory in the pattern; files older than the command do not count.
        let abs = format!("{}/core-%e", dir.path().display());
        assert_eq!(
            find_core(
                &abs,
                Path::new("/"),
                SystemTime::now() + std::time::Duration::from_secs(60)
            ),
            None
        );
        assert_eq!(
            find_core(
                "|/usr/lib/systemd/systemd-coredump %P %u",
                dir.path(),
                before
            )
            .as_deref(),
            Some("piped to /usr/lib/systemd/systemd-coredump (core_pattern)")
        );
    }

    #[test]
    fn core_signals_and_shell_codes() {
        use crate::process::Outcome;
        assert!(may_have_dumped(&Outcome::Exited(139)));
        assert!(!may_have_dumped(&Outcome::Exited(137)));
        assert!(may_have_dumped(&Outcome::Signaled {
            signal: libc::SIGABRT,
            core_dumped: false
        }));
        assert!(!may_have_dumped(&Outcome::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false
        }));
    }
}
