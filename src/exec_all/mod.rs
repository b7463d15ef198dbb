//! exec_all: one script on every node at once, `RANK` set per node.
//!
//! - `script`: what each node runs, and the environment it gets.
//! - `node`: one task per node (local, in-process SSH, or an external wrapper).
//! - `output`: whole lines from every node through one writer thread.
//! - `dispatch`: the one owner of a run: events, signals, timers, fail-fast.
//! - `report`: the failure table and `--report FILE`.
//! - `relay`: past `--fanout` nodes, groups of nodes run through one of theirs.
//! - `options`: the validated options of a run and their defaults.
//! - `types`: the run's data (events, outcomes, records, results), imported by the rest.
//! - `verdict`: the first failure: which node, how, OOM, core, its last lines.
//! - `nccl_line`: which output lines are NCCL's warnings and errors, and its cause.
//! - `error_line`: the program's own error in its output (a traceback's exception, ...).
//! - `files`: `--output DIR`, a file per rank and stream.
//! - `group`: `--group`, identical outputs printed once with their ranks.

mod dispatch;
mod error_line;
mod files;
mod group;
mod nccl_line;
mod node;
mod options;
mod output;
mod relay;
mod report;
pub mod script;
mod types;
mod verdict;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Semaphore, mpsc};

use dispatch::Dispatch;

/// A snapshot's connection to an agent gets this long (the nodes are up:
/// they run the script).
const SNAPSHOT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
use node::NodeTask;
pub(crate) use options::RunOptions;
use script::{Export, MAX_INLINE_SCRIPT, MAX_SCRIPT, Script};
use types::{NodeOutcome, NodeRecord, RunCtx, RunResult, Transport};

use crate::cli::ExecAllArgs;
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::process::Outcome;
use crate::read_limit::{read_at_most, read_file_at_most};
use crate::snapshot::survey::{Ask, RunNodes};
use crate::topology::nodeset;
use crate::transport::choice::{ClientSpec, Requested, Route, TransportKind};
use crate::transport::client::{Auth, Target};
use crate::transport::mux::MuxClient;

pub fn main(args: ExecAllArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let (script, rest) = read_script(&args)?;
    let job = crate::env::resolve_job(&args.topology.inputs(), &env)?;
    let n = job.topology.nodes.len();
    let options = RunOptions {
        forward_stdin: matches!(script, Script::Inline(_)),
        args: rest,
        label: args.label,
        fail_fast: !args.no_fail_fast,
        grace: args.grace,
        timeout: args.timeout,
        connect_timeout: args.connect_timeout,
        ranks: args
            .nodes
            .as_deref()
            .map(|s| parse_ranks(s, n, "--nodes"))
            .transpose()?,
        exclude: args
            .exclude
            .as_deref()
            .map(|s| parse_ranks(s, n, "--exclude"))
            .transpose()?
            .unwrap_or_default(),
        export: Export::parse(&args.export)?,
        max_connecting: args.max_connecting,
        fanout: args.fanout,
        output_dir: args.output.clone(),
        timestamps: args.timestamps,
        group: args.group,
        snapshot_on_timeout: args.snapshot_on_timeout,
        // A relay runs as its agent's command: that agent shows its node.
        show_local_to_agent: !args.relay_report,
        ..RunOptions::new(script)
    };
    let report_path = args.report.clone();
    let grouped = options.group;
    let mut result = run_blocking(&job, &env, options)?;
    if args.relay_report {
        // This exec_all runs a group for a head: its report goes back on stderr.
        relay::emit_report(&result);
        return Ok(result.exit_code);
    }
    if let Some(path) = report_path {
        let report = report::build(&result);
        let text = serde_json::to_string_pretty(&report).expect("the report serialises");
        std::fs::write(&path, text + "\n").map_err(|e| {
            Error::Failed(format!(
                "cannot write the report to {}: {e}",
                path.display()
            ))
        })?;
    }
    if grouped
        && let Err(code) = print_groups(&result)
        && result.exit_code == 0
    {
        result.exit_code = code;
    }
    finish_output(&result);
    Ok(result.exit_code)
}

/// `--group`: every node's gathered stdout, then stderr, grouped by content.
/// A stdout that cannot be written is exit code 141, as for live output.
fn print_groups(result: &RunResult) -> Result<(), i32> {
    use crate::stdio::{Fd, write_all};
    let nodes = |err: bool| -> Vec<group::NodeOutput<'_>> {
        result
            .nodes
            .iter()
            .map(|n| {
                let (bytes, total) = if err {
                    (&n.stats.captured_err, n.stats.bytes_err)
                } else {
                    (&n.stats.captured_out, n.stats.bytes_out)
                };
                group::NodeOutput {
                    rank: n.rank,
                    host: &n.host,
                    bytes,
                    cut: total > bytes.len() as u64,
                }
            })
            .collect()
    };
    let out = write_all(Fd::Out, &group::render(&nodes(false), output::CAPTURE_MAX));
    let _ = write_all(Fd::Err, &group::render(&nodes(true), output::CAPTURE_MAX));
    out.map_err(|e| {
        if let Some(line) = crate::stdio::failure_line(program_name(), Fd::Out, &e) {
            crate::stdio::eprint(&line);
        }
        crate::stdio::failure_code()
    })
}

/// What the user reads last: why output stopped (unless a pipe was simply
/// closed), and the failure table. Neither panics on a closed stderr.
pub(crate) fn finish_output(result: &RunResult) {
    if let Some(line) = &result.output_failure {
        crate::stdio::eprint(line);
    }
    for node in &result.nodes {
        if let Some(why) = &node.stats.file_failure {
            crate::stdio::eprint(&format!("{}: warning: {why}\n", program_name()));
        }
    }
    if result.exit_code != 0 {
        crate::stdio::eprint(&report::table(result));
    }
}

/// The name this program was called by, for messages.
fn program_name() -> &'static str {
    match std::env::args_os()
        .next()
        .as_deref()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
    {
        Some("mn-exec-all") => "mn-exec-all",
        _ => "multinode",
    }
}

/// The script and its arguments from `SCRIPT | - | -c CMD` and what follows.
fn read_script(args: &ExecAllArgs) -> Result<(Script, Vec<OsString>), Error> {
    let mut rest = args.script_and_args.clone();
    let script = if let Some(command) = &args.command {
        Script::Inline(command.as_encoded_bytes().to_vec())
    } else {
        if rest.is_empty() {
            return Err(Error::usage(
                "no script given: pass a SCRIPT file, - to read it from stdin, or -c CMD",
            ));
        }
        let first = rest.remove(0);
        if first == "-" {
            let text = read_at_most(std::io::stdin().lock(), MAX_SCRIPT as u64).map_err(|e| {
                let msg = format!("cannot read the script from stdin: {e}");
                if e.kind() == std::io::ErrorKind::FileTooLarge {
                    Error::Usage(msg)
                } else {
                    Error::Failed(msg)
                }
            })?;
            Script::Stdin(text)
        } else {
            let path = PathBuf::from(&first);
            let text = read_file_at_most(&path, MAX_SCRIPT as u64).map_err(|e| {
                Error::usage(format!(
                    "cannot read the script {}: {e} (give a file, - for stdin, or -c CMD)",
                    path.display()
                ))
            })?;
            Script::Inline(text)
        }
    };
    if let Script::Inline(text) = &script
        && text.len() > MAX_INLINE_SCRIPT
    {
        return Err(Error::usage(format!(
            "the script is {} bytes; scripts over {} KiB must come on stdin: mn-exec-all - < SCRIPT",
            text.len(),
            MAX_INLINE_SCRIPT / 1024
        )));
    }
    Ok((script, rest))
}

/// `0,2-5` as a set of ranks below `n` (the format: `topology::nodeset`).
fn parse_ranks(spec: &str, n: usize, flag: &str) -> Result<BTreeSet<usize>, Error> {
    nodeset::parse_ranks(spec, n)
        .map_err(|why| Error::usage(format!("{flag} {spec:?}: {why}; use ranks like 0,2-5")))
}

/// Whether `wrapper` is this program's own `mn-ssh` (then exec_all talks
/// SSH in-process instead of running it once per node).
fn is_own_wrapper(wrapper: &str) -> bool {
    let Ok(exe) = std::env::current_exe() else {
        return false;
    };
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    let wrapper = canon(std::path::Path::new(wrapper));
    wrapper.is_some()
        && (wrapper == canon(&exe)
            || exe
                .parent()
                .is_some_and(|dir| wrapper == canon(&dir.join("mn-ssh"))))
}

fn transport(
    job: &Job,
    env: &EnvMap,
    connect_timeout: Duration,
) -> Result<(Transport, u16, String, Option<MuxClient>), Error> {
    // An invalid MULTINODE_TRANSPORT only matters when exec_all talks SSH itself.
    let asked_agent = matches!(
        Requested::from_env(env),
        Ok(Requested::Exactly(TransportKind::Agent))
    );
    if !is_own_wrapper(&job.wrapper) && !asked_agent {
        return Ok((
            Transport::External(job.wrapper.clone()),
            0,
            String::new(),
            None,
        ));
    }
    let spec = ClientSpec {
        connect_timeout: Some(connect_timeout),
        ..ClientSpec::default()
    };
    let route = Route::from_env(&spec, env)?;
    let port = match route.kind {
        TransportKind::Agent => job.agent_port,
        TransportKind::OpenSsh => match env.get("MULTINODE_SSH_PORT") {
            None => route.port,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                Error::usage(format!(
                    "MULTINODE_SSH_PORT={p:?} is not a port number; set it to 1..65535 or unset it for 22"
                ))
            })?,
        },
    };
    Ok((
        Transport::Native(route.connector),
        port,
        route.user,
        route.mux,
    ))
}

/// Plans and runs on a fresh runtime; returns when every node has ended.
pub(crate) fn run_blocking(
    job: &Job,
    env: &EnvMap,
    options: RunOptions,
) -> Result<RunResult, Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the async runtime: {e}")))?;
    let result = runtime.block_on(run(job, env, options));
    // A stdin reader may be parked in a blocking read: do not wait for it.
    runtime.shutdown_background();
    result
}

/// Runs `options.script` on the selected nodes of `job`.
pub(crate) async fn run(job: &Job, env: &EnvMap, options: RunOptions) -> Result<RunResult, Error> {
    crate::process::raise_fd_limit();
    let (transport, port, user, mux) = transport(job, env, options.connect_timeout)?;
    let cwd = std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".into());
    let bin = PathBuf::from(&job.bin);
    let selected: Vec<usize> = (0..job.topology.nodes.len())
        .filter(|r| options.ranks.as_ref().is_none_or(|s| s.contains(r)))
        .filter(|r| !options.exclude.contains(r))
        .collect();
    if selected.is_empty() {
        return Err(Error::usage("--nodes/--exclude leave no node to run on"));
    }
    let remote = selected.iter().filter(|&&r| r != job.rank).count();
    if options.group && remote > options.fanout {
        return Err(Error::usage(format!(
            "--group gathers every node's output here, so it needs every node reached directly: \
             {remote} other nodes but --fanout {}; raise --fanout to {remote}",
            options.fanout
        )));
    }
    if let Some(dir) = &options.output_dir {
        files::prepare(dir).map_err(Error::Usage)?;
    }
    // Inside `multinode agent -- JOB` (the mux), the head's agent runs this
    // exec_all and so shows its node already.
    let local_agent = match (&transport, &mux) {
        (Transport::Native(connector), None)
            if matches!(connector.auth(), Auth::Agent(_))
                && options.show_local_to_agent
                && selected.contains(&job.rank) =>
        {
            Some(Target {
                host: job.topology.nodes[job.rank].host.clone(),
                port,
                user: user.clone(),
            })
        }
        _ => None,
    };
    let ctx = Arc::new(RunCtx {
        command: match &transport {
            Transport::Native(connector) if matches!(connector.auth(), Auth::Agent(_)) => {
                options.script.agent_command(&options.args)
            }
            _ => options.script.shell_command(&options.args),
        },
        script: options.script.clone(),
        args: options.args.clone(),
        transport,
        port,
        user,
        cwd,
        grace: options.grace,
        bin,
        connect_slots: Semaphore::new(options.max_connecting),
        mux,
        local_agent,
    });
    // Like `srun --export=ALL`: the head's variables, minus per-host ones.
    let head_vars: Vec<(String, String)> =
        env.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    // The contract is set per node below; the head's own values of those
    // variables would only be overwritten (and MULTINODE_HOSTLIST alone is
    // ~12 bytes a node, sent to every node: quadratic in the node count).
    let exported: Vec<(String, String)> = options
        .export
        .select(&head_vars)
        .into_iter()
        .filter(|(k, _)| !crate::env::Contract::names().any(|n| n == k))
        .collect();
    // Rendered once; agents get the hostlists folded (constant bytes a node).
    let contract = crate::env::Contract::new(job);
    let to_agents =
        matches!(&ctx.transport, Transport::Native(c) if matches!(c.auth(), Auth::Agent(_)));
    let forward_all = env.get("MULTINODE_WRAPPER_FORWARD_STREAMS") != Some("0");

    let (closed_tx, closed_rx) = mpsc::unbounded_channel();
    let (writer, writer_thread) = output::start(closed_tx);
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let mut handles = Vec::new();
    let mut records: Vec<NodeRecord> = selected
        .iter()
        .map(|&r| NodeRecord::new(r, job.topology.nodes[r].host.clone()))
        .collect();
    records.sort_by_key(|r| r.rank);
    let mut stdin_txs = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    let shared = forward_all && selected.len() > 1;
    for group in relay::plan_groups(&selected, job.rank, options.fanout) {
        let rank = group[0];
        let host = job.topology.nodes[rank].host.clone();
        let local = rank == job.rank;
        let mut node_env = if local { Vec::new() } else { exported.clone() };
        node_env.extend(if local {
            contract.for_rank(rank)
        } else if to_agents {
            contract.wire_for_rank(rank)
        } else {
            contract.remote_for_rank(rank)
        });
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let stdin = options.forward_stdin.then(|| {
            let (tx, rx) = mpsc::channel::<Bytes>(4);
            stdin_txs.push(tx);
            rx
        });
        let label = options.label.then(|| format!("{rank} {host}: "));
        let forward = options.forward_output && !options.group && (forward_all || rank == 0);
        let mut sink = output::NodeSink::new(
            writer.clone(),
            label,
            forward,
            !options.forward_output || options.group,
            shared,
        );
        if options.timestamps {
            sink = sink.with_timestamps();
        }
        // A relay's exec_all writes the files of its group itself.
        if let (Some(dir), 1) = (&options.output_dir, group.len()) {
            sink = sink.with_files(files::NodeFiles::create(dir, rank).map_err(Error::Usage)?);
        }
        // A relay's lines come labelled by its own exec_all, and its stderr ends with its report.
        let (sink, relay) = if group.len() > 1 {
            let command = relay::command(&group, &options, &ctx, &exported);
            (sink.relay(), Some((group.clone(), command)))
        } else {
            (sink, None)
        };
        handles.push(dispatch::TaskHandle {
            rank,
            control: control_tx,
        });
        let task = NodeTask {
            rank,
            host,
            env: node_env,
            events: events_tx.clone(),
            control: control_rx,
            stdin,
            sink,
            local,
            relay,
        };
        tasks.spawn(node::run(ctx.clone(), Box::new(task)));
    }
    drop(events_tx);
    let stdin_reader = (!stdin_txs.is_empty()).then(|| tokio::spawn(broadcast_stdin(stdin_txs)));
    let snapshot = RunNodes {
        connector: match &ctx.transport {
            Transport::Native(connector) if matches!(connector.auth(), Auth::Agent(_)) => {
                Some(connector.clone().with_timeout(SNAPSHOT_CONNECT_TIMEOUT))
            }
            _ => None,
        },
        remote: selected
            .iter()
            .filter(|&&r| r != job.rank)
            .map(|&rank| Ask {
                rank,
                host: job.topology.nodes[rank].host.clone(),
                port: ctx.port,
            })
            .collect(),
        local: selected
            .contains(&job.rank)
            .then(|| (job.rank, job.topology.nodes[job.rank].host.clone())),
    };
    let spec = Dispatch {
        fail_fast: options.fail_fast,
        grace: options.grace,
        timeout: options.timeout,
        progress: options.forward_output && std::io::stderr().is_terminal(),
        // Only a run that prints its output: `collect` (check) gathers it.
        snapshot: options.forward_output.then_some(snapshot),
        snapshot_on_timeout: options.snapshot_on_timeout,
    };
    let result = dispatch::run(&spec, records, handles, events_rx, closed_rx, writer).await;
    while tasks.join_next().await.is_some() {}
    if let Some(reader) = stdin_reader {
        reader.abort();
    }
    // Every sink is gone with its task: the writer thread drains and ends.
    let failure = tokio::task::spawn_blocking(move || writer_thread.join())
        .await
        .ok()
        .flatten();
    let mut result = result;
    result.output_failure =
        failure.and_then(|(fd, e)| crate::stdio::failure_line(program_name(), fd, &e));
    Ok(result)
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

/// What one node's command left, for callers that gather output instead of relaying it.
#[derive(Debug, Clone)]
pub struct NodeCapture {
    pub rank: usize,
    /// How the command ended, or why the node could not run it (unreachable, lost).
    pub outcome: Result<Outcome, String>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs the shell command line `command` on every node of `job` at once
/// (this node locally, the others through the transport exec_all uses),
/// with the environment contract of each node, and gathers each node's output.
/// Every node gets at most `timeout`.
pub async fn collect(
    job: &Job,
    command: &str,
    timeout: Duration,
) -> Result<Vec<NodeCapture>, Error> {
    let env = EnvMap::from_process();
    let options = RunOptions {
        fail_fast: false,
        grace: Duration::from_secs(1),
        timeout: Some(timeout),
        connect_timeout: timeout,
        forward_output: false,
        show_local_to_agent: false,
        ..RunOptions::new(Script::Inline(command.as_bytes().to_vec()))
    };
    let result = run(job, &env, options).await?;
    Ok(result
        .nodes
        .into_iter()
        .map(|n| NodeCapture {
            rank: n.rank,
            outcome: match n.outcome {
                Some(NodeOutcome::Finished(outcome)) => Ok(outcome),
                Some(NodeOutcome::Unreachable(e) | NodeOutcome::Lost(e)) => Err(e),
                Some(NodeOutcome::NotStarted) | None => Err("not started (timeout)".into()),
            },
            stdout: n.stats.captured_out,
            stderr: n.stats.captured_err,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_parse_and_are_checked() {
        assert_eq!(
            parse_ranks("0,2-4", 5, "--nodes").unwrap(),
            BTreeSet::from([0, 2, 3, 4])
        );
        assert!(
            parse_ranks("5", 5, "--nodes")
                .unwrap_err()
                .to_string()
                .contains("past the last")
        );
        assert!(
            parse_ranks("3-1", 5, "--nodes")
                .unwrap_err()
                .to_string()
                .contains("reversed")
        );
        assert!(
            parse_ranks("a", 5, "--exclude")
                .unwrap_err()
                .to_string()
                .contains("not a rank")
        );
    }
}
