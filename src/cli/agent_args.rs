//! The agent and its helpers: `multinode agent`, `keygen`, and the internal
//! `supervise` and `keep-groups`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::topology_args::TopologyArgs;
use super::value_parsers::seconds;
use crate::{defaults, vars};

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

#[derive(Debug, Args)]
pub struct KeepGroupsArgs {
    /// Seconds between SIGTERM and SIGKILL once the agent is gone.
    #[arg(long, default_value = defaults::GRACE.text, value_parser = seconds)]
    pub grace: Duration,
}
