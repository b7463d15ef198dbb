//! exec-all's command line, read once: the one file of exec_all that reads
//! the clap struct (`cli::ExecAllArgs`), and exec-all's `main`. It becomes
//! an `Invocation` (`options.rs`): the job, the run's options, and the role
//! (the head, or a relay a head runs for a group of its nodes: decided
//! here, once); each flag that a variable may give instead is read by
//! `EnvMap::flag_or_var`, with its one message.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

use super::job_store::StoreMode;
use super::options::{Head, Invocation, Restarts, Role, RunOptions};
use super::procs::{PerNode, Procs};
use super::script::{Export, MAX_INLINE_SCRIPT, MAX_SCRIPT, Script};
use crate::cli::ExecAllArgs;
use crate::defaults;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::read_limit::{read_at_most, read_file_at_most};
use crate::topology::nodeset;
use crate::values;
use crate::vars;

/// `multinode exec-all`, `mn-exec-all`, the helper's `exec_all`: its
/// command line read, then run.
pub fn main(args: ExecAllArgs) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let invocation = parse(args, &env)?;
    super::entry::run(invocation, &env)
}

/// The invocation `args` and `env` make.
fn parse(args: ExecAllArgs, env: &EnvMap) -> Result<Invocation, Error> {
    let relay = args.relay_report;
    let mut inputs = args.topology.inputs();
    if relay {
        // A relay runs one attempt's group: the head has split off the spares.
        inputs.spares = Some(0);
    } else {
        inputs.spares = args.spares;
    }
    let job = crate::env::resolve_job(&inputs, env)?;
    let options = run_options(&args, env, job.topology.nodes.len(), relay)?;
    let role = if relay {
        Role::Relay
    } else {
        let restarts = restarts(&args, env)?;
        let restarts = match (restarts, job.spares) {
            (None, 0) => None,
            (restarts, _) => Some(restarts.unwrap_or_default()),
        };
        if restarts.is_some() && (args.nodes.is_some() || args.exclude.is_some()) {
            return Err(Error::usage(
                "--nodes and --exclude choose ranks of one run; with restarts or spares the ranks \
                 change from one attempt to the next: drop them, or run without restarts and spares",
            ));
        }
        Role::Head(Head {
            restarts,
            report: args.report,
            group: args.group,
        })
    };
    Ok(Invocation { job, options, role })
}

/// The run's options for a job of `n` nodes; a relay's (`relay`) differ
/// where its head does the work.
fn run_options(
    args: &ExecAllArgs,
    env: &EnvMap,
    n: usize,
    relay: bool,
) -> Result<RunOptions, Error> {
    // A relay's output reaches the head, which watches for hangs.
    let hang_timeout = match relay {
        true => None,
        false => env.flag_or_var(
            args.hang_timeout,
            vars::HANG_TIMEOUT,
            values::POSITIVE_SECONDS,
            values::positive_seconds,
        )?,
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
        procs: procs(args, env, relay)?,
        // A relay runs as its agent's command: that agent shows its node.
        show_local_to_agent: !relay,
        // A relay's verdict is not printed: its head's is.
        shell_hint: !relay,
        ..RunOptions::new(script)
    })
}

/// `--nproc-per-node` and what goes with it (`--bind`, `--report-bindings`,
/// `--master-port`), each else its variable; `None` without processes a
/// node, where the others are refused.
fn procs(args: &ExecAllArgs, env: &EnvMap, relay: bool) -> Result<Option<Procs>, Error> {
    let flag = args
        .nproc_per_node
        .as_deref()
        .map(|v| {
            v.parse::<PerNode>()
                .map_err(|e| Error::usage(format!("--nproc-per-node: {e}")))
        })
        .transpose()?;
    let per_node = env.flag_or_var(
        flag,
        vars::NPROC_PER_NODE,
        "a number of processes a node (1, 2, ...), gpu or slots",
        |v| v.parse().ok(),
    )?;
    let Some(per_node) = per_node else {
        if args.bind.is_some()
            || args.report_bindings
            || args.master_port.is_some()
            || args.store.is_some()
        {
            return Err(Error::usage(
                "--bind, --report-bindings, --master-port and --store go with --nproc-per-node, \
                 which starts the processes they are for; under another launcher use multinode bind -- CMD",
            ));
        }
        return Ok(None);
    };
    let master_port = env.flag_or_var(
        args.master_port,
        vars::MASTER_PORT,
        values::PORT,
        values::port,
    )?;
    let store = args
        .store
        .as_deref()
        .map(|v| {
            v.parse::<StoreMode>()
                .map_err(|e| Error::usage(format!("--store: {e}")))
        })
        .transpose()?;
    let store = env.flag_or_var(store, vars::STORE, "a store mode (auto or off)", |v| {
        v.parse().ok()
    })?;
    Ok(Some(Procs {
        per_node,
        bind: crate::binding::mode_from(args.bind, env)?,
        report_bindings: args.report_bindings,
        master_port: master_port.unwrap_or(defaults::MASTER_PORT),
        head: !relay,
        store: store.unwrap_or(StoreMode::Auto),
        hosted: None,
    }))
}

/// `--max-restarts`, `--min-nodes`, `--health-check`, `--health-timeout`,
/// each else its variable; `None` when none is set.
fn restarts(args: &ExecAllArgs, env: &EnvMap) -> Result<Option<Restarts>, Error> {
    let number = |flag, name, what| env.flag_or_var(flag, name, what, |v| v.parse().ok());
    let max_restarts = number(
        args.max_restarts,
        vars::MAX_RESTARTS,
        "a number of restarts (0, 1, 2, ...)",
    )?;
    let min_nodes = env.flag_or_var(
        args.min_nodes,
        vars::MIN_NODES,
        "a number of nodes (1, 2, ...)",
        |v| v.parse().ok(),
    )?;
    let health_check = env
        .flag_or_var(
            args.health_check.clone(),
            vars::HEALTH_CHECK,
            "a command",
            |v| Some(v.to_string()),
        )?
        .filter(|c| !c.trim().is_empty());
    let health_timeout = env
        .flag_or_var(
            args.health_timeout,
            vars::HEALTH_TIMEOUT,
            values::SECONDS,
            values::seconds,
        )?
        .unwrap_or(defaults::HEALTH_TIMEOUT);
    if max_restarts.is_none() && min_nodes.is_none() && health_check.is_none() {
        return Ok(None);
    }
    Ok(Some(Restarts {
        max_restarts: max_restarts.unwrap_or(0),
        min_nodes,
        health_check,
        health_timeout,
    }))
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

    /// A relay's argv as `multinode exec-all ARGV` parses it, with the real parser.
    fn parsed(argv: Vec<OsString>) -> ExecAllArgs {
        use clap::Parser;
        let words = ["multinode", crate::cli::exec_all_flags::COMMAND]
            .map(OsString::from)
            .into_iter()
            .chain(argv);
        let crate::cli::Command::ExecAll(args) = crate::cli::Cli::try_parse_from(words)
            .expect("clap takes it")
            .command
        else {
            panic!("not exec-all");
        };
        *args
    }

    #[test]
    fn a_relay_command_line_parses_back_to_the_heads_options() {
        use super::super::job_store::StoreMode;
        use super::super::procs::{PerNode, Procs};
        use crate::binding::Mode;
        use std::time::Duration;
        let head = RunOptions {
            args: vec!["a b".into(), "it's".into()],
            label: true,
            fail_fast: false,
            grace: Duration::from_millis(1500),
            connect_timeout: Duration::from_millis(7250),
            fanout: 3,
            max_connecting: 9,
            output_dir: Some("/tmp/out dir".into()),
            timestamps: true,
            procs: Some(Procs {
                per_node: PerNode::Counts(vec![2, 1, 3, 2]),
                bind: Mode::Cores,
                report_bindings: true,
                master_port: 29600,
                head: true,
                store: StoreMode::Auto,
                hosted: None,
            }),
            ..RunOptions::new(Script::Inline(b"echo \"$RANK\" 'x'".to_vec()))
        };
        let exported = [
            ("A".to_string(), "1".to_string()),
            ("B_2".to_string(), "x y".to_string()),
        ];
        let args = parsed(super::super::relay::argv(&[3, 1, 2], &head, &exported));
        assert!(args.relay_report, "a relay");
        let relay = run_options(&args, &EnvMap::default(), 4, true).expect("valid");
        assert_eq!(relay.ranks, Some(BTreeSet::from([1, 2, 3])));
        assert_eq!(relay.script, head.script);
        assert_eq!(relay.args, head.args);
        assert_eq!(
            (relay.label, relay.fail_fast, relay.timestamps),
            (head.label, head.fail_fast, head.timestamps)
        );
        assert_eq!(
            (relay.grace, relay.connect_timeout),
            (head.grace, head.connect_timeout)
        );
        assert_eq!(
            (relay.fanout, relay.max_connecting),
            (head.fanout, head.max_connecting)
        );
        assert_eq!(relay.output_dir, head.output_dir);
        assert_eq!(
            relay.export,
            Export::parse("A,B_2").expect("names"),
            "the names alone: the relay has the values"
        );
        let procs = relay.procs.expect("--nproc-per-node");
        assert_eq!(
            procs,
            Procs {
                head: false,
                ..head.procs.clone().expect("procs")
            }
        );
        // The defaults travel as well.
        let plain = RunOptions::new(Script::Stdin(b"true".to_vec()));
        let args = parsed(super::super::relay::argv(&[1], &plain, &[]));
        assert_eq!(args.script_and_args, [OsString::from("-")]);
        assert!(!args.label && !args.no_fail_fast && args.nproc_per_node.is_none());
        assert_eq!(
            (args.grace, args.connect_timeout, args.fanout),
            (plain.grace, plain.connect_timeout, plain.fanout)
        );
        assert_eq!(args.export, "NONE");
    }
}
