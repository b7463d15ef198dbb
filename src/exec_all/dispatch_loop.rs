//! The dispatcher's loop: its sources (node events, the stop signals,
//! SIGUSR1, timers, closed output) read in one `select!` for what its state
//! waits for, each turned into one [`Wake`] that the [`Dispatcher`] handles,
//! until every task ended.

use std::time::Duration;

use tokio::time::Instant;

use super::dispatch::{Dispatcher, Waits, Wake};
use super::dispatch_spec::{Channels, Dispatch, TaskHandle};
use super::record::{NodeRecord, RunResult};
use super::writer::Writer;
use crate::signals::Stops;

/// The dispatcher's sources, apart from its state: they are read while the
/// state says which of them to wait for.
struct Sources<'s> {
    channels: Channels,
    stops: &'s mut Stops,
    /// SIGUSR1, when the run can take snapshots.
    usr1: Option<tokio::signal::unix::Signal>,
    tick: tokio::time::Interval,
}

/// Runs the dispatcher until every task has ended; `stops` gives the stop
/// signals, which are passed on to every node (the second: SIGKILL).
pub async fn run(
    spec: &Dispatch,
    nodes: Vec<NodeRecord>,
    tasks: Vec<TaskHandle>,
    channels: Channels,
    writer: Writer,
    stops: &mut Stops,
) -> RunResult {
    let mut sources = Sources {
        channels,
        stops,
        // SIGUSR1: print what every node is doing, and go on.
        usr1: spec.snapshot.as_ref().and_then(|_| {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok()
        }),
        tick: tokio::time::interval(Duration::from_millis(100)),
    };
    let mut dispatcher = Dispatcher::new(spec, nodes, tasks, writer);
    while dispatcher.remaining > 0 {
        let wake = sources.next(&dispatcher).await;
        dispatcher.handle(wake).await;
    }
    dispatcher.finish().await
}

impl Sources<'_> {
    /// The next thing that happened, of those the dispatcher's state waits for.
    async fn next(&mut self, d: &Dispatcher<'_>) -> Wake {
        let Waits {
            timeout_at,
            quiet_at,
            deadline,
            progress,
            tell_start_at,
        } = d.waits();
        let usr1 = async {
            match self.usr1.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(()) = usr1 => Wake::SnapshotAsked,
            Some((rank, event)) = self.channels.events.recv() => Wake::Node(rank, event),
            signo = self.stops.next_distinct() => Wake::Signal(signo),
            () = sleep_until(timeout_at) => Wake::TimedOut,
            () = sleep_until(quiet_at) => Wake::Quiet,
            Some(()) = self.channels.output_closed.recv() => Wake::OutputClosed,
            () = sleep_until(deadline) => Wake::Deadline,
            _ = self.tick.tick(), if progress => Wake::ProgressTick,
            () = sleep_until(tell_start_at) => Wake::TellStart,
        }
    }
}

/// Sleeps until `at`; never, without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
