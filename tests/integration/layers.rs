//! The import graph of `src/` follows the layers written in
//! docs/ARCHITECTURE.md ("Layers"): a module imports only from layers below
//! its own, so there is no cycle and no upward import between top-level
//! modules; and there is no cycle between any two files, inside a folder
//! included.
//!
//! Read from the sources: every `crate::NAME` path (in `use` lines, grouped
//! `use crate::{a, b::c}` included, and inline paths) outside comments and
//! outside the `#[cfg(test)]` part at the end of a file; for the files,
//! `super::` and `self::` paths and a declared child's name too.

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

/// A file's text before its `#[cfg(test)]` module.
fn before_tests(text: &str) -> &str {
    match text.find("\n#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    before_tests(text)
        .lines()
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

/// A file of `src/` as its module path: `topology/machine.rs` is
/// `["topology", "machine"]`, `topology/mod.rs` is `["topology"]`, `lib.rs`
/// is `[]`; `None` for the binaries of `src/bin/`.
fn module_path(rel: &str) -> Option<Vec<String>> {
    let stem = rel.strip_suffix(".rs")?;
    let mut parts: Vec<String> = stem.split('/').map(String::from).collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    Some(parts)
}

/// The paths that follow one `prefix::` in `rest`, groups expanded:
/// `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand_path(rest: &str) -> Vec<Vec<String>> {
    let ident_len = |s: &str| {
        s.char_indices()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
            .map_or(s.len(), |(i, _)| i)
    };
    let mut prefix = Vec::new();
    let mut s = rest.trim_start();
    loop {
        if let Some(group) = s.strip_prefix('{') {
            // The items at depth 0, each expanded after the prefix.
            let mut out = Vec::new();
            let (mut depth, mut start) = (0, 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth > 0 => depth -= 1,
                    ',' | '}' if depth == 0 => {
                        let item = group[start..i].trim();
                        if !item.is_empty() {
                            for tail in expand_path(item) {
                                out.push([prefix.clone(), tail].concat());
                            }
                        }
                        if c == '}' {
                            break;
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return out;
        }
        let n = ident_len(s);
        if n == 0 {
            return if prefix.is_empty() {
                Vec::new()
            } else {
                vec![prefix]
            };
        }
        prefix.push(s[..n].to_string());
        match s[n..].strip_prefix("::") {
            Some(next) => s = next,
            None => return vec![prefix],
        }
    }
}

/// The import graph between the files of `src/`: `files` as (path under
/// `src/`, its code), edges as file -> the files it names. Every path is
/// read: `crate::`, `super::` (any depth), `self::`, and a child module's
/// name in the file that declares it, grouped or inline; a path goes to the
/// deepest file it names. A folder's `mod.rs` counts like any file: its
/// re-exports and calls into its own folder are edges (its `mod x;` lines
/// are not paths), so a file that imports a name through `mod.rs` which
/// `mod.rs` takes from that file is a cycle. Only `lib.rs`'s edges into the
/// modules it declares do not count.
fn file_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let by_module: BTreeMap<Vec<String>, &str> = files
        .iter()
        .filter_map(|(rel, _)| Some((module_path(rel)?, rel.as_str())))
        .collect();
    let file_of = |segments: &[String]| {
        (1..=segments.len())
            .rev()
            .find_map(|n| by_module.get(&segments[..n]).copied())
    };
    let mut graph = BTreeMap::new();
    for (rel, text) in files {
        let Some(me) = module_path(rel) else {
            continue;
        };
        let code = code(text);
        let declares = |line: &str| {
            let line = line.trim_start();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            line.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(|name| name.trim().to_string())
        };
        let children: BTreeSet<String> = code.lines().filter_map(declares).collect();
        // lib.rs declares the top-level modules: its edges into them do not count.
        let declared = (rel == "lib.rs").then_some("");
        let mut edges = BTreeSet::new();
        let bytes = code.as_bytes();
        let mut i = 0;
        while i < code.len() {
            let at_start = i == 0
                || !(bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b'$'
                    || bytes[i - 1] == b':');
            let rest = &code[i..];
            let mut base: Option<(Vec<String>, &str)> = None;
            if at_start {
                if let Some(r) = rest.strip_prefix("crate::") {
                    base = Some((Vec::new(), r));
                } else if let Some(r) = rest.strip_prefix("self::") {
                    base = Some((me.clone(), r));
                } else if rest.starts_with("super::") {
                    let mut up = me.clone();
                    let mut r = rest;
                    while let Some(next) = r.strip_prefix("super::") {
                        up.pop();
                        r = next;
                    }
                    base = Some((up, r));
                } else if children.iter().any(|c| {
                    rest.strip_prefix(c.as_str())
                        .is_some_and(|r| r.starts_with("::"))
                }) {
                    base = Some((me.clone(), rest));
                }
            }
            let Some((base, r)) = base else {
                i += rest.chars().next().map_or(1, char::len_utf8);
                continue;
            };
            for tail in expand_path(r) {
                let target = [base.clone(), tail].concat();
                if let Some(to) = file_of(&target)
                    && to != rel
                    && !declared.is_some_and(|folder| to.starts_with(folder))
                {
                    edges.insert(to.to_string());
                }
            }
            i += 1;
        }
        graph.insert(rel.clone(), edges);
    }
    graph
}

/// The cycles of `graph`: its strongly connected components of more than
/// one file (Tarjan's algorithm), each sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Search<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut search = Search {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !search.index.contains_key(v.as_str()) {
            search.visit(v);
        }
    }
    search.found
}

#[test]
fn no_import_cycle_between_files() {
    let src = root().join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(&src).expect("under src");
            (
                rel.to_string_lossy().into_owned(),
                std::fs::read_to_string(p).expect("readable source"),
            )
        })
        .collect();
    let graph = file_graph(&files);
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(
        edges > 300,
        "too few imports found ({edges}): the scan is broken"
    );
    let found = cycles(&graph);
    let shown: Vec<String> = found
        .iter()
        .map(|files| {
            let inside: Vec<String> = files
                .iter()
                .map(|f| {
                    let to: Vec<&str> = graph[f]
                        .iter()
                        .filter(|t| files.contains(t))
                        .map(String::as_str)
                        .collect();
                    format!("  src/{f} imports {}", to.join(", "))
                })
                .collect();
            format!("a cycle of {} files:\n{}", files.len(), inside.join("\n"))
        })
        .collect();
    assert!(found.is_empty(), "{}", shown.join("\n"));
}

#[test]
fn the_file_graph_finds_a_cycle_through_super_and_groups() {
    let file = |rel: &str, code: &str| (rel.to_string(), code.to_string());
    let tree = [
        file("lib.rs", "pub mod a;\npub mod b;\n"),
        file(
            "a/mod.rs",
            "mod x;\nmod y;\npub use x::X;\nfn f() { y::g() }\n",
        ),
        file("a/x.rs", "use super::{y::{self, Y}, z};\n"),
        file("a/y.rs", "pub fn g() { crate::b::h() }\n"),
        file(
            "b.rs",
            "use crate::a::x::X; // crate::a::y\n#[cfg(test)]\nuse super::a::y;\n",
        ),
    ];
    let graph = file_graph(&tree);
    let edges = |f: &str| graph[f].iter().cloned().collect::<Vec<_>>();
    assert_eq!(
        edges("a/x.rs"),
        ["a/mod.rs", "a/y.rs"],
        "super::z is in a/mod.rs"
    );
    assert_eq!(edges("a/y.rs"), ["b.rs"]);
    assert_eq!(edges("b.rs"), ["a/x.rs"], "comments and tests are not read");
    assert_eq!(
        edges("a/mod.rs"),
        ["a/x.rs", "a/y.rs"],
        "a mod.rs's re-exports and calls count"
    );
    assert!(edges("lib.rs").is_empty(), "lib.rs declares the modules");
    // x takes z from mod.rs, which takes X from x: a cycle too.
    assert_eq!(
        cycles(&graph),
        [vec!["a/mod.rs", "a/x.rs", "a/y.rs", "b.rs"]]
    );
    // Cut two edges: no cycle left.
    let mut open = tree.clone();
    open[3].1 = "pub fn g() {}\n".into();
    open[2].1 = "use super::y::{self, Y};\n".into();
    assert!(cycles(&file_graph(&open)).is_empty());
}

/// The file names of `src/` that are in more than one folder, against the
/// rule of docs/ARCHITECTURE.md ("File names"): a name says what its file
/// holds, so it is in one folder only; but `mod.rs`, and the sides of one
/// exchange: `protocol/X.rs` (the wire), `agent/X.rs` (the server's end),
/// `transport/X.rs` (the client's end) and the top-level `X.rs` (the work
/// behind it). `files` are paths under `src/`.
fn duplicate_names(files: &[String]) -> Vec<String> {
    let mut by_name: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for rel in files {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        by_name.entry(name).or_default().push(rel);
    }
    let mut problems = Vec::new();
    for (name, paths) in by_name {
        if paths.len() < 2 || name == "mod.rs" {
            continue;
        }
        let sides = [
            name.to_string(),
            format!("protocol/{name}"),
            format!("agent/{name}"),
            format!("transport/{name}"),
        ];
        let pair = paths.iter().all(|p| sides.iter().any(|s| s == p));
        if !pair {
            problems.push(format!(
                "{name} is in several folders: {}",
                paths.join(", ")
            ));
        }
    }
    problems
}

#[test]
fn a_file_name_is_in_one_folder_but_mod_rs_and_the_sides_of_a_protocol() {
    let src = root().join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<String> = paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(&src).expect("under src");
            rel.to_string_lossy().into_owned()
        })
        .collect();
    assert!(files.len() > 100, "too few files found: {}", files.len());
    let problems = duplicate_names(&files);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_name_rule_allows_the_sides_of_a_protocol_only() {
    let files = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let ok = files(&[
        "a/mod.rs",
        "b/mod.rs",
        "protocol/mux.rs",
        "agent/mux.rs",
        "transport/mux.rs",
        "signals.rs",
        "protocol/signals.rs",
        "agent/forward.rs",
        "transport/forward.rs",
    ]);
    assert!(duplicate_names(&ok).is_empty());
    let bad = files(&[
        "snapshot/fold.rs",
        "topology/fold.rs",
        "agent/x.rs",
        "top/x.rs",
    ]);
    assert_eq!(
        duplicate_names(&bad),
        [
            "fold.rs is in several folders: snapshot/fold.rs, topology/fold.rs",
            "x.rs is in several folders: agent/x.rs, top/x.rs",
        ]
    );
    let strayed = files(&["protocol/mux.rs", "agent/mux.rs", "exec_all/mux.rs"]);
    assert_eq!(
        duplicate_names(&strayed).len(),
        1,
        "exec_all is no side of mux"
    );
}

/// The functions of `code` whose body (the lines between its braces) is
/// longer than `max` lines, as `name: N lines`. A small lexer: comments,
/// strings (raw ones included) and character literals are skipped, so a
/// brace inside them does not count; a `fn` without a body (a trait's
/// declaration) has none.
fn long_bodies(code: &str, max: usize) -> Vec<String> {
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    // Open braces: the function each opens (if it is a body) and its line.
    let mut stack: Vec<(Option<String>, usize)> = Vec::new();
    // A `fn NAME` seen at this depth whose body has not opened yet.
    let mut pending: Option<(String, usize)> = None;
    let (mut i, mut line) = (0, 1);
    while i < bytes.len() {
        let c = bytes[i];
        let prev_ident = i > 0 && is_ident(bytes[i - 1]);
        let rest = &code[i..];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            line += rest[..end].matches('\n').count();
            i += end;
        } else if !prev_ident && c == b'r' && rest[1..].trim_start_matches('#').starts_with('"') {
            let hashes = rest[1..].len() - rest[1..].trim_start_matches('#').len();
            let close = format!("\"{}", "#".repeat(hashes));
            let start = 2 + hashes;
            let end = rest[start..]
                .find(&close)
                .map_or(rest.len(), |e| start + e + close.len());
            line += rest[..end].matches('\n').count();
            i += end;
        } else if c == b'"' {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            line += rest[..j.min(rest.len())].matches('\n').count();
            i += j + 1;
        } else if c == b'\'' {
            // A character literal ('{', '\n', '\''), else a lifetime.
            let lit = rest.as_bytes();
            let len = if lit.get(1) == Some(&b'\\') {
                rest[2..].find('\'').map(|e| e + 3)
            } else {
                rest[1..].chars().next().and_then(|ch| {
                    let n = 1 + ch.len_utf8();
                    (lit.get(n) == Some(&b'\'')).then_some(n + 1)
                })
            };
            i += len.unwrap_or(1);
        } else if !prev_ident
            && rest.starts_with("fn")
            && rest[2..].starts_with(char::is_whitespace)
        {
            let name: String = rest[2..]
                .trim_start()
                .chars()
                .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '_')
                .collect();
            pending = Some((name, stack.len()));
            i += 2;
        } else {
            match c {
                b';' if pending.as_ref().is_some_and(|p| p.1 == stack.len()) => pending = None,
                b'{' => {
                    let opens = pending.take_if(|p| p.1 == stack.len()).map(|p| p.0);
                    stack.push((opens, line));
                }
                b'}' => {
                    if let Some((Some(name), start)) = stack.pop() {
                        let lines = line.saturating_sub(start + 1);
                        if lines > max {
                            out.push(format!("{name}: {lines} lines"));
                        }
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

/// A `mod.rs` holds declarations and re-exports: its work is in files
/// named for it (docs/ARCHITECTURE.md), so no function of one (outside its
/// tests) has a body of more than 10 lines.
#[test]
fn a_mod_rs_has_no_function_body_over_10_lines() {
    let src = root().join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut checked = 0;
    let mut problems = Vec::new();
    for path in paths.iter().filter(|p| p.ends_with("mod.rs")) {
        checked += 1;
        let text = std::fs::read_to_string(path).expect("readable source");
        let text = before_tests(&text);
        for long in long_bodies(text, 10) {
            let rel = path.strip_prefix(&src).expect("under src");
            problems.push(format!("src/{}: {long}", rel.display()));
        }
    }
    assert!(checked > 10, "too few mod.rs files found: {checked}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_body_scan_counts_lines_between_a_functions_braces() {
    let code = "fn short() {\n    1\n}\n\
                trait T {\n    fn declared(&self);\n}\n\
                impl X {\n    pub(crate) fn long(&self) -> u8 {\n        let s = \"}\";\n        let c = '{';\n        // }\n        let r = r#\"{\"#;\n        match 1 {\n            _ => 2,\n        }\n    }\n}\n";
    assert!(long_bodies(code, 7).is_empty());
    assert_eq!(long_bodies(code, 6), ["long: 7 lines"]);
    assert_eq!(long_bodies(code, 0), ["short: 1 lines", "long: 7 lines"]);
}

/// The most lines a file of `src/` has before its `#[cfg(test)]`.
const MAX_LINES: usize = 450;

/// The files a `#[cfg(test)] mod NAME;` declares: all tests.
fn test_only_files(files: &[(String, String)]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (rel, text) in files {
        let dir = match rel.rsplit_once('/') {
            Some((dir, "mod.rs")) => format!("{dir}/"),
            _ if rel == "lib.rs" => String::new(),
            Some((dir, file)) => format!("{dir}/{}/", file.trim_end_matches(".rs")),
            None => format!("{}/", rel.trim_end_matches(".rs")),
        };
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line != "#[cfg(test)]" {
                continue;
            }
            let Some(next) = lines.next() else { break };
            let name = next
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|n| n.strip_suffix(';'));
            if let Some(name) = name {
                out.insert(format!("{dir}{name}.rs"));
            }
        }
    }
    out
}

#[test]
fn no_file_is_over_450_lines_before_its_tests() {
    let src = root().join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(&src).expect("under src");
            (
                rel.to_string_lossy().into_owned(),
                std::fs::read_to_string(p).expect("readable source"),
            )
        })
        .collect();
    let tests_only = test_only_files(&files);
    assert!(
        tests_only.contains("binding/tests.rs"),
        "the test-only files are not found: {tests_only:?}"
    );
    let mut problems = Vec::new();
    for (rel, text) in &files {
        if tests_only.contains(rel) {
            continue;
        }
        let lines = before_tests(text).lines().count();
        if lines > MAX_LINES {
            problems.push(format!(
                "src/{rel}: {lines} lines before its tests (at most {MAX_LINES}): split it by job"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The lines of a file outside its `#[cfg(test)]` items (a test module, a
/// test-only function, `use` or field), comments left out, with their
/// numbers; and the test-only files it declares (`#[cfg(test)] mod x;`).
fn non_test_lines(text: &str) -> (Vec<(usize, &str)>, Vec<String>) {
    let braces = |l: &str| {
        l.chars().fold(0i32, |d, c| match c {
            '{' => d + 1,
            '}' => d - 1,
            _ => d,
        })
    };
    let (mut lines, mut test_mods) = (Vec::new(), Vec::new());
    let mut it = text.lines().enumerate();
    while let Some((i, line)) = it.next() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if !t.starts_with("#[cfg(test)]") {
            lines.push((i + 1, line));
            continue;
        }
        // The item: its other attributes, then up to its `;` or the end of
        // its braces (a field ends where its struct does, at worst).
        let (mut depth, mut opened) = (0, false);
        for (_, l) in it.by_ref() {
            let t = l.trim();
            if !opened && t.starts_with("#[") {
                continue;
            }
            if let Some(name) = t
                .split_once("mod ")
                .and_then(|(_, rest)| rest.strip_suffix(';'))
                .filter(|_| !opened)
            {
                test_mods.push(name.trim().to_string());
            }
            depth += braces(l);
            opened |= l.contains('{');
            if depth < 0 || (depth == 0 && (opened || t.ends_with(';'))) {
                break;
            }
        }
    }
    (lines, test_mods)
}

#[test]
fn variable_names_are_written_only_in_vars_rs() {
    let src = root().join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut test_only = BTreeSet::new();
    let mut found = Vec::new();
    let mut lines_read = 0;
    let mut sources: Vec<(PathBuf, String)> = paths
        .iter()
        .map(|p| {
            (
                p.clone(),
                std::fs::read_to_string(p).expect("readable source"),
            )
        })
        .collect();
    // Test-only files first, from every file's declarations.
    for (path, text) in &sources {
        let dir = match path.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "lib.rs" | "main.rs") => path.parent().expect("a folder").to_path_buf(),
            _ => path.with_extension(""),
        };
        for name in non_test_lines(text).1 {
            test_only.insert(dir.join(format!("{name}.rs")));
            test_only.insert(dir.join(name).join("mod.rs"));
        }
    }
    sources.retain(|(p, _)| !test_only.contains(p) && !p.ends_with("src/vars.rs"));
    for (path, text) in &sources {
        for (n, line) in non_test_lines(text).0 {
            lines_read += 1;
            if line.contains("\"MULTINODE_") {
                let rel = path.strip_prefix(&src).expect("under src");
                found.push(format!("  src/{}:{n}: {}", rel.display(), line.trim()));
            }
        }
    }
    assert!(lines_read > 20_000, "too few lines read ({lines_read})");
    assert!(
        test_only.iter().any(|p| p.ends_with("binding/tests.rs")),
        "the test-only files are not found: {test_only:?}"
    );
    assert!(
        found.is_empty(),
        "a MULTINODE_ name written outside src/vars.rs (name it with a constant there):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_test_sections_are_left_out_and_only_they() {
    let text = "use a;\n#[cfg(test)]\nuse b;\nfn f(\n    x: u8,\n) {}\n#[cfg(test)]\n#[expect(x)]\nfn g(\n    y: u8,\n) {\n    h();\n}\nstruct S {\n    #[cfg(test)]\n    t: u8,\n    u: u8,\n}\n// c\n#[cfg(test)]\nmod fixtures;\n#[cfg(test)]\nmod tests {\n    fn i() {}\n}\n";
    let (lines, mods) = non_test_lines(text);
    let kept: Vec<&str> = lines.iter().map(|(_, l)| l.trim()).collect();
    assert_eq!(
        kept,
        ["use a;", "fn f(", "x: u8,", ") {}", "struct S {"],
        "a field takes the rest of its struct with it, at worst"
    );
    assert_eq!(mods, ["fixtures"]);
}

/// docs/ARCHITECTURE.md names every file of `src/` (a folder's `mod.rs`
/// aside): as `name.rs` (file names are unique but for the sides of a
/// protocol) or by its path.
#[test]
fn architecture_md_names_every_file() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("the doc");
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    assert!(files.len() > 100, "the files are not found: {files:?}");
    let missing: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let rel = f
                .strip_prefix(root().join("src"))
                .ok()?
                .to_str()?
                .to_string();
            let name = f.file_name()?.to_str()?;
            let named = name == "mod.rs"
                || doc.contains(&format!("`{name}`"))
                || doc.contains(&format!("`{rel}`"));
            (!named).then_some(rel)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md does not name these files of src/: {missing:?}"
    );
}

/// exec_all's functions are short enough to read at once (issue 43's
/// second step: a dispatcher whose state is fields and one method per
/// event): no body in `src/exec_all/` over 80 lines, tests aside.
#[test]
fn no_function_of_exec_all_is_over_80_lines() {
    let dir = root().join("src/exec_all");
    let mut paths = Vec::new();
    rust_files(&dir, &mut paths);
    assert!(
        paths.len() > 20,
        "exec_all's files are not found: {paths:?}"
    );
    let mut problems = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("readable source");
        let text = before_tests(&text);
        for long in long_bodies(text, 80) {
            let rel = path.strip_prefix(&dir).expect("under exec_all");
            problems.push(format!("src/exec_all/{}: {long}", rel.display()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
