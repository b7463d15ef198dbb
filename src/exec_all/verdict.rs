//! The first-failure verdict: which node failed first, when, how (exit code,
//! signal by name, OOM-killed or not, a core file), the program's own error
//! (past torchrun's summary), NCCL's cause and its last warning or error,
//! what it printed last, and how long the rest of the job took to be down.
//! Shown under the failure table and kept in `--report`.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::record::{ErrorLines, NodeOutcome, ProcessOf, RunResult};
use crate::process::{Outcome, signal_name};
use crate::table::{printable, printable_once};

/// The first failure of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub rank: usize,
    pub host: String,
    /// With `--nproc-per-node`: the process's node and local rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessOf>,
    /// When exec_all learned that the node ended (seconds since the epoch).
    pub at: f64,
    /// The same, in seconds since the run started.
    pub after_start_s: f64,
    /// `exit 3`, `killed by SIGSEGV`, `lost`, `unreachable`, ...
    pub how: String,
    pub exit: Option<i32>,
    /// The signal that killed the command, or that killed a command of a
    /// shell script (exit 128+N).
    pub signal: Option<String>,
    /// Whether the kernel OOM-killed a process of the node's cgroup while the
    /// command ran; `null`: the node cannot tell (not an agent, no cgroup v2).
    pub oom_killed: Option<bool>,
    /// The `memory.events` file the node read.
    pub cgroup: Option<String>,
    /// A core file written meanwhile, or the handler cores are piped to.
    pub core: Option<String>,
    /// Why a node was unreachable or lost.
    pub error: Option<String>,
    pub last_lines: Vec<String>,
    /// `program_error`, `nccl_cause`, `nccl_line`.
    #[serde(flatten)]
    pub errors: ErrorLines,
    /// From the first failure to the last node being down (seconds).
    pub down_after_s: Option<f64>,
    /// How to get onto the node (`multinode shell 5`; a process's with
    /// several a node: `multinode shell --rank 5`), when its agent
    /// answered and outlives the run ([`RunResult::agents_stay`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
}

fn secs(a: SystemTime, b: SystemTime) -> f64 {
    a.duration_since(b).unwrap_or_default().as_secs_f64()
}

/// `exit 137 (SIGKILL)`: a shell's 128+N names its signal.
pub fn how(outcome: &NodeOutcome) -> (String, Option<i32>, Option<String>) {
    match outcome {
        NodeOutcome::Finished(Outcome::Exited(code)) => match shell_signal(*code) {
            Some(name) => (format!("exit {code} ({name})"), Some(*code), Some(name)),
            None => (format!("exit {code}"), Some(*code), None),
        },
        NodeOutcome::Finished(o @ Outcome::Signaled { signal, .. }) => {
            (o.to_string(), None, Some(signal_name(*signal)))
        }
        NodeOutcome::Unreachable(_) => ("unreachable".into(), None, None),
        NodeOutcome::Lost(_) => ("lost".into(), None, None),
        NodeOutcome::NotStarted => ("not started".into(), None, None),
    }
}

/// The signal a shell's exit code 129..=192 stands for.
fn shell_signal(code: i32) -> Option<String> {
    (129..=128 + 64)
        .contains(&code)
        .then(|| nix::sys::signal::Signal::try_from(code - 128).ok())
        .flatten()
        .map(|s| s.as_str().to_string())
}

impl Verdict {
    /// `rank 5 (gpu2: node 2, local rank 1)`, or `rank 2 (gpu2)` for a node.
    pub fn who(&self) -> String {
        super::record::who(self.rank, &self.host, self.process)
    }
}

/// The verdict of a run whose first failure is known.
pub fn build(result: &RunResult) -> Option<Verdict> {
    let rank = result.first_failure?;
    let node = result.nodes.iter().find(|n| n.rank == rank)?;
    let outcome = node.outcome.as_ref()?;
    let (how, exit, signal) = how(outcome);
    let ended = node.ended.unwrap_or(result.started);
    let last_down = result.nodes.iter().filter_map(|n| n.ended).max();
    let info = node.evidence.exit_info.as_ref();
    let oom_killed = info.and_then(|i| i.oom_kills).map(|n| n > 0);
    Some(Verdict {
        rank,
        host: node.host.clone(),
        process: node.process,
        at: secs(ended, UNIX_EPOCH),
        after_start_s: secs(ended, result.started),
        how,
        exit,
        signal,
        oom_killed,
        cgroup: info.and_then(|i| i.cgroup.clone()),
        core: info.and_then(|i| i.core.clone()),
        error: outcome.error().map(str::to_string),
        last_lines: node.evidence.tail.iter().cloned().collect(),
        errors: node.evidence.errors.clone(),
        down_after_s: last_down.map(|t| secs(t, ended)),
        // A node lost or unreachable has no agent to get in through.
        shell: (result.agents_stay && outcome.finished().is_some()).then(|| match node.process {
            // Several processes a node: by the process's global rank.
            Some(_) => format!("multinode shell --rank {}", node.rank),
            None => format!("multinode shell {}", node.node_rank()),
        }),
    })
}

/// `09:24:20.123Z`: the time of day, UTC.
fn clock(epoch_secs: f64) -> String {
    let t = UNIX_EPOCH + std::time::Duration::try_from_secs_f64(epoch_secs).unwrap_or_default();
    let stamp = humantime::format_rfc3339_millis(t).to_string();
    stamp
        .split_once('T')
        .map_or(stamp.clone(), |(_, time)| time.to_string())
}

/// The verdict as the lines printed under the failure table. What a rank
/// printed, a node's error and the files it names are text from outside:
/// each goes through [`printable`] (the report keeps them as they came).
pub fn render(v: &Verdict) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "first failure: {}, {:.2} s into the run ({} UTC): {}",
        printable(&v.who()),
        v.after_start_s,
        clock(v.at),
        v.how
    );
    if let Some(error) = &v.error {
        // Escaped by the transport where it came in (a server's words).
        let _ = writeln!(out, "  why: {}", printable_once(error));
    }
    let oom = match (v.oom_killed, &v.cgroup) {
        (Some(true), Some(cgroup)) => format!("yes (oom_kill rose in {})", printable(cgroup)),
        (Some(true), None) => "yes".into(),
        (Some(false), _) => "no".into(),
        (None, _) => "unknown (the node cannot tell: no multinode agent there, or no readable cgroup OOM counter)".into(),
    };
    if v.error.is_none() {
        let _ = writeln!(out, "  OOM-killed: {oom}");
    }
    if let Some(core) = &v.core {
        let _ = writeln!(out, "  core: {}", printable(core));
    }
    if let Some(line) = &v.errors.program_error {
        let _ = writeln!(out, "  program error: {}", printable(line));
    }
    if let Some(line) = v
        .errors
        .nccl_cause
        .as_ref()
        .filter(|c| Some(*c) != v.errors.nccl_line.as_ref())
    {
        let _ = writeln!(out, "  NCCL cause: {}", printable(line));
    }
    if let Some(line) = &v.errors.nccl_line {
        let _ = writeln!(out, "  last NCCL warning/error: {}", printable(line));
    }
    if !v.last_lines.is_empty() {
        let _ = writeln!(out, "  last lines:");
        for l in &v.last_lines {
            let _ = writeln!(out, "    {}", printable(l));
        }
    }
    if let Some(down) = v.down_after_s {
        let _ = writeln!(
            out,
            "  the whole job was down {down:.2} s after this failure"
        );
    }
    if let Some(shell) = &v.shell {
        let _ = writeln!(out, "  shell into it: {shell}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_exit_code_names_its_signal() {
        let (how, exit, signal) = super::how(&NodeOutcome::Finished(Outcome::Exited(137)));
        assert_eq!(how, "exit 137 (SIGKILL)");
        assert_eq!((exit, signal.as_deref()), (Some(137), Some("SIGKILL")));
        let (how, _, signal) = super::how(&NodeOutcome::Finished(Outcome::Exited(3)));
        assert_eq!((how.as_str(), signal), ("exit 3", None));
        let (how, exit, signal) = super::how(&NodeOutcome::Finished(Outcome::Signaled {
            signal: libc::SIGSEGV,
            core_dumped: true,
        }));
        assert!(how.contains("SIGSEGV"), "{how}");
        assert_eq!((exit, signal.as_deref()), (None, Some("SIGSEGV")));
    }

    #[test]
    fn the_clock_is_utc_with_milliseconds() {
        assert_eq!(clock(1_000.25), "00:16:40.250Z");
    }
}
