//! The signals a command handles, as one stream of signal numbers.
//! Signals are data: the caller decides to forward, escalate or stop.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::Error;

/// SIGINT, SIGTERM and SIGHUP: what ends a launcher.
pub const STOP_SIGNALS: &[i32] = &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
/// What `mn-ssh` passes on to the remote command, as ssh would with a terminal.
pub const FORWARDED_SIGNALS: &[i32] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Once created, these signals no longer have their default effect: they
/// arrive here instead, in order.
pub struct Stops {
    rx: mpsc::UnboundedReceiver<i32>,
    listeners: Vec<JoinHandle<()>>,
}

impl Stops {
    /// Must be called inside a tokio runtime.
    pub fn new(signals: &[i32]) -> Result<Self, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
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
        Ok(Stops { rx, listeners })
    }

    /// The next signal received.
    pub async fn next(&mut self) -> i32 {
        match self.rx.recv().await {
            Some(signo) => signo,
            // The listeners live as long as self: never reached, but wait rather than spin.
            None => std::future::pending().await,
        }
    }
}

impl Drop for Stops {
    fn drop(&mut self) {
        for listener in &self.listeners {
            listener.abort();
        }
    }
}
