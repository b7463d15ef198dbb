//! The topology from the shapes Kubernetes jobs take, after the batch
//! systems' sources and before "this machine alone", in this order:
//!
//! 1. **Indexed Job, JobSet** (Kubeflow Trainer's TrainJob too):
//!    `JOB_COMPLETION_INDEX` is this pod's rank; the node count is
//!    `MULTINODE_NNODES`, else `PET_NNODES`; the pods are named
//!    `<job>-<index>`, and with a subdomain (a headless Service) they resolve
//!    as `<job>-<index>.<subdomain>.<namespace>.svc.<cluster domain>`: this
//!    pod's FQDN with the index replaced. Slots: `PET_NPROC_PER_NODE` when a
//!    number, else this pod's GPUs (one pod template: every pod has the same).
//! 2. **Kubeflow PyTorchJob**, found by `PET_NNODES`: node 0 is `MASTER_ADDR`
//!    (`<job>-master-0`), node i the worker `<job>-worker-<i-1>` (each has a
//!    Service of that name); this pod's rank is `RANK` (= `PET_NODE_RANK`).
//! 3. **MPI Operator**: the hostfile it mounts, `/etc/mpi/hostfile` (or
//!    `MULTINODE_MPI_HOSTFILE`), in any hostfile form.
//!
//! A missing or contradicting piece is a [`KubeError`]: one line that names
//! the variables and what to do.

use std::io;
use std::path::Path;

use super::host_slots::Node;
use super::hostfile::parse_hostfile;
use super::hostlist::{MAX_HOSTS, validate_host};
use super::job_nodes::Topology;
use super::machine::{Machine, local_slots};
use super::topology_error::{KubeError, TopologyError, shorten};
use crate::env_map::{BadVar, EnvMap};
use crate::vars;

/// Where the MPI Operator mounts its hostfile in the launcher.
pub(crate) const MPI_OPERATOR_HOSTFILE: &str = "/etc/mpi/hostfile";

/// The first Kubernetes shape whose variables are set, if any.
pub(super) fn from_env(
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<Option<Topology>, TopologyError> {
    if let Some(index) = env.get("JOB_COMPLETION_INDEX") {
        return indexed_job(index, env, machine).map(Some);
    }
    if let Some(nnodes) = env.get("PET_NNODES") {
        return pytorch_job(nnodes, env, machine).map(Some);
    }
    mpi_hostfile(env, machine)
}

fn number(name: &'static str, value: &str, what: &'static str) -> Result<usize, TopologyError> {
    value
        .parse()
        .map_err(|_| TopologyError::from(BadVar::new(name, value, what)))
}

/// A node count from `name`: a positive number, at most [`MAX_HOSTS`].
fn node_count(name: &'static str, value: &str) -> Result<usize, TopologyError> {
    let n = number(name, value, "a node count (1, 2, ...)")?;
    if n == 0 {
        return Err(TopologyError::from(BadVar::new(
            name,
            value,
            "a node count (1, 2, ...)",
        )));
    }
    if n > MAX_HOSTS {
        return Err(KubeError::TooMany {
            name,
            nnodes: n,
            limit: MAX_HOSTS,
        }
        .into());
    }
    Ok(n)
}

/// Each of `names` that is set must say `rank`.
fn ranks_agree(
    env: &EnvMap,
    source: &'static str,
    rank: usize,
    names: &[&'static str],
) -> Result<(), TopologyError> {
    for &name in names {
        if let Some(v) = env.get(name)
            && number(name, v, "a node rank (0, 1, 2, ...)")? != rank
        {
            return Err(KubeError::Disagree {
                name,
                value: shorten(v),
                other: source,
                other_value: rank.to_string(),
            }
            .into());
        }
    }
    Ok(())
}

/// Slots per pod: `PET_NPROC_PER_NODE` when it is a number, else this pod's
/// GPUs (every pod comes from the same template), else 1.
fn pod_slots(env: &EnvMap, machine: &dyn Machine) -> Result<u32, TopologyError> {
    match env.get("PET_NPROC_PER_NODE") {
        Some(v) if v.bytes().all(|b| b.is_ascii_digit()) => match v.parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(TopologyError::from(BadVar::new(
                "PET_NPROC_PER_NODE",
                v,
                "a process count (1, 2, ..., or auto, gpu, cpu)",
            ))),
        },
        // auto, gpu, cpu: torchrun decides on each node; count this pod's GPUs.
        _ => Ok(local_slots(env, machine)),
    }
}

fn checked(
    origin: &'static str,
    what: &'static str,
    host: String,
) -> Result<String, TopologyError> {
    match validate_host(&host) {
        Ok(()) => Ok(host),
        Err(e) => Err(KubeError::BadName {
            origin,
            what,
            host: shorten(&host),
            reason: e.to_string(),
        }
        .into()),
    }
}

/// An Indexed Job's (or a JobSet's) pods: this pod's FQDN with its index
/// replaced by each index in turn.
fn indexed_job(
    index: &str,
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<Topology, TopologyError> {
    const SOURCE: &str = "JOB_COMPLETION_INDEX";
    let index = number(SOURCE, index, "a completion index (0, 1, 2, ...)")?;
    let counts: Vec<(&'static str, &str)> = [vars::NNODES, "PET_NNODES"]
        .into_iter()
        .filter_map(|name| env.get(name).map(|v| (name, v)))
        .collect();
    let (count_var, nnodes) = match counts[..] {
        [] => return Err(KubeError::NoNodeCount { index }.into()),
        [(name, value), ..] => (name, node_count(name, value)?),
    };
    if let [_, (other, other_value)] = counts[..]
        && node_count(other, other_value)? != nnodes
    {
        return Err(KubeError::Disagree {
            name: count_var,
            value: nnodes.to_string(),
            other,
            other_value: shorten(other_value),
        }
        .into());
    }
    if index >= nnodes {
        return Err(KubeError::IndexOutOfRange {
            index,
            count_var,
            nnodes,
        }
        .into());
    }
    ranks_agree(
        env,
        SOURCE,
        index,
        &[vars::NODE_RANK, "RANK", "PET_NODE_RANK"],
    )?;

    let hostname = machine
        .hostname()
        .map_err(|reason| TopologyError::LocalHostname { reason })?;
    // With setHostnameAsFQDN the host name is the FQDN itself.
    let (short, domain) = match hostname.split_once('.') {
        Some((short, domain)) => (short.to_string(), Some(domain.to_string())),
        None => (hostname.clone(), None),
    };
    let suffix = format!("-{index}");
    let Some(prefix) = short.strip_suffix(&suffix).filter(|p| !p.is_empty()) else {
        return Err(KubeError::NotIndexedName {
            index,
            hostname: shorten(&hostname),
        }
        .into());
    };
    let domain = domain.or_else(|| {
        machine.fqdn().and_then(|fqdn| {
            let head = fqdn.get(..short.len())?;
            let rest = fqdn.get(short.len()..)?.strip_prefix('.')?;
            (head.eq_ignore_ascii_case(&short) && !rest.is_empty()).then(|| rest.to_string())
        })
    });
    let Some(domain) = domain else {
        return Err(KubeError::NoSubdomain {
            index,
            hostname: shorten(&hostname),
        }
        .into());
    };
    let slots = pod_slots(env, machine)?;
    let nodes = (0..nnodes)
        .map(|i| {
            checked(SOURCE, "the pod name", format!("{prefix}-{i}.{domain}"))
                .map(|host| Node { host, slots })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Topology {
        nodes,
        source: SOURCE.to_string(),
    })
}

/// A Kubeflow PyTorchJob: the master and `nnodes - 1` workers.
fn pytorch_job(
    nnodes: &str,
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<Topology, TopologyError> {
    const SOURCE: &str = "PET_NNODES";
    if let Some((min, max)) = nnodes.split_once(':')
        && min != max
    {
        return Err(KubeError::ElasticRange {
            value: shorten(nnodes),
        }
        .into());
    }
    let nnodes = node_count(SOURCE, nnodes.split(':').next().unwrap_or_default())?;
    let master = match (env.get("MASTER_ADDR"), env.get("PET_MASTER_ADDR")) {
        (Some(a), Some(b)) if a != b => {
            return Err(KubeError::Disagree {
                name: "MASTER_ADDR",
                value: format!("'{}'", shorten(a)),
                other: "PET_MASTER_ADDR",
                other_value: format!("'{}'", shorten(b)),
            }
            .into());
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => return Err(KubeError::NoMaster { nnodes }.into()),
    };
    let slots = pod_slots(env, machine)?;
    if let Some(world) = env.get("WORLD_SIZE") {
        let world =
            u64::try_from(number("WORLD_SIZE", world, "a process count")?).unwrap_or(u64::MAX);
        let nodes = u64::try_from(nnodes).unwrap_or(u64::MAX);
        // Operators before 1.7 set the node count, later ones the process count.
        if world != nodes && world != nodes.saturating_mul(u64::from(slots)) {
            return Err(KubeError::WorldSize {
                world,
                nnodes,
                nproc: slots,
            }
            .into());
        }
    }
    if let (Some(rank), Some(_)) = (env.get("RANK"), env.get("PET_NODE_RANK")) {
        let rank = number("RANK", rank, "a node rank (0, 1, 2, ...)")?;
        ranks_agree(env, "RANK", rank, &["PET_NODE_RANK"])?;
    }
    let master = checked(SOURCE, "MASTER_ADDR", master.to_string())?;
    let mut hosts = vec![master.clone()];
    if nnodes > 1 {
        let Some(job) = master.strip_suffix("-master-0").filter(|j| !j.is_empty()) else {
            return Err(KubeError::NotMasterName {
                addr: shorten(&master),
            }
            .into());
        };
        for i in 0..nnodes - 1 {
            hosts.push(checked(
                SOURCE,
                "a worker's name",
                format!("{job}-worker-{i}"),
            )?);
        }
    }
    Ok(Topology {
        nodes: hosts.into_iter().map(|host| Node { host, slots }).collect(),
        source: SOURCE.to_string(),
    })
}

/// The MPI Operator's hostfile, when there is one.
fn mpi_hostfile(env: &EnvMap, machine: &dyn Machine) -> Result<Option<Topology>, TopologyError> {
    let (origin, path, required) = match env.get(vars::MPI_HOSTFILE) {
        Some(path) => (format!("{} '{path}'", vars::MPI_HOSTFILE), path, true),
        None => (
            format!("the MPI Operator's hostfile '{MPI_OPERATOR_HOSTFILE}'"),
            MPI_OPERATOR_HOSTFILE,
            false,
        ),
    };
    let text = match machine.read_file(Path::new(path)) {
        Ok(text) => text,
        Err(e) if !required && e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(TopologyError::Read { origin, error }),
    };
    match parse_hostfile(&text) {
        Ok(nodes) => Ok(Some(Topology {
            nodes,
            source: origin,
        })),
        Err(error) => Err(TopologyError::Parse { origin, error }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::machine::fake::{FakeMachine, env};
    use super::*;

    /// A pod of an Indexed Job `train` with a headless Service `train`.
    fn pod(hostname: &str, fqdn: Option<&str>) -> FakeMachine {
        FakeMachine {
            hostname: hostname.into(),
            fqdn: fqdn.map(str::to_string),
            ..FakeMachine::gpu01()
        }
    }

    fn topo(vars: &[(&str, &str)], m: &FakeMachine) -> Result<Option<(String, String)>, String> {
        from_env(&env(vars), m)
            .map(|t| t.map(|t| (t.source.clone(), t.hostlist())))
            .map_err(|e| e.to_string())
    }

    fn some(source: &str, hostlist: &str) -> Result<Option<(String, String)>, String> {
        Ok(Some((source.to_string(), hostlist.to_string())))
    }

    const FQDN: &str = "train-2.train.default.svc.cluster.local";

    #[test]
    fn indexed_job_pods_are_this_pods_fqdn_with_each_index() {
        let m = pod("train-2", Some(FQDN));
        let d = "train.default.svc.cluster.local";
        let want = format!("train-0.{d}:1,train-1.{d}:1,train-2.{d}:1");
        let vars = [("JOB_COMPLETION_INDEX", "2"), ("MULTINODE_NNODES", "3")];
        assert_eq!(topo(&vars, &m), some("JOB_COMPLETION_INDEX", &want));
        // Kubeflow Trainer's count; both agree.
        let vars = [("JOB_COMPLETION_INDEX", "2"), ("PET_NNODES", "3")];
        assert_eq!(topo(&vars, &m), some("JOB_COMPLETION_INDEX", &want));
        let vars = [
            ("JOB_COMPLETION_INDEX", "2"),
            ("MULTINODE_NNODES", "3"),
            ("PET_NNODES", "3"),
            ("PET_NODE_RANK", "2"),
            ("RANK", "2"),
        ];
        assert_eq!(topo(&vars, &m), some("JOB_COMPLETION_INDEX", &want));
        // setHostnameAsFQDN: the host name is the FQDN.
        assert_eq!(
            topo(
                &[("JOB_COMPLETION_INDEX", "2"), ("MULTINODE_NNODES", "3")],
                &pod(FQDN, None)
            ),
            some("JOB_COMPLETION_INDEX", &want)
        );
        // A JobSet pod: <jobset>-<replicated job>-<job index>-<pod index>.<jobset>.
        let m = pod("pt-node-0-1", Some("pt-node-0-1.pt.ml.svc.cluster.local"));
        assert_eq!(
            topo(&[("JOB_COMPLETION_INDEX", "1"), ("PET_NNODES", "2")], &m),
            some(
                "JOB_COMPLETION_INDEX",
                "pt-node-0-0.pt.ml.svc.cluster.local:1,pt-node-0-1.pt.ml.svc.cluster.local:1"
            )
        );
    }

    #[test]
    fn indexed_job_slots_are_nproc_else_this_pods_gpus() {
        let m = pod("train-0", Some("train-0.t.ns.svc.cluster.local"));
        let base = [("JOB_COMPLETION_INDEX", "0"), ("MULTINODE_NNODES", "2")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut vars = base.to_vec();
            vars.extend_from_slice(extra);
            from_env(&env(&vars), &m).map(|t| t.expect("a topology").nodes[1].slots)
        };
        assert_eq!(with(&[("PET_NPROC_PER_NODE", "4")]).ok(), Some(4));
        assert_eq!(with(&[("CUDA_VISIBLE_DEVICES", "0,1,2")]).ok(), Some(3));
        assert_eq!(
            with(&[
                ("PET_NPROC_PER_NODE", "auto"),
                ("CUDA_VISIBLE_DEVICES", "0,1")
            ])
            .ok(),
            Some(2)
        );
        assert_eq!(with(&[]).ok(), Some(1));
        assert_eq!(
            with(&[("PET_NPROC_PER_NODE", "0")]).map_err(|e| e.to_string()),
            Err("PET_NPROC_PER_NODE='0' is not a process count (1, 2, ..., or auto, gpu, cpu); fix it or unset it".into())
        );
    }

    #[test]
    fn indexed_job_pieces_missing_or_disagreeing_are_one_line_errors() {
        let m = pod("train-2", Some(FQDN));
        let err = |vars: &[(&str, &str)], m: &FakeMachine| topo(vars, m).unwrap_err();
        assert_eq!(
            err(&[("JOB_COMPLETION_INDEX", "2")], &m),
            "JOB_COMPLETION_INDEX=2 (a Kubernetes Indexed Job) but the node count is unknown; set MULTINODE_NNODES to the Job's completions"
        );
        assert_eq!(
            err(
                &[
                    ("JOB_COMPLETION_INDEX", "2"),
                    ("MULTINODE_NNODES", "3"),
                    ("PET_NNODES", "4")
                ],
                &m
            ),
            "MULTINODE_NNODES=3 but PET_NNODES=4; they must agree: unset one of them"
        );
        assert_eq!(
            err(
                &[("JOB_COMPLETION_INDEX", "3"), ("MULTINODE_NNODES", "3")],
                &pod("train-3", Some("train-3.t.x"))
            ),
            "JOB_COMPLETION_INDEX=3 but MULTINODE_NNODES=3, so indexes go from 0 to 2; set MULTINODE_NNODES to the Job's completions"
        );
        assert_eq!(
            err(
                &[
                    ("JOB_COMPLETION_INDEX", "2"),
                    ("MULTINODE_NNODES", "3"),
                    ("RANK", "1")
                ],
                &m
            ),
            "RANK=1 but JOB_COMPLETION_INDEX=2; they must agree: unset one of them"
        );
        assert_eq!(
            err(
                &[("JOB_COMPLETION_INDEX", "1"), ("MULTINODE_NNODES", "3")],
                &m
            ),
            "JOB_COMPLETION_INDEX=1 but this pod's host name 'train-2' does not end in '-1' as an Indexed Job's pods do (<job>-<index>); set MULTINODE_HOSTLIST"
        );
        assert_eq!(
            err(
                &[("JOB_COMPLETION_INDEX", "2"), ("MULTINODE_NNODES", "3")],
                &pod("train-2", None)
            ),
            "JOB_COMPLETION_INDEX=2 but this pod's name 'train-2' has no domain, so the other pods' names are unknown; give the pod template a subdomain naming a headless Service (docs/kubernetes.md)"
        );
        assert_eq!(
            err(
                &[("JOB_COMPLETION_INDEX", "2"), ("MULTINODE_NNODES", "3")],
                &pod("train-2", Some("train-2"))
            ),
            "JOB_COMPLETION_INDEX=2 but this pod's name 'train-2' has no domain, so the other pods' names are unknown; give the pod template a subdomain naming a headless Service (docs/kubernetes.md)"
        );
        assert_eq!(
            err(
                &[("JOB_COMPLETION_INDEX", "two"), ("MULTINODE_NNODES", "3")],
                &m
            ),
            "JOB_COMPLETION_INDEX='two' is not a completion index (0, 1, 2, ...); fix it or unset it"
        );
        assert_eq!(
            err(
                &[("JOB_COMPLETION_INDEX", "0"), ("MULTINODE_NNODES", "0")],
                &pod("train-0", Some("train-0.t"))
            ),
            "MULTINODE_NNODES='0' is not a node count (1, 2, ...); fix it or unset it"
        );
        assert!(
            err(
                &[
                    ("JOB_COMPLETION_INDEX", "0"),
                    ("MULTINODE_NNODES", "99999999")
                ],
                &m
            )
            .starts_with("MULTINODE_NNODES=99999999 nodes is more than 1000000")
        );
        // The index is the whole last label: train-12 is not index 2.
        assert!(
            err(
                &[("JOB_COMPLETION_INDEX", "2"), ("MULTINODE_NNODES", "13")],
                &pod("train-12", Some("train-12.t.x"))
            )
            .contains("does not end in '-2'")
        );
    }

    #[test]
    fn pytorch_job_is_the_master_then_the_workers() {
        let m = pod("bert-worker-0", None);
        let vars = [
            ("PET_NNODES", "3"),
            ("MASTER_ADDR", "bert-master-0"),
            ("MASTER_PORT", "23456"),
            ("WORLD_SIZE", "6"),
            ("RANK", "1"),
            ("PET_NODE_RANK", "1"),
            ("PET_NPROC_PER_NODE", "2"),
        ];
        assert_eq!(
            topo(&vars, &m),
            some(
                "PET_NNODES",
                "bert-master-0:2,bert-worker-0:2,bert-worker-1:2"
            )
        );
        // Operators before 1.7: WORLD_SIZE is the node count.
        let vars = [
            ("PET_NNODES", "2"),
            ("MASTER_ADDR", "a-master-0"),
            ("WORLD_SIZE", "2"),
        ];
        assert_eq!(
            topo(&vars, &m),
            some("PET_NNODES", "a-master-0:1,a-worker-0:1")
        );
        // A fixed range, and one node (no worker names needed).
        assert_eq!(
            topo(
                &[("PET_NNODES", "2:2"), ("PET_MASTER_ADDR", "a-master-0")],
                &m
            ),
            some("PET_NNODES", "a-master-0:1,a-worker-0:1")
        );
        assert_eq!(
            topo(&[("PET_NNODES", "1"), ("MASTER_ADDR", "10.0.0.5")], &m),
            some("PET_NNODES", "10.0.0.5:1")
        );
    }

    #[test]
    fn pytorch_job_pieces_missing_or_disagreeing_are_one_line_errors() {
        let m = pod("bert-worker-0", None);
        let err = |vars: &[(&str, &str)]| topo(vars, &m).unwrap_err();
        assert_eq!(
            err(&[("PET_NNODES", "1:4"), ("MASTER_ADDR", "a-master-0")]),
            "PET_NNODES='1:4' is an elastic range; multinode needs a fixed node count: set PET_NNODES=N or MULTINODE_HOSTLIST"
        );
        assert_eq!(
            err(&[("PET_NNODES", "2")]),
            "PET_NNODES=2 (a Kubeflow PyTorchJob) but MASTER_ADDR is not set; give the job a Master replica, or set MULTINODE_HOSTLIST"
        );
        assert_eq!(
            err(&[("PET_NNODES", "2"), ("MASTER_ADDR", "trainer")]),
            "MASTER_ADDR='trainer' is not a PyTorchJob master's name (<job>-master-0), so the workers' names are unknown; set MULTINODE_HOSTLIST"
        );
        assert_eq!(
            err(&[
                ("PET_NNODES", "2"),
                ("MASTER_ADDR", "a-master-0"),
                ("PET_MASTER_ADDR", "b-master-0")
            ]),
            "MASTER_ADDR='a-master-0' but PET_MASTER_ADDR='b-master-0'; they must agree: unset one of them"
        );
        assert_eq!(
            err(&[
                ("PET_NNODES", "2"),
                ("MASTER_ADDR", "a-master-0"),
                ("RANK", "1"),
                ("PET_NODE_RANK", "0")
            ]),
            "PET_NODE_RANK=0 but RANK=1; they must agree: unset one of them"
        );
        assert_eq!(
            err(&[
                ("PET_NNODES", "2"),
                ("MASTER_ADDR", "a-master-0"),
                ("WORLD_SIZE", "5"),
                ("PET_NPROC_PER_NODE", "2")
            ]),
            "WORLD_SIZE=5 but PET_NNODES=2 with PET_NPROC_PER_NODE=2: it must be 2 or 4; fix or unset WORLD_SIZE"
        );
        assert_eq!(
            err(&[("PET_NNODES", "x"), ("MASTER_ADDR", "a-master-0")]),
            "PET_NNODES='x' is not a node count (1, 2, ...); fix it or unset it"
        );
        assert_eq!(
            err(&[("PET_NNODES", "2"), ("MASTER_ADDR", "a b-master-0")]),
            "PET_NNODES: MASTER_ADDR 'a b-master-0' is not a usable host name (host name 'a b-master-0' contains whitespace; host names hold only letters, digits, '.', '-' and '_')"
        );
    }

    #[test]
    fn mpi_operator_hostfile_when_present() {
        let text = "mpi-launcher.mpi.default.svc slots=2\nmpi-worker-0.mpi.default.svc slots=2\n";
        let mut m = pod(
            "mpi-launcher",
            Some("mpi-launcher.mpi.default.svc.cluster.local"),
        );
        assert_eq!(topo(&[], &m), Ok(None), "no hostfile: not this shape");
        m.files.insert(MPI_OPERATOR_HOSTFILE.into(), text.into());
        assert_eq!(
            topo(&[], &m),
            some(
                "the MPI Operator's hostfile '/etc/mpi/hostfile'",
                "mpi-launcher.mpi.default.svc:2,mpi-worker-0.mpi.default.svc:2"
            )
        );
        m.files.insert("/t/h".into(), "w-0:3\nw-1:3\n".into());
        assert_eq!(
            topo(&[("MULTINODE_MPI_HOSTFILE", "/t/h")], &m),
            some("MULTINODE_MPI_HOSTFILE '/t/h'", "w-0:3,w-1:3")
        );
        assert_eq!(
            topo(&[("MULTINODE_MPI_HOSTFILE", "/t/missing")], &m),
            Err("cannot read MULTINODE_MPI_HOSTFILE '/t/missing': entity not found".into())
        );
        m.files
            .insert(MPI_OPERATOR_HOSTFILE.into(), "a slots=x\n".into());
        assert_eq!(
            topo(&[], &m),
            Err("the MPI Operator's hostfile '/etc/mpi/hostfile': line 1: slot count 'x' for 'a' is not a positive integer".into())
        );
    }
}
