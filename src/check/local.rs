//! `multinode check --local`: this node's facts, gathered through a
//! [`Probe`]. The slow parts (`nvidia-smi`, `nvcc`, name lookups, the
//! rendezvous connection) run at once, each with its own time limit, so a
//! report takes as long as the slowest of them: well under a second on a
//! healthy node, [`crate::nvidia_smi::TIMEOUT`] at worst. The GPU
//! stack's facts: [`super::gpu_stack`].

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use tracing::debug;

use super::facts::*;
use super::gpu_stack::{gpus, parse_torch_release, toolkits, torch_packages};
use super::probe::{Probe, group_interfaces};
use crate::cli::{CheckArgs, TopologyArgs};
use crate::env::{Job, resolve_job};
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::vars;

/// Every host name of the hostlist, resolved in parallel.
const LOOKUP_DEADLINE: Duration = Duration::from_secs(5);
/// The TCP connection to the head's rendezvous port.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The variables that steer NCCL's and Gloo's choice of network, reported as set.
pub(crate) const FABRIC_VARS: [&str; 5] = [
    "NCCL_IB_HCA",
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
];

/// What to gather besides the machine itself: the contract as resolved here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobView {
    pub job: JobFacts,
    /// Host names to resolve (IP literals left out).
    pub hosts: Vec<String>,
    pub rendezvous: Option<SocketAddr>,
    /// `MULTINODE_SSH_WRAPPER` as resolved here.
    pub ssh_wrapper: Option<String>,
    /// `--gpu`: the GPUs' error and link state too.
    pub gpu_health: bool,
}

impl JobView {
    /// The plan for a resolved job.
    pub(crate) fn from_job(job: &Job, port: u16) -> Self {
        JobView {
            job: JobFacts {
                rank: Some(job.rank),
                head_ip: Some(job.head_ip),
                error: None,
            },
            hosts: names(job.topology.nodes.iter().map(|n| n.host.as_str())),
            rendezvous: Some(SocketAddr::new(job.head_ip, port)),
            ssh_wrapper: Some(job.wrapper.clone()),
            gpu_health: false,
        }
    }

    /// The plan when the contract does not resolve on this node: what the
    /// variables say, with the error kept for the report.
    pub(crate) fn from_env(env: &EnvMap, port: u16, error: &Error) -> Self {
        let head_ip = env
            .get(vars::NODE_IP)
            .and_then(|v| v.parse::<IpAddr>().ok());
        let list = env
            .get(vars::HOSTLIST_NOSLOTS)
            .or_else(|| env.get(vars::HOSTLIST))
            .unwrap_or_default();
        let hosts = list.split(',').map(|entry| {
            if let Some(v6) = entry.strip_prefix('[') {
                // `[fd00::4]:8`: an IP literal, left out below.
                return v6.split(']').next().unwrap_or_default();
            }
            match entry.rsplit_once(':') {
                Some((host, slots)) if slots.parse::<u32>().is_ok() => host,
                _ => entry,
            }
        });
        JobView {
            job: JobFacts {
                rank: env
                    .get(vars::NODE_RANK)
                    .or_else(|| env.get("RANK"))
                    .and_then(|r| r.parse().ok()),
                head_ip,
                error: Some(error.to_string()),
            },
            hosts: names(hosts),
            rendezvous: head_ip.map(|ip| SocketAddr::new(ip, port)),
            ssh_wrapper: env.get(vars::SSH_WRAPPER).map(str::to_string),
            gpu_health: false,
        }
    }
}

/// The host names among `hosts`, without IP literals, bracketed or not, and duplicates.
fn names<'a>(hosts: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for h in hosts {
        let h = h.trim();
        let bare = h.trim_start_matches('[').trim_end_matches(']');
        if h.is_empty() || bare.parse::<IpAddr>().is_ok() || out.iter().any(|o| o == h) {
            continue;
        }
        out.push(h.to_string());
    }
    out
}

/// The plan for `multinode check --local`: the contract of this node, or,
/// when it does not resolve, what the environment says. Errors only for bad
/// command-line flags (the user's own input).
pub(crate) fn local_plan(args: &CheckArgs, env: &EnvMap) -> Result<JobView, Error> {
    let plan = match resolve_job(&args.topology.inputs(), env) {
        Ok(job) => JobView::from_job(&job, args.port),
        Err(e) if flags_given(&args.topology) => return Err(e),
        Err(e) => {
            debug!(error = %e, "the contract does not resolve here");
            JobView::from_env(env, args.port, &e)
        }
    };
    Ok(JobView {
        gpu_health: args.gpu,
        ..plan
    })
}

fn flags_given(t: &TopologyArgs) -> bool {
    t.hosts.is_some() || t.hostfile.is_some() || t.node_rank.is_some() || t.iface.is_some()
}

/// Gathers this node's facts.
pub(crate) fn gather(probe: &dyn Probe, env: &EnvMap, plan: &JobView) -> NodeFacts {
    let (gpus, toolkits, names, rendezvous, affinity, gpu_state) = std::thread::scope(|s| {
        // Set but empty hides every GPU from CUDA: not "unset" here.
        let visible = env.0.get("CUDA_VISIBLE_DEVICES").map(String::as_str);
        let gpus = s.spawn(move || gpus(probe, visible));
        // The health first, then the speed probe: the health query reads
        // the clocks as found, not under the probe's own load.
        let gpu_state = plan.gpu_health.then(|| {
            s.spawn(|| {
                let health = super::gpu_health::gpu_health(probe);
                (health, super::gpu_speed::gpu_speed(probe, env))
            })
        });
        let toolkits = s.spawn(|| toolkits(probe, env));
        let affinity = s.spawn(|| affinity(probe, env));
        let names = s.spawn(|| probe.resolve_all(&plan.hosts, LOOKUP_DEADLINE));
        let rendezvous = plan
            .rendezvous
            .map(|addr| s.spawn(move || probe.connect(addr, CONNECT_TIMEOUT)));
        (
            gpus.join().unwrap_or_default(),
            toolkits.join().unwrap_or_default(),
            names.join().unwrap_or_default(),
            rendezvous.and_then(|h| h.join().ok()),
            affinity.join().unwrap_or_default(),
            gpu_state.map(|h| h.join().unwrap_or_default()),
        )
    });
    let (health, speed) = match gpu_state {
        Some((health, speed)) => (Some(health), Some(speed)),
        None => (None, None),
    };
    // The GPUs the job sees (`CUDA_VISIBLE_DEVICES`), as the inventory narrowed them.
    let health = health.map(|mut h| {
        if gpus.smi == SmiStatus::Ok {
            h.devices
                .retain(|d| gpus.devices.iter().any(|g| g.index == d.index));
        }
        h
    });
    let facts = NodeFacts {
        schema: SCHEMA,
        version: env!("CARGO_PKG_VERSION").to_string(),
        hostname: probe.hostname().unwrap_or_default(),
        time_ms: 0,
        machine: MachineIdentity {
            boot_id: probe
                .read_file(Path::new("/proc/sys/kernel/random/boot_id"))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
            netns: probe.read_link(Path::new("/proc/self/ns/net")),
        },
        job: plan.job.clone(),
        rendezvous,
        names,
        memlock: probe.memlock(),
        fabric: fabric(probe, env),
        gpus,
        cuda_toolkits: toolkits,
        settings: settings(probe, env, plan),
        affinity,
        gpu_health: health,
        gpu_speed: speed,
    };
    NodeFacts {
        time_ms: probe.now_ms(),
        ..facts
    }
}

fn fabric(probe: &dyn Probe, env: &EnvMap) -> Fabric {
    let sys = Path::new("/sys/class/infiniband");
    let ib_devices = probe
        .list_dir(sys)
        .unwrap_or_default()
        .into_iter()
        .map(|name| {
            let ports_dir = sys.join(&name).join("ports");
            let ports = probe
                .list_dir(&ports_dir)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|p| {
                    let port = p.parse::<u32>().ok()?;
                    let read = |file: &str| {
                        probe
                            .read_file(&ports_dir.join(&p).join(file))
                            .ok()
                            .unwrap_or_default()
                    };
                    // `4: ACTIVE`
                    let state = read("state");
                    let state = state
                        .rsplit(':')
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                    Some(IbPort {
                        port,
                        state,
                        link_layer: read("link_layer").trim().to_string(),
                    })
                })
                .collect();
            IbDevice { name, ports }
        })
        .collect();
    Fabric {
        dev_infiniband: probe.list_dir(Path::new("/dev/infiniband")),
        ib_devices,
        interfaces: group_interfaces(probe.interfaces()),
        env: FABRIC_VARS
            .iter()
            .filter_map(|k| Some((k.to_string(), env.get(k)?.to_string())))
            .collect(),
    }
}

/// The variables that pin OpenMP threads: set, `import torch` shrinks the
/// process's CPUs to one (llnl/mpibind#41).
pub(crate) const OMP_AFFINITY_VARS: [&str; 2] = ["OMP_PROC_BIND", "KMP_AFFINITY"];

/// The job's CPUs here, the visible GPUs' NUMA nodes (`nvidia-smi`'s bus
/// ids through sysfs, as `multinode bind` reads them), the OpenMP variables.
fn affinity(probe: &dyn Probe, env: &EnvMap) -> Affinity {
    let read = |p: &Path| probe.read_file(p);
    let run = |program: &str, args: &[&str], timeout| probe.run(program, args, timeout);
    let root = Path::new("/sys");
    let nodes = crate::binding::read_nodes(root, &read);
    let gpus = match crate::binding::read_layout(&run, &read, root, env) {
        Ok(Some(host)) => host
            .gpus
            .iter()
            .map(|g| GpuNuma {
                index: g.index,
                bus_id: g.bus_id.clone(),
                numa_node: g.numa_node.as_ref().ok().copied(),
                node_cpus: g.numa_node.as_ref().ok().and_then(|n| {
                    let cpus = nodes.get(n).unwrap_or(&g.local_cpus);
                    (!cpus.is_empty()).then(|| cpus.to_string())
                }),
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(e) => {
            debug!(error = %e, "no GPU bus ids");
            Vec::new()
        }
    };
    Affinity {
        allowed_cpus: probe
            .read_file(Path::new("/proc/self/status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .map(|v| v.trim().to_string())
            }),
        numa_nodes: u32::try_from(nodes.len()).unwrap_or(u32::MAX),
        gpus,
        env: OMP_AFFINITY_VARS
            .iter()
            .filter_map(|k| Some((k.to_string(), env.get(k)?.to_string())))
            .collect(),
    }
}

/// The variables of [`Settings::env`]: every `NCCL_*`, and these.
const MPI_LAUNCH_VARS: [&str; 2] = ["OMPI_MCA_plm", "OMPI_MCA_plm_rsh_agent"];

fn settings(probe: &dyn Probe, env: &EnvMap, plan: &JobView) -> Settings {
    let mut versions = BTreeMap::new();
    if let Some(packages) = torch_packages(probe, env) {
        if let Some(v) = probe
            .read_file(&packages.join("torch/version.py"))
            .ok()
            .as_deref()
            .and_then(parse_torch_release)
        {
            versions.insert("torch".to_string(), v);
        }
        // `nvidia_nccl_cu12-2.21.5.dist-info`: the NCCL that PyTorch's wheel loads.
        if let Some(v) = probe
            .list_dir(&packages)
            .unwrap_or_default()
            .iter()
            .filter_map(|name| {
                let rest = name
                    .strip_prefix("nvidia_nccl_cu")?
                    .strip_suffix(".dist-info")?;
                Some(rest.split_once('-')?.1.to_string())
            })
            .max()
        {
            versions.insert("nccl".to_string(), v);
        }
    }
    Settings {
        env: env
            .0
            .iter()
            .filter(|(k, _)| k.starts_with("NCCL_") || MPI_LAUNCH_VARS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ssh_wrapper: plan.ssh_wrapper.clone(),
        versions,
        dev_shm: probe
            .read_file(Path::new("/proc/mounts"))
            .ok()
            .map(|text| parse_dev_shm(&text)),
    }
}

/// `/dev/shm` in `/proc/mounts`: `shm /dev/shm tmpfs rw,...,size=65536k 0 0`.
/// The last mount on the path is the one seen.
pub(crate) fn parse_dev_shm(mounts: &str) -> DevShm {
    let mut found = DevShm::default();
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_), Some(target), Some(_), Some(options)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if target != "/dev/shm" {
            continue;
        }
        found = DevShm {
            mounted: true,
            size: options
                .split(',')
                .find_map(|o| o.strip_prefix("size="))
                .and_then(parse_size),
        };
    }
    found
}

/// A tmpfs size: `65536k`, `1g`, `1073741824`; a percentage is `None`.
fn parse_size(text: &str) -> Option<u64> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// `multinode check --local`: this node's facts as JSON on stdout.
pub(crate) fn run_local(args: &CheckArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let plan = local_plan(args, &env)?;
    debug!(?plan, "gathering this node's facts");
    let facts = gather(&super::probe::SystemProbe, &env, &plan);
    let mut text = serde_json::to_string_pretty(&facts)
        .map_err(|e| Error::Failed(format!("cannot write the report: {e}")))?;
    text.push('\n');
    crate::stdio::print_stdout(&text)
}

#[cfg(test)]
mod tests {
    use super::super::probe::fake::{FakeProbe, printed};
    use super::*;
    use crate::check::probe::RunOutput;
    use crate::topology::machine::fake::env;
    use std::collections::BTreeMap;

    const QUERY_CSV: &str = include_str!("../../tests/fixtures/nvidia-smi/h200-8gpu/query.csv");
    const SMI: &str = include_str!("../../tests/fixtures/nvidia-smi/h200-8gpu/nvidia-smi.txt");
    const Q: &str =
        "nvidia-smi --query-gpu=index,name,driver_version,compute_cap --format=csv,noheader";
    const Q_OLD: &str = "nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader";

    fn plan() -> JobView {
        JobView {
            job: JobFacts {
                rank: Some(1),
                head_ip: Some("10.0.0.1".parse().expect("ip")),
                error: None,
            },
            hosts: vec!["gpu01".into(), "gpu02".into()],
            rendezvous: Some("10.0.0.1:29500".parse().expect("addr")),
            ssh_wrapper: Some("/usr/local/bin/mn-ssh".into()),
            gpu_health: false,
        }
    }

    /// An HGX H200 node with two ConnectX ports (one down), CUDA 12.8 in
    /// version.json, PyTorch for CUDA 12.6 in a virtual environment.
    fn h200_node() -> FakeProbe {
        FakeProbe {
            now_ms: 1_764_513_000_000,
            hostname: "gpu02".into(),
            ..FakeProbe::default()
        }
        .program(Q, printed(QUERY_CSV))
        .program("nvidia-smi", printed(SMI))
        .file(
            "/proc/sys/kernel/random/boot_id",
            "24fb9b5a-2364-4075-8613-d52fe912a434\n",
        )
        .dir("/dev/infiniband", &["rdma_cm", "uverbs0", "uverbs1"])
        .dir("/sys/class/infiniband", &["mlx5_0", "mlx5_1"])
        .dir("/sys/class/infiniband/mlx5_0/ports", &["1"])
        .file("/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n")
        .file(
            "/sys/class/infiniband/mlx5_0/ports/1/link_layer",
            "InfiniBand\n",
        )
        .dir("/sys/class/infiniband/mlx5_1/ports", &["1"])
        .file("/sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n")
        .file(
            "/sys/class/infiniband/mlx5_1/ports/1/link_layer",
            "Ethernet\n",
        )
        .file(
            "/usr/local/cuda/version.json",
            r#"{"cuda": {"name": "CUDA SDK", "version": "12.8.1"}}"#,
        )
        .program("/venv/bin/python3", printed(""))
        .dir("/venv/lib", &["python3.12"])
        .file(
            "/venv/lib/python3.12/site-packages/torch/version.py",
            "__version__ = '2.7.1+cu126'\ncuda: Optional[str] = '12.6'\n",
        )
        .dir(
            "/venv/lib/python3.12/site-packages",
            &["torch", "nvidia_nccl_cu12-2.26.2.dist-info", "numpy"],
        )
        .file(
            "/proc/mounts",
            "overlay / overlay rw 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n",
        )
    }

    #[test]
    fn an_h200_node() {
        let probe = h200_node();
        let e = env(&[
            ("PATH", "/venv/bin:/usr/bin"),
            ("NCCL_IB_HCA", "=mlx5_0"),
            ("NCCL_DEBUG", "INFO"),
        ]);
        let f = gather(&probe, &e, &plan());
        assert_eq!(f.schema, SCHEMA);
        assert_eq!(f.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(f.hostname, "gpu02");
        assert_eq!(f.time_ms, 1_764_513_000_000);
        assert_eq!(
            f.machine.boot_id.as_deref(),
            Some("24fb9b5a-2364-4075-8613-d52fe912a434")
        );
        assert_eq!(f.job, plan().job);
        assert_eq!(f.gpus.smi, SmiStatus::Ok);
        assert_eq!(f.gpus.devices.len(), 8);
        assert_eq!(f.gpus.driver_version.as_deref(), Some("580.159.04"));
        assert_eq!(f.gpus.cuda_version.as_deref(), Some("13.0"));
        assert_eq!(
            f.fabric.ib_devices[1],
            IbDevice {
                name: "mlx5_1".into(),
                ports: vec![IbPort {
                    port: 1,
                    state: "DOWN".into(),
                    link_layer: "Ethernet".into()
                }]
            }
        );
        assert!(f.fabric.ib_devices[0].ports[0].active());
        assert_eq!(
            f.fabric.dev_infiniband.as_deref(),
            Some(&["rdma_cm".to_string(), "uverbs0".into(), "uverbs1".into()][..])
        );
        assert_eq!(
            f.fabric.env,
            BTreeMap::from([("NCCL_IB_HCA".to_string(), "=mlx5_0".to_string())])
        );
        assert_eq!(
            f.cuda_toolkits,
            vec![
                Toolkit {
                    source: "version.json".into(),
                    path: "/usr/local/cuda/version.json".into(),
                    version: "12.8".into()
                },
                Toolkit {
                    source: "torch".into(),
                    path: "/venv/lib/python3.12/site-packages/torch/version.py".into(),
                    version: "12.6".into()
                },
            ]
        );
        assert_eq!(
            f.settings,
            Settings {
                env: BTreeMap::from([
                    ("NCCL_DEBUG".to_string(), "INFO".to_string()),
                    ("NCCL_IB_HCA".to_string(), "=mlx5_0".to_string()),
                ]),
                ssh_wrapper: Some("/usr/local/bin/mn-ssh".into()),
                versions: BTreeMap::from([
                    ("nccl".to_string(), "2.26.2".to_string()),
                    ("torch".to_string(), "2.7.1+cu126".to_string()),
                ]),
                dev_shm: Some(DevShm {
                    mounted: true,
                    size: Some(64 << 20)
                }),
            }
        );
        // The fake refuses the connection and resolves nothing.
        let r = f.rendezvous.expect("tried");
        assert_eq!((r.addr.as_str(), r.connected), ("10.0.0.1:29500", false));
        assert!(f.names.is_empty());
    }

    #[test]
    fn dev_shm_from_proc_mounts() {
        let shm = |line: &str| parse_dev_shm(&format!("proc /proc proc rw 0 0\n{line}\n"));
        assert_eq!(
            shm("shm /dev/shm tmpfs rw,size=65536k 0 0"),
            DevShm {
                mounted: true,
                size: Some(64 << 20)
            }
        );
        assert_eq!(
            shm("tmpfs /dev/shm tmpfs rw,size=1g,mode=1777 0 0").size,
            Some(1 << 30)
        );
        // A host's /dev/shm (tmpfs' default, half the RAM), a percentage.
        assert_eq!(
            shm("tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0"),
            DevShm {
                mounted: true,
                size: None
            }
        );
        assert_eq!(shm("tmpfs /dev/shm tmpfs rw,size=50% 0 0").size, None);
        assert_eq!(shm("tmpfs /run tmpfs rw,size=1g 0 0"), DevShm::default());
        // The last mount on the path is the one seen.
        assert_eq!(
            shm("shm /dev/shm tmpfs rw,size=65536k 0 0\nshm /dev/shm tmpfs rw,size=2g 0 0").size,
            Some(2 << 30)
        );
    }

    #[test]
    fn only_the_gpus_cuda_visible_devices_leaves() {
        // nvidia-smi lists all 8; a job given GPUs 2 and 5 sees two.
        let e = env(&[("CUDA_VISIBLE_DEVICES", "2,5")]);
        let f = gather(&h200_node(), &e, &plan());
        let seen: Vec<u32> = f.gpus.devices.iter().map(|g| g.index).collect();
        assert_eq!(seen, vec![2, 5]);
        let f = gather(&h200_node(), &env(&[("CUDA_VISIBLE_DEVICES", "")]), &plan());
        assert!(f.gpus.devices.is_empty());
        assert_eq!(f.gpus.smi, SmiStatus::Ok);
    }

    #[test]
    fn gpu_health_only_with_gpu_and_only_of_the_visible_gpus() {
        let query = format!(
            "nvidia-smi --query-gpu={} --format=csv,nounits",
            crate::nvidia_smi::HEALTH_QUERY
        );
        let csv = "index, pci.bus_id, persistence_mode\n\
                   0, 00000000:18:00.0, Enabled\n\
                   1, 00000000:2A:00.0, Disabled\n";
        let probe = h200_node()
            .program(&query, printed(csv))
            .program("dmesg", printed(""));
        let e = env(&[("CUDA_VISIBLE_DEVICES", "1"), ("PATH", "/venv/bin")]);
        let f = gather(&probe, &e, &plan());
        assert_eq!((f.gpu_health, f.gpu_speed), (None, None));
        assert!(
            probe
                .ran
                .lock()
                .expect("lock")
                .iter()
                .all(|r| !r.contains("python3 -B"))
        );
        let p = JobView {
            gpu_health: true,
            ..plan()
        };
        let h = gather(&probe, &e, &p).gpu_health.expect("asked");
        assert_eq!(h.smi, SmiStatus::Ok);
        let seen: Vec<(u32, Option<bool>)> = h
            .devices
            .iter()
            .map(|d| (d.index, d.persistence_mode))
            .collect();
        assert_eq!(seen, [(1, Some(false))]);
        assert_eq!((h.kernel_log_error, h.xids.len()), (None, 0));
        // The speed probe (the job's python3) starts after the health was read.
        let ran = probe.ran.lock().expect("lock").clone();
        let at = |prefix: &str| ran.iter().position(|r| r.starts_with(prefix));
        let python = at("/venv/bin/python3 -B -c").expect("the speed probe ran");
        for before in [query.as_str(), "nvidia-smi nvlink --status", "dmesg"] {
            assert!(at(before).is_some_and(|i| i < python), "{before}: {ran:?}");
        }
    }

    #[test]
    fn a_cpu_node_without_nvidia_smi_or_toolkits() {
        let probe = FakeProbe::default();
        let f = gather(&probe, &EnvMap::default(), &plan());
        assert_eq!(f.gpus, Gpus::default());
        assert_eq!(f.gpus.smi, SmiStatus::Absent);
        assert!(f.cuda_toolkits.is_empty());
        assert_eq!(f.fabric.dev_infiniband, None);
        assert!(f.fabric.ib_devices.is_empty());
    }

    #[test]
    fn nvidia_smi_failures() {
        let no_driver = include_str!("../../tests/fixtures/nvidia-smi/no-driver.txt");
        let probe = FakeProbe::default().program(
            Q,
            RunOutput::Exited {
                code: Some(9),
                stdout: no_driver.into(),
                stderr: String::new(),
            },
        );
        let f = gather(&probe, &EnvMap::default(), &plan());
        assert_eq!(f.gpus.smi, SmiStatus::Failed);
        assert_eq!(
            f.gpus.error.as_deref(),
            Some(
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running. (exit 9)"
            )
        );
        let probe = FakeProbe::default().program(Q, RunOutput::TimedOut);
        assert_eq!(
            gather(&probe, &EnvMap::default(), &plan()).gpus.smi,
            SmiStatus::Timeout
        );
    }

    #[test]
    fn old_drivers_are_asked_again_without_compute_cap() {
        let probe = FakeProbe::default()
            .program(
                Q,
                RunOutput::Exited {
                    code: Some(2),
                    stdout: "Field \"compute_cap\" is not a valid field to query.\n\n".into(),
                    stderr: String::new(),
                },
            )
            .program(Q_OLD, printed("0, Tesla V100-SXM2-32GB, 470.82.01\n"));
        let f = gather(&probe, &EnvMap::default(), &plan());
        assert_eq!(f.gpus.smi, SmiStatus::Ok);
        assert_eq!(f.gpus.devices[0].compute_cap, None);
        assert_eq!(f.gpus.driver_version.as_deref(), Some("470.82.01"));
    }

    #[test]
    fn toolkit_sources_in_order() {
        let nvcc_out = "Cuda compilation tools, release 12.4, V12.4.131\n";
        let probe = FakeProbe::default().program("/opt/cuda/bin/nvcc --version", printed(nvcc_out));
        let e = env(&[("PATH", "/opt/cuda/bin"), ("CUDA_VERSION", "12.9.1")]);
        assert_eq!(
            toolkits(&probe, &e),
            vec![Toolkit {
                source: "nvcc".into(),
                path: "/opt/cuda/bin/nvcc".into(),
                version: "12.4".into()
            }]
        );
        let probe = FakeProbe::default();
        assert_eq!(
            toolkits(&probe, &e),
            vec![Toolkit {
                source: "CUDA_VERSION".into(),
                path: "$CUDA_VERSION".into(),
                version: "12.9".into()
            }]
        );
        // CUDA_HOME moves version.json.
        let probe = FakeProbe::default().file(
            "/opt/cuda-13/version.json",
            r#"{"cuda":{"version":"13.0.2"}}"#,
        );
        let e = env(&[("CUDA_HOME", "/opt/cuda-13")]);
        assert_eq!(toolkits(&probe, &e)[0].version, "13.0");
    }

    #[test]
    fn plans_from_a_broken_contract() {
        let e = env(&[
            (
                "MULTINODE_HOSTLIST",
                "gpu01:8,gpu02:8,10.0.0.3:8,[fd00::4]:8",
            ),
            ("MULTINODE_NODE_IP", "10.0.0.1"),
            ("RANK", "1"),
        ]);
        let p = JobView::from_env(
            &e,
            29500,
            &Error::usage("no interface matches NCCL_SOCKET_IFNAME='eth9'"),
        );
        assert_eq!(p.hosts, ["gpu01", "gpu02"]);
        assert_eq!(p.rendezvous, Some("10.0.0.1:29500".parse().expect("addr")));
        assert_eq!(p.job.rank, Some(1));
        assert_eq!(
            p.job.error.as_deref(),
            Some("no interface matches NCCL_SOCKET_IFNAME='eth9'")
        );
        let p = JobView::from_env(&EnvMap::default(), 29500, &Error::usage("x"));
        assert_eq!(
            (p.hosts.len(), p.rendezvous, p.job.head_ip),
            (0, None, None)
        );
    }

    #[test]
    fn no_rendezvous_address_no_connection() {
        let mut p = plan();
        p.rendezvous = None;
        let f = gather(&FakeProbe::default(), &EnvMap::default(), &p);
        assert_eq!(f.rendezvous, None);
    }
}
