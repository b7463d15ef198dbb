//! One node's end of the output path: its bytes cut into lines for the
//! writer thread (`writer`), its files, and what the report keeps of it.
//!
//! One node alone, unlabelled, is a byte pipe: every chunk is passed on as it
//! comes. When several nodes share the streams, or with `--label`, a node's
//! bytes are cut after the last line end of each chunk (`\n`, and `\r`, which
//! progress bars end their updates with); the whole lines go to the writer as
//! one block (one `write` for many lines) and the partial last line waits for
//! its end, but never long: once the node has been quiet for [`QUIET`] (or the
//! line has waited [`MAX_HOLD`]) it is written as it is. Unlabelled, its bytes
//! pass unchanged and the line goes on when the rest comes; labelled, it is
//! written as a line of its own (`RANK HOST: ` in front, a newline added) and
//! the rest of it gets the label again. The channel to the writer is bounded:
//! a slow terminal slows the nodes (through SSH flow control), it does not
//! grow memory. A stdout or stderr that cannot be written (`| head`,
//! `/dev/full`) ends the run (see `dispatch`).

use std::collections::VecDeque;

use tokio::time::{Duration, Instant};

use super::error_line::ErrorScan;
use super::files::NodeFiles;
use super::record::{Evidence, OutputStats};
use super::writer::{Stream, Writer};

/// A line longer than this is passed on in pieces instead of held whole.
const MAX_PARTIAL_LINE: usize = 1024 * 1024;
/// A partial line is written once its node has been quiet this long (long
/// enough that a node streaming lines seldom stalls that long mid-line)...
pub const QUIET: Duration = Duration::from_millis(150);
/// ... or once it has waited this long, however its node drips.
pub const MAX_HOLD: Duration = Duration::from_secs(1);
/// Lines of each node kept for the failure report.
pub const TAIL_LINES: usize = 5;
/// Each kept line is cut to this many bytes.
const TAIL_LINE_MAX: usize = 200;

/// A capturing sink keeps at most this much of each stream.
pub const CAPTURE_MAX: usize = 4 * 1024 * 1024;

/// One node's end of the output path.
pub struct NodeSink {
    writer: Writer,
    label: Option<Vec<u8>>,
    forward: bool,
    capture: bool,
    /// Hold partial lines (several nodes share the streams, or labels).
    hold: bool,
    /// End a partial last line with a newline (several nodes share the streams).
    end_partial: bool,
    /// `--timestamps`: every line starts with the time it came.
    timestamps: bool,
    /// `--output DIR`: the node's files.
    files: Option<NodeFiles>,
    out: Partial,
    err: Partial,
    /// Each stream read for the program's error and NCCL's cause.
    scans: [ErrorScan; 2],
    pub stats: OutputStats,
    /// Its last lines and the errors they name (the node's task adds what
    /// the node saw of the end).
    pub evidence: Evidence,
    /// Its first stderr block was looked at for a binding line.
    binding_looked: bool,
}

/// The partial last line of one stream.
#[derive(Default)]
struct Partial {
    bytes: Vec<u8>,
    /// When the held bytes started waiting, and when the last of them came.
    since: Option<Instant>,
    last: Option<Instant>,
    /// Unlabelled: what was written last did not end its line.
    open: bool,
}

impl Partial {
    fn due(&self) -> Option<Instant> {
        Some((self.last? + QUIET).min(self.since? + MAX_HOLD))
    }

    fn take(&mut self) -> Vec<u8> {
        self.since = None;
        self.last = None;
        std::mem::take(&mut self.bytes)
    }
}

/// What a node's output goes through, as the plan says (see `plan`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkSettings {
    /// `RANK HOST: ` before every line (`--label`).
    pub label: Option<String>,
    /// Written to exec_all's streams; false: counted and kept for the report only.
    pub forward: bool,
    /// Every byte kept (see [`CAPTURE_MAX`]): `--group`, `collect`.
    pub capture: bool,
    /// Other nodes write to the same streams: partial lines are held
    /// (briefly) and a partial last line gets a newline. Alone and
    /// unlabelled, the node's bytes pass exactly and at once.
    pub shared: bool,
    /// `--timestamps`: every line starts with the time it came (before the
    /// label, if any); lines are then cut as for labels.
    pub timestamps: bool,
    /// The node is a relay: its lines come labelled (and stamped) by its own
    /// exec_all already (its record is taken out of its stderr by its leg).
    pub relay: bool,
}

impl NodeSink {
    /// A node's sink; `files`: `--output DIR`'s two files of the node, which
    /// get its bytes as they come.
    pub fn new(writer: Writer, settings: &SinkSettings, files: Option<NodeFiles>) -> Self {
        let relay = settings.relay;
        let timestamps = settings.timestamps && !relay;
        let label = match (&settings.label, relay) {
            (_, true) => None,
            (None, false) if timestamps => Some(Vec::new()),
            (label, false) => label.clone().map(String::into_bytes),
        };
        let cut_lines = settings.shared || settings.label.is_some() || settings.timestamps;
        NodeSink {
            timestamps,
            files,
            hold: cut_lines || relay,
            end_partial: cut_lines,
            writer,
            label,
            forward: settings.forward,
            capture: settings.capture,
            out: Partial::default(),
            err: Partial::default(),
            scans: Default::default(),
            stats: OutputStats::default(),
            evidence: Evidence::default(),
            binding_looked: false,
        }
    }

    /// Takes a chunk of a stream; sends what can go now: everything when
    /// lines are not held, else the whole lines it completes.
    pub async fn feed(&mut self, stream: Stream, data: &[u8]) {
        match stream {
            Stream::Out => self.stats.bytes_out += data.len() as u64,
            Stream::Err => self.stats.bytes_err += data.len() as u64,
        }
        if let Some(files) = &mut self.files {
            files.write(stream, data);
            if files.failure.is_some() && self.stats.file_failure.is_none() {
                self.stats.file_failure = files.failure.clone();
            }
        }
        if self.capture {
            let kept = match stream {
                Stream::Out => &mut self.stats.captured_out,
                Stream::Err => &mut self.stats.captured_err,
            };
            let room = CAPTURE_MAX.saturating_sub(kept.len());
            kept.extend_from_slice(&data[..data.len().min(room)]);
        }
        if data.is_empty() {
            return;
        }
        if !self.hold {
            self.emit(stream, data.to_vec()).await;
            return;
        }
        let labelled = self.label.is_some();
        let partial = match stream {
            Stream::Out => &mut self.out,
            Stream::Err => &mut self.err,
        };
        // A held `\r` not followed by `\n` has ended its line after all.
        let cut = last_cut(data, labelled)
            .or_else(|| (partial.bytes.last() == Some(&b'\r') && data[0] != b'\n').then_some(0));
        let block = match cut {
            Some(cut) => {
                let mut block = partial.take();
                block.extend_from_slice(&data[..cut]);
                partial.bytes.extend_from_slice(&data[cut..]);
                block
            }
            None => {
                partial.bytes.extend_from_slice(data);
                if partial.bytes.len() < MAX_PARTIAL_LINE {
                    let now = Instant::now();
                    partial.since.get_or_insert(now);
                    partial.last = Some(now);
                    return;
                }
                partial.take()
            }
        };
        if !partial.bytes.is_empty() {
            let now = Instant::now();
            partial.since = Some(now);
            partial.last = Some(now);
        }
        self.emit(stream, block).await;
    }

    /// When the oldest partial line is due to be written (see [`QUIET`]);
    /// `None` while nothing is held.
    pub fn flush_at(&self) -> Option<Instant> {
        match (self.out.due(), self.err.due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Writes the partial lines that are due (see [`NodeSink::flush_at`]).
    pub async fn flush_due(&mut self) {
        let now = Instant::now();
        for stream in [Stream::Out, Stream::Err] {
            let partial = match stream {
                Stream::Out => &mut self.out,
                Stream::Err => &mut self.err,
            };
            if partial.due().is_none_or(|due| due > now) {
                continue;
            }
            let block = partial.take();
            self.emit(stream, block).await;
        }
    }

    /// The node is done: its partial last lines are sent, ended with a
    /// newline when other nodes share the streams (never two lines in one).
    pub async fn finish(&mut self) {
        for stream in [Stream::Out, Stream::Err] {
            let partial = match stream {
                Stream::Out => &mut self.out,
                Stream::Err => &mut self.err,
            };
            let mut block = partial.take();
            if self.end_partial
                && self.label.is_none()
                && (!block.is_empty() || partial.open)
                && block.last().is_none_or(|b| *b != b'\n')
            {
                block.push(b'\n');
            }
            if !block.is_empty() {
                self.emit(stream, block).await;
            }
            self.scans[stream as usize].finish(&mut self.evidence.errors);
        }
    }

    async fn emit(&mut self, stream: Stream, block: Vec<u8>) {
        if matches!(stream, Stream::Err) && !self.binding_looked {
            // `multinode bind --report-bindings` writes it before the script runs.
            self.binding_looked = true;
            self.evidence.binding = crate::binding::reported_in(&block);
        }
        remember_tail(&mut self.evidence.tail, &block);
        if let Some(line) = super::nccl_line::last_in(&block) {
            self.evidence.errors.nccl_line = Some(line);
        }
        self.scans[stream as usize].feed(&block, &mut self.evidence.errors);
        if self.label.is_none() {
            let partial = match stream {
                Stream::Out => &mut self.out,
                Stream::Err => &mut self.err,
            };
            partial.open = block.last().is_some_and(|b| *b != b'\n');
        }
        if !self.forward || self.writer.closed(stream) {
            return;
        }
        let block = match &self.label {
            Some(label) if self.timestamps => {
                let mut prefix = timestamp(std::time::SystemTime::now()).into_bytes();
                prefix.push(b' ');
                prefix.extend_from_slice(label);
                labelled(&prefix, &block)
            }
            Some(label) => labelled(label, &block),
            None => block,
        };
        self.writer.block(stream, block).await;
    }
}

/// `2026-12-01T09:24:20.123Z`: `--timestamps`' prefix.
pub fn timestamp(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Where to cut `data`: after its last line end. Labelled, a `\r` that is
/// the chunk's last byte is not taken as one yet (a `\n` may follow: one
/// `\r\n` line end, not two lines).
fn last_cut(data: &[u8], labelled: bool) -> Option<usize> {
    let mut end = data.len();
    loop {
        let pos = memchr::memrchr2(b'\n', b'\r', &data[..end])?;
        if labelled && data[pos] == b'\r' && pos + 1 == data.len() {
            end = pos;
            continue;
        }
        return Some(pos + 1);
    }
}

/// `label` before every line of `block`; a line ends at `\n`, `\r\n`, or a
/// `\r` alone (a progress bar's update, which keeps its `\r`); the last
/// line, if it has no end, gets a newline.
fn labelled(label: &[u8], block: &[u8]) -> Vec<u8> {
    // Most blocks have no `\r`: one fast scan says so, and the lines are cut
    // by the single-byte search (the output's hot path with `--label`).
    let has_cr = memchr::memchr(b'\r', block).is_some();
    let lines = memchr::memchr_iter(b'\n', block).count() + 1;
    let mut out = Vec::with_capacity(block.len() + lines * label.len() + 1);
    let mut start = 0;
    let mut line = |end: usize, out: &mut Vec<u8>| {
        out.extend_from_slice(label);
        out.extend_from_slice(&block[start..=end]);
        start = end + 1;
    };
    if has_cr {
        for end in memchr::memchr2_iter(b'\n', b'\r', block) {
            if block[end] == b'\r' && block.get(end + 1) == Some(&b'\n') {
                continue;
            }
            out.reserve(label.len());
            line(end, &mut out);
        }
    } else {
        for end in memchr::memchr_iter(b'\n', block) {
            line(end, &mut out);
        }
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
    use crate::exec_all::writer::Message;
    use tokio::sync::mpsc;

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
        let mut sink = NodeSink::new(writer(tx), &labelled_by("3 h: "), None);
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

    #[tokio::test(start_paused = true)]
    async fn the_last_nccl_line_and_timestamps() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut sink = NodeSink::new(
            writer(tx),
            &SinkSettings {
                timestamps: true,
                ..shared()
            },
            None,
        );
        sink.feed(Stream::Err, b"h:1:2 [0] NCCL WARN first\nplain\n")
            .await;
        sink.feed(Stream::Out, b"x: NCCL error in: y\nok\n").await;
        sink.finish().await;
        assert_eq!(
            sink.evidence.errors.nccl_line.as_deref(),
            Some("x: NCCL error in: y")
        );
        let got = blocks(&mut rx);
        assert_eq!(got.len(), 2);
        for (_, text) in &got {
            for line in text.lines() {
                // 2026-12-01T09:24:20.123Z, a space, the line.
                assert_eq!(&line[23..25], "Z ", "{line:?}");
            }
        }
        assert!(got[1].1.ends_with("Z ok\n"), "{got:?}");
    }

    /// A node among others, output forwarded, unlabelled.
    fn shared() -> SinkSettings {
        SinkSettings {
            forward: true,
            shared: true,
            ..SinkSettings::default()
        }
    }

    fn labelled_by(label: &str) -> SinkSettings {
        SinkSettings {
            label: Some(label.into()),
            ..shared()
        }
    }

    fn writer(tx: mpsc::Sender<Message>) -> Writer {
        Writer::to_channel(tx)
    }

    fn blocks(rx: &mut mpsc::Receiver<Message>) -> Vec<(Stream, String)> {
        let mut got = Vec::new();
        while let Ok(Message::Block(stream, data)) = rx.try_recv() {
            got.push((stream, String::from_utf8(data).unwrap()));
        }
        got
    }

    fn out(text: &str) -> (Stream, String) {
        (Stream::Out, text.to_string())
    }

    #[test]
    fn labels_progress_updates_and_crlf_lines() {
        assert_eq!(
            labelled(b"0 a: ", b"10%\r20%\rdone\r\nnext"),
            b"0 a: 10%\r0 a: 20%\r0 a: done\r\n0 a: next\n"
        );
    }

    #[test]
    fn cuts_after_the_last_line_end() {
        assert_eq!(last_cut(b"a\nb", false), Some(2));
        assert_eq!(last_cut(b"a\rb", false), Some(2));
        assert_eq!(last_cut(b"abc", false), None);
        assert_eq!(last_cut(b"a\r", false), Some(2));
        // Labelled, a final \r waits for a possible \n.
        assert_eq!(last_cut(b"a\nb\r", true), Some(2));
        assert_eq!(last_cut(b"b\r", true), None);
        assert_eq!(last_cut(b"b\r\n", true), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn one_unlabelled_node_is_a_byte_pipe() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut sink = NodeSink::new(
            writer(tx),
            &SinkSettings {
                shared: false,
                ..shared()
            },
            None,
        );
        sink.feed(Stream::Out, b"abc").await;
        assert_eq!(blocks(&mut rx), [out("abc")]);
        assert_eq!(sink.flush_at(), None);
        sink.feed(Stream::Out, b"def").await;
        sink.finish().await;
        assert_eq!(blocks(&mut rx), [out("def")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_line_is_written_once_the_node_is_quiet() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut sink = NodeSink::new(writer(tx), &shared(), None);
        sink.feed(Stream::Out, b"x\nabc").await;
        assert_eq!(blocks(&mut rx), [out("x\n")]);
        let due = sink.flush_at().expect("a partial line is held");
        assert_eq!(due, Instant::now() + QUIET);
        tokio::time::sleep_until(due).await;
        sink.flush_due().await;
        // Unlabelled: the bytes as they are, the line goes on later.
        assert_eq!(blocks(&mut rx), [out("abc")]);
        assert_eq!(sink.flush_at(), None);
        sink.feed(Stream::Out, b"def\n10%\r").await;
        assert_eq!(blocks(&mut rx), [out("def\n10%\r")]);
        sink.feed(Stream::Out, b"20%").await;
        sink.finish().await;
        // Other nodes share the streams: the last line gets its end.
        assert_eq!(blocks(&mut rx), [out("20%\n")]);
    }

    #[tokio::test(start_paused = true)]
    async fn labelled_partial_lines_are_lines_of_their_own() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut sink = NodeSink::new(writer(tx), &labelled_by("1 h: "), None);
        sink.feed(Stream::Out, b"abc").await;
        tokio::time::sleep(QUIET).await;
        sink.flush_due().await;
        assert_eq!(blocks(&mut rx), [out("1 h: abc\n")]);
        sink.feed(Stream::Out, b"def\n").await;
        assert_eq!(blocks(&mut rx), [out("1 h: def\n")]);
        // A progress bar's update ends with \r: written as soon as it is sure
        // that no \n follows (next chunk, or quiet).
        sink.feed(Stream::Out, b"10%\r").await;
        assert!(blocks(&mut rx).is_empty());
        sink.feed(Stream::Out, b"20%\r").await;
        assert_eq!(blocks(&mut rx), [out("1 h: 10%\r")]);
        tokio::time::sleep(QUIET).await;
        sink.flush_due().await;
        assert_eq!(blocks(&mut rx), [out("1 h: 20%\r")]);
        sink.finish().await;
        assert!(blocks(&mut rx).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dripping_line_waits_at_most_max_hold() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut sink = NodeSink::new(writer(tx), &labelled_by("0 h: "), None);
        let start = Instant::now();
        loop {
            sink.feed(Stream::Err, b".").await;
            tokio::time::sleep(QUIET / 2).await;
            if sink.flush_at().is_some_and(|at| at <= Instant::now()) {
                break;
            }
        }
        assert!(
            start.elapsed() <= MAX_HOLD + QUIET / 2,
            "{:?}",
            start.elapsed()
        );
        sink.flush_due().await;
        let got = blocks(&mut rx);
        assert_eq!(got.len(), 1);
        assert!(got[0].1.starts_with("0 h: ..."), "{got:?}");
    }
}
