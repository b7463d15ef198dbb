//! `multinode`: the generic multi-node wire-up for torchrun, mpirun and NCCL jobs.
//!
//! - [`cli`]: the clap definitions of every command.
//! - [`topology`]: hostlist syntaxes, scheduler sources, which node this is, the head's address.
//! - [`environ`]: the process environment as a map, read once and passed in.
//! - [`env`]: the environment contract, rendered for `sh` and JSON.
//! - [`keys`]: the client and host keys derived from the job secret.
//! - [`agent`]: the per-node SSH server, process-group supervision and the job lifecycle.
//! - [`transport`]: `mn-ssh` (russh client to an agent or an OpenSSH server), ssh option parsing.
//! - [`protocol`]: what an agent and its clients agree on: control requests, shared variables, keepalives, signal names.
//! - [`exec_all`]: one script on every node: fan-out, output relay, fail-fast, report.
//! - `demo`: `multinode demo`, agents on 127.0.0.x and a real run on them.
//! - `helper`: `multinode install-helper`, the generic-helper built into the binary.
//! - [`check`]: `multinode check`, the preflight of every node for multi-node pitfalls.
//! - `read_limit`: reading files and streams with a size limit (`/dev/zero` must not fill the memory).
//! - `exit_info`: what a node saw of a command's end (OOM kills in its cgroup, a core file).
//! - [`process`]: spawning commands as group leaders and ending their whole group.
//! - [`signals`]: the signals a command handles, as one stream.
//! - `stdio`: this process's stdout and stderr, written unbuffered and without panics.
//! - [`supervise`]: the small parent of every local command, ending it when `multinode` dies.
//! - [`exit_code`]: the exit codes `multinode` chooses, named.
//!
//! `main` only turns the outcome of [`run_from_args`] into an exit code.

pub mod agent;
pub mod check;
pub mod cli;
mod demo;
pub mod env;
pub mod environ;
pub mod error;
pub mod exec_all;
pub mod exit_code;
pub(crate) mod exit_info;
mod helper;
pub mod keys;
pub mod process;
pub mod protocol;
pub mod signals;
pub mod snapshot;
pub(crate) mod stdio;
pub mod supervise;
pub mod topology;
pub mod transport;

mod logging;
mod read_limit;
mod run;

pub use run::{Personality, run_from_args, run_personality};
