//! `multinode`: the generic multi-node wire-up for torchrun, mpirun and NCCL jobs.
//!
//! - `cli`: the clap definitions of every command.
//! - `binding`: each process bound to its GPU's NUMA node; `multinode bind`.
//! - `topology`: hostlist syntaxes, scheduler sources, which node this is, the head's address.
//! - `env_map`: the process environment as a map, read once and passed in.
//! - `env`: the environment contract, rendered for `sh` and JSON.
//! - [`keys`]: the client and host keys derived from the job secret.
//! - `agent`: the per-node SSH server, process-group supervision and the job lifecycle.
//! - [`transport`]: `mn-ssh` (russh client to an agent or an OpenSSH server), ssh option parsing.
//! - `protocol`: what an agent and its clients agree on: control requests, shared variables, keepalives, signal names.
//! - `exec_all`: one script on every node: fan-out, output passed on, fail-fast, report.
//! - `demo`: `multinode demo`, agents on 127.0.0.x and a real run on them.
//! - `helper`: `multinode install-helper`, the generic-helper built into the binary.
//! - `check`: `multinode check`, the preflight of every node for multi-node pitfalls.
//! - `read_limit`: reading files and streams with a size limit (`/dev/zero` must not fill the memory).
//! - `nvidia_smi`: running `nvidia-smi` and reading it, for topology, `check` and `snapshot`.
//! - `exit_info`: what a node saw of a command's end (OOM kills in its cgroup, a core file).
//! - `heartbeat`: a command's heartbeat file, watched for progress without output, and passed on.
//! - `process`: spawning commands as group leaders and ending their whole group.
//! - `signals`: the signals a command handles, as one stream.
//! - `stdio`: this process's stdout and stderr, written unbuffered and without panics.
//! - `supervise`: the small parent of every local command, ending it when `multinode` dies.
//! - `exit_code`: the exit codes `multinode` chooses, named.
//! - `sh`: quoting for `sh`; `table`: text tables.
//! - `shell`: `multinode shell`, a terminal on one node of the running job, with its environment.
//! - `tcp_state`: what the kernel knows of one TCP connection (`TCP_INFO`).
//! - `snapshot`: a live snapshot of every node's commands (`multinode ps`).
//! - `top`: `multinode top`, every rank live and which one is the straggler.
//! - `restart`: the restart policy (pure): which nodes an attempt runs on, who is excluded, when to stop.
//! - `defaults`: every default of a flag or a variable, written once, for clap and the runtime alike.
//! - `vars`: every `MULTINODE_*` variable name and the contract's list of names, written once.
//! - `values`: the one parser of each kind of value (seconds, a port) for flags and variables alike.
//!
//! Only `keys`, `transport::client` and the entry points are public (the
//! integration tests use them); the rest is `pub(crate)`, so dead code shows.
//! docs/ARCHITECTURE.md ("Layers") gives the order modules import each other in.
//!
//! `main` only turns the outcome of [`run_from_args`] into an exit code.

pub(crate) mod agent;
pub(crate) mod binding;
pub(crate) mod check;
pub(crate) mod cli;
pub(crate) mod defaults;
mod demo;
pub(crate) mod env;
pub(crate) mod env_map;
pub(crate) mod error;
pub(crate) mod exec_all;
pub(crate) mod exit_code;
pub(crate) mod exit_info;
pub(crate) mod heartbeat;
mod helper;
pub mod keys;
pub(crate) mod nvidia_smi;
pub(crate) mod process;
pub(crate) mod protocol;
mod restart;
mod shell;
pub(crate) mod signals;
pub(crate) mod snapshot;
pub(crate) mod stdio;
pub(crate) mod supervise;
pub(crate) mod top;
pub(crate) mod topology;
pub mod transport;
pub(crate) mod values;
pub(crate) mod vars;

mod logging;
mod private_files;
mod read_limit;
mod run;
mod sh;
mod table;
mod tcp_state;

pub use run::{Personality, run_from_args, run_personality};
