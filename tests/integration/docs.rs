//! The repository stands on its own: no page, benchmark or result names a
//! path of the machine it was written on, and a page's example prints what
//! the page shows.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::util::{number_after, pids_matching};

/// Every file under `dir` (recursively).
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn no_paths_of_the_authors_machine() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = vec![root.join("README.md"), root.join("Dockerfile")];
    for dir in ["docs", "bench", "src", "helpers", "docker", "tests/cluster"] {
        files(&root.join(dir), &mut all);
    }
    assert!(all.len() > 50, "{} files", all.len());
    // The development machine's checkouts and shared folders, root's home,
    // and mktemp's names.
    let patterns = ["/work/", "/root/", "/tmp/tmp."];
    let mut found = Vec::new();
    for path in &all {
        let Ok(text) = std::fs::read(path) else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        for (n, line) in text.lines().enumerate() {
            if let Some(p) = patterns.iter().find(|p| line.contains(**p)) {
                found.push(format!("{}:{}: {p}", path.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "machine paths: {found:#?}");
}

/// The commands in `page`'s code blocks, one a line: a command that goes on
/// over lines ending in `\` is joined into one.
fn code_block_commands(root: &Path, page: &str) -> String {
    let text = std::fs::read_to_string(root.join(page)).expect("the page");
    let code = text
        .split("```")
        .skip(1)
        .step_by(2)
        .collect::<Vec<_>>()
        .join("\n");
    code.replace("\\\n", " ")
}

/// Every `bench.py` command in the docs names options and `--fanout-tools`
/// that `bench/bench.py` has (a renamed tool or option would leave a
/// documented command that stops at its first line).
#[test]
fn documented_bench_commands_name_what_bench_py_has() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bench = std::fs::read_to_string(root.join("bench/bench.py")).expect("bench.py");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in ["docs/benchmarks.md", "docs/scale.md"] {
        let joined = code_block_commands(root, page);
        for line in joined.lines().filter(|l| l.contains("bench.py --")) {
            checked += 1;
            let command = &line[line.find("bench.py").expect("found")..];
            // Options outside quotes ('...' holds tool names).
            let unquoted: String = command.split('\'').step_by(2).collect::<Vec<_>>().join(" ");
            for word in unquoted.split_whitespace() {
                let is_option = word.len() > 2
                    && word.starts_with("--")
                    && word[2..]
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b == b'-');
                if is_option {
                    let needle = format!("\"{word}\"");
                    if !bench.contains(&needle) {
                        wrong.push(format!("{page}: option {word}"));
                    }
                }
            }
            if let Some(at) = command.find("--fanout-tools '") {
                let rest = &command[at + "--fanout-tools '".len()..];
                let tools = &rest[..rest.find('\'').expect("a closing quote")];
                for tool in tools.split(',') {
                    let base = tool.strip_suffix(" (base)").unwrap_or(tool);
                    if !bench.contains(&format!("\"{tool}\""))
                        && !bench.contains(&format!("\"{base} (base)\""))
                    {
                        wrong.push(format!("{page}: tool {tool:?}"));
                    }
                }
            }
        }
    }
    assert!(checked >= 3, "{checked} bench.py commands found");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every other `bench/NAME.py` command in docs/benchmarks.md's code blocks
/// names options that script has (`--gap-ms` in `echo_latency.py`, say).
#[test]
fn documented_bench_script_options_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut wrong = Vec::new();
    for line in code_block_commands(root, "docs/benchmarks.md").lines() {
        // What a comment says is not part of the command.
        let line = line.split(" #").next().unwrap_or_default();
        let Some(at) = line.find("bench/") else {
            continue;
        };
        let command = &line[at..];
        let Some(end) = command.find(".py") else {
            continue;
        };
        let script = &command[..end + 3];
        if script == "bench/bench.py" || script.contains(char::is_whitespace) {
            continue;
        }
        let source = std::fs::read_to_string(root.join(script))
            .unwrap_or_else(|e| panic!("docs/benchmarks.md runs {script}: {e}"));
        for word in command.split_whitespace().filter(|w| w.starts_with("--")) {
            checked += 1;
            if !source.contains(&format!("\"{word}\"")) {
                wrong.push(format!("{script}: {word}"));
            }
        }
    }
    assert!(checked >= 10, "{checked} options found");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// `bench/ab_split.sh`, as docs/benchmarks.md runs it, on three nodes of
/// this build against itself: it starts, counts both builds' CPU and
/// prints the comparison. (Needs root and the cpuacct cgroup controller,
/// as the bench does.)
/// A port for a bench's agents that no other test run uses.
fn bench_port() -> u16 {
    20_000 + (std::process::id() % 20_000) as u16
}

/// Runs `bench/SCRIPT ARGS` with `PORT_VAR` set to `port` and returns its
/// stdout, once it succeeded.
fn run_bench(script: &str, args: &[&OsStr], port_var: &str, port: u16) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("bench").join(script))
        .args(args)
        .env(port_var, port.to_string())
        .output()
        .unwrap_or_else(|e| panic!("bench/{script} does not run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The directory of this build's programs.
fn build_dir() -> &'static OsStr {
    Path::new(env!("CARGO_BIN_EXE_multinode"))
        .parent()
        .expect("a directory")
        .as_os_str()
}

/// The line of `stdout` that starts with `prefix`, and the number after `label` in it.
fn line_and_number(stdout: &str, prefix: &str, label: &str) -> (String, f64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line for {prefix}: {stdout}"));
    let number = number_after(line, label).unwrap_or_else(|| panic!("no {label:?} in {line:?}"));
    (line.to_string(), number)
}

#[test]
fn the_ab_split_bench_runs() {
    let bin = build_dir();
    let stdout = run_bench(
        "ab_split.sh",
        &[bin, bin, "3".as_ref(), "2".as_ref(), "true".as_ref()],
        "AB_SPLIT_PORT",
        bench_port(),
    );
    assert!(
        stdout.contains("3 nodes, 2 launches of 'true' each"),
        "{stdout}"
    );
    // Each build's node CPU a node: some, not none (the groups counted).
    for build in ["A: ", "B: "] {
        let (line, node_ms) = line_and_number(&stdout, build, "node CPU a node ms ");
        assert!(node_ms > 0.0, "{line}");
    }
    assert!(stdout.contains("B/A: "), "{stdout}");
}

/// docs/scale.md's head-scale bench, small: the head's CPU a connection at
/// two node counts, each with its ratio to the first.
#[test]
fn the_head_scale_bench_runs() {
    let port = bench_port();
    let stdout = run_bench(
        "head_scale.py",
        &[build_dir(), "3,6".as_ref(), "2".as_ref()],
        "HEAD_SCALE_PORT",
        port,
    );
    assert!(stdout.contains("2 runs each, alternated"), "{stdout}");
    for (n, ratio) in [("N=3: ", Some("1.00x N=3's")), ("N=6: ", None)] {
        let (line, cpu_ms) = line_and_number(&stdout, n, "head CPU a connection ms ");
        assert!(cpu_ms > 0.0, "{line}");
        if let Some(ratio) = ratio {
            assert!(line.contains(ratio), "{line}");
        }
    }
    // Every agent it started (on 127.1.0.1 to .6) has ended.
    let left: Vec<u32> = (1..=6)
        .flat_map(|i| pids_matching(&format!("agent --listen 127.1.0.{i}:{port}")))
        .collect();
    assert!(left.is_empty(), "agents left: {left:?}");
}

/// The lines of the block after `<!-- test: NAME -->` in `page`.
pub(crate) fn doc_block(page: &str, name: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(page)).expect("the page");
    let marker = format!("<!-- test: {name} -->");
    let after = &text[text.find(&marker).expect("the block's marker") + marker.len()..];
    let body = after.split_once("```").expect("the block's start").1;
    let body = body.split_once('\n').expect("the fence's line").1;
    let body = body.split_once("```").expect("the block's end").0;
    body.lines().map(String::from).collect()
}

/// A line's words, with each time (`0.1s`, `1.06 s`, `13:38:20.510Z`) as
/// `TIME`: what a run may change, where the rest must be the page's.
pub(crate) fn words_but_times(line: &str) -> Vec<String> {
    let is_time = |word: &str| {
        let t = word.trim_start_matches('(').trim_end_matches(['s', 'Z']);
        t.starts_with(|c: char| c.is_ascii_digit())
            && t.matches('.').count() == 1
            && t.chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == ':')
    };
    line.split_whitespace()
        .map(|w| if is_time(w) { "TIME".into() } else { w.into() })
        .collect()
}

/// docs/quickstart.md's failing demo prints what the page shows, every time
/// (it once raced: rank 0 was killed by SIGTERM in 5 runs of 7). The
/// command runs as written, in a private network namespace so that its
/// fixed addresses and port (127.0.0.2-4, 29923) meet no other test.
#[test]
fn the_quickstarts_failing_demo_prints_the_pages_output() {
    let block = doc_block("docs/quickstart.md", "quickstart-demo-fail");
    let command = block[0].strip_prefix("$ ").expect("a command line");
    let want: Vec<Vec<String>> = block[1..].iter().map(|l| words_but_times(l)).collect();
    let bin = Path::new(crate::runner::BIN).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    for run in 0..3 {
        let out = std::process::Command::new("unshare")
            .args(["-rn", "sh", "-c"])
            .arg(format!("exec 2>&1; ip link set lo up && {command}"))
            .env("PATH", &path)
            .env_remove("MULTINODE_SECRET")
            .output()
            .expect("unshare, ip");
        let text = String::from_utf8_lossy(&out.stdout);
        let got: Vec<Vec<String>> = text.lines().map(words_but_times).collect();
        assert_eq!(got, want, "run {run}: {text}");
    }
}

/// A console block split into its commands (each `$ ` line with the lines
/// its trailing `\` continues) and its output lines.
pub(crate) fn console(block: &[String]) -> (String, Vec<String>) {
    let (mut commands, mut output) = (String::new(), Vec::new());
    let mut continued = false;
    for line in block {
        if continued || line.starts_with("$ ") {
            commands.push_str(line.strip_prefix("$ ").unwrap_or(line));
            commands.push('\n');
            continued = line.ends_with('\\');
        } else {
            output.push(line.clone());
        }
    }
    (commands, output)
}

/// docs/mpi.md's one-machine run, every `$ ` line as written, in one bash
/// (the Open MPI block, then the MPICH one, which ends the agents), in a
/// network namespace of its own so that the page's addresses and port meet
/// no other test. Its output must be the page's lines, in any order (the
/// ranks print concurrently), with `host=` this machine's name; on stderr
/// only the two lines of Open MPI's own that the page names.
#[test]
fn the_mpi_page_runs_on_one_machine_as_written() {
    use std::os::unix::process::CommandExt;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut script, mut want) = (String::new(), Vec::new());
    for name in ["mpi-one-machine", "mpi-one-machine-mpich"] {
        let (commands, output) = console(&doc_block("docs/mpi.md", name));
        script.push_str(&commands);
        want.extend(output);
    }
    let host = nix::unistd::gethostname().expect("hostname");
    let host = host.to_string_lossy();
    let mut want: Vec<String> = want
        .iter()
        .map(|l| l.replace("host=vm ", &format!("host={host} ")))
        .collect();
    want.sort();
    assert_eq!(want.len(), 7, "{want:?}");

    // The page's relative path to the program, in a folder of the test's own.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("tests/fixtures")).expect("mkdir");
    std::fs::copy(
        root.join("tests/fixtures/mpi_allreduce.c"),
        dir.path().join("tests/fixtures/mpi_allreduce.c"),
    )
    .expect("copy");
    std::fs::write(dir.path().join("page.sh"), &script).expect("write");
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let out = std::fs::File::create(&out_path).expect("create");
    let err = std::fs::File::create(&err_path).expect("create");
    let path = format!(
        "{}:{}",
        crate::util::multinode()
            .parent()
            .expect("bin dir")
            .display(),
        std::env::var("PATH").expect("PATH")
    );
    // Its own process group, ended whatever happens: the agents the page
    // starts in the background never outlive the test.
    let mut child = std::process::Command::new("unshare")
        .args([
            "-rn",
            "sh",
            "-c",
            "ip link set lo up && exec timeout 150 bash page.sh",
        ])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", path)
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/".into()),
        )
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .expect("unshare (util-linux), ip (iproute2)");
    let status = child.wait().expect("wait");
    let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let text = std::fs::read_to_string(&out_path).expect("output");
    let errors = std::fs::read_to_string(&err_path).expect("output");
    assert!(status.success(), "{status}: {text}{errors}");
    let mut got: Vec<String> = text.lines().map(String::from).collect();
    got.sort();
    assert_eq!(got, want, "{text}{errors}");
    // mpirun's race with the launcher's start, and PMIx's shared store.
    let open_mpi_own = |l: &str| {
        l.contains("] plm:rsh: Warning: setpgid(")
            || (l.contains("] PMIX ERROR: ERROR in file ")
                && l.ends_with("dstore_base.c at line 1709"))
    };
    assert!(errors.lines().all(open_mpi_own), "{errors}");
}

/// The README's test command sets up what it needs: tests/install-deps.sh
/// (which tests/run-all.sh runs before `cargo nextest`) installs
/// cargo-nextest with `cargo install --locked cargo-nextest` when `cargo
/// nextest` is missing, and leaves it alone when it is there. Stand-ins for
/// `cargo`, `dpkg-query` (every package installed), `py-spy` and `maturin` record
/// what the script asks.
#[test]
fn install_deps_builds_cargo_nextest_only_when_missing() {
    use std::os::unix::fs::PermissionsExt;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run_all = std::fs::read_to_string(root.join("tests/run-all.sh")).expect("run-all.sh");
    let (deps, nextest) = (
        run_all
            .find("tests/install-deps.sh\n")
            .expect("runs install-deps.sh"),
        run_all
            .find("cargo nextest run")
            .expect("runs cargo nextest"),
    );
    assert!(deps < nextest, "{run_all}");
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let calls = dir.path().join("calls");
    let stand_in = |name: &str, body: &str| {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    stand_in("dpkg-query", "echo 'install ok installed'");
    stand_in("py-spy", "exit 0");
    stand_in("maturin", "exit 0");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").expect("PATH"));
    for (has_nextest, want) in [
        (false, "nextest --version\ninstall --locked cargo-nextest\n"),
        (true, "nextest --version\n"),
    ] {
        std::fs::write(&calls, "").expect("reset");
        stand_in(
            "cargo",
            &format!(
                "echo \"$*\" >> '{}'\n[ \"$1\" = nextest ] && exit {}\nexit 0",
                calls.display(),
                if has_nextest { 0 } else { 1 }
            ),
        );
        let out = std::process::Command::new(root.join("tests/install-deps.sh"))
            .env("PATH", &path)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert_eq!(
            std::fs::read_to_string(&calls).expect("calls"),
            want,
            "{text}"
        );
    }
}

/// docs/restarts.md's one-machine example, every `$ ` line as written, in a
/// network namespace of its own (the page's addresses and port meet no
/// other test): its output, both streams, must be the page's lines in any
/// order (the nodes print concurrently).
#[test]
fn the_restarts_page_runs_on_one_machine_as_written() {
    let (got, want) = console_in_a_network_namespace("docs/restarts.md", "restarts-health");
    assert_eq!(want.len(), 4, "{want:?}");
    assert_eq!(got, want);
}

/// docs/torchrun.md's "Without torchrun": three loopback nodes of two
/// processes each, every process's worker contract as the page shows it.
#[test]
fn the_torchrun_pages_run_without_torchrun_is_as_written() {
    let (got, want) = console_in_a_network_namespace("docs/torchrun.md", "torchrun-without");
    assert_eq!(want.len(), 6, "{want:?}");
    assert_eq!(got, want);
}

/// A page's console block (`<!-- test: NAME -->`), every `$ ` line as
/// written, in one bash in a network namespace of its own (the page's
/// addresses and ports meet no other test); what it printed and what the
/// page shows, each sorted (the nodes print concurrently).
fn console_in_a_network_namespace(page: &str, name: &str) -> (Vec<String>, Vec<String>) {
    use std::os::unix::process::CommandExt;
    let (script, mut want) = console(&doc_block(page, name));
    want.sort();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("page.sh"), &script).expect("write");
    let path = format!(
        "{}:{}",
        crate::util::multinode()
            .parent()
            .expect("bin dir")
            .display(),
        std::env::var("PATH").expect("PATH")
    );
    // To a file: the agents the page leaves in the background hold it open.
    let out_path = dir.path().join("out");
    let out = std::fs::File::create(&out_path).expect("create");
    let mut child = std::process::Command::new("unshare")
        .args([
            "-rn",
            "sh",
            "-c",
            "ip link set lo up && exec timeout 60 bash page.sh 2>&1",
        ])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", path)
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/".into()),
        )
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .process_group(0)
        .spawn()
        .expect("unshare (util-linux), ip (iproute2)");
    let status = child.wait().expect("wait");
    let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let text = std::fs::read_to_string(&out_path).expect("output");
    assert!(status.success(), "{status}: {text}");
    let mut got: Vec<String> = text.lines().map(String::from).collect();
    got.sort();
    (got, want)
}

/// bench/gpu's scripts (run on the GPU machine, which CI has not) parse,
/// and share one definition of what each used to copy: the agents ended
/// on exit (`stop_agents`) and the small helpers, in bench/gpu/lib.sh.
#[test]
fn the_gpu_bench_scripts_parse_and_share_one_lib() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/gpu");
    let mut defined = Vec::new();
    let mut scripts = 0;
    for entry in std::fs::read_dir(&dir).expect("bench/gpu") {
        let path = entry.expect("entry").path();
        if path.extension() != Some(OsStr::new("sh")) {
            continue;
        }
        scripts += 1;
        let parsed = std::process::Command::new("bash")
            .arg("-n")
            .arg(&path)
            .output()
            .expect("bash runs");
        assert!(
            parsed.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&parsed.stderr)
        );
        let text = std::fs::read_to_string(&path).expect("read");
        for name in [
            "stop_agents",
            "start_loopback_agents",
            "record",
            "now",
            "secs",
            "gpu_pids",
            "summarize",
        ] {
            if text.contains(&format!("\n{name}() {{")) {
                defined.push(format!("{name} in {}", path.display()));
            }
        }
        if text.contains("agents+=") && path.file_name() != Some(OsStr::new("lib.sh")) {
            assert!(
                text.contains("/lib.sh\""),
                "{} starts agents without lib.sh",
                path.display()
            );
        }
    }
    assert!(scripts >= 8, "{scripts} scripts");
    defined.sort();
    let lib = dir.join("lib.sh").display().to_string();
    assert_eq!(
        defined,
        [
            "gpu_pids",
            "now",
            "record",
            "secs",
            "start_loopback_agents",
            "stop_agents",
            "summarize"
        ]
        .map(|n| format!("{n} in {lib}")),
    );
}

/// docs/check.md's `check --gpu` examples, run as written from the
/// repository root against the H100's stand-ins, print the page's lines.
#[test]
fn the_check_pages_gpu_examples_print_what_it_shows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = format!(
        "{}:{}",
        build_dir().to_string_lossy(),
        std::env::var("PATH").unwrap_or_default()
    );
    for name in ["check-gpu-h100", "check-gpu-faults", "check-gpu-hogged"] {
        let (commands, want) = console(&doc_block("docs/check.md", name));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&commands)
            .current_dir(root)
            .env("PATH", &path)
            .output()
            .expect("sh");
        let text = String::from_utf8_lossy(&out.stdout);
        let got: Vec<&str> = text.lines().collect();
        assert_eq!(
            got,
            want,
            "{name}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
