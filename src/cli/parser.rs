//! The command line as a whole: `multinode [-v] COMMAND`, and the commands.

use clap::{Parser, Subcommand};

use super::agent_args::{AgentArgs, KeepGroupsArgs, KeygenArgs, SuperviseArgs};
use super::exec_all_args::{ExecAllArgs, exec_all_flags};
use super::job_args::{PsArgs, ShellArgs, TopArgs};
use super::setup_args::{BindArgs, CheckArgs, DemoArgs, InstallHelperArgs};
use super::ssh_help::SshArgs;
use super::topology_args::{EnvArgs, HostsArgs};

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
