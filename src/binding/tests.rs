//! The mapping against machines made as sysfs trees in a temporary folder,
//! each modelled on a real host's published `nvidia-smi topo -m`
//! (docs/binding.md names the sources), read by the real sysfs reader.

use std::path::Path;

use super::launcher_ranks::Ranks;
use super::rules::{Allowed, plan};
use super::sysfs::{Host, read_host, sysfs_bus_id};
use super::visible::visible;
use super::*;
use crate::env_map::EnvMap;
use crate::nvidia_smi::PciGpu;
use crate::process::RunOutput;
use crate::vars;

/// A machine as a sysfs tree, and the GPUs its `nvidia-smi` lists.
struct Machine {
    dir: tempfile::TempDir,
    gpus: Vec<PciGpu>,
}

/// `nodes`: each NUMA node's CPU list; `gpus`: each GPU's bus id (as
/// nvidia-smi writes it) and `numa_node` (-1: none); `smt`: CPU c and
/// c + smt are siblings (hyperthreads), as Linux numbers them on x86.
fn machine(nodes: &[&str], gpus: &[(&str, i32)], smt: Option<u32>) -> Machine {
    let dir = tempfile::tempdir().expect("tempdir");
    let put = |rel: String, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, format!("{text}\n")).expect("write");
    };
    let all: CpuSet = nodes
        .iter()
        .flat_map(|n| CpuSet::parse(n).expect("a list").iter().collect::<Vec<_>>())
        .collect();
    put(
        "devices/system/node/has_cpu".into(),
        &format!("0-{}", nodes.len() - 1),
    );
    put(
        "devices/system/node/online".into(),
        &format!("0-{}", nodes.len() - 1),
    );
    for (n, cpus) in nodes.iter().enumerate() {
        put(format!("devices/system/node/node{n}/cpulist"), cpus);
    }
    for cpu in all.iter() {
        let siblings = match smt {
            Some(k) if cpu >= k => format!("{},{cpu}", cpu - k),
            Some(k) => format!("{cpu},{}", cpu + k),
            None => cpu.to_string(),
        };
        put(
            format!("devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"),
            &siblings,
        );
    }
    let mut listed = Vec::new();
    for (i, (bus, numa)) in gpus.iter().enumerate() {
        let dev = format!("bus/pci/devices/{}", sysfs_bus_id(bus).expect("a bus id"));
        put(format!("{dev}/numa_node"), &numa.to_string());
        let local = if *numa < 0 {
            all.to_string()
        } else {
            nodes[*numa as usize].to_string()
        };
        put(format!("{dev}/local_cpulist"), &local);
        listed.push(PciGpu {
            index: i as u32,
            uuid: format!(
                "GPU-{i:x}{i:x}{i:x}{i:x}a1b2-0c3d-4e5f-8a9b-{:012x}",
                0x1f2e3d4c + i
            ),
            bus_id: bus.to_string(),
        });
    }
    Machine { dir, gpus: listed }
}

impl Machine {
    /// The layout with `CUDA_VISIBLE_DEVICES` as given.
    fn host(&self, cvd: Option<&str>) -> Host {
        let read = |p: &Path| std::fs::read_to_string(p);
        read_host(self.dir.path(), &read, &visible(&self.gpus, cvd))
    }

    fn all_cpus(&self) -> Allowed {
        Allowed {
            cpus: CpuSet::parse("0-1023").expect("a list"),
            mems: None,
        }
    }
}

/// The CPUs of the 8 NUMA nodes of two 64-core EPYCs at NPS4 with SMT:
/// node n has cores 16n..16n+15 and their siblings 128 higher.
fn two_epyc_nps4_nodes() -> Vec<String> {
    (0..8)
        .map(|n| {
            format!(
                "{}-{},{}-{}",
                16 * n,
                16 * n + 15,
                128 + 16 * n,
                128 + 16 * n + 15
            )
        })
        .collect()
}

/// DGX A100 (2x AMD EPYC 7742, NPS4: 8 NUMA nodes, 256 CPUs with SMT), as
/// NVIDIA's DGX A100 user guide prints `nvidia-smi topo -m`: GPU order is
/// not NUMA order.
fn dgx_a100() -> Machine {
    let nodes = two_epyc_nps4_nodes();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    machine(
        &nodes,
        &[
            ("00000000:07:00.0", 3),
            ("00000000:0F:00.0", 3),
            ("00000000:47:00.0", 1),
            ("00000000:4E:00.0", 1),
            ("00000000:87:00.0", 7),
            ("00000000:90:00.0", 7),
            ("00000000:B7:00.0", 5),
            ("00000000:BD:00.0", 5),
        ],
        Some(128),
    )
}

/// DGX H100 (2x Xeon Platinum 8480C, 224 CPUs with SMT), as NVIDIA's DGX
/// H100 user guide prints `nvidia-smi topo -m`: GPUs 0-3 on node 0
/// (0-55,112-167), 4-7 on node 1 (56-111,168-223).
fn dgx_h100() -> Machine {
    machine(
        &["0-55,112-167", "56-111,168-223"],
        &[
            ("00000000:18:00.0", 0),
            ("00000000:2A:00.0", 0),
            ("00000000:3A:00.0", 0),
            ("00000000:5D:00.0", 0),
            ("00000000:9A:00.0", 1),
            ("00000000:AB:00.0", 1),
            ("00000000:BA:00.0", 1),
            ("00000000:DB:00.0", 1),
        ],
        Some(112),
    )
}

fn ranks(local_rank: usize, local_size: usize) -> Ranks {
    Ranks {
        local_rank: Some(local_rank),
        local_size: Some(local_size),
        rank: None,
    }
}

/// Each local rank's (NUMA node, CPUs) under `mode`.
fn placements(
    m: &Machine,
    cvd: Option<&str>,
    mode: Mode,
    n: usize,
    allowed: &Allowed,
) -> Vec<(Option<u32>, String)> {
    let host = m.host(cvd);
    (0..n)
        .map(|r| {
            let b = plan(&host, mode, ranks(r, n), allowed, "gpu01").expect("a binding");
            (
                b.memory_node,
                b.cpus.map_or("unbound".into(), |c| c.to_string()),
            )
        })
        .collect()
}

#[test]
fn dgx_a100_binds_by_bus_id_where_gpu_order_is_not_numa_order() {
    let m = dgx_a100();
    let got = placements(&m, None, Mode::Numa, 8, &m.all_cpus());
    let want = [
        (3, "48-63,176-191"),
        (3, "48-63,176-191"),
        (1, "16-31,144-159"),
        (1, "16-31,144-159"),
        (7, "112-127,240-255"),
        (7, "112-127,240-255"),
        (5, "80-95,208-223"),
        (5, "80-95,208-223"),
    ];
    let want: Vec<(Option<u32>, String)> = want
        .iter()
        .map(|(n, c)| (Some(*n), c.to_string()))
        .collect();
    assert_eq!(got, want);
    // local_rank // 2 would have put rank 0 on node 0: never.
    assert_eq!(
        placements(&m, None, Mode::Auto, 8, &m.all_cpus()),
        want,
        "auto: 8 NUMA nodes, one process a GPU"
    );
}

#[test]
fn dgx_h100_two_sockets() {
    let m = dgx_h100();
    let got = placements(&m, None, Mode::Numa, 8, &m.all_cpus());
    for (r, (node, cpus)) in got.iter().enumerate() {
        let want = if r < 4 {
            (0, "0-55,112-167")
        } else {
            (1, "56-111,168-223")
        };
        assert_eq!((*node, cpus.as_str()), (Some(want.0), want.1), "rank {r}");
    }
}

#[test]
fn eight_numa_domains_one_gpu_each() {
    // 2x EPYC 9575F at NPS4 (NVIDIA/srt-slurm#332's B300 host): 8 nodes of
    // 16 cores, one GPU on each.
    let nodes = two_epyc_nps4_nodes();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let buses: Vec<String> = (0..8)
        .map(|i| format!("00000000:{:02X}:00.0", 0x05 + 0x20 * i))
        .collect();
    let gpus: Vec<(&str, i32)> = buses
        .iter()
        .enumerate()
        .map(|(i, b)| (b.as_str(), i as i32))
        .collect();
    let m = machine(&nodes, &gpus, Some(128));
    let got = placements(&m, None, Mode::Auto, 8, &m.all_cpus());
    for (r, (node, cpus)) in got.iter().enumerate() {
        assert_eq!(*node, Some(r as u32));
        assert_eq!(cpus, nodes[r]);
    }
}

#[test]
fn one_numa_node_is_left_unbound_by_auto_and_bound_by_numa() {
    // The GPU machine of docs/gpu.md: one H200, 16 CPUs, one NUMA node.
    let m = machine(&["0-15"], &[("00000000:00:06.0", 0)], None);
    let host = m.host(None);
    let auto = plan(&host, Mode::Auto, ranks(0, 1), &m.all_cpus(), "gpu01").expect("auto");
    assert_eq!((auto.cpus.as_ref(), auto.mode), (None, Mode::None));
    assert_eq!(
        auto.report_line("gpu01"),
        "local rank 0 on gpu01: unbound (one NUMA node: auto leaves processes unbound)"
    );
    let numa = plan(&host, Mode::Numa, ranks(0, 1), &m.all_cpus(), "gpu01").expect("numa");
    assert_eq!(
        numa.report_line("gpu01"),
        "local rank 0 on gpu01: GPU 0 (0000:00:06.0), NUMA node 0: CPUs 0-15, memory preferred on node 0 [numa]"
    );
}

#[test]
fn a_gpu_without_a_numa_node_leaves_its_process_unbound() {
    let m = machine(
        &["0-7", "8-15"],
        &[("00000000:00:04.0", -1), ("00000000:00:05.0", 1)],
        None,
    );
    let host = m.host(None);
    let b = plan(&host, Mode::Numa, ranks(0, 2), &m.all_cpus(), "vm1").expect("a binding");
    assert_eq!((b.cpus.as_ref(), b.memory_node), (None, None));
    assert_eq!(
        b.report_line("vm1"),
        "local rank 0 on vm1: GPU 0 (0000:00:04.0): unbound (GPU 0 has no NUMA node: its numa_node is -1: the firmware names no NUMA node for it)"
    );
    let other = plan(&host, Mode::Numa, ranks(1, 2), &m.all_cpus(), "vm1").expect("a binding");
    assert_eq!(other.cpus.map(|c| c.to_string()).as_deref(), Some("8-15"));
}

#[test]
fn cuda_visible_devices_by_uuid_and_reordered() {
    let m = dgx_a100();
    let (g6, g2) = (m.gpus[6].uuid.clone(), m.gpus[2].uuid.clone());
    // A full UUID, then a unique prefix of one.
    let cvd = format!("{g6},{}", &g2[..12]);
    let host = m.host(Some(&cvd));
    assert_eq!(
        host.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
        [6, 2]
    );
    let got = placements(&m, Some(&cvd), Mode::Numa, 2, &m.all_cpus());
    assert_eq!(
        got,
        [
            (Some(5), "80-95,208-223".to_string()),
            (Some(1), "16-31,144-159".to_string())
        ]
    );
    // By index, reordered the same way.
    assert_eq!(
        placements(&m, Some("6,2"), Mode::Numa, 2, &m.all_cpus()),
        got
    );
}

#[test]
fn never_wider_than_the_process_was_given() {
    let m = dgx_a100();
    let host = m.host(None);
    // srun --cpu-bind or a cpuset that gives rank 0 half of its node, and a CPU elsewhere.
    let narrow = Allowed {
        cpus: CpuSet::parse("0-3,52-55,180-183").expect("a list"),
        mems: None,
    };
    let b = plan(&host, Mode::Numa, ranks(0, 8), &narrow, "dgx1").expect("a binding");
    assert_eq!(
        b.cpus.map(|c| c.to_string()).as_deref(),
        Some("52-55,180-183")
    );
    // This machine's 2 CPUs: none on node 3, so unbound, and said.
    let two = Allowed {
        cpus: CpuSet::parse("0-1").expect("a list"),
        mems: Some(CpuSet::parse("0").expect("a list")),
    };
    let b = plan(&host, Mode::Numa, ranks(0, 8), &two, "dgx1").expect("a binding");
    assert_eq!(b.cpus, None);
    assert_eq!(
        b.note.as_deref(),
        Some(
            "none of NUMA node 3's CPUs (48-63,176-191) is among the CPUs this process may use (0-1)"
        )
    );
    // Memory is not preferred on a node the cpuset's memory nodes leave out.
    let half = Allowed {
        cpus: CpuSet::parse("0-255").expect("a list"),
        mems: Some(CpuSet::parse("0-2").expect("a list")),
    };
    let b = plan(&host, Mode::Numa, ranks(2, 8), &half, "dgx1").expect("a binding");
    assert_eq!(b.memory_node, Some(1));
    let b = plan(&host, Mode::Numa, ranks(0, 8), &half, "dgx1").expect("a binding");
    assert_eq!(b.memory_node, None);
    assert!(b.cpus.is_some());
    assert_eq!(
        b.note.as_deref(),
        Some("memory not preferred: node 3 is not among this process's memory nodes (0-2)")
    );
}

#[test]
fn cores_split_a_node_among_its_processes_keeping_siblings_together() {
    let a100 = dgx_a100();
    let got = placements(&a100, None, Mode::Cores, 8, &a100.all_cpus());
    assert_eq!(got[0], (Some(3), "48-55,176-183".to_string()));
    assert_eq!(got[1], (Some(3), "56-63,184-191".to_string()));
    assert_eq!(got[6], (Some(5), "80-87,208-215".to_string()));
    let h100 = dgx_h100();
    let got = placements(&h100, None, Mode::Cores, 8, &h100.all_cpus());
    assert_eq!(got[0].1, "0-13,112-125");
    assert_eq!(got[3].1, "42-55,154-167");
    assert_eq!(got[4].1, "56-69,168-181");
    // Four processes on an 8-GPU machine: GPUs 0-3, all on node 0, share it.
    let got = placements(&h100, None, Mode::Cores, 4, &h100.all_cpus());
    assert_eq!(got[1].1, "14-27,126-139");
    // A share is whole cores of what is allowed: 176 left out, 48 alone.
    let narrow = Allowed {
        cpus: CpuSet::parse("48-50,177-178").expect("a list"),
        mems: None,
    };
    let host = a100.host(None);
    let shares: Vec<String> = (0..2)
        .map(|r| {
            let b = plan(&host, Mode::Cores, ranks(r, 8), &narrow, "dgx1").expect("a binding");
            b.cpus.expect("bound").to_string()
        })
        .collect();
    assert_eq!(shares, ["48", "49-50,177-178"]);
    // Fewer cores than processes: the node is shared, and said.
    let one = Allowed {
        cpus: CpuSet::parse("48,176").expect("a list"),
        mems: None,
    };
    let b = plan(&host, Mode::Cores, ranks(1, 8), &one, "dgx1").expect("a binding");
    assert_eq!(b.cpus.map(|c| c.to_string()).as_deref(), Some("48,176"));
    assert_eq!(
        b.note.as_deref(),
        Some("1 core for 2 processes on NUMA node 3: shared")
    );
}

#[test]
fn more_processes_than_gpus_is_one_line_naming_the_node_and_both_counts() {
    let m = dgx_h100();
    let host = m.host(Some("0,1"));
    for mode in [Mode::Numa, Mode::Cores] {
        let e = plan(&host, mode, ranks(0, 4), &m.all_cpus(), "gpu07").expect_err("4 for 2");
        assert_eq!(
            e.to_string(),
            format!(
                "gpu07: 4 processes for 2 GPUs: --bind {mode} binds one process a GPU; start at most 2 on gpu07, or use --bind none"
            )
        );
        assert_eq!(e.exit_code(), 2);
    }
    // A local rank past the GPUs, the local size unknown.
    let only_rank = Ranks {
        local_rank: Some(2),
        ..Ranks::default()
    };
    let e = plan(&host, Mode::Numa, only_rank, &m.all_cpus(), "gpu07").expect_err("rank 2");
    assert!(
        e.to_string().starts_with("gpu07: 3 processes for 2 GPUs"),
        "{e}"
    );
    // The largest local rank there is: no overflow, no index past the GPUs.
    let huge = Ranks {
        local_rank: Some(usize::MAX),
        ..Ranks::default()
    };
    let e = plan(&host, Mode::Numa, huge, &m.all_cpus(), "gpu07").expect_err("huge");
    assert!(
        e.to_string()
            .starts_with("gpu07: 18446744073709551615 processes for 2 GPUs"),
        "{e}"
    );
    let b = plan(&host, Mode::Auto, huge, &m.all_cpus(), "gpu07").expect("auto");
    assert_eq!(b.cpus, None);
    // auto does not refuse: it leaves them unbound, and says why.
    let b = plan(&host, Mode::Auto, ranks(3, 4), &m.all_cpus(), "gpu07").expect("auto");
    assert_eq!(b.cpus, None);
    assert_eq!(
        b.note.as_deref(),
        Some("4 processes for 2 GPUs: auto binds one process a GPU")
    );
}

#[test]
fn bad_input_is_one_line_saying_what_to_do() {
    let m = dgx_h100();
    let host = m.host(None);
    let e = plan(&host, Mode::Numa, Ranks::default(), &m.all_cpus(), "gpu07").expect_err("no rank");
    assert_eq!(
        e.to_string(),
        "--bind numa needs this process's local rank, and none of LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID is set: run it under torchrun, srun or mpirun, set LOCAL_RANK, or use --bind none"
    );
    assert_eq!(e.exit_code(), 2);
    let only_rank = Ranks {
        local_rank: Some(0),
        ..Ranks::default()
    };
    let e = plan(&host, Mode::Cores, only_rank, &m.all_cpus(), "gpu07").expect_err("no size");
    assert!(e.to_string().contains("set LOCAL_WORLD_SIZE"), "{e}");
    // none needs nothing; auto on one NUMA node needs no rank either.
    let b = plan(&host, Mode::None, Ranks::default(), &m.all_cpus(), "gpu07").expect("none");
    assert_eq!(
        b.report_line("gpu07"),
        "process on gpu07: unbound (--bind none)"
    );
    let one = machine(&["0-15"], &[("00000000:00:06.0", 0)], None);
    assert!(
        plan(
            &one.host(None),
            Mode::Auto,
            Ranks::default(),
            &m.all_cpus(),
            "g"
        )
        .is_ok()
    );

    assert_eq!(
        "numaa".parse::<Mode>().expect_err("unknown"),
        "unknown binding mode 'numaa': give auto, numa, cores or none"
    );
    assert_eq!("NUMA".parse::<Mode>(), Ok(Mode::Numa));
    let env = |v: &str| -> EnvMap {
        [(vars::BIND.to_string(), v.to_string())]
            .into_iter()
            .collect()
    };
    assert_eq!(mode_from(None, &env("cores")).expect("cores"), Mode::Cores);
    assert_eq!(
        mode_from(Some(Mode::None), &env("cores")).expect("flag"),
        Mode::None
    );
    assert_eq!(
        mode_from(None, &EnvMap::default()).expect("default"),
        Mode::Auto
    );
    let e = mode_from(None, &env("socket")).expect_err("unknown");
    assert_eq!(
        e.to_string(),
        "MULTINODE_BIND='socket' is not a binding mode (auto, numa, cores or none); fix it or unset it"
    );
}

#[test]
fn the_layout_comes_from_nvidia_smi_and_sysfs() {
    let m = dgx_a100();
    let csv: String = m
        .gpus
        .iter()
        .map(|g| format!("{}, {}, {}\n", g.index, g.uuid, g.bus_id))
        .collect();
    let asked = std::sync::Mutex::new(Vec::new());
    let run = |program: &str, args: &[&str], _| {
        asked
            .lock()
            .expect("lock")
            .push(format!("{program} {}", args.join(" ")));
        RunOutput::Exited {
            code: Some(0),
            stdout: csv.clone(),
            stderr: String::new(),
        }
    };
    let read = |p: &Path| std::fs::read_to_string(p);
    let env: EnvMap = [("CUDA_VISIBLE_DEVICES".to_string(), "4,5".to_string())]
        .into_iter()
        .collect();
    let host = read_layout(&run, &read, m.dir.path(), &env)
        .expect("read")
        .expect("nvidia-smi found");
    assert_eq!(
        asked.into_inner().expect("lock"),
        ["nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader"]
    );
    let nodes: Vec<(&str, Option<u32>)> = host
        .gpus
        .iter()
        .map(|g| (g.bus_id.as_str(), g.numa_node.clone().ok()))
        .collect();
    assert_eq!(
        nodes,
        [("0000:87:00.0", Some(7)), ("0000:90:00.0", Some(7))]
    );
    assert_eq!(host.nodes.len(), 8);

    let missing = |_: &str, _: &[&str], _| RunOutput::NotFound;
    assert_eq!(read_layout(&missing, &read, m.dir.path(), &env), Ok(None));
    let broken = |_: &str, _: &[&str], _| RunOutput::Exited {
        code: Some(9),
        stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
            .into(),
        stderr: String::new(),
    };
    assert_eq!(
        read_layout(&broken, &read, m.dir.path(), &env),
        Err("nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.".to_string())
    );
}
