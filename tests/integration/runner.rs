//! Running `multinode` with a controlled environment and checking its answers.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// The `multinode` binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_multinode");

/// What a finished command left.
#[derive(Debug)]
pub(crate) struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args` with only `vars` in its environment (plus
/// `PATH=/nonexistent` unless `vars` sets `PATH`, so that no real `nvidia-smi`
/// or DNS helper leaks in).
pub(crate) fn run_program(program: &Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args).env_clear().stdin(Stdio::null());
    if !vars.iter().any(|(k, _)| *k == "PATH") {
        cmd.env("PATH", "/nonexistent");
    }
    cmd.envs(vars.iter().copied());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

/// `multinode ARGS` with only `vars`.
pub(crate) fn run(args: &[&str], vars: &[(&str, &str)]) -> Output {
    run_program(Path::new(BIN), args, vars)
}

/// Runs and expects success with nothing on stderr; returns stdout.
pub(crate) fn run_ok(args: &[&str], vars: &[(&str, &str)]) -> String {
    let out = run(args, vars);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (0, ""),
        "multinode {args:?} with {vars:?}: {out:?}"
    );
    out.stdout
}

/// Runs and expects bad input: exit code 2, nothing on stdout, exactly one
/// stderr line starting `multinode: error: `. Returns the line without that prefix.
pub(crate) fn run_usage_error(args: &[&str], vars: &[(&str, &str)]) -> String {
    let out = run(args, vars);
    assert_eq!(out.code, 2, "multinode {args:?} with {vars:?}: {out:?}");
    assert_eq!(out.stdout, "", "multinode {args:?} with {vars:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one stderr line expected: {:?}", out.stderr);
    assert!(out.stderr.ends_with('\n'));
    lines[0]
        .strip_prefix("multinode: error: ")
        .unwrap_or_else(|| panic!("stderr does not start with 'multinode: error: ': {lines:?}"))
        .to_string()
}

/// `multinode env --format json ARGS` as name → value.
pub(crate) fn env_json(args: &[&str], vars: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut full = vec!["env", "--format", "json"];
    full.extend_from_slice(args);
    let text = run_ok(&full, vars);
    let value: serde_json::Value = serde_json::from_str(&text).expect("env --format json is JSON");
    let object = value.as_object().expect("one JSON object");
    object
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string values").to_string()))
        .collect()
}

/// `multinode hosts --no-resolve --format json ARGS` as (host, slots) pairs.
pub(crate) fn hosts(args: &[&str], vars: &[(&str, &str)]) -> Vec<(String, u64)> {
    let mut full = vec!["hosts", "--no-resolve", "--format", "json"];
    full.extend_from_slice(args);
    let text = run_ok(&full, vars);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("hosts --format json");
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            assert_eq!(row["rank"], i as u64);
            assert!(row["address"].is_null(), "--no-resolve: {row}");
            (
                row["host"].as_str().expect("host").to_string(),
                row["slots"].as_u64().expect("slots"),
            )
        })
        .collect()
}

/// `[("a", 2)]` as owned pairs.
pub(crate) fn pairs(p: &[(&str, u64)]) -> Vec<(String, u64)> {
    p.iter().map(|(h, s)| (h.to_string(), *s)).collect()
}

/// This machine's host name, as `multinode` reads it.
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname()
        .expect("gethostname")
        .into_string()
        .expect("UTF-8 host name")
}
