//! The checks: every node's facts in, one result a check out. Pure: no I/O,
//! no clock; what the head measured itself comes in [`HeadContext`].
//!
//! Each check looks at every node that answered and records a finding per
//! node (ok, warn or fail, a detail, a fix); a [`Tally`] folds them into one
//! row: the worst status, the nodes that have it, their details grouped by
//! text, and the fix. docs/check.md describes every check and its thresholds.
//!
//! - `check_inputs`: what the checks look at: every node's facts, the head's context.
//! - `tally`: a check's findings folded into its row; sizes and lists for details.
//! - `evaluate`: every check, in the order of the report; the exit status.
//! - `connectivity`: the nodes answer, run one version, resolve the contract; the
//!   head's address, the rendezvous port, host names, clocks.
//! - `limits`: `RLIMIT_MEMLOCK`.
//! - `fabric`: InfiniBand/RoCE, `NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME`.
//! - `gpu`: GPU counts, driver versions, CUDA toolkits against architectures.
//! - `gpu_state`: `--gpu`: the health query answered, ECC errors, retired
//!   pages and remapped rows, persistence mode, PCIe links, clocks and their
//!   throttle reasons, Xid errors, NVLinks.
//! - `speed`: `--gpu`: each GPU's matmul and copy speed against its model's
//!   floor and the job's median.
//! - `launch`: Open MPI's launcher variables, `/dev/shm`, settings that must
//!   agree across nodes.
//! - `affinity`: GPU order against NUMA order, the job's CPU mask against
//!   its GPUs' NUMA nodes, OpenMP's affinity variables.

mod affinity;
mod check_inputs;
mod connectivity;
mod evaluate;
mod fabric;
mod gpu;
mod gpu_state;
mod launch;
mod limits;
mod speed;
mod tally;

pub(crate) use check_inputs::{CheckInputs, HeadContext, NodeReply};
pub(crate) use evaluate::{evaluate, failed};
pub(crate) use tally::{CheckResult, Status};

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::fixtures::{self, cluster, facts as facts_of};
    use super::tally::{Tally, bytes};
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
