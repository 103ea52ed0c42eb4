//! The standalone data directory's own permissions.
//!
//! `DIR` holds the SQLite store (every Secret, bootstrap-token secrets included), the PKI and
//! the admin kubeconfig, so it is private to the user running kustos:
//!
//! | path | mode |
//! | --- | --- |
//! | `DIR` | 0700 |
//! | `DIR/kustos.db`, `kustos.db-wal`, `kustos.db-shm` (every `kustos.db*`) | 0600 |
//!
//! A new directory is created 0700; the store creates its database file 0600 before SQLite
//! opens it, and SQLite gives the `-wal` and `-shm` files the database file's mode. An
//! existing install whose directory or store files others can read or write is tightened at
//! start, and the start logs one line naming what was changed. (`DIR/pki/` and its keys are
//! handled by [`crate::pki`].)

use std::fs;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

/// Mode of the data directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the store's files (`kustos.db*`).
pub const STORE_FILE_MODE: u32 = 0o600;
/// Name prefix of the store's files: the database and SQLite's `-wal`, `-shm` and `-journal`.
pub const STORE_FILE_PREFIX: &str = "kustos.db";

/// The permission bits `mode` must be narrowed to so that it grants nothing beyond `limit`,
/// or `None` when it already does. Only bits are taken away, never added.
pub fn narrowed(mode: u32, limit: u32) -> Option<u32> {
    let bits = mode & 0o7777;
    let kept = bits & limit;
    (kept != bits).then_some(kept)
}

/// Whether a directory entry named `name` is one of the store's files.
pub fn is_store_file(name: &str) -> bool {
    name.starts_with(STORE_FILE_PREFIX)
}

/// Create `dir` (0700) when absent, then take away from it and from every existing
/// `kustos.db*` file in it what others may do. Returns the paths changed, after logging them
/// in one line.
pub fn secure(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    match fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    let meta = fs::metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let mut changed = Vec::new();
    if narrow(dir, meta.permissions().mode(), DIR_MODE)? {
        changed.push(dir.to_path_buf());
    }
    let entries = fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    let mut store_files = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if entry.file_name().to_str().is_some_and(is_store_file) {
            store_files.push(entry.path());
        }
    }
    store_files.sort();
    for path in store_files {
        // Not followed: a link named kustos.db* is left to whoever put it there.
        let meta = fs::symlink_metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        if meta.is_file() && narrow(&path, meta.permissions().mode(), STORE_FILE_MODE)? {
            changed.push(path);
        }
    }
    if !changed.is_empty() {
        let paths: Vec<String> = changed.iter().map(|p| p.display().to_string()).collect();
        tracing::warn!(
            paths = %paths.join(","),
            "data directory was open to other users; restricted it to 0700 and its store files to 0600"
        );
    }
    Ok(changed)
}

/// Set `path`'s mode to what [`narrowed`] says, if anything; whether it changed.
fn narrow(path: &Path, mode: u32, limit: u32) -> anyhow::Result<bool> {
    let Some(new) = narrowed(mode, limit) else { return Ok(false) };
    fs::set_permissions(path, fs::Permissions::from_mode(new))
        .with_context(|| format!("restricting the permissions of {}", path.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).expect("metadata").permissions().mode() & 0o7777
    }

    #[test]
    fn narrowed_only_takes_bits_away() {
        let cases: &[(u32, u32, Option<u32>)] = &[
            (0o755, DIR_MODE, Some(0o700)),
            (0o700, DIR_MODE, None),
            (0o500, DIR_MODE, None),
            (0o777, DIR_MODE, Some(0o700)),
            (0o40755, DIR_MODE, Some(0o700)),
            (0o644, STORE_FILE_MODE, Some(0o600)),
            (0o666, STORE_FILE_MODE, Some(0o600)),
            (0o600, STORE_FILE_MODE, None),
            (0o400, STORE_FILE_MODE, None),
            (0o100640, STORE_FILE_MODE, Some(0o600)),
            (0o4600, STORE_FILE_MODE, Some(0o600)),
            (0o700, STORE_FILE_MODE, Some(0o600)),
        ];
        for &(mode, limit, want) in cases {
            assert_eq!(narrowed(mode, limit), want, "{mode:o} within {limit:o}");
        }
    }

    #[test]
    fn store_files_are_the_database_and_its_sqlite_companions() {
        for name in ["kustos.db", "kustos.db-wal", "kustos.db-shm", "kustos.db-journal"] {
            assert!(is_store_file(name), "{name}");
        }
        for name in ["admin.kubeconfig", "pki", "other.db", "kustos", ".kustos.db"] {
            assert!(!is_store_file(name), "{name}");
        }
    }

    #[test]
    fn a_new_dir_is_private_and_nothing_is_reported() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a").join("data");
        assert_eq!(secure(&dir).expect("secure"), Vec::<PathBuf>::new());
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn an_open_install_is_tightened_and_other_files_are_left_alone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        fs::create_dir(&dir).expect("mkdir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        for (name, m) in [("kustos.db", 0o644), ("kustos.db-wal", 0o664), ("kustos.db-shm", 0o600), ("notes", 0o644)] {
            fs::write(dir.join(name), b"x").expect("write");
            fs::set_permissions(dir.join(name), fs::Permissions::from_mode(m)).expect("chmod");
        }
        let changed = secure(&dir).expect("secure");
        assert_eq!(changed, vec![dir.clone(), dir.join("kustos.db"), dir.join("kustos.db-wal")]);
        assert_eq!(mode(&dir), 0o700);
        for name in ["kustos.db", "kustos.db-wal", "kustos.db-shm"] {
            assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
        }
        assert_eq!(mode(&dir.join("notes")), 0o644);
        assert_eq!(secure(&dir).expect("secure again"), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_file_where_the_dir_should_be_is_an_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("data");
        fs::write(&path, b"x").expect("write");
        let err = secure(&path).expect_err("not a directory");
        assert!(err.to_string().contains("is not a directory"), "{err}");
    }
}
