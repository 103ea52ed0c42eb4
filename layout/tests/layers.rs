//! The apiserver's layers: the layer table of docs/ARCHITECTURE.md against the imports of
//! every non-test file of `apiserver/src` (see `kustos_layout::layers` for how the table is
//! read). A file importing a layer the table does not allow fails, named by file, line, path
//! and edge, unless the edge is in [`KNOWN`]; an entry of [`KNOWN`] no import needs any more
//! fails too, so the list only shrinks.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kustos_layout::{read_sources, Crate, Layers};

/// Known edges against the table, being taken out: (file under `apiserver/src`, the layer it
/// may not import, why it still does). Keep it as short as the code allows.
const KNOWN: &[(&str, &str, &str)] = &[];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

fn table() -> Layers {
    let path = workspace_root().join("docs/ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    Layers::parse(&text).unwrap_or_else(|e| panic!("the layer table of docs/ARCHITECTURE.md: {e}"))
}

/// The apiserver crate, read from `apiserver/src`.
fn apiserver() -> (PathBuf, Crate) {
    let src = workspace_root().join("apiserver/src");
    let files = read_sources(&src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
    let krate = Crate::load(&files, &src.join("lib.rs"));
    assert!(krate.errors.is_empty(), "{}", krate.errors.join("\n"));
    (src, krate)
}

#[test]
fn apiserver_imports_follow_the_layer_table() {
    let layers = table();
    let (src, krate) = apiserver();
    let names: BTreeSet<&str> = layers.layers.iter().map(|l| l.name()).collect();
    for (file, to, _) in KNOWN {
        assert!(names.contains(to), "KNOWN names `{to}`, which is no layer's name");
        assert!(src.join(file).exists(), "KNOWN names {file}, which does not exist");
    }
    let found = layers.check(&src, &krate.imports());
    let known = |v: &kustos_layout::Violation| KNOWN.iter().any(|(f, to, _)| Path::new(f) == v.file && *to == v.to);
    let bad: Vec<String> = found.iter().filter(|v| !known(v)).map(ToString::to_string).collect();
    assert!(
        bad.is_empty(),
        "imports the layer table of docs/ARCHITECTURE.md does not allow (move the code to the layer it \
         belongs to, or the helper it needs down):\n  {}",
        bad.join("\n  ")
    );
    let stale: Vec<String> = KNOWN
        .iter()
        .filter(|(f, to, _)| !found.iter().any(|v| Path::new(f) == v.file && *to == v.to))
        .map(|(f, to, why)| format!("{f} -> {to} ({why})"))
        .collect();
    assert!(stale.is_empty(), "KNOWN edges no file has any more: delete them from KNOWN:\n  {}", stale.join("\n  "));
}

#[test]
fn every_apiserver_file_has_a_layer() {
    let layers = table();
    let (src, krate) = apiserver();
    let files: Vec<PathBuf> = krate
        .reached
        .iter()
        .filter(|f| !krate.test_files.contains(*f))
        .map(|f| f.strip_prefix(&src).unwrap_or(f).to_path_buf())
        .collect();
    let bad = layers.unlayered(files.iter().map(PathBuf::as_path));
    assert!(
        bad.is_empty(),
        "files of apiserver/src no row of the layer table in docs/ARCHITECTURE.md holds:\n  {}",
        bad.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join("\n  ")
    );
}
