//! The agent's group keeper: one small child process per agent that ends the
//! process groups of the agent's commands if the agent itself dies, even by
//! SIGKILL, when nothing in the agent can run any more.
//!
//! Each command registers its group from the child, between fork and exec,
//! by writing `+PGID` to a pipe whose only reader is the keeper; the agent
//! writes `-PGID` once the group is over. When the agent dies, the pipe's
//! write end closes and the keeper reads EOF: it sends SIGTERM to every group
//! still registered, waits the grace period, and SIGKILLs what is left. One
//! keeper per agent costs one process; a supervisor per command would cost
//! an exec per command.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigHandler, Signal};
use nix::unistd::Pid;

use crate::error::Error;
use crate::process;

/// The agent's end of the keeper's pipe.
pub(crate) struct Keeper {
    pipe: std::sync::Mutex<std::fs::File>,
    fd: RawFd,
}

impl Keeper {
    /// Starts `bin keep-groups --grace GRACE` with the read end of a pipe as
    /// its stdin, in its own process group (signals for the agent's terminal
    /// or group do not reach it).
    pub(crate) fn start(bin: &Path, grace: Duration) -> Result<Self, Error> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::Failed(format!("cannot create the keeper's pipe: {e}")))?;
        std::process::Command::new(bin)
            .arg("keep-groups")
            .arg("--grace")
            .arg(format!("{:.3}", grace.as_secs_f64()))
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| Error::Failed(format!("cannot start the group keeper: {e}")))?;
        let fd = write.as_raw_fd();
        Ok(Keeper {
            pipe: std::sync::Mutex::new(std::fs::File::from(write)),
            fd,
        })
    }

    /// Makes the child spawned by `cmd` register its pid (its future process
    /// group) with the keeper before it execs. The pipe is close-on-exec, so
    /// the command itself never holds it.
    pub(crate) fn register_on_spawn(&self, cmd: &mut tokio::process::Command) {
        let fd = self.fd;
        // SAFETY: runs between fork and exec; getpid and write are
        // async-signal-safe, and the buffer is on the stack.
        unsafe {
            cmd.pre_exec(move || {
                let mut buf = [0u8; 24];
                let len = format_registration(&mut buf, libc::getpid());
                libc::write(fd, buf.as_ptr().cast(), len);
                Ok(())
            });
        }
    }

    /// The group is over: the keeper need not end it.
    pub(crate) fn forget(&self, pgid: Pid) {
        let mut pipe = self
            .pipe
            .lock()
            .expect("not poisoned: no panics while held");
        let _ = writeln!(pipe, "-{}", pgid.as_raw());
    }
}

/// `+PID\n` into `buf` without allocating; returns its length.
fn format_registration(buf: &mut [u8; 24], pid: libc::pid_t) -> usize {
    let mut digits = [0u8; 20];
    let mut n = pid.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let count = digits.len() - i;
    buf[0] = b'+';
    buf[1..=count].copy_from_slice(&digits[i..]);
    buf[count + 1] = b'\n';
    count + 2
}

/// `multinode keep-groups --grace S`: the keeper process itself.
pub fn keep_groups(grace: Duration) -> Result<i32, Error> {
    // Only the pipe's end ends the keeper.
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        // SAFETY: ignoring a signal installs no handler code.
        unsafe {
            let _ = nix::sys::signal::signal(sig, SigHandler::SigIgn);
        }
    }
    let mut groups: HashSet<i32> = HashSet::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().split(b'\n') {
        let Ok(line) = line else { break };
        let text = String::from_utf8_lossy(&line);
        let (sign, number) = text.split_at(text.len().min(1));
        match (sign, number.trim().parse::<i32>()) {
            ("+", Ok(pgid)) if pgid > 1 => {
                groups.insert(pgid);
            }
            ("-", Ok(pgid)) => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    // The agent is gone.
    for &pgid in &groups {
        process::signal_group(Pid::from_raw(pgid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline
        && groups
            .iter()
            .any(|&pgid| process::group_alive(Pid::from_raw(pgid)))
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for &pgid in &groups {
        process::signal_group(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_lines_are_formatted_without_allocation() {
        let mut buf = [0u8; 24];
        let len = format_registration(&mut buf, 4_194_304);
        assert_eq!(&buf[..len], b"+4194304\n");
        let len = format_registration(&mut buf, 7);
        assert_eq!(&buf[..len], b"+7\n");
    }
}
