//! What a relay's exec_all (`exec-all --relay-report`, past `--fanout`)
//! tells the head's exec_all of each node of its group: a [`RelayRecord`],
//! the relay's own [`NodeRecord`]s serialised as they are (lossless: a
//! node's outcome whole, `core_dumped` included, its evidence, every field
//! the head keeps of a node but captured output, which a relay never
//! holds), as the last line of the relay's stderr: [`MARKER`], then the
//! record as JSON. The head's leg takes that line out of the stream
//! ([`RecordTap`]); it is not the user's `--report`, whose statuses are
//! words for people. Between two exec_alls of one program: no agent takes
//! part in it.

use serde::{Deserialize, Serialize};

use super::record::NodeRecord;

/// The start of the record's line. It begins with the ASCII record
/// separator, which a program's text output does not.
pub const MARKER: &[u8] = b"\x1emultinode-relay-record ";
/// The most bytes of a record the head takes (about 4 KB a node).
pub const MAX_RECORD: usize = 64 * 1024 * 1024;

/// A relay's record of its group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayRecord {
    /// The rank whose failure decided the relay's exit code.
    pub first_failure: Option<usize>,
    /// The records of the group's nodes, as the relay's dispatcher kept them.
    pub nodes: Vec<NodeRecord>,
}

impl RelayRecord {
    /// The record's line: [`MARKER`], the JSON, a newline.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = MARKER.to_vec();
        serde_json::to_writer(&mut line, self).expect("a relay record serialises");
        line.push(b'\n');
        line
    }
}

/// Takes a relay's record out of its stderr, as chunks come: the line that
/// starts with [`MARKER`] at the start of a line. Bytes that may be the
/// start of it are held until the next chunk says (the marker starts with
/// a byte text does not hold: in practice nothing else is ever held).
#[derive(Debug)]
pub struct RecordTap {
    /// The end of the last chunk, when it may be the start of the marker.
    held: Vec<u8>,
    /// The record's JSON, from the marker on, until its newline.
    record: Option<Vec<u8>>,
    /// The next byte starts a line.
    line_start: bool,
    /// The record, once its line is whole.
    done: Option<RelayRecord>,
}

impl Default for RecordTap {
    fn default() -> Self {
        RecordTap {
            held: Vec::new(),
            record: None,
            line_start: true,
            done: None,
        }
    }
}

impl RecordTap {
    /// Takes a chunk of stderr; returns what is not the record.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(chunk);
        let mut pass = Vec::with_capacity(data.len());
        let mut rest: &[u8] = &data;
        while !rest.is_empty() {
            if let Some(record) = &mut self.record {
                let end = memchr::memchr(b'\n', rest);
                let take = end.map_or(rest.len(), |e| e);
                if record.len() + take <= MAX_RECORD {
                    record.extend_from_slice(&rest[..take]);
                }
                match end {
                    Some(e) => {
                        self.done = serde_json::from_slice(record).ok();
                        self.record = None;
                        self.line_start = true;
                        rest = &rest[e + 1..];
                    }
                    None => rest = &[],
                }
                continue;
            }
            match find_marker(rest, self.line_start) {
                Some(at) => {
                    pass.extend_from_slice(&rest[..at]);
                    self.record = Some(Vec::new());
                    rest = &rest[at + MARKER.len()..];
                }
                None => {
                    // A last partial line that may grow into the marker waits.
                    let line = memchr::memrchr(b'\n', rest).map_or(0, |nl| nl + 1);
                    let tail = &rest[line..];
                    let may_be = (line > 0 || self.line_start)
                        && !tail.is_empty()
                        && MARKER.starts_with(tail);
                    let keep = if may_be { line } else { rest.len() };
                    pass.extend_from_slice(&rest[..keep]);
                    self.held.extend_from_slice(&rest[keep..]);
                    if keep > 0 {
                        self.line_start = rest[keep - 1] == b'\n';
                    }
                    rest = &[];
                }
            }
        }
        pass
    }

    /// The stream ended: what was held that is not the record.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }

    /// The record, once its line came whole.
    pub fn take(&mut self) -> Option<RelayRecord> {
        self.done.take()
    }
}

/// Where the marker starts a line in `data` (`line_start`: `data` starts one).
fn find_marker(data: &[u8], line_start: bool) -> Option<usize> {
    memchr::memmem::find_iter(data, MARKER).find(|&at| {
        if at == 0 {
            line_start
        } else {
            data[at - 1] == b'\n'
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::exec_all::record::{ErrorLines, Evidence, NodeOutcome};
    use crate::process::Outcome;
    use crate::protocol::exit_info::ExitInfo;

    fn record() -> RelayRecord {
        let mut node = NodeRecord::new(2, "n2".into());
        node.address = Some("10.0.0.2:29400".into());
        node.started = Some(SystemTime::UNIX_EPOCH);
        node.ended = Some(SystemTime::now());
        node.outcome = Some(NodeOutcome::Finished(Outcome::Signaled {
            signal: 11,
            core_dumped: true,
        }));
        node.stats.bytes_out = 3;
        node.stats.bytes_err = 4;
        node.stats.file_failure = Some("disk full".into());
        node.evidence = Evidence {
            exit_info: Some(ExitInfo {
                oom_kills: Some(1),
                cgroup: Some("/sys/fs/cgroup/x/memory.events".into()),
                core: Some("/tmp/core.1".into()),
            }),
            tail: ["a".to_string(), "b".to_string()].into(),
            errors: ErrorLines {
                program_error: Some("E".into()),
                nccl_cause: Some("x NCCL WARN cause".into()),
                nccl_line: Some("x NCCL WARN line".into()),
            },
            binding: Some("rank 2 (local 0) on n2: CPUs 0-3 [numa]".into()),
        };
        node.process = Some(super::super::record::ProcessOf {
            node: 1,
            local_rank: 0,
        });
        let mut lost = NodeRecord::new(3, "n3".into());
        lost.outcome = Some(NodeOutcome::Lost("connection reset".into()));
        RelayRecord {
            first_failure: Some(2),
            nodes: vec![node, lost, NodeRecord::new(4, "n4".into())],
        }
    }

    /// Every field the head keeps of a node comes back equal after the
    /// wire, but captured output, which a relay never holds.
    #[test]
    fn a_record_is_equal_after_the_wire() {
        let record = record();
        let line = record.to_line();
        let mut tap = RecordTap::default();
        assert!(tap.feed(&line).is_empty());
        assert_eq!(tap.take(), Some(record.clone()));

        let mut captured = record.clone();
        captured.nodes[0].stats.captured_out = b"not sent".to_vec();
        assert_eq!(captured.to_line(), line, "captured output stays home");
    }

    /// However the line is cut into chunks, the record comes back whole
    /// and nothing else of the stream is lost or kept.
    #[test]
    fn the_record_is_taken_whole_from_any_chunks() {
        let record = record();
        let mut stream = b"2 n2: oops\n\x1ea line that is no marker\n".to_vec();
        stream.extend_from_slice(&record.to_line());
        for size in [1, 2, 7, 64, stream.len()] {
            let mut tap = RecordTap::default();
            let mut passed = Vec::new();
            for chunk in stream.chunks(size) {
                passed.extend(tap.feed(chunk));
            }
            passed.extend(tap.finish());
            assert_eq!(
                String::from_utf8_lossy(&passed),
                "2 n2: oops\n\x1ea line that is no marker\n",
                "chunks of {size}"
            );
            assert_eq!(tap.take().as_ref(), Some(&record), "chunks of {size}");
        }
    }

    #[test]
    fn the_marker_counts_only_at_the_start_of_a_line() {
        let mut tap = RecordTap::default();
        let mut line = b"text ".to_vec();
        line.extend_from_slice(&record().to_line());
        assert_eq!(tap.feed(&line), line);
        assert_eq!(tap.take(), None);
    }
}
