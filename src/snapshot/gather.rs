//! The head's side: every node's agent asked for its snapshot at once, over
//! a fresh authenticated connection each (`#multinode:snapshot`), and
//! `multinode ps`, which prints them folded.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tracing::debug;

use super::{NodeSnapshot, fold, render_json, render_table};
use crate::agent::Control;
use crate::cli::{PsArgs, TableFormat};
use crate::env::resolve_job;
use crate::error::Error;
use crate::keys::{JobKeys, Secret};
use crate::topology::EnvMap;
use crate::transport::client::{Auth, Connector, Target};

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
    let user = std::env::var("USER").unwrap_or_else(|_| "multinode".to_string());
    let mut set = JoinSet::new();
    for node in nodes {
        let connector = connector.clone();
        let user = user.clone();
        set.spawn(async move {
            let mut snap = ask(&connector, &node, user)
                .await
                .unwrap_or_else(|e| NodeSnapshot {
                    error: Some(e),
                    ..NodeSnapshot::default()
                });
            snap.rank = node.rank;
            // The name the job knows the node by (the agent knows its own hostname).
            snap.host = node.host.clone();
            snap
        });
    }
    let mut out = Vec::new();
    while let Some(done) = set.join_next().await {
        if let Ok(snap) = done {
            out.push(snap);
        }
    }
    out.sort_by_key(|s| s.rank);
    out
}

async fn ask(connector: &Connector, node: &Ask, user: String) -> Result<NodeSnapshot, String> {
    let target = Target {
        host: node.host.clone(),
        port: node.port,
        user,
    };
    let conn = connector
        .connect(&target)
        .await
        .map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, conn.control(Control::Snapshot)).await;
    conn.close().await;
    let (status, out) = match answer {
        Err(_) => {
            return Err(format!(
                "the agent did not answer within {} s",
                ANSWER_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(e)) => return Err(format!("lost while asking: {e}")),
        Ok(Ok(answer)) => answer,
    };
    if status != 0 {
        // An agent that does not know the request runs it as a shell comment.
        return Err(format!(
            "the agent answered with status {status} (an agent older than `multinode ps`?)"
        ));
    }
    serde_json::from_slice(&out).map_err(|e| {
        debug!(rank = node.rank, error = %e, "unreadable snapshot");
        if out.is_empty() {
            "the agent answered nothing (an agent older than `multinode ps`?)".to_string()
        } else {
            format!("unreadable snapshot: {e}")
        }
    })
}

/// `multinode ps`: a snapshot of the job's processes on every node.
pub fn main(args: PsArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let job = resolve_job(&args.topology, &env)?;
    let secret = Secret::require(args.secret_file.as_deref(), &env, "multinode ps")?;
    let connector = Connector::new(
        Auth::Agent(Arc::new(JobKeys::derive(&secret))),
        args.connect_timeout,
    );
    let nodes: Vec<Ask> = job
        .topology
        .nodes
        .iter()
        .enumerate()
        .map(|(rank, n)| Ask {
            rank,
            host: n.host.clone(),
            port: job.agent_port,
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the runtime: {e}")))?;
    let snaps = runtime.block_on(ask_all(&connector, nodes));
    runtime.shutdown_background();
    let groups = fold(&snaps);
    let text = match args.format {
        TableFormat::Table => render_table(&groups, &snaps),
        TableFormat::Json => render_json(&groups, &snaps),
    };
    crate::env::print_stdout(&text)?;
    let unanswered = snaps.iter().filter(|s| s.error.is_some()).count();
    Ok(if unanswered == 0 {
        crate::exit_code::SUCCESS
    } else {
        crate::exit_code::CONNECTION_FAILED
    })
}
