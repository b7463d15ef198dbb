//! A command's heartbeat file: a training loop that prints nothing for a
//! while shows that it makes progress by touching it (`os.utime(path)`,
//! `touch "$MULTINODE_HEARTBEAT_FILE"`). Whoever runs the command (the
//! agent for a client that asked, exec_all for the node it runs itself)
//! makes the file before the spawn, names it in the command's
//! environment, looks at its modification time every [`POLL`], and removes
//! it once the command's group has ended. How an agent tells its client is
//! `protocol::heartbeat`'s.
//!
//! An exec_all that itself runs under a watcher (a relay, whose agent was
//! asked by the head) passes its nodes' heartbeats on by touching its own
//! file ([`PassUp`]): the same carrier at every level of a tree.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;

use crate::env_map::EnvMap;
use crate::vars;

/// How often the file's modification time is looked at (a `stat`, a few
/// microseconds): a touch is seen within this.
pub(crate) const POLL: Duration = Duration::from_millis(250);
/// Heartbeats of one file are at least this far apart: a program that
/// touches its file in a tight loop costs its watcher two messages a
/// second, and a tree of relays adds little delay at each level.
pub(crate) const MIN_GAP: Duration = Duration::from_millis(500);

/// Heartbeats passed on are at least this far apart.
const PASS_UP_EVERY: Duration = Duration::from_millis(250);

/// A command's heartbeat file, removed when dropped: whatever the command
/// made of it (a directory with files in it goes whole, a link is removed
/// and not followed).
#[derive(Debug)]
pub(crate) struct HeartbeatFile {
    path: PathBuf,
    /// The modification time at the last look.
    seen: Option<SystemTime>,
    tick: Option<tokio::time::Interval>,
}

impl HeartbeatFile {
    /// Makes an empty file under an unpredictable name in `dir` (mode 0600,
    /// never one that existed): `os.utime` needs it to exist.
    pub(crate) fn create(dir: &Path) -> std::io::Result<HeartbeatFile> {
        let file = tempfile::Builder::new()
            .prefix("heartbeat-")
            .tempfile_in(dir)?;
        let seen = file.as_file().metadata()?.modified().ok();
        let path = file.into_temp_path().keep().map_err(|e| e.error)?;
        Ok(HeartbeatFile {
            path,
            seen,
            tick: None,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file was touched (or written) since the last look. A
    /// file the command removed is not a heartbeat.
    pub(crate) fn touched(&mut self) -> bool {
        let now = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        if now.is_some() && now != self.seen {
            self.seen = now;
            return true;
        }
        false
    }

    /// Resolves at the next look that finds the file touched, at least
    /// [`MIN_GAP`] after the last. Cancel-safe: a look happens within the
    /// poll that sees the timer fire.
    pub(crate) async fn beat(&mut self) {
        loop {
            let tick = self.tick.get_or_insert_with(|| {
                let mut tick = tokio::time::interval(POLL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick
            });
            tick.tick().await;
            if self.touched() {
                if let Some(tick) = &mut self.tick {
                    tick.reset_after(MIN_GAP);
                }
                return;
            }
        }
    }
}

impl Drop for HeartbeatFile {
    fn drop(&mut self) {
        if let Err(e) = crate::private_files::remove_all(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove a heartbeat file");
        }
    }
}

/// Waits for the next heartbeat of `file`; never, without one.
pub(crate) async fn next_beat(file: Option<&mut HeartbeatFile>) {
    match file {
        Some(file) => file.beat().await,
        None => std::future::pending().await,
    }
}

/// This process's own heartbeat file, when something watches it: the
/// heartbeats of the commands it runs are passed on by touching it.
#[derive(Debug)]
pub(crate) struct PassUp {
    path: PathBuf,
    start: Instant,
    /// Milliseconds from `start` to the last touch, plus one (0: never).
    last_ms: AtomicU64,
}

impl PassUp {
    /// From [`crate::vars::HEARTBEAT_FILE`] in this process's environment.
    pub(crate) fn from_env(env: &EnvMap) -> Option<PassUp> {
        env.get(vars::HEARTBEAT_FILE).map(|path| PassUp {
            path: PathBuf::from(path),
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    /// A command made progress: touch the file, unless it was touched less
    /// than [`PASS_UP_EVERY`] ago. A file that is gone is not made again
    /// (its watcher removed it: nobody would look). Touched by its path
    /// (`utimensat`), never opened: the variable may name a FIFO, whose
    /// open for writing waits for a reader (for good, on a runtime's
    /// worker); and a link is touched itself, not what it points to.
    pub(crate) fn beat(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        let every = PASS_UP_EVERY.as_millis() as u64;
        if last != 0 && now < last + every {
            return;
        }
        if self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return; // another node's task touches it now
        }
        let touched = utimensat(
            nix::fcntl::AT_FDCWD,
            &self.path,
            &TimeSpec::UTIME_OMIT,
            &TimeSpec::UTIME_NOW,
            UtimensatFlags::NoFollowSymlink,
        );
        if let Err(e) = touched {
            tracing::debug!(path = %self.path.display(), error = %e, "heartbeat not passed on");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modified(path: &Path) -> SystemTime {
        std::fs::metadata(path).unwrap().modified().unwrap()
    }

    #[test]
    fn a_touch_is_seen_once_and_the_file_goes_with_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = HeartbeatFile::create(dir.path()).unwrap();
        let path = file.path().to_path_buf();
        assert!(path.starts_with(dir.path()));
        assert!(!file.touched(), "a new file is no heartbeat");
        let later = modified(&path) + Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert!(file.touched());
        assert!(!file.touched(), "the same touch counts once");
        std::fs::remove_file(&path).unwrap();
        assert!(!file.touched(), "a removed file is no heartbeat");
        std::fs::write(&path, b"").unwrap();
        drop(file);
        assert!(!path.exists(), "removed with its owner");
    }

    #[tokio::test(start_paused = true)]
    async fn beat_waits_for_a_touch() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = HeartbeatFile::create(dir.path()).unwrap();
        let quiet = tokio::time::timeout(POLL * 3, file.beat()).await;
        assert!(quiet.is_err(), "no heartbeat without a touch");
        let later = modified(file.path()) + Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(file.path())
            .unwrap()
            .set_modified(later)
            .unwrap();
        tokio::time::timeout(POLL * 2, file.beat())
            .await
            .expect("the touch is seen at the next look");
        let again = modified(file.path()) + Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(file.path())
            .unwrap()
            .set_modified(again)
            .unwrap();
        let soon = tokio::time::timeout(MIN_GAP - POLL, file.beat()).await;
        assert!(soon.is_err(), "heartbeats are MIN_GAP apart at least");
        tokio::time::timeout(POLL * 2, file.beat())
            .await
            .expect("the next one comes once the gap is over");
    }

    #[test]
    fn a_passed_on_heartbeat_touches_the_file_and_never_makes_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("up");
        std::fs::write(&path, b"").unwrap();
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let mut env = EnvMap::default();
        env.0
            .insert(vars::HEARTBEAT_FILE.into(), path.to_str().unwrap().into());
        let up = PassUp::from_env(&env).expect("the variable is set");
        up.beat();
        assert!(modified(&path) > old, "touched");
        std::fs::remove_file(&path).unwrap();
        std::thread::sleep(PASS_UP_EVERY);
        up.beat();
        assert!(!path.exists(), "a file that is gone is not made again");
        assert!(PassUp::from_env(&EnvMap::default()).is_none());
    }

    /// A relay's own heartbeat file is whatever its environment names: a
    /// FIFO is touched without being opened (an open for writing would
    /// wait for a reader for good, on a runtime's worker), and a link is
    /// touched itself, never what it points to.
    #[test]
    fn a_passed_on_heartbeat_opens_no_fifo_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&target)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let long_ago = TimeSpec::new(1_000_000, 0);
        utimensat(
            nix::fcntl::AT_FDCWD,
            &fifo,
            &long_ago,
            &long_ago,
            UtimensatFlags::NoFollowSymlink,
        )
        .unwrap();
        let (done, beaten) = std::sync::mpsc::channel();
        for path in [fifo.clone(), link] {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut env = EnvMap::default();
                env.0
                    .insert(vars::HEARTBEAT_FILE.into(), path.to_str().unwrap().into());
                PassUp::from_env(&env).unwrap().beat();
                let _ = done.send(path);
            });
        }
        for _ in 0..2 {
            beaten
                .recv_timeout(Duration::from_secs(5))
                .expect("a heartbeat passed on does not wait");
        }
        assert!(modified(&fifo) > old, "the FIFO is touched");
        assert_eq!(modified(&target), old, "the link is not followed");
    }

    /// A command may make its heartbeat file a directory with files in it:
    /// it goes all the same when its owner is dropped.
    #[test]
    fn a_heartbeat_file_made_a_directory_goes_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = HeartbeatFile::create(dir.path()).unwrap();
        let path = file.path().to_path_buf();
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir_all(path.join("deeper")).unwrap();
        std::fs::write(path.join("deeper/x"), b"").unwrap();
        drop(file);
        assert!(!path.exists(), "{} is left", path.display());
    }
}
