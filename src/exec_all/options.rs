//! The validated options of a run, whoever asks for it (exec-all, the demo,
//! check's `collect`), the one place their defaults are written, and
//! exec-all's command line turned into them (the script read, ranks parsed).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::script::{Export, MAX_INLINE_SCRIPT, MAX_SCRIPT, Script};
use crate::cli::ExecAllArgs;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::read_limit::{read_at_most, read_file_at_most};
use crate::topology::nodeset;

/// Up to this many other nodes, exec_all talks to every node itself (`--fanout`).
pub const DEFAULT_FANOUT: usize = 256;
/// Connections being set up at once (`--max-connecting`).
pub const DEFAULT_MAX_CONNECTING: usize = 256;
/// Between SIGTERM and SIGKILL when ending nodes (`--grace`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);
/// For a node to connect (`--connect-timeout`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// Relay output to this process's streams (false: gather it, for `collect`).
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
    /// The verdict may tell how to get onto the failed node (`multinode
    /// shell RANK`): this is a user's run, whose agents outlive it.
    pub shell_hint: bool,
    /// Variables every node gets, the head too, whatever `--export` says
    /// (an attempt's `MULTINODE_RESTART_COUNT`, ...).
    pub attempt_env: Vec<(String, String)>,
    /// `--hang-timeout`: end the run, as hung, when no node printed
    /// anything for this long.
    pub hang_timeout: Option<Duration>,
}

impl RunOptions {
    /// `script` on every node with exec-all's defaults: no arguments,
    /// fail-fast, output relayed, stdin not forwarded, every variable exported.
    pub fn new(script: Script) -> Self {
        RunOptions {
            script,
            args: Vec::new(),
            label: false,
            fail_fast: true,
            grace: DEFAULT_GRACE,
            timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            ranks: None,
            exclude: BTreeSet::new(),
            export: Export::All,
            max_connecting: DEFAULT_MAX_CONNECTING,
            forward_output: true,
            fanout: DEFAULT_FANOUT,
            forward_stdin: false,
            output_dir: None,
            timestamps: false,
            group: false,
            snapshot_on_timeout: false,
            show_local_to_agent: true,
            shell_hint: false,
            attempt_env: Vec::new(),
            hang_timeout: None,
        }
    }

    /// exec-all's arguments for a job of `n` nodes.
    pub fn from_args(args: &ExecAllArgs, env: &EnvMap, n: usize) -> Result<Self, Error> {
        // A relay's output reaches the head, which watches for hangs.
        let hang_timeout = match args.relay_report {
            true => None,
            false => hang_timeout(args, env)?,
        };
        let (script, rest) = read_script(args)?;
        Ok(RunOptions {
            hang_timeout,
            forward_stdin: matches!(script, Script::Inline(_)),
            args: rest,
            label: args.label,
            fail_fast: !args.no_fail_fast,
            grace: args.grace,
            timeout: args.timeout,
            connect_timeout: args.connect_timeout,
            ranks: args
                .nodes
                .as_deref()
                .map(|s| parse_ranks(s, n, "--nodes"))
                .transpose()?,
            exclude: args
                .exclude
                .as_deref()
                .map(|s| parse_ranks(s, n, "--exclude"))
                .transpose()?
                .unwrap_or_default(),
            export: Export::parse(&args.export)?,
            max_connecting: args.max_connecting,
            fanout: args.fanout,
            output_dir: args.output.clone(),
            timestamps: args.timestamps,
            group: args.group,
            snapshot_on_timeout: args.snapshot_on_timeout,
            // A relay runs as its agent's command: that agent shows its node.
            show_local_to_agent: !args.relay_report,
            // A relay's verdict is not printed: its head's is.
            shell_hint: !args.relay_report,
            ..RunOptions::new(script)
        })
    }
}

/// `MULTINODE_HANG_TIMEOUT`: `--hang-timeout`.
pub(crate) const HANG_TIMEOUT_VAR: &str = "MULTINODE_HANG_TIMEOUT";

/// `--hang-timeout`, else `MULTINODE_HANG_TIMEOUT`; `None` when neither is set.
fn hang_timeout(args: &ExecAllArgs, env: &EnvMap) -> Result<Option<Duration>, Error> {
    if args.hang_timeout.is_some() {
        return Ok(args.hang_timeout);
    }
    env.get(HANG_TIMEOUT_VAR)
        .map(|v| {
            v.parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| {
                    Error::usage(format!(
                        "{HANG_TIMEOUT_VAR}='{v}' is not a number of seconds > 0; fix it or unset it"
                    ))
                })
        })
        .transpose()
}

/// The script and its arguments from `SCRIPT | - | -c CMD` and what follows.
fn read_script(args: &ExecAllArgs) -> Result<(Script, Vec<OsString>), Error> {
    let mut rest = args.script_and_args.clone();
    let script = if let Some(command) = &args.command {
        Script::Inline(command.as_encoded_bytes().to_vec())
    } else {
        if rest.is_empty() {
            return Err(Error::usage(
                "no script given: pass a SCRIPT file, - to read it from stdin, or -c CMD",
            ));
        }
        let first = rest.remove(0);
        if first == "-" {
            let text = read_at_most(std::io::stdin().lock(), MAX_SCRIPT as u64).map_err(|e| {
                let msg = format!("cannot read the script from stdin: {e}");
                if e.kind() == std::io::ErrorKind::FileTooLarge {
                    Error::Usage(msg)
                } else {
                    Error::Failed(msg)
                }
            })?;
            Script::Stdin(text)
        } else {
            let path = PathBuf::from(&first);
            let text = read_file_at_most(&path, MAX_SCRIPT as u64).map_err(|e| {
                Error::usage(format!(
                    "cannot read the script {}: {e} (give a file, - for stdin, or -c CMD)",
                    path.display()
                ))
            })?;
            Script::Inline(text)
        }
    };
    if let Script::Inline(text) = &script
        && text.len() > MAX_INLINE_SCRIPT
    {
        return Err(Error::usage(format!(
            "the script is {} bytes; scripts over {} KiB must come on stdin: mn-exec-all - < SCRIPT",
            text.len(),
            MAX_INLINE_SCRIPT / 1024
        )));
    }
    Ok((script, rest))
}

/// `0,2-5` as a set of ranks below `n` (the format: `topology::nodeset`).
fn parse_ranks(spec: &str, n: usize, flag: &str) -> Result<BTreeSet<usize>, Error> {
    nodeset::parse_ranks(spec, n)
        .map_err(|why| Error::usage(format!("{flag} {spec:?}: {why}; use ranks like 0,2-5")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_parse_and_are_checked() {
        assert_eq!(
            parse_ranks("0,2-4", 5, "--nodes").unwrap(),
            BTreeSet::from([0, 2, 3, 4])
        );
        assert!(
            parse_ranks("5", 5, "--nodes")
                .unwrap_err()
                .to_string()
                .contains("past the last")
        );
        assert!(
            parse_ranks("3-1", 5, "--nodes")
                .unwrap_err()
                .to_string()
                .contains("reversed")
        );
        assert!(
            parse_ranks("a", 5, "--exclude")
                .unwrap_err()
                .to_string()
                .contains("not a rank")
        );
    }
}
