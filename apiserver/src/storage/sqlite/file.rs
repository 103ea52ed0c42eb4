//! The database file and the throwaway directory of `open_in_memory`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storage::{Error, Result};

/// Create the database file, empty and 0600, unless it exists (an existing file is left as
/// it is). SQLite would create it with the process umask; it creates the `-wal` and `-shm`
/// files with the database file's mode, so all three stay private.
pub(super) fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::Backend(format!("creating {}: {e}", path.display()))),
    }
}

pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new() -> Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let name =
            format!("kustos-sqlite-{}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed), nanos);
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)
            .map_err(|e| Error::Backend(format!("creating temporary directory {}: {e}", path.display())))?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
