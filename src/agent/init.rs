//! When the agent is PID 1 (a container's entrypoint), nobody else reaps the
//! orphans of its commands and the kernel ignores signals PID 1 does not
//! handle. So PID 1 forks: the child becomes the agent, the parent stays a
//! minimal init that reaps every zombie, forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT/
//! SIGUSR1/SIGUSR2 to the agent, and exits with the agent's status.
//! `MULTINODE_NO_INIT=1` turns this off (for an image that has its own init).

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

use crate::error::Error;
use crate::signals::FORWARDED_SIGNALS;
use crate::vars;

/// Returns in the agent process; in the init process it never returns.
/// Must run before any thread exists (before the tokio runtime).
pub(crate) fn become_init_if_pid1() -> Result<(), Error> {
    if std::process::id() != 1 || std::env::var_os(vars::NO_INIT).is_some_and(|v| v == "1") {
        return Ok(());
    }
    let mut set = SigSet::empty();
    for &signo in FORWARDED_SIGNALS {
        set.add(Signal::try_from(signo).expect("a standard signal"));
    }
    set.add(Signal::SIGCHLD);
    set.thread_block()
        .map_err(|e| Error::Failed(format!("cannot block signals: {e}")))?;
    // SAFETY: single-threaded at this point (no runtime yet), so fork is sound.
    match unsafe { fork() } {
        Err(e) => Err(Error::Failed(format!(
            "cannot fork the agent from init: {e}"
        ))),
        Ok(ForkResult::Child) => {
            set.thread_unblock()
                .map_err(|e| Error::Failed(format!("cannot unblock signals: {e}")))?;
            Ok(())
        }
        Ok(ForkResult::Parent { child }) => init_loop(child, &set),
    }
}

fn init_loop(agent: Pid, set: &SigSet) -> ! {
    loop {
        let sig = match set.wait() {
            Ok(sig) => sig,
            Err(_) => continue,
        };
        if sig != Signal::SIGCHLD {
            let _ = nix::sys::signal::kill(agent, sig);
            continue;
        }
        // Reap everything that has exited; the agent's end is ours.
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == agent => std::process::exit(code),
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == agent => {
                    std::process::exit(crate::exit_code::from_signal(sig as i32))
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}
