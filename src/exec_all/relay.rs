//! The relay: past `--fanout` nodes, the other nodes are cut into runs of
//! consecutive ranks, and the first node of each run (a relay) runs
//! `multinode exec-all --relay-report` for its run. Here: the plan of the
//! groups, the command a relay runs, the record it ends its stderr with
//! (`relay_record.rs`: its records, sent as they are), and that record
//! back as the head's.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use super::event::Subtree;
use super::options::RunOptions;
use super::record::{NodeOutcome, NodeRecord, RunResult};
use super::relay_record::RelayRecord;
use super::script::{self, Script};
use crate::cli::exec_all_flags as flags;
use crate::sh;
use crate::topology::nodeset::fold_ranks;
use crate::vars;

/// Ends this process's stderr with its record of its group, for the head
/// that runs it as a relay.
pub fn emit_record(result: &RunResult) {
    let record = RelayRecord {
        first_failure: result.first_failure,
        nodes: result.nodes.clone(),
    };
    let line = String::from_utf8(record.to_line()).expect("JSON is UTF-8");
    crate::stdio::eprint(&line);
}

/// Splits the selected ranks into what this process runs: one group per
/// task, the task's own rank first. This node and, while there are at most
/// `fanout` other nodes, every node is a group of one. Beyond that the other
/// nodes are cut into `fanout` runs of consecutive ranks, and the first node
/// of each run relays to the rest (its exec_all runs the run's nodes).
pub fn plan_groups(selected: &[usize], local: usize, fanout: usize) -> Vec<Vec<usize>> {
    let fanout = fanout.max(1);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    if selected.contains(&local) {
        groups.push(vec![local]);
    }
    let remote: Vec<usize> = selected.iter().copied().filter(|&r| r != local).collect();
    if remote.len() <= fanout {
        groups.extend(remote.into_iter().map(|r| vec![r]));
        return groups;
    }
    let (size, extra) = (remote.len() / fanout, remote.len() % fanout);
    let mut start = 0;
    for i in 0..fanout {
        let len = size + usize::from(i < extra);
        groups.push(remote[start..start + len].to_vec());
        start += len;
    }
    groups
}

/// What a relay runs: this binary's exec_all for its group, with this run's
/// options ([`argv`]); it ends its stderr with its report (`--relay-report`).
pub fn command(group: &[usize], options: &RunOptions, exported: &[(String, String)]) -> Vec<u8> {
    let mut cmd = format!("exec \"${{{}:-multinode}}\" {}", vars::BIN, flags::COMMAND).into_bytes();
    for word in argv(group, options, exported) {
        cmd.push(b' ');
        cmd.extend_from_slice(&sh::word(word.as_bytes()));
    }
    cmd
}

/// A relay's arguments after `exec-all`, with the flag names the clap
/// definitions use (`cli::exec_all_flags`). It passes on exactly the variables
/// this process exports (by name: the relay has their values from us), not
/// those of its own agent.
pub fn argv(group: &[usize], options: &RunOptions, exported: &[(String, String)]) -> Vec<OsString> {
    let mut sorted = group.to_vec();
    sorted.sort_unstable();
    let names: Vec<&str> = exported
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| script::is_name(k))
        .collect();
    let export = if names.is_empty() {
        "NONE".to_string()
    } else {
        names.join(",")
    };
    let mut argv: Vec<OsString> = Vec::new();
    let mut flag = |name: &str, value: Option<OsString>| {
        argv.push(format!("--{name}").into());
        argv.extend(value);
    };
    let secs = |d: std::time::Duration| Some(OsString::from(d.as_secs_f64().to_string()));
    flag(flags::RELAY_REPORT, None);
    flag(flags::NODES, Some(fold_ranks(&sorted).into()));
    flag(flags::GRACE, secs(options.grace));
    flag(flags::CONNECT_TIMEOUT, secs(options.connect_timeout));
    flag(flags::FANOUT, Some(options.fanout.to_string().into()));
    flag(
        flags::MAX_CONNECTING,
        Some(options.max_connecting.to_string().into()),
    );
    flag(flags::EXPORT, Some(export.into()));
    if options.label {
        flag(flags::LABEL, None);
    }
    if options.timestamps {
        flag(flags::TIMESTAMPS, None);
    }
    if let Some(dir) = &options.output_dir {
        flag(flags::OUTPUT, Some(dir.clone().into()));
    }
    if !options.fail_fast {
        flag(flags::NO_FAIL_FAST, None);
    }
    if let Some(procs) = &options.procs {
        // Counted by the head: the relay starts its nodes' share.
        flag(
            flags::NPROC_PER_NODE,
            Some(procs.per_node.to_string().into()),
        );
        flag(flags::BIND, Some(procs.bind.to_string().into()));
        flag(
            flags::MASTER_PORT,
            Some(procs.master_port.to_string().into()),
        );
        if procs.report_bindings {
            flag(flags::REPORT_BINDINGS, None);
        }
    }
    match &options.script {
        Script::Stdin(_) => argv.push("-".into()),
        Script::Inline(text) => {
            argv.push(format!("-{}", flags::INLINE).into());
            argv.push(OsString::from_vec(text.clone()));
        }
    }
    argv.extend(options.args.iter().cloned());
    argv
}

/// What a relay's task knows of its group when it ends: the relay's own
/// report, or, when there is none (the relay was lost), every node of the
/// group lost with it. `group` holds the ranks of its records, its own first.
pub fn subtree(
    group: &[usize],
    host: &str,
    outcome: &NodeOutcome,
    record: Option<RelayRecord>,
) -> Subtree {
    match record {
        Some(record) => Subtree {
            first_failure: record.first_failure,
            records: record
                .nodes
                .into_iter()
                .filter(|n| group.contains(&n.rank))
                .collect(),
        },
        None => Subtree {
            first_failure: None,
            records: group
                .iter()
                .skip(1)
                .map(|&rank| {
                    let mut r = NodeRecord::new(rank, String::new());
                    r.outcome = Some(NodeOutcome::Lost(format!(
                        "its relay, rank {} ({host}), ended without a report ({})",
                        group[0],
                        NodeOutcome::describe(Some(outcome))
                    )));
                    r
                })
                .collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sh` makes of [`command`]: the arguments the program it execs
    /// gets, read back through a script that prints them.
    fn through_sh(command: &[u8]) -> Vec<OsString> {
        let dir = std::env::temp_dir().join(format!("mn-relay-argv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let printer = dir.join("print-args");
        std::fs::write(&printer, "#!/bin/sh\nprintf '%s\\0' \"$@\"\n").unwrap();
        std::fs::set_permissions(
            &printer,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(OsString::from_vec(command.to_vec()))
            .env(vars::BIN, &printer)
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(out.status.success(), "{out:?}");
        let mut words: Vec<OsString> = out
            .stdout
            .split(|&b| b == 0)
            .map(|w| OsString::from_vec(w.to_vec()))
            .collect();
        assert_eq!(
            words.pop(),
            Some(OsString::new()),
            "each word ends with a NUL"
        );
        words
    }

    #[test]
    fn the_shell_gives_a_relay_exactly_its_arguments() {
        let options = RunOptions {
            output_dir: Some("/tmp/out dir/it's".into()),
            args: vec!["a b".into(), "$HOME".into(), "".into()],
            label: true,
            ..RunOptions::new(Script::Inline(b"echo \"$RANK\" 'x'".to_vec()))
        };
        let exported = [("A".to_string(), "1".to_string())];
        let argv = argv(&[3, 1, 2], &options, &exported);
        let mut want = vec![OsString::from(flags::COMMAND)];
        want.extend(argv.iter().cloned());
        assert_eq!(through_sh(&command(&[3, 1, 2], &options, &exported)), want);
        assert!(argv.contains(&OsString::new()), "an empty argument is kept");
    }
}
