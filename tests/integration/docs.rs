//! The repository stands on its own: no page, benchmark or result names a
//! path of the machine it was written on.

use std::path::{Path, PathBuf};

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
        let text = std::fs::read_to_string(root.join(page)).expect("the page");
        // The code blocks' lines; a command continues over lines ending in `\`.
        let code: String = text
            .split("```")
            .skip(1)
            .step_by(2)
            .collect::<Vec<_>>()
            .join("\n");
        let joined = code.replace("\\\n", " ");
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

/// `bench/ab_split.sh`, as docs/benchmarks.md runs it, on three nodes of
/// this build against itself: it starts, counts both builds' CPU and
/// prints the comparison. (Needs root and the cpuacct cgroup controller,
/// as the bench does.)
#[test]
fn the_ab_split_bench_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = Path::new(env!("CARGO_BIN_EXE_multinode"))
        .parent()
        .expect("a directory");
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let out = std::process::Command::new(root.join("bench/ab_split.sh"))
        .args([bin, bin])
        .args(["3", "2", "true"])
        .env("AB_SPLIT_PORT", port.to_string())
        .output()
        .expect("bench/ab_split.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("3 nodes, 2 launches of 'true' each"),
        "{stdout}"
    );
    // Each build's node CPU a node: some, not none (the groups counted).
    for build in ["A: ", "B: "] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(build))
            .unwrap_or_else(|| panic!("no line for {build}: {stdout}"));
        let node_ms: f64 = line
            .split("node CPU a node ms ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no node CPU in {line:?}"));
        assert!(node_ms > 0.0, "{line}");
    }
    assert!(stdout.contains("B/A: "), "{stdout}");
}

/// docs/scale.md's head-scale bench, small: the head's CPU a connection at
/// two node counts, each with its ratio to the first.
#[test]
fn the_head_scale_bench_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = Path::new(env!("CARGO_BIN_EXE_multinode"))
        .parent()
        .expect("a directory");
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let out = std::process::Command::new(root.join("bench/head_scale.py"))
        .arg(bin)
        .args(["3,6", "2"])
        .env("HEAD_SCALE_PORT", port.to_string())
        .output()
        .expect("bench/head_scale.py runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("2 runs each, alternated"), "{stdout}");
    for (n, ratio) in [("N=3: ", Some("1.00x N=3's")), ("N=6: ", None)] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(n))
            .unwrap_or_else(|| panic!("no line for {n}: {stdout}"));
        let cpu_ms: f64 = line
            .split("head CPU a connection ms ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no CPU a connection in {line:?}"));
        assert!(cpu_ms > 0.0, "{line}");
        if let Some(ratio) = ratio {
            assert!(line.contains(ratio), "{line}");
        }
    }
    // Every agent it started has ended.
    let left = std::process::Command::new("pgrep")
        .args(["-f", &format!("agent --listen 127.1.0.[0-9]+:{port}")])
        .output()
        .expect("pgrep runs");
    assert!(
        left.stdout.is_empty(),
        "agents left: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
