//! What breaks a launch, or a job, before NCCL says a word:
//!
//! - `mpi-launcher`: `OMPI_MCA_plm=isolated` (set by some GPU images) makes
//!   Open MPI's mpirun ignore `plm_rsh_agent` and start every rank on the
//!   head ("All nodes which are allocated for this job are already filled"):
//!   a failure. An `OMPI_MCA_plm_rsh_agent` other than `MULTINODE_SSH_WRAPPER`
//!   makes mpirun start its daemons through that instead: a warning.
//! - `dev-shm`: NCCL's shared-memory transport and PyTorch's DataLoader
//!   workers live in `/dev/shm`; Docker gives a container 64 MiB, which NCCL
//!   outgrows ("failed to extend /dev/shm", NCCL issue #290). Below
//!   [`DEV_SHM_MIN`], or missing: a warning.
//! - `same-settings`: what must agree across nodes: every `NCCL_*` variable,
//!   the interfaces `NCCL_SOCKET_IFNAME` selects, and PyTorch's, its CUDA's
//!   and NCCL's versions (the drivers are `gpu-driver`'s). The head's value
//!   is the reference; each node that differs is named, with both values.

use std::collections::{BTreeMap, BTreeSet};

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Tally, bytes};
use crate::check::facts::NodeFacts;
use crate::topology::nccl::NcclList;

/// `/dev/shm` below this is warned about (1 GiB, what NVIDIA's container
/// guides give with `--shm-size`).
pub(crate) const DEV_SHM_MIN: u64 = 1 << 30;

/// `mpi-launcher`.
pub(crate) fn mpi_launcher(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "mpi-launcher");
    for (n, f) in inputs.answered() {
        let env = &f.settings.env;
        if let Some(plm) = env.get("OMPI_MCA_plm")
            && plm.trim() == "isolated"
        {
            t.fail(
                n.rank,
                "OMPI_MCA_plm=isolated: Open MPI's mpirun ignores plm_rsh_agent and starts every rank here (\"All nodes which are allocated for this job are already filled\")",
                "unset OMPI_MCA_plm (the image sets it), or pass mpirun --mca plm rsh",
            );
            continue;
        }
        match (env.get("OMPI_MCA_plm_rsh_agent"), &f.settings.ssh_wrapper) {
            (Some(agent), Some(wrapper)) if !same_program(agent, wrapper) => t.warn(
                n.rank,
                format!(
                    "OMPI_MCA_plm_rsh_agent={agent}, not MULTINODE_SSH_WRAPPER ({wrapper}): mpirun starts its daemons through {agent}"
                ),
                "unset OMPI_MCA_plm_rsh_agent, or set it to $MULTINODE_SSH_WRAPPER",
            ),
            _ => t.ok(n.rank),
        }
    }
    t.finish("mpirun will use plm_rsh_agent as given")
}

/// The same program: the same text, or the same file name when one of them
/// is a bare name (`mn-ssh` for `/usr/local/bin/mn-ssh`).
fn same_program(a: &str, b: &str) -> bool {
    let a = a.trim();
    let name = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    a == b || ((!a.contains('/') || !b.contains('/')) && name(a) == name(b))
}

/// `dev-shm`.
pub(crate) fn dev_shm(inputs: &CheckInputs) -> CheckResult {
    const FIX: &str = "give the container a larger /dev/shm: docker run --shm-size=1g (or --ipc=host); on Kubernetes, an emptyDir with medium: Memory mounted at /dev/shm";
    let mut t = Tally::new(inputs, "dev-shm");
    for (n, f) in inputs.answered() {
        match f.settings.dev_shm {
            Some(shm) if !shm.mounted => t.warn(
                n.rank,
                "no /dev/shm: NCCL's shared-memory transport cannot start",
                FIX,
            ),
            Some(shm) => match shm.size {
                Some(size) if size < DEV_SHM_MIN => t.warn(
                    n.rank,
                    format!(
                        "/dev/shm is {}, NCCL needs more for several GPUs (\"failed to extend /dev/shm\")",
                        bytes(size)
                    ),
                    FIX,
                ),
                _ => t.ok(n.rank),
            },
            None => t.ok(n.rank),
        }
    }
    t.finish(format!(
        "/dev/shm of {} or more (or unsized)",
        bytes(DEV_SHM_MIN)
    ))
}

/// The settings of one node that must agree: name → value, `None` = unset.
fn settings(f: &NodeFacts) -> BTreeMap<String, Option<String>> {
    let mut out: BTreeMap<String, Option<String>> = f
        .settings
        .env
        .iter()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect();
    for (name, v) in &f.settings.versions {
        let label = match name.as_str() {
            "torch" => "PyTorch",
            "nccl" => "NCCL",
            other => other,
        };
        out.insert(format!("{label} version"), Some(v.clone()));
    }
    if let Some(t) = f.cuda_toolkits.iter().find(|t| t.source == "torch") {
        out.insert("PyTorch's CUDA".into(), Some(t.version.clone()));
    }
    if let Some(spec) = f.fabric.env.get("NCCL_SOCKET_IFNAME")
        && let Ok(list) = NcclList::parse(spec)
    {
        let names: Vec<&str> = f
            .fabric
            .interfaces
            .iter()
            .filter(|i| list.selects(&i.name, None) && !i.addrs.is_empty())
            .map(|i| i.name.as_str())
            .collect();
        out.insert(
            "the interfaces NCCL_SOCKET_IFNAME selects".into(),
            Some(names.join(",")),
        );
    }
    out
}

/// `same-settings`.
pub(crate) fn same_settings(inputs: &CheckInputs) -> CheckResult {
    const FIX: &str = "make them the same on every node: one image, and the same variables (exec_all --export ALL passes the head's)";
    let mut t = Tally::new(inputs, "same-settings");
    let all: Vec<(usize, BTreeMap<String, Option<String>>)> = inputs
        .answered()
        .map(|(n, f)| (n.rank, settings(f)))
        .collect();
    let names: BTreeSet<&String> = all.iter().flat_map(|(_, s)| s.keys()).collect();
    // The head's values, else (the head did not answer) the most common one.
    let reference = |name: &String| -> (Option<String>, &'static str) {
        if let Some((0, s)) = all.first() {
            return (s.get(name).cloned().flatten(), "the head");
        }
        let mut counts: BTreeMap<Option<String>, usize> = BTreeMap::new();
        for (_, s) in &all {
            *counts.entry(s.get(name).cloned().flatten()).or_default() += 1;
        }
        let most = counts.into_iter().max_by_key(|(_, c)| *c).map(|(v, _)| v);
        (most.flatten(), "most nodes")
    };
    let show = |v: &Option<String>| match v {
        Some(v) => v.clone(),
        None => "unset".to_string(),
    };
    let references: Vec<(&String, Option<String>, &'static str)> = names
        .iter()
        .map(|name| {
            let (v, whose) = reference(name);
            (*name, v, whose)
        })
        .collect();
    for (rank, s) in &all {
        let mut differs = Vec::new();
        for (name, want, whose) in &references {
            let got = s.get(*name).cloned().flatten();
            if got != *want {
                differs.push(format!("{name} {} ({whose}: {})", show(&got), show(want)));
            }
        }
        if differs.is_empty() {
            t.ok(*rank);
        } else {
            t.warn(*rank, differs.join(", "), FIX);
        }
    }
    let compared: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
    t.finish(if compared.is_empty() {
        "nothing to compare (no NCCL_* variable, no PyTorch found)".to_string()
    } else {
        format!("the same on every node: {}", compared.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::fixtures::{cluster, facts, row};
    use crate::check::facts::DevShm;

    #[test]
    fn healthy_nodes_pass() {
        let inputs = cluster(3);
        for check in ["mpi-launcher", "dev-shm", "same-settings"] {
            let r = row(&inputs, check);
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
        assert_eq!(
            row(&inputs, "same-settings").detail,
            "the same on every node: NCCL version, PyTorch version, PyTorch's CUDA"
        );
    }

    #[test]
    fn plm_isolated_fails_and_another_rsh_agent_warns() {
        let mut inputs = cluster(3);
        facts(&mut inputs, 0)
            .settings
            .env
            .insert("OMPI_MCA_plm".into(), "isolated".into());
        let r = row(&inputs, "mpi-launcher");
        assert_eq!(
            (r.status, r.nodes.clone()),
            (Status::Fail, vec!["gpu01".to_string()])
        );
        assert!(
            r.detail
                .starts_with("OMPI_MCA_plm=isolated: Open MPI's mpirun ignores plm_rsh_agent"),
            "{r:?}"
        );
        assert_eq!(
            r.fix.as_deref(),
            Some("unset OMPI_MCA_plm (the image sets it), or pass mpirun --mca plm rsh")
        );

        let mut inputs = cluster(3);
        for rank in 1..3 {
            facts(&mut inputs, rank)
                .settings
                .env
                .insert("OMPI_MCA_plm_rsh_agent".into(), "ssh".into());
        }
        // The wrapper by its bare name is the wrapper.
        facts(&mut inputs, 0)
            .settings
            .env
            .insert("OMPI_MCA_plm_rsh_agent".into(), "mn-ssh".into());
        let r = row(&inputs, "mpi-launcher");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "OMPI_MCA_plm_rsh_agent=ssh, not MULTINODE_SSH_WRAPPER (/usr/local/bin/mn-ssh): mpirun starts its daemons through ssh on gpu[02-03]"
        );
    }

    #[test]
    fn a_small_or_missing_dev_shm_warns_with_its_size() {
        let mut inputs = cluster(3);
        facts(&mut inputs, 1).settings.dev_shm = Some(DevShm {
            mounted: true,
            size: Some(64 << 20),
        });
        facts(&mut inputs, 2).settings.dev_shm = Some(DevShm {
            mounted: false,
            size: None,
        });
        let r = row(&inputs, "dev-shm");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "/dev/shm is 64 MiB, NCCL needs more for several GPUs (\"failed to extend /dev/shm\") on gpu02; no /dev/shm: NCCL's shared-memory transport cannot start on gpu03"
        );
        assert!(
            r.fix
                .as_deref()
                .is_some_and(|f| f.contains("--shm-size=1g (or --ipc=host)"))
        );
    }

    #[test]
    fn settings_that_differ_name_the_nodes_and_both_values() {
        let mut inputs = cluster(4);
        for rank in [2, 3] {
            facts(&mut inputs, rank)
                .settings
                .env
                .insert("NCCL_IB_DISABLE".into(), "1".into());
        }
        facts(&mut inputs, 3)
            .settings
            .versions
            .insert("torch".into(), "2.7.1+cu126".into());
        facts(&mut inputs, 1).cuda_toolkits[1].version = "12.6".into();
        let r = row(&inputs, "same-settings");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu02", "gpu03", "gpu04"]);
        assert_eq!(
            r.detail,
            "PyTorch's CUDA 12.6 (the head: 12.8) on gpu02; \
             NCCL_IB_DISABLE 1 (the head: unset) on gpu03; \
             NCCL_IB_DISABLE 1 (the head: unset), PyTorch version 2.7.1+cu126 (the head: 2.8.0+cu128) on gpu04"
        );
    }

    #[test]
    fn socket_ifname_selecting_other_interfaces_is_named() {
        let mut inputs = cluster(2);
        for rank in 0..2 {
            facts(&mut inputs, rank)
                .fabric
                .env
                .insert("NCCL_SOCKET_IFNAME".into(), "eth".into());
            facts(&mut inputs, rank)
                .settings
                .env
                .insert("NCCL_SOCKET_IFNAME".into(), "eth".into());
        }
        facts(&mut inputs, 1).fabric.interfaces[1].name = "eth1".into();
        let r = row(&inputs, "same-settings");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "the interfaces NCCL_SOCKET_IFNAME selects eth1 (the head: eth0) on gpu02"
        );
    }
}
