//! Which output lines are NCCL's warnings and errors, for the first-failure
//! verdict: `host:pid:tid [rank] NCCL WARN ...`, PyTorch's `NCCL error in:
//! ...` and `[E ProcessGroupNCCL.cpp:...]` (its watchdog's timeout) lines;
//! and which line gives NCCL's cause ([`CauseScan`]): its first `NCCL WARN`, or,
//! without `NCCL_DEBUG`, the message PyTorch quotes after `Last error:`.
//!
//! Every block of output is scanned, so the scan is one SIMD search for
//! `NCCL` (several GB/s, against the output path's ~170 MB/s), and only the lines
//! of a block where it hits are looked at. A line that names NCCL
//! only in lower case (`ncclSystemError: ...`) is not taken: PyTorch prints
//! it after an `NCCL error in:` line, which is.

use std::sync::LazyLock;

use memchr::memmem::Finder;

static NCCL: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"NCCL"));

/// The longest line kept.
const LINE_MAX: usize = 400;

/// Whether `line` is an NCCL warning or error.
pub fn matches(line: &[u8]) -> bool {
    if NCCL.find(line).is_none() {
        return false;
    }
    let has = |s: &[u8]| memchr::memmem::find(line, s).is_some();
    has(b"NCCL WARN")
        || has(b"error")
        || has(b"Error")
        || has(b"ERROR")
        || line.starts_with(b"[E ")
        || has(b"Watchdog caught")
}

/// The last NCCL warning or error line of `block` (whole lines), if any:
/// a quick scan for `NCCL` first, lines only where it hits.
pub fn last_in(block: &[u8]) -> Option<String> {
    NCCL.find(block)?;
    block
        .split(|b| *b == b'\n' || *b == b'\r')
        .rev()
        .find(|line| matches(line))
        .map(|line| String::from_utf8_lossy(&line[..line.len().min(LINE_MAX)]).into_owned())
}

/// Whether `line` is one of NCCL's own warnings (`NCCL_DEBUG=WARN` or more).
pub fn is_warn(line: &[u8]) -> bool {
    memchr::memmem::find(line, b"NCCL WARN").is_some()
}

/// What PyTorch writes between an NCCL error and NCCL's own message
/// (`ncclGetLastError`), on a line of its own:
///
/// ```text
/// torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9
/// ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
/// Last error:
/// Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60
/// ```
pub const LAST_ERROR: &[u8] = b"Last error:";
/// `Last error:` counts when it comes this many lines after the NCCL error.
const LAST_ERROR_WITHIN: u8 = 3;

/// Finds NCCL's cause in a node's lines, taken one by one: its first
/// `NCCL WARN` line (NCCL prints the cause first, then how it travelled up),
/// or the line after PyTorch's `Last error:` (the same message, there even
/// without `NCCL_DEBUG`).
#[derive(Debug, Default)]
pub struct CauseScan {
    /// Lines since the last NCCL error line, while `Last error:` may follow.
    since_error: Option<u8>,
    /// The last line was `Last error:`: this one is the cause.
    next_is_cause: bool,
}

impl CauseScan {
    /// Whether the next lines must be looked at however they look.
    pub fn pending(&self) -> bool {
        self.since_error.is_some() || self.next_is_cause
    }

    /// Takes one line (`text`: the line without a rank's tag such as
    /// `[rank1]: `); whether the line is NCCL's cause.
    pub fn line(&mut self, line: &[u8], text: &[u8]) -> bool {
        let text = text.trim_ascii();
        if std::mem::take(&mut self.next_is_cause) && !text.is_empty() {
            return true;
        }
        if is_warn(line) {
            self.since_error = None;
            return true;
        }
        if matches(line) {
            self.since_error = Some(0);
        } else if let Some(n) = self.since_error {
            self.next_is_cause = text == LAST_ERROR;
            self.since_error = (!self.next_is_cause && n + 1 < LAST_ERROR_WITHIN).then_some(n + 1);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_warnings_and_errors_match() {
        for line in [
            "node2:1234:1250 [1] NCCL WARN NET/Socket : Connection closed by remote peer",
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1207, unhandled system error",
            "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.19.3",
            "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
        ] {
            assert!(matches(line.as_bytes()), "{line}");
        }
        for line in [
            "node2:1234:1250 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
            "error: disk full",
            "step 10 loss 0.5",
            "ncclSystemError: System call (e.g. socket, malloc) failed",
        ] {
            assert!(!matches(line.as_bytes()), "{line}");
        }
    }

    #[test]
    fn the_last_matching_line_of_a_block() {
        let block = b"a NCCL WARN first\nNCCL INFO fine\nb NCCL WARN second\nplain\n";
        assert_eq!(last_in(block).as_deref(), Some("b NCCL WARN second"));
        assert_eq!(last_in(b"nothing here\n"), None);
    }

    #[test]
    fn the_cause_is_the_first_warn_or_the_line_after_last_error() {
        let cause = |lines: &[&str]| {
            let mut c = CauseScan::default();
            lines
                .iter()
                .find(|l| {
                    let text = l.strip_prefix("[rank1]: ").unwrap_or(l);
                    c.line(l.as_bytes(), text.as_bytes())
                })
                .map(|l| l.to_string())
        };
        // NCCL_DEBUG=WARN: NCCL's own line, then PyTorch's exception.
        let warn = "[2026-12-03 14:51:53] vm:726:726 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60";
        assert_eq!(
            cause(&["", warn, "[rank1]: Traceback (most recent call last):"]).as_deref(),
            Some(warn)
        );
        // Without NCCL_DEBUG: what PyTorch quotes after `Last error:`.
        let quoted = [
            "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9",
            "[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
            "[rank1]: Last error:",
            "[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60",
        ];
        assert_eq!(
            cause(&quoted).as_deref(),
            Some("[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60")
        );
        // `Last error:` far from any NCCL error is someone else's.
        assert_eq!(cause(&["Last error:", "disk full"]), None);
        assert_eq!(
            cause(&[quoted[0], "a", "b", "c", "Last error:", "disk full"]),
            None
        );
    }
}
