//! exec_all: one script on every node.

pub mod demo;

use std::time::Duration;

use crate::cli::ExecAllArgs;
use crate::env::Job;
use crate::error::Error;
use crate::process::Outcome;

/// What one node's command left, for callers that gather output instead of relaying it.
#[derive(Debug, Clone)]
pub struct NodeCapture {
    pub rank: usize,
    pub host: String,
    /// How the command ended, or why the node could not run it (unreachable, lost).
    pub outcome: Result<Outcome, String>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs the shell command line `command` on every node of `job` at once
/// (this node locally, the others through the transport exec_all uses),
/// with the environment contract of each node, and gathers each node's output.
/// Every node gets at most `timeout`.
pub async fn collect(
    _job: &Job,
    _command: &str,
    _timeout: Duration,
) -> Result<Vec<NodeCapture>, Error> {
    Err(Error::usage("exec_all's fan-out is not built yet"))
}

pub fn main(_args: ExecAllArgs) -> Result<i32, Error> {
    Err(Error::usage("`mn-exec-all` is not built yet"))
}
