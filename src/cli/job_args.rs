//! Commands on the running job: `multinode ps`, `top`, `shell`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::topology_args::{TableFormat, TopologyArgs};
use super::value_parsers::{positive_seconds, seconds};
use crate::defaults;

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
