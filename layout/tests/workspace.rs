//! The layout rules (see the crate doc) on every crate of the workspace: each package's `src/`,
//! each of its library and binary targets a crate of its own. The packages and their targets
//! come from `cargo metadata`, so a new member is checked without being named here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kustos_layout::{describe_cycles, long_files, read_sources, Crate, LONG_FILE_PHRASE, MAX_LINES};

/// A package: its `src/` folder and its targets' root files there.
struct Package {
    name: String,
    src: PathBuf,
    roots: Vec<PathBuf>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

fn packages() -> Vec<Package> {
    let root = workspace_root();
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| panic!("running cargo metadata: {e}"));
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("cargo metadata printed no JSON: {e}"));
    let mut packages = Vec::new();
    for p in meta["packages"].as_array().into_iter().flatten() {
        let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap_or_default());
        let src = manifest.parent().unwrap_or(Path::new("")).join("src");
        let roots: Vec<PathBuf> = p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| matches!(k.as_str(), Some("lib" | "bin" | "proc-macro")))
            })
            .map(|t| PathBuf::from(t["src_path"].as_str().unwrap_or_default()))
            .filter(|path| path.starts_with(&src))
            .collect();
        packages.push(Package { name: p["name"].as_str().unwrap_or_default().to_string(), src, roots });
    }
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    packages
}

/// Each package's source files and crates.
fn load() -> Vec<(Package, kustos_layout::Sources, Vec<Crate>)> {
    packages()
        .into_iter()
        .map(|p| {
            let files = read_sources(&p.src).unwrap_or_else(|e| panic!("reading {}: {e}", p.src.display()));
            let crates: Vec<Crate> = p.roots.iter().map(|r| Crate::load(&files, r)).collect();
            for c in &crates {
                assert!(c.errors.is_empty(), "{}: {}", p.name, c.errors.join("\n"));
            }
            (p, files, crates)
        })
        .collect()
}

fn shown(path: &Path) -> String {
    path.strip_prefix(workspace_root()).unwrap_or(path).display().to_string()
}

#[test]
fn every_workspace_crate_is_checked() {
    let names: BTreeSet<String> = packages().into_iter().filter(|p| !p.roots.is_empty()).map(|p| p.name).collect();
    for want in ["kustos", "kustos-apiserver", "kustos-ca", "kustos-controllers", "kustos-crds", "kustos-layout"] {
        assert!(names.contains(want), "{want} is not among the checked packages: {names:?}");
    }
}

#[test]
fn no_import_cycles() {
    let mut report = String::new();
    for (package, _, crates) in load() {
        for krate in crates {
            let graph = krate.graph();
            let found = krate.cycles();
            if !found.is_empty() {
                let root = workspace_root();
                let rel = |p: &PathBuf| p.strip_prefix(&root).unwrap_or(p).to_path_buf();
                let graph = graph.iter().map(|(f, to)| (rel(f), to.iter().map(rel).collect())).collect();
                let found: Vec<Vec<PathBuf>> = found.iter().map(|c| c.iter().map(rel).collect()).collect();
                report.push_str(&format!("{}:\n{}", package.name, describe_cycles(&graph, &found)));
            }
        }
    }
    assert!(report.is_empty(), "import cycles between the files of a crate:\n{report}");
}

#[test]
fn long_files_say_why() {
    let mut bad = Vec::new();
    for (_, files, crates) in load() {
        // A file is test code when every crate reaching it reaches it only under #[cfg(test)].
        let tests: BTreeSet<PathBuf> = files
            .keys()
            .filter(|f| {
                let reaching: Vec<&Crate> = crates.iter().filter(|c| c.reached.contains(*f)).collect();
                !reaching.is_empty() && reaching.iter().all(|c| c.test_files.contains(*f))
            })
            .cloned()
            .collect();
        for (file, lines) in long_files(&files, &tests) {
            bad.push(format!(
                "  {}: {lines} lines of non-test code, and its module doc does not say why (\"{LONG_FILE_PHRASE}\")",
                shown(&file)
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "files over {MAX_LINES} lines: split them along their seams, or say in the module doc why one is \
         {LONG_FILE_PHRASE}:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_source_file_is_compiled() {
    let mut bad = Vec::new();
    for (_, files, crates) in load() {
        let crates: Vec<&Crate> = crates.iter().collect();
        bad.extend(Crate::orphans(&crates, &files).into_iter().map(shown));
    }
    assert!(
        bad.is_empty(),
        "files under src/ no crate root declares (dead code: delete them):\n  {}",
        bad.join("\n  ")
    );
}
