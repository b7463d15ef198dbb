//! Every mistake a newcomer makes says what was wrong and what to do: one
//! line on stderr, exit code 2 for bad input (255 for a node not reached).

use std::path::Path;

use crate::runner::{BIN, run_program, run_usage_error};
use crate::util::{fresh_loopback, mn_exec_all, mn_ssh};

/// Runs `program args` with `vars`, expects exit `code` and exactly one stderr
/// line starting `prefix: error: `; returns the rest of the line.
fn one_error_line(
    program: &Path,
    prefix: &str,
    args: &[&str],
    vars: &[(&str, &str)],
    code: i32,
) -> String {
    let out = run_program(program, args, vars);
    assert_eq!(out.code, code, "{args:?}: {out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one stderr line expected: {out:?}");
    lines[0]
        .strip_prefix(&format!("{prefix}: error: "))
        .unwrap_or_else(|| panic!("{args:?}: {out:?}"))
        .to_string()
}

#[test]
fn argument_errors_name_the_argument_and_the_subcommand_help() {
    assert_eq!(
        run_usage_error(&["keygen"], &[]),
        "the following required arguments were not provided: --output <FILE> (see multinode keygen --help)"
    );
    assert_eq!(
        run_usage_error(&["env", "--format", "xml"], &[]),
        "invalid value 'xml' for '--format <FORMAT>' [possible values: sh, json] (see multinode env --help)"
    );
    assert_eq!(
        run_usage_error(&["hosts", "--format", "yaml"], &[]),
        "invalid value 'yaml' for '--format <FORMAT>' [possible values: table, json] (see multinode hosts --help)"
    );
    assert_eq!(
        run_usage_error(&["-v", "demo", "--nodez", "2"], &[]),
        "unexpected argument '--nodez' found; tip: a similar argument exists: '--nodes' (see multinode demo --help)"
    );
    assert_eq!(
        run_usage_error(&["lunch"], &[]),
        "unrecognized subcommand 'lunch' (see multinode --help)"
    );
}

#[test]
fn a_mistyped_option_is_not_taken_for_a_script() {
    let line = one_error_line(
        &mn_exec_all(),
        "mn-exec-all",
        &["--lable", "-c", "true"],
        &[],
        2,
    );
    assert_eq!(
        line,
        "unexpected argument '--lable' found; tip: a similar argument exists: '--label' (see mn-exec-all --help)"
    );
    let line = one_error_line(
        Path::new(BIN),
        "multinode",
        &["exec-all", "--lable", "-c", "true"],
        &[],
        2,
    );
    assert!(line.ends_with("(see multinode exec-all --help)"), "{line}");
}

#[test]
fn a_semicolon_in_a_hostlist_is_named_as_the_mistake() {
    assert_eq!(
        run_usage_error(
            &["hosts", "--no-resolve", "--hosts", "gpu01:2;gpu02:2"],
            &[]
        ),
        "--hosts: 'gpu01:2;gpu02:2' separates its hosts with ';'; separate them with ',': host1:2,host2:2"
    );
    assert_eq!(
        run_usage_error(&["env"], &[("MULTINODE_HOSTLIST", "gpu01:2 gpu02:2")]),
        "MULTINODE_HOSTLIST: 'gpu01:2 gpu02:2' separates its hosts with whitespace; separate them with ',': host1:2,host2:2"
    );
}

/// Without the job secret, `mn-ssh` and `mn-exec-all` fall back to OpenSSH;
/// when that fails, the message says the secret is unset.
#[test]
fn an_unset_secret_is_named_when_openssh_fails() {
    let host = fresh_loopback();
    let hint = "MULTINODE_SECRET is unset, so this tried OpenSSH, not a multinode agent: set MULTINODE_SECRET";
    let line = one_error_line(
        &mn_ssh(),
        "mn-ssh",
        &["-p", "1", &host, "true"],
        &[("HOME", "/nonexistent")],
        255,
    );
    assert_eq!(
        line,
        format!("cannot connect to {host}:1: Connection refused (os error 111); {hint}")
    );
    let out = run_program(
        &mn_exec_all(),
        &[
            "--hosts",
            &format!("127.0.0.1,{host}"),
            "--node-rank",
            "0",
            "-c",
            "true",
        ],
        &[
            ("HOME", "/nonexistent"),
            ("MULTINODE_SSH_PORT", "1"),
            ("PATH", "/usr/bin:/bin"),
        ],
    );
    assert_eq!(out.code, 255, "{out:?}");
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("mn-exec-all: "), "{out:?}");
    assert!(
        first.contains(&format!(
            "cannot connect to {host}:1: Connection refused (os error 111); {hint}"
        )),
        "{out:?}"
    );
    // With MULTINODE_TRANSPORT=openssh, OpenSSH was asked for: no hint.
    let out = run_program(
        &mn_ssh(),
        &["-p", "1", &host, "true"],
        &[("HOME", "/nonexistent"), ("MULTINODE_TRANSPORT", "openssh")],
    );
    assert_eq!(out.code, 255, "{out:?}");
    assert!(!out.stderr.contains("MULTINODE_SECRET"), "{out:?}");
}
