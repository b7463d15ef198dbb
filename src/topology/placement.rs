//! The topology placed on this machine: which node this is, and the two
//! addresses the contract names.

use std::borrow::Cow;
use std::net::IpAddr;

use super::address::{IfaceChoice, first_reachable, head_address, local_address};
use super::inputs::Inputs;
use super::job_nodes::Topology;
use super::machine::{Machine, lookup_all};
use super::resolve::{TOPOLOGY_VARS, from_flags, resolve_topology};
use super::this_node::find_rank;
use super::topology_error::TopologyError;
use crate::env_map::EnvMap;

/// The topology, this node's rank, the head's address and this node's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Every node of the job: those it runs on, then the spares.
    pub topology: Topology,
    /// How many of the last nodes are spares (`topology::spares`).
    pub spares: usize,
    pub rank: usize,
    pub head_ip: IpAddr,
    pub local_ip: IpAddr,
}

/// The environment's values that describe its topology, dropped when
/// command-line flags give another topology.
fn job_env<'a>(args: &Inputs, env: &'a EnvMap) -> Cow<'a, EnvMap> {
    if from_flags(args) {
        let mut env = env.clone();
        for var in TOPOLOGY_VARS {
            env.0.remove(var);
        }
        Cow::Owned(env)
    } else {
        Cow::Borrowed(env)
    }
}

pub(crate) fn resolve_placement(
    args: &Inputs,
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<Placement, TopologyError> {
    let mut topology = resolve_topology(args, env, machine)?;
    let spares = super::spares::apply(&mut topology, from_flags(args), env, args.spares)?;
    let rank = find_rank(&topology, args.node_rank, env, machine)?;
    let choice = IfaceChoice::from_inputs(args.iface.as_deref(), env)?;
    let job_env = job_env(args, env);
    let local_ip = local_address(&topology, rank, &job_env, &choice, machine)?;
    let head_ip = head_address(&topology, Some(rank), Some(local_ip), &job_env, machine)?;
    Ok(Placement {
        topology,
        spares,
        rank,
        head_ip,
        local_ip,
    })
}

/// One line of `multinode hosts`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct HostRow {
    pub rank: usize,
    pub host: String,
    pub slots: u32,
    /// `None` when not resolved (`--no-resolve`) or unresolvable.
    pub address: Option<IpAddr>,
}

/// Every node with its address as the contract would give it: the head's is
/// `MULTINODE_NODE_IP`, this node's `MULTINODE_LOCAL_IP`, any other's its IP
/// literal or DNS answer. This machine need not be in the hostlist, and an
/// address that cannot be found is logged and left out.
pub(crate) fn host_rows(
    args: &Inputs,
    env: &EnvMap,
    machine: &dyn Machine,
    resolve: bool,
) -> Result<Vec<HostRow>, TopologyError> {
    let topology = resolve_topology(args, env, machine)?;
    let mut rows: Vec<HostRow> = topology
        .nodes
        .iter()
        .enumerate()
        .map(|(rank, n)| HostRow {
            rank,
            host: n.host.clone(),
            slots: n.slots,
            address: None,
        })
        .collect();
    if !resolve {
        return Ok(rows);
    }
    let rank = match find_rank(&topology, args.node_rank, env, machine) {
        Ok(rank) => Some(rank),
        Err(e @ (TopologyError::NotInHostlist { .. } | TopologyError::SeveralMatches { .. })) => {
            tracing::debug!(reason = %e, "this machine's rank is unknown");
            None
        }
        Err(e) => return Err(e),
    };
    let choice = IfaceChoice::from_inputs(args.iface.as_deref(), env)?;
    let job_env = job_env(args, env);
    let found = |r: Result<IpAddr, TopologyError>, host: &str| match r {
        Ok(ip) => Some(ip),
        Err(e) => {
            tracing::warn!(host, "no address: {e}");
            None
        }
    };
    let local_ip = rank.and_then(|r| {
        found(
            local_address(&topology, r, &job_env, &choice, machine),
            &topology.nodes[r].host,
        )
    });
    let mut names = Vec::new();
    for row in &mut rows {
        if row.rank == 0 {
            row.address = found(
                head_address(&topology, rank, local_ip, &job_env, machine),
                &row.host,
            );
        } else if Some(row.rank) == rank {
            row.address = local_ip;
        } else if let Ok(ip) = row.host.parse() {
            row.address = Some(ip);
        } else {
            names.push(row.rank);
        }
    }
    // Only the head's address is in the contract: the others are shown when
    // DNS gives a reachable one, and logged otherwise. Looked up at once.
    let hosts: Vec<&str> = names
        .iter()
        .map(|&r| topology.nodes[r].host.as_str())
        .collect();
    let answers = lookup_all(machine, &hosts);
    for (&rank, answer) in names.iter().zip(answers) {
        let row = &mut rows[rank];
        row.address = match answer {
            Ok(addrs) => first_reachable(&addrs).or_else(|| {
                tracing::debug!(host = %row.host, ?addrs, "no reachable address");
                None
            }),
            Err(reason) => {
                tracing::debug!(host = %row.host, reason, "cannot resolve");
                None
            }
        };
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::super::machine::fake::{FakeMachine, env, ip};
    use super::*;

    fn machine() -> FakeMachine {
        FakeMachine {
            dns: [
                ("gpu00".to_string(), vec![ip("10.0.0.100")]),
                ("gpu02".to_string(), vec![ip("10.0.0.2")]),
            ]
            .into(),
            ..FakeMachine::gpu01()
        }
    }

    #[test]
    fn head_and_worker_placements() {
        let m = machine();
        let args = Inputs::default();
        let head = resolve_placement(&args, &env(&[("SLURM_JOB_NODELIST", "gpu[01-02]")]), &m)
            .expect("placed");
        assert_eq!(
            (head.rank, head.head_ip, head.local_ip),
            (0, ip("10.0.0.1"), ip("10.0.0.1"))
        );
        let worker = resolve_placement(&args, &env(&[("SLURM_JOB_NODELIST", "gpu[00-01]")]), &m)
            .expect("placed");
        assert_eq!(
            (worker.rank, worker.head_ip, worker.local_ip),
            (1, ip("10.0.0.100"), ip("10.0.0.1"))
        );
    }

    #[test]
    fn flags_drop_the_environments_addresses() {
        let m = machine();
        let vars = env(&[
            ("MULTINODE_HOSTLIST", "x:1,gpu01:1"),
            ("MULTINODE_NODE_IP", "10.7.7.7"),
            ("MULTINODE_LOCAL_IP", "10.8.8.8"),
        ]);
        let from_env = resolve_placement(&Inputs::default(), &vars, &m).expect("placed");
        assert_eq!(
            (from_env.head_ip, from_env.local_ip),
            (ip("10.7.7.7"), ip("10.8.8.8"))
        );
        let args = Inputs {
            hosts: Some("gpu01,gpu02".into()),
            ..Inputs::default()
        };
        let from_flags = resolve_placement(&args, &vars, &m).expect("placed");
        assert_eq!(
            (from_flags.head_ip, from_flags.local_ip),
            (ip("10.0.0.1"), ip("10.0.0.1"))
        );
    }

    #[test]
    fn hosts_rows_with_and_without_this_machine() {
        let m = machine();
        let args = Inputs {
            hosts: Some("gpu00:2,gpu01:2,gpu02,10.9.9.9,unknown".into()),
            ..Inputs::default()
        };
        let rows = host_rows(&args, &EnvMap::default(), &m, true).expect("rows");
        let addrs: Vec<Option<IpAddr>> = rows.iter().map(|r| r.address).collect();
        assert_eq!(
            addrs,
            [
                Some(ip("10.0.0.100")),
                Some(ip("10.0.0.1")),
                Some(ip("10.0.0.2")),
                Some(ip("10.9.9.9")),
                None
            ]
        );
        let args = Inputs {
            hosts: Some("gpu00,gpu02".into()),
            ..Inputs::default()
        };
        let rows = host_rows(&args, &EnvMap::default(), &m, true).expect("rows");
        assert_eq!(rows[1].address, Some(ip("10.0.0.2")));
        let rows = host_rows(&args, &EnvMap::default(), &m, false).expect("rows");
        assert!(rows.iter().all(|r| r.address.is_none()));
        // A bad explicit rank is still an error.
        assert!(host_rows(&args, &env(&[("RANK", "7")]), &m, true).is_err());
    }
}
