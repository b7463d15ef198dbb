//! One launch of the script over a job's nodes: the plan, one task a node,
//! the dispatcher, the writer; returns when every node has ended. An
//! attempt and a health check are each one launch, on exec_all's one
//! runtime, with the stop signals its caller holds.

use std::io::IsTerminal;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::dispatch_loop;
use super::dispatch_spec::{Channels, Dispatch};
use super::options::RunOptions;
use super::procs::{self, PerNode};
use super::reach::{Reach, RunCtx};
use super::record::{NodeOutcome, RunResult};
use super::script::Script;
use super::{files, node, plan, writer};
use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::signals::Stops;
use crate::snapshot::run_start::{self, RunStart};
use crate::vars;

/// Runs `options.script` on the selected nodes of `job`; a stop signal
/// that comes meanwhile (from `stops`) is passed on to every node.
pub(crate) async fn launch(
    job: &Job,
    env: &EnvMap,
    options: RunOptions,
    stops: &mut Stops,
) -> Result<RunResult, Error> {
    crate::process::raise_fd_limit();
    let reach = Reach::decide(job, env, options.connect_timeout)?;
    let (options, counts) = processes(job, env, options, stops).await?;
    let plan = plan::plan(job, &options, reach.kind(), env, counts.as_deref())?;
    if let Some(dir) = &options.output_dir {
        files::prepare(dir).map_err(Error::Usage)?;
    }
    let runs_here = plan.ranks.contains(&job.rank);
    let snapshot = reach.snapshot_nodes(job, &plan.ranks);
    // The agents outlive this run, unless it runs inside `multinode agent
    // -- JOB`, whose agents end with JOB.
    let agents_stay = options.shell_hint
        && reach.agent_connector().is_some()
        && env.get(vars::MUX_SOCKET).is_none();
    let show_start = show_start(&reach, job, &options);
    let ctx = Arc::new(RunCtx::new(reach, job, &options, runs_here, env));

    let (closed_tx, closed_rx) = mpsc::unbounded_channel();
    let (writer, writer_thread) = writer::start(closed_tx);
    let records = plan.records;
    let started = node::start_all(
        &ctx,
        plan.tasks,
        &writer,
        options.output_dir.as_deref(),
        options.forward_stdin,
    )?;
    let spec = Dispatch {
        fail_fast: options.fail_fast,
        grace: options.grace,
        timeout: options.timeout,
        progress: options.forward_output && std::io::stderr().is_terminal(),
        // Only a run that prints its output: `collect` (check) gathers it.
        snapshot: options.forward_output.then_some(snapshot),
        snapshot_on_timeout: options.snapshot_on_timeout,
        hang_timeout: options.hang_timeout,
        progress_seen: ctx.progress.clone(),
        // A user's run (`shell_hint`): not a relay's, whose stderr is its
        // head's to read, nor a health check's.
        start_line: options.forward_output && options.shell_hint,
        show_start,
        health_check: options.health_check,
    };
    let node::StartedTasks {
        handles,
        events,
        mut tasks,
        stdin,
    } = started;
    let channels = Channels {
        events,
        output_closed: closed_rx,
    };
    let mut result = dispatch_loop::run(&spec, records, handles, channels, writer, stops).await;
    while tasks.join_next().await.is_some() {}
    if let Some(reader) = stdin {
        reader.abort();
    }
    // Every sink is gone with its task: the writer thread drains and ends.
    let failure = tokio::task::spawn_blocking(move || writer_thread.join())
        .await
        .ok()
        .flatten();
    result.agents_stay = agents_stay;
    result.output_failure =
        failure.and_then(|(fd, e)| crate::stdio::failure_line(crate::logging::program(), fd, &e));
    Ok(result)
}

/// Where the start of each node is goes to this machine's agent, for
/// `multinode top` (`snapshot::run_start`): a run that reaches the nodes
/// through their agents, on a node of the job, that asks for it.
fn show_start(
    reach: &Reach,
    job: &Job,
    options: &RunOptions,
) -> Option<watch::Sender<Option<RunStart>>> {
    let (Reach::Agent(ssh), true) = (reach, options.show_start) else {
        return None;
    };
    let here = job.topology.nodes.get(job.rank)?;
    let (tx, rx) = watch::channel(None);
    run_start::show_start(ssh.connector.clone(), ssh.target(&here.host), rx);
    Some(tx)
}

/// With `--nproc-per-node`: the processes of each node of `job` (for
/// `gpu`, counted on the nodes first), kept in the options as counts (what
/// relays get); on the head, the variables every process shares added to
/// the attempt's. `None` without.
async fn processes(
    job: &Job,
    env: &EnvMap,
    mut options: RunOptions,
    stops: &mut Stops,
) -> Result<(RunOptions, Option<Vec<usize>>), Error> {
    let Some(procs) = &options.procs else {
        return Ok((options, None));
    };
    let n = job.topology.nodes.len();
    let counts = match &procs.per_node {
        PerNode::Count(count) => vec![*count; n],
        PerNode::Slots => job
            .topology
            .nodes
            .iter()
            .map(|node| node.slots as usize)
            .collect(),
        PerNode::Counts(counts) if counts.len() == n => counts.clone(),
        PerNode::Counts(counts) => {
            return Err(Error::usage(format!(
                "--nproc-per-node {}: {} counts for {n} nodes; give one count a node, or N, gpu or slots",
                procs.per_node,
                counts.len()
            )));
        }
        PerNode::Gpu => Box::pin(count_gpus(job, env, &options, stops)).await?,
    };
    // A slot of 100000 must not start 100,000 processes.
    procs::check_counts(&counts, &procs.per_node).map_err(Error::usage)?;
    // The head's selection decides the ranks; a relay's (its group) does not.
    let counts = match procs.head {
        true => procs::Layout::selected(&counts, &plan::selected(n, &options)?),
        false => counts,
    };
    let layout = procs::Layout::new(&counts);
    let mut procs = procs.clone();
    procs.per_node = PerNode::Counts(counts.clone());
    if procs.head {
        let attempt = |name: &str| {
            options
                .attempt_env
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0)
        };
        let restart = (attempt(vars::RESTART_COUNT), attempt(vars::MAX_RESTARTS));
        store_for(&mut procs, job, env, restart.0, stops).await?;
        let run_id = format!("{}-{}", job.topology.nodes[0].host, std::process::id());
        let head_ip = job.head_ip.to_string();
        let vars = procs::run_vars(&layout, &procs, &head_ip, restart, &run_id);
        options
            .attempt_env
            .retain(|(k, _)| !procs::RUN_VARS.contains(&k.as_str()));
        options.attempt_env.extend(vars);
    }
    options.procs = Some(procs);
    Ok((options, Some(counts)))
}

/// The store of attempt `attempt`: exec_all's, started by the first
/// attempt and emptied for each next one on the same port; else rank 0's,
/// on another port where the last attempt's is still held.
async fn store_for(
    procs: &mut procs::Procs,
    job: &Job,
    env: &EnvMap,
    attempt: u32,
    stops: &mut Stops,
) -> Result<(), Error> {
    let serving = match (&procs.hosted, attempt) {
        (Some(store), 0) => store.serve(job, env, procs.master_port, stops).await?,
        (Some(store), _) => store.fresh(attempt).await,
        (None, _) => false,
    };
    if !serving {
        procs.hosted = None;
        if attempt > 0 && job.rank == 0 {
            procs.master_port = free_port(procs.master_port);
        }
    }
    Ok(())
}

/// `port` when it can be listened on here (the head, where rank 0's store
/// listens), else one the kernel gives: a restart must not fail on the
/// port the last attempt's rank 0 held.
fn free_port(port: u16) -> u16 {
    use std::net::{Ipv4Addr, TcpListener};
    if TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok() {
        return port;
    }
    match TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).and_then(|l| l.local_addr()) {
        Ok(addr) => {
            tracing::info!(
                taken = port,
                port = addr.port(),
                "MASTER_PORT still taken: another for this attempt"
            );
            addr.port()
        }
        Err(_) => port,
    }
}

/// How long the nodes get to count their GPUs (`nvidia-smi` has 10 s).
const COUNT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `--nproc-per-node gpu`: every selected node counts the GPUs its
/// processes see (`multinode count-gpus`), all at once and directly (its
/// output comes back here). A node that cannot, or sees none, is one line.
async fn count_gpus(
    job: &Job,
    env: &EnvMap,
    options: &RunOptions,
    stops: &mut Stops,
) -> Result<Vec<usize>, Error> {
    let query = RunOptions {
        fail_fast: false,
        forward_output: false,
        show_local_to_agent: false,
        show_start: false,
        timeout: Some(COUNT_TIMEOUT),
        connect_timeout: options.connect_timeout,
        ranks: options.ranks.clone(),
        exclude: options.exclude.clone(),
        max_connecting: options.max_connecting,
        fanout: usize::MAX,
        ..RunOptions::new(Script::Inline(
            b"exec \"${MULTINODE_BIN:-multinode}\" count-gpus".to_vec(),
        ))
    };
    let result = launch(job, env, query, stops).await?;
    if let Some(super::record::CancelReason::Signal(signo)) = result.cancelled {
        return Err(Error::Failed(format!(
            "stopped by signal {signo} while the nodes counted their GPUs"
        )));
    }
    let mut counts = vec![0; job.topology.nodes.len()];
    for node in result.nodes {
        let who = format!("rank {} ({})", node.rank, node.host);
        let text = String::from_utf8_lossy(&node.stats.captured_out);
        let count = text.trim().parse::<usize>().ok();
        match (&node.outcome, count) {
            (Some(o), Some(count)) if o.success() && count > 0 => counts[node.rank] = count,
            (Some(o), Some(_)) if o.success() => {
                return Err(Error::usage(format!(
                    "--nproc-per-node gpu: {who} sees no GPU (CUDA_VISIBLE_DEVICES hides them all, or it has none); give a number of processes, or run without that node"
                )));
            }
            (Some(o @ (NodeOutcome::Unreachable(_) | NodeOutcome::Lost(_))), _) => {
                return Err(Error::Connection(format!(
                    "--nproc-per-node gpu: cannot count the GPUs of {who}: {}",
                    NodeOutcome::describe(Some(o))
                )));
            }
            (outcome, _) => {
                let err = String::from_utf8_lossy(&node.stats.captured_err);
                let why = err
                    .lines()
                    .map(|l| l.trim_start_matches("multinode: error: "))
                    .find(|l| !l.trim().is_empty())
                    .map_or_else(|| NodeOutcome::describe(outcome.as_ref()), str::to_string);
                return Err(Error::usage(format!(
                    "--nproc-per-node gpu: cannot count the GPUs of {who}: {why}; give a number of processes instead"
                )));
            }
        }
    }
    Ok(counts)
}
