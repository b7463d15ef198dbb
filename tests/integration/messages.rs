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
    // The table stays short ("unreachable"); the verdict says why, in full.
    assert!(
        out.stderr.contains(&format!(
            "\n  why: cannot connect to {host}:1: Connection refused (os error 111); {hint}\n"
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

/// A port of the demo's that is taken: one line that advises `--port` (the
/// demo's agents ignore MULTINODE_AGENT_PORT), exit 2, and no run with a node
/// answered by someone else.
#[test]
fn demo_with_its_port_in_use_stops_and_advises_port() {
    let taken = std::net::TcpListener::bind("127.0.0.3:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let line = one_error_line(
        Path::new(BIN),
        "multinode",
        &["demo", "--nodes", "3", "--port", &port],
        &[("PATH", "/usr/bin:/bin")],
        2,
    );
    assert_eq!(
        line,
        format!(
            "cannot listen on 127.0.0.3:{port} for the demo's agents: Address already in use (os error 98); \
             is another demo or agent running? choose another port with --port"
        )
    );
}

/// A head whose JOB is not executable, or not found, says what to do, and
/// exits as a shell would.
#[test]
fn a_job_that_cannot_run_says_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("job.sh"), "#!/bin/sh\nexit 0\n").expect("write");
    let ip = fresh_loopback();
    let hostlist = format!("{ip}:1");
    let listen = format!("{ip}:29922");
    for (job, code, hint) in [
        (
            "./job.sh",
            126,
            "Permission denied (os error 13); make it executable (chmod +x ./job.sh) or name its interpreter (sh ./job.sh)",
        ),
        (
            "./nojob.sh",
            127,
            "No such file or directory (os error 2); check the path (a relative one starts from the current directory)",
        ),
        (
            "nojob",
            127,
            "No such file or directory (os error 2); it is not on PATH: give its path",
        ),
    ] {
        let out = crate::util::cmd(&crate::util::multinode())
            .current_dir(dir.path())
            .env("MULTINODE_HOSTLIST", &hostlist)
            .env("MULTINODE_NODE_RANK", "0")
            .args(["agent", "--listen", &listen, "--", job])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run the agent");
        assert_eq!(out.status.code(), Some(code), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("multinode: error: cannot run {job}: {hint}\n")
        );
    }
}

/// `mn-ssh --help` is clap's rendering (the same layout as every other
/// command's), names no file of the repository, and the help of exec_all
/// states each default once.
#[test]
fn help_texts_stand_on_their_own() {
    let out = run_program(&mn_ssh(), &["--help"], &[]);
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    assert!(
        out.stdout
            .contains("\nUsage: mn-ssh [OPTIONS] [USER@]HOST [COMMAND [ARGS...]]\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("\n  -p <PORT>"), "{}", out.stdout);
    assert!(!out.stdout.contains("docs/"), "{}", out.stdout);
    let out = run_program(&mn_exec_all(), &["--help"], &[("MULTINODE_FANOUT", "64")]);
    assert_eq!(out.code, 0, "{out:?}");
    let line = |flag: &str| {
        out.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("no {flag} in {}", out.stdout))
            .to_string()
    };
    assert!(
        line("--fanout").contains("[env: MULTINODE_FANOUT] [default: 256]"),
        "{}",
        line("--fanout")
    );
    assert_eq!(
        line("--export").matches("default").count(),
        1,
        "{}",
        line("--export")
    );
    assert!(
        line("--iface").contains("this node's (MULTINODE_LOCAL_IP)"),
        "{}",
        line("--iface")
    );
}

/// `multinode install-helper DIR`: writes the helper the repository holds,
/// says what it did, can be run again; a DIR that is a file is named, exit 2.
#[test]
fn install_helper_writes_the_helper_and_can_run_again() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("multinode");
    let dir_s = dir.to_str().expect("UTF-8");
    let run = || run_program(Path::new(BIN), &["install-helper", dir_s], &[]);
    let out = run();
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (
            0,
            format!("{dir_s}/generic-helper: installed\n").as_str(),
            ""
        )
    );
    let want = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/helpers/generic-helper"
    ))
    .expect("the repository's helper");
    assert_eq!(
        std::fs::read_to_string(dir.join("generic-helper")).expect("written"),
        want
    );
    let out = run();
    assert_eq!(
        out.stdout,
        format!("{dir_s}/generic-helper: already up to date\n")
    );
    std::fs::write(dir.join("generic-helper"), "# an older helper\n").expect("write");
    assert_eq!(run().stdout, format!("{dir_s}/generic-helper: updated\n"));
    assert_eq!(
        std::fs::read_to_string(dir.join("generic-helper")).expect("written"),
        want
    );
    let file = dir.join("generic-helper");
    let file_s = file.to_str().expect("UTF-8");
    assert_eq!(
        run_usage_error(&["install-helper", file_s], &[]),
        format!("{file_s} is not a directory; give a directory: multinode install-helper DIR")
    );
}

/// `multinode install-helper DIR` where DIR may not be written: one line that
/// names DIR and a command that writes there (as root), exit 2. Run as user
/// 65534 when the tests run as root (root may write anywhere), else with
/// DIR's parent made read-only.
#[test]
fn install_helper_without_write_access_names_the_dir() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let root = tempfile::tempdir().expect("tempdir");
    let parent = root.path().join("ro");
    std::fs::create_dir(&parent).expect("mkdir");
    let as_root = nix::unistd::geteuid().is_root();
    let mode = if as_root { 0o755 } else { 0o555 };
    for dir in [root.path(), parent.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let dir = parent.join("my helpers");
    let dir_s = dir.to_str().expect("UTF-8");
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["install-helper", dir_s])
        .env_clear()
        .env("PATH", "/nonexistent");
    if as_root {
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().expect("runs");
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "multinode: error: cannot create {dir_s}: Permission denied (os error 13); \
             run it as root (sudo \"$(command -v multinode)\" install-helper '{dir_s}'), \
             or give a directory you may write: multinode install-helper DIR\n"
        )
    );
    assert!(!dir.exists());
}
