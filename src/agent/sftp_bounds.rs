//! The bounds the agent's `sftp` sessions share: handles open in all
//! sessions (a quarter of the open-file limit), [`MAX_HANDLES`] a session,
//! and file operations at once ([`IO_AT_ONCE`] threads at most).

use std::sync::Arc;

use tokio::sync::Semaphore;

/// Open files and directories one session may hold at once (advertised in
/// `limits@openssh.com`); OpenSSH's sftp-server, a process of its own per
/// session, advertises its open-file limit less 5.
pub(crate) const MAX_HANDLES: usize = 256;
/// File operations running at once, all sessions together: a file system
/// that hangs (a dead NFS server) holds at most this many threads, never
/// all of the runtime's blocking pool (512).
pub(crate) const IO_AT_ONCE: usize = 64;

/// What the sessions of one agent share: the bounds on handles and on file
/// operations in flight.
pub(crate) struct SftpBounds {
    /// Handles open in all sessions: a quarter of the open-file limit (the
    /// rest is for connections, commands and logins).
    pub(super) handles: Arc<Semaphore>,
    pub(super) handles_max: usize,
    pub(super) io: Arc<Semaphore>,
}

impl SftpBounds {
    /// From the open-file limit the agent runs with (after raising it).
    pub(crate) fn new() -> Self {
        let files = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(soft, _)| soft)
            .unwrap_or(1024);
        Self::with_handles(usize::try_from(files / 4).unwrap_or(usize::MAX).max(16))
    }

    fn with_handles(handles: usize) -> Self {
        let handles = handles.min(Semaphore::MAX_PERMITS);
        SftpBounds {
            handles: Arc::new(Semaphore::new(handles)),
            handles_max: handles,
            io: Arc::new(Semaphore::new(IO_AT_ONCE)),
        }
    }
}
