//! A live snapshot of a running job: what every process of each node's
//! command tree is doing right now.
//!
//! - `procfs`: this node's processes from `/proc` (pure parsers, then the
//!   readers): the trees under given roots, CPU % over a short window, RSS,
//!   wchan or the current syscall, elapsed time, command line.
//! - `pystack`: Python stacks through `py-spy dump`, when py-spy is installed.
//! - `node_snapshot`: one node's snapshot as it travels, its processes.
//! - `take`: one node's snapshot, the three above at once, bounded in time.
//! - `alike`: nodes whose processes do the same thing folded into one entry,
//!   the odd ones first (as `clush -b` folds output). Pure.
//! - `ps_render`: the table for people and the JSON for programs. Pure.
//! - `samples`: where a process's time goes, from several looks over the
//!   window (its state; py-spy's stacks inside a collective or a wait).
//! - `watch`: what a running command was started as (`RANK`) and has
//!   printed (when, its last lines) and when it beat its heartbeat.
//! - `ras`: NCCL's RAS service on this node, asked for its status.
//! - `tell_agent`: a channel on which exec_all tells this machine's agent
//!   something while it runs (its own node's output, its ranks' start).
//! - `run_start`: where a run's start went (each rank's connect, login,
//!   spawn, first line), as exec_all shows it to its machine's agent.
//! - `ranks`: with several processes a node, each command's tree labelled
//!   with its `RANK` and `LOCAL_RANK`, and a node split into its ranks for
//!   the table (pure); the rank a `multinode shell --rank` looks for.
//! - `survey`: the head's side: every node's agent asked at once; exec_all's
//!   own node shown by this machine's agent (`show_in_agent`).
//!
//! The agent answers `#multinode:snapshot` with [`take`] over the commands it
//! runs (`agent/snapshot.rs`); `multinode ps`, `SIGUSR1` to `mn-exec-all` and
//! `--snapshot-on-timeout` gather and print it.

mod alike;
mod node_snapshot;
mod procfs;
mod ps_render;
mod pystack;
mod ranks;
pub(crate) mod ras;
mod ras_owner;
pub(crate) mod run_start;
mod samples;
pub(crate) mod survey;
mod take;
mod tell_agent;
mod trees;
pub(crate) mod watch;

pub use crate::nvidia_smi::GpuDevice;
pub use node_snapshot::{CommandInfo, NodeSnapshot, Proc};
pub(crate) use node_snapshot::{unix_ms, unix_ms_of};
pub use samples::Samples;

pub(crate) use alike::{fold, place};
pub(crate) use procfs::{is_own_group, pid_namespace};
pub(crate) use ps_render::{left_out, render_json, render_table};
pub(crate) use ranks::{Found, claimed_line, claimed_twice};
pub(crate) use take::{Options, take};
