//! The database file, its lock, and the throwaway directory of `open_in_memory`.

use std::fs::File;
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

/// The lock file of the database at `db`: `<db>.lock` (`kustos.db.lock`).
fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Take the database's lock file (created 0600 when absent), exclusively, for as long as the
/// returned file is open: one process writes a store. Two writers would each count the
/// revisions from what they read at start, answer reads from what they wrote themselves and
/// tell their watchers only of their own writes. A store in use is refused at once, naming the
/// file. The lock is `flock`'s, released by the kernel when the process ends however it ends;
/// it is apart from SQLite's own locks on the database file, which it leaves alone.
pub(super) fn lock_exclusive(db: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = lock_path(db);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::Backend(format!("opening {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Backend(format!(
            "{} is in use: another process holds {} (a kustos server, or `kustos storage migrate`, on this data \
             dir); stop it first",
            db.display(),
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::Backend(format!("locking {}: {e}", path.display()))),
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
