//! A command run in its own group, from its leader's exit to its end: the
//! output pipes get [`PIPE_GRACE`] to reach EOF (a background job may hold
//! them), then what is left of the group is ended (its grace counted from
//! the first signal that asked it to end), then the last output gets
//! [`DRAIN_LIMIT`]. One owner for the agent's commands and exec_all's local
//! ones (this node, an external wrapper), which must behave the same.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::group::{end_group_after, end_session, ends, signal_group};

/// How long a command's pipes may stay open after its leader exited before
/// the rest of its group is ended.
pub const PIPE_GRACE: Duration = Duration::from_secs(1);
/// How long the last output may take to be read once the group was ended.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// A running command's group as signals see it, shared by whoever passes
/// signals on while another task waits for the leader: the first signal
/// that asks it to end (see [`ends`]) is remembered, its grace counts from then.
#[derive(Debug, Clone)]
pub struct Group {
    pgid: Pid,
    signalled: Arc<OnceLock<Instant>>,
}

impl Group {
    pub fn new(pgid: Pid) -> Self {
        Group {
            pgid,
            signalled: Arc::default(),
        }
    }

    pub fn pgid(&self) -> Pid {
        self.pgid
    }

    /// Sends `sig` to the whole group (gone already: nothing happens).
    pub fn signal(&self, sig: Signal) {
        if ends(sig) {
            self.signalled.get_or_init(Instant::now);
        }
        signal_group(self.pgid, sig);
    }

    /// When the group first had a signal that ends it.
    pub fn signalled_at(&self) -> Option<Instant> {
        self.signalled.get().copied()
    }
}

/// How a command's output ended once its leader exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// The pipes reached EOF within [`PIPE_GRACE`].
    ByThemselves,
    /// Once the rest of the group was ended.
    AfterTheGroup,
    /// Still open [`DRAIN_LIMIT`] after that (a process outside the group holds them).
    Cut,
}

/// From a leader's exit to the command's end, while `pumps` read its pipes
/// to EOF (see the module). `session`: the command had a terminal; every
/// job of its session is ended too, as at a hangup. Returns once nothing of
/// the group is left and the pumps are done or cut.
pub async fn settle(
    group: &Group,
    grace: Duration,
    session: bool,
    pumps: impl Future<Output = ()>,
) -> Drained {
    tokio::pin!(pumps);
    let drained = tokio::time::timeout(PIPE_GRACE, &mut pumps).await.is_ok();
    if !drained {
        tracing::debug!(
            pgid = group.pgid.as_raw(),
            "pipes still open after the command exited: ending its group"
        );
    }
    // Nothing the command started outlives it.
    end_group_after(group.pgid, grace, group.signalled_at()).await;
    if session {
        end_session(group.pgid, grace).await;
    }
    if drained {
        Drained::ByThemselves
    } else if tokio::time::timeout(DRAIN_LIMIT, &mut pumps).await.is_ok() {
        Drained::AfterTheGroup
    } else {
        tracing::debug!(
            pgid = group.pgid.as_raw(),
            "output still open after the group ended: dropping it"
        );
        Drained::Cut
    }
}

/// A pump reads at most this much at once (SSH packets carry 32 KiB).
const PUMP_CHUNK: usize = 64 * 1024;
/// The least a pump reserves when its buffer has less room than the pipe
/// holds: below glibc's large-request size (1 KiB), which would merge its
/// small free blocks first.
const PUMP_MIN_ROOM: usize = 512;

/// A command's output pipe, read in chunks as they come.
///
/// Reads go into the spare room of one buffer, never zeroed, and each chunk
/// leaves as a slice of it (no copy). The buffer grows only as far as what
/// the pipe holds (at most [`PUMP_CHUNK`] at once): a command that prints
/// nothing allocates nothing here, and one that prints a line allocates
/// about a line, not the 64 KiB a flood of output reads into.
pub struct PipeReader {
    pipe: pipe::Receiver,
    buf: BytesMut,
}

impl PipeReader {
    pub fn new(pipe: pipe::Receiver) -> Self {
        PipeReader {
            pipe,
            buf: BytesMut::new(),
        }
    }

    /// The next chunk; `None` at EOF or on an error.
    pub async fn next(&mut self) -> Option<Bytes> {
        self.pipe.readable().await.ok()?;
        let unread = bytes_unread(&self.pipe).min(PUMP_CHUNK);
        if self.buf.capacity() < unread {
            self.buf.reserve(unread.max(PUMP_MIN_ROOM));
        }
        // With nothing unread and no room, this reads into at most 64
        // bytes that `BytesMut` reserves itself: end of file, or output
        // that came just now. One read: tokio's `poll_read` takes a
        // short one as the pipe emptied (no second read for EAGAIN),
        // and waits for the next output itself if there was none.
        match self.pipe.read_buf(&mut self.buf).await {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(self.buf.split().freeze()),
        }
    }
}

/// How many bytes `pipe` holds unread (`FIONREAD`; 0 when it cannot tell).
fn bytes_unread(pipe: &pipe::Receiver) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which is valid.
    let rc = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 {
        usize::try_from(n).unwrap_or(0)
    } else {
        0
    }
}
