//! A healthy cluster of HGX H200 nodes, for the checks' tests to break one
//! fact at a time.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{CheckInputs, HeadContext, NodeReply};
use crate::check::facts::*;
use crate::nvidia_smi::{parse_header, parse_query};

pub(crate) const H200_QUERY: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h200-8gpu/query.csv");
pub(crate) const H200_SMI: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h200-8gpu/nvidia-smi.txt");
pub(crate) const H200_570_QUERY: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h200-570/query.csv");
pub(crate) const H200_570_SMI: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h200-570/nvidia-smi.txt");
pub(crate) const H200_4_QUERY: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h200-4gpu-575/query.csv");
pub(crate) const H200_4_SMI: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h200-4gpu-575/nvidia-smi.txt");

pub(crate) const T0: u64 = 1_764_513_000_000;

pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

/// What `nvidia-smi` says on a node, from a fixture.
pub(crate) fn gpus_from(query: &str, header: &str) -> Gpus {
    let (driver_version, cuda_version) = parse_header(header);
    Gpus {
        smi: SmiStatus::Ok,
        error: None,
        driver_version,
        cuda_version,
        devices: parse_query(query).expect("fixture parses"),
    }
}

/// The 8 GPUs of the fixture's bus ids on two sockets of 56 cores with SMT
/// (GPUs 0-3 on node 0), every CPU the job's.
pub(crate) fn hgx_affinity() -> Affinity {
    let buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"];
    Affinity {
        allowed_cpus: Some("0-223".into()),
        numa_nodes: 2,
        gpus: (0..8)
            .map(|i| GpuNuma {
                index: i,
                bus_id: format!("0000:{}:00.0", buses[i as usize]),
                numa_node: Some(i / 4),
                node_cpus: Some(["0-55,112-167", "56-111,168-223"][(i / 4) as usize].into()),
            })
            .collect(),
        env: BTreeMap::new(),
    }
}

pub(crate) fn host(rank: usize) -> String {
    format!("gpu{:02}", rank + 1)
}

pub(crate) fn node_ip(rank: usize) -> IpAddr {
    ip(&format!("10.0.{}.{}", rank / 250, rank % 250 + 1))
}

/// Node `rank` of `n`: 8 H200s (driver 580.159.04, CUDA 13.0), two active
/// ConnectX ports, memlock unlimited, CUDA 13.0 and PyTorch for CUDA 12.8,
/// every name resolving to its 10.0.0.x address.
pub(crate) fn healthy_facts(rank: usize, n: usize) -> NodeFacts {
    let names = (0..n)
        .map(|r| {
            (
                host(r),
                Resolution {
                    addrs: vec![node_ip(r)],
                    error: None,
                },
            )
        })
        .collect();
    NodeFacts {
        schema: SCHEMA,
        version: env!("CARGO_PKG_VERSION").to_string(),
        hostname: host(rank),
        time_ms: T0 + 300,
        machine: MachineIdentity {
            boot_id: Some(format!("boot-{rank}")),
            netns: Some("net:[4026531840]".into()),
        },
        job: JobFacts {
            rank: Some(rank),
            head_ip: Some(node_ip(0)),
            error: None,
        },
        rendezvous: Some(Rendezvous {
            addr: "10.0.0.1:29500".into(),
            connected: true,
            error: None,
            elapsed_ms: 1,
            clock: Some(ClockSample {
                sent_ms: T0 + 100,
                head_ms: T0 + 101,
                received_ms: T0 + 102,
            }),
        }),
        names,
        memlock: Memlock {
            soft: Some(Limit::Unlimited),
            hard: Some(Limit::Unlimited),
            error: None,
        },
        fabric: Fabric {
            dev_infiniband: Some(vec!["rdma_cm".into(), "uverbs0".into(), "uverbs1".into()]),
            ib_devices: ["mlx5_0", "mlx5_1"]
                .iter()
                .map(|d| IbDevice {
                    name: d.to_string(),
                    ports: vec![IbPort {
                        port: 1,
                        state: "ACTIVE".into(),
                        link_layer: "InfiniBand".into(),
                    }],
                })
                .collect(),
            interfaces: vec![
                NetInterface {
                    name: "lo".into(),
                    up: true,
                    addrs: vec![ip("127.0.0.1"), ip("::1")],
                },
                NetInterface {
                    name: "eth0".into(),
                    up: true,
                    addrs: vec![node_ip(rank)],
                },
                NetInterface {
                    name: "ib0".into(),
                    up: true,
                    addrs: vec![ip(&format!("192.168.{}.{}", rank / 250, rank % 250 + 1))],
                },
                NetInterface {
                    name: "docker0".into(),
                    up: false,
                    addrs: vec![ip("172.17.0.1")],
                },
            ],
            env: BTreeMap::new(),
        },
        gpus: gpus_from(H200_QUERY, H200_SMI),
        cuda_toolkits: vec![
            Toolkit {
                source: "nvcc".into(),
                path: "/usr/local/cuda/bin/nvcc".into(),
                version: "13.0".into(),
            },
            Toolkit {
                source: "torch".into(),
                path: "/opt/torch/.venv/lib/python3.12/site-packages/torch/version.py".into(),
                version: "12.8".into(),
            },
        ],
        settings: Settings {
            env: BTreeMap::new(),
            ssh_wrapper: Some("/usr/local/bin/mn-ssh".into()),
            versions: BTreeMap::from([
                ("torch".to_string(), "2.8.0+cu128".to_string()),
                ("nccl".to_string(), "2.27.3".to_string()),
            ]),
            dev_shm: Some(DevShm {
                mounted: true,
                size: None,
            }),
        },
        affinity: hgx_affinity(),
        gpu_health: None,
        gpu_speed: None,
    }
}

/// `n` healthy nodes gpu01.., 8 slots each, head 10.0.0.1, port 29500.
pub(crate) fn cluster(n: usize) -> CheckInputs {
    CheckInputs {
        head: HeadContext {
            version: env!("CARGO_PKG_VERSION").to_string(),
            head_ip: node_ip(0),
            port: 29500,
            bind_error: None,
            started_ms: T0,
            finished_ms: T0 + 800,
            nproc_per_node: None,
            gpu: false,
        },
        nodes: (0..n)
            .map(|rank| NodeReply {
                rank,
                host: host(rank),
                slots: 8,
                facts: Ok(healthy_facts(rank, n)),
            })
            .collect(),
    }
}

/// The facts of node `rank`, to break.
pub(crate) fn facts(inputs: &mut CheckInputs, rank: usize) -> &mut NodeFacts {
    inputs.nodes[rank].facts.as_mut().expect("node has facts")
}

/// The row of `check`.
pub(crate) fn row(inputs: &CheckInputs, check: &str) -> super::CheckResult {
    super::evaluate(inputs)
        .into_iter()
        .find(|r| r.check == check)
        .unwrap_or_else(|| panic!("no check {check}"))
}

pub(crate) const H100_QUERY: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/query.csv");
pub(crate) const H100_VERSION: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/version.txt");
/// The health query as captured on an H100, and its variants.
pub(crate) const H100_HEALTH: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/health.csv");
pub(crate) const H100_ECC: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/health-ecc.csv");
pub(crate) const H100_HW_SLOWDOWN: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/health-hw-slowdown.csv");
pub(crate) const H100_PCIE: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/health-pcie.csv");
pub(crate) const H100_REMAP_PENDING: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/health-remap-pending.csv");
pub(crate) const H100_DMESG_XID: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/dmesg-xid.txt");
pub(crate) const H100_NVLINK_INACTIVE: &str =
    include_str!("../../../tests/fixtures/nvidia-smi/h100-health/nvlink-inactive.txt");

/// A node's GPU health from a health query's CSV, its kernel log readable
/// with no Xid, no NVLink.
pub(crate) fn health_from(csv: &str) -> GpuHealthFacts {
    GpuHealthFacts {
        smi: SmiStatus::Ok,
        devices: crate::nvidia_smi::parse_health(csv).expect("fixture parses"),
        nvlink_smi: SmiStatus::Ok,
        ..GpuHealthFacts::default()
    }
}

/// `n` nodes of one H100 each (1 slot), checked with `--gpu`, all healthy
/// as the captured H100.
pub(crate) fn h100_cluster(n: usize) -> CheckInputs {
    let mut inputs = cluster(n);
    inputs.head.gpu = true;
    for node in &mut inputs.nodes {
        node.slots = 1;
        let f = node.facts.as_mut().expect("facts");
        f.gpus = gpus_from(H100_QUERY, H100_VERSION);
        f.gpu_health = Some(health_from(H100_HEALTH));
    }
    inputs
}
