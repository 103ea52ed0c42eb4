//! The signer's key set from a data directory's service-account keys (`DIR/pki`: `sa.key`,
//! `sa-next.key`, `sa-keys.json`; see `pki::sa_keys`), followed without a restart.
//!
//! In: the files, and the public keys of `--legacy-key-file`s. Out: a [`KeySet`] per call,
//! read again only when one of the three files changed (its inode, size or modification time:
//! every writer replaces them by renaming a new file over them), so the first call after a
//! `kustos sa-key rotate` or `revoke` step already sees it. A key set that does not load is
//! reported (once per reason) and the last one that did keeps being served; when none ever
//! did, the call fails.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context as _;
use kustos_ca::jwt::{self, PublicKey, SigningKey};
use kustos_ca::KeyPair;

use super::service::{KeySet, KeySetSource};
use super::signer_metrics::SignerMetrics;
use crate::pki::sa_keys;

/// Identity of a file's contents: inode, size, modification time (None: it does not exist).
type Stamp = Option<(u64, u64, i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

fn stamps(pki: &Path) -> [Stamp; 3] {
    [sa_keys::SIGNING_KEY, sa_keys::STATE_FILE, sa_keys::NEXT_KEY].map(|name| stamp(&pki.join(name)))
}

/// Read the key set of `pki` (`sa.key` first, then `sa-keys.json`, as `sa_keys::load`).
pub fn load(pki: &Path, legacy: &[PublicKey]) -> anyhow::Result<KeySet> {
    let loaded = sa_keys::load(pki)?;
    let signing = SigningKey::from_pem(&loaded.signing_pem)
        .with_context(|| format!("{} does not load", pki.join(sa_keys::SIGNING_KEY).display()))?;
    let next = match std::fs::read_to_string(pki.join(sa_keys::NEXT_KEY)) {
        Ok(pem) => KeyPair::from_pem(&pem).ok().and_then(|k| PublicKey::from_key_pair(&k).ok()),
        Err(_) => None,
    };
    let mut retired = Vec::new();
    for k in &loaded.state.retired {
        let key = jwt::public_keys_from_pem(&k.public_key)
            .ok()
            .and_then(|keys| keys.into_iter().next())
            .with_context(|| format!("the retired key {} of {} does not load", k.kid, sa_keys::STATE_FILE))?;
        retired.push((k.clone(), key));
    }
    Ok(KeySet { signing: Arc::new(signing), next, retired, legacy: legacy.to_vec(), loaded_at: SystemTime::now() })
}

/// A data directory's key set, read again when it changes.
pub struct DirKeys {
    pki: PathBuf,
    legacy: Vec<PublicKey>,
    cached: Mutex<Option<([Stamp; 3], Arc<KeySet>)>>,
    reported: Mutex<Option<String>>,
    metrics: Arc<SignerMetrics>,
}

impl DirKeys {
    /// The key set of `pki` (which must load now), with the `legacy` keys.
    pub fn open(pki: PathBuf, legacy: Vec<PublicKey>, metrics: Arc<SignerMetrics>) -> anyhow::Result<Self> {
        let keys = DirKeys { pki, legacy, cached: Mutex::new(None), reported: Mutex::new(None), metrics };
        keys.reload().map_err(anyhow::Error::msg)?;
        Ok(keys)
    }

    fn reload(&self) -> Result<Arc<KeySet>, String> {
        let before = stamps(&self.pki);
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, set)) = cached.as_ref() {
            if *s == before {
                return Ok(set.clone());
            }
        }
        match load(&self.pki, &self.legacy) {
            Ok(set) => {
                let set = Arc::new(set);
                if let Some((_, old)) = cached.as_ref() {
                    if old.signing.public_key() != set.signing.public_key() {
                        tracing::info!(kid = %set.signing.public_key().key_id(), "a new service-account key signs");
                    }
                }
                *cached = Some((before, set.clone()));
                if self.reported.lock().unwrap_or_else(|e| e.into_inner()).take().is_some() {
                    tracing::info!(dir = %self.pki.display(), "the service-account keys load again");
                }
                Ok(set)
            }
            Err(e) => {
                let msg = format!("{e:#}");
                self.metrics.load_failed();
                let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
                if reported.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(dir = %self.pki.display(), error = %msg, "the service-account keys do not load; serving the keys last loaded");
                    *reported = Some(msg.clone());
                }
                match cached.as_ref() {
                    Some((_, set)) => Ok(set.clone()),
                    None => Err(msg),
                }
            }
        }
    }
}

impl KeySetSource for DirKeys {
    fn current(&self) -> Result<Arc<KeySet>, String> {
        self.reload()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chrono::Utc;

    fn pki() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        crate::pki::ensure_sa_keys(dir.path()).unwrap();
        (dir, pki)
    }

    #[test]
    fn follows_a_rotation_and_a_revocation_from_the_next_call() {
        let (_dir, pki) = pki();
        let keys = DirKeys::open(pki.clone(), vec![], Arc::new(SignerMetrics::default())).unwrap();
        let first = keys.current().unwrap();
        let old = first.signing.public_key().key_id().to_string();
        assert!(Arc::ptr_eq(&first, &keys.current().unwrap()), "unchanged files are not read again");
        let (pem, new) = sa_keys::target_key(&pki, None).unwrap();
        sa_keys::run(&pki, &pem, &new, Utc::now(), |_| {}).unwrap();
        let after = keys.current().unwrap();
        assert_eq!(after.signing.public_key().key_id(), new);
        assert_eq!(after.retired.iter().map(|(k, _)| k.kid.as_str()).collect::<Vec<_>>(), [old.as_str()]);
        let now = Utc::now();
        let (served, _) = super::super::service::served_keys(&after, 3600, now);
        assert!(served.iter().any(|k| k.key.key_id() == old), "the retired key verifies");
        sa_keys::update_state(&pki, |s| sa_keys::revoke(s, &old, &new, None, now) == Ok(true)).unwrap();
        let revoked = keys.current().unwrap();
        let (served, _) = super::super::service::served_keys(&revoked, 3600, now);
        assert!(!served.iter().any(|k| k.key.key_id() == old), "a revoked key is not served");
    }

    #[test]
    fn a_broken_key_set_keeps_the_last_one_and_counts_the_failure() {
        let (_dir, pki) = pki();
        let metrics = Arc::new(SignerMetrics::default());
        let keys = DirKeys::open(pki.clone(), vec![], metrics.clone()).unwrap();
        let kid = keys.current().unwrap().signing.public_key().key_id().to_string();
        std::fs::write(pki.join(sa_keys::STATE_FILE), "{not json").unwrap();
        assert_eq!(keys.current().unwrap().signing.public_key().key_id(), kid);
        assert!(metrics.encode().contains("kustos_sa_signer_key_set_load_errors_total 1"), "{}", metrics.encode());
        // Without a key set that ever loaded, opening fails.
        let err = DirKeys::open(pki.clone(), vec![], metrics).err().unwrap();
        assert!(format!("{err:#}").contains("sa-keys.json"), "{err:#}");
    }
}
