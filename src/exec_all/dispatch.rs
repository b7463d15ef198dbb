//! The dispatcher: the one owner of a run. Its sources (node events, stop
//! signals, SIGUSR1, timers, closed output) are turned into one [`Wake`] at a
//! time (`dispatch_loop.rs`), and one method handles each: the
//! dispatcher's state is its fields. It decides when the run ends and why; what it says on the way
//! goes through [`Live`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::{debug, info};

use super::dispatch_spec::{Dispatch, TaskHandle};
use super::event::{End, Event, Order, Subtree};
use super::live::Live;
use super::record::{CancelReason, NodeOutcome, NodeRecord, RunResult, run_exit_code};
use super::writer::Writer;
use crate::exit_code;
use crate::snapshot::run_start::{RunStart, TELL_EVERY};

/// A start this long is told where it went, terminal or not.
const SLOW_START: Duration = Duration::from_secs(10);

/// Escalation once the run is ending: signal, then SIGKILL, then abandon.
enum Phase {
    Running,
    /// The first signal was sent; SIGKILL follows at the deadline.
    Terminating(Instant),
    /// SIGKILL was sent; nodes still there at the deadline are abandoned.
    Killing(Instant),
    Abandoned,
}

impl Phase {
    fn deadline(&self) -> Option<Instant> {
        match self {
            Phase::Terminating(at) | Phase::Killing(at) => Some(*at),
            Phase::Running | Phase::Abandoned => None,
        }
    }
}

/// What wakes the dispatcher: one source at a time.
pub(super) enum Wake {
    Node(usize, Event),
    Signal(i32),
    SnapshotAsked,
    TimedOut,
    /// The hang timeout's time came (output may have come meanwhile).
    Quiet,
    OutputClosed,
    /// The grace of the current phase is over.
    Deadline,
    ProgressTick,
    /// Time to tell the agent where the start is.
    TellStart,
}

/// What the dispatcher waits for besides its nodes' events ([`Dispatcher::waits`]).
pub(super) struct Waits {
    /// `--timeout`, while the run is not ending.
    pub timeout_at: Option<Instant>,
    /// When the hang timeout's time comes, once every node started.
    pub quiet_at: Option<Instant>,
    /// The end of the current phase's grace.
    pub deadline: Option<Instant>,
    /// Whether the progress line is shown (its tick).
    pub progress: bool,
    /// When to tell the agent where the start is (it changed).
    pub tell_start_at: Option<Instant>,
}

/// A run's state: its records, who is still there, why it is ending.
pub(super) struct Dispatcher<'a> {
    spec: &'a Dispatch,
    nodes: Vec<NodeRecord>,
    /// A rank's place in `nodes`.
    index: HashMap<usize, usize>,
    tasks: Vec<TaskHandle>,
    /// The tasks that ended (by rank).
    done: HashSet<usize>,
    pub(super) remaining: usize,
    running: usize,
    /// Tasks that printed something.
    printed: usize,
    /// Nodes not yet running their script (connecting) and not ended: the
    /// hang watchdog waits for none, since --connect-timeout bounds them and
    /// a node that never connects must end unreachable, not the run hung.
    unstarted: usize,
    first_failure: Option<usize>,
    cancelled: Option<CancelReason>,
    phase: Phase,
    started: SystemTime,
    timeout_at: Option<Instant>,
    kill_grace: Duration,
    /// What a limit caught the nodes doing (for the report).
    snapshot: Option<serde_json::Value>,
    live: Live,
    /// The start changed since it was last told; told next at that time.
    start_told: (bool, Instant),
}

impl<'a> Dispatcher<'a> {
    pub(super) fn new(
        spec: &'a Dispatch,
        nodes: Vec<NodeRecord>,
        tasks: Vec<TaskHandle>,
        writer: Writer,
    ) -> Self {
        let index = nodes.iter().enumerate().map(|(i, n)| (n.rank, i)).collect();
        let live = Live::new(writer, spec.progress && tasks.len() > 1);
        Dispatcher {
            spec,
            nodes,
            index,
            remaining: tasks.len(),
            printed: 0,
            unstarted: tasks.len(),
            tasks,
            done: HashSet::new(),
            running: 0,
            first_failure: None,
            cancelled: None,
            phase: Phase::Running,
            started: SystemTime::now(),
            timeout_at: spec.timeout.map(|t| Instant::now() + t),
            kill_grace: spec.grace.max(Duration::from_millis(100)),
            snapshot: None,
            live,
            // The first time, told even when no node started: `top` then
            // names those exec_all has not reached.
            start_told: (true, Instant::now() + TELL_EVERY),
        }
    }

    /// What the state waits for besides the nodes' events, for
    /// `Sources::next`: the time limits while running, the current phase's
    /// deadline, the progress line's tick.
    pub(super) fn waits(&self) -> Waits {
        let running = self.cancelled.is_none();
        Waits {
            timeout_at: self.timeout_at.filter(|_| running),
            quiet_at: match self.spec.hang_timeout {
                Some(limit) if running && self.unstarted == 0 => {
                    Some(Instant::from_std(self.spec.progress_seen.last() + limit))
                }
                _ => None,
            },
            deadline: self.phase.deadline(),
            progress: self.live.progress_on(),
            tell_start_at: match (&self.spec.show_start, self.start_told) {
                (Some(_), (true, at)) => Some(at),
                _ => None,
            },
        }
    }

    pub(super) async fn handle(&mut self, wake: Wake) {
        let reason = match wake {
            Wake::Node(rank, Event::Started { address, connect }) => {
                self.node_started(rank, address, connect);
                None
            }
            Wake::Node(rank, Event::FirstOutput) => {
                self.first_output(rank).await;
                None
            }
            Wake::Node(rank, Event::Ended(end)) => self.node_ended(rank, *end),
            Wake::Signal(signo) => Some(match self.cancelled {
                Some(CancelReason::Signal(_) | CancelReason::SecondSignal) => {
                    CancelReason::SecondSignal
                }
                _ => CancelReason::Signal(signo),
            }),
            Wake::SnapshotAsked => {
                if let Some(nodes) = self.spec.snapshot.clone() {
                    info!("SIGUSR1: taking a snapshot of every node");
                    let since = self.started.elapsed().unwrap_or_default();
                    self.live.snapshot_asked(nodes, since.as_secs_f64());
                }
                None
            }
            Wake::TimedOut => Some(CancelReason::Timeout),
            Wake::Quiet => {
                let limit = self.spec.hang_timeout.unwrap_or_default();
                (self.spec.progress_seen.last().elapsed() >= limit).then_some(CancelReason::Hung)
            }
            Wake::OutputClosed => Some(CancelReason::OutputClosed),
            Wake::Deadline => {
                self.escalate();
                None
            }
            Wake::ProgressTick => {
                self.live.progress(self.running, self.tasks.len()).await;
                None
            }
            Wake::TellStart => {
                self.tell_start();
                None
            }
        };
        if let Some(reason) = reason {
            self.cancel(reason).await;
        }
    }

    fn node_started(
        &mut self,
        rank: usize,
        address: Option<String>,
        connect: Option<super::event::Connected>,
    ) {
        let node = &mut self.nodes[self.index[&rank]];
        node.started = Some(SystemTime::now());
        node.address = address;
        if let Some(c) = connect {
            node.timeline.connected = Some(c.times.tcp_up);
            node.timeline.logged_in = Some(c.times.logged_in);
            node.timeline.connection_shared_by = c.shared_by;
        }
        self.running += 1;
        self.one_less_unstarted();
        self.start_told.0 = true;
    }

    /// Tells this machine's agent where each task's start is.
    fn tell_start(&mut self) {
        self.start_told = (false, Instant::now() + TELL_EVERY);
        // No one to tell (no agent here): nothing to build.
        let Some(show) = self.spec.show_start.as_ref().filter(|s| !s.is_closed()) else {
            return;
        };
        let run = RunStart {
            started_ms: Some(crate::snapshot::unix_ms_of(self.started)),
            up_ms: None,
            health_check: self.spec.health_check,
            ranks: self
                .tasks
                .iter()
                .map(|t| self.nodes[self.index[&t.rank]].rank_start(self.started))
                .collect::<Vec<_>>()
                .into(),
        };
        show.send_replace(Some(run));
    }

    fn one_less_unstarted(&mut self) {
        self.unstarted -= 1;
        if self.unstarted == 0 {
            // The hang timeout counts from here at the earliest.
            self.spec.progress_seen.touch();
        }
    }

    /// A task's first output: once every task printed, where the start
    /// went, when that is worth a line.
    async fn first_output(&mut self, rank: usize) {
        self.nodes[self.index[&rank]].timeline.first_output = Some(SystemTime::now());
        self.printed += 1;
        self.start_told.0 = true;
        if self.printed < self.tasks.len() || !self.spec.start_line {
            return;
        }
        let took = self.started.elapsed().unwrap_or_default();
        if !self.spec.progress && took < SLOW_START {
            return;
        }
        let printed: Vec<&NodeRecord> = self
            .tasks
            .iter()
            .map(|t| &self.nodes[self.index[&t.rank]])
            .collect();
        if let Some(line) = super::record::start_line(&printed, self.started) {
            self.live.say(line).await;
        }
    }

    /// A task ended: its record, its relay's group; a failure to act on.
    fn node_ended(&mut self, rank: usize, end: End) -> Option<CancelReason> {
        let End {
            outcome,
            stats,
            evidence,
            ended,
            first_heartbeat,
            subtree,
        } = end;
        let node = &mut self.nodes[self.index[&rank]];
        debug!(rank, host = %node.host, ?outcome, "node ended");
        let never_started = node.started.is_none();
        node.started.get_or_insert(ended);
        node.ended = Some(ended);
        node.stats = stats;
        node.evidence = evidence;
        node.timeline.first_heartbeat = first_heartbeat;
        let failed = !outcome.success();
        node.outcome = Some(outcome);
        if never_started {
            self.one_less_unstarted();
        }
        self.remaining -= 1;
        self.done.insert(rank);
        let failing_rank = match subtree {
            Some(subtree) => self.merge_subtree(rank, subtree),
            None => rank,
        };
        if failed && self.first_failure.is_none() && self.cancelled.is_none() {
            self.first_failure = Some(failing_rank);
            return self.spec.fail_fast.then_some(CancelReason::NodeFailed);
        }
        None
    }

    /// A relay's group: what its exec_all reported of each node replaces
    /// the records here. Returns the rank whose failure decided the relay's
    /// exit (the relay's own, when none did).
    fn merge_subtree(&mut self, rank: usize, subtree: Subtree) -> usize {
        for mut record in subtree.records {
            let Some(&i) = self.index.get(&record.rank) else {
                continue;
            };
            if record.host.is_empty() {
                record.host = self.nodes[i].host.clone();
            }
            // The relay's own node: what its leg saw here stands where its
            // record has no output.
            let own = record.rank == rank && record.evidence.tail.is_empty();
            let mine = std::mem::replace(&mut self.nodes[i], record);
            if own {
                self.nodes[i].stats = mine.stats;
                self.nodes[i].evidence.tail = mine.evidence.tail;
                self.nodes[i].evidence.errors = mine.evidence.errors;
            }
        }
        subtree.first_failure.unwrap_or(rank)
    }

    /// Sends `order` to every task that has not ended.
    fn broadcast(&self, order: Order) {
        for task in &self.tasks {
            if !self.done.contains(&task.rank) {
                let _ = task.orders.send(order);
            }
        }
    }

    /// The grace is over: SIGKILL to every node still running; after
    /// SIGKILL's own wait, those still there are abandoned.
    fn escalate(&mut self) {
        self.phase = match self.phase {
            Phase::Terminating(_) => {
                info!("grace period over: SIGKILL to every node still running");
                self.broadcast(Order::Signal(libc::SIGKILL));
                Phase::Killing(Instant::now() + self.kill_grace.max(Duration::from_secs(2)))
            }
            _ => {
                info!("nodes still there after SIGKILL: abandoning them");
                self.broadcast(Order::Abandon);
                Phase::Abandoned
            }
        };
    }

    /// The run ends for `reason`, unless a more serious one already ends it.
    async fn cancel(&mut self, reason: CancelReason) {
        if self.cancelled.is_some_and(|c| reason <= c) {
            return;
        }
        let first = self.cancelled.is_none();
        self.cancelled = Some(reason);
        match reason {
            CancelReason::SecondSignal => {
                info!("second signal: SIGKILL to every node");
                self.broadcast(Order::Signal(libc::SIGKILL));
                self.phase =
                    Phase::Killing(Instant::now() + self.kill_grace.max(Duration::from_secs(2)));
            }
            CancelReason::Signal(signo) => {
                info!(signo, "passing the signal on to every node");
                self.broadcast(Order::Signal(signo));
                if first {
                    self.phase = Phase::Terminating(Instant::now() + self.spec.grace);
                }
            }
            _ if first => {
                self.snapshot_before_ending(reason).await;
                info!(?reason, "ending the run: SIGTERM to every node");
                self.broadcast(Order::Signal(libc::SIGTERM));
                self.phase = Phase::Terminating(Instant::now() + self.spec.grace);
            }
            _ => {}
        }
    }

    /// Before `--timeout` (with `--snapshot-on-timeout`) or `--hang-timeout`
    /// ends the run: what the limit caught every node doing.
    async fn snapshot_before_ending(&mut self, reason: CancelReason) {
        let said = match reason {
            CancelReason::Timeout if self.spec.snapshot_on_timeout => (
                "--timeout",
                format!(
                    "--timeout {}s expired",
                    self.spec.timeout.unwrap_or_default().as_secs_f64()
                ),
            ),
            CancelReason::Hung => (
                "--hang-timeout",
                format!(
                    "no node printed anything or touched its heartbeat file for {}s (--hang-timeout): the run is hung",
                    self.spec.hang_timeout.unwrap_or_default().as_secs_f64()
                ),
            ),
            _ => return,
        };
        let Some(nodes) = &self.spec.snapshot else {
            return;
        };
        // The nodes still run: this is what the limit caught them doing.
        info!(
            "{}: taking a snapshot of every node before ending the run",
            said.0
        );
        self.snapshot = Some(self.live.caught(&said.1, nodes).await);
    }

    pub(super) async fn finish(mut self) -> RunResult {
        self.live.end_progress().await;
        let failure_code = self.first_failure.map(|rank| {
            self.nodes[self.index[&rank]]
                .outcome
                .as_ref()
                .map(NodeOutcome::exit_code)
                .unwrap_or(exit_code::CONNECTION_FAILED)
        });
        RunResult {
            exit_code: run_exit_code(self.cancelled, failure_code),
            cancelled: self.cancelled,
            first_failure: self.first_failure,
            nodes: self.nodes,
            started: self.started,
            output_failure: None,
            snapshot: self.snapshot,
            agents_stay: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::dispatch_spec::Channels;
    use super::*;
    use crate::exec_all::dispatch_loop::run;
    use crate::process::Outcome;
    use crate::signals::Stops;
    use tokio::sync::mpsc;

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
            start_line: false,
            show_start: None,
            health_check: false,
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
        let channels = Channels {
            events: events_rx,
            output_closed: closed_rx,
        };
        let result = tokio::spawn(async move {
            // No stop signal reaches a run driven by hand.
            let mut stops = Stops::none();
            run(&spec, records, handles, channels, writer, &mut stops).await
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
            first_heartbeat: None,
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
    async fn where_each_node_start_is_goes_to_the_agent_while_it_changes() {
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        let spec = Dispatch {
            show_start: Some(tx),
            ..spec(false, 5_000, None)
        };
        let started = Instant::now();
        let run = start(spec, 2);
        run.events
            .send((
                0,
                Event::Started {
                    address: None,
                    connect: None,
                },
            ))
            .unwrap();
        // Told once the run is TELL_EVERY old, node 1 not reached yet.
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .unwrap()
            .unwrap();
        assert!(started.elapsed() >= TELL_EVERY);
        let told = rx.borrow_and_update().clone().expect("a start");
        assert!(told.started_ms.is_some());
        let spawned: Vec<bool> = told.ranks.iter().map(|r| r.spawn_ms.is_some()).collect();
        assert_eq!(spawned, [true, false]);
        run.events.send((0, Event::FirstOutput)).unwrap();
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .unwrap()
            .unwrap();
        let told = rx.borrow_and_update().clone().expect("a start");
        assert!(told.ranks[0].first_output_ms.is_some());
        // Nothing changed: nothing told.
        assert!(
            tokio::time::timeout(TELL_EVERY * 3, rx.changed())
                .await
                .is_err()
        );
        end(&run, 0, Outcome::Exited(0));
        end(&run, 1, Outcome::Exited(0));
        run.result.await.unwrap();
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
