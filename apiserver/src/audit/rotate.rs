//! The audit log file, rotated as upstream's (lumberjack's): what enters is lines of text,
//! what leaves is `PATH` (created 0600) and its backups.
//!
//! Before a write would take the file past `--audit-log-maxsize` megabytes (0: lumberjack's
//! default, 100), the file is renamed to `NAME-<UTC time as 2006-01-02T15-04-05.000>.EXT` beside
//! it and a new one is started; then backups beyond `--audit-log-maxbackup` (newest kept; 0:
//! all) and older than `--audit-log-maxage` days (by the time in their name; 0: no limit) are
//! removed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDateTime, Utc};

/// Lumberjack's size when none is given.
pub const DEFAULT_MAX_SIZE_MB: u64 = 100;
const TIME_FORMAT: &str = "%Y-%m-%dT%H-%M-%S%.3f";

#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub max_size_mb: u64,
    pub max_backups: usize,
    pub max_age_days: u64,
}

#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    limits: Limits,
    file: File,
    size: u64,
}

fn open(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

impl RotatingFile {
    /// Open (or create) `path` for appending; its directory is created when missing.
    pub fn open(path: &Path, limits: Limits) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile { path: path.to_path_buf(), limits, file, size })
    }

    fn max_bytes(&self) -> u64 {
        let mb = if self.limits.max_size_mb == 0 { DEFAULT_MAX_SIZE_MB } else { self.limits.max_size_mb };
        mb.saturating_mul(1024 * 1024)
    }

    /// Append `data`, rotating first when it would not fit (at `now`).
    pub fn write_at(&mut self, data: &[u8], now: DateTime<Utc>) -> std::io::Result<()> {
        if self.size > 0 && self.size + data.len() as u64 > self.max_bytes() {
            self.rotate(now)?;
        }
        self.file.write_all(data)?;
        self.size += data.len() as u64;
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }

    /// `NAME-<time>.EXT` beside the file.
    fn backup_name(&self, now: DateTime<Utc>) -> PathBuf {
        let (prefix, ext) = self.prefix_ext();
        self.path.with_file_name(format!("{prefix}-{}{ext}", now.format(TIME_FORMAT)))
    }

    fn prefix_ext(&self) -> (String, String) {
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match self.path.extension() {
            Some(ext) => {
                let ext = format!(".{}", ext.to_string_lossy());
                (name.strip_suffix(&ext).unwrap_or(&name).to_string(), ext)
            }
            None => (name, String::new()),
        }
    }

    fn rotate(&mut self, now: DateTime<Utc>) -> std::io::Result<()> {
        self.file.flush()?;
        std::fs::rename(&self.path, self.backup_name(now))?;
        self.file = open(&self.path)?;
        self.size = 0;
        self.remove_old(now);
        Ok(())
    }

    /// The backups beside the file, newest first, with their times.
    fn backups(&self) -> Vec<(NaiveDateTime, PathBuf)> {
        let (prefix, ext) = self.prefix_ext();
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut out: Vec<_> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stamp = name.strip_prefix(&prefix)?.strip_prefix('-')?.strip_suffix(ext.as_str())?;
                let time = NaiveDateTime::parse_from_str(stamp, TIME_FORMAT).ok()?;
                Some((time, e.path()))
            })
            .collect();
        out.sort_by_key(|b| std::cmp::Reverse(b.0));
        out
    }

    fn remove_old(&self, now: DateTime<Utc>) {
        let backups = self.backups();
        let cutoff = (self.limits.max_age_days > 0)
            .then(|| now.naive_utc() - chrono::Duration::days(self.limits.max_age_days.min(100_000) as i64));
        for (i, (time, path)) in backups.iter().enumerate() {
            let too_many = self.limits.max_backups > 0 && i >= self.limits.max_backups;
            let too_old = cutoff.is_some_and(|c| *time < c);
            if too_many || too_old {
                if let Err(e) = std::fs::remove_file(path) {
                    tracing::warn!(path = %path.display(), error = %e, "removing an old audit log backup failed");
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 5_000_000).unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn rotates_past_the_size_with_lumberjacks_names_and_keeps_maxbackup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let limits = Limits { max_size_mb: 1, max_backups: 2, max_age_days: 0 };
        let mut f = RotatingFile::open(&path, limits).unwrap();
        let line = vec![b'x'; 400 * 1024];
        for i in 0..8 {
            f.write_at(&line, at(i * 60)).unwrap();
        }
        f.flush().unwrap();
        // 8 writes of 400 KiB, 2 fit a 1 MiB file: 3 rotations (before writes 3, 5, 7); the newest 2 backups kept.
        assert_eq!(
            names(dir.path()),
            vec!["audit-2027-01-15T08-04-00.005.log", "audit-2027-01-15T08-06-00.005.log", "audit.log"]
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * 400 * 1024);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn removes_backups_older_than_maxage_and_appends_to_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit");
        std::fs::write(dir.path().join("audit-2020-01-01T00-00-00.000"), "old").unwrap();
        std::fs::write(dir.path().join("unrelated-2020-01-01T00-00-00.000"), "keep").unwrap();
        std::fs::write(&path, vec![b'y'; 1024 * 1024]).unwrap();
        let mut f = RotatingFile::open(&path, Limits { max_size_mb: 1, max_backups: 0, max_age_days: 30 }).unwrap();
        f.write_at(b"z\n", at(0)).unwrap();
        assert_eq!(
            names(dir.path()),
            vec!["audit", "audit-2027-01-15T08-00-00.005", "unrelated-2020-01-01T00-00-00.000"]
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"z\n");
    }
}
