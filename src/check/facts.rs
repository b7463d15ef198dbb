//! What `multinode check --local` reports about one node: plain data, printed
//! as JSON on stdout and read back by the head. docs/check.md describes every
//! field.
//!
//! Every struct is `#[serde(default)]` so that a report from another version
//! of `multinode` still reads (the `version` check then names that node).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

pub(crate) use crate::nvidia_smi::{Gpu, GpuHealth, NvLink, Xid};

/// The version of this report's layout; a new field does not change it, a
/// field whose meaning changes does.
pub(crate) const SCHEMA: u32 = 1;

/// Everything one node knows about itself that the checks need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct NodeFacts {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The `multinode` version that wrote the report.
    pub version: String,
    /// `gethostname()`.
    pub hostname: String,
    /// UNIX time in milliseconds when the report was finished.
    pub time_ms: u64,
    /// Which kernel and network namespace this is: nodes that share both share loopback.
    pub machine: MachineIdentity,
    /// The environment contract as this node resolves it.
    pub job: JobFacts,
    /// The TCP connection to the head's rendezvous address.
    pub rendezvous: Option<Rendezvous>,
    /// Every host name of the hostlist (IP literals left out), as this node resolves it.
    pub names: BTreeMap<String, Resolution>,
    pub memlock: Memlock,
    pub fabric: Fabric,
    pub gpus: Gpus,
    /// CUDA toolkits found on this node (system toolkit, PyTorch's), in that order.
    pub cuda_toolkits: Vec<Toolkit>,
    /// What the launchers meet here: settings that must agree across nodes,
    /// MPI's launcher variables, the job's software versions, `/dev/shm`.
    pub settings: Settings,
    /// Where the processes would be bound: the job's CPUs, the GPUs' NUMA nodes.
    pub affinity: Affinity,
    /// The GPUs' error and link state (`check --gpu` only: absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_health: Option<GpuHealthFacts>,
    /// Each GPU's speed, measured with the job's torch (`check --gpu` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_speed: Option<GpuSpeedFacts>,
}

/// What the speed probe measured, or why it did not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct GpuSpeedFacts {
    /// Why nothing was measured: no torch, no CUDA GPU for it (one line).
    pub skipped: Option<String>,
    /// Why the probe failed or was killed at its limit.
    pub error: Option<String>,
    /// The `python3` that ran it and its torch's `__version__`.
    pub python: Option<String>,
    pub torch: Option<String>,
    /// One a GPU, in CUDA's order (ordinal 0 is `gpus.devices[0]`).
    pub gpus: Vec<GpuSpeed>,
}

/// One GPU's speed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct GpuSpeed {
    pub ordinal: u32,
    pub name: String,
    /// bf16 matmul, 8192³.
    pub matmul_tflops: f64,
    /// Pinned copies of 256 MiB.
    pub h2d_gbs: f64,
    pub d2h_gbs: f64,
}

/// What `check --gpu` gathers on a node: the health query, the NVLinks,
/// the kernel log's Xid lines; each with how its source answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct GpuHealthFacts {
    /// How the health query ran.
    pub smi: SmiStatus,
    /// Why it failed (its first line), or why its output could not be read.
    pub error: Option<String>,
    /// The GPUs the job sees, as the query reports them.
    pub devices: Vec<GpuHealth>,
    /// How `nvidia-smi nvlink --status` ran.
    pub nvlink_smi: SmiStatus,
    pub nvlink_error: Option<String>,
    /// Every link listed; empty: no NVLink.
    pub nvlinks: Vec<NvLink>,
    /// Why the kernel log could not be read (`dmesg` refused, absent, hung);
    /// `None`: it was read.
    pub kernel_log_error: Option<String>,
    /// The driver's Xid lines since boot.
    pub xids: Vec<Xid>,
}

/// What binding each process to its GPU's NUMA node meets here (docs/binding.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Affinity {
    /// The CPUs the job's processes may use here (`Cpus_allowed_list` of
    /// `check --local`, which runs as they do), as a list: `0-23,48-71`.
    pub allowed_cpus: Option<String>,
    /// The NUMA nodes that have CPUs.
    pub numa_nodes: u32,
    /// The visible GPUs in CUDA's order, each with its NUMA node.
    pub gpus: Vec<GpuNuma>,
    /// `OMP_PROC_BIND` and `KMP_AFFINITY` as set here.
    pub env: BTreeMap<String, String>,
}

/// One visible GPU and its NUMA node, from its PCI bus id through sysfs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct GpuNuma {
    pub index: u32,
    /// `0000:07:00.0`.
    pub bus_id: String,
    /// `None`: none given (`numa_node` is -1) or unreadable.
    pub numa_node: Option<u32>,
    /// That node's CPUs, as a list.
    pub node_cpus: Option<String>,
}

/// Settings that must agree across nodes, and the ones that break a launch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Settings {
    /// Every `NCCL_*` variable, and `OMPI_MCA_plm` and `OMPI_MCA_plm_rsh_agent`, as set here.
    pub env: BTreeMap<String, String>,
    /// `MULTINODE_SSH_WRAPPER` as this node resolves it.
    pub ssh_wrapper: Option<String>,
    /// The job's software next to PyTorch: `torch` (its `__version__`) and
    /// `nccl` (the `nvidia-nccl-cu*` package PyTorch loads).
    pub versions: BTreeMap<String, String>,
    /// `/dev/shm` as `/proc/mounts` shows it; `None` when that could not be read.
    pub dev_shm: Option<DevShm>,
}

/// The `/dev/shm` mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct DevShm {
    pub mounted: bool,
    /// Its `size=` in bytes; `None` without one (tmpfs' default: half the RAM).
    pub size: Option<u64>,
}

/// `/proc/sys/kernel/random/boot_id` and the network namespace (`net:[4026531840]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct MachineIdentity {
    pub boot_id: Option<String>,
    pub netns: Option<String>,
}

/// The contract this node resolved, or why it could not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct JobFacts {
    /// This node's rank.
    pub rank: Option<usize>,
    /// `MULTINODE_NODE_IP` as this node resolves it.
    pub head_ip: Option<IpAddr>,
    /// The one-line error of `multinode env` on this node, if it fails.
    pub error: Option<String>,
}

/// The attempt to connect to `MULTINODE_NODE_IP:PORT`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Rendezvous {
    /// `10.0.0.1:29500`, `[fd00::1]:29500`.
    pub addr: String,
    pub connected: bool,
    /// Why not: `connection refused`, `timed out after 3 s`, ...
    pub error: Option<String>,
    /// How long the connection took to open (or to fail).
    pub elapsed_ms: u64,
    /// The head's clock, when the head's check listener answered.
    pub clock: Option<ClockSample>,
}

/// One exchange with the head's listener: this node's clock before
/// connecting and after the answer, and the head's clock in between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClockSample {
    pub sent_ms: u64,
    pub head_ms: u64,
    pub received_ms: u64,
}

/// What one host name resolves to on this node (getaddrinfo, in its order).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Resolution {
    pub addrs: Vec<IpAddr>,
    pub error: Option<String>,
}

/// A resource limit: a number of bytes, or unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Limit {
    Bytes(u64),
    Unlimited,
}

/// `RLIMIT_MEMLOCK`, soft and hard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Memlock {
    pub soft: Option<Limit>,
    pub hard: Option<Limit>,
    pub error: Option<String>,
}

/// InfiniBand/RoCE devices, network interfaces and the variables that steer NCCL and Gloo.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Fabric {
    /// The entries of `/dev/infiniband` (`uverbs0`, `rdma_cm`), `None` when it does not exist.
    pub dev_infiniband: Option<Vec<String>>,
    /// `/sys/class/infiniband`.
    pub ib_devices: Vec<IbDevice>,
    pub interfaces: Vec<NetInterface>,
    /// `NCCL_IB_HCA`, `NCCL_IB_DISABLE`, `NCCL_NET`, `NCCL_SOCKET_IFNAME`,
    /// `GLOO_SOCKET_IFNAME` as set on this node (unset ones left out).
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct IbDevice {
    /// `mlx5_0`.
    pub name: String,
    pub ports: Vec<IbPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct IbPort {
    pub port: u32,
    /// `ACTIVE`, `DOWN`, ... (the word of `ports/N/state`).
    pub state: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
}

impl IbPort {
    pub(crate) fn active(&self) -> bool {
        self.state.eq_ignore_ascii_case("ACTIVE")
    }
}

/// One network interface with its addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct NetInterface {
    pub name: String,
    pub up: bool,
    pub addrs: Vec<IpAddr>,
}

/// What `nvidia-smi` said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SmiStatus {
    /// It ran and listed the GPUs (possibly none).
    Ok,
    /// Not on `PATH`: no GPUs as far as the job can tell.
    #[default]
    Absent,
    /// It ran and failed (no driver, no device files in the container, ...).
    Failed,
    /// It did not answer in time (a GPU that fell off the bus does this).
    Timeout,
}

/// The GPUs of this node, from `nvidia-smi`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Gpus {
    pub smi: SmiStatus,
    /// The first line of what a failing `nvidia-smi` printed.
    pub error: Option<String>,
    /// The driver's version, `580.159.04`.
    pub driver_version: Option<String>,
    /// The newest CUDA version the driver supports (`CUDA Version: 13.0` in the header).
    pub cuda_version: Option<String>,
    pub devices: Vec<Gpu>,
}

/// A CUDA toolkit the job's code may be built with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Toolkit {
    /// `version.json`, `nvcc`, `CUDA_VERSION` or `torch`.
    pub source: String,
    /// The file or program it was read from.
    pub path: String,
    /// `12.4` (major.minor).
    pub version: String,
}
