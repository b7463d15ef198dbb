//! The import graph between the top-level modules of `src/` follows the
//! layers written in docs/ARCHITECTURE.md ("Layers"): a module imports only
//! from layers below its own, so there is no cycle and no upward import.
//!
//! Read from the sources: every `crate::NAME` path (in `use` lines, grouped
//! `use crate::{a, b::c}` included, and inline paths) outside comments and
//! outside the `#[cfg(test)]` part at the end of a file. `super::` stays
//! inside a module's own folder and is not an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layers table of docs/ARCHITECTURE.md: `| N | `a`, `b` | ... |` rows
/// under the "## Layers" heading, as module -> layer.
fn layers() -> BTreeMap<String, usize> {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("the doc");
    let section = doc
        .split("\n## Layers\n")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a '## Layers' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut out = BTreeMap::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let Ok(layer) = cells[1].parse::<usize>() else {
            continue;
        };
        for module in cells[2].split(',') {
            let module = module.trim().trim_matches('`');
            assert!(
                out.insert(module.to_string(), layer).is_none(),
                "{module} is in two layers"
            );
        }
    }
    assert!(out.len() > 10, "the layers table is unreadable: {out:?}");
    out
}

/// The top-level module a file of `src/` belongs to (`None`: the crate root).
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    match name.as_str() {
        "lib" | "main" | "bin" => None,
        _ => Some(name),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    let text = match text.find("\n#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| match l.find(" // ") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules that `code` names as `crate::NAME`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` or `mycrate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the first name of each item at depth 0.
            let mut depth = 0;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_ascii_alphabetic() || c == '_') => {
                        out.insert(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn imports_between_top_level_modules_only_go_down_the_layers() {
    let layers = layers();
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    let mut edges = 0;
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let Some(module) = module_of(rel) else {
            continue;
        };
        let Some(&layer) = layers.get(&module) else {
            problems.push(format!(
                "src/{}: module {module} is in no layer of docs/ARCHITECTURE.md",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable source");
        for name in imports(&code(&text)) {
            if name == module || name == "self" {
                continue;
            }
            let Some(&to) = layers.get(&name) else {
                problems.push(format!(
                    "src/{}: imports crate::{name}, which is in no layer",
                    rel.display()
                ));
                continue;
            };
            edges += 1;
            if to >= layer {
                problems.push(format!(
                    "src/{}: {module} (layer {layer}) imports {name} (layer {to}): only lower layers may be imported",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        edges > 50,
        "too few imports found ({edges}): the scan is broken"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_import_scan_sees_grouped_and_inline_paths() {
    let code = code(
        "use crate::{a::X, b, c::{d, e}};\n\
         // use crate::commented;\n\
         let x = crate::f::g(); // crate::trailing\n\
         use $crate::macro_path;\n\
         #[cfg(test)]\nuse crate::test_only;",
    );
    let found: Vec<String> = imports(&code).into_iter().collect();
    assert_eq!(found, ["a", "b", "c", "f"]);
}
