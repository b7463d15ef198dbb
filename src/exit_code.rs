//! The exit codes of every `multinode` command, in one place.
//!
//! Remote and local commands pass their own code through unchanged; these are
//! the codes `multinode` itself chooses.

/// Everything ran and every command exited 0.
pub const SUCCESS: i32 = 0;
/// `multinode check` found a failing check.
pub const CHECK_FAILED: i32 = 1;
/// A run that could not go on, for a reason a line says (exec_all's
/// restarts with no node left to start an attempt on).
pub const RUN_STOPPED: i32 = 1;
/// Bad input: a malformed hostlist, an unknown option, a secret that is too short.
pub const USAGE: i32 = 2;
/// `--timeout` expired (as timeout(1) does).
pub const TIMEOUT: i32 = 124;
/// A command could not be started (`sh` missing, not executable).
pub const CANNOT_EXECUTE: i32 = 126;
/// A node could not be reached or was lost (as ssh(1) does).
pub const CONNECTION_FAILED: i32 = 255;

/// The code a shell gives a process killed by signal `signo`: 128 + N.
pub fn from_signal(signo: i32) -> i32 {
    128 + signo
}
