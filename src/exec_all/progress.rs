//! When a run's nodes last showed progress: any byte of output from any
//! node. `--hang-timeout` ends an attempt in which none came for that long
//! (the dispatcher watches; every node task touches it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Progress {
    start: Instant,
    /// Milliseconds from `start` to the last progress.
    last_ms: AtomicU64,
}

impl Progress {
    pub fn new() -> Self {
        Progress {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
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
        let p = Progress::new();
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
