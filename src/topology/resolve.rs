//! The topology from its sources, in order: `--hosts`, `--hostfile`,
//! `MULTINODE_HOSTLIST` / `MULTINODE_HOSTLIST_NOSLOTS`, Slurm, PBS, LSF, the
//! Kubernetes shapes (`kubernetes`), else this machine alone.
//!
//! Command-line flags override the environment's topology: the values that
//! describe that topology (`MULTINODE_TOTAL_SLOTS`, `_NNODES`, `_HEAD`,
//! `_NODE_IP`, `_LOCAL_IP`) are then not consulted. Otherwise those values are
//! honoured, and one that contradicts the hostlist is an error.

use std::path::Path;

use tracing::{debug, info};

use super::host_slots::Node;
use super::host_slots::{parse_host_slots, parse_noslots};
use super::hostfile::{parse_hostfile, parse_lsb_mcpu_hosts};
use super::hostlist::{expand, validate_host};
use super::inputs::Inputs;
use super::job_nodes::Topology;
use super::machine::{Machine, local_slots};
use super::tasks_per_node::parse_tasks_per_node;
use super::topology_error::{ParseError, TopologyError, shorten};
use crate::env_map::{BadVar, EnvMap};
use crate::vars;

/// The variables that describe the environment's topology.
pub(crate) const TOPOLOGY_VARS: [&str; 7] = [
    vars::HOSTLIST,
    vars::HOSTLIST_NOSLOTS,
    vars::TOTAL_SLOTS,
    vars::NNODES,
    vars::HEAD,
    vars::NODE_IP,
    vars::LOCAL_IP,
];

/// Whether the topology comes from command-line flags rather than the environment.
pub(crate) fn from_flags(args: &Inputs) -> bool {
    args.hosts.is_some() || args.hostfile.is_some()
}

/// The job's nodes, from the first source that is set.
pub(crate) fn resolve_topology(
    args: &Inputs,
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<Topology, TopologyError> {
    let topology = match from_sources(args, env, machine)? {
        Some(topology) => topology,
        None => this_machine(env, machine)?,
    };
    debug!(
        source = %topology.source,
        nodes = topology.nodes.len(),
        slots = topology.total_slots(),
        "topology"
    );
    if from_flags(args) {
        for var in TOPOLOGY_VARS.iter().filter(|v| env.get(v).is_some()) {
            info!("{} overrides {var} from the environment", topology.source);
        }
    } else {
        check_against_env(&topology, env)?;
        // A one-node job is a legitimate job (and what a workstation runs),
        // so this is a warning, not an error; but on a cluster a forgotten
        // hostlist must not go unnoticed until the job has run on one node.
        if topology.source == THIS_MACHINE {
            tracing::warn!("{NO_HOSTLIST_WARNING}");
        }
    }
    Ok(topology)
}

/// For a command that serves a job without being one of its nodes (a plain
/// agent): the topology that is set, if any, parsed and checked as every
/// other command would, so that a broken one is said at start and not when
/// a job first uses it. No source set is no error, and this machine need not
/// be in the hostlist.
pub(crate) fn check_topology(
    args: &Inputs,
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<Option<Topology>, TopologyError> {
    let topology = from_sources(args, env, machine)?;
    if let Some(topology) = &topology
        && !from_flags(args)
    {
        check_against_env(topology, env)?;
    }
    Ok(topology)
}

/// The job's nodes from the first source that is set; `None` when none is.
fn from_sources(
    args: &Inputs,
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<Option<Topology>, TopologyError> {
    match (&args.hosts, &args.hostfile) {
        (Some(_), Some(_)) => Err(TopologyError::TwoFlags),
        (Some(hosts), None) => {
            topology("--hosts".to_string(), parse_host_slots(hosts), |n| n).map(Some)
        }
        (None, Some(path)) => {
            from_hostfile(format!("--hostfile '{}'", path.display()), path, machine).map(Some)
        }
        (None, None) => from_env(env, machine),
    }
}

fn topology<T>(
    source: String,
    parsed: Result<T, ParseError>,
    into_nodes: impl FnOnce(T) -> Vec<Node>,
) -> Result<Topology, TopologyError> {
    match parsed {
        Ok(parsed) => Ok(Topology {
            nodes: into_nodes(parsed),
            source,
        }),
        Err(error) => Err(TopologyError::Parse {
            origin: source,
            error,
        }),
    }
}

fn with_one_slot(hosts: Vec<String>) -> Vec<Node> {
    hosts
        .into_iter()
        .map(|host| Node { host, slots: 1 })
        .collect()
}

fn from_hostfile(
    source: String,
    path: &Path,
    machine: &dyn Machine,
) -> Result<Topology, TopologyError> {
    let text = machine
        .read_file(path)
        .map_err(|error| TopologyError::Read {
            origin: source.clone(),
            error,
        })?;
    topology(source, parse_hostfile(&text), |n| n)
}

fn from_env(env: &EnvMap, machine: &dyn Machine) -> Result<Option<Topology>, TopologyError> {
    let hostlist = env.get(vars::HOSTLIST);
    let noslots = env.get(vars::HOSTLIST_NOSLOTS);
    if let Some(list) = hostlist {
        let topo = topology(vars::HOSTLIST.into(), parse_host_slots(list), |n| n)?;
        if let Some(names) = noslots {
            let other = topology(
                vars::HOSTLIST_NOSLOTS.into(),
                parse_noslots(names),
                with_one_slot,
            )?;
            let hosts = |t: &Topology| {
                t.nodes
                    .iter()
                    .map(|n| n.host.to_ascii_lowercase())
                    .collect::<Vec<_>>()
            };
            if hosts(&topo) != hosts(&other) {
                return Err(TopologyError::HostlistsDisagree {
                    hostlist: format!("'{}'", shorten(&topo.hostlist_noslots())),
                    noslots: format!("'{}'", shorten(&other.hostlist_noslots())),
                });
            }
        }
        return Ok(Some(topo));
    }
    if let Some(names) = noslots {
        return topology(
            vars::HOSTLIST_NOSLOTS.into(),
            parse_noslots(names),
            with_one_slot,
        )
        .map(Some);
    }
    let slurm = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
        .into_iter()
        .find_map(|var| env.get(var).map(|list| (var, list)));
    if let Some((var, list)) = slurm {
        let mut topo = topology(var.to_string(), expand(list), with_one_slot)?;
        if let Some(tasks) = env.get("SLURM_TASKS_PER_NODE") {
            let counts = parse_tasks_per_node(tasks).map_err(|error| TopologyError::Parse {
                origin: "SLURM_TASKS_PER_NODE".into(),
                error,
            })?;
            if counts.len() != topo.nodes.len() {
                return Err(TopologyError::TasksMismatch {
                    tasks: shorten(tasks),
                    counts: counts.len(),
                    origin: var.to_string(),
                    nodes: topo.nodes.len(),
                });
            }
            for (node, slots) in topo.nodes.iter_mut().zip(counts) {
                node.slots = slots;
            }
        }
        return Ok(Some(topo));
    }
    for var in ["PBS_NODEFILE", "LSB_DJOB_HOSTFILE"] {
        if let Some(path) = env.get(var) {
            return from_hostfile(format!("{var} '{path}'"), Path::new(path), machine).map(Some);
        }
    }
    if let Some(hosts) = env.get("LSB_MCPU_HOSTS") {
        return topology("LSB_MCPU_HOSTS".into(), parse_lsb_mcpu_hosts(hosts), |n| n).map(Some);
    }
    super::kubernetes::from_env(env, machine)
}

/// The source of the topology when none is set.
const THIS_MACHINE: &str = "this machine (no hostlist is set)";

/// Said when no source of the topology is set and the job is this machine alone.
pub(crate) const NO_HOSTLIST_WARNING: &str = "no hostlist is set (no --hosts, --hostfile, \
MULTINODE_HOSTLIST, SLURM_JOB_NODELIST, PBS_NODEFILE, LSB_DJOB_HOSTFILE, LSB_MCPU_HOSTS or \
Kubernetes job variables): this is a one-node job on this machine; for several nodes set \
MULTINODE_HOSTLIST=host1:SLOTS,host2:SLOTS (to silence this, MULTINODE_HOSTLIST=$(hostname):1)";

/// One node, this machine, with as many slots as it has GPUs (else 1):
/// `CUDA_VISIBLE_DEVICES` first, since it is what the job's processes will
/// see, else the GPUs `nvidia-smi -L` lists.
fn this_machine(env: &EnvMap, machine: &dyn Machine) -> Result<Topology, TopologyError> {
    let host = machine
        .hostname()
        .map_err(|reason| TopologyError::LocalHostname { reason })?;
    validate_host(&host).map_err(|e| TopologyError::LocalHostname {
        reason: e.to_string(),
    })?;
    Ok(Topology {
        nodes: vec![Node {
            host,
            slots: local_slots(env, machine),
        }],
        source: THIS_MACHINE.to_string(),
    })
}

/// `MULTINODE_TOTAL_SLOTS`, `MULTINODE_NNODES` and `MULTINODE_HEAD`, when
/// set, must describe the topology.
fn check_against_env(topology: &Topology, env: &EnvMap) -> Result<(), TopologyError> {
    let number = |name: &'static str| -> Result<Option<(u64, &str)>, TopologyError> {
        env.get(name)
            .map(|v| {
                v.parse::<u64>()
                    .map(|n| (n, v))
                    .map_err(|_| TopologyError::from(BadVar::new(name, v, "a number")))
            })
            .transpose()
    };
    let contradiction = |name, value: &str, actual| TopologyError::Contradiction {
        name,
        value: shorten(value),
        actual,
        origin: topology.source.clone(),
    };
    let total = topology.total_slots();
    if let Some((n, v)) = number(vars::TOTAL_SLOTS)?
        && n != total
    {
        return Err(contradiction(
            vars::TOTAL_SLOTS,
            v,
            format!("{total} slot(s)"),
        ));
    }
    let count = topology.nodes.len();
    if let Some((n, v)) = number(vars::NNODES)?
        && usize::try_from(n).ok() != Some(count)
    {
        return Err(contradiction(vars::NNODES, v, format!("{count} node(s)")));
    }
    if let (Some(v), Some(head)) = (env.get(vars::HEAD), topology.nodes.first()) {
        let v_host = v.trim_start_matches('[').trim_end_matches(']');
        if !v_host.eq_ignore_ascii_case(&head.host) {
            return Err(contradiction(
                vars::HEAD,
                v,
                format!("head '{}'", head.host),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::machine::fake::{FakeMachine, env};
    use super::*;

    fn machine() -> FakeMachine {
        FakeMachine {
            files: [
                ("/pbs".to_string(), "p1\np1\np2\np2\n".to_string()),
                ("/lsf".to_string(), "l1\nl2\nl1\n".to_string()),
                ("/hf".to_string(), "h1 slots=4\nh2:2\n".to_string()),
                ("/empty".to_string(), "# nothing\n".to_string()),
            ]
            .into(),
            ..FakeMachine::gpu01()
        }
    }

    fn resolve(args: &Inputs, vars: &[(&str, &str)]) -> Result<(String, String), String> {
        resolve_topology(args, &env(vars), &machine())
            .map(|t| (t.source.clone(), t.hostlist()))
            .map_err(|e| e.to_string())
    }

    fn resolve_env(vars: &[(&str, &str)]) -> Result<(String, String), String> {
        resolve(&Inputs::default(), vars)
    }

    fn ok(source: &str, hostlist: &str) -> Result<(String, String), String> {
        Ok((source.to_string(), hostlist.to_string()))
    }

    fn hosts_flag(h: &str) -> Inputs {
        Inputs {
            hosts: Some(h.into()),
            ..Inputs::default()
        }
    }

    #[test]
    fn every_source() {
        assert_eq!(resolve(&hosts_flag("a:2,b"), &[]), ok("--hosts", "a:2,b:1"));
        let hostfile = Inputs {
            hostfile: Some(PathBuf::from("/hf")),
            ..Inputs::default()
        };
        assert_eq!(resolve(&hostfile, &[]), ok("--hostfile '/hf'", "h1:4,h2:2"));
        assert_eq!(
            resolve_env(&[("MULTINODE_HOSTLIST", "m[1-2]:3")]),
            ok("MULTINODE_HOSTLIST", "m1:3,m2:3")
        );
        assert_eq!(
            resolve_env(&[("MULTINODE_HOSTLIST_NOSLOTS", "m1,m2")]),
            ok("MULTINODE_HOSTLIST_NOSLOTS", "m1:1,m2:1")
        );
        assert_eq!(
            resolve_env(&[
                ("SLURM_JOB_NODELIST", "s[1-4]"),
                ("SLURM_TASKS_PER_NODE", "2(x3),1")
            ]),
            ok("SLURM_JOB_NODELIST", "s1:2,s2:2,s3:2,s4:1")
        );
        assert_eq!(
            resolve_env(&[("SLURM_NODELIST", "s[1-2]")]),
            ok("SLURM_NODELIST", "s1:1,s2:1")
        );
        assert_eq!(
            resolve_env(&[("PBS_NODEFILE", "/pbs")]),
            ok("PBS_NODEFILE '/pbs'", "p1:2,p2:2")
        );
        assert_eq!(
            resolve_env(&[("LSB_DJOB_HOSTFILE", "/lsf")]),
            ok("LSB_DJOB_HOSTFILE '/lsf'", "l1:2,l2:1")
        );
        assert_eq!(
            resolve_env(&[("LSB_MCPU_HOSTS", "l1 4 l2 4")]),
            ok("LSB_MCPU_HOSTS", "l1:4,l2:4")
        );
        assert_eq!(
            resolve_env(&[]),
            ok("this machine (no hostlist is set)", "gpu01:1")
        );
    }

    #[test]
    fn sources_in_order() {
        let all = [
            ("MULTINODE_HOSTLIST", "m:1"),
            ("SLURM_JOB_NODELIST", "s"),
            ("SLURM_NODELIST", "s2"),
            ("PBS_NODEFILE", "/pbs"),
            ("LSB_DJOB_HOSTFILE", "/lsf"),
            ("LSB_MCPU_HOSTS", "l 1"),
        ];
        let expected = [
            "MULTINODE_HOSTLIST",
            "SLURM_JOB_NODELIST",
            "SLURM_NODELIST",
            "PBS_NODEFILE '/pbs'",
            "LSB_DJOB_HOSTFILE '/lsf'",
            "LSB_MCPU_HOSTS",
        ];
        for i in 0..all.len() {
            let got = resolve_env(&all[i..]).map(|(source, _)| source);
            assert_eq!(got.as_deref(), Ok(expected[i]));
        }
        assert_eq!(
            resolve(&hosts_flag("f"), &all).map(|(s, _)| s).as_deref(),
            Ok("--hosts")
        );
    }

    #[test]
    fn kubernetes_shapes_come_after_the_batch_systems_in_order() {
        let m = FakeMachine {
            hostname: "train-0".into(),
            fqdn: Some("train-0.t.ns.svc".into()),
            files: [(
                "/etc/mpi/hostfile".to_string(),
                "l.t.ns.svc slots=1\n".to_string(),
            )]
            .into(),
            ..FakeMachine::gpu01()
        };
        let all = [
            ("LSB_MCPU_HOSTS", "l 1 k 1"),
            ("JOB_COMPLETION_INDEX", "0"),
            ("MULTINODE_NNODES", "2"),
            ("PET_NNODES", "2"),
            ("MASTER_ADDR", "p-master-0"),
        ];
        let source = |vars: &[(&str, &str)]| {
            resolve_topology(&Inputs::default(), &env(vars), &m).map(|t| t.source)
        };
        assert_eq!(source(&all).ok().as_deref(), Some("LSB_MCPU_HOSTS"));
        assert_eq!(
            source(&all[1..]).ok().as_deref(),
            Some("JOB_COMPLETION_INDEX")
        );
        assert_eq!(source(&all[3..]).ok().as_deref(), Some("PET_NNODES"));
        assert_eq!(
            source(&[]).ok().as_deref(),
            Some("the MPI Operator's hostfile '/etc/mpi/hostfile'")
        );
        let m = FakeMachine {
            files: Default::default(),
            ..m
        };
        let topo = resolve_topology(&Inputs::default(), &EnvMap::default(), &m);
        assert_eq!(
            topo.map(|t| t.source).ok().as_deref(),
            Some("this machine (no hostlist is set)")
        );
    }

    #[test]
    fn one_machine_default_counts_gpus() {
        let mut m = machine();
        let topo = |m: &FakeMachine, vars| {
            resolve_topology(&Inputs::default(), &env(vars), m)
                .map(|t| t.hostlist())
                .ok()
        };
        m.gpus = Some(8);
        // CUDA_VISIBLE_DEVICES wins: the job's processes see only those.
        assert_eq!(
            topo(&m, &[("CUDA_VISIBLE_DEVICES", "0,1")]).as_deref(),
            Some("gpu01:2")
        );
        assert_eq!(topo(&m, &[]).as_deref(), Some("gpu01:8"));
        m.gpus = None;
        assert_eq!(
            topo(&m, &[("CUDA_VISIBLE_DEVICES", "0,1,3")]).as_deref(),
            Some("gpu01:3")
        );
        assert_eq!(
            topo(&m, &[("CUDA_VISIBLE_DEVICES", ",")]).as_deref(),
            Some("gpu01:1")
        );
        m.hostname = "bad host".into();
        assert!(
            resolve_topology(&Inputs::default(), &EnvMap::default(), &m)
                .unwrap_err()
                .to_string()
                .starts_with(
                    "this machine's host name is unusable (host name 'bad host' contains whitespace"
                )
        );
    }

    #[test]
    fn contradictions_are_errors() {
        assert_eq!(
            resolve_env(&[("MULTINODE_HOSTLIST", "a:2,b:2"), ("MULTINODE_HOSTLIST_NOSLOTS", "a,c")]),
            Err("MULTINODE_HOSTLIST names 'a,b' but MULTINODE_HOSTLIST_NOSLOTS names 'a,c'; set one of them, or make them agree".into())
        );
        assert_eq!(
            resolve_env(&[
                ("MULTINODE_HOSTLIST", "a:2,b:2"),
                ("MULTINODE_HOSTLIST_NOSLOTS", "a,b")
            ]),
            ok("MULTINODE_HOSTLIST", "a:2,b:2")
        );
        assert_eq!(
            resolve_env(&[("MULTINODE_HOSTLIST", "a:2,b:2"), ("MULTINODE_TOTAL_SLOTS", "5")]),
            Err("MULTINODE_TOTAL_SLOTS=5 but the hostlist from MULTINODE_HOSTLIST gives 4 slot(s); fix or unset MULTINODE_TOTAL_SLOTS, or fix the hostlist".into())
        );
        assert!(
            resolve_env(&[
                ("MULTINODE_HOSTLIST", "a:2,b:2"),
                ("MULTINODE_TOTAL_SLOTS", "4"),
                ("MULTINODE_NNODES", "2"),
                ("MULTINODE_HEAD", "a")
            ])
            .is_ok()
        );
        assert!(
            resolve_env(&[("SLURM_NODELIST", "a,b"), ("MULTINODE_NNODES", "3")])
                .unwrap_err()
                .starts_with(
                    "MULTINODE_NNODES=3 but the hostlist from SLURM_NODELIST gives 2 node(s)"
                )
        );
        assert!(
            resolve_env(&[("SLURM_NODELIST", "a,b"), ("MULTINODE_HEAD", "b")])
                .unwrap_err()
                .starts_with(
                    "MULTINODE_HEAD=b but the hostlist from SLURM_NODELIST gives head 'a'"
                )
        );
        assert_eq!(
            resolve_env(&[("SLURM_NODELIST", "a,b"), ("MULTINODE_TOTAL_SLOTS", "four")]),
            Err("MULTINODE_TOTAL_SLOTS='four' is not a number; fix it or unset it".into())
        );
        assert_eq!(
            resolve_env(&[("SLURM_JOB_NODELIST", "s[1-4]"), ("SLURM_TASKS_PER_NODE", "2(x3)")]),
            Err("SLURM_TASKS_PER_NODE='2(x3)' describes 3 nodes but SLURM_JOB_NODELIST has 4; they must agree".into())
        );
        // Flags override the environment's topology and its totals.
        assert_eq!(
            resolve(
                &hosts_flag("x:1"),
                &[
                    ("MULTINODE_HOSTLIST", "a:2"),
                    ("MULTINODE_TOTAL_SLOTS", "2")
                ]
            ),
            ok("--hosts", "x:1")
        );
        let both = Inputs {
            hosts: Some("a".into()),
            hostfile: Some(PathBuf::from("/hf")),
            ..Inputs::default()
        };
        assert_eq!(
            resolve(&both, &[]),
            Err("--hosts and --hostfile both given; use one of them".into())
        );
    }

    #[test]
    fn bad_input_names_its_source() {
        assert_eq!(
            resolve_env(&[("SLURM_JOB_NODELIST", "gpu[9-3]")]),
            Err("SLURM_JOB_NODELIST: reversed range '9-3' in 'gpu[9-3]'".into())
        );
        assert_eq!(
            resolve_env(&[("SLURM_JOB_NODELIST", "a"), ("SLURM_TASKS_PER_NODE", "x")]),
            Err("SLURM_TASKS_PER_NODE: 'x' in 'x' is not a task count such as 2 or 2(x3)".into())
        );
        assert_eq!(
            resolve_env(&[("PBS_NODEFILE", "/missing")]),
            Err("cannot read PBS_NODEFILE '/missing': entity not found".into())
        );
        assert_eq!(
            resolve_env(&[("LSB_DJOB_HOSTFILE", "/empty")]),
            Err("LSB_DJOB_HOSTFILE '/empty': no hosts in it".into())
        );
        assert_eq!(
            resolve(&hosts_flag("a:0"), &[]),
            Err("--hosts: slot count '0' for 'a' is not a positive integer".into())
        );
    }
}
