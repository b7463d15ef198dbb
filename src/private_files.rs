//! This user's files in directories other users may share (`/tmp`, an
//! `XDG_RUNTIME_DIR`): whether a directory lets other users replace what
//! is in it, and removing a file or a whole tree without following links.
//! The one place of both: the head agent's socket (`transport/mux.rs`),
//! the agent's private directory (`env/hostlists.rs`), the heartbeat files
//! (`heartbeat.rs`, the supervisor, the group keeper).

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why users other than its owner could replace what is in a directory
/// (rename an entry away and put their own in its place): its group or
/// others may write to it, and it is not sticky (in a sticky directory,
/// as `/tmp`, only an entry's owner may rename or remove it). `None` when
/// they cannot.
pub fn others_can_replace(dir: &std::fs::Metadata) -> Option<String> {
    let mode = dir.mode();
    let others_write = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    (others_write && !sticky)
        .then(|| format!("can be written by other users (mode {:o})", mode & 0o7777))
}

/// Removes `path` whatever it is now: a file, a link (never what it points
/// to), or a directory with everything in it (`std::fs::remove_dir_all`,
/// which removes the links it meets and never follows them: a command may
/// make its heartbeat file a directory, with files and links in it). A
/// path that is not there is no error.
pub fn remove_all(path: &Path) -> std::io::Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_directory_others_can_write_to_is_one_they_can_replace_entries_of_unless_sticky() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (mode, replaceable) in [
            (0o700, false),
            (0o755, false),
            (0o1777, false),
            (0o1770, false),
            (0o777, true),
            (0o770, true),
            (0o702, true),
        ] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
            let meta = std::fs::metadata(dir.path()).expect("there");
            assert_eq!(
                others_can_replace(&meta),
                replaceable.then(|| format!("can be written by other users (mode {mode:o})")),
                "mode {mode:o}"
            );
        }
    }

    #[test]
    fn a_file_a_link_or_a_tree_goes_and_what_a_link_points_to_stays() {
        let base = tempfile::tempdir().expect("tempdir");
        let outside = base.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), "precious").expect("write");
        let tree = base.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).expect("mkdir");
        std::fs::write(tree.join("a/b/f"), "").expect("write");
        std::os::unix::fs::symlink(&outside, tree.join("a/link")).expect("link");
        let file = base.path().join("file");
        std::fs::write(&file, "").expect("write");
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).expect("link");
        for path in [&tree, &file, &link] {
            remove_all(path).expect("removed");
            assert!(
                std::fs::symlink_metadata(path).is_err(),
                "{} is left",
                path.display()
            );
        }
        assert!(outside.join("keep").is_file(), "followed a link");
        remove_all(&tree).expect("nothing there is no error");
    }
}
