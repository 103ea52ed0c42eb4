//! Several apiservers on one etcd share one PKI: the cluster CA (and a CA rotation's files)
//! and the service-account keys. Each follows one sealed record in etcd.
//!
//! | where | what |
//! | --- | --- |
//! | `DIR/pki/sync.key` | 32 random bytes, base64 (0600): seals the record; the same in every apiserver's directory of a cluster (copied with `pki/`) |
//! | `DIR/pki/sync.json` | the SHA-256 of each shared file as this directory and the record last agreed on: the base of the merge |
//! | etcd `<prefix>/kustos.dev/pki.sealed` | the shared files, sealed with AES-256-GCM under `sync.key` (etcd and its backups never hold a private key in clear) |
//!
//! The shared files are [`SHARED`]; each apiserver's serving certificate and admin kubeconfig
//! stay its own. Every reload interval an apiserver reads its shared files and the record and
//! merges them file by file against the base ([`plan`]): a file changed only here is pushed
//! (a `kustos ca rotate` or `kustos sa-key rotate` run on this directory, the server's own
//! pruning), one changed only in the record is pulled, one changed on both sides takes the
//! record's content and the local change is reported (two commands at once on two
//! directories), except `sa-keys.json`, which keeps the retired keys of both. The push is a compare-and-swap on the record's revision and comes first;
//! only once it holds are pulled files written, so a lost race changes nothing here.
//!
//! Pulled files are written in the order a rotation writes them ([`SHARED`]), removals after
//! writes and `rotation.json` last; and a directory is read in the opposite order, twice
//! until two reads agree. Between two writes, this server and the record hold a state some
//! rotation step left, the states the rotation is built to work in. After a pull the
//! directory's own files follow ([`rotation::Goal::Follow`]): the serving certificate is
//! re-issued from the signing CA with this apiserver's own names, chained while a switched
//! rotation lasts, and the admin kubeconfig follows the trust bundle.
//!
//! A directory that has not agreed with the record yet (a new apiserver whose `pki/` was
//! copied from another, or a fresh directory given only `sync.key`) takes the record's files.
//! A record that does not open with this `sync.key` stops the start: that apiserver belongs
//! to another cluster's PKI.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Weak};

use anyhow::{bail, Context as _};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use chrono::Utc;
use ring::aead;
use ring::rand::{SecureRandom as _, SystemRandom};
use serde::{Deserialize, Serialize};

use super::rotation::{self, Goal, NewCa, Paths};
use super::{read_optional, restrict_key_file, sa_keys, write_atomic, write_private, write_public};
use crate::storage::{self, Storage};
use crate::AppState;

/// The record's key in the store (under `--etcd-prefix` in etcd). Not a resource's key: a
/// resource's plural cannot hold a dot.
pub const RECORD_KEY: &str = "/registry/kustos.dev/pki.sealed";
pub const SEAL_KEY_FILE: &str = "sync.key";
pub const BASE_FILE: &str = "sync.json";
/// Reads of the directory until two agree.
const STABLE_READS: usize = 5;

/// A file every apiserver of the cluster shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedFile {
    pub name: &'static str,
    /// A private key: written 0600.
    pub private: bool,
}

const fn shared(name: &'static str, private: bool) -> SharedFile {
    SharedFile { name, private }
}

/// The shared files, in the order changes to them are made: a rotation's new CA before the
/// bundle that trusts it, the bundle before the key that signs with it, the retired
/// service-account keys before the key that replaces them, `rotation.json` last.
pub const SHARED: &[SharedFile] = &[
    shared(rotation::NEXT_KEY, true),
    shared(rotation::NEXT_CERT, false),
    shared(rotation::CROSS_CERT, false),
    shared("ca.crt", false),
    shared("ca.key", true),
    shared(sa_keys::NEXT_KEY, true),
    shared(sa_keys::STATE_FILE, false),
    shared(sa_keys::SIGNING_KEY, true),
    shared(sa_keys::SIGNING_PUB, false),
    shared(rotation::STATE_FILE, false),
];

/// File name → contents.
pub type Files = BTreeMap<String, Vec<u8>>;
/// File name → SHA-256 (hex).
pub type Hashes = BTreeMap<String, String>;

pub fn hashes(files: &Files) -> Hashes {
    files.iter().map(|(name, bytes)| (name.clone(), kustos_ca::fingerprint(bytes))).collect()
}

/// What one merge does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Changes to this directory, in the order to make them: contents to write, or `None`
    /// to remove the file.
    pub local: Vec<(&'static str, Option<Vec<u8>>)>,
    /// The record's new contents, when it changes.
    pub push: Option<Files>,
    /// Files changed both here and in the record since the base (the record's kept).
    pub conflicts: Vec<&'static str>,
    /// What both sides hold afterwards: the next base.
    pub agreed: Hashes,
}

/// Merge this directory's shared files with the record's, file by file, against the base
/// (`None`: this directory never agreed with the record; `remote` `None`: there is no record).
pub fn plan(local: &Files, base: Option<&Hashes>, remote: Option<&Files>) -> Plan {
    let Some(remote) = remote else {
        return Plan { push: (!local.is_empty()).then(|| local.clone()), agreed: hashes(local), ..Plan::default() };
    };
    let hash = |f: &Files, name: &str| f.get(name).map(|b| kustos_ca::fingerprint(b));
    let mut merged = Files::new();
    let mut conflicts = Vec::new();
    for file in SHARED {
        let (l, r) = (hash(local, file.name), hash(remote, file.name));
        let from_remote = if l == r {
            false
        } else {
            match base {
                None => true,
                Some(base) => {
                    let b = base.get(file.name).cloned();
                    if l == b {
                        true
                    } else if r == b {
                        false
                    } else {
                        conflicts.push(file.name);
                        if let Some(merged_state) = merge_conflict(file.name, local, remote) {
                            merged.insert(file.name.to_string(), merged_state);
                            continue;
                        }
                        true
                    }
                }
            }
        };
        let side = if from_remote { remote } else { local };
        if let Some(bytes) = side.get(file.name) {
            merged.insert(file.name.to_string(), bytes.clone());
        }
    }
    let mut writes = Vec::new();
    let mut removals = Vec::new();
    for file in SHARED {
        match (local.get(file.name), merged.get(file.name)) {
            (l, Some(m)) if l != Some(m) => writes.push((file.name, Some(m.clone()))),
            (Some(_), None) => removals.push((file.name, None)),
            _ => {}
        }
    }
    writes.extend(removals);
    let remote_shared: Files = remote
        .iter()
        .filter(|(n, _)| SHARED.iter().any(|f| f.name == *n))
        .map(|(n, b)| (n.clone(), b.clone()))
        .collect();
    Plan { local: writes, push: (merged != remote_shared).then(|| merged.clone()), conflicts, agreed: hashes(&merged) }
}

/// A conflict on a file whose contents can be joined: `sa-keys.json` changed here and in
/// the record (a rotation on one directory while another apiserver recorded a token window
/// or pruned) keeps every retired key of both, so none that still verifies tokens is lost (a
/// pruned key that comes back is pruned again). `None`: the record's version is kept.
fn merge_conflict(name: &str, local: &Files, remote: &Files) -> Option<Vec<u8>> {
    if name != sa_keys::STATE_FILE {
        return None;
    }
    let parse = |f: &Files| f.get(name).and_then(|b| serde_json::from_slice::<sa_keys::KeyState>(b).ok());
    let (mut joined, theirs) = (parse(remote)?, parse(local)?);
    for key in theirs.retired {
        match joined.retired.iter_mut().find(|k| k.kid == key.kid) {
            Some(k) => k.tokens_expire_by = k.tokens_expire_by.max(key.tokens_expire_by),
            None => joined.retired.push(key),
        }
    }
    let text = serde_json::to_string_pretty(&joined).ok()?;
    Some((text + "\n").into_bytes())
}

// ---- sealing ----

/// The key that seals the record (`sync.key`).
pub struct SealKey(aead::LessSafeKey);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// The record as stored.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    /// base64 of the 12-byte nonce followed by the AES-256-GCM ciphertext and tag.
    sealed: String,
}

impl SealKey {
    pub fn from_text(text: &str) -> anyhow::Result<SealKey> {
        let bytes = B64.decode(text.trim()).context("not base64")?;
        if bytes.len() != 32 {
            bail!("holds {} bytes, not 32", bytes.len());
        }
        let key = aead::UnboundKey::new(&aead::AES_256_GCM, &bytes).map_err(|_| anyhow::anyhow!("not a key"))?;
        Ok(SealKey(aead::LessSafeKey::new(key)))
    }

    /// A new random key, and its text for `sync.key`.
    pub fn generate() -> anyhow::Result<(SealKey, String)> {
        let mut bytes = [0u8; 32];
        SystemRandom::new().fill(&mut bytes).map_err(|_| anyhow::anyhow!("no random bytes"))?;
        let text = format!("{}\n", B64.encode(bytes));
        Ok((SealKey::from_text(&text)?, text))
    }

    /// The record's value for `files`.
    pub fn seal(&self, files: &Files) -> anyhow::Result<Vec<u8>> {
        let plain: BTreeMap<&String, String> = files.iter().map(|(n, b)| (n, B64.encode(b))).collect();
        let mut data = serde_json::to_vec(&plain).context("encoding the shared files")?;
        let mut nonce = [0u8; aead::NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).map_err(|_| anyhow::anyhow!("no random bytes"))?;
        self.0
            .seal_in_place_append_tag(aead::Nonce::assume_unique_for_key(nonce), aead::Aad::from(RECORD_KEY), &mut data)
            .map_err(|_| anyhow::anyhow!("sealing the shared files failed"))?;
        let mut sealed = nonce.to_vec();
        sealed.extend(data);
        serde_json::to_vec(&Record { sealed: B64.encode(sealed) }).context("encoding the record")
    }

    /// The files of a record's value; an error when it was not sealed with this key.
    pub fn open(&self, value: &[u8]) -> anyhow::Result<Files> {
        let record: Record = serde_json::from_slice(value).context("the record does not parse")?;
        let mut sealed = B64.decode(record.sealed).context("the record is not base64")?;
        if sealed.len() < aead::NONCE_LEN {
            bail!("the record is too short");
        }
        let mut nonce = [0u8; aead::NONCE_LEN];
        nonce.copy_from_slice(&sealed[..aead::NONCE_LEN]);
        let data = &mut sealed[aead::NONCE_LEN..];
        let plain = self
            .0
            .open_in_place(aead::Nonce::assume_unique_for_key(nonce), aead::Aad::from(RECORD_KEY), data)
            .map_err(|_| anyhow::anyhow!("the record was sealed with another key than this {SEAL_KEY_FILE}"))?;
        let files: BTreeMap<String, String> = serde_json::from_slice(plain).context("the sealed files do not parse")?;
        files
            .into_iter()
            .filter(|(n, _)| SHARED.iter().any(|f| f.name == *n))
            .map(|(n, b)| Ok((n, B64.decode(b).context("a sealed file is not base64")?)))
            .collect()
    }
}

// ---- files ----

/// `sync.key`, created when absent.
pub fn ensure_seal_key(pki: &Path) -> anyhow::Result<SealKey> {
    let path = pki.join(SEAL_KEY_FILE);
    match read_optional(&path)? {
        Some(text) => {
            restrict_key_file(&path)?;
            SealKey::from_text(&text).with_context(|| format!("{} is not a seal key", path.display()))
        }
        None => {
            let (key, text) = SealKey::generate()?;
            write_private(&path, &text)?;
            tracing::info!(file = %path.display(), "created the key that seals the shared PKI in etcd");
            Ok(key)
        }
    }
}

fn read_once(pki: &Path) -> anyhow::Result<Files> {
    let mut files = Files::new();
    for file in SHARED.iter().rev() {
        let path = pki.join(file.name);
        match fs::read(&path) {
            Ok(bytes) => {
                files.insert(file.name.to_string(), bytes);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
    Ok(files)
}

/// The shared files of `pki`, read until two reads agree (a command may be writing them).
pub fn read_local(pki: &Path) -> anyhow::Result<Files> {
    let mut last = read_once(pki)?;
    for _ in 0..STABLE_READS {
        let again = read_once(pki)?;
        if again == last {
            return Ok(again);
        }
        last = again;
    }
    bail!("the shared files in {} kept changing while being read", pki.display())
}

/// Make `changes` in order; `sa-keys.json` under its lock, as its other writers do.
pub fn write_local(pki: &Path, changes: &[(&'static str, Option<Vec<u8>>)]) -> anyhow::Result<()> {
    for (name, contents) in changes {
        let path = pki.join(name);
        let private = SHARED.iter().any(|f| f.name == *name && f.private);
        let write = || -> anyhow::Result<()> {
            match contents {
                Some(bytes) => write_atomic(&path, bytes, if private { 0o600 } else { 0o644 }),
                None => match fs::remove_file(&path) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
                },
            }
        };
        if *name == sa_keys::STATE_FILE {
            sa_keys::with_lock(pki, write)?;
        } else {
            write()?;
        }
    }
    let _ = fs::File::open(pki).and_then(|d| d.sync_all());
    Ok(())
}

/// `sync.json`: what this directory and the record last agreed on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    pub files: Hashes,
    /// The record's revision (its etcd `mod_revision`) they agreed at.
    #[serde(default)]
    pub revision: u64,
}

pub fn read_base(pki: &Path) -> anyhow::Result<Option<Base>> {
    let path = pki.join(BASE_FILE);
    match read_optional(&path)? {
        None => Ok(None),
        Some(text) => {
            serde_json::from_str(&text).map(Some).with_context(|| format!("{} does not parse", path.display()))
        }
    }
}

fn write_base(pki: &Path, base: &Base) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(base).context("encoding the base")?;
    write_public(&pki.join(BASE_FILE), &(text + "\n"))
}

// ---- following the record ----

/// One apiserver's side of the shared PKI.
pub struct PkiSync {
    store: Arc<dyn Storage>,
    paths: Paths,
    key: SealKey,
    /// The record revision whose files this apiserver holds and follows (0: none yet).
    followed: tokio::sync::watch::Sender<u64>,
}

/// What a round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub pulled: Vec<&'static str>,
    pub pushed: bool,
    pub conflicts: Vec<&'static str>,
    /// The record's revision this directory agrees with now (0: no record).
    pub revision: u64,
}

impl PkiSync {
    /// Before the PKI is loaded: take the record's files (when this directory has not agreed
    /// with it yet, or they changed since). Fails when the record does not open with this
    /// directory's `sync.key`.
    pub async fn start(store: Arc<dyn Storage>, data_dir: &Path) -> anyhow::Result<PkiSync> {
        let paths = Paths::new(data_dir);
        super::ensure_private_dir(&paths.pki)?;
        let key_path = paths.pki.join(SEAL_KEY_FILE);
        if !key_path.exists() && store.get(RECORD_KEY).await.context("reading the shared PKI from the store")?.is_some()
        {
            bail!(
                "this etcd holds a cluster's shared PKI, and {} is missing: copy it (or the whole pki/) from an apiserver of this cluster",
                key_path.display()
            );
        }
        let key = ensure_seal_key(&paths.pki)?;
        let sync = PkiSync { store, paths, key, followed: tokio::sync::watch::Sender::new(0) };
        let remote = sync.remote().await?;
        if let Some((revision, files)) = &remote {
            let pki = sync.paths.pki.clone();
            let local = read_local(&pki)?;
            let base = read_base(&pki)?;
            let plan = plan(&local, base.as_ref().map(|b| &b.files), Some(files));
            if !plan.local.is_empty() {
                write_local(&pki, &plan.local)?;
                let names: Vec<&str> = plan.local.iter().map(|(n, _)| *n).collect();
                tracing::info!(files = %names.join(","), "took the cluster's shared PKI from etcd");
            }
            if plan.push.is_none() {
                write_base(&pki, &Base { files: plan.agreed, revision: *revision })?;
            }
        }
        Ok(sync)
    }

    async fn remote(&self) -> anyhow::Result<Option<(storage::Rev, Files)>> {
        let Some(kv) = self.store.get(RECORD_KEY).await.context("reading the shared PKI from the store")? else {
            return Ok(None);
        };
        let files = self.key.open(&kv.value).with_context(|| {
            format!(
                "the shared PKI in etcd does not open with {}: copy pki/ (with {SEAL_KEY_FILE}) from an apiserver of this cluster",
                self.paths.pki.join(SEAL_KEY_FILE).display()
            )
        })?;
        Ok(Some((kv.mod_rev, files)))
    }

    /// Merge once: push what changed here, pull what changed in the record.
    pub async fn round(&self) -> anyhow::Result<Round> {
        let remote = self.remote().await?;
        let pki = self.paths.pki.clone();
        let (local, base) =
            tokio::task::spawn_blocking(move || Ok::<_, anyhow::Error>((read_local(&pki)?, read_base(&pki)?)))
                .await
                .context("reading the shared files")??;
        let plan = plan(&local, base.as_ref().map(|b| &b.files), remote.as_ref().map(|(_, f)| f));
        let mut revision = remote.as_ref().map_or(0, |(rev, _)| *rev);
        if let Some(files) = &plan.push {
            let value = self.key.seal(files)?;
            let written = match &remote {
                None => self.store.create(RECORD_KEY, value).await,
                Some((rev, _)) => self.store.update(RECORD_KEY, value, *rev).await,
            };
            match written {
                Ok(rev) => revision = rev,
                // Another apiserver wrote first: merge with what it wrote next round.
                Err(storage::Error::AlreadyExists(_) | storage::Error::Conflict { .. }) => return Ok(Round::default()),
                Err(e) => return Err(e).context("writing the shared PKI"),
            }
        }
        let pki = self.paths.pki.clone();
        let changes = plan.local.clone();
        let agreed = Base { files: plan.agreed.clone(), revision };
        let unchanged_base = base.as_ref() == Some(&agreed);
        tokio::task::spawn_blocking(move || {
            write_local(&pki, &changes)?;
            if !unchanged_base {
                write_base(&pki, &agreed)?;
            }
            Ok::<_, anyhow::Error>(())
        })
        .await
        .context("writing the shared files")??;
        Ok(Round {
            pulled: plan.local.iter().map(|(n, _)| *n).collect(),
            pushed: plan.push.is_some(),
            conflicts: plan.conflicts,
            revision,
        })
    }

    /// The record revision whose files this apiserver holds and follows, as it changes.
    pub fn followed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.followed.subscribe()
    }

    /// Record that this apiserver follows the record at `revision` (after a round and a
    /// [`PkiSync::follow`] that succeeded).
    pub fn set_followed(&self, revision: u64) {
        if revision > 0 {
            self.followed.send_if_modified(|r| std::mem::replace(r, revision) != revision);
        }
    }

    /// Bring this directory's own files (serving certificate, admin kubeconfig) in line with
    /// the shared ones. Returns the steps taken.
    pub fn follow(&self) -> anyhow::Result<Vec<rotation::Step>> {
        rotation::run(&self.paths, &Goal::Follow, &NewCa::default(), Utc::now(), |_| {})
    }

    /// Every `every`, while the server runs: a round, then [`PkiSync::follow`] after a pull
    /// (again next time when it failed). Problems are logged once each.
    pub fn spawn(self, state: Weak<AppState>, every: std::time::Duration) {
        tokio::spawn(async move {
            let mut reported: Option<String> = None;
            let mut follow_pending = false;
            loop {
                tokio::time::sleep(every).await;
                if state.strong_count() == 0 {
                    return;
                }
                let result = match self.round().await {
                    Ok(round) => {
                        if !round.conflicts.is_empty() {
                            tracing::warn!(
                                files = %round.conflicts.join(","),
                                "these shared PKI files changed here and on another apiserver at once; kept the other's (run the command again)"
                            );
                        }
                        if !round.pulled.is_empty() {
                            tracing::info!(files = %round.pulled.join(","), "followed the cluster's shared PKI");
                            follow_pending = true;
                        }
                        let followed = if follow_pending {
                            self.follow().map(|steps| {
                                for step in &steps {
                                    tracing::info!(step = %step, "this apiserver followed the shared PKI");
                                }
                                follow_pending = false;
                            })
                        } else {
                            Ok(())
                        };
                        // Published once a whole interval passed without a change here,
                        // so that the server's file followers (same interval) have it too.
                        if followed.is_ok() && round.pulled.is_empty() && !round.pushed {
                            self.set_followed(round.revision);
                        }
                        followed
                    }
                    Err(e) => Err(e),
                };
                match result {
                    Ok(()) => {
                        if reported.take().is_some() {
                            tracing::info!("the shared PKI is followed again");
                        }
                    }
                    Err(e) => {
                        let msg = format!("{e:#}");
                        if reported.as_deref() != Some(msg.as_str()) {
                            tracing::warn!(error = %msg, "following the shared PKI failed; retrying");
                            reported = Some(msg);
                        }
                    }
                }
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
