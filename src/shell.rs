//! `multinode shell [NODE|HOST | --rank R] [-- CMD...]`: a terminal on one
//! node of the running job, through its agent, with that node's job
//! environment.
//!
//! The node is named by its rank in the job's topology (resolved as `ps`
//! resolves it), a host name or address of the job, or, with `--rank R`,
//! as the node whose agent runs the process started with `RANK=R` (every
//! agent asked at once, `#multinode:ranks`: with several processes a
//! node, the global rank the verdict and `--label` print); without one,
//! node 0 (the head), as `srun --pty` starts on the first node of its
//! allocation. With `--rank` the shell's `RANK` and `LOCAL_RANK` are the
//! process's. The command gets what
//! exec_all gives that node: the head's variables but the per-host ones
//! (`--export=ALL`), the node's contract (`RANK`, `MULTINODE_*`) and this
//! directory. Without CMD it runs the user's shell (`$SHELL` if the node has
//! it, else bash, else sh), not a login shell: a login shell's profile
//! would put back the system's `PATH`, and the job's is the one worth
//! having, as under `srun --pty bash` or `kubectl exec -it`.
//!
//! A terminal is asked for when stdin is one (`-t`: always, `-T`: never),
//! then everything is `mn-ssh`'s byte pipe (`transport::ssh::run`): raw mode,
//! window changes, signals, the remote exit status as the exit status.

use std::fmt::Write as _;
use std::net::{IpAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use tracing::debug;

use crate::cli::ShellArgs;
use crate::env::{Contract, Job, resolve_job};
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::exec_all::script::Export;
use crate::keys::{JobKeys, Secret};

use crate::snapshot::survey::{find_rank, job_agents};
use crate::snapshot::{Found, claimed_line};
use crate::table::printable_once;
use crate::topology::Node;
use crate::topology::machine::{Machine, System, lookup_all};
use crate::topology::nodeset::fold;
use crate::transport::client::{Auth, Connector, Target};
use crate::transport::ssh_invocation::{RequestTty, SshInvocation};
use crate::transport::{ssh, tty};
use crate::vars;

/// Without CMD: the user's shell where the node has it, interactive when
/// its stdin is a terminal (a shell decides that itself).
const SHELL_COMMAND: &str = "for s in \"$SHELL\" /bin/bash /bin/sh; do \
     [ -n \"$s\" ] && [ -x \"$s\" ] && SHELL=$s && exec \"$s\"; done";

pub fn main(args: ShellArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let job = resolve_job(&args.topology.inputs(), &env)?;
    let node = match args.rank {
        Some(_) => None,
        None => Some(pick(&job.topology.nodes, args.node.as_deref(), &System)?),
    };
    let secret = Secret::require(args.secret_file.as_deref(), &env, "multinode shell")?;
    let connector = Connector::new(
        Auth::Agent(Arc::new(JobKeys::derive(&secret))),
        args.connect_timeout,
    );
    let user = env.get("USER").unwrap_or("multinode").to_string();
    let command = if args.command.is_empty() {
        SHELL_COMMAND.as_bytes().to_vec()
    } else {
        let words: Vec<&[u8]> = args.command.iter().map(|w| w.as_bytes()).collect();
        words.join(&b' ')
    };
    let tty = match (args.tty, args.no_tty) {
        (true, _) => RequestTty::Force,
        (_, true) => RequestTty::No,
        _ => RequestTty::Yes,
    };
    let stdin_is_terminal = tty::stdin_is_terminal();
    let terminal = tty
        .wanted(true, stdin_is_terminal)
        .then(|| tty::request(env.get("TERM")));
    let wanted = args.rank;
    ssh::block_on_session(async move {
        let (rank, process) = match (node, wanted) {
            (Some(node), _) => (node, None),
            (None, Some(wanted)) => locate(&job, &connector, wanted).await?,
            (None, None) => (0, None),
        };
        let host = job.topology.nodes[rank].host.clone();
        let target = Target {
            host: host.clone(),
            port: job.agent_port,
            user,
        };
        let inv = SshInvocation {
            host,
            tty,
            command,
            ..SshInvocation::default()
        };
        let mut vars = node_env(&job, &env, rank);
        if let Some(process) = process {
            as_process(&mut vars, process);
        }
        ssh::run(&inv, &connector, None, &target, &vars, terminal.as_ref()).await
    })
}

/// A process the shell stands in for: its global rank, and its local rank
/// when it was started with one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Process {
    rank: usize,
    local_rank: Option<usize>,
}

/// The node of the process started with `RANK=rank`, asked of every
/// node's agent; a rank none runs is a usage error that says how to list
/// them, a rank no node could be asked about a connection error.
async fn locate(
    job: &Job,
    connector: &Connector,
    rank: usize,
) -> Result<(usize, Option<Process>), Error> {
    let nodes = job_agents(job);
    let total = nodes.len();
    match find_rank(connector, nodes, rank).await {
        Found::At { node, local_rank } => {
            debug!(rank, node, ?local_rank, "the rank's node");
            Ok((node, Some(Process { rank, local_rank })))
        }
        Found::Several(claims) => Err(Error::usage(format!(
            "{}; not guessing which: give the node (`multinode shell NODE`), or end the one that should not run (`multinode ps` shows both)",
            claimed_line(rank, &claims)
        ))),
        Found::Nowhere { unanswered } => Err(nowhere(rank, total, &unanswered)),
    }
}

/// Why no node was found for `rank`, in one line.
fn nowhere(rank: usize, total: usize, unanswered: &[(usize, String)]) -> Error {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if unanswered.len() == total {
        let (node, why) = &unanswered[0];
        return Error::Connection(format!(
            "cannot find rank {rank}: no node of the job answered (node {node}: {})",
            printable_once(why)
        ));
    }
    let answered = total - unanswered.len();
    let mut msg = format!(
        "no process of the job runs with RANK={rank} on the {answered} node{} that answered",
        plural(answered)
    );
    if let Some((node, why)) = unanswered.first() {
        let _ = write!(
            msg,
            " ({} did not: node {node}: {})",
            match unanswered.len() {
                1 => "1 node".to_string(),
                n => format!("{n} nodes"),
            },
            printable_once(why)
        );
    }
    msg.push_str("; `multinode ps` lists the ranks that run");
    Error::usage(msg)
}

/// The shell's variables as the process's: its `RANK` (in place of the
/// node's) and `LOCAL_RANK`.
fn as_process(vars: &mut Vec<(String, String)>, process: Process) {
    vars.retain(|(k, _)| k != "RANK" && k != "LOCAL_RANK");
    vars.push(("RANK".to_string(), process.rank.to_string()));
    if let Some(local) = process.local_rank {
        vars.push(("LOCAL_RANK".to_string(), local.to_string()));
    }
}

/// What exec_all sends an agent for node `rank`: the head's variables but
/// the per-host ones and the contract's, the node's contract, this
/// directory, and the address the node is reached at when the topology
/// names it by host name.
fn node_env(job: &Job, env: &EnvMap, rank: usize) -> Vec<(String, String)> {
    let head: Vec<(String, String)> = env.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut vars: Vec<(String, String)> = Export::All
        .select(&head)
        .into_iter()
        .filter(|(k, _)| !Contract::names().any(|n| n == k))
        // The terminal's type comes with the pty request, from this terminal.
        .filter(|(k, _)| k != "TERM")
        .collect();
    vars.extend(Contract::new(job).wire_for_rank(rank));
    let host = &job.topology.nodes[rank].host;
    if let Some(addr) = (host.as_str(), job.agent_port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
    {
        crate::env::fill_reached_address(&mut vars, addr.ip());
    }
    let cwd = std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".into());
    vars.push((vars::CWD.to_string(), cwd));
    vars
}

/// The rank `node` names: a rank, a host of the topology, or an address one
/// of them resolves to. `None`: rank 0.
fn pick(nodes: &[Node], node: Option<&str>, machine: &dyn Machine) -> Result<usize, Error> {
    let Some(node) = node else { return Ok(0) };
    let valid = || {
        let hosts: Vec<&str> = nodes.iter().map(|n| n.host.as_str()).collect();
        format!(
            "give a rank 0-{} or a host of the job ({})",
            nodes.len() - 1,
            fold(&hosts)
        )
    };
    if let Ok(rank) = node.parse::<usize>() {
        return if rank < nodes.len() {
            Ok(rank)
        } else {
            Err(Error::usage(format!(
                "rank {rank} is not in this job of {} node{}: {}",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" },
                valid()
            )))
        };
    }
    if let Some(rank) = nodes.iter().position(|n| n.host == node) {
        return Ok(rank);
    }
    if let Ok(addr) = node.parse::<IpAddr>() {
        let hosts: Vec<&str> = nodes.iter().map(|n| n.host.as_str()).collect();
        let found = lookup_all(machine, &hosts)
            .into_iter()
            .position(|answer| answer.is_ok_and(|addrs| addrs.contains(&addr)));
        if let Some(rank) = found {
            return Ok(rank);
        }
    }
    Err(Error::usage(format!(
        "no node {node:?} in this job: {}",
        valid()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::machine::fake::FakeMachine;

    fn nodes(hosts: &[&str]) -> Vec<Node> {
        hosts
            .iter()
            .map(|h| Node {
                host: h.to_string(),
                slots: 1,
            })
            .collect()
    }

    #[test]
    fn a_node_by_rank_host_or_address() {
        let job = nodes(&["gpu01", "gpu02", "gpu03", "10.0.0.9"]);
        let mut machine = FakeMachine::default();
        machine
            .dns
            .insert("gpu03".into(), vec!["10.0.0.3".parse().unwrap()]);
        let pick = |node| pick(&job, node, &machine).map_err(|e| e.to_string());
        assert_eq!(pick(None), Ok(0));
        assert_eq!(pick(Some("2")), Ok(2));
        assert_eq!(pick(Some("gpu02")), Ok(1));
        assert_eq!(pick(Some("10.0.0.3")), Ok(2));
        assert_eq!(pick(Some("10.0.0.9")), Ok(3));
        assert_eq!(
            pick(Some("4")),
            Err("rank 4 is not in this job of 4 nodes: give a rank 0-3 or a host of the job (gpu[01-03],10.0.0.9)".into())
        );
        assert_eq!(
            pick(Some("gpu07")),
            Err("no node \"gpu07\" in this job: give a rank 0-3 or a host of the job (gpu[01-03],10.0.0.9)".into())
        );
        assert!(pick(Some("10.0.0.7")).is_err());
    }

    #[test]
    fn a_rank_nowhere_is_one_line_that_says_how_to_list_them() {
        let e = nowhere(9, 3, &[]);
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            "no process of the job runs with RANK=9 on the 3 nodes that answered; `multinode ps` lists the ranks that run"
        );
        let e = nowhere(9, 3, &[(2, "connection refused".into())]);
        assert_eq!(
            e.to_string(),
            "no process of the job runs with RANK=9 on the 2 nodes that answered (1 node did not: node 2: connection refused); `multinode ps` lists the ranks that run"
        );
        let e = nowhere(9, 1, &[(0, "connection refused".into())]);
        assert_eq!(e.exit_code(), 255);
        assert_eq!(
            e.to_string(),
            "cannot find rank 9: no node of the job answered (node 0: connection refused)"
        );
    }

    #[test]
    fn the_shell_stands_in_for_the_process() {
        let mut vars = vec![
            ("RANK".to_string(), "1".to_string()),
            ("MULTINODE_NODE_RANK".to_string(), "1".to_string()),
        ];
        as_process(
            &mut vars,
            Process {
                rank: 3,
                local_rank: Some(1),
            },
        );
        assert_eq!(
            vars,
            [
                ("MULTINODE_NODE_RANK".to_string(), "1".to_string()),
                ("RANK".to_string(), "3".to_string()),
                ("LOCAL_RANK".to_string(), "1".to_string()),
            ]
        );
    }
}
