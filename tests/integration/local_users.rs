//! Local tampering by another user of the same machine (issue 32): links
//! planted where `multinode` writes, a socket of another user where the job's
//! clients look for the head agent's, files in a shared temporary directory.

use std::os::unix::fs::MetadataExt;
use std::process::Stdio;

use crate::util::*;

/// `multinode keygen -o FILE` writes `FILE.pub` as it writes `FILE`: a link
/// planted at either is replaced, and what it points to is left alone.
#[test]
fn keygen_replaces_links_planted_at_its_files_and_never_writes_through_them() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let key = dir.path().join("id");
    let public = dir.path().join("id.pub");
    std::os::unix::fs::symlink(&victim, &key).unwrap();
    std::os::unix::fs::symlink(&victim, &public).unwrap();
    let out = cmd(&multinode())
        .args(["keygen", "-o"])
        .arg(&key)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    for (path, mode, starts) in [
        (&key, 0o600, "-----BEGIN OPENSSH PRIVATE KEY-----"),
        (&public, 0o644, "ssh-ed25519 "),
    ] {
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert!(meta.file_type().is_file(), "{}: {meta:?}", path.display());
        assert_eq!(meta.mode() & 0o777, mode, "{}", path.display());
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.starts_with(starts), "{}: {text}", path.display());
    }
}
