//! A command that needs no shell: one simple command of plain words
//! (`hostname`, `nvidia-smi -L`, `python3 train.py --lr=0.1`). The agent
//! execs its program directly instead of `/bin/sh -c COMMAND`, as bash and
//! dash do for `sh -c WORD`'s last command, which saves one exec of the
//! shell (~20% of an agent's CPU for `hostname`). Anything a shell would
//! read differently (quotes, `$`, globs, `~`, redirections, `;`, newlines, an
//! assignment, a builtin or keyword first) goes to `sh -c` as before, and so
//! does a program that is not found or that exec cannot start.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A program found on `PATH` and the words of its command line (`argv[0]` as written).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Direct<'a> {
    pub program: PathBuf,
    pub argv: Vec<&'a str>,
}

/// The shell's builtins and keywords (dash's and POSIX's, some of bash's):
/// as a first word, they go to `sh`, which runs them differently from a
/// program of the same name (`echo -e`, `pwd`, `cd`, `exit`, `true`...).
const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "[[", "]]", "{", "}", "alias", "bg", "break", "builtin", "case", "cd",
    "command", "continue", "declare", "do", "done", "echo", "elif", "else", "esac", "eval", "exec",
    "exit", "export", "false", "fc", "fg", "fi", "for", "function", "getopts", "hash", "if", "in",
    "jobs", "kill", "let", "local", "printf", "pwd", "read", "readonly", "return", "select", "set",
    "shift", "source", "test", "then", "time", "times", "trap", "true", "type", "typeset",
    "ulimit", "umask", "unalias", "unset", "until", "wait", "while",
];

/// The words of `command` when it is one simple command of plain words.
pub(crate) fn argv(command: &[u8]) -> Option<Vec<&str>> {
    let text = std::str::from_utf8(command).ok()?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let words: Vec<&str> = text.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    let first = *words.first()?;
    let plain = |w: &str| {
        w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:,+%@=".contains(&b))
    };
    (words.iter().all(|w| plain(w)) && !first.contains('=') && !SHELL_WORDS.contains(&first))
        .then_some(words)
}

/// Finds `argv[0]` as `sh` would (a name with a `/` as it is, else the
/// first executable file of that name on `path`); `None` leaves it to `sh`.
pub(crate) fn resolve<'a>(argv: Vec<&'a str>, path: Option<&str>) -> Option<Direct<'a>> {
    let name = argv[0];
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let program = if name.contains('/') {
        Some(PathBuf::from(name)).filter(|p| executable(p))
    } else {
        path?
            .split(':')
            .map(|dir| Path::new(if dir.is_empty() { "." } else { dir }).join(name))
            .find(|p| executable(p))
    }?;
    Some(Direct { program, argv })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_commands_and_what_needs_a_shell() {
        assert_eq!(argv(b"hostname"), Some(vec!["hostname"]));
        assert_eq!(argv(b"hostname\n"), Some(vec!["hostname"]));
        assert_eq!(
            argv(b"python3  train.py\t--lr=0.1 /data/x,y:z@1+2%"),
            Some(vec!["python3", "train.py", "--lr=0.1", "/data/x,y:z@1+2%"])
        );
        for shell in [
            "",
            " ",
            "echo hi",
            "true",
            "cd /tmp",
            "exit 3",
            "A=1 env",
            "ls *",
            "ls ~",
            "a; b",
            "a && b",
            "a | b",
            "a > f",
            "a < f",
            "echo $HOME",
            "a 'b'",
            "a \"b\"",
            "a\nb",
            "a `b`",
            "a \\b",
            "a #c",
            "a (b)",
            "a {b,c}",
            "a?",
            "set -- x\nhostname",
        ] {
            assert_eq!(argv(shell.as_bytes()), None, "{shell:?}");
        }
        assert_eq!(argv(b"\xff"), None);
    }

    #[test]
    fn programs_are_found_as_sh_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("data"), "").unwrap();
        let path = format!("/nonexistent:{}", dir.path().display());
        assert_eq!(
            resolve(vec!["tool", "x"], Some(&path)),
            Some(Direct {
                program: exe.clone(),
                argv: vec!["tool", "x"]
            })
        );
        assert_eq!(resolve(vec!["data"], Some(&path)), None, "not executable");
        assert_eq!(resolve(vec!["absent"], Some(&path)), None);
        assert_eq!(resolve(vec!["tool"], None), None, "no PATH: sh decides");
        let full = exe.to_str().unwrap();
        assert_eq!(
            resolve(vec![full], None).map(|d| d.program),
            Some(exe.clone())
        );
        assert_eq!(resolve(vec!["/nonexistent/tool"], Some(&path)), None);
    }
}
