//! The checks: every node's facts in, one result a check out. Pure: no I/O,
//! no clock; what the head measured itself comes in [`HeadContext`].
//!
//! Each check looks at every node that answered and records a finding per
//! node (ok, warn or fail, a detail, a fix); a [`Tally`] folds them into one
//! row: the worst status, the nodes that have it, their details grouped by
//! text, and the fix. docs/check.md describes every check and its thresholds.
//!
//! - `connectivity`: the nodes answer, run one version, resolve the contract; the
//!   head's address, the rendezvous port, host names, clocks.
//! - `limits`: `RLIMIT_MEMLOCK`.
//! - `fabric`: InfiniBand/RoCE, `NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME`.
//! - `gpu`: GPU counts, driver versions, CUDA toolkits against architectures.
//! - `launch`: Open MPI's launcher variables, `/dev/shm`, settings that must
//!   agree across nodes.
//! - `affinity`: GPU order against NUMA order, the job's CPU mask against
//!   its GPUs' NUMA nodes, OpenMP's affinity variables.

mod affinity;
mod connectivity;
mod fabric;
mod gpu;
mod launch;
mod limits;

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde::Serialize;

use super::facts::NodeFacts;
use crate::topology::nodeset::fold;

/// How a check came out; the order is the severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CheckResult {
    /// The check's name: `memlock`, `rendezvous-connect`, ...
    pub check: &'static str,
    pub status: Status,
    /// The nodes with that status, in rank order (every node checked when ok).
    pub nodes: Vec<String>,
    /// What was found, one line.
    pub detail: String,
    /// How to fix it, one line; `None` when ok.
    pub fix: Option<String>,
}

/// One node as the head got it: its place in the hostlist and its report,
/// or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeReply {
    pub rank: usize,
    pub host: String,
    pub slots: u32,
    pub facts: Result<NodeFacts, String>,
}

/// What the head knows and measured itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeadContext {
    /// The head's `multinode` version.
    pub version: String,
    /// `MULTINODE_NODE_IP`.
    pub head_ip: IpAddr,
    /// The rendezvous port.
    pub port: u16,
    /// Why the head could not listen on the port, if it could not.
    pub bind_error: Option<String>,
    /// The head's clock (UNIX ms) before asking the nodes, and after the last answer.
    pub started_ms: u64,
    pub finished_ms: u64,
    /// `--nproc-per-node`.
    pub nproc_per_node: Option<u32>,
}

/// Everything the checks look at. `nodes[i].rank == i`, for every node of the job.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckInputs {
    pub head: HeadContext,
    pub nodes: Vec<NodeReply>,
}

impl CheckInputs {
    /// The nodes that answered, with their facts.
    pub(crate) fn answered(&self) -> impl Iterator<Item = (&NodeReply, &NodeFacts)> {
        self.nodes
            .iter()
            .filter_map(|n| n.facts.as_ref().ok().map(|f| (n, f)))
    }

    /// The head's facts, if it answered.
    pub(crate) fn head_facts(&self) -> Option<&NodeFacts> {
        self.nodes.first().and_then(|n| n.facts.as_ref().ok())
    }

    /// Whether every node is this one machine (a one-node job, the loopback
    /// demo, several "nodes" sharing one network stack): then loopback
    /// addresses reach every node. Known when the hostlist holds loopback
    /// literals only, or every node answered from the same kernel
    /// (`boot_id`) and network namespace.
    pub(crate) fn one_machine(&self) -> bool {
        if self.nodes.len() <= 1 {
            return true;
        }
        if self
            .nodes
            .iter()
            .all(|n| n.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()))
        {
            return true;
        }
        let mut ids = self.nodes.iter().map(|n| {
            n.facts
                .as_ref()
                .ok()
                .and_then(|f| Some((f.machine.boot_id.clone()?, f.machine.netns.clone()?)))
        });
        let Some(Some(first)) = ids.next() else {
            return false;
        };
        ids.all(|id| id.as_ref() == Some(&first))
    }

    /// Whether any node that answered has a GPU.
    pub(crate) fn any_gpu(&self) -> bool {
        self.answered().any(|(_, f)| !f.gpus.devices.is_empty())
    }

    fn host(&self, rank: usize) -> &str {
        self.nodes.get(rank).map_or("?", |n| n.host.as_str())
    }
}

/// Runs every check, in the order of the report.
pub(crate) fn evaluate(inputs: &CheckInputs) -> Vec<CheckResult> {
    vec![
        connectivity::nodes(inputs),
        connectivity::version(inputs),
        connectivity::environment(inputs),
        connectivity::head_address(inputs),
        connectivity::rendezvous_port(inputs),
        connectivity::rendezvous_connect(inputs),
        connectivity::host_names(inputs),
        connectivity::clock(inputs),
        limits::memlock(inputs),
        fabric::infiniband(inputs),
        fabric::nccl_ib_hca(inputs),
        fabric::nccl_socket_ifname(inputs),
        fabric::gloo_socket_ifname(inputs),
        gpu::gpu_count(inputs),
        gpu::gpu_driver(inputs),
        gpu::cuda_arch(inputs),
        affinity::gpu_numa_order(inputs),
        affinity::cpu_mask(inputs),
        affinity::omp_affinity(inputs),
        launch::mpi_launcher(inputs),
        launch::dev_shm(inputs),
        launch::same_settings(inputs),
    ]
}

/// The exit status of a report: any fail (or, with `strict`, any warn) is a failure.
pub(crate) fn failed(results: &[CheckResult], strict: bool) -> bool {
    results
        .iter()
        .any(|r| r.status == Status::Fail || (strict && r.status == Status::Warn))
}

#[derive(Debug, Clone)]
struct Finding {
    rank: usize,
    status: Status,
    detail: String,
    fix: String,
}

/// The findings of one check, folded into its row by [`Tally::finish`].
struct Tally<'a> {
    inputs: &'a CheckInputs,
    check: &'static str,
    checked: BTreeSet<usize>,
    findings: Vec<Finding>,
}

impl<'a> Tally<'a> {
    fn new(inputs: &'a CheckInputs, check: &'static str) -> Self {
        Tally {
            inputs,
            check,
            checked: BTreeSet::new(),
            findings: Vec::new(),
        }
    }

    /// Node `rank` was checked and is fine.
    fn ok(&mut self, rank: usize) {
        self.checked.insert(rank);
    }

    fn warn(&mut self, rank: usize, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(rank, Status::Warn, detail.into(), fix.into());
    }

    fn fail(&mut self, rank: usize, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(rank, Status::Fail, detail.into(), fix.into());
    }

    fn add(&mut self, rank: usize, status: Status, detail: String, fix: String) {
        self.checked.insert(rank);
        self.findings.push(Finding {
            rank,
            status,
            detail,
            fix,
        });
    }

    /// The row: `ok_detail` when nothing was found, else the worst findings
    /// grouped by detail (`detail on node[01-03]; other on node07`), then
    /// the milder ones (`also warn: ...`).
    fn finish(self, ok_detail: impl Into<String>) -> CheckResult {
        let worst = self
            .findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Ok);
        if worst == Status::Ok {
            return CheckResult {
                check: self.check,
                status: Status::Ok,
                nodes: self
                    .checked
                    .iter()
                    .map(|r| self.inputs.host(*r).to_string())
                    .collect(),
                detail: ok_detail.into(),
                fix: None,
            };
        }
        let of = |status: Status| -> Vec<&Finding> {
            self.findings
                .iter()
                .filter(|f| f.status == status)
                .collect()
        };
        let worst_findings = of(worst);
        let ranks: BTreeSet<usize> = worst_findings.iter().map(|f| f.rank).collect();
        let mut detail = self.grouped(&worst_findings);
        if worst == Status::Fail {
            let milder = of(Status::Warn);
            if !milder.is_empty() {
                detail.push_str("; also warn: ");
                detail.push_str(&self.grouped(&milder));
            }
        }
        let mut fixes: Vec<&str> = Vec::new();
        for f in &worst_findings {
            if !fixes.contains(&f.fix.as_str()) {
                fixes.push(&f.fix);
            }
        }
        CheckResult {
            check: self.check,
            status: worst,
            nodes: ranks
                .iter()
                .map(|r| self.inputs.host(*r).to_string())
                .collect(),
            detail,
            fix: Some(fixes.join("; ")),
        }
    }

    /// `detail on node[01-02]; other on node03`, details in order of first appearance.
    fn grouped(&self, findings: &[&Finding]) -> String {
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for f in findings {
            match groups.iter_mut().find(|(d, _)| *d == f.detail) {
                Some((_, ranks)) => {
                    if !ranks.contains(&f.rank) {
                        ranks.push(f.rank);
                    }
                }
                None => groups.push((&f.detail, vec![f.rank])),
            }
        }
        groups
            .iter()
            .map(|(detail, ranks)| {
                let hosts: Vec<&str> = ranks.iter().map(|r| self.inputs.host(*r)).collect();
                format!("{detail} on {}", fold(&hosts))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// `8 MiB`, `64 KiB`, `1.5 GiB`, `100 B`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if n >= size {
            return if n.is_multiple_of(size) {
                format!("{} {unit}", n / size)
            } else {
                format!("{:.1} {unit}", n as f64 / size as f64)
            };
        }
    }
    format!("{n} B")
}

/// `a, b, c`, or `none`.
fn list_or_none<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items
            .iter()
            .map(|s| s.as_ref())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::fixtures::{self, cluster, facts as facts_of};
    use super::*;

    #[test]
    fn a_healthy_cluster_is_all_ok() {
        let inputs = cluster(4);
        let results = evaluate(&inputs);
        let names: Vec<&str> = results.iter().map(|r| r.check).collect();
        assert_eq!(
            names,
            [
                "nodes",
                "version",
                "environment",
                "head-address",
                "rendezvous-port",
                "rendezvous-connect",
                "host-names",
                "clock",
                "memlock",
                "infiniband",
                "nccl-ib-hca",
                "nccl-socket-ifname",
                "gloo-socket-ifname",
                "gpu-count",
                "gpu-driver",
                "cuda-arch",
                "gpu-numa-order",
                "cpu-mask",
                "omp-affinity",
                "mpi-launcher",
                "dev-shm",
                "same-settings",
            ]
        );
        for r in &results {
            assert_eq!(r.status, Status::Ok, "{r:?}");
            assert_eq!(r.fix, None);
        }
        assert!(!failed(&results, true));
    }

    #[test]
    fn tally_groups_details_and_keeps_milder_findings() {
        let inputs = cluster(5);
        let mut t = Tally::new(&inputs, "x");
        t.ok(0);
        t.fail(1, "too small", "raise it");
        t.fail(2, "too small", "raise it");
        t.fail(4, "missing", "install it");
        t.warn(3, "a bit small", "consider it");
        let r = t.finish("unused");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03", "gpu05"]);
        assert_eq!(
            r.detail,
            "too small on gpu[02-03]; missing on gpu05; also warn: a bit small on gpu04"
        );
        assert_eq!(r.fix.as_deref(), Some("raise it; install it"));
    }

    #[test]
    fn tally_ok_lists_every_node_checked() {
        let inputs = cluster(3);
        let mut t = Tally::new(&inputs, "x");
        t.ok(2);
        t.ok(0);
        let r = t.finish("fine");
        assert_eq!(
            (r.status, r.nodes, r.detail.as_str(), r.fix),
            (
                Status::Ok,
                vec!["gpu01".into(), "gpu03".into()],
                "fine",
                None
            )
        );
    }

    #[test]
    fn strict_turns_warnings_into_failures() {
        let warn = CheckResult {
            check: "x",
            status: Status::Warn,
            nodes: vec![],
            detail: String::new(),
            fix: None,
        };
        assert!(!failed(std::slice::from_ref(&warn), false));
        assert!(failed(std::slice::from_ref(&warn), true));
        let fail = CheckResult {
            status: Status::Fail,
            ..warn
        };
        assert!(failed(&[fail], false));
        assert!(!failed(&[], true));
    }

    #[test]
    fn one_machine_is_known_from_literals_or_identity() {
        let mut inputs = cluster(2);
        assert!(!inputs.one_machine(), "distinct boot ids");
        for n in &mut inputs.nodes {
            let f = n.facts.as_mut().expect("facts");
            f.machine.boot_id = Some("same".into());
            f.machine.netns = Some("net:[1]".into());
        }
        assert!(inputs.one_machine());
        inputs.nodes[1].facts.as_mut().expect("facts").machine.netns = Some("net:[2]".into());
        assert!(
            !inputs.one_machine(),
            "containers on one host: separate loopbacks"
        );
        inputs.nodes[0].host = "127.0.0.2".into();
        inputs.nodes[1].host = "127.0.0.3".into();
        assert!(inputs.one_machine());
        inputs.nodes.truncate(1);
        assert!(inputs.one_machine());
    }

    #[test]
    fn two_hundred_fifty_six_nodes_evaluate_at_once() {
        let mut inputs = cluster(256);
        facts_of(&mut inputs, 200).names.insert(
            "gpu07".into(),
            crate::check::facts::Resolution {
                addrs: vec![fixtures::ip("127.0.1.1")],
                error: None,
            },
        );
        let start = std::time::Instant::now();
        let results = evaluate(&inputs);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        let bad: Vec<&CheckResult> = results.iter().filter(|r| r.status != Status::Ok).collect();
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].check, "host-names");
        assert_eq!(bad[0].nodes, ["gpu201"]);
        assert_eq!(bad[0].detail, "gpu07 → 127.0.1.1 on gpu201");
        let nodes = results.iter().find(|r| r.check == "nodes").expect("nodes");
        assert_eq!(nodes.nodes.len(), 256);
        assert_eq!(
            crate::topology::nodeset::fold(&nodes.nodes),
            "gpu[01-99],gpu[100-256]"
        );
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(bytes(64 << 10), "64 KiB");
        assert_eq!(bytes(8 << 20), "8 MiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(bytes(100), "100 B");
        assert_eq!(bytes(1 << 40), "1 TiB");
    }
}
