//! What every child of `multinode` starts with: default signal
//! dispositions and an empty mask ([`reset_signals`]), and the open-file
//! limit this process started with, though it raised its own
//! ([`raise_fd_limit`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// The soft and hard `RLIMIT_NOFILE` this process started with, once
/// [`raise_fd_limit`] raised the soft one; `u64::MAX` while not raised.
static STARTING_NOFILE: [AtomicU64; 2] = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];

/// Raises the soft limit on open files to the hard limit. One connection is
/// one descriptor, and the usual soft limit (1024) ends a run on a thousand
/// nodes with "Too many open files". Commands started through
/// [`GroupChild::spawn`](super::GroupChild::spawn) get the starting limit
/// back: some programs still misbehave with descriptors past 1024 (`select`).
pub fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= hard || STARTING_NOFILE[0].load(Ordering::Relaxed) != u64::MAX {
        return;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            STARTING_NOFILE[1].store(hard, Ordering::Relaxed);
            STARTING_NOFILE[0].store(soft, Ordering::Relaxed);
            tracing::debug!(soft, hard, "open-file limit raised");
        }
        Err(e) => tracing::debug!(soft, hard, error = %e, "open-file limit not raised"),
    }
}

/// The open-file limit this process started with, for its children, once
/// [`raise_fd_limit`] raised it.
pub(super) fn starting_fd_limit() -> Option<libc::rlimit> {
    let soft = STARTING_NOFILE[0].load(Ordering::Relaxed);
    // rlim_t is u64 on every 64-bit Linux target.
    (soft != u64::MAX).then(|| libc::rlimit {
        rlim_cur: soft,
        rlim_max: STARTING_NOFILE[1].load(Ordering::Relaxed),
    })
}

/// Default dispositions for every catchable signal, real-time ones
/// included, and an empty mask: the one reset every child of `multinode`
/// gets (group leaders here, the supervisor's command). Async-signal-safe:
/// used in a child before it execs (after fork, or in `spawn`'s child).
pub fn reset_signals() {
    for signo in 1..=libc::SIGRTMAX() {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP {
            continue;
        }
        // SAFETY: setting SIG_DFL is valid for these numbers (the C library
        // refuses, harmlessly, the few it reserves for itself).
        unsafe {
            libc::signal(signo, libc::SIG_DFL);
        }
    }
    // SAFETY: an empty, initialised set; SIG_SETMASK with it unblocks everything.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}
