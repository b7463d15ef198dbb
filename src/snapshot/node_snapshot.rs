//! One node's snapshot as it travels (`NodeSnapshot`): its commands, each
//! process of their trees (`Proc`), its GPUs; the clock it is stamped with.

use serde::{Deserialize, Serialize};

use super::pystack::Frame;
use super::samples::Samples;
use crate::nvidia_smi::{GpuDevice, GpuUse};

/// One node's snapshot, as its agent (or exec_all, for its own node) took it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// The node's rank in the job (filled in by whoever asked).
    #[serde(default)]
    pub rank: usize,
    #[serde(default)]
    pub host: String,
    /// When it was taken (ms since the Unix epoch, the node's clock).
    #[serde(default)]
    pub taken_ms: u64,
    /// The window CPU % was measured over.
    #[serde(default)]
    pub window_ms: u64,
    /// Every process of the node's commands, parents before children.
    #[serde(default)]
    pub processes: Vec<Proc>,
    /// The processes past a snapshot's bound (`take::PROCESSES_MAX`),
    /// counted, not shown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub processes_left_out: usize,
    /// Whether Python stacks were asked for, and if not, why.
    #[serde(default)]
    pub py_spy: String,
    /// What `nvidia-smi` said when it did not answer (absent: no such program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_note: Option<String>,
    /// Why there is no snapshot of this node (unreachable, an old agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The commands the agent runs (and the groups it was shown), with
    /// what each was started as and has printed (`top`; older agents: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<CommandInfo>,
    /// Each GPU of the node (`top`'s snapshots only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuDevice>,
    /// NCCL's RAS status text from this node's RAS port, when asked and
    /// answered (at most `ras::TEXT_MAX` bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ras: Option<String>,
    /// Where the start went of the runs this machine's exec_alls show
    /// its agent (`top`'s snapshots only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<super::run_start::RunStart>,
    /// One rank's share of a node ([`ranks::Units`]): the node's rank and
    /// the rank's local rank there. Never sent: made where it is shown.
    #[serde(skip)]
    pub node_rank: Option<usize>,
    #[serde(skip)]
    pub local_rank: Option<usize>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One command an agent runs (or a group it was shown), for `top`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CommandInfo {
    /// Its process group (its leader's pid).
    pub pgid: i32,
    /// `RANK` and `LOCAL_RANK` in the environment it was started with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<usize>,
    /// Milliseconds since it last printed (absent: nothing yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_age_ms: Option<u64>,
    /// Milliseconds since its last heartbeat (absent: none yet, or no
    /// heartbeat file: the run does not watch heartbeats).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_age_ms: Option<u64>,
    /// Milliseconds since it started (its spawn; absent: an older agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_ms: Option<u64>,
    /// From its start to its first output, and to its first heartbeat
    /// (absent: none yet): where a rank's start went, for `top`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_output_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_beat_after_ms: Option<u64>,
    /// Its last complete lines (stdout's, then stderr's), when asked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tail: Vec<String>,
}

/// One process of a node's command tree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    /// Its process group (each command the agent runs leads one).
    pub pgid: i32,
    /// `R`, `S`, `D`, `Z`, `T`, ... as `/proc/PID/stat` says.
    pub state: String,
    /// CPU time over the window, in % of one CPU (a busy process with
    /// several threads can go past 100).
    pub cpu_pct: f64,
    pub rss_kib: u64,
    /// Where in the kernel it sleeps (`/proc/PID/wchan`), or else the
    /// syscall it is in (`/proc/PID/syscall`), when either is readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wchan: Option<String>,
    pub elapsed_s: f64,
    pub comm: String,
    pub cmdline: String,
    /// The CPUs it may run on (`Cpus_allowed_list` of `/proc/PID/status`,
    /// the kernel's list form: `0-23,48-71`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// With several processes a node: the `RANK` and `LOCAL_RANK` of the
    /// command whose tree it is in (`ranks::label`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuUse>,
    /// The Python stack of its main thread, innermost frame first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<Vec<Frame>>,
    /// Whether `py-spy` saw the main thread idle (waiting) or active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_idle: Option<bool>,
    /// Why a Python process has no stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_note: Option<String>,
    /// Where its time went over the window (`top`'s snapshots only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Samples>,
}

impl Proc {
    /// A Python interpreter, by its executable or, when that is not readable, its name.
    pub(crate) fn is_python(&self) -> bool {
        let argv0 = self.cmdline.split(' ').next().unwrap_or_default();
        let base = argv0.rsplit('/').next().unwrap_or_default();
        base.starts_with("python") || self.comm.starts_with("python")
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    unix_ms_of(std::time::SystemTime::now())
}

/// `t` in milliseconds since the Unix epoch.
pub(crate) fn unix_ms_of(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
