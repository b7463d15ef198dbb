//! `memlock`: `RLIMIT_MEMLOCK`, the locked-memory limit that RDMA needs to
//! pin NCCL's buffers (`ibv_reg_mr`).
//!
//! Thresholds (soft limit, the one that applies):
//! - unlimited: ok;
//! - at least [`MEMLOCK_MIN`]: ok, but a warning on a node with an active
//!   InfiniBand/RoCE port (NCCL's buffers grow with channels and peers;
//!   NVIDIA and Mellanox ask for unlimited);
//! - below [`MEMLOCK_MIN`]: fail on a node with GPUs or an active RDMA port,
//!   a warning on a CPU-only node without one (nothing pins memory there
//!   yet, but Docker's default of 64 KiB or 8 MiB bites the day it does).

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Tally, bytes};
use crate::check::facts::{Limit, NodeFacts};
use crate::topology::nccl::sockets_forced;

/// Below this, NCCL over RDMA fails to register its buffers (64 MiB).
pub(crate) const MEMLOCK_MIN: u64 = 64 << 20;

/// Whether NCCL on this node would use an RDMA device: an active port, the
/// device files, and sockets not forced.
pub(crate) fn uses_rdma(f: &NodeFacts) -> bool {
    let active = f
        .fabric
        .ib_devices
        .iter()
        .any(|d| d.ports.iter().any(|p| p.active()));
    let dev_files = f
        .fabric
        .dev_infiniband
        .as_ref()
        .is_some_and(|entries| entries.iter().any(|e| e.starts_with("uverbs")));
    active && dev_files && sockets_forced(|k| f.fabric.env.get(k).cloned()).is_none()
}

fn show(limit: Limit) -> String {
    match limit {
        Limit::Unlimited => "unlimited".to_string(),
        Limit::Bytes(n) => bytes(n),
    }
}

pub(crate) fn memlock(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "memlock");
    let mut all_unlimited = true;
    for (n, f) in inputs.answered() {
        let (Some(soft), hard) = (f.memlock.soft, f.memlock.hard) else {
            let why = f.memlock.error.as_deref().unwrap_or("not reported");
            t.warn(
                n.rank,
                format!("RLIMIT_MEMLOCK unknown: {why}"),
                "check `ulimit -l` on the node",
            );
            continue;
        };
        let Limit::Bytes(soft_bytes) = soft else {
            t.ok(n.rank);
            continue;
        };
        all_unlimited = false;
        let rdma = uses_rdma(f);
        let gpus = !f.gpus.devices.is_empty();
        let hard_text = hard.map_or_else(|| "unknown".to_string(), show);
        let detail = format!("RLIMIT_MEMLOCK {} (hard {hard_text})", bytes(soft_bytes));
        let can_raise = match hard {
            Some(Limit::Unlimited) => true,
            Some(Limit::Bytes(h)) => h > soft_bytes && h >= MEMLOCK_MIN,
            None => false,
        };
        let fix = if can_raise {
            format!(
                "`ulimit -l {}` in the job script, before torchrun or mpirun (the hard limit allows it)",
                match hard {
                    Some(Limit::Bytes(h)) => (h >> 10).to_string(),
                    _ => "unlimited".to_string(),
                }
            )
        } else {
            "raise the hard limit where the job starts: `docker run --ulimit memlock=-1:-1`, `* - memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity for slurmd, or the platform's setting".to_string()
        };
        if soft_bytes < MEMLOCK_MIN {
            let why = if rdma {
                ": too low for NCCL's RDMA buffers"
            } else if gpus {
                ": too low for NCCL once RDMA is used"
            } else {
                ""
            };
            if rdma || gpus {
                t.fail(n.rank, format!("{detail}{why}"), fix);
            } else {
                t.warn(n.rank, detail, fix);
            }
        } else if rdma {
            t.warn(n.rank, format!("{detail}: RDMA asks for unlimited"), fix);
        } else {
            t.ok(n.rank);
        }
    }
    t.finish(if all_unlimited {
        "unlimited on every node".to_string()
    } else {
        format!("at least {} on every node", bytes(MEMLOCK_MIN))
    })
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::fixtures::*;
    use super::*;

    fn set(inputs: &mut CheckInputs, rank: usize, soft: Limit, hard: Limit) {
        let m = &mut facts(inputs, rank).memlock;
        m.soft = Some(soft);
        m.hard = Some(hard);
    }

    #[test]
    fn low_limits_fail_on_gpu_and_rdma_nodes() {
        let mut inputs = cluster(4);
        set(
            &mut inputs,
            1,
            Limit::Bytes(64 << 10),
            Limit::Bytes(64 << 10),
        );
        set(&mut inputs, 2, Limit::Bytes(8 << 20), Limit::Unlimited);
        let r = row(&inputs, "memlock");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03"]);
        assert_eq!(
            r.detail,
            "RLIMIT_MEMLOCK 64 KiB (hard 64 KiB): too low for NCCL's RDMA buffers on gpu02; RLIMIT_MEMLOCK 8 MiB (hard unlimited): too low for NCCL's RDMA buffers on gpu03"
        );
        let fix = r.fix.expect("fix");
        assert!(fix.contains("docker run --ulimit memlock=-1:-1"), "{fix}");
        assert!(
            fix.contains("`ulimit -l unlimited` in the job script"),
            "{fix}"
        );
    }

    #[test]
    fn a_finite_but_large_limit_warns_only_with_rdma() {
        let mut inputs = cluster(2);
        set(&mut inputs, 1, Limit::Bytes(1 << 30), Limit::Bytes(2 << 30));
        let r = row(&inputs, "memlock");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "RLIMIT_MEMLOCK 1 GiB (hard 2 GiB): RDMA asks for unlimited on gpu02"
        );
        assert_eq!(
            r.fix.as_deref(),
            Some(
                "`ulimit -l 2097152` in the job script, before torchrun or mpirun (the hard limit allows it)"
            )
        );
        // Without an RDMA device (or with sockets forced) 1 GiB is plenty.
        facts(&mut inputs, 1)
            .fabric
            .env
            .insert("NCCL_IB_DISABLE".into(), "1".into());
        let r = row(&inputs, "memlock");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (Status::Ok, "at least 64 MiB on every node")
        );
    }

    #[test]
    fn gpu_nodes_without_rdma_still_need_64_mib() {
        let mut inputs = cluster(1);
        facts(&mut inputs, 0).fabric.ib_devices.clear();
        set(&mut inputs, 0, Limit::Bytes(8 << 20), Limit::Bytes(8 << 20));
        let r = row(&inputs, "memlock");
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.detail
                .ends_with("too low for NCCL once RDMA is used on gpu01"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn cpu_nodes_without_rdma_only_warn() {
        let mut inputs = cluster(1);
        let f = facts(&mut inputs, 0);
        f.fabric.ib_devices.clear();
        f.gpus.devices.clear();
        set(&mut inputs, 0, Limit::Bytes(8 << 20), Limit::Bytes(8 << 20));
        let r = row(&inputs, "memlock");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.detail, "RLIMIT_MEMLOCK 8 MiB (hard 8 MiB) on gpu01");
    }

    #[test]
    fn unknown_limits_warn() {
        let mut inputs = cluster(1);
        let m = &mut facts(&mut inputs, 0).memlock;
        m.soft = None;
        m.error = Some("getrlimit: EPERM".into());
        let r = row(&inputs, "memlock");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(
            r.detail,
            "RLIMIT_MEMLOCK unknown: getrlimit: EPERM on gpu01"
        );
        assert_eq!(
            row(&cluster(2), "memlock").detail,
            "unlimited on every node"
        );
    }

    #[test]
    fn rdma_needs_an_active_port_and_the_device_files() {
        let inputs = cluster(1);
        let mut f = inputs.nodes[0].facts.clone().expect("facts");
        assert!(uses_rdma(&f));
        f.fabric.dev_infiniband = Some(vec!["rdma_cm".into()]);
        assert!(
            !uses_rdma(&f),
            "no uverbs: the container cannot open the device"
        );
        let mut f = inputs.nodes[0].facts.clone().expect("facts");
        for d in &mut f.fabric.ib_devices {
            d.ports[0].state = "DOWN".into();
        }
        assert!(!uses_rdma(&f));
    }
}
