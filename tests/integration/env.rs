//! `multinode env` rendered for shells and as JSON, and the generic-helper.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::runner::{BIN, env_json, run_program, run_usage_error};

/// The contract's names, in order.
const NAMES: [&str; 13] = [
    "MULTINODE_HOSTLIST",
    "MULTINODE_HOSTLIST_NOSLOTS",
    "MULTINODE_TOTAL_SLOTS",
    "MULTINODE_NNODES",
    "MULTINODE_HEAD",
    "MULTINODE_NODE_IP",
    "MULTINODE_LOCAL_IP",
    "RANK",
    "MULTINODE_NODE_RANK",
    "MULTINODE_AGENT_PORT",
    "MULTINODE_SSH_WRAPPER",
    "MULTINODE_RSH_WRAPPER",
    "MULTINODE_BIN",
];

/// A value holding everything a shell could misread.
const NASTY: &str = "it's \"quoted\" $HOME $(id) `id` \\ back\\\\slash\nnew line\ttab 'end'";

fn bin_dir() -> PathBuf {
    Path::new(BIN).parent().expect("bin dir").to_path_buf()
}

/// A demo topology on loopback literals, this node rank 1.
fn demo() -> Vec<(&'static str, &'static str)> {
    vec![
        ("MULTINODE_HOSTLIST", "127.0.0.2:2,127.0.0.3:2"),
        ("MULTINODE_NODE_RANK", "1"),
    ]
}

#[test]
fn json_is_one_object_in_contract_order() {
    let out = run_program(Path::new(BIN), &["env", "--format", "json"], &demo());
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let keys: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix('"')?
                .split('"')
                .next()
                .map(String::from)
        })
        .collect();
    assert_eq!(keys, NAMES);
    let vars = env_json(&[], &demo());
    let expected: BTreeMap<&str, String> = [
        ("MULTINODE_HOSTLIST", "127.0.0.2:2,127.0.0.3:2".to_string()),
        ("MULTINODE_HOSTLIST_NOSLOTS", "127.0.0.2,127.0.0.3".into()),
        ("MULTINODE_TOTAL_SLOTS", "4".into()),
        ("MULTINODE_NNODES", "2".into()),
        ("MULTINODE_HEAD", "127.0.0.2".into()),
        ("MULTINODE_NODE_IP", "127.0.0.2".into()),
        ("MULTINODE_LOCAL_IP", "127.0.0.3".into()),
        ("RANK", "1".into()),
        ("MULTINODE_NODE_RANK", "1".into()),
        ("MULTINODE_AGENT_PORT", "29922".into()),
        (
            "MULTINODE_SSH_WRAPPER",
            bin_dir().join("mn-ssh").display().to_string(),
        ),
        (
            "MULTINODE_RSH_WRAPPER",
            bin_dir().join("mn-ssh").display().to_string(),
        ),
        ("MULTINODE_BIN", BIN.to_string()),
    ]
    .into_iter()
    .collect();
    let vars: BTreeMap<&str, String> = vars.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    assert_eq!(vars, expected);
}

#[test]
fn agent_port_and_wrappers_are_honoured_and_validated() {
    let mut vars = demo();
    vars.push(("MULTINODE_AGENT_PORT", "40000"));
    vars.push(("MULTINODE_SSH_WRAPPER", "/platform/ssh"));
    let got = env_json(&[], &vars);
    assert_eq!(got["MULTINODE_AGENT_PORT"], "40000");
    assert_eq!(got["MULTINODE_SSH_WRAPPER"], "/platform/ssh");
    assert_eq!(got["MULTINODE_RSH_WRAPPER"], "/platform/ssh");
    vars.push(("MULTINODE_RSH_WRAPPER", "/platform/rsh"));
    assert_eq!(
        env_json(&[], &vars)["MULTINODE_RSH_WRAPPER"],
        "/platform/rsh"
    );
    for bad in ["0", "65536", "ssh"] {
        let mut vars = demo();
        vars.push(("MULTINODE_AGENT_PORT", bad));
        assert_eq!(
            run_usage_error(&["env"], &vars),
            format!(
                "MULTINODE_AGENT_PORT='{bad}' is not a port number (1-65535); fix it, or unset it for the default 29922"
            )
        );
    }
}

#[test]
fn missing_mn_ssh_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lonely = dir.path().join("multinode");
    fs::copy(BIN, &lonely).expect("copy the binary");
    let out = run_program(&lonely, &["env"], &demo());
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "multinode: error: mn-ssh not found beside {}; install it next to multinode or set MULTINODE_SSH_WRAPPER\n",
            lonely.display()
        )
    );
    let mut vars = demo();
    vars.push(("MULTINODE_SSH_WRAPPER", "/platform/ssh"));
    assert_eq!(run_program(&lonely, &["env"], &vars).code, 0);
}

/// `multinode` and `mn-ssh` linked into a directory whose name holds quotes,
/// `$`, backslashes, backticks, a newline: so MULTINODE_BIN and the wrapper
/// paths are nasty too.
fn nasty_install() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let install = dir.path().join("in'st \"$x\" `id` \\ \nall");
    fs::create_dir(&install).expect("mkdir");
    symlink(BIN, install.join("multinode")).expect("link");
    symlink(bin_dir().join("mn-ssh"), install.join("mn-ssh")).expect("link");
    let bin = install.join("multinode");
    (dir, bin)
}

/// Runs `script` in `shell` with `vars`, returning stdout (and checking it succeeded).
fn shell(shell: &str, script: &str, vars: &[(&str, &str)]) -> Vec<u8> {
    let out = Command::new(shell)
        .arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shell}: {e}"));
    assert!(
        out.status.success(),
        "{shell} -c {script:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// NUL-separated `NAME=value` of every contract variable, as the shell sees it
/// after `setup`.
fn values_after(sh: &str, setup: &str, vars: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut script = format!("{setup}\n");
    for name in NAMES {
        script.push_str(&format!("printf '%s=%s\\0' {name} \"${name}\"\n"));
    }
    let out = shell(sh, &script, vars);
    out.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let s = String::from_utf8(s.to_vec()).expect("UTF-8");
            let (k, v) = s.split_once('=').expect("NAME=value");
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn eval_of_sh_output_reproduces_every_value_byte_for_byte() {
    let (_dir, bin) = nasty_install();
    let bin = bin.to_str().expect("UTF-8");
    let mut vars = demo();
    vars.push(("MULTINODE_RSH_WRAPPER", NASTY));
    let vars_with_bin: Vec<(&str, &str)> = vars.iter().copied().chain([("MN", bin)]).collect();
    let expected: BTreeMap<String, String> = {
        let out = run_program(Path::new(bin), &["env", "--format", "json"], &vars);
        assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
        v.as_object()
            .expect("object")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("string").to_string()))
            .collect()
    };
    assert_eq!(expected["MULTINODE_RSH_WRAPPER"], NASTY);
    assert_eq!(expected["MULTINODE_BIN"], bin);
    assert_eq!(
        expected["MULTINODE_SSH_WRAPPER"],
        bin.replace("/multinode", "/mn-ssh")
    );
    for sh in ["sh", "dash", "bash"] {
        let got = values_after(
            sh,
            "eval \"$(\"$MN\" env --format sh)\" || exit 1",
            &vars_with_bin,
        );
        assert_eq!(got, expected, "{sh}");
    }
}

fn helper() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("helpers/generic-helper")
        .to_str()
        .expect("UTF-8")
        .to_string()
}

#[test]
fn generic_helper_passes_shellcheck_and_dash_n() {
    for (program, args) in [("shellcheck", vec!["--shell=sh"]), ("dash", vec!["-n"])] {
        let out = Command::new(program)
            .args(&args)
            .arg(helper())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program} ({e}); CI installs it"));
        assert!(
            out.status.success(),
            "{program}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn generic_helper_exports_everything_and_defines_exec_all() {
    let (_dir, bin) = nasty_install();
    let bin = bin.to_str().expect("UTF-8");
    let helper_path = helper();
    let mut vars = demo();
    vars.push(("MULTINODE_BIN", bin));
    vars.push(("MULTINODE_SSH_WRAPPER", NASTY));
    vars.push(("HELPER", &helper_path));
    for sh in ["dash", "bash"] {
        // Exported: a child process sees them.
        let script = "set -- keep me; . \"$HELPER\" || exit 1\n\
             [ \"$*\" = 'keep me' ] || { echo 'positional parameters changed' >&2; exit 1; }\n\
             command -v exec_all >/dev/null || exit 1\n\
             case $(command -V exec_all) in *function*) ;; *) exit 1;; esac\n\
             ! command -V _multinode_helper_load >/dev/null 2>&1 || exit 1\n\
             exec env -0";
        let out = shell(sh, script, &vars);
        let exported: BTreeMap<String, String> = out
            .split(|b| *b == 0)
            .filter_map(|s| {
                let s = String::from_utf8(s.to_vec()).ok()?;
                let (k, v) = s.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect();
        for name in NAMES {
            assert!(exported.contains_key(name), "{sh}: {name} not exported");
        }
        assert_eq!(exported["RANK"], "1", "{sh}");
        assert_eq!(exported["MULTINODE_NODE_IP"], "127.0.0.2", "{sh}");
        assert_eq!(exported["MULTINODE_SSH_WRAPPER"], NASTY, "{sh}");
        assert_eq!(exported["MULTINODE_BIN"], bin, "{sh}");
        // exec_all calls the binary's exec-all.
        let script = ". \"$HELPER\" || exit 1; exec_all --help";
        let help = String::from_utf8(shell(sh, script, &vars)).expect("UTF-8");
        assert!(
            help.contains("exec-all") || help.contains("SCRIPT"),
            "{sh}: {help}"
        );
    }
}

#[test]
fn generic_helper_failure_returns_without_exiting_the_shell() {
    let helper_path = helper();
    let broken = [
        ("MULTINODE_BIN", BIN),
        ("MULTINODE_HOSTLIST", "gpu[9-3]"),
        ("HELPER", helper_path.as_str()),
    ];
    let missing = [
        ("MULTINODE_BIN", "/nonexistent/multinode"),
        ("HELPER", helper_path.as_str()),
    ];
    for sh in ["dash", "bash"] {
        for (vars, status, message) in [
            (
                &broken[..],
                "2",
                "multinode: error: MULTINODE_HOSTLIST: reversed range '9-3' in 'gpu[9-3]'\n",
            ),
            (
                &missing[..],
                "127",
                "generic-helper: error: multinode not found (set MULTINODE_BIN, put multinode on PATH, or install it as /usr/local/bin/multinode)\n",
            ),
        ] {
            let out = Command::new(sh)
                .arg("-c")
                .arg(". \"$HELPER\"; echo \"status=$? still here\"")
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .envs(vars.iter().copied())
                .output()
                .expect("run the shell");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("status={status} still here\n"),
                "{sh} {vars:?}"
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stderr),
                message,
                "{sh} {vars:?}"
            );
        }
    }
}
