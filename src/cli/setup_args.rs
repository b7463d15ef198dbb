//! Setting a job up and checking it: `multinode demo`, `check`,
//! `install-helper`, `bind`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;

use super::topology_args::{TableFormat, TopologyArgs};
use super::value_parsers::bind_mode;
use crate::defaults;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Number of nodes (agents on 127.0.0.2, 127.0.0.3, ...).
    #[arg(long, default_value_t = defaults::DEMO_NODES)]
    pub nodes: usize,
    /// Slots per node.
    #[arg(long, default_value_t = defaults::DEMO_SLOTS)]
    pub slots: u32,
    /// Agent port for the demo.
    #[arg(long, default_value_t = defaults::DEMO_PORT)]
    pub port: u16,
    /// Prefix every output line with `RANK HOST: `.
    #[arg(long)]
    pub label: bool,
    /// The shell command run on every node [default: a greeting with RANK].
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
    /// Treat warnings as failures.
    #[arg(long)]
    pub strict: bool,
    /// The rendezvous port to check on the head.
    #[arg(long, default_value_t = defaults::MASTER_PORT)]
    pub port: u16,
    /// Processes per node the job will start (checked against GPUs).
    #[arg(long, value_name = "N")]
    pub nproc_per_node: Option<u32>,
    /// Also check every GPU's health: ECC errors, retired pages and remapped
    /// rows, persistence mode, PCIe link, clocks and throttle reasons, Xid
    /// errors in the kernel log, NVLink state (docs/check.md).
    #[arg(long)]
    pub gpu: bool,
    /// Run the checks of this node only and print them as JSON (used by the fan-out).
    #[arg(long, hide = true)]
    pub local: bool,
}

#[derive(Debug, Args)]
pub struct InstallHelperArgs {
    /// Directory to write generic-helper into (created if missing).
    #[arg(value_name = "DIR", default_value = defaults::HELPER_DIR)]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct BindArgs {
    /// auto (numa where the machine has several NUMA nodes and one process a
    /// GPU), numa (the CPUs and memory of the GPU's NUMA node), cores (an
    /// exclusive share of them), none [env: MULTINODE_BIND] [default: auto].
    #[arg(long, value_name = "MODE", value_parser = bind_mode)]
    pub bind: Option<crate::binding::Mode>,
    /// Print this process's binding on stderr, one line (as mpirun's).
    #[arg(long)]
    pub report_bindings: bool,
    /// The command and its arguments, exec'd in place of `multinode bind`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}
