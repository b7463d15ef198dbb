//! Spawning commands as process-group leaders and ending their whole group.
//!
//! Every command `multinode` starts runs in a new session (so a new process
//! group whose id is the child's pid). Ending a command means ending the
//! group: SIGTERM, a grace period, SIGKILL. A [`GroupChild`] that is dropped
//! without [`GroupChild::disarm`] kills its group, so no path leaves it behind.
//!
//! - `spawn`: starting a group leader without copying this process.
//! - `child`: [`GroupChild`], the leader's pipes and its end.
//! - `child_setup`: what every child starts with (default signals, the open-file limit).
//! - `group`: signalling and ending a whole group or session.
//! - `drain`: a command's output pipes after its leader exited (one owner for
//!   the agent's commands and exec_all's local ones).
//! - `outcome`: how a process ended.
//! - `bounded`: a program's output within a time limit ([`run_bounded`],
//!   and [`run_bounded_async`] on a runtime); its group killed on timeout.

mod bounded;
mod child;
mod child_setup;
mod drain;
mod group;
mod outcome;
mod spawn;

pub(crate) use bounded::{KillGroup, dies_with_its_parent};
pub use bounded::{RunOutput, how_it_ended, run_bounded, run_bounded_async};
pub use child::GroupChild;
pub use child_setup::{raise_fd_limit, reset_signals};
pub use drain::{Group, PipeReader, settle};
pub use group::{
    end_blocking, end_group, end_group_after, end_session, kill_group_at, sessions_groups,
    signal_group,
};
pub use outcome::{Outcome, signal_name};
pub use spawn::{Spawn, Stdio};
