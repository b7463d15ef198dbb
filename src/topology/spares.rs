//! Spare nodes: the last K nodes of the hostlist, kept back for restarts
//! (docs/restarts.md). `MULTINODE_SPARES=K` names how many; once
//! `multinode env` has split them off, the environment holds the job's
//! nodes in `MULTINODE_HOSTLIST` and the spares in
//! `MULTINODE_SPARE_HOSTLIST`, which are put back behind them here.

use super::host_slots::Node;
use super::host_slots::parse_host_slots;
use super::job_nodes::Topology;
use super::topology_error::{ParseError, TopologyError};
use crate::env_map::{BadVar, EnvMap};
use crate::vars;

/// Puts the spares `MULTINODE_SPARE_HOSTLIST` lists behind the job's nodes
/// (unless the topology comes from `--hosts`/`--hostfile`, which say it all)
/// and returns how many of the last nodes of `topology` are spares:
/// `asked` (a command-line `--spares`), else `MULTINODE_SPARES`, else those
/// listed. Contradictions are errors.
pub(crate) fn apply(
    topology: &mut Topology,
    from_flags: bool,
    env: &EnvMap,
    asked: Option<usize>,
) -> Result<usize, TopologyError> {
    let from_env = match env.get(vars::SPARES) {
        None => None,
        Some(v) => Some(v.parse::<usize>().map_err(|_| {
            TopologyError::from(BadVar::new(
                vars::SPARES,
                v,
                "a number of spare nodes (0, 1, 2, ...)",
            ))
        })?),
    };
    let listed = match env.get(vars::SPARE_HOSTLIST).filter(|_| !from_flags) {
        None => None,
        Some(list) => Some(append(topology, list)?),
    };
    let spares = match (asked.or(from_env), listed) {
        (Some(k), Some(n)) if k != n => {
            let (name, value) = match asked {
                Some(_) => ("--spares", k.to_string()),
                None => (vars::SPARES, k.to_string()),
            };
            return Err(TopologyError::Contradiction {
                name,
                value,
                actual: format!("{n} spare(s)"),
                origin: vars::SPARE_HOSTLIST.into(),
            });
        }
        (k, n) => k.or(n).unwrap_or(0),
    };
    let nodes = topology.nodes.len();
    if spares > 0 && spares >= nodes {
        return Err(TopologyError::TooManySpares {
            spares,
            nodes,
            origin: topology.source.clone(),
        });
    }
    Ok(spares)
}

/// Appends the spares of `list`; none may be a node of the job already.
fn append(topology: &mut Topology, list: &str) -> Result<usize, TopologyError> {
    let spares: Vec<Node> =
        parse_host_slots(list).map_err(|error: ParseError| TopologyError::Parse {
            origin: vars::SPARE_HOSTLIST.into(),
            error,
        })?;
    if let Some(twice) = spares
        .iter()
        .find(|s| topology.nodes.iter().any(|n| n.host == s.host))
    {
        return Err(TopologyError::SpareInHostlist {
            host: twice.host.clone(),
            origin: topology.source.clone(),
        });
    }
    let n = spares.len();
    topology.nodes.extend(spares);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::machine::fake::env;

    fn topo(list: &str) -> Topology {
        Topology {
            nodes: parse_host_slots(list).unwrap(),
            source: "MULTINODE_HOSTLIST".into(),
        }
    }

    #[test]
    fn the_last_nodes_are_spares_by_number_or_by_their_list() {
        let mut t = topo("a:2,b:2,c:2");
        assert_eq!(apply(&mut t, false, &env(&[]), None).unwrap(), 0);
        assert_eq!(
            apply(&mut t, false, &env(&[(vars::SPARES, "1")]), None).unwrap(),
            1
        );
        assert_eq!(
            apply(&mut t, false, &env(&[(vars::SPARES, "1")]), Some(2)).unwrap(),
            2
        );
        assert_eq!(t.nodes.len(), 3, "a number keeps the nodes as they are");

        // As `multinode env` exports them: the job's nodes, then the spares.
        let vars = env(&[(vars::SPARES, "2"), (vars::SPARE_HOSTLIST, "d:2,e:2")]);
        assert_eq!(apply(&mut t, false, &vars, None).unwrap(), 2);
        let hosts: Vec<&str> = t.nodes.iter().map(|n| n.host.as_str()).collect();
        assert_eq!(hosts, ["a", "b", "c", "d", "e"]);
    }

    #[test]
    fn a_spare_list_is_ignored_when_flags_give_the_topology() {
        let mut t = topo("a:1,b:1");
        let vars = env(&[(vars::SPARE_HOSTLIST, "d:1")]);
        assert_eq!(apply(&mut t, true, &vars, None).unwrap(), 0);
        assert_eq!(t.nodes.len(), 2);
    }

    #[test]
    fn contradictions_and_impossible_counts_are_one_line_each() {
        let mut t = topo("a:1,b:1");
        let e = apply(&mut t, false, &env(&[(vars::SPARES, "two")]), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "MULTINODE_SPARES='two' is not a number of spare nodes (0, 1, 2, ...); fix it or unset it"
        );
        let e = apply(&mut t, false, &env(&[(vars::SPARES, "2")]), None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("2 spare node(s) leave no node for the job"),
            "{e}"
        );
        let mut t = topo("a:1,b:1");
        let vars = env(&[(vars::SPARES, "2"), (vars::SPARE_HOSTLIST, "c:1")]);
        let e = apply(&mut t, false, &vars, None).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "MULTINODE_SPARES=2 but the hostlist from MULTINODE_SPARE_HOSTLIST gives 1 spare(s)"
            ),
            "{e}"
        );
        let mut t = topo("a:1,b:1");
        let e = apply(&mut t, false, &env(&[(vars::SPARE_HOSTLIST, "b:1")]), None).unwrap_err();
        assert!(e.to_string().contains("b"), "{e}");
        let e = apply(&mut t, false, &env(&[(vars::SPARE_HOSTLIST, "c:x")]), None).unwrap_err();
        assert!(
            e.to_string().starts_with("MULTINODE_SPARE_HOSTLIST: "),
            "{e}"
        );
    }
}
