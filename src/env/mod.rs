//! The environment contract: resolving it for this node and rendering it.
//!
//! [`resolve_job`] gathers everything the contract says about this node's job
//! into a [`Job`] (`job.rs`); [`contract`] lists its variables for this node, and
//! `Contract::for_rank` for any node (exec_all and the agent use it to start a
//! node's processes: `contract.rs`). `format.rs` prints them.
//! docs/environment.md describes every variable.

mod contract;
mod format;
pub(crate) mod hostlists;
mod job;
pub(crate) mod programs;

pub use contract::{Contract, cmd_env, contract, fill_reached_address};
pub use job::{Job, agent_port, resolve_job, resolve_job_waiting};
