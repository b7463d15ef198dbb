//! The environment contract of a node: its variables, for this node or any
//! rank, rendered once a job ([`Contract`]), and `multinode env`.

use std::borrow::Cow;
use std::net::IpAddr;

use super::format::{render_json, render_sh};
use super::hostlists;
use super::job::{Job, resolve_job};
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::topology::{Inputs, Topology};
use crate::vars;

/// The contract's variables for this node, in this order: `MULTINODE_HOSTLIST`,
/// `MULTINODE_HOSTLIST_NOSLOTS`, (`MULTINODE_HOSTFILE` when the lists are
/// folded, see [`hostlists`]), `MULTINODE_TOTAL_SLOTS`, `MULTINODE_NNODES`,
/// `MULTINODE_HEAD`, `MULTINODE_NODE_IP`, `MULTINODE_LOCAL_IP`, `RANK`,
/// `MULTINODE_NODE_RANK`, `MULTINODE_AGENT_PORT`, `MULTINODE_SSH_WRAPPER`,
/// `MULTINODE_RSH_WRAPPER`, `MULTINODE_BIN`.
pub fn contract(job: &Job) -> Vec<(String, String)> {
    contract_for_rank(job, job.rank)
}

/// The contract's variables for node `rank`, as [`contract`] orders them:
/// `RANK` and `MULTINODE_NODE_RANK` are `rank`, and `MULTINODE_LOCAL_IP` is
/// that node's own address as far as this node knows it without asking the
/// network: [`Job::local_ip`] for this node, the hostlist entry when it is an
/// IP literal, else the empty string, which `multinode env` on that node
/// treats as unset and resolves there (a caller that knows the address it
/// connected to may put it in instead). A `rank` outside the topology also
/// gets an empty `MULTINODE_LOCAL_IP`.
pub fn contract_for_rank(job: &Job, rank: usize) -> Vec<(String, String)> {
    Contract::new(job).for_rank(rank)
}

/// The contract of a job, its rank-independent part rendered once: a caller
/// that starts many nodes (exec_all) pays for the hostlists once, not once a node.
#[derive(Debug, Clone)]
pub struct Contract<'a> {
    job: &'a Job,
    /// The nodes the job runs on: [`Job::active`].
    active: Cow<'a, Topology>,
    lists: hostlists::Lists,
    /// `MULTINODE_SPARES` and `MULTINODE_SPARE_HOSTLIST`, when there are spares.
    spare_vars: Vec<(String, String)>,
    total_slots: String,
    nnodes: String,
    head: String,
}

impl<'a> Contract<'a> {
    pub fn new(job: &'a Job) -> Self {
        let topo = job.active();
        let spare_vars = match job.spares {
            0 => Vec::new(),
            k => vec![
                (vars::SPARES.to_string(), k.to_string()),
                (
                    vars::SPARE_HOSTLIST.to_string(),
                    Topology {
                        nodes: job.topology.nodes[topo.nodes.len()..].to_vec(),
                        source: String::new(),
                    }
                    .hostlist(),
                ),
            ],
        };
        Contract {
            job,
            lists: hostlists::Lists::new(&topo),
            total_slots: topo.total_slots().to_string(),
            nnodes: topo.nodes.len().to_string(),
            head: topo
                .nodes
                .first()
                .map(|n| n.host.clone())
                .unwrap_or_default(),
            spare_vars,
            active: topo,
        }
    }

    /// [`contract_for_rank`].
    pub fn for_rank(&self, rank: usize) -> Vec<(String, String)> {
        self.with_lists(rank, self.lists.vars(&self.active).to_vec())
    }

    /// What exec_all sends an agent for node `rank`: [`Contract::for_rank`]
    /// with the lists as one folded variable, which the agent expands on its
    /// node ([`hostlists::WireCache::expand_wire`]). Its size does not
    /// depend on the number of nodes when their names are regular.
    pub fn wire_for_rank(&self, rank: usize) -> Vec<(String, String)> {
        let folded = vec![(vars::HOSTLIST_FOLDED.to_string(), self.lists.folded.clone())];
        self.with_lists(rank, folded)
    }

    /// For a node reached through an external wrapper (sshd, a platform's),
    /// which gets its variables in one command line: [`Contract::for_rank`]
    /// with the lists folded so that both fit that line together, and
    /// without `MULTINODE_HOSTFILE`, a file of this node.
    pub fn remote_for_rank(&self, rank: usize) -> Vec<(String, String)> {
        self.with_lists(rank, self.lists.one_line_vars(&self.active).to_vec())
    }

    /// What to tell the user once when `MULTINODE_HOSTLIST_NOSLOTS` is
    /// folded ([`hostlists::Lists::folded_note`]), unless `env` already
    /// holds it folded: the note was then given where that environment
    /// came from (an earlier `multinode env` of the same script, or the
    /// head's agent as it started JOB).
    pub fn folded_note(&self, env: &EnvMap) -> Option<String> {
        let topo = &self.active;
        let note = self.lists.folded_note(topo)?;
        let folded = self
            .lists
            .vars(topo)
            .iter()
            .find(|(k, _)| k == vars::HOSTLIST_NOSLOTS)
            .map(|(_, v)| v.as_str());
        (env.get(vars::HOSTLIST_NOSLOTS) != folded).then_some(note)
    }

    /// Every name [`Contract::for_rank`] or [`Contract::wire_for_rank`] may set.
    pub fn names() -> impl Iterator<Item = &'static str> {
        vars::CONTRACT.into_iter()
    }

    fn with_lists(&self, rank: usize, lists: Vec<(String, String)>) -> Vec<(String, String)> {
        let job = self.job;
        let local_ip = if rank == job.rank {
            job.local_ip.to_string()
        } else {
            job.topology
                .nodes
                .get(rank)
                .and_then(|n| n.host.parse::<IpAddr>().ok())
                .map(|ip| ip.to_string())
                .unwrap_or_default()
        };
        let mut vars = lists;
        vars.extend(
            [
                (vars::TOTAL_SLOTS, self.total_slots.clone()),
                (vars::NNODES, self.nnodes.clone()),
                (vars::HEAD, self.head.clone()),
                (vars::NODE_IP, job.head_ip.to_string()),
                (vars::LOCAL_IP, local_ip),
                (vars::RANK, rank.to_string()),
                (vars::NODE_RANK, rank.to_string()),
                (vars::AGENT_PORT, job.agent_port.to_string()),
                (vars::SSH_WRAPPER, job.wrapper.clone()),
                (vars::RSH_WRAPPER, job.rsh_wrapper.clone()),
                (vars::BIN, job.bin.clone()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
        );
        vars.extend(self.spare_vars.iter().cloned());
        vars
    }
}

/// Fills in `MULTINODE_LOCAL_IP` in the contract of a node that was reached
/// at `reached`, when [`contract_for_rank`] left it empty (a host name): the
/// address a launcher reached the node at is its own, as the job sees it.
pub fn fill_reached_address(vars: &mut [(String, String)], reached: IpAddr) {
    for (name, value) in vars {
        if name == vars::LOCAL_IP && value.is_empty() {
            *value = reached.to_string();
        }
    }
}

/// `multinode env`: this node's contract as `export` lines or one JSON object.
pub fn cmd_env(inputs: &Inputs, json: bool) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let job = resolve_job(inputs, &env)?;
    let contract = Contract::new(&job);
    let vars = contract.for_rank(job.rank);
    if let Some(note) = contract.folded_note(&env) {
        tracing::warn!("{note}");
    }
    let text = if json {
        render_json(&vars)
    } else {
        render_sh(&vars)
    };
    crate::stdio::print_stdout(&text)
}

#[cfg(test)]
mod tests {
    use super::super::job::job_from;
    use super::super::programs;
    use super::*;
    use crate::topology::Placement;

    #[test]
    fn a_reached_address_fills_only_an_empty_local_ip() {
        let mut vars = vec![
            (vars::LOCAL_IP.to_string(), String::new()),
            ("RANK".to_string(), String::new()),
        ];
        fill_reached_address(&mut vars, "10.0.0.7".parse().unwrap());
        assert_eq!(vars[0].1, "10.0.0.7");
        assert_eq!(vars[1].1, "", "other variables are left alone");
        fill_reached_address(&mut vars, "10.0.0.8".parse().unwrap());
        assert_eq!(vars[0].1, "10.0.0.7", "a known address is kept");
    }
    use crate::topology::Node;
    use crate::topology::machine::fake::{env, ip};

    fn placement() -> Placement {
        Placement {
            topology: Topology {
                nodes: vec![
                    Node {
                        host: "gpu01".into(),
                        slots: 2,
                    },
                    Node {
                        host: "10.0.0.2".into(),
                        slots: 2,
                    },
                    Node {
                        host: "gpu03".into(),
                        slots: 4,
                    },
                ],
                source: "--hosts".into(),
            },
            spares: 0,
            rank: 0,
            head_ip: ip("10.0.0.1"),
            local_ip: ip("10.0.0.1"),
        }
    }

    fn invocation() -> programs::ThisBinary {
        programs::ThisBinary::fixed("/opt/mn/bin/multinode", "/opt/mn/bin/mn-ssh")
    }

    fn job(vars: &[(&str, &str)]) -> Result<Job, String> {
        job_from(placement(), &env(vars), &invocation()).map_err(|e| e.to_string())
    }

    #[test]
    fn contract_in_order() {
        let job = job(&[]).expect("job");
        let vars = contract(&job);
        let expected = [
            ("MULTINODE_HOSTLIST", "gpu01:2,10.0.0.2:2,gpu03:4"),
            ("MULTINODE_HOSTLIST_NOSLOTS", "gpu01,10.0.0.2,gpu03"),
            ("MULTINODE_TOTAL_SLOTS", "8"),
            ("MULTINODE_NNODES", "3"),
            ("MULTINODE_HEAD", "gpu01"),
            ("MULTINODE_NODE_IP", "10.0.0.1"),
            ("MULTINODE_LOCAL_IP", "10.0.0.1"),
            ("RANK", "0"),
            ("MULTINODE_NODE_RANK", "0"),
            ("MULTINODE_AGENT_PORT", "29922"),
            ("MULTINODE_SSH_WRAPPER", "/opt/mn/bin/mn-ssh"),
            ("MULTINODE_RSH_WRAPPER", "/opt/mn/bin/mn-ssh"),
            ("MULTINODE_BIN", "/opt/mn/bin/multinode"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(vars, expected);
    }

    #[test]
    fn contract_for_other_ranks() {
        let job = job(&[]).expect("job");
        let get = |vars: &[(String, String)], name: &str| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        };
        let one = contract_for_rank(&job, 1);
        assert_eq!(get(&one, "RANK").as_deref(), Some("1"));
        assert_eq!(get(&one, "MULTINODE_NODE_RANK").as_deref(), Some("1"));
        assert_eq!(get(&one, "MULTINODE_LOCAL_IP").as_deref(), Some("10.0.0.2"));
        assert_eq!(get(&one, "MULTINODE_NODE_IP").as_deref(), Some("10.0.0.1"));
        let two = contract_for_rank(&job, 2);
        assert_eq!(get(&two, "MULTINODE_LOCAL_IP").as_deref(), Some(""));
        let outside = contract_for_rank(&job, 9);
        assert_eq!(get(&outside, "MULTINODE_LOCAL_IP").as_deref(), Some(""));
        assert_eq!(contract_for_rank(&job, 0), contract(&job));
    }

    #[test]
    fn bytes_sent_to_a_node_do_not_grow_with_the_node_count() {
        let job_of = |n: usize| Job {
            spares: 0,
            topology: Topology {
                nodes: (1..=n)
                    .map(|i| Node {
                        host: format!("gpu-node-{i:05}"),
                        slots: 8,
                    })
                    .collect(),
                source: "test".into(),
            },
            rank: 0,
            head_ip: ip("10.0.0.1"),
            local_ip: ip("10.0.0.1"),
            agent_port: crate::defaults::AGENT_PORT,
            wrapper: "/opt/mn/bin/mn-ssh".into(),
            rsh_wrapper: "/opt/mn/bin/mn-ssh".into(),
            bin: "/opt/mn/bin/multinode".into(),
        };
        let bytes = |vars: Vec<(String, String)>| -> usize {
            vars.iter().map(|(k, v)| k.len() + v.len()).sum()
        };
        let (small, large) = (job_of(100), job_of(10_000));
        let (small, large) = (Contract::new(&small), Contract::new(&large));
        // Only the digits of MULTINODE_NNODES and _TOTAL_SLOTS differ (3 + 3).
        let (s, l) = (
            bytes(small.wire_for_rank(42)),
            bytes(large.wire_for_rank(42)),
        );
        assert!(l <= s + 6, "{s} bytes at 100 nodes, {l} at 10,000");
        assert!(l < 400, "{l} bytes");
        // What the node's commands then see, written out by its agent:
        // at 10,000 nodes the full list would not pass exec (128 KiB).
        let mut on_node = large.wire_for_rank(42);
        hostlists::expand_wire(&mut on_node).expect("expands");
        assert_eq!(on_node, large.for_rank(42));
        assert!(job_of(10_000).topology.hostlist().len() > 128 * 1024);
        let get = |name: &str| {
            on_node
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            get("MULTINODE_HOSTLIST").as_deref(),
            Some("gpu-node-[00001-10000]:8")
        );
        assert!(get(vars::HOSTFILE).is_some());
        // Below the limit the node sees the lists written out, as before.
        let mut small_on_node = small.wire_for_rank(42);
        hostlists::expand_wire(&mut small_on_node).expect("expands");
        assert_eq!(small_on_node, small.for_rank(42));
        assert_eq!(small_on_node[0].1.len(), 100 * 17 - 1);
    }

    #[test]
    fn platform_wrappers_and_port_are_honoured() {
        let job = job(&[
            ("MULTINODE_SSH_WRAPPER", "/platform/ssh wrapper"),
            ("MULTINODE_AGENT_PORT", "4000"),
        ])
        .expect("job");
        assert_eq!(job.wrapper, "/platform/ssh wrapper");
        assert_eq!(job.rsh_wrapper, "/platform/ssh wrapper");
        assert_eq!(job.agent_port, 4000);
        let job = self::job(&[("MULTINODE_RSH_WRAPPER", "/platform/rsh")]).expect("job");
        assert_eq!(
            (job.wrapper.as_str(), job.rsh_wrapper.as_str()),
            ("/opt/mn/bin/mn-ssh", "/platform/rsh")
        );
    }

    #[test]
    fn bad_ports_are_errors() {
        for bad in ["0", "65536", "-1", "http", "22 "] {
            assert_eq!(
                job(&[("MULTINODE_AGENT_PORT", bad)]).err(),
                Some(format!(
                    "MULTINODE_AGENT_PORT='{bad}' is not a port number (1-65535); fix it, or unset it for the default 29922"
                ))
            );
        }
        assert_eq!(
            job(&[("MULTINODE_AGENT_PORT", "65535")]).map(|j| j.agent_port),
            Ok(65535)
        );
    }

    #[test]
    fn a_missing_mn_ssh_is_an_error_only_when_needed() {
        let lonely = programs::ThisBinary::fixed("/nowhere/multinode", "/nowhere/absent");
        assert_eq!(
            job_from(placement(), &EnvMap::default(), &lonely).map_err(|e| e.to_string()).err(),
            Some("mn-ssh not found beside /nowhere/multinode; install it next to multinode or set MULTINODE_SSH_WRAPPER".to_string())
        );
        let vars = env(&[("MULTINODE_SSH_WRAPPER", "/w")]);
        assert!(job_from(placement(), &vars, &lonely).is_ok());
    }
}
