//! `multinode check` on the head: listen on the rendezvous port, ask every
//! node for its facts at once (exec_all's [`collect`]), read the answers,
//! evaluate, print, and turn the outcome into an exit code.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::checks::{CheckInputs, HeadContext, NodeReply, evaluate, failed};
use super::facts::NodeFacts;
use super::local::{JobView, gather};
use super::probe::{SystemProbe, unix_ms};
use super::rendezvous;
use super::report::{render_json, render_table};
use crate::cli::{CheckArgs, TableFormat};
use crate::env::{Job, resolve_job};
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::exec_all::{NodeCapture, NodeOutcome, collect};
use crate::exit_code;
use crate::process::Outcome;
use crate::topology::{Topology, shorten};

/// Every node's `check --local` gets this long. Its own parts are bounded
/// well below it (the slowest, `nvidia-smi`, by 10 s).
pub(crate) const COLLECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The command each node runs: the head's binary path when the node has it.
pub(crate) fn local_command(port: u16, gpu: bool) -> String {
    let gpu = if gpu { " --gpu" } else { "" };
    format!("\"${{MULTINODE_BIN:-multinode}}\" check --local --port {port}{gpu}")
}

pub(crate) fn run_head(args: &CheckArgs) -> Result<i32, Error> {
    if args.port == 0 {
        return Err(Error::usage(
            "--port 0 is not a port; give the rendezvous port (1-65535)",
        ));
    }
    let env = EnvMap::from_process();
    let job = resolve_job(&args.topology.inputs(), &env)?;
    if job.rank != 0 {
        let head = job.topology.nodes.first().map_or("?", |n| n.host.as_str());
        return Err(Error::usage(format!(
            "`multinode check` runs on the head ({head}, rank 0), where the rendezvous port is; this is rank {}: run it there, or `multinode check --local` for this node alone",
            job.rank
        )));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the runtime: {e}")))?;
    let inputs = runtime.block_on(gather_all(&job, &env, args))?;
    let results = evaluate(&inputs);
    let text = match args.format {
        TableFormat::Table => render_table(&results),
        TableFormat::Json => render_json(&results),
    };
    crate::stdio::print_stdout(&text)?;
    Ok(if failed(&results, args.strict) {
        exit_code::CHECK_FAILED
    } else {
        exit_code::SUCCESS
    })
}

/// Listens on the rendezvous port for the duration, gathers every node's
/// report (in this process when the job is this node alone), then closes it.
async fn gather_all(job: &Job, env: &EnvMap, args: &CheckArgs) -> Result<CheckInputs, Error> {
    let port = args.port;
    let stop = CancellationToken::new();
    let (server, bind_error) = match rendezvous::bind(job.head_ip, port).await {
        Ok(listener) => (
            Some(tokio::spawn(rendezvous::serve(
                listener,
                stop.clone(),
                unix_ms,
            ))),
            None,
        ),
        Err(e) => {
            debug!(port, error = %e, "rendezvous port taken");
            (None, Some(e.to_string()))
        }
    };
    let started_ms = unix_ms();
    let nodes = if job.topology.nodes.len() == 1 {
        let plan = JobView {
            gpu_health: args.gpu,
            ..JobView::from_job(job, port)
        };
        let env = env.clone();
        let facts = tokio::task::spawn_blocking(move || gather(&SystemProbe, &env, &plan))
            .await
            .map_err(|e| Error::Failed(format!("gathering this node's facts failed: {e}")));
        let node = &job.topology.nodes[0];
        vec![NodeReply {
            rank: 0,
            host: node.host.clone(),
            slots: node.slots,
            facts: facts.map_err(|e| e.to_string()),
        }]
    } else {
        info!(nodes = job.topology.nodes.len(), "asking every node");
        let result = collect(job, &local_command(port, args.gpu), COLLECT_TIMEOUT).await;
        match result {
            Ok(captures) => reports(&job.topology, &captures),
            Err(e) => {
                stop.cancel();
                return Err(e);
            }
        }
    };
    let finished_ms = unix_ms();
    stop.cancel();
    if let Some(server) = server {
        let _ = server.await;
    }
    Ok(CheckInputs {
        head: HeadContext {
            version: env!("CARGO_PKG_VERSION").to_string(),
            head_ip: job.head_ip,
            port,
            bind_error,
            started_ms,
            finished_ms,
            nproc_per_node: args.nproc_per_node,
            gpu: args.gpu,
        },
        nodes,
    })
}

/// One report per node of the topology, in rank order: a node missing from
/// the captures has none.
pub(crate) fn reports(topology: &Topology, captures: &[NodeCapture]) -> Vec<NodeReply> {
    topology
        .nodes
        .iter()
        .enumerate()
        .map(|(rank, node)| NodeReply {
            rank,
            host: node.host.clone(),
            slots: node.slots,
            facts: captures
                .iter()
                .find(|c| c.rank == rank)
                .map_or_else(|| Err("no answer".to_string()), report_from),
        })
        .collect()
}

/// A node's facts from what its `check --local` left, or why there are none.
pub(crate) fn report_from(c: &NodeCapture) -> Result<NodeFacts, String> {
    let outcome = match &c.outcome {
        NodeOutcome::Finished(outcome) => outcome,
        // The run's time limit ended it before its command started.
        NodeOutcome::NotStarted => return Err("not started (timeout)".into()),
        // `unreachable: WHY` or `lost: WHY`: each as it was.
        other => return Err(NodeOutcome::describe(Some(other))),
    };
    let stderr = String::from_utf8_lossy(&c.stderr);
    let said = stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| format!(": {}", shorten(l)))
        .unwrap_or_default();
    match outcome {
        Outcome::Exited(0) => parse_facts(&c.stdout),
        Outcome::Exited(127) => Err(format!("multinode not found on the node (exit 127){said}")),
        other => Err(format!(
            "`multinode check --local` ended with {other}{said}"
        )),
    }
}

/// The first JSON object on stdout (whatever a shell profile printed before it is skipped).
pub(crate) fn parse_facts(stdout: &[u8]) -> Result<NodeFacts, String> {
    let start = stdout
        .iter()
        .position(|b| *b == b'{')
        .ok_or_else(|| "no report on stdout".to_string())?;
    let mut values =
        serde_json::Deserializer::from_slice(&stdout[start..]).into_iter::<NodeFacts>();
    match values.next() {
        Some(Ok(facts)) => Ok(facts),
        Some(Err(e)) => Err(format!("unreadable report: {e}")),
        None => Err("no report on stdout".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::checks::fixtures::healthy_facts;
    use crate::topology::Node;

    fn capture(rank: usize, outcome: NodeOutcome, stdout: &[u8], stderr: &[u8]) -> NodeCapture {
        NodeCapture {
            rank,
            outcome,
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
        }
    }

    fn topology(n: usize) -> Topology {
        Topology {
            nodes: (0..n)
                .map(|i| Node {
                    host: format!("gpu{:02}", i + 1),
                    slots: 8,
                })
                .collect(),
            source: "--hosts".into(),
        }
    }

    #[test]
    fn every_way_a_node_can_fail_to_answer() {
        let good = serde_json::to_vec_pretty(&healthy_facts(0, 5)).expect("json");
        let mut noisy = b"Welcome to gpu02!\n".to_vec();
        noisy.extend_from_slice(&serde_json::to_vec(&healthy_facts(1, 5)).expect("json"));
        let captures = vec![
            capture(0, NodeOutcome::Finished(Outcome::Exited(0)), &good, b""),
            capture(1, NodeOutcome::Finished(Outcome::Exited(0)), &noisy, b""),
            capture(
                2,
                NodeOutcome::Unreachable("connection refused".into()),
                b"",
                b"",
            ),
            capture(
                3,
                NodeOutcome::Finished(Outcome::Exited(127)),
                b"",
                b"sh: 1: /opt/mn/multinode: not found\n",
            ),
            // A slow node: the time limit came before its command started.
            capture(4, NodeOutcome::NotStarted, b"", b""),
            capture(5, NodeOutcome::Lost("connection reset".into()), b"", b""),
            // rank 6 never answered
        ];
        let reports = reports(&topology(7), &captures);
        assert_eq!(reports.len(), 7);
        assert_eq!(reports[0].facts.as_ref().ok(), Some(&healthy_facts(0, 5)));
        assert_eq!(reports[1].facts.as_ref().ok(), Some(&healthy_facts(1, 5)));
        assert_eq!(
            reports[2].facts,
            Err("unreachable: connection refused".into())
        );
        assert_eq!(
            reports[3].facts,
            Err(
                "multinode not found on the node (exit 127): sh: 1: /opt/mn/multinode: not found"
                    .into()
            )
        );
        // Not "unreachable: not started (timeout)": it was reached.
        assert_eq!(reports[4].facts, Err("not started (timeout)".into()));
        assert_eq!(reports[5].facts, Err("lost: connection reset".into()));
        assert_eq!(reports[6].facts, Err("no answer".into()));
        assert_eq!(
            (reports[6].rank, reports[6].host.as_str(), reports[6].slots),
            (6, "gpu07", 8)
        );
    }

    #[test]
    fn bad_output_and_crashes() {
        let killed = capture(
            0,
            NodeOutcome::Finished(Outcome::Signaled {
                signal: 9,
                core_dumped: false,
            }),
            b"",
            b"",
        );
        assert_eq!(
            report_from(&killed),
            Err("`multinode check --local` ended with killed by SIGKILL".into())
        );
        let old = capture(
            0,
            NodeOutcome::Finished(Outcome::Exited(2)),
            b"",
            b"multinode: error: unexpected argument '--local' found (see multinode --help)\n",
        );
        assert_eq!(
            report_from(&old),
            Err("`multinode check --local` ended with exit 2: multinode: error: unexpected argument '--local' found (see multinode --help)".into())
        );
        assert_eq!(parse_facts(b"nothing"), Err("no report on stdout".into()));
        let err = parse_facts(b"{\"schema\": \"one\"}").unwrap_err();
        assert!(err.starts_with("unreadable report: invalid type"), "{err}");
        // Fields this version does not know are ignored; missing ones default.
        let facts = parse_facts(br#"{"schema": 1, "version": "9.9.9", "from_the_future": true}"#)
            .expect("reads");
        assert_eq!(facts.version, "9.9.9");
        assert_eq!(facts.gpus.devices.len(), 0);
    }

    #[test]
    fn the_remote_command_uses_the_head_s_binary_path() {
        assert_eq!(
            local_command(29500, false),
            "\"${MULTINODE_BIN:-multinode}\" check --local --port 29500"
        );
        assert_eq!(
            local_command(29500, true),
            "\"${MULTINODE_BIN:-multinode}\" check --local --port 29500 --gpu"
        );
    }
}
