//! The plan of a run: from the job, the options and how the other nodes are
//! reached, one spec per node task: its rank and host, its leg, the command
//! it runs, its environment, its output settings, and for a relay the ranks
//! of its group. Pure: no I/O, no runtime; `run` starts a task per spec.
//!
//! The plan is a function of the job it is given: planned again over
//! another job (the nodes that are left, `RANK` renumbered densely in
//! hostlist order), it gives that job's specs; nothing of a plan is kept
//! between two calls.

use bytes::Bytes;

use super::leg_kind::LegKind;
use super::options::RunOptions;
use super::relay;
use super::sink::SinkSettings;
use crate::env::{Contract, Job};
use crate::env_map::EnvMap;
use crate::error::Error;

/// What one node task runs.
#[derive(Debug)]
pub struct NodeSpec {
    pub rank: usize,
    pub host: String,
    pub leg: LegKind,
    /// What its shell runs: the job's command (one copy shared by every
    /// node), or a relay's exec_all for its group.
    pub command: Bytes,
    /// Its variables: the contract for its rank, and for a remote node the
    /// head's exported ones. Sent once, not held for the run.
    pub env: Vec<(String, String)>,
    pub output: SinkSettings,
    /// `--output DIR`'s files are written by this task (not by a relay's exec_all).
    pub files: bool,
    /// A relay: the ranks of its group, itself first.
    pub relay: Option<Vec<usize>>,
}

/// A run's node tasks, and every rank they run on.
#[derive(Debug)]
pub struct Plan {
    /// One per task: this node first (when selected), then the other
    /// nodes, or their relays, in rank order.
    pub tasks: Vec<NodeSpec>,
    /// Every rank the run covers, relays' groups included, in order.
    pub ranks: Vec<usize>,
}

/// The ranks `options` select (`--nodes`, `--exclude`) of `n` nodes.
pub fn selected(n: usize, options: &RunOptions) -> Result<Vec<usize>, Error> {
    let ranks: Vec<usize> = (0..n)
        .filter(|r| options.ranks.as_ref().is_none_or(|s| s.contains(r)))
        .filter(|r| !options.exclude.contains(r))
        .collect();
    if ranks.is_empty() {
        return Err(Error::usage("--nodes/--exclude leave no node to run on"));
    }
    Ok(ranks)
}

/// What every other node gets of the head's variables: like `srun
/// --export=ALL`, the head's variables but per-host ones, as `--export`
/// selects; and an attempt's variables, whatever `--export` says (relays
/// pass them on).
fn exported(options: &RunOptions, head_env: &EnvMap) -> Vec<(String, String)> {
    let head_vars: Vec<(String, String)> = head_env
        .0
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // The contract is set per node; the head's own values of those
    // variables would only be overwritten (and MULTINODE_HOSTLIST alone is
    // ~12 bytes a node, sent to every node: quadratic in the node count).
    let mut exported: Vec<(String, String)> = options
        .export
        .select(&head_vars)
        .into_iter()
        .filter(|(k, _)| !Contract::names().any(|n| n == k))
        .filter(|(k, _)| !options.attempt_env.iter().any(|(n, _)| n == k))
        .collect();
    exported.extend(options.attempt_env.iter().cloned());
    exported
}

/// Plans a run of `options` over the nodes of `job` (this node is
/// `job.rank`), the others reached by `remote`; `head_env` is this
/// process's environment (what `--export` selects from).
pub fn plan(
    job: &Job,
    options: &RunOptions,
    remote: LegKind,
    head_env: &EnvMap,
) -> Result<Plan, Error> {
    let ranks = selected(job.topology.nodes.len(), options)?;
    let others = ranks.iter().filter(|&&r| r != job.rank).count();
    if options.group && others > options.fanout {
        return Err(Error::usage(format!(
            "--group gathers every node's output here, so it needs every node reached directly: \
             {others} other nodes but --fanout {}; raise --fanout to {others}",
            options.fanout
        )));
    }
    let command = remote.command(&options.script, &options.args);
    let exported = exported(options, head_env);
    // Rendered once; agents get the hostlists folded (constant bytes a node).
    let contract = Contract::new(job);
    let forward_all = head_env.get("MULTINODE_WRAPPER_FORWARD_STREAMS") != Some("0");
    let shared = forward_all && ranks.len() > 1;
    let tasks = relay::plan_groups(&ranks, job.rank, options.fanout)
        .into_iter()
        .map(|group| {
            let rank = group[0];
            let host = job.topology.nodes[rank].host.clone();
            let leg = LegKind::of(rank, job.rank, remote);
            let env = leg.vars(rank, options, &exported, &contract);
            let is_relay = group.len() > 1;
            let output = SinkSettings {
                label: options.label.then(|| format!("{rank} {host}: ")),
                forward: options.forward_output && !options.group && (forward_all || rank == 0),
                capture: !options.forward_output || options.group,
                shared,
                timestamps: options.timestamps,
                relay: is_relay,
            };
            let (command, relay) = if is_relay {
                let relay_command = relay::command(&group, options, &exported);
                (Bytes::from(relay_command), Some(group))
            } else {
                (command.clone(), None)
            };
            NodeSpec {
                rank,
                host,
                leg,
                command,
                env,
                output,
                files: options.output_dir.is_some() && !is_relay,
                relay,
            }
        })
        .collect();
    Ok(Plan { tasks, ranks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec_all::script::Script;
    use crate::topology::machine::fake::{env, topology};

    fn job(hosts: &[&str], rank: usize) -> Job {
        Job {
            topology: topology("--hosts", hosts),
            spares: 0,
            rank,
            head_ip: "10.0.0.1".parse().unwrap(),
            local_ip: "10.0.0.1".parse().unwrap(),
            agent_port: 29400,
            wrapper: "mn-ssh".into(),
            rsh_wrapper: "mn-ssh".into(),
            bin: "/usr/bin/multinode".into(),
        }
    }

    fn options() -> RunOptions {
        RunOptions::new(Script::Inline(b"echo hi".to_vec()))
    }

    fn var<'a>(spec: &'a NodeSpec, name: &str) -> Option<&'a str> {
        spec.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn one_spec_a_node_this_one_local_first() {
        let job = job(&["a", "b", "c"], 1);
        let head = env(&[("HOME", "/root"), ("RANK", "1")]);
        let plan = plan(&job, &options(), LegKind::Agent, &head).unwrap();
        assert_eq!(plan.ranks, [0, 1, 2]);
        let order: Vec<(usize, LegKind)> = plan.tasks.iter().map(|t| (t.rank, t.leg)).collect();
        assert_eq!(
            order,
            [
                (1, LegKind::Local),
                (0, LegKind::Agent),
                (2, LegKind::Agent)
            ]
        );
        for task in &plan.tasks {
            assert_eq!(var(task, "RANK"), Some(task.rank.to_string().as_str()));
            assert!(task.relay.is_none());
            assert!(task.output.shared && task.output.forward && !task.output.capture);
        }
        // The head's variables go to the others, not to the node run here
        // (it has them), and never its own RANK.
        assert_eq!(var(&plan.tasks[1], "HOME"), Some("/root"));
        assert_eq!(var(&plan.tasks[0], "HOME"), None);
        // One command, shared: an agent's, which runs plain words without sh.
        assert_eq!(plan.tasks[1].command, plan.tasks[2].command);
        assert_eq!(
            plan.tasks[1].command,
            options().script.agent_command(&[]).as_slice()
        );
    }

    #[test]
    fn sshd_and_wrappers_get_a_shell_command_and_the_full_contract() {
        let job = job(&["a", "b"], 0);
        for kind in [LegKind::Sshd, LegKind::Wrapper] {
            let plan = plan(&job, &options(), kind, &EnvMap::default()).unwrap();
            let remote = &plan.tasks[1];
            assert_eq!(remote.leg, kind);
            assert_eq!(
                remote.command,
                options().script.shell_command(&[]).as_slice()
            );
            assert_eq!(var(remote, "MULTINODE_HOSTLIST"), Some("a:1,b:1"));
        }
    }

    #[test]
    fn past_the_fanout_relays_run_their_group() {
        let job = job(&["h", "n1", "n2", "n3", "n4"], 0);
        let options = RunOptions {
            fanout: 2,
            label: true,
            ..options()
        };
        let plan = plan(&job, &options, LegKind::Agent, &EnvMap::default()).unwrap();
        assert_eq!(plan.ranks, [0, 1, 2, 3, 4]);
        let relays: Vec<Option<Vec<usize>>> = plan.tasks.iter().map(|t| t.relay.clone()).collect();
        assert_eq!(relays, [None, Some(vec![1, 2]), Some(vec![3, 4])]);
        let relay = &plan.tasks[1];
        assert!(relay.output.relay);
        let command = String::from_utf8_lossy(&relay.command);
        assert!(
            command.contains("exec-all --relay-report --nodes 1-2"),
            "{command}"
        );
        assert!(command.contains(" --label"), "{command}");
    }

    #[test]
    fn selection_and_group_are_checked() {
        let job = job(&["a", "b", "c"], 0);
        let only = RunOptions {
            ranks: Some([0, 2].into()),
            ..options()
        };
        let plan = plan(&job, &only, LegKind::Agent, &EnvMap::default()).unwrap();
        assert_eq!(plan.ranks, [0, 2]);
        let none = RunOptions {
            exclude: [0, 1, 2].into(),
            ..options()
        };
        let e = super::plan(&job, &none, LegKind::Agent, &EnvMap::default()).unwrap_err();
        assert!(e.to_string().contains("leave no node"), "{e}");
        let grouped = RunOptions {
            group: true,
            fanout: 1,
            ..options()
        };
        let e = super::plan(&job, &grouped, LegKind::Agent, &EnvMap::default()).unwrap_err();
        assert!(e.to_string().contains("raise --fanout to 2"), "{e}");
    }

    /// A restart plans again over the nodes that are left, renumbered
    /// densely in hostlist order: a call with another job, nothing else.
    #[test]
    fn planned_again_over_fewer_nodes_the_ranks_are_dense() {
        let first = plan(
            &job(&["a", "b", "c", "d"], 0),
            &options(),
            LegKind::Agent,
            &EnvMap::default(),
        )
        .unwrap();
        assert_eq!(first.tasks.len(), 4);
        // b died: a, c, d are 0, 1, 2.
        let again = plan(
            &job(&["a", "c", "d"], 0),
            &options(),
            LegKind::Agent,
            &EnvMap::default(),
        )
        .unwrap();
        let got: Vec<(usize, &str, Option<&str>)> = again
            .tasks
            .iter()
            .map(|t| (t.rank, t.host.as_str(), var(t, "RANK")))
            .collect();
        assert_eq!(
            got,
            [
                (0, "a", Some("0")),
                (1, "c", Some("1")),
                (2, "d", Some("2"))
            ]
        );
    }
}
