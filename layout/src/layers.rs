//! The layers of a crate's `src/`, read from a markdown table, and the imports that break them.
//!
//! What enters: a markdown document holding the table, and a crate's imports
//! ([`Crate::imports`](crate::Crate::imports)) with the folder they are relative to. What
//! leaves: the layers ([`Layers::parse`], or the table's faults), the files no layer holds
//! ([`Layers::unlayered`]) and the imports the table forbids ([`Layers::check`]), each with
//! its file, line, path as spelled and the forbidden edge.
//!
//! The table is the one whose header row has the columns `Layer`, `What it is` and
//! `May import`. A row's `Layer` cell names, in backquotes, the folders (`wire/`) and files
//! (`lib.rs`) of the layer, relative to `src/`; a file belongs to the layer naming its
//! longest matching path, so a file may be named apart from its folder's layer
//! (`authn/impersonation.rs` above `authn/`). A row's `May import` cell names, in backquotes,
//! the layers below it, each by one of its paths; a layer may import itself, the layers it
//! names and, through them, everything those may import. `*` in the cell lets a layer import
//! every other (the crate root, which wires the layers together); it is left out of the
//! order, so a layer below may still name it (`AppState`, the one name imported from the
//! top). The table must be an order: a layer reaching itself through what it may import is a
//! fault, as is a name no row has.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::Import;

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Its folders (ending in `/`) and files, relative to `src/`.
    pub paths: Vec<String>,
    /// The layers its `May import` cell names (indices into [`Layers::layers`]).
    pub may_import: Vec<usize>,
    /// `*`: it may import every layer.
    pub any: bool,
}

impl Layer {
    /// The name the messages give it: its first path.
    pub fn name(&self) -> &str {
        self.paths.first().map_or("", String::as_str)
    }
}

/// The table, and what each layer may reach.
#[derive(Debug, Clone)]
pub struct Layers {
    pub layers: Vec<Layer>,
    /// Per layer: itself and every layer its `May import` reaches.
    allowed: Vec<BTreeSet<usize>>,
}

/// An import the table forbids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The importing file, relative to `src/`.
    pub file: PathBuf,
    pub line: usize,
    /// The path as spelled.
    pub path: String,
    /// The file it reaches, relative to `src/`.
    pub target: PathBuf,
    /// The layers of the two files (their names).
    pub from: String,
    pub to: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: `{}` reaches {}: {} may not import {}",
            self.file.display(),
            self.line,
            self.path,
            self.target.display(),
            self.from,
            self.to
        )
    }
}

/// The backquoted words of a table cell.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

/// The cells of a table row (`| a | b |`).
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

impl Layers {
    /// The layer table of `markdown`, or what is wrong with it.
    pub fn parse(markdown: &str) -> Result<Layers, String> {
        let lines: Vec<&str> = markdown.lines().collect();
        let header = lines
            .iter()
            .position(|l| {
                let c = cells(l);
                l.trim_start().starts_with('|')
                    && c.first().is_some_and(|h| h == "Layer")
                    && c.iter().any(|h| h == "May import")
            })
            .ok_or("no table with the columns `Layer` and `May import`")?;
        let head = cells(lines[header]);
        let may_col = head.iter().position(|h| h == "May import").unwrap_or(0);
        let rows: Vec<(usize, Vec<String>)> = lines[header + 2..]
            .iter()
            .enumerate()
            .take_while(|(_, l)| l.trim_start().starts_with('|'))
            .map(|(i, l)| (header + 3 + i, cells(l)))
            .collect();
        let mut names: Vec<(Vec<String>, Vec<String>, usize)> = Vec::new();
        let mut seen = BTreeSet::new();
        for (line, row) in &rows {
            let paths = quoted(row.first().map_or("", String::as_str));
            if paths.is_empty() {
                return Err(format!("line {line}: a layer with no path"));
            }
            for p in &paths {
                if !seen.insert(p.clone()) {
                    return Err(format!("line {line}: `{p}` is in two layers"));
                }
            }
            let may = quoted(row.get(may_col).map_or("", String::as_str));
            names.push((paths, may, *line));
        }
        let index = |name: &str| names.iter().position(|(paths, _, _)| paths.iter().any(|p| p == name));
        let mut layers = Vec::new();
        for (paths, may, line) in &names {
            let mut may_import = Vec::new();
            for m in may.iter().filter(|m| *m != "*") {
                may_import.push(index(m).ok_or_else(|| format!("line {line}: `{m}` names no layer"))?);
            }
            layers.push(Layer { paths: paths.clone(), may_import, any: may.iter().any(|m| m == "*") });
        }
        let mut allowed = Vec::new();
        for (i, layer) in layers.iter().enumerate() {
            let mut reach = BTreeSet::new();
            let mut todo: Vec<usize> = layer.may_import.clone();
            while let Some(j) = todo.pop() {
                if reach.insert(j) {
                    todo.extend(&layers[j].may_import);
                }
            }
            if reach.contains(&i) {
                return Err(format!("`{}` may import itself through the layers it names: not an order", layer.name()));
            }
            reach.insert(i);
            allowed.push(reach);
        }
        Ok(Layers { layers, allowed })
    }

    /// The layer of `file` (relative to `src/`): the one naming its longest matching path.
    pub fn layer_of(&self, file: &Path) -> Option<usize> {
        let file = file.to_string_lossy().replace('\\', "/");
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.paths.iter().map(move |p| (i, p)))
            .filter(|(_, p)| if p.ends_with('/') { file.starts_with(p.as_str()) } else { file == **p })
            .max_by_key(|(_, p)| p.len())
            .map(|(i, _)| i)
    }

    /// Whether a file of layer `from` may import one of layer `to`.
    pub fn allows(&self, from: usize, to: usize) -> bool {
        self.layers.get(from).is_some_and(|l| l.any) || self.allowed.get(from).is_some_and(|a| a.contains(&to))
    }

    /// The files of `files` (relative to `src/`) no layer holds.
    pub fn unlayered<'a>(&self, files: impl IntoIterator<Item = &'a Path>) -> Vec<PathBuf> {
        files.into_iter().filter(|f| self.layer_of(f).is_none()).map(Path::to_path_buf).collect()
    }

    /// The imports the table forbids, their files made relative to `src`. An import from or
    /// into a file no layer holds is not judged here ([`Layers::unlayered`] reports it).
    pub fn check(&self, src: &Path, imports: &[Import]) -> Vec<Violation> {
        let rel = |p: &Path| p.strip_prefix(src).unwrap_or(p).to_path_buf();
        let mut out = Vec::new();
        for i in imports {
            let (file, target) = (rel(&i.file), rel(&i.target));
            let (Some(from), Some(to)) = (self.layer_of(&file), self.layer_of(&target)) else { continue };
            if !self.allows(from, to) {
                out.push(Violation {
                    file,
                    line: i.line,
                    path: i.path.clone(),
                    target,
                    from: self.layers[from].name().to_string(),
                    to: self.layers[to].name().to_string(),
                });
            }
        }
        out.sort_by(|a, b| (&a.file, a.line, &a.path).cmp(&(&b.file, b.line, &b.path)));
        out.dedup();
        out
    }
}
