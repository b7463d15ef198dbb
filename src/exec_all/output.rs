//! The output relay: every node's stdout and stderr, assembled into whole
//! lines per node and written by one writer thread, so two lines never mix.
//!
//! A node's bytes are cut after the last newline of each chunk; the whole
//! lines go to the writer as one block (one `write` for many lines), the
//! partial last line waits for its end. With `--label`, each line gets
//! `RANK HOST: ` in front. The channel to the writer is bounded: a slow
//! terminal slows the nodes (through SSH flow control), it does not grow memory.

use std::collections::VecDeque;
use std::io::{self, IsTerminal, Write};
use std::os::fd::FromRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

/// A line longer than this is passed on in pieces instead of held whole.
const MAX_PARTIAL_LINE: usize = 1024 * 1024;
/// Blocks queued for the writer before nodes wait.
const WRITER_QUEUE: usize = 256;
/// Lines of each node kept for the failure report.
pub const TAIL_LINES: usize = 5;
/// Each kept line is cut to this many bytes.
const TAIL_LINE_MAX: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Out,
    Err,
}

enum Message {
    Block(Stream, Vec<u8>),
    Progress(String),
}

/// The writer's handle. Cloned into every node's sink.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Message>,
    stdout_closed: Arc<AtomicBool>,
}

/// The writer thread; join it after every `Writer` is dropped.
pub struct WriterThread {
    handle: std::thread::JoinHandle<()>,
}

impl WriterThread {
    pub fn join(self) {
        let _ = self.handle.join();
    }
}

/// Starts the writer thread on this process's stdout and stderr. `closed` is
/// notified once when stdout turns out to be closed (`| head`).
pub fn start(closed: tokio::sync::mpsc::UnboundedSender<()>) -> (Writer, WriterThread) {
    let (tx, rx) = mpsc::channel(WRITER_QUEUE);
    let stdout_closed = Arc::new(AtomicBool::new(false));
    let flag = stdout_closed.clone();
    let handle = std::thread::Builder::new()
        .name("mn-output".into())
        .spawn(move || writer_loop(rx, flag, closed))
        .expect("spawning the output thread");
    (Writer { tx, stdout_closed }, WriterThread { handle })
}

fn writer_loop(
    mut rx: mpsc::Receiver<Message>,
    stdout_closed: Arc<AtomicBool>,
    closed: tokio::sync::mpsc::UnboundedSender<()>,
) {
    // SAFETY: fds 1 and 2 stay open for the life of the process; ManuallyDrop
    // keeps these handles from closing them.
    let mut out = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    let mut err = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(2) });
    let mut out = io::BufWriter::with_capacity(256 * 1024, &mut *out);
    let progress_allowed = io::stderr().is_terminal();
    let mut progress_shown = false;
    while let Some(msg) = rx.blocking_recv() {
        match msg {
            Message::Progress(text) => {
                if progress_allowed {
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
                        if stdout_closed.load(Ordering::Relaxed) {
                            continue;
                        }
                        if out.write_all(&data).is_err() {
                            stdout_closed.store(true, Ordering::Relaxed);
                            let _ = closed.send(());
                            continue;
                        }
                    }
                    Stream::Err => {
                        let _ = out.flush();
                        let _ = err.write_all(&data);
                    }
                }
            }
        }
        // Flush when nothing else is waiting: batches under load, prompt when idle.
        if rx.is_empty() && !stdout_closed.load(Ordering::Relaxed) && out.flush().is_err() {
            stdout_closed.store(true, Ordering::Relaxed);
            let _ = closed.send(());
        }
    }
    if progress_shown {
        let _ = err.write_all(b"\r\x1b[K");
    }
    let _ = out.flush();
}

impl Writer {
    /// Shows `text` as the progress line (on a terminal only); empty clears it.
    pub async fn progress(&self, text: String) {
        let _ = self.tx.send(Message::Progress(text)).await;
    }

    pub fn stdout_closed(&self) -> bool {
        self.stdout_closed.load(Ordering::Relaxed)
    }
}

/// What the report keeps of one node's output.
#[derive(Debug, Clone, Default)]
pub struct OutputStats {
    pub bytes_out: u64,
    pub bytes_err: u64,
    /// The last lines (both streams), oldest first.
    pub tail: VecDeque<String>,
    /// Everything, when the sink captures instead of relaying (up to [`CAPTURE_MAX`]).
    pub captured_out: Vec<u8>,
    pub captured_err: Vec<u8>,
    /// A relay's report line (see [`RELAY_REPORT_MARKER`]), taken out of its stderr.
    pub relay_report: Option<String>,
}

/// The line a relay's exec_all ends its stderr with: this marker, then its
/// report as JSON. The head takes it out of the output.
pub const RELAY_REPORT_MARKER: &str = "\u{1e}multinode-relay-report ";

/// A capturing sink keeps at most this much of each stream.
pub const CAPTURE_MAX: usize = 4 * 1024 * 1024;

/// One node's end of the relay.
pub struct NodeSink {
    writer: Writer,
    label: Option<Vec<u8>>,
    forward: bool,
    capture: bool,
    /// End a partial last line with a newline (several nodes share the streams).
    end_partial: bool,
    /// This node is a relay: look for its report in stderr.
    relay: bool,
    out: Vec<u8>,
    err: Vec<u8>,
    pub stats: OutputStats,
}

impl NodeSink {
    /// `label`: the `RANK HOST: ` prefix, if lines are labelled. `forward`:
    /// false keeps the output out of exec_all's streams (counted and kept for
    /// the report only). `capture`: keep every byte (see [`CAPTURE_MAX`]).
    /// `shared`: other nodes write to the same streams, so a partial last
    /// line gets a newline (alone, the node's bytes pass exactly).
    pub fn new(
        writer: Writer,
        label: Option<String>,
        forward: bool,
        capture: bool,
        shared: bool,
    ) -> Self {
        NodeSink {
            relay: false,
            end_partial: shared || label.is_some(),
            writer,
            label: label.map(String::into_bytes),
            forward,
            capture,
            out: Vec::new(),
            err: Vec::new(),
            stats: OutputStats::default(),
        }
    }

    /// Takes a chunk of a stream; sends the whole lines it completes.
    pub async fn feed(&mut self, stream: Stream, data: &[u8]) {
        match stream {
            Stream::Out => self.stats.bytes_out += data.len() as u64,
            Stream::Err => self.stats.bytes_err += data.len() as u64,
        }
        if self.capture {
            let kept = match stream {
                Stream::Out => &mut self.stats.captured_out,
                Stream::Err => &mut self.stats.captured_err,
            };
            let room = CAPTURE_MAX.saturating_sub(kept.len());
            kept.extend_from_slice(&data[..data.len().min(room)]);
        }
        let partial = match stream {
            Stream::Out => &mut self.out,
            Stream::Err => &mut self.err,
        };
        let block = match memchr::memrchr(b'\n', data) {
            Some(last) => {
                let mut block = std::mem::take(partial);
                block.extend_from_slice(&data[..=last]);
                partial.extend_from_slice(&data[last + 1..]);
                block
            }
            None => {
                partial.extend_from_slice(data);
                if partial.len() < MAX_PARTIAL_LINE {
                    return;
                }
                std::mem::take(partial)
            }
        };
        self.emit(stream, block).await;
    }

    /// The node is done: its partial last lines are sent, ended with a
    /// newline when other nodes share the streams (never two lines in one).
    pub async fn finish(&mut self) {
        for stream in [Stream::Out, Stream::Err] {
            let mut partial = match stream {
                Stream::Out => std::mem::take(&mut self.out),
                Stream::Err => std::mem::take(&mut self.err),
            };
            if !partial.is_empty() {
                if self.end_partial && self.label.is_none() {
                    partial.push(b'\n');
                }
                self.emit(stream, partial).await;
            }
        }
    }

    /// Marks this sink as a relay's: its lines are labelled by the relay
    /// already, and its report is taken out of its stderr.
    pub fn relay(mut self) -> Self {
        self.relay = true;
        self.label = None;
        self
    }

    async fn emit(&mut self, stream: Stream, mut block: Vec<u8>) {
        if self.relay && stream == Stream::Err {
            block = self.take_relay_report(block);
            if block.is_empty() {
                return;
            }
        }
        remember_tail(&mut self.stats.tail, &block);
        if !self.forward || (stream == Stream::Out && self.writer.stdout_closed()) {
            return;
        }
        let block = match &self.label {
            Some(label) => labelled(label, &block),
            None => block,
        };
        let _ = self.writer.tx.send(Message::Block(stream, block)).await;
    }
}

impl NodeSink {
    /// Removes the report line from a relay's stderr block and keeps it.
    fn take_relay_report(&mut self, block: Vec<u8>) -> Vec<u8> {
        let marker = RELAY_REPORT_MARKER.as_bytes();
        if memchr::memmem::find(&block, marker).is_none() {
            return block;
        }
        let mut rest = Vec::with_capacity(block.len());
        for line in block.split_inclusive(|b| *b == b'\n') {
            match line.strip_prefix(marker) {
                Some(json) => {
                    let json = json.strip_suffix(b"\n").unwrap_or(json);
                    self.stats.relay_report = Some(String::from_utf8_lossy(json).into_owned());
                }
                None => rest.extend_from_slice(line),
            }
        }
        rest
    }
}

/// `label` before every line of `block`; the last line ends with a newline.
fn labelled(label: &[u8], block: &[u8]) -> Vec<u8> {
    let lines = memchr::memchr_iter(b'\n', block).count() + 1;
    let mut out = Vec::with_capacity(block.len() + lines * label.len() + 1);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', block) {
        out.extend_from_slice(label);
        out.extend_from_slice(&block[start..=end]);
        start = end + 1;
    }
    if start < block.len() {
        out.extend_from_slice(label);
        out.extend_from_slice(&block[start..]);
        out.push(b'\n');
    }
    out
}

/// Keeps the last [`TAIL_LINES`] lines of the node's output.
fn remember_tail(tail: &mut VecDeque<String>, block: &[u8]) {
    let trimmed = block.strip_suffix(b"\n").unwrap_or(block);
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut end = trimmed.len();
    for pos in memchr::memrchr_iter(b'\n', trimmed) {
        lines.push(&trimmed[pos + 1..end]);
        end = pos;
        if lines.len() == TAIL_LINES {
            break;
        }
    }
    if lines.len() < TAIL_LINES {
        lines.push(&trimmed[..end]);
    }
    for line in lines.into_iter().rev() {
        let cut = &line[..line.len().min(TAIL_LINE_MAX)];
        tail.push_back(String::from_utf8_lossy(cut).into_owned());
        if tail.len() > TAIL_LINES {
            tail.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_every_line_and_ends_the_last() {
        assert_eq!(labelled(b"0 a: ", b"x\ny\n"), b"0 a: x\n0 a: y\n");
        assert_eq!(labelled(b"1 b: ", b"x\npartial"), b"1 b: x\n1 b: partial\n");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let mut tail = VecDeque::new();
        remember_tail(&mut tail, b"1\n2\n3\n");
        remember_tail(&mut tail, b"4\n5\n6\n7\n");
        assert_eq!(tail, ["3", "4", "5", "6", "7"]);
        remember_tail(&mut tail, b"no newline");
        assert_eq!(tail.back().map(String::as_str), Some("no newline"));
    }

    #[tokio::test]
    async fn sink_sends_whole_lines_only() {
        let (tx, mut rx) = mpsc::channel(16);
        let writer = Writer {
            tx,
            stdout_closed: Arc::new(AtomicBool::new(false)),
        };
        let mut sink = NodeSink::new(writer, Some("3 h: ".into()), true, false, true);
        sink.feed(Stream::Out, b"ab").await;
        sink.feed(Stream::Out, b"c\nde").await;
        sink.feed(Stream::Err, b"oops\n").await;
        sink.finish().await;
        let mut got = Vec::new();
        while let Ok(Message::Block(stream, data)) = rx.try_recv() {
            got.push((stream, String::from_utf8(data).unwrap()));
        }
        assert_eq!(
            got,
            vec![
                (Stream::Out, "3 h: abc\n".to_string()),
                (Stream::Err, "3 h: oops\n".to_string()),
                (Stream::Out, "3 h: de\n".to_string()),
            ]
        );
        assert_eq!((sink.stats.bytes_out, sink.stats.bytes_err), (6, 5));
    }
}
