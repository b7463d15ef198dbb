//! `multinode exec-all` (`mn-exec-all`), and the names of its flags that a
//! head writes on a relay's command line.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::topology_args::TopologyArgs;
use super::value_parsers::{at_least_one, bind_mode, port, positive_seconds, seconds};
use crate::{defaults, vars};

/// The names of exec-all and of its flags that a head writes on a relay's
/// command line (`exec_all::relay`), taken by the clap definitions below:
/// one spelling for both.
pub mod exec_all_flags {
    /// The subcommand.
    pub const COMMAND: &str = "exec-all";
    /// `-c CMD`.
    pub const INLINE: char = 'c';
    pub const RELAY_REPORT: &str = "relay-report";
    pub const NODES: &str = "nodes";
    pub const GRACE: &str = "grace";
    pub const CONNECT_TIMEOUT: &str = "connect-timeout";
    pub const FANOUT: &str = "fanout";
    pub const MAX_CONNECTING: &str = "max-connecting";
    pub const EXPORT: &str = "export";
    pub const LABEL: &str = "label";
    pub const TIMESTAMPS: &str = "timestamps";
    pub const OUTPUT: &str = "output";
    pub const NO_FAIL_FAST: &str = "no-fail-fast";
    pub const NPROC_PER_NODE: &str = "nproc-per-node";
    pub const BIND: &str = "bind";
    pub const MASTER_PORT: &str = "master-port";
    pub const REPORT_BINDINGS: &str = "report-bindings";
}

#[derive(Debug, Args)]
pub struct ExecAllArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Run CMD (a shell command line) instead of a script file.
    #[arg(short = exec_all_flags::INLINE, value_name = "CMD")]
    pub command: Option<OsString>,
    /// Prefix every output line with `RANK HOST: `.
    #[arg(long = exec_all_flags::LABEL)]
    pub label: bool,
    /// Wait for every node even after one failed, and return the first failure.
    #[arg(long = exec_all_flags::NO_FAIL_FAST)]
    pub no_fail_fast: bool,
    /// Seconds between SIGTERM and SIGKILL when ending nodes.
    #[arg(long = exec_all_flags::GRACE, value_name = "SECONDS", default_value = defaults::GRACE.text, value_parser = seconds)]
    pub grace: Duration,
    /// End the run after SECONDS (exit code 124).
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub timeout: Option<Duration>,
    /// Before --timeout ends the run, print what every node is doing (as
    /// `multinode ps`) and put it in the --report.
    #[arg(long)]
    pub snapshot_on_timeout: bool,
    /// Give up on a node that does not connect within SECONDS (exit code 255).
    #[arg(long = exec_all_flags::CONNECT_TIMEOUT, value_name = "SECONDS", default_value = defaults::CONNECT_TIMEOUT.text, value_parser = seconds)]
    pub connect_timeout: Duration,
    /// Run only on these ranks: `0,2-5`.
    #[arg(long = exec_all_flags::NODES, value_name = "RANKS")]
    pub nodes: Option<String>,
    /// Skip these ranks: `1,3`.
    #[arg(long, value_name = "RANKS")]
    pub exclude: Option<String>,
    /// Environment for remote nodes: ALL, NONE, or NAME,NAME,... (like srun --export).
    #[arg(long = exec_all_flags::EXPORT, value_name = "ALL|NONE|NAMES", default_value = defaults::EXPORT)]
    pub export: String,
    /// Write the run's report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Also write each node's stdout and stderr to DIR/RANK.out and DIR/RANK.err.
    #[arg(long = exec_all_flags::OUTPUT, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Prefix every output line with the time it arrived (UTC, milliseconds).
    #[arg(long = exec_all_flags::TIMESTAMPS)]
    pub timestamps: bool,
    /// Print identical outputs of several nodes once, at the end, with their ranks.
    #[arg(long, conflicts_with = "timestamps")]
    pub group: bool,
    /// At most this many connections being set up at once.
    #[arg(long = exec_all_flags::MAX_CONNECTING, value_name = "N", default_value_t = defaults::MAX_CONNECTING, value_parser = at_least_one())]
    pub max_connecting: usize,
    /// Talk to at most N nodes directly; past that, groups of nodes are reached
    /// through one of theirs, which runs exec_all for its group (a tree).
    #[arg(
        long = exec_all_flags::FANOUT,
        value_name = "N",
        env = vars::FANOUT,
        hide_env_values = true,
        default_value_t = defaults::FANOUT,
        value_parser = at_least_one()
    )]
    pub fanout: usize,
    /// After a failed attempt, end the job everywhere and run it again, up to
    /// N times (docs/restarts.md) [env: MULTINODE_MAX_RESTARTS].
    #[arg(long, value_name = "N")]
    pub max_restarts: Option<u32>,
    /// The last K nodes of the hostlist are spares: the job runs on the
    /// others, and a spare takes the place of an excluded node [env: MULTINODE_SPARES].
    #[arg(long, value_name = "K")]
    pub spares: Option<usize>,
    /// Let the run go on with fewer nodes, down to M, when no spare is left
    /// [env: MULTINODE_MIN_NODES].
    #[arg(long, value_name = "M")]
    pub min_nodes: Option<usize>,
    /// Before each attempt, run CMD on every node still in the run; a node
    /// that fails it or takes longer than --health-timeout is excluded
    /// [env: MULTINODE_HEALTH_CHECK].
    #[arg(long, value_name = "CMD")]
    pub health_check: Option<String>,
    /// The most a health check may take on a node (seconds) [env: MULTINODE_HEALTH_TIMEOUT].
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub health_timeout: Option<Duration>,
    /// An attempt in which no node printed anything or touched its heartbeat
    /// file ($MULTINODE_HEARTBEAT_FILE) for SECONDS is hung: a snapshot of every node is taken, and the attempt ends as a failure
    /// (exit code 124) [env: MULTINODE_HANG_TIMEOUT].
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    pub hang_timeout: Option<Duration>,
    /// Start the script N times on every node, each process with torchrun's
    /// worker variables (RANK global, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
    /// ...): N, gpu (the node's visible GPUs) or slots (its slots in the
    /// hostlist) [env: MULTINODE_NPROC_PER_NODE].
    #[arg(long = exec_all_flags::NPROC_PER_NODE, value_name = "N|gpu|slots")]
    pub nproc_per_node: Option<String>,
    /// With --nproc-per-node: bind each process to its GPU's NUMA node
    /// before the script starts: auto, numa, cores or none, as `multinode
    /// bind` [env: MULTINODE_BIND] [default: auto].
    #[arg(long = exec_all_flags::BIND, value_name = "MODE", value_parser = bind_mode)]
    pub bind: Option<crate::binding::Mode>,
    /// With --nproc-per-node: print each process's binding, one line each
    /// (rank, GPU bus id, NUMA node, CPUs), as mpirun's.
    #[arg(long = exec_all_flags::REPORT_BINDINGS)]
    pub report_bindings: bool,
    #[arg(long = exec_all_flags::MASTER_PORT, value_name = "PORT", value_parser = port, help = format!(
        "With --nproc-per-node: MASTER_PORT, rank 0's store on the head [env: {}] [default: {}]",
        vars::MASTER_PORT,
        defaults::MASTER_PORT
    ))]
    pub master_port: Option<u16>,
    /// With --nproc-per-node: who hosts the job's c10d store: auto (exec_all,
    /// for the whole run, where the head's python3 has torch; else rank 0's
    /// process) or off (rank 0's process) [env: MULTINODE_STORE] [default: auto].
    #[arg(long, value_name = "auto|off")]
    pub store: Option<String>,
    /// Internal: this exec_all runs a group for a head; end stderr with its record of the group.
    #[arg(long = exec_all_flags::RELAY_REPORT, hide = true)]
    pub relay_report: bool,
    /// SCRIPT (a file, or - for stdin) then ARGS; with -c, only ARGS.
    #[arg(trailing_var_arg = true, num_args = 0..)]
    pub script_and_args: Vec<OsString>,
}
