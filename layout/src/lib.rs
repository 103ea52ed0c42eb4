//! The shape of a crate's `src/`, checked so that it stays a house one can find one's way in.
//!
//! What enters: a crate's source files (a map from path to text, read from disk by
//! [`read_sources`] or written out by a test) and the root files of its targets (`lib.rs`,
//! `main.rs`). What leaves: the findings, each a plain value a test prints and fails on:
//!
//! - [`long_files`]: a file with over 800 lines of non-test code whose module doc does not
//!   say why (the phrase "over 800 lines" in its `//!` lines);
//! - [`Crate::cycles`]: the cycles of the file-level import graph. The module tree is the
//!   compiler's: it is followed from the root file through `mod` declarations (`#[path]`
//!   included), parsed with `syn`. A file imports another when any path in its code names a
//!   module the other file defines: in a `use` tree or an expression, a type, a pattern, a
//!   macro's arguments; spelled `crate::`, `super::`, `self::`, through a child module
//!   (`child::x`), or through a name a `use` bound to a module (`use crate::api; api::rest::f()`).
//!   A path stands for the file defining its longest prefix that is a module. A module naming
//!   one of its ancestors does not count (a module may always see its parents), the crate
//!   root is never a target, and test code (items and files under `#[cfg(test)]`) is not read;
//! - [`Crate::orphans`]: files under `src/` no root reaches, which the compiler never sees;
//! - [`Layers::check`]: the imports ([`Crate::imports`], the crate root's items and a module's
//!   ancestors included) a layer table in markdown forbids (see [`layers`]).

pub mod layers;

pub use layers::{Layer, Layers, Violation};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::spanned::Spanned as _;
use syn::visit::Visit;

/// Lines of non-test code a source file may have before its module doc has to say why.
pub const MAX_LINES: usize = 800;
/// What such a module doc says.
pub const LONG_FILE_PHRASE: &str = "over 800 lines";

/// Source files by path.
pub type Sources = BTreeMap<PathBuf, String>;

/// Every `.rs` file under `dir`, by path.
pub fn read_sources(dir: &Path) -> std::io::Result<Sources> {
    fn walk(dir: &Path, out: &mut Sources) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(&path, out)?;
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)?;
                out.insert(path, text);
            }
        }
        Ok(())
    }
    let mut out = Sources::new();
    walk(dir, &mut out)?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Long files
// ---------------------------------------------------------------------------------------

/// The text of a file's `//!` lines, joined by single spaces.
pub fn module_doc(text: &str) -> String {
    let words: Vec<&str> =
        text.lines().filter_map(|l| l.trim_start().strip_prefix("//!")).flat_map(str::split_whitespace).collect();
    words.join(" ")
}

/// The lines of `text` outside items marked `#[cfg(test)]` (at any depth of inline modules).
/// A file that does not parse counts all its lines.
pub fn non_test_lines(text: &str) -> usize {
    let total = text.lines().count();
    let Ok(file) = syn::parse_file(text) else { return total };
    let mut test_lines = BTreeSet::new();
    fn mark(items: &[syn::Item], out: &mut BTreeSet<usize>) {
        for item in items {
            if is_test_only(item_attrs(item)) {
                let span = item.span();
                out.extend(span.start().line..=span.end().line);
            } else if let syn::Item::Mod(syn::ItemMod { content: Some((_, inner)), .. }) = item {
                mark(inner, out);
            }
        }
    }
    mark(&file.items, &mut test_lines);
    total.saturating_sub(test_lines.len())
}

/// `(file, non-test lines)` of every file of `files` over [`MAX_LINES`] whose module doc does
/// not say why. `test_files` are wholly test code and never long.
pub fn long_files(files: &Sources, test_files: &BTreeSet<PathBuf>) -> Vec<(PathBuf, usize)> {
    files
        .iter()
        .filter(|(path, _)| !test_files.contains(*path))
        .filter_map(|(path, text)| {
            let lines = non_test_lines(text);
            (lines > MAX_LINES && !module_doc(text).contains(LONG_FILE_PHRASE)).then(|| (path.clone(), lines))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The module tree
// ---------------------------------------------------------------------------------------

/// A path named in a module: where (file and module), its segments, and whether a `use`
/// named it (a `use` may name a module by one segment; other code names one by two or more).
#[derive(Debug, Clone)]
struct Reference {
    file: PathBuf,
    line: usize,
    scope: String,
    segments: Vec<String>,
}

/// One file's import of another: a path naming a module (or a root item) the other defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub file: PathBuf,
    /// The line the path is written on (1-based).
    pub line: usize,
    /// The path as spelled (`crate::api::rest`, `super::Call`).
    pub path: String,
    /// The file defining what it names.
    pub target: PathBuf,
}

/// One target's crate as the import graph reads it.
#[derive(Debug, Default)]
pub struct Crate {
    /// Module path (`api::rest`; `""` for the root) → the file defining it.
    modules: BTreeMap<String, PathBuf>,
    /// Module path → the names of its child modules.
    children: BTreeMap<String, BTreeSet<String>>,
    /// Module path → names a `use` bound there → the absolute path they stand for.
    aliases: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    references: Vec<Reference>,
    /// `#[macro_export]` macros (named at the crate root) → the module defining them.
    exported: BTreeMap<String, String>,
    /// Files reached only under `#[cfg(test)]`.
    pub test_files: BTreeSet<PathBuf>,
    /// Every file reached (test files included).
    pub reached: BTreeSet<PathBuf>,
    /// What could not be read: a file that does not parse, a `mod` whose file is missing.
    pub errors: Vec<String>,
}

/// `#[cfg(test)]` (also inside `all(...)`, where it alone decides).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = a.meta.require_list().map(|l| l.tokens.to_string()).unwrap_or_default();
            let text: String = text.split_whitespace().collect();
            text == "test" || (text.starts_with("all(") && text[4..].split([',', ')']).any(|t| t == "test"))
        }
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The value of a `#[path = "..."]` attribute.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

fn join(module: &str, name: &str) -> String {
    if module.is_empty() {
        name.to_string()
    } else {
        format!("{module}::{name}")
    }
}

impl Crate {
    /// The crate whose root file is `root`, its files taken from `files`.
    pub fn load(files: &Sources, root: &Path) -> Crate {
        let mut krate = Crate::default();
        krate.walk_file(files, root, String::new(), true, false);
        krate
    }

    /// Walk the file `path`, which defines `module`. `mod_rs`: its children's files sit in its
    /// own folder (`lib.rs`, `main.rs`, `mod.rs`), not in a folder named after it.
    fn walk_file(&mut self, files: &Sources, path: &Path, module: String, mod_rs: bool, test: bool) {
        let Some(text) = files.get(path) else {
            self.errors.push(format!("{}: module `{module}` has no file", path.display()));
            return;
        };
        if !self.reached.insert(path.to_path_buf()) {
            return;
        }
        if test {
            self.test_files.insert(path.to_path_buf());
        } else {
            self.modules.insert(module.clone(), path.to_path_buf());
        }
        let file = match syn::parse_file(text) {
            Ok(f) => f,
            Err(e) => {
                self.errors.push(format!("{}: does not parse: {e}", path.display()));
                return;
            }
        };
        let here = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let dir = if mod_rs { here.clone() } else { here.join(path.file_stem().unwrap_or_default()) };
        self.walk_items(files, path, &here, &dir, &module, &file.items, test, true);
    }

    /// `here`: the folder of the file; `dir`: where the children of `module` have their files;
    /// `top`: `items` are the file's own, not an inline module's.
    #[allow(clippy::too_many_arguments)]
    fn walk_items(
        &mut self,
        files: &Sources,
        file: &Path,
        here: &Path,
        dir: &Path,
        module: &str,
        items: &[syn::Item],
        test: bool,
        top: bool,
    ) {
        for item in items {
            let item_test = test || is_test_only(item_attrs(item));
            if let syn::Item::Mod(m) = item {
                let name = m.ident.to_string();
                let child = join(module, &name);
                if !item_test {
                    self.children.entry(module.to_string()).or_default().insert(name.clone());
                }
                match &m.content {
                    Some((_, inner)) => {
                        if !item_test {
                            self.modules.insert(child.clone(), file.to_path_buf());
                        }
                        let child_dir = match path_attr(&m.attrs) {
                            Some(p) => dir.join(p),
                            None => dir.join(&name),
                        };
                        self.walk_items(files, file, here, &child_dir, &child, inner, item_test, false);
                    }
                    None => {
                        let (path, mod_rs) = match path_attr(&m.attrs) {
                            // A `#[path]` in a file's top level is relative to the file's folder;
                            // inside an inline module, to that module's folder.
                            Some(p) => (if top { here.join(&p) } else { dir.join(&p) }, true),
                            None => {
                                let flat = dir.join(format!("{name}.rs"));
                                if files.contains_key(&flat) {
                                    (flat, false)
                                } else {
                                    (dir.join(&name).join("mod.rs"), true)
                                }
                            }
                        };
                        self.walk_file(files, &path, child, mod_rs, item_test);
                    }
                }
                continue;
            }
            if item_test {
                continue;
            }
            if let syn::Item::Macro(syn::ItemMacro { ident: Some(name), attrs, .. }) = item {
                if attrs.iter().any(|a| a.path().is_ident("macro_export")) {
                    self.exported.insert(name.to_string(), module.to_string());
                }
            }
            let mut refs = Refs::default();
            refs.visit_item(item);
            for (alias, target) in refs.aliases {
                self.aliases.entry(module.to_string()).or_default().insert(alias, target);
            }
            for (segments, line) in refs.paths {
                self.references.push(Reference { file: file.to_path_buf(), line, scope: module.to_string(), segments });
            }
        }
    }

    /// The absolute module path (`crate::` left off) `segments` stands for, named in `scope`,
    /// if it starts in this crate.
    fn absolute(&self, scope: &str, segments: &[String]) -> Option<Vec<String>> {
        self.absolute_via(scope, segments, true)
    }

    /// [`Crate::absolute`]; `follow_alias`: a first segment may be a name a `use` bound
    /// (only once: an alias bound to another alias is not followed).
    fn absolute_via(&self, scope: &str, segments: &[String], follow_alias: bool) -> Option<Vec<String>> {
        let mut at: Vec<String> =
            if scope.is_empty() { Vec::new() } else { scope.split("::").map(String::from).collect() };
        let first = segments.first()?;
        let mut rest = &segments[1..];
        match first.as_str() {
            "crate" => at.clear(),
            "self" | "super" => {
                if first == "super" {
                    at.pop()?;
                }
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop()?;
                    rest = &rest[1..];
                }
            }
            name if self.children.get(scope).is_some_and(|c| c.contains(name)) => rest = segments,
            name if follow_alias => {
                let target = self.aliases.get(scope)?.get(name)?;
                at = self.absolute_via(scope, target, false)?;
            }
            _ => return None,
        }
        at.extend(rest.iter().cloned());
        Some(at)
    }

    /// The module among those defined defining `path`: its longest prefix that is one (the
    /// crate root never).
    fn resolve(&self, path: &[String]) -> Option<&str> {
        (1..=path.len()).rev().find_map(|n| self.modules.get_key_value(&path[..n].join("::")).map(|(k, _)| k.as_str()))
    }

    /// Every reference of each file's non-test code to a module defined in another file,
    /// resolved: the module it names, and whether that module is an ancestor of the naming one.
    /// An item of the crate root (`crate::AppState`, `super::X` in a top-level module) names
    /// the root, except a `#[macro_export]` macro, which names the module defining it.
    fn resolved(&self) -> impl Iterator<Item = (&Reference, &str, bool)> {
        self.references.iter().filter_map(move |r| {
            let path = self.absolute(&r.scope, &r.segments)?;
            let target = match self.resolve(&path) {
                Some(module) => module,
                None => match path.as_slice() {
                    [name] => self.exported.get(name).map_or("", String::as_str),
                    _ => "",
                },
            };
            let ancestor = target.is_empty() || r.scope == target || r.scope.starts_with(&format!("{target}::"));
            (self.modules.get(target)? != &r.file).then_some((r, target, ancestor))
        })
    }

    /// Which files each file imports.
    pub fn graph(&self) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
        let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> =
            self.modules.values().map(|f| (f.clone(), BTreeSet::new())).collect();
        for (r, target, ancestor) in self.resolved() {
            if !ancestor {
                graph.entry(r.file.clone()).or_default().insert(self.modules[target].clone());
            }
        }
        graph
    }

    /// Every import of one file by another, ancestors and the crate root included (what the
    /// layer rules read): where it is written, what it spells and the file it reaches.
    pub fn imports(&self) -> Vec<Import> {
        self.resolved()
            .map(|(r, target, _)| Import {
                file: r.file.clone(),
                line: r.line,
                path: r.segments.join("::"),
                target: self.modules[target].clone(),
            })
            .collect()
    }

    /// The import cycles: strongly connected components of more than one file, each sorted,
    /// largest first.
    pub fn cycles(&self) -> Vec<Vec<PathBuf>> {
        cycles(&self.graph())
    }

    /// The files of `files` under `src` this crate never reaches.
    pub fn orphans<'a>(crates: &[&Crate], files: &'a Sources) -> Vec<&'a Path> {
        files.keys().filter(|p| !crates.iter().any(|c| c.reached.contains(*p))).map(PathBuf::as_path).collect()
    }
}

/// The paths an item names, and the names its `use`s bind to a path.
#[derive(Default)]
struct Refs {
    /// Each path's segments and the line it starts on.
    paths: Vec<(Vec<String>, usize)>,
    aliases: Vec<(String, Vec<String>)>,
}

impl Refs {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let mut path = prefix.clone();
                if name != "self" {
                    path.push(name);
                }
                if let Some(last) = path.last() {
                    self.aliases.push((last.clone(), path.clone()));
                }
                self.paths.push((path, n.ident.span().start().line));
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.aliases.push((r.rename.to_string(), path.clone()));
                self.paths.push((path, r.ident.span().start().line));
            }
            syn::UseTree::Glob(g) => self.paths.push((prefix.clone(), g.star_token.span.start().line)),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// Paths in a macro's tokens: runs of `ident (:: ident)*` of two or more segments
    /// (`$crate::x` reads as `crate::x`).
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(id) => {
                    let mut path = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' || a.spacing() != proc_macro2::Spacing::Joint {
                            break;
                        }
                        path.push(next.to_string());
                        j += 3;
                    }
                    let after_colons = i > 1
                        && matches!((&tokens[i - 2], &tokens[i - 1]), (TokenTree::Punct(a), TokenTree::Punct(b))
                            if a.as_char() == ':' && b.as_char() == ':');
                    if path.len() > 1 && !after_colons {
                        self.paths.push((path, id.span().start().line));
                    }
                    i = j;
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for Refs {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_none() {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            self.paths.push((p.segments.iter().map(|s| s.ident.to_string()).collect(), p.span().start().line));
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // A module inside a function body: not part of the file-level graph.
    }
}

// ---------------------------------------------------------------------------------------
// Cycles
// ---------------------------------------------------------------------------------------

/// The strongly connected components of more than one node (Tarjan), each sorted, largest first.
pub fn cycles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct Tarjan<'g, N> {
        graph: &'g BTreeMap<N, BTreeSet<N>>,
        index: BTreeMap<&'g N, usize>,
        low: BTreeMap<&'g N, usize>,
        stack: Vec<&'g N>,
        on_stack: BTreeSet<&'g N>,
        components: Vec<Vec<N>>,
    }
    impl<'g, N: Ord + Clone> Tarjan<'g, N> {
        fn visit(&mut self, v: &'g N) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            let graph = self.graph;
            for w in graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    let Some((w, _)) = graph.get_key_value(w) else { continue };
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
                    component.push(w.clone());
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
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    let mut components = t.components;
    components.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    components
}

/// A cycle report: each file of each component and the files of the component it imports.
pub fn describe_cycles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>, found: &[Vec<PathBuf>]) -> String {
    let mut report = String::new();
    for component in found {
        report.push_str(&format!("{} files in a cycle:\n", component.len()));
        let members: BTreeSet<&PathBuf> = component.iter().collect();
        for f in component {
            let into: Vec<String> =
                graph[f].iter().filter(|t| members.contains(t)).map(|t| t.display().to_string()).collect();
            report.push_str(&format!("  {} -> {}\n", f.display(), into.join(", ")));
        }
    }
    report
}

#[cfg(test)]
mod tests;
