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
use super::procs::{self, Layout};
use super::record::{NodeRecord, ProcessOf};
use super::relay;
use super::sink::SinkSettings;
use crate::env::{Contract, Job};
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::vars;

/// What one task runs: a node's command, or with several processes a node
/// (`--nproc-per-node`) one process's.
#[derive(Debug)]
pub struct NodeSpec {
    /// The node's rank, or the process's global rank.
    pub rank: usize,
    pub host: String,
    /// A process's node and place there.
    pub process: Option<ProcessOf>,
    pub leg: LegKind,
    /// What its shell runs: the job's command (one copy shared by every
    /// node), a process's (bound, then the script), or a relay's exec_all
    /// for its group.
    pub command: Bytes,
    /// Its variables: the contract for its rank, and for a remote node the
    /// head's exported ones. Sent once, not held for the run.
    pub env: Vec<(String, String)>,
    pub output: SinkSettings,
    /// `--output DIR`'s files are written by this task (not by a relay's exec_all).
    pub files: bool,
    /// A relay: its group.
    pub relay: Option<RelayGroup>,
}

/// The nodes a relay runs for, and the ranks of their records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayGroup {
    /// Node ranks, the relay's own first.
    pub nodes: Vec<usize>,
    /// The ranks of the group's records (its nodes, or their processes),
    /// the relay's own first.
    pub ranks: Vec<usize>,
}

/// A run's tasks, and every rank they run on.
#[derive(Debug)]
pub struct Plan {
    /// One per task: this node first (when selected), then the other
    /// nodes, or their relays, in rank order; with several processes a
    /// node, one per process of each.
    pub tasks: Vec<NodeSpec>,
    /// Every node the run covers, relays' groups included, in order.
    pub ranks: Vec<usize>,
    /// A record for every rank the run covers (a node, or a process), in
    /// rank order: what the dispatcher fills in.
    pub records: Vec<NodeRecord>,
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

/// What the tasks of a run share while they are planned.
struct Planner<'a> {
    job: &'a Job,
    options: &'a RunOptions,
    remote: LegKind,
    exported: Vec<(String, String)>,
    contract: Contract<'a>,
    /// The job's command as the remote kind runs it.
    command: Bytes,
    forward_all: bool,
    shared: bool,
    /// With several processes a node: theirs.
    layout: Option<Layout>,
}

impl Planner<'_> {
    fn output(&self, rank: usize, host: &str, relay: bool) -> SinkSettings {
        let options = self.options;
        SinkSettings {
            label: options.label.then(|| format!("{rank} {host}: ")),
            forward: options.forward_output && !options.group && (self.forward_all || rank == 0),
            capture: !options.forward_output || options.group,
            shared: self.shared,
            timestamps: options.timestamps,
            relay,
        }
    }

    /// The task of node `node` run directly, or, with several processes a
    /// node, one task each.
    fn node_tasks(&self, node: usize) -> Vec<NodeSpec> {
        let host = self.job.topology.nodes[node].host.clone();
        let leg = LegKind::of(node, self.job.rank, self.remote);
        let env = leg.vars(node, self.options, &self.exported, &self.contract);
        let files = self.options.output_dir.is_some();
        let (Some(layout), Some(procs)) = (&self.layout, &self.options.procs) else {
            return vec![NodeSpec {
                rank: node,
                output: self.output(node, &host, false),
                host,
                process: None,
                leg,
                command: self.command.clone(),
                env,
                files,
                relay: None,
            }];
        };
        let script = self.options.script.shell_command(&self.options.args);
        layout
            .of_node(node)
            .map(|place| {
                let mut env: Vec<(String, String)> =
                    env.iter().filter(|(k, _)| k != "RANK").cloned().collect();
                env.extend(procs::process_vars(layout, place));
                NodeSpec {
                    rank: place.rank,
                    output: self.output(place.rank, &host, false),
                    host: host.clone(),
                    process: Some(ProcessOf {
                        node,
                        local_rank: place.local_rank,
                    }),
                    leg,
                    command: Bytes::from(procs::command(procs, place.local_size, &script)),
                    env,
                    files,
                    relay: None,
                }
            })
            .collect()
    }

    /// The ranks of node `node`'s records: the node's, or its processes'.
    fn ranks_of(&self, node: usize) -> Vec<usize> {
        match &self.layout {
            Some(layout) => layout.of_node(node).map(|p| p.rank).collect(),
            None => vec![node],
        }
    }

    /// The task of a relay for the nodes of `group`, its own first.
    fn relay_task(&self, group: Vec<usize>) -> NodeSpec {
        let node = group[0];
        let host = self.job.topology.nodes[node].host.clone();
        let leg = LegKind::of(node, self.job.rank, self.remote);
        let ranks: Vec<usize> = group.iter().flat_map(|&n| self.ranks_of(n)).collect();
        let command = relay::command(&group, self.options, &self.exported);
        NodeSpec {
            rank: ranks[0],
            output: self.output(ranks[0], &host, true),
            process: self.layout.as_ref().map(|_| ProcessOf {
                node,
                local_rank: 0,
            }),
            host,
            leg,
            command: Bytes::from(command),
            env: leg.vars(node, self.options, &self.exported, &self.contract),
            files: false,
            relay: Some(RelayGroup {
                nodes: group,
                ranks,
            }),
        }
    }

    /// A record for every rank of the `nodes`.
    fn records(&self, nodes: &[usize]) -> Vec<NodeRecord> {
        let host = |n: usize| self.job.topology.nodes[n].host.clone();
        match &self.layout {
            None => nodes.iter().map(|&n| NodeRecord::new(n, host(n))).collect(),
            Some(layout) => nodes
                .iter()
                .flat_map(|&n| layout.of_node(n))
                .map(|place| NodeRecord {
                    process: Some(ProcessOf {
                        node: place.node,
                        local_rank: place.local_rank,
                    }),
                    ..NodeRecord::new(place.rank, host(place.node))
                })
                .collect(),
        }
    }
}

/// Plans a run of `options` over the nodes of `job` (this node is
/// `job.rank`), the others reached by `remote`; `head_env` is this
/// process's environment (what `--export` selects from). With
/// `--nproc-per-node`, `counts` are the processes of each node of `job`
/// (none on a node the head left out: ranks are dense over the others).
pub fn plan(
    job: &Job,
    options: &RunOptions,
    remote: LegKind,
    head_env: &EnvMap,
    counts: Option<&[usize]>,
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
    let forward_all = head_env.get(vars::WRAPPER_FORWARD_STREAMS) != Some("0");
    let layout = counts.map(Layout::new);
    let units = layout.as_ref().map_or(ranks.len(), Layout::total);
    let planner = Planner {
        job,
        options,
        remote,
        exported: exported(options, head_env),
        // Rendered once; agents get the hostlists folded (constant bytes a node).
        contract: Contract::new(job),
        command: remote.command(&options.script, &options.args),
        forward_all,
        shared: forward_all && units > 1,
        layout,
    };
    let tasks = relay::plan_groups(&ranks, job.rank, options.fanout)
        .into_iter()
        .flat_map(|group| match group.len() {
            1 => planner.node_tasks(group[0]),
            _ => vec![planner.relay_task(group)],
        })
        .collect();
    let records = planner.records(&ranks);
    Ok(Plan {
        tasks,
        ranks,
        records,
    })
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
        let plan = plan(&job, &options(), LegKind::Agent, &head, None).unwrap();
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
            let plan = plan(&job, &options(), kind, &EnvMap::default(), None).unwrap();
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
        let plan = plan(&job, &options, LegKind::Agent, &EnvMap::default(), None).unwrap();
        assert_eq!(plan.ranks, [0, 1, 2, 3, 4]);
        let relays: Vec<Option<Vec<usize>>> = plan
            .tasks
            .iter()
            .map(|t| t.relay.as_ref().map(|g| g.nodes.clone()))
            .collect();
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
        let plan = plan(&job, &only, LegKind::Agent, &EnvMap::default(), None).unwrap();
        assert_eq!(plan.ranks, [0, 2]);
        let none = RunOptions {
            exclude: [0, 1, 2].into(),
            ..options()
        };
        let e = super::plan(&job, &none, LegKind::Agent, &EnvMap::default(), None).unwrap_err();
        assert!(e.to_string().contains("leave no node"), "{e}");
        let grouped = RunOptions {
            group: true,
            fanout: 1,
            ..options()
        };
        let e = super::plan(&job, &grouped, LegKind::Agent, &EnvMap::default(), None).unwrap_err();
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
            None,
        )
        .unwrap();
        assert_eq!(first.tasks.len(), 4);
        // b died: a, c, d are 0, 1, 2.
        let again = plan(
            &job(&["a", "c", "d"], 0),
            &options(),
            LegKind::Agent,
            &EnvMap::default(),
            None,
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
