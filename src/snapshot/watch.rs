//! What a running command was started as and has printed, kept while it
//! runs for `multinode top`: its `RANK` and `LOCAL_RANK`, when it last
//! printed and beat its heartbeat, and the last few KiB of each of its
//! output streams. Whoever passes the command's output on feeds it (the
//! agent's pumps; exec_all's for the node it runs itself, through
//! [`OutputTap`] and `#multinode:show-group`).
//!
//! Bounded: [`TAIL_BYTES`] a stream, and at most [`MAX_TAILS`] commands of
//! an agent keep a tail at all (the others keep their times alone): 8 MiB
//! in all, whatever the commands print.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::node_snapshot::{CommandInfo, unix_ms};

/// The bytes kept of each output stream of a command.
pub(crate) const TAIL_BYTES: usize = 4096;
/// Commands of one agent that keep a tail (each two streams of [`TAIL_BYTES`]).
pub(crate) const MAX_TAILS: usize = 1024;
/// A line of the tail is cut to this many bytes.
const LINE_MAX: usize = 512;

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Out,
    Err,
}

/// One command's record (shared by what passes its output on and the snapshots).
#[derive(Debug)]
pub(crate) struct Watched {
    pub rank: Option<usize>,
    pub local_rank: Option<usize>,
    /// `NCCL_RAS_ADDR` among its variables.
    pub ras_addr: Option<String>,
    keeps_tail: bool,
    /// When it started (ms since the Unix epoch): its spawn, or for a
    /// shown group, when it was shown.
    started_ms: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Counts changes: what was passed on is sent again only after one.
    seq: u64,
    last_output_ms: Option<u64>,
    last_beat_ms: Option<u64>,
    /// Its first output and heartbeat: the start's last phases.
    first_output_ms: Option<u64>,
    first_beat_ms: Option<u64>,
    out: Tail,
    err: Tail,
}

/// The last bytes of a stream, and whether anything before them was cut.
#[derive(Debug, Default, Clone)]
struct Tail {
    bytes: Vec<u8>,
    cut: bool,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        let chunk = if chunk.len() > TAIL_BYTES {
            self.cut = true;
            self.bytes.clear();
            &chunk[chunk.len() - TAIL_BYTES..]
        } else {
            chunk
        };
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > TAIL_BYTES {
            let over = self.bytes.len() - TAIL_BYTES;
            self.bytes.drain(..over);
            self.cut = true;
        }
    }

    /// The complete lines (`\n` or `\r` ended: a progress bar redraws
    /// with `\r`), the first left out when it may be a cut one.
    fn lines(&self) -> Vec<String> {
        let end = match self.bytes.iter().rposition(|&b| b == b'\n' || b == b'\r') {
            Some(end) => end,
            None => return Vec::new(),
        };
        let mut lines: Vec<String> = self.bytes[..end]
            .split(|&b| b == b'\n' || b == b'\r')
            .map(|l| String::from_utf8_lossy(&l[..l.len().min(LINE_MAX)]).into_owned())
            .collect();
        if self.cut && !lines.is_empty() {
            lines.remove(0);
        }
        lines.retain(|l| !l.trim().is_empty());
        lines
    }
}

impl Watched {
    pub(crate) fn new(rank: Option<usize>, local_rank: Option<usize>, keeps_tail: bool) -> Self {
        Watched {
            rank,
            local_rank,
            ras_addr: None,
            keeps_tail,
            started_ms: unix_ms(),
            state: Mutex::new(State::default()),
        }
    }

    /// From a command's variables: its `RANK` and `LOCAL_RANK`, when numbers.
    pub(crate) fn from_vars<'a>(
        vars: impl Iterator<Item = (&'a str, &'a str)>,
        keeps_tail: bool,
    ) -> Self {
        let (mut rank, mut local_rank, mut ras_addr) = (None, None, None);
        for (name, value) in vars {
            match name {
                "RANK" => rank = value.trim().parse().ok(),
                "LOCAL_RANK" => local_rank = value.trim().parse().ok(),
                super::ras::ADDR_VAR => ras_addr = Some(value.to_string()),
                _ => {}
            }
        }
        Watched {
            ras_addr,
            ..Watched::new(rank, local_rank, keeps_tail)
        }
    }

    /// A group a client shows the agent (exec_all's own node, outside any
    /// agent): what its leader (`multinode supervise`, given the process's
    /// variables) was started as.
    pub(crate) fn of_shown_group(pgid: i32, keeps_tail: bool) -> Self {
        let (rank, local_rank) = super::procfs::read_ranks(std::path::Path::new("/proc"), pgid);
        Watched::new(rank, local_rank, keeps_tail)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("not poisoned: no panics while held")
    }

    /// A chunk of the command's output, as it was passed on.
    pub(crate) fn seen(&self, stream: Stream, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        let now = unix_ms();
        let mut state = self.lock();
        state.seq += 1;
        state.last_output_ms = Some(now);
        state.first_output_ms.get_or_insert(now);
        if self.keeps_tail {
            match stream {
                Stream::Out => state.out.push(chunk),
                Stream::Err => state.err.push(chunk),
            }
        }
    }

    /// A heartbeat of the command.
    pub(crate) fn beat(&self) {
        let now = unix_ms();
        let mut state = self.lock();
        state.seq += 1;
        state.last_beat_ms = Some(now);
        state.first_beat_ms.get_or_insert(now);
    }

    /// What a snapshot carries of it, at `now_ms`: ages, not times (the
    /// asker's clock need not agree with this node's); its last lines only
    /// when asked.
    pub(crate) fn info(&self, pgid: i32, now_ms: u64, with_tail: bool) -> CommandInfo {
        let state = self.lock();
        let age = |t: Option<u64>| t.map(|t| now_ms.saturating_sub(t));
        let after_start = |t: Option<u64>| t.map(|t| t.saturating_sub(self.started_ms));
        CommandInfo {
            pgid,
            rank: self.rank,
            local_rank: self.local_rank,
            output_age_ms: age(state.last_output_ms),
            heartbeat_age_ms: age(state.last_beat_ms),
            up_ms: age(Some(self.started_ms)),
            first_output_after_ms: after_start(state.first_output_ms),
            first_beat_after_ms: after_start(state.first_beat_ms),
            tail: if with_tail {
                let mut lines = state.out.lines();
                lines.extend(state.err.lines());
                lines
            } else {
                Vec::new()
            },
        }
    }

    /// What exec_all tells the agent of the node it runs ([`PassedOn`]).
    fn passed_on(&self) -> (u64, PassedOn) {
        let state = self.lock();
        let passed_on = PassedOn {
            last_output_ms: state.last_output_ms,
            last_beat_ms: state.last_beat_ms,
            first_output_ms: state.first_output_ms,
            first_beat_ms: state.first_beat_ms,
            out: String::from_utf8_lossy(&state.out.bytes).into_owned(),
            out_cut: state.out.cut,
            err: String::from_utf8_lossy(&state.err.bytes).into_owned(),
            err_cut: state.err.cut,
        };
        (state.seq, passed_on)
    }

    /// Takes what exec_all told (its node's record, same machine, same clock).
    pub(crate) fn take_passed_on(&self, passed_on: PassedOn) {
        let mut state = self.lock();
        state.last_output_ms = passed_on.last_output_ms;
        state.last_beat_ms = passed_on.last_beat_ms;
        state.first_output_ms = passed_on.first_output_ms.or(passed_on.last_output_ms);
        state.first_beat_ms = passed_on.first_beat_ms.or(passed_on.last_beat_ms);
        if self.keeps_tail {
            let State { out, err, .. } = &mut *state;
            for (tail, text, cut) in [
                (out, passed_on.out, passed_on.out_cut),
                (err, passed_on.err, passed_on.err_cut),
            ] {
                *tail = Tail::default();
                tail.push(text.as_bytes());
                tail.cut |= cut;
            }
        }
    }
}

/// One line of JSON on a `#multinode:show-group` channel: the shown
/// node's record as its exec_all keeps it (at most a few KiB).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PassedOn {
    last_output_ms: Option<u64>,
    last_beat_ms: Option<u64>,
    first_output_ms: Option<u64>,
    first_beat_ms: Option<u64>,
    out: String,
    out_cut: bool,
    err: String,
    err_cut: bool,
}

/// The largest line a show-group channel takes (two tails, escaped).
pub(crate) const PASSED_ON_MAX: usize = 8 * TAIL_BYTES + 1024;

/// One stream of a command exec_all runs itself: what its pump reads is
/// also [`Watched::seen`] here, for the agent it is shown to.
#[derive(Debug, Clone)]
pub(crate) struct OutputTap {
    watched: Arc<Watched>,
    stream: Stream,
}

impl OutputTap {
    pub(crate) fn new(watched: Arc<Watched>, stream: Stream) -> Self {
        OutputTap { watched, stream }
    }

    pub(crate) fn seen(&self, chunk: &[u8]) {
        self.watched.seen(self.stream, chunk);
    }
}

/// The line to send for `watched`, when it changed since `last`.
pub(crate) fn passed_on_line(watched: &Watched, last: &mut Option<u64>) -> Option<Vec<u8>> {
    let (seq, passed_on) = watched.passed_on();
    if *last == Some(seq) {
        return None;
    }
    *last = Some(seq);
    let mut line = serde_json::to_vec(&passed_on).expect("a plain struct serialises");
    line.push(b'\n');
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_complete_lines_within_its_bound() {
        let w = Watched::new(Some(3), None, true);
        for i in 0..2000 {
            w.seen(Stream::Out, format!("step {i} loss 0.5\n").as_bytes());
        }
        w.seen(Stream::Out, b"step 2000 lo");
        w.seen(Stream::Err, b"12%|###   | 12/100\r13%|###   | 13/100\r");
        let info = w.info(7, unix_ms(), true);
        assert_eq!(info.rank, Some(3));
        assert_eq!(info.pgid, 7);
        assert!(info.output_age_ms.is_some_and(|a| a < 5_000));
        assert_eq!(info.heartbeat_age_ms, None);
        let out: Vec<&String> = info.tail.iter().filter(|l| l.starts_with("step")).collect();
        assert_eq!(out.last().map(|s| s.as_str()), Some("step 1999 loss 0.5"));
        assert!(
            out.iter().all(|l| l.ends_with("loss 0.5")),
            "no cut line: {out:?}"
        );
        let bytes: usize = info.tail.iter().map(String::len).sum();
        assert!(bytes <= 2 * TAIL_BYTES, "{bytes}");
        assert_eq!(
            info.tail.last().map(|s| s.as_str()),
            Some("13%|###   | 13/100")
        );
        assert!(w.info(7, unix_ms(), false).tail.is_empty());
    }

    #[test]
    fn rank_from_the_variables_and_no_tail_past_the_limit() {
        let vars = [("RANK", "12"), ("LOCAL_RANK", "4"), ("PATH", "/bin")];
        let w = Watched::from_vars(vars.iter().copied(), false);
        assert_eq!((w.rank, w.local_rank), (Some(12), Some(4)));
        w.seen(Stream::Out, b"hello\n");
        let info = w.info(1, unix_ms(), true);
        assert!(info.tail.is_empty());
        assert!(info.output_age_ms.is_some());
        assert_eq!(
            Watched::from_vars([("RANK", "x")].into_iter(), true).rank,
            None
        );
    }

    #[test]
    fn the_start_is_its_spawn_then_its_first_output_and_heartbeat() {
        let w = Watched::new(Some(1), None, false);
        let info = w.info(1, unix_ms(), false);
        assert!(info.up_ms.is_some());
        assert_eq!(
            (info.first_output_after_ms, info.first_beat_after_ms),
            (None, None)
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
        w.seen(Stream::Out, b"first\n");
        std::thread::sleep(std::time::Duration::from_millis(30));
        w.beat();
        w.seen(Stream::Out, b"second\n");
        let info = w.info(1, unix_ms(), false);
        let first = info.first_output_after_ms.expect("printed");
        let beat = info.first_beat_after_ms.expect("beat");
        let up = info.up_ms.expect("up");
        assert!(first >= 30 && beat >= first + 30 && up >= beat, "{info:?}");
    }

    #[test]
    fn passed_on_over_show_group_once_a_change() {
        let here = Watched::new(None, None, true);
        let mut last = None;
        here.seen(Stream::Out, b"step 5\n");
        let line = passed_on_line(&here, &mut last).expect("changed");
        assert!(passed_on_line(&here, &mut last).is_none());
        let there = Watched::new(None, None, true);
        there.take_passed_on(serde_json::from_slice(&line).expect("json"));
        let info = there.info(1, unix_ms(), true);
        assert_eq!(info.tail, ["step 5"]);
        assert!(info.output_age_ms.is_some());
        assert!(info.first_output_after_ms.is_some());
    }
}
