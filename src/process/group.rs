//! Process groups and sessions: signalling a group, whether it still has a
//! live member (`/proc`), and ending it: SIGTERM, a grace, SIGKILL, with a
//! runtime or without one.

use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// Whether `sig` asks a command to end: SIGTERM, SIGINT, SIGHUP. The grace
/// period of a group counts from the first of these it gets.
pub fn ends(sig: Signal) -> bool {
    matches!(sig, Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP)
}

/// Sends `sig` to group `pgid`, ignoring a group that no longer exists.
pub fn signal_group(pgid: Pid, sig: Signal) {
    if let Err(e) = signal::killpg(pgid, sig)
        && e != nix::errno::Errno::ESRCH
    {
        tracing::debug!(pgid = pgid.as_raw(), ?sig, error = %e, "killpg failed");
    }
}

/// Whether any live process (not a zombie waiting for its reaper) is still in group `pgid`.
pub fn group_alive(pgid: Pid) -> bool {
    if signal::killpg(pgid, None).is_err() {
        return false;
    }
    // killpg also counts zombies, which no signal can end: look closer.
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        live_member_of(&stat, pgid.as_raw())
    })
}

/// Reads a `/proc/PID/stat` line: in group `pgid` and not a zombie.
fn live_member_of(stat: &str, pgid: i32) -> bool {
    stat_ids(stat).is_some_and(|(pgrp, _)| pgrp == pgid)
}

/// A live process's group and session from its `/proc/PID/stat` line; `None`
/// for a zombie.
fn stat_ids(stat: &str) -> Option<(i32, i32)> {
    // Fields after the command name, which may itself hold spaces and ')'.
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let pgrp = fields.nth(1)?.parse::<i32>().ok()?;
    let session = fields.next()?.parse::<i32>().ok()?;
    (!matches!(state, "Z" | "X")).then_some((pgrp, session))
}

/// The process groups with a live member in session `sid`. A terminal's
/// session has several: a shell with job control gives each job its own.
pub fn session_groups(sid: Pid) -> Vec<Pid> {
    sessions_groups(|session| session == sid.as_raw())
}

/// The process groups with a live member in a session `wanted` says yes
/// to, in one pass over `/proc`.
pub fn sessions_groups(wanted: impl Fn(i32) -> bool) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut groups: Vec<Pid> = entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (pgrp, session) = stat_ids(&stat)?;
            wanted(session).then_some(Pid::from_raw(pgrp))
        })
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// Ends every process group of session `sid` as a terminal hangup would:
/// SIGHUP (and SIGCONT, for a stopped job), up to `grace`, then SIGKILL to
/// whatever is left of the session.
pub async fn end_session(sid: Pid, grace: Duration) {
    let groups = session_groups(sid);
    if groups.is_empty() {
        return;
    }
    for group in groups {
        signal_group(group, Signal::SIGHUP);
        signal_group(group, Signal::SIGCONT);
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if session_groups(sid).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for group in session_groups(sid) {
        signal_group(group, Signal::SIGKILL);
    }
}

/// Ends whatever is left of a group whose leader already exited: SIGTERM,
/// up to `grace`, then SIGKILL. Returns at once when the group is empty.
pub async fn end_group(pgid: Pid, grace: Duration) {
    if !group_alive(pgid) {
        return;
    }
    signal_group(pgid, Signal::SIGTERM);
    kill_group_at(pgid, tokio::time::Instant::now() + grace).await;
}

/// Ends what is left of a group whose leader exited. A group that had a
/// signal that ends it (at `signalled`) less than `grace` ago keeps its
/// grace: no second SIGTERM (it could cut short a handler still at work),
/// SIGKILL to what is left at `signalled + grace`. Otherwise SIGTERM, up to
/// `grace`, SIGKILL.
pub async fn end_group_after(pgid: Pid, grace: Duration, signalled: Option<tokio::time::Instant>) {
    match signalled.map(|at| at + grace) {
        Some(deadline) if tokio::time::Instant::now() < deadline => {
            kill_group_at(pgid, deadline).await;
        }
        _ => end_group(pgid, grace).await,
    }
}

/// Ending without a runtime (the keeper, the supervisor): SIGTERM through
/// `signal`, up to `grace` until `gone()` says everything ended (polled every
/// 50 ms), then SIGKILL through `signal` to whatever is left. The blocking
/// twin of [`end_group`].
pub fn end_blocking(signal: impl Fn(Signal), mut gone: impl FnMut() -> bool, grace: Duration) {
    signal(Signal::SIGTERM);
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline && !gone() {
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(Signal::SIGKILL);
}

/// Waits until the group is empty or `deadline` has come, then SIGKILLs
/// whatever is left: for a group that already has its signal.
pub async fn kill_group_at(pgid: Pid, deadline: tokio::time::Instant) {
    while tokio::time::Instant::now() < deadline {
        if !group_alive(pgid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal_group(pgid, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_are_read_past_odd_names() {
        let line = "42 (a) b (c) S 1 77 77 0 -1 4194560";
        assert!(live_member_of(line, 77));
        assert!(!live_member_of(line, 78));
        assert!(!live_member_of("43 (sleep) Z 1 77 77 0", 77));
    }
}
