//! Spawning commands as process-group leaders and ending their whole group.
//!
//! Every command `multinode` starts runs in a new session (so a new process
//! group whose id is the child's pid). Ending a command means ending the
//! group: SIGTERM, a grace period, SIGKILL. A [`GroupChild`] that is dropped
//! without [`GroupChild::disarm`] kills its group, so no path leaves it behind.
//!
//! - `spawn`: starting a group leader without copying this process.
//! - `child`: [`GroupChild`], the leader's pipes and its end.
//! - `group`: signalling and ending a whole group or session.
//! - `drain`: a command's output pipes after its leader exited (one owner for
//!   the agent's commands and exec_all's local ones).
//! - `outcome`: how a process ended.
//! - here: [`run_bounded`], a program's output within a time limit.

use std::time::Duration;

mod child;
mod drain;
mod group;
mod outcome;
mod spawn;

pub use child::{GroupChild, raise_fd_limit, reset_signals};
pub use drain::{Group, PipeReader, settle};
pub use group::{
    end_blocking, end_group, end_group_after, end_session, kill_group_at, sessions_groups,
    signal_group,
};
pub use outcome::{Outcome, signal_name};
pub use spawn::{Spawn, Stdio};

/// How a program run by [`run_bounded`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutput {
    /// Not found (not on `PATH`, or the path does not exist).
    NotFound,
    /// It could not be started for another reason.
    SpawnError(String),
    /// It did not exit within the time given; it was killed.
    TimedOut,
    /// It exited (`code` is `None` when a signal ended it).
    Exited {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    },
}

/// Runs a program with a time limit, reading its output as it comes (a
/// grandchild that keeps a pipe open delays the answer by at most the
/// limit). On timeout the program is killed and not waited for: a process
/// stuck in the kernel (a GPU that fell off the bus) would not die anyway.
pub fn run_bounded(program: &str, args: &[&str], timeout: Duration) -> RunOutput {
    let deadline = std::time::Instant::now() + timeout;
    let mut child = match std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return RunOutput::NotFound,
        Err(e) => return RunOutput::SpawnError(e.to_string()),
    };
    let reader = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(mut pipe) = pipe {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.read_to_end(&mut buf);
                let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
            });
        }
        rx
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                return RunOutput::TimedOut;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return RunOutput::SpawnError(e.to_string()),
        }
    };
    let left = |rx: &std::sync::mpsc::Receiver<String>| {
        let wait = deadline.saturating_duration_since(std::time::Instant::now());
        rx.recv_timeout(wait).unwrap_or_default()
    };
    RunOutput::Exited {
        code: status.code(),
        stdout: left(&out),
        stderr: left(&err),
    }
}
