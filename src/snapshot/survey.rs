//! The head's side: every node's agent asked for its snapshot at once, over
//! an authenticated connection each (`#multinode:snapshot`; fresh for
//! `ps`, kept from one refresh to the next for `top`: [`Kept`]), and
//! `multinode ps`, which prints them folded. And the one node an agent does
//! not run: exec_all's own, which it shows to this machine's agent for as
//! long as it runs (`#multinode:show-group`, [`show_in_agent`]), so that
//! `multinode ps` sees it there.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tracing::debug;

use super::ranks::{self, Units};
use super::tell_agent::Telling;
use super::watch::{OutputTap, Stream, Watched, passed_on_line};
use super::{NodeSnapshot, fold, render_json, render_table};
use crate::cli::{PsArgs, TableFormat};
use crate::env::resolve_job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::keys::{JobKeys, Secret};
use crate::protocol::control::Control;
use crate::transport::ControlError;
use crate::transport::client::{Auth, Connection, Connector, Target};

/// A node's agent gets this long to answer, once connected: its own tools
/// are bounded well below it (`take::TOOL_TIMEOUT`).
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(8);

/// One node to ask: its rank, and where its agent listens.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub rank: usize,
    pub host: String,
    pub port: u16,
}

/// Asks every node at once; the answers come back in rank order, a node
/// that could not answer with its reason in `error`.
pub(crate) async fn ask_all(connector: &Connector, nodes: Vec<Ask>) -> Vec<NodeSnapshot> {
    ask_each(connector, nodes, |_| Control::Snapshot, None).await
}

/// Connections to the agents kept open from one ask to the next (`top`'s
/// refreshes): a login costs both ends far more than a request, and the
/// agents then start their windows together. One a node rank, made when
/// missing, let go after any failure (the next ask connects again).
#[derive(Default)]
pub(crate) struct Kept {
    conns: BTreeMap<usize, Arc<Connection>>,
}

/// [`ask_all`] with the request each node is asked (`#multinode:snapshot`,
/// or `top`'s), over the connections of `kept` where it has them (and
/// then keeping them there), else over one made and closed for this ask.
pub(crate) async fn ask_each(
    connector: &Connector,
    nodes: Vec<Ask>,
    request: impl Fn(&Ask) -> Control,
    mut kept: Option<&mut Kept>,
) -> Vec<NodeSnapshot> {
    let user = std::env::var("USER").unwrap_or_else(|_| "multinode".to_string());
    let keep = kept.is_some();
    let mut set = JoinSet::new();
    for node in nodes {
        let connector = connector.clone();
        let user = user.clone();
        let control = request(&node);
        let open = kept
            .as_deref_mut()
            .and_then(|k| k.conns.remove(&node.rank))
            .filter(|c| !c.is_closed());
        set.spawn(async move {
            let (answer, conn) = ask(&connector, &node, user, control, open).await;
            let conn = match conn {
                Some(conn) if !keep => {
                    conn.close().await;
                    None
                }
                conn => conn,
            };
            let mut snap = answer.unwrap_or_else(|e| NodeSnapshot {
                error: Some(e),
                ..NodeSnapshot::default()
            });
            snap.rank = node.rank;
            // The name the job knows the node by (the agent knows its own hostname).
            snap.host = node.host.clone();
            ranks::label(&mut snap);
            (snap, conn)
        });
    }
    let mut out = Vec::new();
    while let Some(done) = set.join_next().await {
        if let Ok((snap, conn)) = done {
            if let (Some(kept), Some(conn)) = (kept.as_deref_mut(), conn) {
                kept.conns.insert(snap.rank, conn);
            }
            out.push(snap);
        }
    }
    out.sort_by_key(|s| s.rank);
    out
}

/// One node's answer, over `open` when given and still good, else over a
/// new connection; with the connection when the answer was good.
async fn ask(
    connector: &Connector,
    node: &Ask,
    user: String,
    control: Control,
    open: Option<Arc<Connection>>,
) -> (Result<NodeSnapshot, String>, Option<Arc<Connection>>) {
    if let Some(conn) = open {
        match ask_over(&conn, node, control).await {
            Ok(snap) => return (Ok(snap), Some(conn)),
            // The agent went away since the last ask (restarted, the
            // connection lost): a fresh connection answers for it.
            Err(Failed::Lost(e)) => {
                debug!(rank = node.rank, error = %e, "a kept connection lost; connecting again");
            }
            Err(e) => return (Err(e.to_string()), None),
        }
    }
    let target = Target {
        host: node.host.clone(),
        port: node.port,
        user,
    };
    let conn = match connector.connect(&target).await {
        Ok(conn) => Arc::new(conn),
        Err(e) => return (Err(e.to_string()), None),
    };
    match ask_over(&conn, node, control).await {
        Ok(snap) => (Ok(snap), Some(conn)),
        Err(e) => {
            conn.close().await;
            (Err(e.to_string()), None)
        }
    }
}

/// Why a connected agent gave no snapshot.
#[derive(Debug)]
enum Failed {
    /// The connection broke (a kept one may be stale: worth a new one).
    Lost(russh::Error),
    /// Anything else, as the row's reason.
    Other(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Lost(e) => write!(f, "lost while asking: {e}"),
            Failed::Other(e) => f.write_str(e),
        }
    }
}

async fn ask_over(conn: &Connection, node: &Ask, control: Control) -> Result<NodeSnapshot, Failed> {
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, conn.control(control)).await;
    let (status, out) = match answer {
        Err(_) => {
            return Err(Failed::Other(format!(
                "the agent did not answer within {} s",
                ANSWER_TIMEOUT.as_secs()
            )));
        }
        Ok(Err(ControlError::Lost(e))) => return Err(Failed::Lost(e)),
        Ok(Err(e @ ControlError::TooLarge)) => return Err(Failed::Other(e.to_string())),
        Ok(Ok(answer)) => answer,
    };
    if status != 0 {
        // An agent that does not know the request runs it as a shell comment.
        return Err(Failed::Other(format!(
            "the agent answered with status {status} (an agent older than `multinode ps`?)"
        )));
    }
    serde_json::from_slice(&out).map_err(|e| {
        debug!(rank = node.rank, error = %e, "unreadable snapshot");
        Failed::Other(if out.is_empty() {
            let what = match control {
                Control::Top { .. } => "multinode top",
                Control::Ranks => "multinode shell --rank",
                _ => "multinode ps",
            };
            format!("the agent answered nothing (an agent older than `{what}`?)")
        } else {
            format!("unreadable snapshot: {e}")
        })
    })
}

/// Where global rank `rank` runs: every node's agent asked at once for
/// its commands' records (`#multinode:ranks`, no look at the processes).
pub(crate) async fn find_rank(connector: &Connector, nodes: Vec<Ask>, rank: usize) -> ranks::Found {
    let snaps = ask_each(connector, nodes, |_| Control::Ranks, None).await;
    ranks::find(&snaps, rank)
}

/// Every node of `job` as its agent is asked, by rank (`ps`, `top`,
/// `shell --rank`).
pub(crate) fn job_agents(job: &crate::env::Job) -> Vec<Ask> {
    job.topology
        .nodes
        .iter()
        .enumerate()
        .map(|(rank, n)| Ask {
            rank,
            host: n.host.clone(),
            port: job.agent_port,
        })
        .collect()
}

/// `multinode ps`: a snapshot of the job's processes on every node.
pub fn main(args: PsArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let job = resolve_job(&args.topology.inputs(), &env)?;
    let secret = Secret::require(args.secret_file.as_deref(), &env, "multinode ps")?;
    let connector = Connector::new(
        Auth::Agent(Arc::new(JobKeys::derive(&secret))),
        args.connect_timeout,
    );
    let nodes = job_agents(&job);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the runtime: {e}")))?;
    let snaps = runtime.block_on(ask_all(&connector, nodes));
    runtime.shutdown_background();
    let units = Units::of(&snaps);
    let groups = fold(&units.units);
    let text = match args.format {
        TableFormat::Table => render_table(&groups, &units),
        TableFormat::Json => render_json(&groups, &units),
    };
    crate::stdio::print_stdout(&text)?;
    let unanswered = snaps.iter().filter(|s| s.error.is_some()).count();
    Ok(if unanswered == 0 {
        crate::exit_code::SUCCESS
    } else {
        crate::exit_code::CONNECTION_FAILED
    })
}

/// How often exec_all tells the agent what the group it shows printed
/// (when it printed anything since).
const PASS_ON_EVERY: Duration = Duration::from_millis(500);

/// Shows `pgid`, a process group exec_all runs on this machine, in the
/// snapshots of the job's agent at `target` (this machine's own) until the
/// returned guard is dropped. In the background: the run does not wait for
/// it, and no agent there (or one in another PID namespace) only means
/// that node's snapshot stays empty, as before. What the group prints, fed
/// to the guard's taps ([`ShownGroup::taps`]), is told to the agent every
/// [`PASS_ON_EVERY`] for `multinode top` (its time, its last lines).
pub(crate) fn show_in_agent(connector: Connector, target: Target, pgid: i32) -> ShownGroup {
    let (done, mut until) = oneshot::channel::<()>();
    let watched = Arc::new(Watched::new(None, None, true));
    let passed_on = watched.clone();
    tokio::spawn(async move {
        let Some(pid_ns) = super::pid_namespace() else {
            return;
        };
        let request = Control::ShowGroup { pgid, pid_ns };
        let mut telling = tokio::select! {
            telling = Telling::open(&connector, &target, request) => match telling {
                Some(telling) => telling,
                None => return,
            },
            _ = &mut until => return,
        };
        let mut every = tokio::time::interval(PASS_ON_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = None;
        loop {
            tokio::select! {
                _ = &mut until => break,
                _ = every.tick() => {
                    if let Some(line) = passed_on_line(&passed_on, &mut last)
                        && !telling.send(&line).await
                    {
                        break;
                    }
                }
                open = telling.open_still() => if !open { break },
            }
        }
        telling.close().await;
    });
    ShownGroup {
        _done: done,
        watched,
    }
}

/// Shown to the agent while it lives ([`show_in_agent`]).
pub(crate) struct ShownGroup {
    _done: oneshot::Sender<()>,
    watched: Arc<Watched>,
}

impl ShownGroup {
    /// The group's stdout and stderr as its pumps read them: each chunk
    /// fed here is told to the agent (the exec_all hook, one call a chunk).
    pub(crate) fn taps(&self) -> (OutputTap, OutputTap) {
        (
            OutputTap::new(self.watched.clone(), Stream::Out),
            OutputTap::new(self.watched.clone(), Stream::Err),
        )
    }
}

/// What a run of exec_all needs to snapshot its nodes: the agents to ask
/// (the native transport to agents), and its own node, which it runs itself.
#[derive(Clone)]
pub(crate) struct RunNodes {
    /// `None` when the nodes are not reached through agents (OpenSSH, a wrapper).
    pub connector: Option<Connector>,
    pub remote: Vec<Ask>,
    /// This node's rank and host, when it runs part of the job.
    pub local: Option<(usize, String)>,
}

/// A snapshot of a whole run takes at most this long (the answers that
/// came, and a note for each node that did not).
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(12);

impl RunNodes {
    /// Every node's snapshot, in rank order; this node's from `/proc` here.
    pub(crate) async fn take(&self) -> Vec<NodeSnapshot> {
        let local = async {
            let (rank, host) = self.local.clone()?;
            let roots = super::procfs::children_of(std::process::id() as i32);
            let mut snap = super::take(&roots, &super::Options::from_env()).await;
            snap.rank = rank;
            snap.host = host;
            // Each command here is led by `multinode supervise`, started
            // with the process's variables: its RANK and LOCAL_RANK.
            let proc = std::path::Path::new("/proc");
            snap.commands = roots
                .iter()
                .map(|&pgid| {
                    let (rank, local_rank) = super::procfs::read_ranks(proc, pgid);
                    super::CommandInfo {
                        pgid,
                        rank,
                        local_rank,
                        ..super::CommandInfo::default()
                    }
                })
                .collect();
            ranks::label(&mut snap);
            Some(snap)
        };
        let remote = async {
            match &self.connector {
                Some(connector) => ask_all(connector, self.remote.clone()).await,
                None => self
                    .remote
                    .iter()
                    .map(|a| NodeSnapshot {
                        rank: a.rank,
                        host: a.host.clone(),
                        error: Some(
                            "not reached through a multinode agent: no snapshot".to_string(),
                        ),
                        ..NodeSnapshot::default()
                    })
                    .collect(),
            }
        };
        let all = async {
            let (local, mut remote) = tokio::join!(local, remote);
            remote.extend(local);
            remote.sort_by_key(|s| s.rank);
            remote
        };
        match tokio::time::timeout(RUN_LIMIT, all).await {
            Ok(snaps) => snaps,
            Err(_) => self
                .local
                .iter()
                .map(|(rank, host)| (*rank, host.clone()))
                .chain(self.remote.iter().map(|a| (a.rank, a.host.clone())))
                .map(|(rank, host)| NodeSnapshot {
                    rank,
                    host,
                    error: Some(format!("no snapshot within {} s", RUN_LIMIT.as_secs())),
                    ..NodeSnapshot::default()
                })
                .collect(),
        }
    }
}

/// The table and the JSON document of a run's snapshot.
pub(crate) fn render_both(snaps: &[NodeSnapshot]) -> (String, serde_json::Value) {
    let units = Units::of(snaps);
    let groups = fold(&units.units);
    let table = render_table(&groups, &units);
    let json = serde_json::from_str(&render_json(&groups, &units)).unwrap_or_default();
    (table, json)
}
