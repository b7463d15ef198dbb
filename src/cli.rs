//! The clap definitions of every command, and nothing else.
//!
//! `mn-ssh`'s options are not parsed by clap: ssh's option syntax
//! (`-oKey=val`, bundled flags, options that mpirun and MPICH put before the
//! host) is parsed by `transport::ssh_args`. Its `--help` is still clap's,
//! rendered from [`SshHelp`].

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::{defaults, vars};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "multinode",
    version,
    about = "Multi-node job launcher: topology, an SSH agent and wrapper, and exec_all",
    long_about = None,
    propagate_version = true,
)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print this node's job environment (eval "$(multinode env)").
    Env(EnvArgs),
    /// Print the expanded topology: one node a line.
    Hosts(HostsArgs),
    /// Run COMMAND on HOST with ssh semantics (alias: mn-ssh).
    #[command(disable_help_flag = true)]
    Ssh(SshArgs),
    /// Run one script on every node, RANK set per node (alias: mn-exec-all).
    #[command(name = exec_all_flags::COMMAND)]
    ExecAll(Box<ExecAllArgs>),
    /// The per-node agent: an SSH server for the job, and the job's lifecycle.
    Agent(AgentArgs),
    /// Write the client key derived from the job secret in OpenSSH format.
    Keygen(KeygenArgs),
    /// Run a real multi-node job on this machine: agents on loopback addresses.
    Demo(DemoArgs),
    /// Preflight every node for the known multi-node pitfalls.
    Check(CheckArgs),
    /// Install the generic-helper that job scripts source (. /multinode/generic-helper).
    InstallHelper(InstallHelperArgs),
    /// What every node of the running job is doing: processes, stacks, GPUs.
    Ps(PsArgs),
    /// Every rank of the running job, live: state, CPU, GPUs, output, progress,
    /// where the time goes, and which rank is the straggler.
    Top(TopArgs),
    /// A terminal on a node of the running job (by node rank or host, or by a
    /// process's `--rank`; default: node 0), with that node's job environment.
    Shell(ShellArgs),
    /// Bind this process to its GPU's NUMA node, then exec CMD (under
    /// torchrun, srun or mpirun: `multinode bind -- CMD ARGS...`).
    Bind(BindArgs),
    /// Internal: print how many GPUs this node's processes see
    /// (`CUDA_VISIBLE_DEVICES`, else every GPU): `--nproc-per-node gpu`.
    #[command(hide = true)]
    CountGpus,
    /// Internal: run COMMAND and end its process group when the parent dies.
    #[command(hide = true)]
    Supervise(SuperviseArgs),
    /// Internal: the agent's group keeper (ends its commands if the agent dies).
    #[command(hide = true)]
    KeepGroups(KeepGroupsArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EnvFormat {
    /// `export NAME='value'` lines, safe to eval whatever the values hold.
    Sh,
    /// One JSON object.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TableFormat {
    /// An aligned table for people.
    Table,
    /// JSON for programs.
    Json,
}

/// Where the topology comes from, and which node this one is.
#[derive(Debug, Clone, Default, Args)]
pub struct TopologyArgs {
    /// Hostlist: `host1:2,host2:2`, `gpu[01-04]`, `node[1-2]:4` (overrides every other source).
    #[arg(long, value_name = "HOSTLIST")]
    pub hosts: Option<String>,
    /// Hostfile in Open MPI (`host slots=N`), MPICH (`host:N`) or plain form.
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<PathBuf>,
    /// This node's rank, when several nodes share one machine [env: MULTINODE_NODE_RANK].
    #[arg(long, value_name = "N")]
    pub node_rank: Option<usize>,
    /// Interface whose address is this node's (MULTINODE_LOCAL_IP) and, on the head,
    /// the head's (MULTINODE_NODE_IP) [env: MULTINODE_IFNAME, NCCL_SOCKET_IFNAME].
    #[arg(long, value_name = "IFNAME")]
    pub iface: Option<String>,
}

impl TopologyArgs {
    /// The flags as the domain takes them.
    pub fn inputs(&self) -> crate::topology::Inputs {
        crate::topology::Inputs {
            hosts: self.hosts.clone(),
            hostfile: self.hostfile.clone(),
            node_rank: self.node_rank,
            iface: self.iface.clone(),
            spares: None,
        }
    }
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[arg(long, value_enum, default_value_t = EnvFormat::Sh)]
    pub format: EnvFormat,
}

#[derive(Debug, Args)]
pub struct HostsArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
    /// Do not resolve addresses (pure expansion; no DNS).
    #[arg(long)]
    pub no_resolve: bool,
}

#[derive(Debug, Args)]
pub struct SshArgs {
    /// ssh-style options, then [user@]HOST, then COMMAND [ARGS...].
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// `mn-ssh --help`: the options `transport::ssh_args` understands, for clap
/// to render. Never used to parse (ssh's syntax is not clap's).
#[derive(Debug, Parser)]
#[command(
    name = "mn-ssh",
    version,
    about = "Run COMMAND on HOST with ssh semantics: through the job's `multinode agent` when \
MULTINODE_SECRET (or MULTINODE_SECRET_FILE) is set, else through the host's OpenSSH server \
with your keys",
    override_usage = "mn-ssh [OPTIONS] [USER@]HOST [COMMAND [ARGS...]]",
    after_help = "Also accepted, as mpirun, MPICH, scp, sftp, rsync and git pass them: -x, -T, \
-F FILE and the other flags that change nothing here. Refused, with a message: forwarding \
other than -L (-R, -D, -W, -A, -X, -Y), -J, -f, -O.\n\nExit code: the remote command's; 128+N \
when it died of signal N; 255 when the connection failed."
)]
pub struct SshHelp {
    #[arg(short = 'p', value_name = "PORT", help = format!(
        "Port [default: an agent's {}, else {}; OpenSSH: 22]",
        vars::AGENT_PORT,
        defaults::AGENT_PORT
    ))]
    pub port: Option<u16>,
    /// Remote user (OpenSSH; an agent runs commands as its own user).
    #[arg(short = 'l', value_name = "USER")]
    pub user: Option<String>,
    /// Private key for OpenSSH [default: ~/.ssh/id_ed25519, id_ecdsa, id_rsa].
    #[arg(short = 'i', value_name = "KEY")]
    pub identity: Vec<PathBuf>,
    /// Port, User, IdentityFile, ConnectTimeout, StrictHostKeyChecking,
    /// UserKnownHostsFile, SendEnv, SetEnv.
    #[arg(short = 'o', value_name = "KEY=VALUE")]
    pub option: Vec<String>,
    /// Forward a local port through the node: connections to [BIND:]PORT
    /// go to HOST:HOSTPORT as the node sees it (its loopback, or a node of the job).
    #[arg(short = 'L', value_name = "[BIND:]PORT:HOST:HOSTPORT")]
    pub local_forward: Vec<String>,
    /// No command: keep the connection and its forwards until a signal.
    #[arg(short = 'N')]
    pub no_command: bool,
    /// COMMAND names a subsystem (`mn-ssh -s HOST sftp`, as scp and sftp run it).
    #[arg(short = 's')]
    pub subsystem: bool,
    /// Print the host, user and port that would be used, and exit (git's probe).
    #[arg(short = 'G')]
    pub print_config: bool,
    /// Read stdin from /dev/null.
    #[arg(short = 'n')]
    pub no_stdin: bool,
    /// Quiet.
    #[arg(short = 'q')]
    pub quiet: bool,
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// [USER@]HOST, then the command and its arguments (joined by spaces, run by the remote shell).
    #[arg(value_name = "HOST", num_args = 0..)]
    pub rest: Vec<OsString>,
}

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
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
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
    #[arg(long = exec_all_flags::MASTER_PORT, value_name = "PORT", help = format!(
        "With --nproc-per-node: MASTER_PORT, rank 0's store on the head [env: {}] [default: {}]",
        vars::MASTER_PORT,
        defaults::MASTER_PORT
    ))]
    pub master_port: Option<u16>,
    /// Internal: this exec_all runs a group for a head; end stderr with its record of the group.
    #[arg(long = exec_all_flags::RELAY_REPORT, hide = true)]
    pub relay_report: bool,
    /// SCRIPT (a file, or - for stdin) then ARGS; with -c, only ARGS.
    #[arg(trailing_var_arg = true, num_args = 0..)]
    pub script_and_args: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[arg(long, value_name = "ADDR:PORT", help = format!(
        "Address to listen on [default: 0.0.0.0:${}, port {}]",
        vars::AGENT_PORT,
        defaults::AGENT_PORT
    ))]
    pub listen: Option<String>,
    /// Read the job secret from FILE instead of MULTINODE_SECRET.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Seconds between SIGTERM and SIGKILL when ending a command's process group.
    #[arg(long, value_name = "SECONDS", default_value = defaults::GRACE.text, value_parser = seconds)]
    pub grace: Duration,
    /// A worker exits after the head has been unreachable this long (seconds).
    #[arg(long, value_name = "SECONDS", default_value = defaults::IDLE_TIMEOUT.text, value_parser = seconds)]
    pub idle_timeout: Duration,
    /// The head waits this long for every worker to answer (seconds).
    #[arg(long, value_name = "SECONDS", default_value = defaults::WAIT_TIMEOUT.text, value_parser = seconds)]
    pub wait_timeout: Duration,
    /// A connection that has not logged in this long after it was accepted is closed (seconds).
    #[arg(long, value_name = "SECONDS", default_value = defaults::LOGIN_TIMEOUT.text, value_parser = seconds)]
    pub login_timeout: Duration,
    /// Share this agent's connections to the nodes on a Unix socket at PATH
    /// (the head of `-- JOB` does so on its own, in a private directory, and
    /// tells JOB with MULTINODE_MUX_SOCKET).
    #[arg(long, value_name = "PATH")]
    pub mux_socket: Option<PathBuf>,
    /// JOB to run on the head once every worker answers.
    #[arg(last = true, value_name = "JOB")]
    pub job: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Read the job secret from FILE instead of MULTINODE_SECRET.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Write the private key here (mode 0600); the public key goes to FILE.pub.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// Also print a known_hosts line for the agents' host key.
    #[arg(long)]
    pub known_hosts: bool,
}

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
pub struct PsArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
    /// Read the job secret from FILE instead of MULTINODE_SECRET.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Give up on a node whose agent does not answer the connection within SECONDS.
    #[arg(long, value_name = "SECONDS", default_value = defaults::SNAPSHOT_CONNECT_TIMEOUT.text, value_parser = seconds)]
    pub connect_timeout: Duration,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Seconds between two refreshes (and, with --once --progress, between
    /// the two samples a step rate needs).
    #[arg(long, value_name = "SECONDS", default_value = defaults::TOP_INTERVAL.text, value_parser = positive_seconds)]
    pub interval: Duration,
    /// Print one table (or JSON object) and exit.
    #[arg(long)]
    pub once: bool,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
    /// A regular expression whose first group is the step number in the
    /// ranks' output, as in 'step (\d+)': adds each rank's step and step rate.
    #[arg(long, value_name = "REGEX")]
    pub progress: Option<String>,
    /// The order of the rows (the `s` key cycles through them live).
    #[arg(long, value_enum, default_value_t = TopSort::Rank)]
    pub sort: TopSort,
    /// Read the job secret from FILE instead of MULTINODE_SECRET.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Give up on a node whose agent does not answer the connection within SECONDS.
    #[arg(long, value_name = "SECONDS", default_value = defaults::SNAPSHOT_CONNECT_TIMEOUT.text, value_parser = seconds)]
    pub connect_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TopSort {
    /// By rank.
    Rank,
    /// The rank that waits least first (the likely straggler).
    Wait,
    /// The slowest step rate first.
    Rate,
    /// The busiest CPU first.
    Cpu,
    /// The oldest last line first.
    Output,
}

#[derive(Debug, Args)]
pub struct ShellArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Read the job secret from FILE instead of MULTINODE_SECRET.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Ask for a terminal even when stdin is not one (as ssh -tt).
    #[arg(short = 't', long = "tty", conflicts_with = "no_tty")]
    pub tty: bool,
    /// Never ask for a terminal (as ssh -T): for pipes and scripts.
    #[arg(short = 'T', long = "no-tty")]
    pub no_tty: bool,
    /// Give up when the node's agent does not answer the connection within SECONDS.
    #[arg(long, value_name = "SECONDS", default_value = defaults::SHELL_CONNECT_TIMEOUT.text, value_parser = seconds)]
    pub connect_timeout: Duration,
    /// The node: its rank in the job's hostlist, or a host name or address
    /// of the job [default: 0, the head].
    #[arg(value_name = "NODE|HOST")]
    pub node: Option<String>,
    /// The node of the process started with RANK=R (with several processes a
    /// node, the global rank the verdict, `--label` and `multinode ps` name):
    /// asked of every node's agent.
    #[arg(long = "rank", value_name = "R", conflicts_with = "node")]
    pub rank: Option<usize>,
    /// A command to run there instead of a shell (its words joined by spaces,
    /// run by the remote shell, as ssh does).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
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

/// `--bind`'s mode.
fn bind_mode(text: &str) -> Result<crate::binding::Mode, String> {
    text.parse()
}

#[derive(Debug, Args)]
pub struct SuperviseArgs {
    /// Seconds between SIGTERM and SIGKILL when the parent died.
    #[arg(long, default_value = defaults::GRACE.text, value_parser = seconds)]
    pub grace: Duration,
    /// A file of the command's (its heartbeat file), removed when the parent
    /// died, just before the group's SIGKILL.
    #[arg(long, value_name = "FILE")]
    pub remove: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

/// A number of seconds above 0 (`--interval`).
fn positive_seconds(value: &str) -> Result<Duration, String> {
    seconds(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{value:?} is not a number of seconds > 0"))
}

/// A number of seconds (`2`, `0.5`), for the flags that take one.
fn seconds(value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{value:?} is not a number of seconds >= 0"))
}

#[derive(Debug, Args)]
pub struct KeepGroupsArgs {
    /// Seconds between SIGTERM and SIGKILL once the agent is gone.
    #[arg(long, default_value = defaults::GRACE.text, value_parser = seconds)]
    pub grace: Duration,
}

/// A count of 1 or more (0 would be a silent guess of what was meant).
fn at_least_one() -> fn(&str) -> Result<usize, String> {
    |text| match text.parse::<usize>() {
        Ok(0) => Err("give 1 or more".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err("give a whole number, 1 or more".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_default_in_seconds_parses_to_its_duration() {
        for d in [
            defaults::GRACE,
            defaults::CONNECT_TIMEOUT,
            defaults::IDLE_TIMEOUT,
            defaults::WAIT_TIMEOUT,
            defaults::LOGIN_TIMEOUT,
            defaults::SNAPSHOT_CONNECT_TIMEOUT,
            defaults::SHELL_CONNECT_TIMEOUT,
            defaults::TOP_INTERVAL,
        ] {
            assert_eq!(seconds(d.text), Ok(d.duration), "{d:?}");
        }
        assert_eq!(
            positive_seconds(defaults::TOP_INTERVAL.text),
            Ok(defaults::TOP_INTERVAL.duration)
        );
    }
}
