//! exec_all: one script on every node at once, `RANK` set per node. A run
//! is planned, then one task a node runs its leg, and the dispatcher collects.
//!
//! - `entry`: an invocation run, `collect` for `check`, the one runtime.
//! - `invocation`: exec-all's `main`: its command line read once (the job, the options, the role).
//! - `one_launch`: one launch over a job's nodes (an attempt, a health check).
//! - `options`: the validated options of a run, from exec-all's arguments.
//! - `script`: what each node runs, and the environment it gets.
//! - `plan`: one spec per node task (rank, host, leg, command, variables,
//!   output settings, a relay's group); pure.
//! - `procs`: several processes a node (`--nproc-per-node`): their ranks,
//!   torchrun's worker contract, a process's bound command; pure.
//! - `reach`: how the other nodes are reached, decided once a run (`Reach`).
//! - `leg`: a started command and its messages; `channel_leg`: over SSH (an
//!   agent, sshd); `process_leg`: a process here (this node, a wrapper);
//!   `leg_kind`: the four kinds, each what it gives its node.
//! - `node`: one task per node, one loop over any leg.
//! - `sink`: a node's output cut into lines; `writer`: the one writer thread.
//! - `files`: `--output DIR`, a file per rank and stream.
//! - `attempts`: restarts: a run as attempts over the nodes the restart policy gives.
//!   `health_check`: the check before each; `attempt_lines`: what they say on stderr.
//! - `dispatch`: the one owner of a run: events, signals, timers, fail-fast.
//! - `dispatch_loop`: the dispatcher's loop: its sources, one wake at a time.
//! - `dispatch_spec`: what a run's dispatcher is given: what to do, its
//!   handle on each task, the channels it reads.
//! - `live`: what a run says while it runs (progress line, snapshots).
//! - `event`: what node tasks and the dispatcher tell each other.
//! - `record`: what a run keeps of each node, and how it ended.
//! - `relay`: past `--fanout` nodes, groups of nodes run through one of theirs.
//! - `relay_record`: a relay's records of its group, sent to its head on stderr.
//! - `run_report`: the failure table and `--report FILE`.
//! - `verdict`: the first failure: which node, how, OOM, core, its last lines.
//! - `nccl_line`: which output lines are NCCL's warnings and errors, and its cause.
//! - `error_line`: the program's own error in its output (a traceback's exception, ...).
//! - `grouped_output`: `--group`, identical outputs printed once with their ranks.
//! - `finish`: what the user reads at the end: groups, the table, `--report FILE`.

mod attempt_lines;
mod attempts;
mod channel_leg;
mod dispatch;
mod dispatch_loop;
mod dispatch_spec;
mod entry;
mod error_line;
mod event;
mod files;
mod finish;
mod grouped_output;
mod health_check;
mod invocation;
mod job_store;
mod leg;
mod leg_kind;
mod live;
mod nccl_line;
mod node;
mod node_conn;
mod one_launch;
mod options;
mod plan;
mod process_leg;
mod procs;
mod progress;
mod reach;
mod record;
mod relay;
mod relay_record;
mod run_report;
pub mod script;
mod sink;
mod verdict;
mod writer;

pub(crate) use entry::on_runtime;
pub use entry::{NodeCapture, collect};
pub(crate) use finish::finish_output;
pub use invocation::main;
pub(crate) use one_launch::launch;
pub(crate) use options::RunOptions;
pub(crate) use record::NodeOutcome;
