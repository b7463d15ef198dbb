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
