//! Which node of the hostlist this one is: its rank.
//!
//! `--node-rank`, else `MULTINODE_NODE_RANK`, else `RANK` (set per node by a
//! platform or by exec_all); when one of the first two and `RANK` are both set
//! they must agree. Otherwise this machine is matched against the hostlist by
//! host name, short name, FQDN, or an IP literal equal to one of its interface
//! addresses (exactly, not by subnet); exactly one entry must match.

use std::net::IpAddr;

use tracing::debug;

use super::host_slots::Node;
use super::job_nodes::Topology;
use super::machine::Machine;
use super::topology_error::{TopologyError, shorten};
use crate::env_map::{BadVar, EnvMap};
use crate::vars;

/// What this machine is called and where it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    pub hostname: String,
    pub fqdn: Option<String>,
    pub addrs: Vec<IpAddr>,
}

impl Identity {
    fn short(&self) -> &str {
        self.hostname.split('.').next().unwrap_or_default()
    }

    /// Whether hostlist entry `host` names this machine.
    pub(crate) fn matches(&self, host: &str) -> bool {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.addrs.contains(&ip);
        }
        host.eq_ignore_ascii_case(&self.hostname)
            || host.eq_ignore_ascii_case(self.short())
            || self
                .fqdn
                .as_deref()
                .is_some_and(|f| host.eq_ignore_ascii_case(f) || leads(host, f))
    }

    /// `gpu01, gpu01.example.org, addresses 10.0.0.1, fd00::1`
    fn describe(&self) -> String {
        let mut parts = vec![self.hostname.clone()];
        if let Some(fqdn) = self.fqdn.as_ref().filter(|f| **f != self.hostname) {
            parts.push(fqdn.clone());
        }
        let addrs: Vec<String> = self.addrs.iter().map(IpAddr::to_string).collect();
        parts.push(format!("addresses {}", addrs.join(", ")));
        parts.join(", ")
    }
}

/// Whether `host` is the leading labels of `fqdn` (`gpu01.rack1` of
/// `gpu01.rack1.example.org`): a name that a DNS search domain completes, as
/// Kubernetes' `<pod>.<service>.<namespace>.svc` does.
fn leads(host: &str, fqdn: &str) -> bool {
    fqdn.len() > host.len()
        && fqdn.as_bytes()[host.len()] == b'.'
        && fqdn
            .get(..host.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(host))
}

/// Ranks whose entry names this machine.
pub(crate) fn matching_ranks(nodes: &[Node], me: &Identity) -> Vec<usize> {
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| me.matches(&n.host))
        .map(|(rank, _)| rank)
        .collect()
}

fn parse_rank(name: &str, value: &str) -> Result<usize, TopologyError> {
    value
        .parse()
        .map_err(|_| TopologyError::from(BadVar::new(name, value, "a node rank (0, 1, 2, ...)")))
}

/// This node's rank in `topology`.
pub(crate) fn find_rank(
    topology: &Topology,
    node_rank_flag: Option<usize>,
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<usize, TopologyError> {
    let explicit = match (node_rank_flag, env.get(vars::NODE_RANK)) {
        (Some(rank), _) => Some(("--node-rank", rank)),
        (None, Some(v)) => Some((vars::NODE_RANK, parse_rank(vars::NODE_RANK, v)?)),
        (None, None) => None,
    };
    let env_rank = env.get("RANK").map(|v| parse_rank("RANK", v)).transpose()?;
    let chosen = match (explicit, env_rank) {
        (Some((name, rank)), Some(env_rank)) if rank != env_rank => {
            return Err(TopologyError::RankConflict {
                name,
                rank,
                env_rank,
            });
        }
        (Some(chosen), _) => Some(chosen),
        (None, Some(rank)) => Some(("RANK", rank)),
        (None, None) => None,
    };
    if let Some((name, rank)) = chosen {
        if rank >= topology.nodes.len() {
            return Err(TopologyError::RankOutOfRange {
                name,
                rank,
                nodes: topology.nodes.len(),
                origin: topology.source.clone(),
            });
        }
        debug!(rank, from = name, "this node's rank");
        return Ok(rank);
    }
    let me = identity(topology, machine)?;
    match matching_ranks(&topology.nodes, &me)[..] {
        [rank] => {
            debug!(rank, host = %topology.nodes[rank].host, "this node's rank, by matching this machine");
            Ok(rank)
        }
        [] => {
            // Complete the description for the message.
            let me = Identity {
                fqdn: me.fqdn.or_else(|| machine.fqdn()),
                addrs: interface_addrs(machine),
                ..me
            };
            Err(TopologyError::NotInHostlist {
                me: shorten(&me.describe()),
                origin: topology.source.clone(),
            })
        }
        ref several => Err(TopologyError::SeveralMatches {
            origin: topology.source.clone(),
            matches: shorten(
                &several
                    .iter()
                    .map(|r| format!("{} (rank {r})", topology.nodes[*r].host))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        }),
    }
}

/// This machine's identity, looking up only what the hostlist can match: the
/// FQDN (a DNS query) only if an entry is a dotted name, the interface
/// addresses only if an entry is an IP literal.
fn identity(topology: &Topology, machine: &dyn Machine) -> Result<Identity, TopologyError> {
    let hostname = machine
        .hostname()
        .map_err(|reason| TopologyError::LocalHostname { reason })?;
    let is_ip = |h: &str| h.parse::<IpAddr>().is_ok();
    let hosts = || topology.nodes.iter().map(|n| n.host.as_str());
    let fqdn = if hosts().any(|h| h.contains('.') && !is_ip(h)) {
        machine.fqdn()
    } else {
        None
    };
    let addrs = if hosts().any(is_ip) {
        interface_addrs(machine)
    } else {
        Vec::new()
    };
    Ok(Identity {
        hostname,
        fqdn,
        addrs,
    })
}

fn interface_addrs(machine: &dyn Machine) -> Vec<IpAddr> {
    let mut addrs: Vec<IpAddr> = Vec::new();
    for iface in machine.interfaces() {
        if !addrs.contains(&iface.addr) {
            addrs.push(iface.addr);
        }
    }
    addrs
}

#[cfg(test)]
mod tests {
    use super::super::machine::fake::{FakeMachine, env, topology};
    use super::*;

    fn rank(hosts: &[&str], flag: Option<usize>, vars: &[(&str, &str)]) -> Result<usize, String> {
        let m = FakeMachine {
            fqdn: Some("gpu01.cluster.example".into()),
            ..FakeMachine::gpu01()
        };
        find_rank(&topology("SLURM_JOB_NODELIST", hosts), flag, &env(vars), &m)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn explicit_ranks_win_and_must_agree() {
        let hosts = ["a", "b", "c"];
        assert_eq!(rank(&hosts, Some(2), &[]), Ok(2));
        assert_eq!(rank(&hosts, None, &[("MULTINODE_NODE_RANK", "1")]), Ok(1));
        assert_eq!(rank(&hosts, None, &[("RANK", "2")]), Ok(2));
        assert_eq!(
            rank(&hosts, Some(1), &[("MULTINODE_NODE_RANK", "2")]),
            Ok(1),
            "the flag overrides its variable"
        );
        assert_eq!(
            rank(&hosts, None, &[("MULTINODE_NODE_RANK", "1"), ("RANK", "1")]),
            Ok(1)
        );
        assert_eq!(
            rank(&hosts, None, &[("MULTINODE_NODE_RANK", "1"), ("RANK", "2")]),
            Err("MULTINODE_NODE_RANK=1 but RANK=2; they must agree: unset one of them".into())
        );
        assert_eq!(
            rank(&hosts, Some(0), &[("RANK", "2")]),
            Err("--node-rank=0 but RANK=2; they must agree: unset one of them".into())
        );
        assert_eq!(
            rank(&hosts, None, &[("RANK", "3")]),
            Err("RANK=3 but the hostlist from SLURM_JOB_NODELIST has 3 node(s), ranks 0 to 2; fix RANK".into())
        );
        assert_eq!(
            rank(&hosts, None, &[("MULTINODE_NODE_RANK", "-1")]),
            Err(
                "MULTINODE_NODE_RANK='-1' is not a node rank (0, 1, 2, ...); fix it or unset it"
                    .into()
            )
        );
        assert!(rank(&hosts, None, &[("RANK", "x")]).is_err());
    }

    #[test]
    fn matching_by_name_short_name_fqdn_and_address() {
        assert_eq!(rank(&["gpu00", "gpu01"], None, &[]), Ok(1));
        assert_eq!(rank(&["gpu00", "GPU01"], None, &[]), Ok(1));
        assert_eq!(
            rank(
                &["gpu00.cluster.example", "gpu01.cluster.example"],
                None,
                &[]
            ),
            Ok(1)
        );
        assert_eq!(rank(&["10.0.0.9", "10.0.0.1"], None, &[]), Ok(1));
        assert_eq!(rank(&["fd00::9", "fd00::1"], None, &[]), Ok(1));
        // Exact addresses, not subnets.
        assert!(rank(&["10.0.0.2", "10.0.0.3"], None, &[]).is_err());
        // A name that a search domain completes to this machine's FQDN.
        assert_eq!(rank(&["gpu00.cluster", "GPU01.cluster"], None, &[]), Ok(1));
        // A different domain is a different machine; a label is matched whole.
        assert!(rank(&["gpu01.other.example", "x"], None, &[]).is_err());
        assert!(rank(&["gpu01.clus", "x"], None, &[]).is_err());
        assert!(rank(&["gpu01.cluster.example.org", "x"], None, &[]).is_err());
    }

    #[test]
    fn short_hostname_matches_its_own_short_name() {
        let m = FakeMachine {
            hostname: "gpu01.cluster.example".into(),
            ..FakeMachine::gpu01()
        };
        assert_eq!(
            find_rank(
                &topology("SLURM_JOB_NODELIST", &["gpu00", "gpu01"]),
                None,
                &EnvMap::default(),
                &m
            )
            .ok(),
            Some(1)
        );
    }

    #[test]
    fn zero_or_several_matches_are_errors() {
        let none = rank(&["a", "b"], None, &[]).unwrap_err();
        assert!(
            none.starts_with("this machine (gpu01, gpu01.cluster.example, addresses 127.0.0.1, ::1, 10.0.0.1, fe80::1, fd00::1, 192.168.0.1) is not in the hostlist from SLURM_JOB_NODELIST; set MULTINODE_NODE_RANK"),
            "{none}"
        );
        assert_eq!(
            rank(&["gpu01", "10.0.0.1"], None, &[]),
            Err("this machine matches several hosts of the hostlist from SLURM_JOB_NODELIST: gpu01 (rank 0), 10.0.0.1 (rank 1); set MULTINODE_NODE_RANK (or --node-rank) to this node's rank".into())
        );
    }

    #[test]
    fn lookups_only_when_an_entry_needs_them() {
        let m = FakeMachine {
            fqdn: Some("gpu01.x".into()),
            ..FakeMachine::gpu01()
        };
        let id = identity(&topology("SLURM_JOB_NODELIST", &["a", "b"]), &m).expect("identity");
        assert_eq!((id.fqdn, id.addrs.len()), (None, 0));
        let id =
            identity(&topology("SLURM_JOB_NODELIST", &["a.x", "10.0.0.1"]), &m).expect("identity");
        assert_eq!(id.fqdn.as_deref(), Some("gpu01.x"));
        assert!(!id.addrs.is_empty());
    }
}
