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
/// arrive here instead, in order.
pub struct Stops {
    rx: mpsc::UnboundedReceiver<i32>,
    listeners: Listeners,
    /// The last signal [`Stops::next_distinct`] returned, and when.
    last: Option<(i32, Instant)>,
}

/// Who moves the signals into [`Stops`]' queue.
enum Listeners {
    /// Tasks of the runtime `Stops` was made in, which end with it.
    Tasks(Vec<JoinHandle<()>>),
    /// A thread of their own ([`Stops::on_own_thread`]), told to end
    /// when `Stops` is dropped.
    Thread(Option<tokio::sync::oneshot::Sender<()>>),
}

/// [`Stops`] that several runs share one after the other, each on a
/// runtime of its own (exec_all's attempts): whatever arrives between two
/// runs waits in it for the next.
pub type SharedStops = std::sync::Arc<tokio::sync::Mutex<Stops>>;

impl Stops {
    /// Must be called inside a tokio runtime; the signals are queued only
    /// while that runtime runs.
    pub fn new(signals: &[i32]) -> Result<Self, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let listeners = listen(signals, &tx)?;
        Ok(Stops {
            rx,
            listeners: Listeners::Tasks(listeners),
            last: None,
        })
    }

    /// The same, listened for by a thread with a runtime of its own, so
    /// that no signal is missed while the caller has no runtime, or is
    /// between two: tokio keeps a signal's handler once it is installed,
    /// and a signal that arrives while no runtime listens for it is lost
    /// (not queued, and its default effect is gone). The queue can be read
    /// from any runtime.
    pub fn on_own_thread(signals: &[i32]) -> Result<Self, Error> {
        let failed = |e: std::io::Error| Error::Failed(format!("cannot listen for signals: {e}"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(failed)?;
        let (tx, rx) = mpsc::unbounded_channel();
        // Installed here, before this returns: none is missed from now on.
        let listeners = runtime.block_on(async { listen(signals, &tx) })?;
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("mn-signals".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let _ = end_rx.await;
                    for listener in listeners {
                        listener.abort();
                    }
                })
            })
            .map_err(failed)?;
        Ok(Stops {
            rx,
            listeners: Listeners::Thread(Some(end_tx)),
            last: None,
        })
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
            // The listeners live as long as self: never reached, but wait rather than spin.
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
        match &mut self.listeners {
            Listeners::Tasks(tasks) => tasks.iter().for_each(JoinHandle::abort),
            Listeners::Thread(end) => {
                if let Some(end) = end.take() {
                    let _ = end.send(());
                }
            }
        }
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
