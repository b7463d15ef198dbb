//! Where this program is, and `mn-ssh` beside it.
//!
//! The running binary is looked for as it was invoked (argv[0], made absolute
//! without resolving links, or found on `PATH`), then as the kernel reports it
//! (`current_exe`), then canonical: an install that links `multinode` and
//! `mn-ssh` into one directory finds the link beside the link, and one that
//! links only `multinode` finds `mn-ssh` beside the real file.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use crate::error::Error;

/// How this process was started, and how to tell whether a program exists.
pub(crate) struct ThisBinary {
    /// The running binary's paths, preferred first, without duplicates.
    exe_paths: Vec<PathBuf>,
    is_executable: Box<dyn Fn(&Path) -> bool>,
}

impl ThisBinary {
    pub(crate) fn current() -> Self {
        let argv0 = std::env::args_os().next();
        let cwd = std::env::current_dir().ok();
        let path_var = std::env::var_os("PATH");
        let mut paths: Vec<PathBuf> = Vec::new();
        let invoked = argv0.and_then(|a| invoked_path(&a, cwd.as_deref(), path_var.as_ref()));
        let exe = std::env::current_exe().ok();
        let canonical = exe.as_ref().and_then(|e| e.canonicalize().ok());
        for path in [invoked, exe, canonical].into_iter().flatten() {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
        ThisBinary {
            exe_paths: paths,
            is_executable: Box::new(is_executable),
        }
    }

    /// A binary at `bin` whose directory holds exactly `present`.
    #[cfg(test)]
    pub(crate) fn fixed(bin: &str, present: &str) -> Self {
        let present = PathBuf::from(present);
        ThisBinary {
            exe_paths: vec![PathBuf::from(bin)],
            is_executable: Box::new(move |p| p == present),
        }
    }

    /// `name` beside one of this binary's paths, in their order.
    fn beside(&self, name: &str) -> Option<PathBuf> {
        self.exe_paths
            .iter()
            .filter_map(|p| Some(p.parent()?.join(name)))
            .find(|candidate| (self.is_executable)(candidate))
    }

    fn described(&self) -> String {
        self.exe_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    }

    /// The absolute path of `mn-ssh` beside this binary.
    pub(crate) fn mn_ssh(&self) -> Result<String, Error> {
        let path = self.beside("mn-ssh").ok_or_else(|| {
            Error::usage(format!(
                "mn-ssh not found beside {}; install it next to multinode or set MULTINODE_SSH_WRAPPER",
                self.described()
            ))
        })?;
        utf8(path)
    }

    /// The absolute path of the `multinode` binary: this one, unless this is
    /// one of the alias binaries (`mn-ssh`, `mn-exec-all`), which do not
    /// take `multinode`'s commands; then `multinode` beside it.
    pub(crate) fn multinode_bin(&self) -> Result<String, Error> {
        let this = self.exe_paths.first().ok_or_else(|| {
            Error::Failed(
                "cannot find the path of this program (argv[0] and /proc/self/exe)".into(),
            )
        })?;
        let is_alias = this
            .file_name()
            .is_some_and(|n| n == "mn-ssh" || n == "mn-exec-all");
        if !is_alias {
            return utf8(this.clone());
        }
        let path = self.beside("multinode").ok_or_else(|| {
            Error::usage(format!(
                "multinode not found beside {}; install it next to {}",
                self.described(),
                this.file_name().unwrap_or_default().to_string_lossy()
            ))
        })?;
        utf8(path)
    }
}

fn utf8(path: PathBuf) -> Result<String, Error> {
    path.into_os_string().into_string().map_err(|p| {
        Error::usage(format!(
            "the path '{}' is not UTF-8; install multinode under a UTF-8 path",
            p.to_string_lossy()
        ))
    })
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// argv[0] as an absolute path: joined to `cwd` when relative (`.` dropped,
/// links kept), or looked up on `PATH` when it has no `/`.
fn invoked_path(
    argv0: &OsString,
    cwd: Option<&Path>,
    path_var: Option<&OsString>,
) -> Option<PathBuf> {
    let arg = Path::new(argv0);
    if argv0.is_empty() {
        return None;
    }
    let absolute = |p: &Path| -> Option<PathBuf> {
        let joined = if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd?.join(p)
        };
        Some(
            joined
                .components()
                .filter(|c| *c != Component::CurDir)
                .collect(),
        )
    };
    if argv0.as_encoded_bytes().contains(&b'/') {
        return absolute(arg);
    }
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(arg))
        .find(|candidate| is_executable(candidate))
        .and_then(|found| absolute(&found))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn executable(path: &Path) {
        fs::write(path, "#!/bin/sh\n").expect("write");
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    #[test]
    fn invoked_paths() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).expect("mkdir");
        executable(&bin.join("multinode"));
        let cwd = dir.path();
        assert_eq!(
            invoked_path(&"./bin/multinode".into(), Some(cwd), None),
            Some(bin.join("multinode"))
        );
        assert_eq!(
            invoked_path(&"/x/y/multinode".into(), Some(cwd), None),
            Some(PathBuf::from("/x/y/multinode"))
        );
        let path_var =
            std::env::join_paths(["/nonexistent", bin.to_str().expect("utf-8")]).expect("PATH");
        assert_eq!(
            invoked_path(&"multinode".into(), Some(cwd), Some(&path_var)),
            Some(bin.join("multinode"))
        );
        assert_eq!(
            invoked_path(&"absent".into(), Some(cwd), Some(&path_var)),
            None
        );
        assert_eq!(invoked_path(&"".into(), Some(cwd), Some(&path_var)), None);
    }

    #[test]
    fn mn_ssh_beside_the_link_then_beside_the_real_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        let links = dir.path().join("links");
        fs::create_dir(&real).expect("mkdir");
        fs::create_dir(&links).expect("mkdir");
        executable(&real.join("multinode"));
        executable(&real.join("mn-ssh"));
        std::os::unix::fs::symlink(real.join("multinode"), links.join("multinode")).expect("link");
        let inv = |paths: Vec<PathBuf>| ThisBinary {
            exe_paths: paths,
            is_executable: Box::new(is_executable),
        };
        let both = inv(vec![links.join("multinode"), real.join("multinode")]);
        assert_eq!(
            both.mn_ssh().ok(),
            Some(real.join("mn-ssh").display().to_string())
        );
        std::os::unix::fs::symlink(real.join("mn-ssh"), links.join("mn-ssh")).expect("link");
        assert_eq!(
            both.mn_ssh().ok(),
            Some(links.join("mn-ssh").display().to_string())
        );
        assert_eq!(
            both.multinode_bin().ok(),
            Some(links.join("multinode").display().to_string())
        );
        let alias = inv(vec![real.join("mn-exec-all")]);
        assert_eq!(
            alias.multinode_bin().ok(),
            Some(real.join("multinode").display().to_string())
        );
        let lonely = inv(vec![dir.path().join("mn-ssh")]);
        assert!(lonely.multinode_bin().is_err());
        assert!(inv(vec![]).mn_ssh().is_err());
    }
}
