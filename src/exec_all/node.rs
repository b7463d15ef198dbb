//! One task per node, one loop over any leg: the node's command is started
//! (`leg`), its messages go to its sink (`sink`) as they come, the
//! dispatcher's orders (signals, abandon) go to the leg, and the held
//! partial line of the sink is written when due. The task tells the
//! dispatcher by events that carry its rank.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::dispatch_spec::TaskHandle;
use super::event::LegMsg;
use super::event::{End, Event, Order};
use super::files::NodeFiles;
use super::leg::Leg;
use super::node_conn::{self, NodeConn};
use super::plan::NodeSpec;
use super::reach::RunCtx;
use super::record::NodeOutcome;
use super::relay;
use super::relay_record::RelayRecord;
use super::sink::NodeSink;
use super::writer::{Stream, Writer};
use crate::error::Error;
use crate::protocol::exit_info::ExitInfo;

/// Everything one node task needs.
pub struct NodeTask {
    pub spec: NodeSpec,
    pub events: mpsc::UnboundedSender<(usize, Event)>,
    pub orders: mpsc::UnboundedReceiver<Order>,
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    pub sink: NodeSink,
    /// The connection it shares with the other processes of its node
    /// (`node_conn`), held only until it started.
    pub conn: Option<Arc<NodeConn>>,
}

impl NodeTask {
    fn send(&self, event: Event) {
        // The dispatcher outlives every node task; a closed channel means it gave up.
        let _ = self.events.send((self.spec.rank, event));
    }

    fn end(self, outcome: NodeOutcome, seen: Seen, relay_record: Option<RelayRecord>) {
        let subtree = self
            .spec
            .relay
            .as_ref()
            .map(|group| relay::subtree(&group.ranks, &self.spec.host, &outcome, relay_record));
        let mut evidence = self.sink.evidence.clone();
        evidence.exit_info = seen.exit_info;
        let end = End {
            outcome,
            stats: self.sink.stats.clone(),
            evidence,
            ended: SystemTime::now(),
            first_heartbeat: seen.first_heartbeat,
            subtree,
        };
        self.send(Event::Ended(Box::new(end)));
    }
}

/// `task` is boxed: it is passed down through nested async fns, each of
/// which would otherwise keep its own copy in the state every connection
/// holds for the run.
pub async fn run(ctx: Arc<RunCtx>, mut task: Box<NodeTask>) {
    let stdin = task.stdin.take();
    let conn = task.conn.take();
    // Boxed, as the other seldom awaited futures below: the handshake's
    // state is not part of the state the task holds for the run.
    let started = Box::pin(Leg::start(
        &ctx,
        &mut task.spec,
        &mut task.orders,
        stdin,
        conn,
    ))
    .await;
    let mut leg = match started {
        Ok(leg) => leg,
        Err(outcome) => return task.end(outcome, Seen::default(), None),
    };
    task.send(Event::Started {
        address: leg.address(),
        connect: leg.connect_times(),
    });
    let mut status = None;
    let mut seen = Seen::default();
    let mut printed = false;
    let mut relay_record = None;
    let mut abandoned = false;
    let mut timer = FlushTimer::new();
    loop {
        timer.arm(task.sink.flush_at());
        // In this order: orders first; bytes already here before the timer of
        // a partial line, which is then only due if the node really is quiet.
        tokio::select! {
            biased;
            order = task.orders.recv() => match order {
                Some(Order::Signal(signo)) => Box::pin(leg.signal(signo)).await,
                Some(Order::Abandon) | None => {
                    abandoned = true;
                    break;
                }
            },
            msg = leg.next() => match msg {
                Some(LegMsg::Out(data)) => {
                    ctx.progress.touch();
                    if !std::mem::replace(&mut printed, true) {
                        task.send(Event::FirstOutput);
                    }
                    task.sink.feed(Stream::Out, &data).await;
                }
                Some(LegMsg::Err(data)) => {
                    ctx.progress.touch();
                    if !std::mem::replace(&mut printed, true) {
                        task.send(Event::FirstOutput);
                    }
                    task.sink.feed(Stream::Err, &data).await;
                }
                Some(LegMsg::Heartbeat) => {
                    ctx.progress.beat();
                    seen.first_heartbeat.get_or_insert_with(SystemTime::now);
                }
                Some(LegMsg::ExitInfo(info)) => seen.exit_info = Some(info),
                Some(LegMsg::Exit(outcome)) => status = Some(outcome),
                Some(LegMsg::RelayRecord(record)) => relay_record = Some(record),
                None => break,
            },
            () = timer.wait() => task.sink.flush_due().await,
        }
    }
    task.sink.finish().await;
    let closed = leg.close(abandoned).await;
    let outcome = match status.or(closed.status) {
        Some(outcome) => NodeOutcome::Finished(outcome),
        None => NodeOutcome::Lost(closed.lost.into()),
    };
    seen.exit_info = seen.exit_info.or(closed.exit_info);
    task.end(outcome, seen, relay_record);
}

/// What a task saw of its command besides its output.
#[derive(Default)]
struct Seen {
    /// What the node saw of the command's end.
    exit_info: Option<ExitInfo>,
    first_heartbeat: Option<SystemTime>,
}

/// A run's node tasks, started.
pub struct StartedTasks {
    /// The dispatcher's handle on each task.
    pub handles: Vec<TaskHandle>,
    pub events: mpsc::UnboundedReceiver<(usize, Event)>,
    pub tasks: tokio::task::JoinSet<()>,
    /// The reader of exec_all's stdin, when the nodes get it.
    pub stdin: Option<tokio::task::JoinHandle<()>>,
}

/// Starts a task for each spec of the plan, its sink writing through
/// `writer` (and to `--output DIR`'s files), and exec_all's stdin given
/// to every node when `forward_stdin`.
pub fn start_all(
    ctx: &Arc<RunCtx>,
    specs: Vec<NodeSpec>,
    writer: &Writer,
    output_dir: Option<&Path>,
    forward_stdin: bool,
) -> Result<StartedTasks, Error> {
    let (events_tx, events) = mpsc::unbounded_channel();
    let mut handles = Vec::new();
    let mut stdin_txs = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    let conns = node_conn::of_specs(&specs);
    for (spec, conn) in specs.into_iter().zip(conns) {
        let files = match (output_dir, spec.files) {
            (Some(dir), true) => Some(NodeFiles::create(dir, spec.rank).map_err(Error::Usage)?),
            _ => None,
        };
        let sink = NodeSink::new(writer.clone(), &spec.output, files);
        let (orders_tx, orders) = mpsc::unbounded_channel();
        handles.push(TaskHandle {
            rank: spec.rank,
            orders: orders_tx,
        });
        let stdin = forward_stdin.then(|| {
            let (tx, rx) = mpsc::channel::<Bytes>(4);
            stdin_txs.push(tx);
            rx
        });
        let task = NodeTask {
            spec,
            events: events_tx.clone(),
            orders,
            stdin,
            sink,
            conn,
        };
        tasks.spawn(run(ctx.clone(), Box::new(task)));
    }
    let stdin = (!stdin_txs.is_empty()).then(|| tokio::spawn(broadcast_stdin(stdin_txs)));
    Ok(StartedTasks {
        handles,
        events,
        tasks,
        stdin,
    })
}

/// Reads exec_all's stdin and gives every chunk to every node, at the pace of
/// the slowest; a node that ended is skipped.
async fn broadcast_stdin(txs: Vec<mpsc::Sender<Bytes>>) {
    let mut stdin = crate::stdio::stdin_chunks();
    while let Some(chunk) = stdin.recv().await {
        for tx in &txs {
            let _ = tx.send(chunk.clone()).await;
        }
    }
}

/// The timer of a sink's held partial line, armed lazily: once when a line
/// starts to wait, not again for every chunk that moves its deadline on (a
/// timer per chunk cost the output path a wake-up of the runtime's driver each).
/// The deadline only moves later, so the timer fires at or before it; the
/// sink then writes only what is really due, and the timer is armed again.
struct FlushTimer {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    armed: bool,
}

impl FlushTimer {
    fn new() -> Self {
        FlushTimer {
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: false,
        }
    }

    fn arm(&mut self, due: Option<tokio::time::Instant>) {
        match due {
            None => self.armed = false,
            Some(at) if !self.armed => {
                self.sleep.as_mut().reset(at);
                self.armed = true;
            }
            Some(_) => {}
        }
    }

    /// Resolves when the timer fires (never while it is not armed).
    async fn wait(&mut self) {
        if !self.armed {
            return std::future::pending().await;
        }
        self.sleep.as_mut().await;
        self.armed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an async fn returns, without calling it.
    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(Arc<RunCtx>, Box<NodeTask>) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// A node task is held by every connection for the whole run: its
    /// state must not keep the handshake's or the rare paths' futures (boxed
    /// while they run) nor copies of the task (6.5 KB in a release build
    /// before they were boxed; ~2 KB now).
    #[test]
    fn a_node_task_holds_little_for_its_run() {
        let size = future_size(run);
        eprintln!("node task future: {size} bytes");
        assert!(size <= 4096, "a node task's future is {size} bytes");
    }
}
