//! The writer thread: every node's output written by one thread, so that
//! lines of different nodes never mix. The channel to it is bounded: a slow
//! terminal slows the nodes (through SSH flow control), it does not grow
//! memory. A stdout or stderr that cannot be written (`| head`,
//! `/dev/full`) is flagged, and ends the run (see `dispatch`). What a node
//! sends it is cut into lines by its sink (`sink`).

use std::io::{self, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use crate::stdio::{Fd, FdWriter};

/// Blocks queued for the writer before nodes wait.
const WRITER_QUEUE: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Out,
    Err,
}

impl Stream {
    fn fd(self) -> Fd {
        match self {
            Stream::Out => Fd::Out,
            Stream::Err => Fd::Err,
        }
    }
}

pub(super) enum Message {
    Block(Stream, Vec<u8>),
    Progress(String),
}

/// The writer's handle. Cloned into every node's sink.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Message>,
    closed: Arc<ClosedOutputs>,
}

/// What the writer thread found it cannot write to.
#[derive(Default)]
struct ClosedOutputs {
    stdout: AtomicBool,
    stderr: AtomicBool,
    /// The first failed write.
    first: std::sync::Mutex<Option<(Fd, io::Error)>>,
}

impl ClosedOutputs {
    fn flag(&self, fd: Fd) -> &AtomicBool {
        match fd {
            Fd::Out => &self.stdout,
            Fd::Err => &self.stderr,
        }
    }

    fn is(&self, fd: Fd) -> bool {
        self.flag(fd).load(Ordering::Relaxed)
    }

    /// Records a failed write; true the first time for this stream.
    fn fail(&self, fd: Fd, e: io::Error) -> bool {
        if self.flag(fd).swap(true, Ordering::Relaxed) {
            return false;
        }
        let mut first = self
            .first
            .lock()
            .expect("not poisoned: no panics while held");
        if first.is_none() {
            *first = Some((fd, e));
        }
        true
    }
}

/// The writer thread; join it after every `Writer` is dropped.
pub struct WriterThread {
    handle: std::thread::JoinHandle<()>,
    closed: Arc<ClosedOutputs>,
}

impl WriterThread {
    /// Waits for the thread; returns the first write that failed, if any.
    pub fn join(self) -> Option<(Fd, io::Error)> {
        let _ = self.handle.join();
        self.closed
            .first
            .lock()
            .expect("not poisoned: no panics while held")
            .take()
    }
}

/// Starts the writer thread on this process's stdout and stderr. `closed` is
/// notified when stdout or stderr turns out to be closed (`| head`) or
/// unwritable (`/dev/full`).
pub fn start(closed: tokio::sync::mpsc::UnboundedSender<()>) -> (Writer, WriterThread) {
    let (tx, rx) = mpsc::channel(WRITER_QUEUE);
    let flags = Arc::new(ClosedOutputs::default());
    let thread_flags = flags.clone();
    let handle = std::thread::Builder::new()
        .name("mn-output".into())
        .spawn(move || writer_loop(rx, thread_flags, closed))
        .expect("spawning the output thread");
    (
        Writer {
            tx,
            closed: flags.clone(),
        },
        WriterThread {
            handle,
            closed: flags,
        },
    )
}

fn writer_loop(
    mut rx: mpsc::Receiver<Message>,
    flags: Arc<ClosedOutputs>,
    closed: tokio::sync::mpsc::UnboundedSender<()>,
) {
    let failed = |fd: Fd, e: io::Error| {
        if flags.fail(fd, e) {
            let _ = closed.send(());
        }
    };
    let mut err = FdWriter(Fd::Err);
    let mut out = io::BufWriter::with_capacity(256 * 1024, FdWriter(Fd::Out));
    let progress_allowed = io::stderr().is_terminal();
    let mut progress_shown = false;
    while let Some(msg) = rx.blocking_recv() {
        match msg {
            Message::Progress(text) => {
                if progress_allowed && !flags.is(Fd::Err) {
                    let _ = write!(err, "\r\x1b[K{text}");
                    progress_shown = !text.is_empty();
                }
            }
            Message::Block(stream, data) => {
                if progress_shown {
                    let _ = err.write_all(b"\r\x1b[K");
                    progress_shown = false;
                }
                match stream {
                    Stream::Out => {
                        if flags.is(Fd::Out) {
                            continue;
                        }
                        if let Err(e) = out.write_all(&data) {
                            failed(Fd::Out, e);
                            continue;
                        }
                    }
                    Stream::Err => {
                        if !flags.is(Fd::Out)
                            && let Err(e) = out.flush()
                        {
                            failed(Fd::Out, e);
                        }
                        if flags.is(Fd::Err) {
                            continue;
                        }
                        if let Err(e) = err.write_all(&data) {
                            failed(Fd::Err, e);
                        }
                    }
                }
            }
        }
        // Flush when nothing else is waiting: batches under load, prompt when idle.
        if rx.is_empty()
            && !flags.is(Fd::Out)
            && let Err(e) = out.flush()
        {
            failed(Fd::Out, e);
        }
    }
    if progress_shown {
        let _ = err.write_all(b"\r\x1b[K");
    }
    if !flags.is(Fd::Out)
        && let Err(e) = out.flush()
    {
        failed(Fd::Out, e);
    }
}

impl Writer {
    /// Shows `text` as the progress line (on a terminal only); empty clears it.
    pub async fn progress(&self, text: String) {
        let _ = self.tx.send(Message::Progress(text)).await;
    }

    /// Writes `text` to a stream as one block, between whole lines of the nodes.
    pub async fn text(&self, stream: Stream, text: String) {
        let _ = self
            .tx
            .send(Message::Block(stream, text.into_bytes()))
            .await;
    }

    /// Whether this stream can no longer be written (closed or failing).
    pub fn closed(&self, stream: Stream) -> bool {
        self.closed.is(stream.fd())
    }

    /// A node's block of whole lines (or its bytes as they come).
    pub(super) async fn block(&self, stream: Stream, data: Vec<u8>) {
        let _ = self.tx.send(Message::Block(stream, data)).await;
    }

    /// A writer whose blocks go to `tx` (a sink's tests read them there).
    #[cfg(test)]
    pub(super) fn to_channel(tx: mpsc::Sender<Message>) -> Writer {
        Writer {
            tx,
            closed: Arc::new(ClosedOutputs::default()),
        }
    }
}
