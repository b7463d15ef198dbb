//! The program's own error in a node's output, for the first-failure
//! verdict: the exception line that ends a Python traceback, a C++
//! `terminate called after throwing an instance of ...` with its `what():`,
//! a CUDA error, a `Fatal Python error:`; and NCCL's cause (see
//! `nccl_line::CauseScan`). A torchrun job always ends with torchrun's own
//! summary (its `ChildFailedError` and the `Root Cause` block), so the last
//! lines of a node alone do not say what went wrong.
//!
//! Lines may carry the tags launchers put in front: PyTorch's `[rank1]: `
//! (every line of a traceback once the process group is up), torchrun's
//! `--tee` `[default0]:`, Open MPI's `[1,0]<stderr>:`. Each tag reads its own
//! traceback, so the tracebacks of several workers that interleave are read
//! apart. The line kept is the line as printed (tags included: they name the
//! rank).
//!
//! Each block of output (one stream) is scanned once for the few strings
//! that matter (Aho-Corasick); only blocks that hold one, or that come while
//! a traceback is being read, are looked at line by line. A line cut between
//! two blocks is carried to the next (up to [`CARRY_MAX`] bytes).

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, MatchKind};

use super::nccl_line;
use super::record::ErrorLines;

/// The start of a Python traceback.
const TRACEBACK: &[u8] = b"Traceback (most recent call last):";
/// libstdc++'s last words (`... after throwing an instance of 'c10::Error'`,
/// `... without an active exception`).
const TERMINATE: &[u8] = b"terminate called";
/// The line after a `terminate called after throwing ...`.
const WHAT: &[u8] = b"what():";
/// Lines that are an error wherever they are (`RuntimeError: CUDA error: an
/// illegal memory access was encountered`, `CUDA error: out of memory` from
/// a C++ program, PyTorch's `CUDA out of memory. Tried to allocate ...`).
const ANYWHERE: [&[u8]; 3] = [b"CUDA error", b"CUDA out of memory", b"Fatal Python error"];
/// Exceptions of torchrun itself, which follow the program's own: its
/// summary of the failed workers, and its being stopped by a signal.
const LAUNCHER_EXCEPTIONS: [&[u8]; 2] = [
    b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
    b"torch.distributed.elastic.multiprocessing.api.SignalException",
];

/// A traceback is given up after this many lines without its exception line
/// (its process died while printing it).
const TRACEBACK_MAX_LINES: usize = 200;
/// Tracebacks read at once (one per tag).
const TRACEBACKS_MAX: usize = 64;
/// The longest line kept (PyTorch's CUDA OOM message is ~500 bytes).
pub const LINE_MAX: usize = 1024;
/// The longest partial line carried to the next block.
const CARRY_MAX: usize = 8 * 1024;

/// What makes a block worth reading line by line.
static NEEDLES: LazyLock<AhoCorasick> = LazyLock::new(|| {
    let mut needles = vec![TRACEBACK, TERMINATE, b"NCCL WARN", nccl_line::LAST_ERROR];
    needles.extend(ANYWHERE);
    // Leftmost semantics let the search use its SIMD prefilter (Teddy);
    // the standard ones do not, and run at ~100 MB/s.
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .build(needles)
        .expect("fixed needles build")
});

/// One stream's scan.
#[derive(Debug, Default)]
pub struct ErrorScan {
    /// A line not ended yet.
    carry: Vec<u8>,
    /// The line being carried passed [`CARRY_MAX`]: skip to its end.
    overlong: bool,
    /// The tags whose traceback is being read, with its lines so far.
    tracebacks: Vec<(Vec<u8>, usize)>,
    /// A `terminate called ...` line, waiting for its `what():`.
    terminate: Option<String>,
    nccl: nccl_line::CauseScan,
}

impl ErrorScan {
    /// Takes the next bytes of the stream; what they tell goes to `errors`
    /// (`program_error`: the last one; `nccl_cause`: the first).
    pub fn feed(&mut self, block: &[u8], errors: &mut ErrorLines) {
        let mut rest = block;
        if !self.carry.is_empty() || self.overlong {
            let Some(end) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.keep(rest);
                return;
            };
            if !self.overlong {
                let mut line = std::mem::take(&mut self.carry);
                line.extend_from_slice(&rest[..end]);
                self.line(&line, errors);
            }
            self.carry.clear();
            self.overlong = false;
            rest = &rest[end + 1..];
        }
        let whole = memchr::memrchr2(b'\n', b'\r', rest).map_or(0, |i| i + 1);
        let (lines, partial) = rest.split_at(whole);
        if self.pending() || NEEDLES.is_match(lines) {
            for line in lines[..whole.saturating_sub(1)].split(|b| *b == b'\n' || *b == b'\r') {
                self.line(line, errors);
            }
        }
        self.keep(partial);
    }

    /// The stream ended: a last line without its end counts too.
    pub fn finish(&mut self, errors: &mut ErrorLines) {
        if !self.overlong && !self.carry.is_empty() {
            let line = std::mem::take(&mut self.carry);
            self.line(&line, errors);
        }
        if let Some(terminate) = self.terminate.take() {
            errors.program_error = Some(terminate);
        }
    }

    fn keep(&mut self, partial: &[u8]) {
        if self.overlong || self.carry.len() + partial.len() > CARRY_MAX {
            self.carry.clear();
            self.overlong = !partial.is_empty() || self.overlong;
        } else {
            self.carry.extend_from_slice(partial);
        }
    }

    /// Whether the next lines must be read whatever they hold.
    fn pending(&self) -> bool {
        !self.tracebacks.is_empty() || self.terminate.is_some() || self.nccl.pending()
    }

    fn line(&mut self, line: &[u8], errors: &mut ErrorLines) {
        if line.trim_ascii().is_empty() {
            return;
        }
        let tag_len = tags_len(line);
        let (tag, text) = line.split_at(tag_len);
        if self.nccl.line(line, text) && errors.nccl_cause.is_none() {
            errors.nccl_cause = Some(kept(line));
        }
        if let Some(terminate) = self.terminate.take() {
            let what = text.trim_ascii();
            if let Some(message) = what.strip_prefix(WHAT) {
                let message = String::from_utf8_lossy(message.trim_ascii());
                errors.program_error = Some(cut(format!("{terminate} (what(): {message})")));
                return;
            }
            errors.program_error = Some(terminate);
        }
        let trimmed = text.trim_ascii_end();
        if trimmed == TRACEBACK {
            match self.tracebacks.iter().position(|(t, _)| t == tag) {
                Some(i) => self.tracebacks[i].1 = 0,
                None if self.tracebacks.len() < TRACEBACKS_MAX => {
                    self.tracebacks.push((tag.to_vec(), 0));
                }
                None => {}
            }
            return;
        }
        if text.starts_with(TERMINATE) {
            self.terminate = Some(kept(line));
            return;
        }
        if let Some(i) = self.tracebacks.iter().position(|(t, _)| t == tag) {
            self.tracebacks[i].1 += 1;
            let given_up = self.tracebacks[i].1 > TRACEBACK_MAX_LINES;
            if matches!(text.first(), Some(b' ' | b'\t')) {
                // A frame, its source line or its `^^^^` marks.
                if given_up {
                    self.tracebacks.swap_remove(i);
                }
                return;
            }
            if let Some(name) = exception_name(trimmed) {
                self.tracebacks.swap_remove(i);
                if !LAUNCHER_EXCEPTIONS.contains(&name) {
                    errors.program_error = Some(kept(line));
                }
                return;
            }
            if given_up {
                self.tracebacks.swap_remove(i);
            }
        }
        if ANYWHERE
            .iter()
            .any(|s| memchr::memmem::find(text, s).is_some())
        {
            errors.program_error = Some(kept(line));
        }
    }
}

/// The exception's name when `text` is the line that ends a traceback:
/// `torch.OutOfMemoryError: CUDA out of memory. ...`, `KeyboardInterrupt`.
fn exception_name(text: &[u8]) -> Option<&[u8]> {
    let end = text.iter().position(|b| *b == b':').unwrap_or(text.len());
    let (name, rest) = text.split_at(end);
    let first = *name.first()?;
    let named = (first.is_ascii_alphabetic() || first == b'_')
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.');
    let then = rest.is_empty() || rest == b":" || rest.starts_with(b": ");
    (named && then).then_some(name)
}

/// How many bytes of `line` are launchers' tags: `[rank1]: `,
/// `[default0]:`, `[1,0]<stderr>:` (one space after each is theirs too).
fn tags_len(line: &[u8]) -> usize {
    let mut at = 0;
    while let Some(len) = tag_len(&line[at..]) {
        at += len;
    }
    at
}

fn tag_len(line: &[u8]) -> Option<usize> {
    if line.first() != Some(&b'[') {
        return None;
    }
    let close = line.iter().take(34).position(|b| *b == b']')?;
    let inside = &line[1..close];
    let tagged = inside.iter().any(u8::is_ascii_digit)
        && inside
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b',');
    if !tagged {
        return None;
    }
    let mut end = close + 1;
    for stream in [&b"<stdout>"[..], b"<stderr>"] {
        if line[end..].starts_with(stream) {
            end += stream.len();
        }
    }
    if line.get(end) != Some(&b':') {
        return None;
    }
    end += 1;
    if line.get(end) == Some(&b' ') {
        end += 1;
    }
    Some(end)
}

/// The line as kept: whitespace trimmed, at most [`LINE_MAX`] bytes.
fn kept(line: &[u8]) -> String {
    cut(String::from_utf8_lossy(line.trim_ascii()).into_owned())
}

fn cut(mut text: String) -> String {
    if text.len() > LINE_MAX {
        let mut end = LINE_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1's torchrun (torch 2.11, on an H200) when its worker asks for
    /// 400 GiB on its GPU: the worker's traceback, each line tagged by
    /// PyTorch, then torchrun's own traceback and summary
    /// (tests/fixtures/torchrun, the real output).
    const OOM: [&str; 2] = [
        include_str!("../../tests/fixtures/torchrun/oom.stdout"),
        include_str!("../../tests/fixtures/torchrun/oom.stderr"),
    ];
    /// Two NCCL ranks on one GPU, `NCCL_DEBUG=WARN`: NCCL's warning (after
    /// its empty line, on stdout), the worker's traceback, torchrun's summary.
    const DUPLICATE_GPU: [&str; 2] = [
        include_str!("../../tests/fixtures/torchrun/duplicate-gpu.stdout"),
        include_str!("../../tests/fixtures/torchrun/duplicate-gpu.stderr"),
    ];
    /// The same without `NCCL_DEBUG`: NCCL prints nothing.
    const DUPLICATE_GPU_QUIET: [&str; 2] = [
        include_str!("../../tests/fixtures/torchrun/duplicate-gpu-quiet.stdout"),
        include_str!("../../tests/fixtures/torchrun/duplicate-gpu-quiet.stderr"),
    ];
    /// PyTorch's NCCL exception in both (what NCCL 2.28.9 returned).
    const DIST_BACKEND_ERROR: &str = "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9";

    const OOM_LINE: &str = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 139.29 GiB is free. Including non-PyTorch memory, this process has 518.00 MiB memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";

    fn scan(text: &str) -> ErrorLines {
        scan_streams(&[text], usize::MAX)
    }

    /// Each stream (its own scan) in chunks of `n` bytes, as a byte pipe
    /// cuts lines anywhere.
    fn scan_streams(streams: &[&str], n: usize) -> ErrorLines {
        let mut stats = ErrorLines::default();
        for text in streams {
            let mut scan = ErrorScan::default();
            for chunk in text.as_bytes().chunks(n) {
                scan.feed(chunk, &mut stats);
            }
            scan.finish(&mut stats);
        }
        stats
    }

    #[test]
    fn torchruns_summary_does_not_hide_the_workers_exception() {
        assert!(OOM[1].contains("Root Cause (first observed failure):"));
        for n in [usize::MAX, 7] {
            let stats = scan_streams(&OOM, n);
            assert_eq!(stats.program_error.as_deref(), Some(OOM_LINE));
            assert_eq!(stats.nccl_cause, None);
        }
    }

    #[test]
    fn a_duplicate_gpu_gives_pytorchs_error_and_nccls_cause() {
        let warn = "[2026-12-03 14:51:53] vm:726:726 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60";
        for n in [usize::MAX, 13] {
            let stats = scan_streams(&DUPLICATE_GPU, n);
            assert_eq!(stats.program_error.as_deref(), Some(DIST_BACKEND_ERROR));
            assert_eq!(stats.nccl_cause.as_deref(), Some(warn));
        }
        // Without NCCL_DEBUG, NCCL prints nothing: the cause is what
        // PyTorch quotes after `Last error:`.
        assert!(!DUPLICATE_GPU_QUIET[0].contains("NCCL WARN"));
        for n in [usize::MAX, 13] {
            let stats = scan_streams(&DUPLICATE_GPU_QUIET, n);
            assert_eq!(stats.program_error.as_deref(), Some(DIST_BACKEND_ERROR));
            assert_eq!(
                stats.nccl_cause.as_deref(),
                Some("[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60")
            );
        }
    }

    #[test]
    fn an_untagged_traceback_and_a_chained_one() {
        let text = "\
Traceback (most recent call last):
  File \"train.py\", line 3, in <module>
    load()
FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-00017'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File \"train.py\", line 5, in <module>
    raise RuntimeError(\"no data\")
RuntimeError: no data
";
        assert_eq!(
            scan(text).program_error.as_deref(),
            Some("RuntimeError: no data")
        );
        let interrupted = "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n    time.sleep(9)\nKeyboardInterrupt\n";
        assert_eq!(
            scan(interrupted).program_error.as_deref(),
            Some("KeyboardInterrupt")
        );
    }

    #[test]
    fn interleaved_workers_are_read_apart() {
        let text = "\
[rank0]: Traceback (most recent call last):
[rank1]: Traceback (most recent call last):
[rank0]:   File \"t.py\", line 9, in <module>
[rank1]:   File \"t.py\", line 9, in <module>
[rank1]:     step()
[rank1]: ValueError: bad batch
[rank0]:     step()
[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.
";
        let stats = scan(text);
        assert_eq!(
            stats.program_error.as_deref(),
            Some(
                "[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0."
            )
        );
        // The tags are read through torchrun's --tee prefix.
        let teed = "[default0]:[rank0]: Traceback (most recent call last):\n[default0]:[rank0]:   File \"t.py\", line 2, in <module>\n[default0]:[rank0]: AssertionError\n";
        assert_eq!(
            scan(teed).program_error.as_deref(),
            Some("[default0]:[rank0]: AssertionError")
        );
    }

    #[test]
    fn a_cpp_terminate_keeps_its_what() {
        let text = "\
step 12
terminate called after throwing an instance of 'c10::Error'
  what():  CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
";
        assert_eq!(
            scan(text).program_error.as_deref(),
            Some(
                "terminate called after throwing an instance of 'c10::Error' (what(): CUDA error: an illegal memory access was encountered)"
            )
        );
        assert_eq!(
            scan("terminate called without an active exception\n")
                .program_error
                .as_deref(),
            Some("terminate called without an active exception")
        );
    }

    #[test]
    fn cuda_errors_and_fatal_python_errors_anywhere() {
        for line in [
            "RuntimeError: CUDA error: device-side assert triggered",
            "train.cu:88: CUDA error: out of memory",
            "Fatal Python error: Segmentation fault",
        ] {
            let text = format!(
                "step 3\n{line}\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
            );
            assert_eq!(scan(&text).program_error.as_deref(), Some(line));
        }
    }

    #[test]
    fn ordinary_output_has_no_error() {
        let text = "\
epoch 3: loss 0.41
error: retrying download (1/3)
Epoch: 4
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
vm:844:900 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>
";
        let stats = scan(text);
        assert_eq!((stats.program_error, stats.nccl_cause), (None, None));
        // A line that is not an exception inside a traceback is not one.
        let stats = scan("Traceback (most recent call last):\n  File \"x\"\nsome other: output\n");
        assert_eq!(stats.program_error, None);
    }

    #[test]
    fn a_traceback_cut_short_is_given_up() {
        let mut stats = ErrorLines::default();
        let mut scan = ErrorScan::default();
        scan.feed(
            b"Traceback (most recent call last):\n  File \"t.py\", line 1\n",
            &mut stats,
        );
        assert!(scan.pending());
        let steps: String = (0..TRACEBACK_MAX_LINES)
            .map(|i| format!("step {i}\n"))
            .collect();
        scan.feed(steps.as_bytes(), &mut stats);
        assert!(!scan.pending());
        scan.feed(b"Epoch: 4\n", &mut stats);
        assert_eq!(stats.program_error, None);
    }

    #[test]
    fn tags_and_exception_names() {
        assert_eq!(tags_len(b"[rank12]: x"), 10);
        assert_eq!(tags_len(b"[default0]:[rank1]: x"), 20);
        assert_eq!(tags_len(b"[1,0]<stderr>:x"), 14);
        assert_eq!(tags_len(b"[E ProcessGroupNCCL.cpp:475] x"), 0);
        assert_eq!(tags_len(b"[INFO]: x"), 0);
        assert_eq!(
            exception_name(b"torch.OutOfMemoryError: CUDA out of memory."),
            Some(&b"torch.OutOfMemoryError"[..])
        );
        assert_eq!(
            exception_name(b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"),
            Some(&b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError"[..])
        );
        assert_eq!(exception_name(b"some other: output"), None);
        assert_eq!(exception_name(b"============"), None);
    }

    #[test]
    fn a_long_line_is_cut_at_a_character() {
        let line = format!("RuntimeError: CUDA error: {}", "é".repeat(LINE_MAX));
        let kept = scan(&format!("{line}\n")).program_error.unwrap();
        assert!(
            kept.len() <= LINE_MAX && line.starts_with(&kept),
            "{}",
            kept.len()
        );
    }
}
