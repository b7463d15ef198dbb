//! The signals a command handles, as one stream of signal numbers.
//! Signals are data: the caller decides to forward, escalate or stop.

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::Error;

/// SIGINT, SIGTERM and SIGHUP: what ends a launcher.
pub const STOP_SIGNALS: &[i32] = &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
/// What is passed on to a command rather than handled: `mn-ssh` sends these
/// to the remote command (as ssh would with a terminal), the agent's init
/// (PID 1) to the agent, the supervisor keeps them blocked for its command.
pub const FORWARDED_SIGNALS: &[i32] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The same signal again within this time counts once (see
/// [`Stops::next_distinct`]).
pub const REPEAT_WINDOW: Duration = Duration::from_millis(250);

/// Once created, these signals no longer have their default effect: they
/// arrive here instead, in order, for as long as the runtime it was made
/// in runs (exec_all makes one for a run and all its attempts: a signal
/// between two attempts waits here for the next).
pub struct Stops {
    rx: mpsc::UnboundedReceiver<i32>,
    /// Tasks of the runtime `Stops` was made in, which end with it.
    listeners: Vec<JoinHandle<()>>,
    /// The last signal [`Stops::next_distinct`] returned, and when.
    last: Option<(i32, Instant)>,
}

impl Stops {
    /// Must be called inside a tokio runtime; the signals are queued only
    /// while that runtime runs.
    pub fn new(signals: &[i32]) -> Result<Self, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let listeners = listen(signals, &tx)?;
        Ok(Stops {
            rx,
            listeners,
            last: None,
        })
    }

    /// Stops that never come: for a run driven by hand (tests), which
    /// must not take the test process's signals.
    #[cfg(test)]
    pub fn none() -> Self {
        // The sender is dropped: `next` waits for ever, `try_next` finds none.
        let (_, rx) = mpsc::unbounded_channel();
        Stops {
            rx,
            listeners: Vec::new(),
            last: None,
        }
    }

    /// A signal already received and not yet taken, if any.
    pub fn try_next(&mut self) -> Option<i32> {
        let signo = self.rx.try_recv().ok()?;
        self.last = Some((signo, Instant::now()));
        Some(signo)
    }

    /// The next signal received.
    pub async fn next(&mut self) -> i32 {
        match self.rx.recv().await {
            Some(signo) => signo,
            // No sender left (`none`; the listeners live as long as self):
            // wait rather than spin.
            None => std::future::pending().await,
        }
    }

    /// The next signal that is not a repeat: the same signal as the last one
    /// returned, within [`REPEAT_WINDOW`] of it, is skipped. A batch system
    /// that signals every process of a job (Slurm's `scancel` with
    /// proctrack/cgroup) reaches a command both directly and through the
    /// launcher that forwards it, a millisecond apart: that is one signal,
    /// not the second one that means "kill now". A person's second Ctrl-C
    /// comes later.
    pub async fn next_distinct(&mut self) -> i32 {
        loop {
            let signo = self.next().await;
            let now = Instant::now();
            if is_repeat(self.last, signo, now) {
                tracing::debug!(
                    signo,
                    "the same signal again at once: taken as the same one"
                );
                continue;
            }
            self.last = Some((signo, now));
            return signo;
        }
    }
}

/// Whether `signo` at `now` repeats `last` (same signal, within [`REPEAT_WINDOW`]).
fn is_repeat(last: Option<(i32, Instant)>, signo: i32, now: Instant) -> bool {
    last.is_some_and(|(prev, at)| {
        prev == signo && now.saturating_duration_since(at) < REPEAT_WINDOW
    })
}

/// One task a signal, each sending the signal's arrivals to `tx`.
fn listen(signals: &[i32], tx: &mpsc::UnboundedSender<i32>) -> Result<Vec<JoinHandle<()>>, Error> {
    let mut listeners = Vec::new();
    for &signo in signals {
        let mut stream = signal(SignalKind::from_raw(signo))
            .map_err(|e| Error::Failed(format!("cannot handle signal {signo}: {e}")))?;
        let tx = tx.clone();
        listeners.push(tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if tx.send(signo).is_err() {
                    return;
                }
            }
        }));
    }
    Ok(listeners)
}

impl Drop for Stops {
    fn drop(&mut self) {
        self.listeners.iter().for_each(JoinHandle::abort);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_is_the_same_signal_soon_after() {
        let t0 = Instant::now();
        let term = (libc::SIGTERM, t0);
        assert!(!is_repeat(None, libc::SIGTERM, t0));
        assert!(is_repeat(
            Some(term),
            libc::SIGTERM,
            t0 + Duration::from_millis(2)
        ));
        assert!(!is_repeat(
            Some(term),
            libc::SIGINT,
            t0 + Duration::from_millis(2)
        ));
        assert!(!is_repeat(Some(term), libc::SIGTERM, t0 + REPEAT_WINDOW));
    }

    #[tokio::test]
    async fn a_signal_delivered_twice_at_once_counts_once() {
        let mut stops = Stops::new(&[libc::SIGUSR2]).expect("stops");
        let me = nix::unistd::getpid();
        nix::sys::signal::kill(me, nix::sys::signal::Signal::SIGUSR2).expect("kill");
        nix::sys::signal::kill(me, nix::sys::signal::Signal::SIGUSR2).expect("kill");
        assert_eq!(stops.next_distinct().await, libc::SIGUSR2);
        let again = tokio::time::timeout(Duration::from_millis(100), stops.next_distinct()).await;
        assert!(again.is_err(), "the repeat was taken as a second signal");
        tokio::time::sleep(REPEAT_WINDOW).await;
        nix::sys::signal::kill(me, nix::sys::signal::Signal::SIGUSR2).expect("kill");
        let later = tokio::time::timeout(Duration::from_secs(5), stops.next_distinct()).await;
        assert_eq!(later.ok(), Some(libc::SIGUSR2));
    }
}
