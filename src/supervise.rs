//! `multinode supervise [--grace S] -- COMMAND...`: the parent of every command
//! `multinode` starts on its own machine (exec_all's local node, an external
//! wrapper per node, the demo's agents).
//!
//! Its caller spawns it as the leader of a new process group; it runs COMMAND
//! in that same group and waits. Signals for the command are sent by the
//! caller to the whole group (the supervisor ignores them). If the caller
//! dies, even by SIGKILL, the supervisor ends the group: SIGTERM, the grace
//! period, SIGKILL. It exits as COMMAND did (same code, or same signal).
//!
//! It is a plain single-threaded program (no async runtime), so the
//! parent-death signal and signal masks behave as documented.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{self, SigHandler, SigSet};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getppid};

use crate::cli::SuperviseArgs;
use crate::error::Error;
use crate::signals::FORWARDED_SIGNALS;

/// How often the supervisor checks that its parent is still there, in case
/// the parent-death signal was lost (the parent thread ended earlier).
const PARENT_CHECK: Duration = Duration::from_millis(500);

/// The argv that runs `command` under a supervisor; `remove`: a file of the
/// command's that its caller removes, which the supervisor removes (with
/// everything in it, should the command have made it a directory) when
/// the caller died (`--remove`).
pub fn wrap(
    bin: &std::path::Path,
    grace: Duration,
    remove: Option<&std::path::Path>,
    command: &[OsString],
) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("supervise")
        .arg("--grace")
        .arg(format!("{:.3}", grace.as_secs_f64()));
    if let Some(path) = remove {
        cmd.arg("--remove").arg(path);
    }
    cmd.arg("--").args(command);
    cmd
}

pub fn main(args: SuperviseArgs) -> Result<i32, Error> {
    let grace = args.grace;
    let parent = getppid();
    let pdeath = parent_death_signal();
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and has no memory effects.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, pdeath as libc::c_ulong, 0, 0, 0);
    }
    if getppid() != parent {
        // The parent died before the prctl took effect.
        return Ok(crate::exit_code::CONNECTION_FAILED);
    }
    // SAFETY: zeroed sigset_t values are initialised by sigemptyset before use;
    // the calls only touch those sets and this thread's mask.
    let waited = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, pdeath);
        // The signals meant for the command are blocked, not ignored: one that
        // reaches the child between fork and exec stays pending there, and is
        // delivered once the child restores the mask (ignored, it would be lost).
        let mut blocked = set;
        // SIGPIPE too: a caller's closed pipe is the command's business.
        for &sig in FORWARDED_SIGNALS.iter().chain(&[libc::SIGPIPE]) {
            libc::sigaddset(&mut blocked, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
        set
    };

    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let mut cmd = Command::new(program);
    cmd.args(rest);
    // SAFETY: between fork and exec the child only resets signal state
    // (async-signal-safe calls).
    unsafe {
        cmd.pre_exec(|| {
            crate::process::reset_signals();
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let program = program.to_string_lossy();
            crate::stdio::eprint(&format!(
                "multinode: error: cannot run {program}: {e}{}\n",
                cannot_run_hint(&program, &e)
            ));
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                crate::exit_code::CANNOT_EXECUTE
            });
        }
    };
    let child = Pid::from_raw(child.id() as i32);
    loop {
        match wait_signal(&waited, PARENT_CHECK) {
            Some(sig) if sig == libc::SIGCHLD => {
                if let Some(code) = reap(child) {
                    return Ok(code);
                }
            }
            Some(sig) if sig == pdeath => end_group(child, grace, args.remove.as_deref()),
            _ => {
                if getppid() != parent {
                    end_group(child, grace, args.remove.as_deref());
                }
            }
        }
    }
}

/// SIGRTMIN+1: never among the signals callers forward to the group.
fn parent_death_signal() -> i32 {
    libc::SIGRTMIN() + 1
}

fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        // `as _`: time_t is a deprecated alias on musl (it becomes 64-bit there).
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: set and ts are valid for the call; info may be null.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

/// The command's exit as a code for us to exit with; signals are re-raised.
fn reap(child: Pid) -> Option<i32> {
    match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Some(code),
        Ok(WaitStatus::Signaled(_, sig, _)) => {
            // Die of the same signal, so our caller sees what the command saw.
            // SAFETY: restoring the default action before raising it.
            unsafe {
                let _ = signal::signal(sig, SigHandler::SigDfl);
            }
            let mut set = SigSet::empty();
            set.add(sig);
            let _ = set.thread_unblock();
            let _ = signal::raise(sig);
            Some(crate::exit_code::from_signal(sig as i32))
        }
        Ok(_) | Err(_) => None,
    }
}

/// The caller is gone: end the whole group, this process last. `remove`
/// goes just before the SIGKILL, which ends this process too (a command
/// still ending could have touched it, and `touch` makes a file again);
/// whatever the command made of it goes whole, no link followed.
fn end_group(child: Pid, grace: Duration, remove: Option<&std::path::Path>) -> ! {
    let group = getpgrp();
    // This process is in the group too: the command's exit is what counts.
    crate::process::end_blocking(
        |sig| {
            if sig == signal::Signal::SIGKILL
                && let Some(path) = remove
            {
                let _ = crate::private_files::remove_all(path);
            }
            let _ = signal::killpg(group, sig);
        },
        || {
            matches!(
                waitpid(child, Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
            )
        },
        grace,
    );
    std::process::exit(crate::exit_code::CONNECTION_FAILED)
}

/// What to do when `program` cannot be started: the usual newcomer mistakes.
fn cannot_run_hint(program: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => format!(
            "; make it executable (chmod +x {program}) or name its interpreter (sh {program})"
        ),
        std::io::ErrorKind::NotFound if program.contains('/') => {
            "; check the path (a relative one starts from the current directory)".to_string()
        }
        std::io::ErrorKind::NotFound => "; it is not on PATH: give its path".to_string(),
        _ => String::new(),
    }
}
