//! When a run's nodes last showed progress: any byte of output from any
//! node, or a heartbeat (a node's command touched its heartbeat file,
//! `crate::heartbeat`). `--hang-timeout` ends an attempt in which none came
//! for that long (the dispatcher watches; every node task touches it). An
//! exec_all that runs under a watcher itself (a relay) passes heartbeats on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::heartbeat::PassUp;

#[derive(Debug)]
pub struct Progress {
    start: Instant,
    /// Milliseconds from `start` to the last progress.
    last_ms: AtomicU64,
    /// This process's own heartbeat file, when something watches it.
    up: Option<PassUp>,
}

impl Progress {
    pub fn new(up: Option<PassUp>) -> Self {
        Progress {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            up,
        }
    }

    /// A node's heartbeat: progress, passed on when this process has a
    /// heartbeat of its own (its output needs no such help: it is output).
    pub fn beat(&self) {
        self.touch();
        if let Some(up) = &self.up {
            up.beat();
        }
    }

    /// A node showed progress now.
    pub fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// When the last progress was (the run's start before any).
    pub fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_progress_only_moves_on() {
        let p = Progress::new(None);
        let start = p.last();
        std::thread::sleep(Duration::from_millis(20));
        p.touch();
        let touched = p.last();
        assert!(
            touched >= start + Duration::from_millis(20),
            "{:?}",
            touched - start
        );
        assert!(touched <= Instant::now());
    }
}
