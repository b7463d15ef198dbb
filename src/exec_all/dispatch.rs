//! The dispatcher: the one owner of a run. A single `select!` over node
//! events, signals and timers decides when the run ends and why.

use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info};

use super::event::{End, Event, Order};
use super::record::{CancelReason, NodeOutcome, NodeRecord, RunResult};
use super::writer::{Stream, Writer};
use crate::exit_code;
use crate::signals::{STOP_SIGNALS, SharedStops, Stops};
use crate::snapshot::survey::{RunNodes, render_both};

pub struct Dispatch {
    pub fail_fast: bool,
    pub grace: Duration,
    pub timeout: Option<Duration>,
    pub progress: bool,
    /// How to snapshot the run's nodes: on SIGUSR1, and before `--timeout`
    /// ends the run when `snapshot_on_timeout`.
    pub snapshot: Option<RunNodes>,
    pub snapshot_on_timeout: bool,
    /// `--hang-timeout`: no output and no heartbeat from any node for this
    /// long ends the run as hung, after a snapshot of every node.
    pub hang_timeout: Option<Duration>,
    pub progress_seen: std::sync::Arc<super::progress::Progress>,
    /// The stop signals, when the caller holds them over several runs
    /// (restarts); else the run listens for them itself.
    pub stops: Option<SharedStops>,
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
    pub orders: mpsc::UnboundedSender<Order>,
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
    // Nodes not yet running their script (connecting) and not ended: the
    // hang watchdog waits for none, since --connect-timeout bounds them and
    // a node that never connects must end unreachable, not the run hung.
    let mut unstarted = tasks.len();
    let mut first_failure: Option<usize> = None;
    let mut cancelled: Option<CancelReason> = None;
    let mut phase = Phase::Running;
    let mut own_stops;
    let mut shared_stops;
    let mut stops: Option<&mut Stops> = match &spec.stops {
        Some(shared) => {
            shared_stops = shared.lock().await;
            Some(&mut *shared_stops)
        }
        None => {
            own_stops = Stops::new(STOP_SIGNALS).ok();
            own_stops.as_mut()
        }
    };
    let timeout_at = spec.timeout.map(|t| Instant::now() + t);
    let mut progress = tokio::time::interval(Duration::from_millis(100));
    let mut progress_on = spec.progress && tasks.len() > 1;
    let kill_grace = spec.grace.max(Duration::from_millis(100));
    // SIGUSR1: print what every node is doing, and go on.
    let mut usr1 = spec.snapshot.as_ref().and_then(|_| {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok()
    });
    let mut snapshot: Option<serde_json::Value> = None;

    // Sends `order` to every task that has not ended.
    let broadcast = |done: &std::collections::HashSet<usize>, order: Order| {
        for task in &tasks {
            if !done.contains(&task.rank) {
                let _ = task.orders.send(order);
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
        let quiet = async {
            match spec.hang_timeout {
                Some(limit) if cancelled.is_none() && unstarted == 0 => {
                    tokio::time::sleep_until(Instant::from_std(spec.progress_seen.last() + limit))
                        .await;
                }
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
                        unstarted -= 1;
                        if unstarted == 0 {
                            // The hang timeout counts from here at the earliest.
                            spec.progress_seen.touch();
                        }
                    }
                    Event::Ended(end) => {
                        let End { outcome, stats, evidence, ended, subtree } = *end;
                        debug!(rank, host = %node.host, ?outcome, "node ended");
                        if node.started.is_none() {
                            node.started = Some(ended);
                            unstarted -= 1;
                            if unstarted == 0 {
                                spec.progress_seen.touch();
                            }
                        }
                        node.ended = Some(ended);
                        node.stats = stats;
                        node.evidence = evidence;
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
                                    // The relay's own node: what its leg saw here
                                    // stands where its record has no output.
                                    let own = record.rank == rank && record.evidence.tail.is_empty();
                                    let mine = std::mem::replace(&mut nodes[i], record);
                                    if own {
                                        nodes[i].stats = mine.stats;
                                        nodes[i].evidence.tail = mine.evidence.tail;
                                        nodes[i].evidence.errors = mine.evidence.errors;
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
            // Output may have come while this slept: then it is armed again.
            () = quiet => {
                let limit = spec.hang_timeout.unwrap_or_default();
                if spec.progress_seen.last().elapsed() >= limit {
                    reason = Some(CancelReason::Hung);
                }
            }
            Some(()) = output_closed.recv() => reason = Some(CancelReason::OutputClosed),
            () = escalate => {
                phase = match phase {
                    Phase::Terminating(_) => {
                        info!("grace period over: SIGKILL to every node still running");
                        broadcast(&done, Order::Signal(libc::SIGKILL));
                        Phase::Killing(Instant::now() + kill_grace.max(Duration::from_secs(2)))
                    }
                    _ => {
                        info!("nodes still there after SIGKILL: abandoning them");
                        broadcast(&done, Order::Abandon);
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
                    broadcast(&done, Order::Signal(libc::SIGKILL));
                    phase = Phase::Killing(Instant::now() + kill_grace.max(Duration::from_secs(2)));
                }
                CancelReason::Signal(signo) => {
                    info!(signo, "passing the signal on to every node");
                    broadcast(&done, Order::Signal(signo));
                    if first {
                        phase = Phase::Terminating(Instant::now() + spec.grace);
                    }
                }
                _ if first => {
                    let caught = match reason {
                        CancelReason::Timeout if spec.snapshot_on_timeout => Some((
                            "--timeout",
                            format!(
                                "--timeout {}s expired",
                                spec.timeout.unwrap_or_default().as_secs_f64()
                            ),
                        )),
                        CancelReason::Hung => Some((
                            "--hang-timeout",
                            format!(
                                "no node printed anything or touched its heartbeat file for {}s (--hang-timeout): the run is hung",
                                spec.hang_timeout.unwrap_or_default().as_secs_f64()
                            ),
                        )),
                        _ => None,
                    };
                    if let (Some((flag, said)), Some(run_nodes)) = (caught, &spec.snapshot) {
                        // The nodes still run: this is what the limit caught them doing.
                        info!("{flag}: taking a snapshot of every node before ending the run");
                        let (table, json) = render_both(&run_nodes.take().await);
                        writer
                            .text(
                                Stream::Err,
                                format!("mn-exec-all: {said}; what every node was doing:\n{table}"),
                            )
                            .await;
                        snapshot = Some(json);
                    }
                    info!(?reason, "ending the run: SIGTERM to every node");
                    broadcast(&done, Order::Signal(libc::SIGTERM));
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
    RunResult {
        exit_code: run_exit_code(cancelled, failure_code),
        cancelled,
        first_failure,
        nodes,
        started,
        output_failure: None,
        snapshot,
        agents_stay: false,
    }
}

/// The run's exit code: 124 for `--timeout`; else the first failure's code;
/// else what ended the run early (128 + the signal; SIGKILL for a second
/// signal; SIGPIPE for closed output); else 0.
fn run_exit_code(cancelled: Option<CancelReason>, failure_code: Option<i32>) -> i32 {
    match cancelled {
        Some(CancelReason::Timeout | CancelReason::Hung) => exit_code::TIMEOUT,
        Some(CancelReason::Signal(signo)) => failure_code.unwrap_or(exit_code::from_signal(signo)),
        Some(CancelReason::SecondSignal) => {
            failure_code.unwrap_or(exit_code::from_signal(libc::SIGKILL))
        }
        Some(CancelReason::OutputClosed) => {
            failure_code.unwrap_or(exit_code::from_signal(libc::SIGPIPE))
        }
        Some(CancelReason::NodeFailed) | None => failure_code.unwrap_or(exit_code::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Outcome;

    #[test]
    fn exit_codes_follow_the_cancel_reason_and_the_first_failure() {
        use CancelReason::*;
        assert_eq!(run_exit_code(None, None), 0);
        assert_eq!(run_exit_code(None, Some(3)), 3);
        assert_eq!(run_exit_code(Some(NodeFailed), Some(3)), 3);
        assert_eq!(run_exit_code(Some(Timeout), Some(3)), 124, "timeout wins");
        assert_eq!(run_exit_code(Some(Signal(libc::SIGINT)), None), 130);
        assert_eq!(run_exit_code(Some(Signal(libc::SIGINT)), Some(3)), 3);
        assert_eq!(run_exit_code(Some(SecondSignal), None), 137);
        assert_eq!(run_exit_code(Some(OutputClosed), None), 141);
        assert!(SecondSignal > Signal(1) && Signal(1) > Timeout && Timeout > OutputClosed);
        assert!(OutputClosed > NodeFailed, "the most serious reason wins");
    }

    fn spec(fail_fast: bool, grace_ms: u64, timeout_ms: Option<u64>) -> Dispatch {
        Dispatch {
            fail_fast,
            grace: Duration::from_millis(grace_ms),
            timeout: timeout_ms.map(Duration::from_millis),
            progress: false,
            snapshot: None,
            snapshot_on_timeout: false,
            hang_timeout: None,
            progress_seen: std::sync::Arc::new(super::super::progress::Progress::new(None)),
            stops: None,
        }
    }

    /// A run of `n` nodes driven by hand: the dispatcher's future, the
    /// events it reads, and each node's orders.
    struct Run {
        events: mpsc::UnboundedSender<(usize, Event)>,
        orders: Vec<mpsc::UnboundedReceiver<Order>>,
        result: tokio::task::JoinHandle<RunResult>,
        _closed: mpsc::UnboundedSender<()>,
    }

    fn start(spec: Dispatch, n: usize) -> Run {
        let (events, events_rx) = mpsc::unbounded_channel();
        let (closed, closed_rx) = mpsc::unbounded_channel();
        let (writer_closed, _) = mpsc::unbounded_channel();
        let (writer, _thread) = super::super::writer::start(writer_closed);
        let mut handles = Vec::new();
        let mut orders = Vec::new();
        for rank in 0..n {
            let (tx, rx) = mpsc::unbounded_channel();
            handles.push(TaskHandle { rank, orders: tx });
            orders.push(rx);
        }
        let records = (0..n)
            .map(|r| NodeRecord::new(r, format!("node{r}")))
            .collect();
        let result = tokio::spawn(async move {
            run(&spec, records, handles, events_rx, closed_rx, writer).await
        });
        Run {
            events,
            orders,
            result,
            _closed: closed,
        }
    }

    fn end(run: &Run, rank: usize, outcome: Outcome) {
        let end = End {
            outcome: NodeOutcome::Finished(outcome),
            stats: Default::default(),
            evidence: Default::default(),
            ended: SystemTime::now(),
            subtree: None,
        };
        run.events
            .send((rank, Event::Ended(Box::new(end))))
            .unwrap();
    }

    async fn order(run: &mut Run, rank: usize) -> Order {
        tokio::time::timeout(Duration::from_secs(5), run.orders[rank].recv())
            .await
            .expect("an order within 5 s")
            .expect("the dispatcher is running")
    }

    #[tokio::test]
    async fn a_failure_with_fail_fast_ends_the_others_with_sigterm() {
        let mut run = start(spec(true, 5_000, None), 3);
        end(&run, 1, Outcome::Exited(3));
        for rank in [0, 2] {
            assert!(matches!(
                order(&mut run, rank).await,
                Order::Signal(libc::SIGTERM)
            ));
        }
        let killed = Outcome::Signaled {
            signal: libc::SIGTERM,
            core_dumped: false,
        };
        end(&run, 0, killed);
        end(&run, 2, killed);
        let result = run.result.await.unwrap();
        assert_eq!(result.exit_code, 3, "the first failure's code");
        assert_eq!(result.first_failure, Some(1));
        assert_eq!(result.cancelled, Some(CancelReason::NodeFailed));
        assert!(
            run.orders[1].try_recv().is_err(),
            "the failed node got no order"
        );
    }

    #[tokio::test]
    async fn without_fail_fast_a_failure_waits_for_everyone() {
        let mut run = start(spec(false, 5_000, None), 2);
        end(&run, 0, Outcome::Exited(2));
        end(&run, 1, Outcome::Exited(0));
        let result = run.result.await.unwrap();
        assert_eq!(result.exit_code, 2);
        assert_eq!(result.cancelled, None);
        assert!(run.orders[1].try_recv().is_err(), "nobody was signalled");
    }

    #[tokio::test]
    async fn a_timeout_sends_sigterm_then_sigkill_after_the_grace() {
        let mut run = start(spec(true, 200, Some(50)), 1);
        let started = Instant::now();
        assert!(matches!(
            order(&mut run, 0).await,
            Order::Signal(libc::SIGTERM)
        ));
        // The node ignores SIGTERM: SIGKILL comes once the grace is over.
        assert!(matches!(
            order(&mut run, 0).await,
            Order::Signal(libc::SIGKILL)
        ));
        assert!(started.elapsed() >= Duration::from_millis(200));
        end(
            &run,
            0,
            Outcome::Signaled {
                signal: libc::SIGKILL,
                core_dumped: false,
            },
        );
        let result = run.result.await.unwrap();
        assert_eq!(result.exit_code, 124);
        assert_eq!(result.cancelled, Some(CancelReason::Timeout));
        assert_eq!(
            result.first_failure, None,
            "failures after the timeout are not the cause"
        );
    }

    #[tokio::test]
    async fn closed_output_ends_the_run_with_141() {
        let mut run = start(spec(true, 5_000, None), 1);
        run._closed.send(()).unwrap();
        assert!(matches!(
            order(&mut run, 0).await,
            Order::Signal(libc::SIGTERM)
        ));
        end(&run, 0, Outcome::Exited(0));
        let result = run.result.await.unwrap();
        assert_eq!(result.exit_code, 141);
        assert_eq!(result.cancelled, Some(CancelReason::OutputClosed));
    }
}
