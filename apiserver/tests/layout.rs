//! The shape of `src/`, checked so that it stays a house one can find one's way in:
//!
//! - a source file over 800 lines says why in its module doc (the phrase "over 800 lines"
//!   in a `//!` line), or it is split along its seams;
//! - the file-level import graph has no cycles. A file imports another when it names it by
//!   a `crate::` path or a `super::` path (a module path stands for the file that defines
//!   the longest prefix of it; `mod.rs` and `lib.rs` stand for their folder). A child naming
//!   one of its ancestors is not counted (a module may always see its parents), and neither
//!   is test code: comment lines, inline `#[cfg(test)]` modules, and files declared under
//!   `#[cfg(test)]`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lines a source file may have before its module doc has to say why it is that long.
const MAX_LINES: usize = 800;
/// What such a module doc says.
const LONG_FILE_PHRASE: &str = "over 800 lines";

/// A source file: its module path (`api::patch`; empty for `lib.rs`), where it is, its text.
struct SourceFile {
    module: String,
    path: PathBuf,
    text: String,
}

fn collect(dir: &Path, root: &Path, out: &mut Vec<SourceFile>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(&path, root, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)?;
            let rel = path.strip_prefix(root).unwrap_or(&path).with_extension("");
            let module = module_path(&rel.to_string_lossy());
            // Shown as `src/...`, the way the crate's files are named elsewhere.
            let path = Path::new("src").join(path.strip_prefix(root).unwrap_or(&path));
            out.push(SourceFile { module, path, text });
        }
    }
    Ok(())
}

/// `api/patch/json` → `api::patch::json`; `api/patch/mod` → `api::patch`; `lib` → ``.
fn module_path(rel_without_ext: &str) -> String {
    let mut parts: Vec<&str> = rel_without_ext.split(['/', '\\']).collect();
    if matches!(parts.last(), Some(&"mod") | Some(&"lib")) {
        parts.pop();
    }
    parts.join("::")
}

fn sources() -> Vec<SourceFile> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    if let Err(e) = collect(&src, &src, &mut files) {
        panic!("reading {}: {e}", src.display());
    }
    assert!(!files.is_empty(), "no .rs files under {}", src.display());
    files
}

// ---------------------------------------------------------------------------------------
// Long files
// ---------------------------------------------------------------------------------------

/// The text of a file's `//!` lines, joined by single spaces.
fn module_doc(text: &str) -> String {
    let words: Vec<&str> =
        text.lines().filter_map(|l| l.trim_start().strip_prefix("//!")).flat_map(str::split_whitespace).collect();
    words.join(" ")
}

/// `(file, lines)` of every file over [`MAX_LINES`] whose module doc does not say why.
fn unexplained_long_files(files: &[(String, String)]) -> Vec<(String, usize)> {
    files
        .iter()
        .filter_map(|(name, text)| {
            let lines = text.lines().count();
            (lines > MAX_LINES && !module_doc(text).contains(LONG_FILE_PHRASE)).then(|| (name.clone(), lines))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Import graph
// ---------------------------------------------------------------------------------------

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The longest run of path characters (`[A-Za-z0-9_:]`) at the start of `s`.
fn path_prefix(s: &str) -> &str {
    let end = s.find(|c: char| !is_path_char(c)).unwrap_or(s.len());
    &s[..end]
}

/// The module paths a text names after `crate::`: `crate::a::b` gives `a::b`, and a group
/// `crate::a::{b, c::{d}}` gives `a::b` and `a::c` (inner groups resolve to their prefix).
/// A group ends at its first `}` and may not hold a `;`.
fn crate_paths(text: &str) -> Vec<String> {
    const MARK: &str = "crate::";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(MARK) {
        let after = &rest[i + MARK.len()..];
        let path = path_prefix(after);
        let base = path.trim_end_matches(':');
        let tail = &after[path.len()..];
        let group = tail.strip_prefix('{').and_then(|g| {
            let close = g.find('}')?;
            (!g[..close].contains(';')).then_some(&g[..close])
        });
        match group {
            Some(inner) => {
                for item in split_top_level(inner) {
                    let name = path_prefix(item.trim());
                    if name.is_empty() {
                        continue;
                    }
                    out.push(if base.is_empty() {
                        name.to_string()
                    } else {
                        format!("{base}::{}", name.trim_end_matches(':'))
                    });
                }
                rest = &tail[1 + inner.len() + 1..];
            }
            None => {
                out.push(base.to_string());
                rest = tail;
            }
        }
    }
    out
}

/// `a, b::{c, d}, e` → `a`, ` b::{c, d}`, ` e` (commas inside braces do not split).
fn split_top_level(s: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items
}

/// The paths named after `super::` (`super::a::b` gives `a::b`; groups and globs are not read).
fn super_paths(text: &str) -> Vec<String> {
    const MARK: &str = "super::";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(MARK) {
        let after = &rest[i + MARK.len()..];
        let path = path_prefix(after);
        if !path.is_empty() {
            out.push(path.trim_end_matches(':').to_string());
        }
        rest = &after[path.len()..];
    }
    out
}

/// The module among `modules` defining `path`: its longest prefix that is one, if any
/// (the crate root, `""`, is never the answer).
fn resolve<'a>(modules: &'a BTreeSet<String>, path: &str) -> Option<&'a str> {
    let segs: Vec<&str> = path.split("::").collect();
    (1..=segs.len()).rev().find_map(|n| modules.get(&segs[..n].join("::")).map(String::as_str))
}

/// A file's code as the import graph reads it: comment lines left out (a doc may name any
/// module), and cut where a `#[cfg(test)]` inline module begins (test code may import anything).
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    for line in text.lines() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    let mut from = 0;
    while let Some(i) = code[from..].find("#[cfg(test)]") {
        let at = from + i;
        if let Some((_, inline)) = cfg_test_module(&code[at + "#[cfg(test)]".len()..]) {
            if inline {
                code.truncate(at);
                break;
            }
        }
        from = at + 1;
    }
    code
}

/// What follows a `#[cfg(test)]`: if it is a module (after any further attributes and a
/// visibility), its name and whether it is inline (`{`) rather than a file of its own (`;`).
fn cfg_test_module(mut s: &str) -> Option<(&str, bool)> {
    loop {
        s = s.trim_start();
        if let Some(attr) = s.strip_prefix("#[") {
            s = &attr[attr.find(']')? + 1..];
        } else {
            break;
        }
    }
    if let Some(v) = s.strip_prefix("pub") {
        s = v.trim_start();
        if let Some(scope) = s.strip_prefix('(') {
            s = &scope[scope.find(')')? + 1..];
        }
        s = s.trim_start();
    }
    let s = s.strip_prefix("mod ")?.trim_start();
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    let (name, rest) = s.split_at(end);
    match rest.trim_start().chars().next()? {
        '{' => Some((name, true)),
        ';' => Some((name, false)),
        _ => None,
    }
}

/// The children a file declares as `#[cfg(test)] mod name;`: test code in files of their own.
fn test_only_children(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        rest = &rest[i + "#[cfg(test)]".len()..];
        if let Some((name, false)) = cfg_test_module(rest) {
            out.push(name);
        }
    }
    out
}

/// Which files each file imports. `files` maps module paths to their text. Test-only files
/// (declared under `#[cfg(test)]`, and everything below them) are left out of the graph.
fn import_graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut test_only: BTreeSet<String> = BTreeSet::new();
    for (module, text) in files {
        for child in test_only_children(text) {
            test_only.insert(if module.is_empty() { child.to_string() } else { format!("{module}::{child}") });
        }
    }
    let is_test = |m: &str| test_only.iter().any(|t| m == t || m.starts_with(&format!("{t}::")));
    let modules: BTreeSet<String> = files.keys().filter(|m| !is_test(m)).cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, text) in files.iter().filter(|(m, _)| !is_test(m)) {
        let code = code_of(text);
        let text = code.as_str();
        let mut edges = BTreeSet::new();
        let mut add = |target: Option<&str>| {
            if let Some(t) = target {
                if !t.is_empty() && t != module && !module.starts_with(&format!("{t}::")) {
                    edges.insert(t.to_string());
                }
            }
        };
        for path in crate_paths(text) {
            add(resolve(&modules, &path));
        }
        let parent: Vec<&str> = {
            let mut segs: Vec<&str> = module.split("::").collect();
            segs.pop();
            segs
        };
        for path in super_paths(text) {
            let full = parent.iter().copied().chain([path.as_str()]).collect::<Vec<_>>().join("::");
            add(resolve(&modules, &full));
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

/// The strongly connected components of more than one module (Tarjan), each sorted,
/// largest first.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        components: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            let graph = self.graph;
            for w in graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    if !graph.contains_key(w) {
                        continue;
                    }
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(lw));
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(iw));
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
                    self.components.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    let mut components = t.components;
    components.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    components
}

// ---------------------------------------------------------------------------------------
// The checks on this crate
// ---------------------------------------------------------------------------------------

#[test]
fn long_files_say_why() {
    let files = sources();
    let named: Vec<(String, String)> = files.iter().map(|f| (f.path.display().to_string(), f.text.clone())).collect();
    let bad = unexplained_long_files(&named);
    let report: Vec<String> = bad
        .iter()
        .map(|(file, lines)| {
            format!("  {file}: {lines} lines, and its module doc does not say why (\"{LONG_FILE_PHRASE}\")")
        })
        .collect();
    assert!(
        bad.is_empty(),
        "files over {MAX_LINES} lines: split them along their seams, or say in the module doc why one is \
         {LONG_FILE_PHRASE}:\n{}",
        report.join("\n")
    );
}

#[test]
fn no_import_cycles() {
    let files = sources();
    let paths: BTreeMap<&str, &Path> = files.iter().map(|f| (f.module.as_str(), f.path.as_path())).collect();
    let texts: BTreeMap<String, String> = files.iter().map(|f| (f.module.clone(), f.text.clone())).collect();
    let graph = import_graph(&texts);
    let found = cycles(&graph);
    let mut report = String::new();
    for component in &found {
        report.push_str(&format!("{} files in a cycle:\n", component.len()));
        let members: BTreeSet<&String> = component.iter().collect();
        for m in component {
            let into: Vec<&str> = graph[m].iter().filter(|t| members.contains(t)).map(String::as_str).collect();
            let name = if m.is_empty() { "<crate root>" } else { m.as_str() };
            report.push_str(&format!("  {name} ({}) -> {}\n", paths[m.as_str()].display(), into.join(", ")));
        }
    }
    assert!(found.is_empty(), "{} import cycles between the files of src/:\n{report}", found.len());
}

// ---------------------------------------------------------------------------------------
// The checker itself, on small inputs
// ---------------------------------------------------------------------------------------

fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter().map(|(m, t)| (m.to_string(), t.to_string())).collect()
}

fn edges(graph: &BTreeMap<String, BTreeSet<String>>, module: &str) -> Vec<String> {
    graph[module].iter().cloned().collect()
}

#[test]
fn module_paths_of_files() {
    let cases = [
        ("lib", ""),
        ("meta", "meta"),
        ("api/mod", "api"),
        ("api/patch/json", "api::patch::json"),
        ("api/patch/mod", "api::patch"),
    ];
    for (rel, want) in cases {
        assert_eq!(module_path(rel), want, "{rel}");
    }
}

#[test]
fn paths_named_by_crate_and_super() {
    let cases: [(&str, &[&str]); 6] = [
        ("use crate::meta::Name;", &["meta::Name"]),
        ("use crate::api::{patch, rest::Write};", &["api::patch", "api::rest::Write"]),
        ("use crate::{error::Error, api::{a, b}};", &["error::Error", "api::"]),
        ("let x = crate::meta::MAX_OBJECT_DEPTH + 1;", &["meta::MAX_OBJECT_DEPTH"]),
        ("use crate::a::{b; c}", &["a"]),
        ("no paths here", &[]),
    ];
    for (text, want) in cases {
        assert_eq!(crate_paths(text), want, "{text}");
    }
    assert_eq!(super_paths("use super::{a, b}; use super::*; super::c::d(); super::super::e"), ["c::d", "super::e"]);
}

#[test]
fn edges_follow_the_rules() {
    let graph = import_graph(&files(&[
        ("", "mod a; mod b;"),
        ("a", "use crate::b::thing; use crate::a::inner::x;"),
        ("a::inner", "use super::Parent; use crate::a::Parent; use super::sibling::f;"),
        ("a::sibling", "use crate::Root;"),
        ("b", "fn thing() {}\n#[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests { use crate::a::x; }"),
        ("c", "//! Unlike crate::a, this one ...\n#[cfg(test)]\npub(crate) mod fixture;\n#[cfg(test)]\nmod tests;"),
        ("c::fixture", "use crate::a::x;"),
        ("c::tests", "use crate::a::x;"),
        ("c::tests::deeper", "use crate::a::x;"),
    ]));
    assert_eq!(edges(&graph, "a"), ["a::inner", "b"]);
    // Child → ancestor uses do not count; a sibling through `super::` does.
    assert_eq!(edges(&graph, "a::inner"), ["a::sibling"]);
    // The crate root is never a target.
    assert!(edges(&graph, "a::sibling").is_empty());
    // The test tail is not read, also with more attributes before `mod tests`.
    assert!(edges(&graph, "b").is_empty());
    // Comments are not read; test-only files are not in the graph at all.
    assert!(edges(&graph, "c").is_empty());
    for test_only in ["c::fixture", "c::tests", "c::tests::deeper"] {
        assert!(!graph.contains_key(test_only), "{test_only} is test code");
    }
    assert!(cycles(&graph).is_empty());
}

#[test]
fn cycles_are_found() {
    let graph = import_graph(&files(&[
        ("", ""),
        ("a", "use crate::b::x;"),
        ("b", "use crate::c::{y, z};"),
        ("c", "use crate::a::w;"),
        ("d", "use crate::a::w;"),
        ("e::f", "use super::g::h;"),
        ("e::g", "use crate::e::f::k;"),
        ("e", ""),
    ]));
    assert_eq!(cycles(&graph), [vec!["a", "b", "c"], vec!["e::f", "e::g"]]);
}

#[test]
fn long_files_without_a_reason_are_named() {
    let long_body = "fn f() {}\n".repeat(MAX_LINES);
    let inputs = vec![
        ("short.rs".to_string(), "//! Short.\nfn f() {}\n".to_string()),
        ("exactly.rs".to_string(), long_body.clone()),
        ("unexplained.rs".to_string(), format!("//! Long.\n{long_body}")),
        (
            "explained.rs".to_string(),
            format!("//! One parser; this file is over 800\n//! lines because ...\n{long_body}"),
        ),
    ];
    assert_eq!(unexplained_long_files(&inputs), [("unexplained.rs".to_string(), MAX_LINES + 1)]);
}
