//! The validated options of a run, whoever asks for it (exec-all through
//! `invocation.rs`, the demo, check's `collect`), and the one place their
//! defaults are written.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::script::{Export, Script};
use crate::defaults;

/// The validated options of a run. Build it with [`RunOptions::new`] and
/// change only what differs: `RunOptions { label: true, ..RunOptions::new(script) }`.
#[derive(Clone)]
pub(crate) struct RunOptions {
    pub script: Script,
    pub args: Vec<OsString>,
    pub label: bool,
    pub fail_fast: bool,
    pub grace: Duration,
    pub timeout: Option<Duration>,
    pub connect_timeout: Duration,
    pub ranks: Option<BTreeSet<usize>>,
    pub exclude: BTreeSet<usize>,
    pub export: Export,
    pub max_connecting: usize,
    /// Pass output on to this process's streams (false: gather it, for `collect`).
    pub forward_output: bool,
    /// The most nodes this process talks to itself; more are reached through
    /// relays (nodes that run exec_all for a group of nodes).
    pub fanout: usize,
    /// Give exec_all's stdin to the nodes (file and `-c` scripts).
    pub forward_stdin: bool,
    /// `--output DIR`: each node's streams also to DIR/RANK.out and .err.
    pub output_dir: Option<PathBuf>,
    /// `--timestamps`: every line prefixed with the time it came.
    pub timestamps: bool,
    /// `--group`: output gathered, printed at the end grouped by content.
    pub group: bool,
    /// Take a snapshot of every node before `--timeout` ends the run.
    pub snapshot_on_timeout: bool,
    /// Show the node run here to this machine's agent, so that `multinode
    /// ps` sees it (not for a relay, which its agent runs, nor for probes).
    pub show_local_to_agent: bool,
    /// Show where the start of each node is to this machine's agent, for
    /// `multinode top` (a user's run and a relay's; not a probe's nor a
    /// health check's).
    pub show_start: bool,
    /// This launch is the health check before an attempt (`--health-check`):
    /// its start is shown as the check's.
    pub health_check: bool,
    /// The verdict may tell how to get onto the failed node (`multinode
    /// shell RANK`): this is a user's run, whose agents outlive it.
    pub shell_hint: bool,
    /// Variables every node gets, the head too, whatever `--export` says
    /// (an attempt's `MULTINODE_RESTART_COUNT`, ...).
    pub attempt_env: Vec<(String, String)>,
    /// `--hang-timeout`: end the run, as hung, when no node printed
    /// anything for this long.
    pub hang_timeout: Option<Duration>,
    /// `--nproc-per-node`: several processes a node, each with torchrun's
    /// worker contract, bound as `--bind` says (`procs.rs`).
    pub procs: Option<super::procs::Procs>,
}

impl RunOptions {
    /// `script` on every node with exec-all's defaults: no arguments,
    /// fail-fast, output passed on, stdin not forwarded, every variable exported.
    pub fn new(script: Script) -> Self {
        RunOptions {
            script,
            args: Vec::new(),
            label: false,
            fail_fast: true,
            grace: defaults::GRACE.duration,
            timeout: None,
            connect_timeout: defaults::CONNECT_TIMEOUT.duration,
            ranks: None,
            exclude: BTreeSet::new(),
            export: Export::All,
            max_connecting: defaults::MAX_CONNECTING,
            forward_output: true,
            fanout: defaults::FANOUT,
            forward_stdin: false,
            output_dir: None,
            timestamps: false,
            group: false,
            snapshot_on_timeout: false,
            show_local_to_agent: true,
            show_start: true,
            health_check: false,
            shell_hint: false,
            attempt_env: Vec::new(),
            hang_timeout: None,
            procs: None,
        }
    }
}

/// One exec-all, as its command line and environment say.
pub(crate) struct Invocation {
    pub job: crate::env::Job,
    pub options: RunOptions,
    pub role: Role,
}

/// Whom this exec_all runs for.
pub(crate) enum Role {
    /// The user's: restarts and spares, and what the user reads at the end.
    Head(Head),
    /// A head's, past `--fanout` (`--relay-report`): one attempt's group, no
    /// spares, no restarts, no hang watch of its own (its head watches); its
    /// record of the group goes back to the head on stderr.
    Relay,
}

/// What the head does beyond the run.
pub(crate) struct Head {
    /// Restarts, when asked for (with spares, `Restarts::default()`).
    pub restarts: Option<Restarts>,
    /// `--report FILE`.
    pub report: Option<PathBuf>,
    /// `--group`: identical outputs printed once, at the end.
    pub group: bool,
}

/// The restart options of a run, validated.
#[derive(Debug, Clone, Default)]
pub(crate) struct Restarts {
    pub max_restarts: u32,
    pub min_nodes: Option<usize>,
    /// `--health-check CMD`, run with `sh -c` on every node before each attempt.
    pub health_check: Option<String>,
    /// How long a health check may take on a node.
    pub health_timeout: Duration,
}
