//! `multinode install-helper [DIR]`: writes `helpers/generic-helper`, built
//! into the binary, as `DIR/generic-helper` (default `/multinode`, where job
//! scripts source it: `. /multinode/generic-helper`).
//!
//! Idempotent: a helper already there with the same text is left alone; an
//! older or changed one is replaced, atomically (a temporary file in DIR,
//! then a rename), so a job sourcing it never reads half a file.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// The helper's text, as in the repository's `helpers/generic-helper`.
pub const GENERIC_HELPER: &str = include_str!("../helpers/generic-helper");

/// What `install` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    Written,
    Replaced,
    AlreadyThere,
}

/// `multinode install-helper [DIR]`: one line on stdout saying what was done.
pub fn cmd_install_helper(dir: &Path) -> Result<i32, Error> {
    let (path, what) = install(dir)?;
    let what = match what {
        Installed::Written => "installed",
        Installed::Replaced => "updated",
        Installed::AlreadyThere => "already up to date",
    };
    Ok(crate::stdio::print_or_code(
        "multinode",
        &format!("{}: {what}\n", path.display()),
    ))
}

/// Writes `DIR/generic-helper` (mode 0644), creating DIR when missing.
pub fn install(dir: &Path) -> Result<(PathBuf, Installed), Error> {
    let path = dir.join("generic-helper");
    let cannot = |what: &str, e: std::io::Error| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            // The command to run again names the DIR given, so that it
            // writes where the user asked.
            format!(
                "; run it as root (sudo \"$(command -v multinode)\" install-helper {}), or give a directory you may write: multinode install-helper DIR",
                crate::sh::quote_str(&dir.to_string_lossy())
            )
        } else {
            String::new()
        };
        Error::usage(format!("cannot {what}: {e}{hint}"))
    };
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(Error::usage(format!(
                "{} is not a directory; give a directory: multinode install-helper DIR",
                dir.display()
            )));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)
                .map_err(|e| cannot(&format!("create {}", dir.display()), e))?;
        }
        Err(e) => return Err(cannot(&format!("read {}", dir.display()), e)),
    }
    let before = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => {
            return Err(Error::usage(format!(
                "{} is a directory; remove it or give another DIR",
                path.display()
            )));
        }
        Ok(m) => {
            let same = std::fs::read(&path).is_ok_and(|text| text == GENERIC_HELPER.as_bytes());
            if same && m.permissions().mode() & 0o777 == 0o644 {
                return Ok((path, Installed::AlreadyThere));
            }
            Installed::Replaced
        }
        Err(_) => Installed::Written,
    };
    let write = || -> std::io::Result<()> {
        let mut tmp = tempfile_in(dir)?;
        tmp.1.write_all(GENERIC_HELPER.as_bytes())?;
        tmp.1
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
        tmp.1.sync_all()?;
        let result = std::fs::rename(&tmp.0, &path);
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp.0);
        }
        tmp.0 = PathBuf::new();
        result
    };
    write().map_err(|e| cannot(&format!("write {}", path.display()), e))?;
    Ok((path, before))
}

/// A new file `DIR/.generic-helper.PID.N`, created exclusively.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let pid = std::process::id();
    let mut n = 0u32;
    loop {
        let path = dir.join(format!(".generic-helper.{pid}.{n}"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_then_leaves_alone_then_replaces() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("a/b");
        let (path, what) = install(&dir).expect("install");
        assert_eq!(what, Installed::Written);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            GENERIC_HELPER
        );
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        assert_eq!(install(&dir).expect("again").1, Installed::AlreadyThere);
        std::fs::write(&path, "old helper\n").expect("write");
        assert_eq!(install(&dir).expect("replace").1, Installed::Replaced);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            GENERIC_HELPER
        );
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["generic-helper"]);
    }

    #[test]
    fn a_file_as_dir_is_named() {
        let root = tempfile::tempdir().expect("tempdir");
        let file = root.path().join("f");
        std::fs::write(&file, "").expect("write");
        let e = install(&file).expect_err("not a directory");
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            format!(
                "{} is not a directory; give a directory: multinode install-helper DIR",
                file.display()
            )
        );
    }
}
