//! Which output lines are NCCL's warnings and errors, for the first-failure
//! verdict: `host:pid:tid [rank] NCCL WARN ...`, PyTorch's `NCCL error in:
//! ...` and `[E ProcessGroupNCCL.cpp:...]` (its watchdog's timeout) lines.
//!
//! Every block of output is scanned, so the scan is one SIMD search for
//! `NCCL` (several GB/s, against the relay's ~170 MB/s), and only the lines
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
}
