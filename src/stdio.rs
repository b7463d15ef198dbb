//! This process's stdout and stderr, for bytes passed on and for messages:
//! unbuffered writes to fds 1 and 2 that never panic (std's `print!` panics
//! on a closed pipe), and the one rule for what a failed write means.
//!
//! A write that fails ends the copy that made it: a closed pipe (`| head`)
//! is the reader's choice and ends it quietly with 141 (128 + SIGPIPE, as a
//! process killed by SIGPIPE), any other failure (`> /dev/full`) the same,
//! with one line saying why when stderr can still take it.
//!
//! Also the one way to write a non-blocking descriptor on the async runtime
//! ([`write_all_async`]): this process's terminal, and an agent's command's
//! stdin pipe or pty master.

use std::fs::File;
use std::io::{self, Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::thread::JoinHandle;

use bytes::Bytes;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};

/// One of this process's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fd {
    Out,
    Err,
}

impl Fd {
    fn raw(self) -> i32 {
        match self {
            Fd::Out => 1,
            Fd::Err => 2,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fd::Out => "stdout",
            Fd::Err => "stderr",
        }
    }
}

/// fd 1 or 2 as a `File` that is never closed by this handle.
fn file(fd: Fd) -> ManuallyDrop<File> {
    // SAFETY: fds 1 and 2 stay open for the life of the process (a closed
    // stdout is replaced by /dev/null, never left free: see `close_stdout`);
    // ManuallyDrop keeps this handle from closing them.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd.raw()) })
}

/// Writes all of `data` to `fd`, unbuffered (EINTR is retried, EAGAIN waited out).
pub(crate) fn write_all(fd: Fd, data: &[u8]) -> io::Result<()> {
    FdWriter(fd).write_all(data)
}

/// fd 1 or 2 as a `Write`: unbuffered, and patient with a non-blocking fd.
/// rsync and git make their pipes O_NONBLOCK, and the pipe's other end, our
/// fd, shares that flag: a full pipe then answers EAGAIN, which waits for
/// room (poll) instead of failing.
pub(crate) struct FdWriter(pub(crate) Fd);

impl Write for FdWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match file(self.0).write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_for(self.0.raw(), PollFlags::POLLOUT)?
                }
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Waits until `fd` is ready for `events` (or in error, which the next
/// read or write then reports).
fn wait_for(fd: i32, events: PollFlags) -> io::Result<()> {
    // SAFETY: fds 0, 1 and 2 stay open for the life of the process.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    loop {
        match nix::poll::poll(&mut [PollFd::new(fd, events)], PollTimeout::NONE) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Reads fd 0 into `buf`, waiting out EAGAIN (see [`FdWriter`]); 0 is EOF.
fn read_stdin(buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: fd 0 stays open for the life of the process; ManuallyDrop
    // keeps this handle from closing it.
    let mut stdin = ManuallyDrop::new(unsafe { File::from_raw_fd(0) });
    loop {
        match stdin.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_for(0, PollFlags::POLLIN)?,
            other => return other,
        }
    }
}

/// Reads stdin on a thread of its own and hands over each chunk as it is
/// read (at most 64 KiB), at the pace the receiver takes them; the channel
/// closes at EOF or on a read error. The thread may stay parked in a read
/// after the receiver is gone: it holds nothing, and ends with the process.
pub(crate) fn stdin_chunks() -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(4);
    let spawned = std::thread::Builder::new()
        .name("mn-stdin".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match read_stdin(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if tx.blocking_send(Bytes::copy_from_slice(&buf[..n])).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    // Without a thread, stdin reads as empty (the sender is dropped).
    drop(spawned);
    rx
}

/// The terminal on `fd` (0, 1 or 2), opened anew: a file description of
/// this process's own, non-blocking, so that it is read and written on the
/// async runtime's thread, with no thread between a keystroke and the
/// network (or the network and the screen). The description fds 0-2 share
/// with the shell must stay blocking: the shell would get EAGAIN after we
/// are gone. `None` when `fd` is not a terminal or its device cannot be
/// opened (a terminal of another user's after `su`): the threads then.
fn own_terminal(fd: i32) -> Option<File> {
    // SAFETY: fds 0, 1 and 2 stay open for the life of the process.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let name = nix::unistd::ttyname(fd).ok()?;
    let file = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(name)
        .ok()?;
    // The same device, not another one that took its name.
    let same =
        nix::sys::stat::fstat(fd).ok()?.st_rdev == nix::sys::stat::fstat(&file).ok()?.st_rdev;
    same.then_some(file)
}

/// Stdin's [`own_terminal`] registered with the runtime (called within
/// it), for reading alone.
fn async_terminal_input() -> Option<AsyncFd<File>> {
    let file = own_terminal(0)?;
    // SAFETY: the `File` is owned by the `AsyncFd` and never replaced: its
    // descriptor stays open and the same until the `AsyncFd` is dropped.
    unsafe { AsyncFd::register_with_interest(file, tokio::io::Interest::READABLE) }.ok()
}

/// Stdin's chunks as [`stdin_chunks`] gives them, read on the runtime from
/// stdin's terminal (see [`own_terminal`]); `None` when stdin is not a
/// terminal. Called within the runtime: the reader is a task of it, parked
/// until a key comes (it ends with the runtime).
pub(crate) fn terminal_chunks() -> Option<mpsc::Receiver<Bytes>> {
    let tty = async_terminal_input()?;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let Ok(mut ready) = tty.readable().await else {
                return;
            };
            match ready.try_io(|t| t.get_ref().read(&mut buf)) {
                Ok(Ok(0)) => return,
                Ok(Ok(n)) => {
                    // A terminal gives what it holds in one read: a short
                    // one has emptied it (as tokio's own sockets assume), so
                    // wait for the next key instead of reading EAGAIN.
                    if n < buf.len() {
                        ready.clear_ready();
                    }
                    if tx.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                        return;
                    }
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                // EIO: the terminal hung up; as the thread, the input ends.
                Ok(Err(_)) => return,
                Err(_would_block) => {}
            }
        }
    });
    Some(rx)
}

/// Writes all of `data` to `fd`, a non-blocking descriptor (a terminal,
/// a pipe, a pty's master), on the runtime: at once while it has room, and
/// registered with the runtime only to wait when it has none. Registered
/// for good, every read at the other end would wake this thread (a
/// terminal's: every key too, the kernel asking each of its waiters,
/// `n_tty_poll`), for nothing: one wakeup more a keystroke.
pub(crate) async fn write_all_async(fd: BorrowedFd<'_>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => {
                // SAFETY: the borrowed descriptor stays open and the same
                // while `waiting` (dropped within this borrow) holds it.
                let waiting =
                    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::WRITABLE) }?;
                drop(waiting.writable().await?);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A message on stderr. A closed or failing stderr is ignored: there is
/// nowhere else to say it.
pub(crate) fn eprint(text: &str) {
    let _ = write_all(Fd::Err, text.as_bytes());
}

/// Text on stdout; a failure is returned (see [`failure_line`]).
pub(crate) fn print(text: &str) -> io::Result<()> {
    write_all(Fd::Out, text.as_bytes())
}

/// Prints `text` on stdout for `program`: exit code 0, or the code of a
/// failed write (141, with a line on stderr unless the pipe was closed).
pub(crate) fn print_or_code(program: &str, text: &str) -> i32 {
    match print(text) {
        Ok(()) => crate::exit_code::SUCCESS,
        Err(e) => {
            if let Some(line) = failure_line(program, Fd::Out, &e) {
                eprint(&line);
            }
            failure_code()
        }
    }
}

/// The reader of stdout is done (the remote side sent EOF): fd 1 becomes
/// /dev/null, so the reader sees EOF now while fd 1 stays taken (a closed fd
/// 1 would be handed to the next file or socket this process opens).
pub(crate) fn close_stdout() {
    if let Ok(null) = File::options().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
    }
}

/// Whether a failed write means the reader went away.
pub(crate) fn is_closed_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// What to say about a failed write: nothing for a closed pipe, else one line.
pub(crate) fn failure_line(program: &str, fd: Fd, e: &io::Error) -> Option<String> {
    (!is_closed_pipe(e)).then(|| format!("{program}: error: cannot write to {}: {e}\n", fd.name()))
}

/// The exit code of a copy ended by a failed write: 141, as a process
/// killed by SIGPIPE.
pub(crate) fn failure_code() -> i32 {
    crate::exit_code::from_signal(libc::SIGPIPE)
}

enum Op {
    Write(Fd, Bytes),
    CloseStdout,
}

/// Writes chunks to fds 1 and 2 in the order they are given, on a thread of
/// its own: a slow reader blocks that thread and, through the bounded queue,
/// the sender, never the async runtime. Every chunk is written as soon as it
/// is taken: no line logic, no buffer.
pub(crate) struct StdioWriter {
    tx: Option<mpsc::Sender<Op>>,
    failed: oneshot::Receiver<(Fd, io::Error)>,
    failure: Option<(Fd, io::Error)>,
    thread: Option<JoinHandle<()>>,
    /// Instead of the thread: stdout and stderr as terminals of our own.
    terminals: Option<Terminals>,
}

/// Stdout's and stderr's terminals, written on the runtime (see
/// [`own_terminal`]); stdout's is `None` once closed.
struct Terminals {
    out: Option<File>,
    err: File,
}

/// Chunks queued for the thread before the sender waits (each at most an
/// SSH packet, 32 KiB).
const QUEUE: usize = 8;

impl StdioWriter {
    pub(crate) fn start() -> io::Result<Self> {
        let (tx, mut rx) = mpsc::channel::<Op>(QUEUE);
        let (failed_tx, failed) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("mn-stdio".into())
            .spawn(move || {
                while let Some(op) = rx.blocking_recv() {
                    match op {
                        Op::Write(fd, data) => {
                            if let Err(e) = write_all(fd, &data) {
                                let _ = failed_tx.send((fd, e));
                                return;
                            }
                        }
                        Op::CloseStdout => close_stdout(),
                    }
                }
            })?;
        Ok(StdioWriter {
            tx: Some(tx),
            failed,
            failure: None,
            thread: Some(thread),
            terminals: None,
        })
    }

    /// For a terminal session: when stdout and stderr are both terminals,
    /// they are written on the runtime, each through a description of its
    /// own (a keystroke's echo then crosses no thread); else [`Self::start`].
    /// Called within the runtime.
    pub(crate) fn start_for_terminal() -> io::Result<Self> {
        let (Some(out), Some(err)) = (own_terminal(1), own_terminal(2)) else {
            return Self::start();
        };
        // Never read: see `failed`.
        let (_, failed) = oneshot::channel();
        Ok(StdioWriter {
            tx: None,
            failed,
            failure: None,
            thread: None,
            terminals: Some(Terminals {
                out: Some(out),
                err,
            }),
        })
    }

    /// Queues `data` for `fd` (waits while the queue is full), or writes it
    /// to its terminal. An error means a write failed: [`StdioWriter::finish`]
    /// says which.
    pub(crate) async fn write(&mut self, fd: Fd, data: Bytes) -> Result<(), ()> {
        if let Some(t) = &self.terminals {
            if self.failure.is_some() {
                return Err(());
            }
            let tty = match fd {
                Fd::Out => match &t.out {
                    Some(out) => out,
                    // After EOF, as /dev/null.
                    None => return Ok(()),
                },
                Fd::Err => &t.err,
            };
            if let Err(e) = write_all_async(tty.as_fd(), &data).await {
                self.failure = Some((fd, e));
                return Err(());
            }
            return Ok(());
        }
        let tx = self.tx.as_ref().ok_or(())?;
        tx.send(Op::Write(fd, data)).await.map_err(|_| ())
    }

    /// After what is queued, stdout's reader sees EOF (see [`close_stdout`]).
    pub(crate) async fn close_stdout(&mut self) {
        if let Some(t) = &mut self.terminals {
            t.out = None;
            close_stdout();
        } else if let Some(tx) = &self.tx {
            let _ = tx.send(Op::CloseStdout).await;
        }
    }

    /// Resolves when a write failed (kept for [`StdioWriter::finish`]).
    pub(crate) async fn failed(&mut self) {
        if self.failure.is_some() {
            return;
        }
        if self.terminals.is_some() {
            // No thread: a failed write is that write's answer.
            return std::future::pending().await;
        }
        match (&mut self.failed).await {
            Ok(failure) => self.failure = Some(failure),
            // The thread ended without a failure: only after `finish`.
            Err(_) => std::future::pending().await,
        }
    }

    /// Writes what is queued and ends the thread; returns the failure, if a
    /// write failed.
    pub(crate) async fn finish(mut self) -> Option<(Fd, io::Error)> {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.failure.take().or_else(|| self.failed.try_recv().ok())
    }
}
/// Writes `text` to stdout in one piece; a closed pipe (`| head`) is a normal end.
pub(crate) fn print_stdout(text: &str) -> Result<i32, crate::error::Error> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(crate::exit_code::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(crate::exit_code::SUCCESS),
        Err(e) => Err(crate::error::Error::Failed(format!(
            "cannot write to stdout: {e}"
        ))),
    }
}
