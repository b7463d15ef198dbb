//! The dispatcher: the one owner of a run. A single `select!` over node
//! events, signals and timers decides when the run ends and why.

use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info};

use super::output::{Stream, Writer};
use super::types::{CancelReason, Control, End, Event, NodeOutcome, NodeRecord, RunResult};
use crate::exit_code;
use crate::signals::{STOP_SIGNALS, Stops};
use crate::snapshot::gather::{RunNodes, render_both};

pub struct Dispatch {
    pub fail_fast: bool,
    pub grace: Duration,
    pub timeout: Option<Duration>,
    pub progress: bool,
    /// How to snapshot the run's nodes: on SIGUSR1, and before `--timeout`
    /// ends the run when `snapshot_on_timeout`.
    pub snapshot: Option<RunNodes>,
    pub snapshot_on_timeout: bool,
}

/// Escalation once the run is ending: signal, then SIGKILL, then abandon.
enum Phase {
    Running,
    /// The first signal was sent; SIGKILL follows at the deadline.
    Terminating(Instant),
    /// SIGKILL was sent; nodes still there at the deadline are abandoned.
    Killing(Instant),
    Abandoned,
}

/// The dispatcher's handle on one node task: a node, or a relay that runs
/// exec_all for a group of nodes. Events carry the task's rank.
pub struct TaskHandle {
    pub rank: usize,
    pub control: mpsc::UnboundedSender<Control>,
}

pub async fn run(
    spec: &Dispatch,
    mut nodes: Vec<NodeRecord>,
    tasks: Vec<TaskHandle>,
    mut events: mpsc::UnboundedReceiver<(usize, Event)>,
    mut output_closed: mpsc::UnboundedReceiver<()>,
    writer: Writer,
) -> RunResult {
    let started = SystemTime::now();
    let index: std::collections::HashMap<usize, usize> =
        nodes.iter().enumerate().map(|(i, n)| (n.rank, i)).collect();
    let mut remaining = tasks.len();
    let mut done: std::collections::HashSet<usize> = std::collections::HashSet::new();
    let mut running = 0usize;
    let mut first_failure: Option<usize> = None;
    let mut cancelled: Option<CancelReason> = None;
    let mut phase = Phase::Running;
    let mut stops = Stops::new(STOP_SIGNALS).ok();
    let timeout_at = spec.timeout.map(|t| Instant::now() + t);
    let mut progress = tokio::time::interval(Duration::from_millis(100));
    let mut progress_on = spec.progress && tasks.len() > 1;
    let kill_grace = spec.grace.max(Duration::from_millis(100));
    // SIGUSR1: print what every node is doing, and go on.
    let mut usr1 = spec.snapshot.as_ref().and_then(|_| {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok()
    });
    let mut snapshot: Option<serde_json::Value> = None;

    // Sends `control` to every task that has not ended.
    let broadcast = |done: &std::collections::HashSet<usize>, control: Control| {
        for task in &tasks {
            if !done.contains(&task.rank) {
                let _ = task.control.send(control);
            }
        }
    };

    while remaining > 0 {
        let deadline = match phase {
            Phase::Terminating(at) | Phase::Killing(at) => Some(at),
            Phase::Running | Phase::Abandoned => None,
        };
        let escalate = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let timed_out = async {
            match timeout_at {
                Some(at) if cancelled.is_none() => tokio::time::sleep_until(at).await,
                _ => std::future::pending().await,
            }
        };
        let signal = async {
            match stops.as_mut() {
                Some(stops) => stops.next_distinct().await,
                None => std::future::pending().await,
            }
        };
        let snapshot_asked = async {
            match usr1.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        let mut reason: Option<CancelReason> = None;
        tokio::select! {
            Some(()) = snapshot_asked => {
                if let Some(run_nodes) = spec.snapshot.clone() {
                    let writer = writer.clone();
                    let since = started.elapsed().unwrap_or_default().as_secs_f64();
                    info!("SIGUSR1: taking a snapshot of every node");
                    tokio::spawn(async move {
                        let (table, _) = render_both(&run_nodes.take().await);
                        writer.text(Stream::Err, format!(
                            "mn-exec-all: snapshot on SIGUSR1, {since:.1}s into the run:\n{table}"
                        )).await;
                    });
                }
            }
            Some((rank, event)) = events.recv() => {
                let node = &mut nodes[index[&rank]];
                match event {
                    Event::Started { address } => {
                        node.started = Some(SystemTime::now());
                        node.address = address;
                        running += 1;
                    }
                    Event::Ended(end) => {
                        let End { outcome, stats, ended, subtree, exit_info } = *end;
                        debug!(rank, host = %node.host, ?outcome, "node ended");
                        if node.started.is_none() {
                            node.started = Some(ended);
                        }
                        node.ended = Some(ended);
                        node.stats = stats;
                        node.exit_info = exit_info;
                        let failed = !outcome.success();
                        node.outcome = Some(outcome);
                        remaining -= 1;
                        done.insert(rank);
                        // A relay's group: what its exec_all reported of each node.
                        let mut failing_rank = rank;
                        if let Some(subtree) = subtree {
                            for mut record in subtree.records {
                                if let Some(&i) = index.get(&record.rank) {
                                    if record.host.is_empty() {
                                        record.host = nodes[i].host.clone();
                                    }
                                    let keep_stats = record.rank == rank;
                                    let stats = std::mem::take(&mut nodes[i].stats);
                                    nodes[i] = record;
                                    if keep_stats && nodes[i].stats.tail.is_empty() {
                                        nodes[i].stats = stats;
                                    }
                                }
                            }
                            failing_rank = subtree.first_failure.unwrap_or(rank);
                        }
                        if failed && first_failure.is_none() && cancelled.is_none() {
                            first_failure = Some(failing_rank);
                            if spec.fail_fast {
                                reason = Some(CancelReason::NodeFailed);
                            }
                        }
                    }
                }
            }
            signo = signal => {
                reason = Some(if matches!(cancelled, Some(CancelReason::Signal(_)) | Some(CancelReason::SecondSignal)) {
                    CancelReason::SecondSignal
                } else {
                    CancelReason::Signal(signo)
                });
            }
            () = timed_out => reason = Some(CancelReason::Timeout),
            Some(()) = output_closed.recv() => reason = Some(CancelReason::OutputClosed),
            () = escalate => {
                phase = match phase {
                    Phase::Terminating(_) => {
                        info!("grace period over: SIGKILL to every node still running");
                        broadcast(&done, Control::Signal(libc::SIGKILL));
                        Phase::Killing(Instant::now() + kill_grace.max(Duration::from_secs(2)))
                    }
                    _ => {
                        info!("nodes still there after SIGKILL: abandoning them");
                        broadcast(&done, Control::Abandon);
                        Phase::Abandoned
                    }
                };
            }
            _ = progress.tick(), if progress_on => {
                let connecting = tasks.len() - running;
                if connecting == 0 {
                    progress_on = false;
                    writer.progress(String::new()).await;
                } else {
                    writer.progress(format!(
                        "mn-exec-all: {running}/{} nodes started, {connecting} connecting",
                        tasks.len()
                    )).await;
                }
            }
        }
        if let Some(reason) = reason
            && cancelled.is_none_or(|c| reason > c)
        {
            let first = cancelled.is_none();
            cancelled = Some(reason);
            match reason {
                CancelReason::SecondSignal => {
                    info!("second signal: SIGKILL to every node");
                    broadcast(&done, Control::Signal(libc::SIGKILL));
                    phase = Phase::Killing(Instant::now() + kill_grace.max(Duration::from_secs(2)));
                }
                CancelReason::Signal(signo) => {
                    info!(signo, "passing the signal on to every node");
                    broadcast(&done, Control::Signal(signo));
                    if first {
                        phase = Phase::Terminating(Instant::now() + spec.grace);
                    }
                }
                _ if first => {
                    if reason == CancelReason::Timeout
                        && spec.snapshot_on_timeout
                        && let Some(run_nodes) = &spec.snapshot
                    {
                        // The nodes still run: this is what the timeout caught them doing.
                        info!("--timeout: taking a snapshot of every node before ending the run");
                        let (table, json) = render_both(&run_nodes.take().await);
                        let secs = spec.timeout.unwrap_or_default().as_secs_f64();
                        writer.text(Stream::Err, format!(
                            "mn-exec-all: --timeout {secs}s expired; what every node was doing:\n{table}"
                        )).await;
                        snapshot = Some(json);
                    }
                    info!(?reason, "ending the run: SIGTERM to every node");
                    broadcast(&done, Control::Signal(libc::SIGTERM));
                    phase = Phase::Terminating(Instant::now() + spec.grace);
                }
                _ => {}
            }
        }
    }
    if progress_on {
        writer.progress(String::new()).await;
    }

    let failure_code = first_failure.map(|rank| {
        nodes[index[&rank]]
            .outcome
            .as_ref()
            .map(NodeOutcome::exit_code)
            .unwrap_or(exit_code::CONNECTION_FAILED)
    });
    let exit_code = match cancelled {
        Some(CancelReason::Timeout) => exit_code::TIMEOUT,
        Some(CancelReason::Signal(signo)) => failure_code.unwrap_or(exit_code::from_signal(signo)),
        Some(CancelReason::SecondSignal) => {
            failure_code.unwrap_or(exit_code::from_signal(libc::SIGKILL))
        }
        Some(CancelReason::OutputClosed) => {
            failure_code.unwrap_or(exit_code::from_signal(libc::SIGPIPE))
        }
        Some(CancelReason::NodeFailed) | None => failure_code.unwrap_or(exit_code::SUCCESS),
    };
    RunResult {
        exit_code,
        cancelled,
        first_failure,
        nodes,
        started,
        output_failure: None,
        snapshot,
    }
}
