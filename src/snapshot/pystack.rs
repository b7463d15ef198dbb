//! Python stacks through `py-spy dump --json --pid PID`, when py-spy is
//! installed. py-spy reads the interpreter's memory, which needs ptrace
//! permission over the process (same user and Yama's `ptrace_scope` 0 or
//! an ancestor, or `CAP_SYS_PTRACE`: containers need `--cap-add
//! SYS_PTRACE`); without it the process gets a note, not a stack.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::process::{RunOutput, run_bounded_async};

/// One Python frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub function: String,
    pub file: String,
    pub line: u32,
}

/// What py-spy found for one process.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PyStack {
    Stack { frames: Vec<Frame>, idle: bool },
    Note(String),
}

#[derive(Deserialize)]
struct Thread {
    #[serde(default)]
    thread_name: Option<String>,
    #[serde(default)]
    os_thread_id: Option<i64>,
    #[serde(default)]
    active: bool,
    #[serde(default)]
    frames: Vec<JsonFrame>,
}

#[derive(Deserialize)]
struct JsonFrame {
    name: String,
    #[serde(default)]
    short_filename: Option<String>,
    #[serde(default)]
    filename: String,
    #[serde(default)]
    line: i64,
}

/// The main thread's stack from `py-spy dump --json` (the thread whose OS id
/// is the pid, or else the one named `MainThread`, or else the first).
pub(crate) fn parse(json: &[u8], pid: i32) -> Result<(Vec<Frame>, bool), String> {
    let threads: Vec<Thread> =
        serde_json::from_slice(json).map_err(|e| format!("unreadable py-spy output: {e}"))?;
    let main = threads
        .iter()
        .find(|t| t.os_thread_id == Some(pid as i64))
        .or_else(|| {
            threads
                .iter()
                .find(|t| t.thread_name.as_deref() == Some("MainThread"))
        })
        .or(threads.first())
        .ok_or_else(|| "py-spy found no thread".to_string())?;
    let frames = main
        .frames
        .iter()
        .map(|f| Frame {
            function: f.name.clone(),
            file: f
                .short_filename
                .clone()
                .unwrap_or_else(|| f.filename.clone()),
            line: f.line.max(0) as u32,
        })
        .collect();
    Ok((frames, !main.active))
}

/// py-spy's program on PATH, if any.
pub(crate) fn find(path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .map(|dir| dir.join("py-spy"))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The first line that says something, shortened, from py-spy's error output.
fn first_error(stdout: &[u8], stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let out = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .chain(out.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output");
    let line = line.strip_prefix("Error: ").unwrap_or(line);
    let mut s: String = line.chars().take(160).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    s
}

/// Runs `py-spy dump` on `pid`, at most `timeout` (the bounded runner:
/// its group killed on timeout).
pub(crate) async fn dump(py_spy: &Path, pid: i32, timeout: Duration) -> PyStack {
    let pid_arg = pid.to_string();
    let args = ["dump", "--json", "--pid", pid_arg.as_str()];
    match run_bounded_async(py_spy.as_os_str(), &args, timeout).await {
        RunOutput::TimedOut => PyStack::Note(format!(
            "py-spy did not answer within {:.1} s",
            timeout.as_secs_f64()
        )),
        RunOutput::NotFound => PyStack::Note("cannot run py-spy: not found".to_string()),
        RunOutput::SpawnError(e) => PyStack::Note(format!("cannot run py-spy: {e}")),
        RunOutput::Exited {
            code: Some(0),
            stdout,
            ..
        } => match parse(stdout.as_bytes(), pid) {
            Ok((frames, idle)) => PyStack::Stack { frames, idle },
            Err(e) => PyStack::Note(e),
        },
        RunOutput::Exited { stdout, stderr, .. } => {
            let why = first_error(stdout.as_bytes(), stderr.as_bytes());
            let hint = if why.contains("ermission")
                || why.contains("not permitted")
                || why.contains("ptrace")
            {
                " (py-spy needs ptrace permission: CAP_SYS_PTRACE, or kernel.yama.ptrace_scope=0)"
            } else {
                ""
            };
            PyStack::Note(format!("py-spy: {why}{hint}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = r#"[
      {"pid": 7, "thread_id": 1, "thread_name": "Thread-1", "os_thread_id": 9, "active": true,
       "owns_gil": false, "frames": [{"name": "spin", "filename": "/w/t.py", "short_filename": "t.py", "line": 3}]},
      {"pid": 7, "thread_id": 2, "thread_name": "MainThread", "os_thread_id": 7, "active": false,
       "owns_gil": false, "frames": [
         {"name": "all_reduce", "filename": "/u/torch/distributed/distributed_c10d.py", "short_filename": "torch/distributed/distributed_c10d.py", "line": 2806, "locals": null},
         {"name": "train_step", "filename": "/w/train.py", "short_filename": "train.py", "line": 14},
         {"name": "<module>", "filename": "/w/train.py", "short_filename": "train.py", "line": 30}]}
    ]"#;

    #[test]
    fn takes_the_main_thread() {
        let (frames, idle) = parse(DUMP.as_bytes(), 7).expect("parses");
        assert!(idle);
        let names: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["all_reduce", "train_step", "<module>"]);
        assert_eq!(frames[1].file, "train.py");
        assert_eq!(frames[1].line, 14);
        // By name when no thread has the pid's id, else the first one.
        let (frames, _) = parse(DUMP.as_bytes(), 99).expect("parses");
        assert_eq!(frames[0].function, "all_reduce");
        assert!(parse(b"[]", 7).is_err());
        assert!(parse(b"Error: x", 7).is_err());
    }

    #[test]
    fn error_lines() {
        assert_eq!(
            first_error(b"", b"\nError: Permission denied (os error 13)\nmore"),
            "Permission denied (os error 13)"
        );
        assert_eq!(first_error(b"", b""), "no output");
    }

    fn fake(dir: &Path, body: &str) -> PathBuf {
        let exe = dir.join("py-spy");
        std::fs::write(&exe, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        exe
    }

    #[tokio::test]
    async fn a_refusal_or_a_hang_is_a_note_not_a_stack() {
        let dir = tempfile::tempdir().expect("tempdir");
        // What py-spy prints without ptrace permission.
        let denied = fake(
            dir.path(),
            "echo 'Error: Operation not permitted (os error 1)' >&2; exit 1",
        );
        assert_eq!(
            dump(&denied, 4242, Duration::from_secs(5)).await,
            PyStack::Note(
                "py-spy: Operation not permitted (os error 1) (py-spy needs ptrace permission: \
                 CAP_SYS_PTRACE, or kernel.yama.ptrace_scope=0)"
                    .into()
            )
        );
        let hung = fake(dir.path(), "exec sleep 30");
        let t = std::time::Instant::now();
        assert_eq!(
            dump(&hung, 4242, Duration::from_millis(300)).await,
            PyStack::Note("py-spy did not answer within 0.3 s".into())
        );
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn finds_it_on_path_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(find(Some(dir.path().as_os_str())), None);
        let exe = dir.path().join("py-spy");
        std::fs::write(&exe, "#!/bin/sh\n").expect("write");
        assert_eq!(find(Some(dir.path().as_os_str())), None, "not executable");
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        assert_eq!(find(Some(dir.path().as_os_str())), Some(exe));
        assert_eq!(find(None), None);
    }
}
