//! Several apiservers on one etcd share one PKI: the cluster CA (and a CA rotation's files)
//! and the service-account keys. Each follows one sealed record in etcd.
//!
//! | where | what |
//! | --- | --- |
//! | `DIR/pki/sync.key` | 32 random bytes, base64 (0600): seals the record; the same in every apiserver's directory of a cluster (copied with `pki/`); replaced by `kustos pki sync-key rotate` ([`keys`]) |
//! | `DIR/pki/sync.json` | the SHA-256 of each shared file as this directory and the record last agreed on: the base of the merge |
//! | `DIR/pki/sync-generation.json` | the highest record generation this apiserver has seen: an older record is refused ([`generation`]) |
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
//! A record that opens with none of this directory's keys stops the start: that apiserver
//! belongs to another cluster's PKI (or missed a `sync.key` rotation). A record older than
//! one this apiserver saw is refused, at start and in every round: an ERROR, this
//! directory's files stay, and a round seals them over it as the next generation.

pub mod generation;
pub mod keys;
pub mod seal;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Weak};

use anyhow::{bail, Context as _};
use chrono::Utc;
use serde::{Deserialize, Serialize};

pub use seal::SealKey;

use super::rotation::{self, Goal, NewCa, Paths};
use super::{read_optional, restrict_key_file, sa_keys, write_atomic, write_private, write_public};
use crate::storage::{self, Storage};

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

/// The shared files, in the order changes to them are made: a new seal key first, a
/// rotation's new CA before the bundle that trusts it, the bundle before the key that signs with it, the retired
/// service-account keys before the key that replaces them, `rotation.json` last.
pub const SHARED: &[SharedFile] = &[
    shared(keys::NEXT_KEY, true),
    shared(keys::STATE_FILE, false),
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
/// the record (a rotation on one directory while another apiserver recorded a key's end or
/// pruned) keeps every retired key of both, with the later end and the earlier revocation
/// ([`sa_keys::KeyState::join`]), so none that still verifies tokens is lost and no revoked
/// key comes back (a pruned key that comes back is pruned again). `None`: the record's
/// version is kept.
fn merge_conflict(name: &str, local: &Files, remote: &Files) -> Option<Vec<u8>> {
    if name != sa_keys::STATE_FILE {
        return None;
    }
    let parse = |f: &Files| f.get(name).and_then(|b| serde_json::from_slice::<sa_keys::KeyState>(b).ok());
    let joined = parse(remote)?.join(parse(local)?);
    let text = serde_json::to_string_pretty(&joined).ok()?;
    Some((text + "\n").into_bytes())
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
    /// The record revision whose files this apiserver holds and follows (0: none yet).
    followed: tokio::sync::watch::Sender<u64>,
    /// The digest of the refused record last logged (each is logged once).
    refused_logged: std::sync::Mutex<Option<String>>,
}

/// What a round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub pulled: Vec<&'static str>,
    pub pushed: bool,
    pub conflicts: Vec<&'static str>,
    /// The record's revision this directory agrees with now (0: no record).
    pub revision: u64,
    /// The record was refused ([`generation`]): this apiserver kept its files.
    pub refused: Option<generation::Refusal>,
}

/// The record as read.
/// A record none of this directory's keys open.
#[derive(Debug, Clone)]
struct Unopened {
    revision: storage::Rev,
    digest: String,
}

impl std::fmt::Display for Unopened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the record of revision {} opens with none of the sync keys", self.revision)
    }
}

impl std::error::Error for Unopened {}

#[derive(Clone)]
struct Remote {
    revision: storage::Rev,
    /// SHA-256 of its value.
    digest: String,
    opened: seal::Opened,
    /// The key that opened it.
    key: keys::Which,
}

impl Remote {
    fn generation(&self) -> u64 {
        self.opened.generation.unwrap_or(0)
    }
}

/// What a round reads from the directory.
struct LocalState {
    ring: keys::KeyRing,
    files: Files,
    base: Option<Base>,
    seen: Option<generation::Seen>,
}

fn read_state(pki: &Path) -> anyhow::Result<LocalState> {
    Ok(LocalState {
        ring: keys::KeyRing::read(pki)?,
        files: read_local(pki)?,
        base: read_base(pki)?,
        seen: generation::read(pki)?,
    })
}

/// Take `remote` as the newest record seen (before any of its files are written), and make
/// this directory's keys follow the key that opened it. Whether the keys changed.
fn accept(pki: &Path, remote: &Remote, seen: Option<&generation::Seen>, has_previous: bool) -> anyhow::Result<bool> {
    if seen.is_none_or(|s| s.generation != remote.generation() || s.digest != remote.digest) {
        let refused = seen.and_then(|s| s.refused.clone());
        generation::write(
            pki,
            &generation::Seen { generation: remote.generation(), digest: remote.digest.clone(), refused },
        )?;
    }
    let step = keys::follow_step(remote.key, &remote.opened.files, has_previous);
    keys::follow(pki, step)?;
    match step {
        keys::Follow::Nothing => Ok(false),
        keys::Follow::Promote => {
            tracing::info!("the shared PKI is sealed under the new key: it is this apiserver's sync.key now");
            Ok(true)
        }
        keys::Follow::DropPrevious => {
            tracing::info!("the sync.key rotation is finished: dropped the old key");
            Ok(true)
        }
    }
}

impl PkiSync {
    /// Before the PKI is loaded: take the record's files (when this directory has not agreed
    /// with it yet, or they changed since, and the record is not older than one this
    /// directory saw). Fails when the record opens with none of this directory's keys.
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
        ensure_seal_key(&paths.pki)?;
        let sync = PkiSync {
            store,
            paths,
            followed: tokio::sync::watch::Sender::new(0),
            refused_logged: std::sync::Mutex::new(None),
        };
        let pki = sync.paths.pki.clone();
        let state = read_state(&pki)?;
        let remote = match sync.remote_or_refused(&state.ring, state.seen.as_ref()).await? {
            Ok(remote) => remote,
            Err(refusal) => {
                sync.record_unopened(refusal, state.seen.unwrap_or_default()).await?;
                return Ok(sync);
            }
        };
        if let Some(remote) = remote {
            if let Some(refusal) = sync.refusal(&remote, state.seen.as_ref()) {
                sync.log_refusal(&remote, &refusal);
                return Ok(sync);
            }
            accept(&pki, &remote, state.seen.as_ref(), state.ring.get(keys::Which::Previous).is_some())?;
            let plan = plan(&state.files, state.base.as_ref().map(|b| &b.files), Some(&remote.opened.files));
            if !plan.local.is_empty() {
                write_local(&pki, &plan.local)?;
                let names: Vec<&str> = plan.local.iter().map(|(n, _)| *n).collect();
                tracing::info!(files = %names.join(","), "took the cluster's shared PKI from etcd");
            }
            if plan.push.is_none() {
                write_base(&pki, &Base { files: plan.agreed, revision: remote.revision })?;
            }
        }
        Ok(sync)
    }

    async fn remote(&self, ring: &keys::KeyRing) -> anyhow::Result<Option<Remote>> {
        let Some(kv) = self.store.get(RECORD_KEY).await.context("reading the shared PKI from the store")? else {
            return Ok(None);
        };
        let digest = kustos_ca::fingerprint(&kv.value);
        let (opened, key) = ring
            .open(&kv.value)
            .map_err(|_| anyhow::Error::new(Unopened { revision: kv.mod_rev, digest: digest.clone() }))
            .with_context(|| {
                format!(
                    "the shared PKI in etcd does not open with {} (nor a {} or {} beside it): copy pki/ (with {SEAL_KEY_FILE}) from an apiserver of this cluster",
                    self.paths.pki.join(SEAL_KEY_FILE).display(),
                    keys::NEXT_KEY,
                    keys::PREV_KEY,
                )
            })?;
        Ok(Some(Remote { revision: kv.mod_rev, digest, opened, key }))
    }

    /// [`Self::remote`], where a record none of this directory's keys open is refused once
    /// this apiserver has followed one (`seen`): it is not this PKI's record as this apiserver
    /// knows it (one sealed under a sync key retired since, put back), so the apiserver keeps
    /// what it has, logs an ERROR and records the refusal for `kustos ca status`. It does not
    /// seal over it: a record it cannot read may be another cluster's.
    async fn remote_or_refused(
        &self,
        ring: &keys::KeyRing,
        seen: Option<&generation::Seen>,
    ) -> anyhow::Result<Result<Option<Remote>, generation::Refusal>> {
        match self.remote(ring).await {
            Ok(r) => Ok(Ok(r)),
            Err(e) => match (e.downcast_ref::<Unopened>(), seen) {
                (Some(unopened), Some(seen)) => {
                    let refusal = generation::Refusal {
                        generation: 0,
                        highest: seen.generation,
                        fork: false,
                        unopened: true,
                        at: Utc::now(),
                        resealed_as: None,
                    };
                    let mut logged = self.refused_logged.lock().unwrap_or_else(|e| e.into_inner());
                    if logged.as_deref() != Some(unopened.digest.as_str()) {
                        *logged = Some(unopened.digest.clone());
                        tracing::error!(
                            revision = unopened.revision,
                            highest_generation = seen.generation,
                            "refused the shared PKI record in etcd: it does not open with this apiserver's sync keys \
                             (one sealed under a sync key retired since, put back?); this apiserver keeps the PKI it has"
                        );
                    }
                    Ok(Err(refusal))
                }
                _ => Err(e),
            },
        }
    }

    /// Record `refusal` (of a record this apiserver cannot open) in its `seen` state.
    async fn record_unopened(&self, refusal: generation::Refusal, seen: generation::Seen) -> anyhow::Result<Round> {
        let pki = self.paths.pki.clone();
        let mut seen = seen;
        seen.refused = Some(refusal.clone());
        kustos_filework::run(move || generation::write(&pki, &seen)).await.context("recording the refusal")??;
        Ok(Round { refused: Some(refusal), ..Round::default() })
    }

    /// Why `remote` is refused, when it is.
    fn refusal(&self, remote: &Remote, seen: Option<&generation::Seen>) -> Option<generation::Refusal> {
        let fork = match generation::judge(seen, remote.generation(), &remote.digest) {
            generation::Verdict::Accept => return None,
            generation::Verdict::Older => false,
            generation::Verdict::Fork => true,
        };
        Some(generation::Refusal {
            generation: remote.generation(),
            highest: seen.map_or(0, |s| s.generation),
            fork,
            unopened: false,
            at: Utc::now(),
            resealed_as: None,
        })
    }

    fn log_refusal(&self, remote: &Remote, refusal: &generation::Refusal) {
        let mut logged = self.refused_logged.lock().unwrap_or_else(|e| e.into_inner());
        if logged.as_deref() == Some(remote.digest.as_str()) {
            return;
        }
        *logged = Some(remote.digest.clone());
        tracing::error!(
            record_generation = refusal.generation,
            highest_generation = refusal.highest,
            fork = refusal.fork,
            revision = remote.revision,
            "refused the shared PKI record in etcd: its generation is older than the highest this apiserver has \
             seen, or the same with other contents (an old record or etcd backup put back?); this apiserver keeps \
             the PKI it has"
        );
    }

    /// A refused record: seal this directory's files over it (compare-and-swap), one
    /// generation past the highest seen, and record the refusal.
    async fn refuse(
        &self,
        remote: Remote,
        mut refusal: generation::Refusal,
        state: LocalState,
    ) -> anyhow::Result<Round> {
        self.log_refusal(&remote, &refusal);
        let pki = self.paths.pki.clone();
        let mut seen = state.seen.unwrap_or_default();
        let mut round = Round::default();
        if !state.files.is_empty() {
            let generation = generation::next(Some(&seen), remote.opened.generation);
            let value = keys::sealing_key(&state.files, &state.ring)?.seal(&state.files, generation)?;
            let digest = kustos_ca::fingerprint(&value);
            match self.store.update(RECORD_KEY, value, remote.revision).await {
                Ok(rev) => {
                    refusal.resealed_as = Some(generation);
                    tracing::error!(
                        generation,
                        "sealed this apiserver's PKI into the shared record again, over the refused one"
                    );
                    seen.generation = generation;
                    seen.digest = digest;
                    round.pushed = true;
                    round.revision = rev;
                }
                Err(storage::Error::AlreadyExists(_) | storage::Error::Conflict { .. }) => {}
                Err(e) => return Err(e).context("writing the shared PKI"),
            }
        }
        seen.refused = Some(refusal.clone());
        let base = round.pushed.then(|| Base { files: hashes(&state.files), revision: round.revision });
        kustos_filework::run(move || {
            generation::write(&pki, &seen)?;
            if let Some(base) = base {
                write_base(&pki, &base)?;
            }
            Ok::<_, anyhow::Error>(())
        })
        .await
        .context("recording the refusal")??;
        round.refused = Some(refusal);
        Ok(round)
    }

    /// Merge once: push what changed here, pull what changed in the record; refuse a record
    /// older than one seen.
    pub async fn round(&self) -> anyhow::Result<Round> {
        let pki = self.paths.pki.clone();
        let state = kustos_filework::run(move || read_state(&pki)).await.context("reading the shared files")??;
        let mut remote = match self.remote_or_refused(&state.ring, state.seen.as_ref()).await? {
            Ok(remote) => remote,
            Err(refusal) => return self.record_unopened(refusal, state.seen.unwrap_or_default()).await,
        };
        if let Some(refusal) = remote.as_ref().and_then(|r| self.refusal(r, state.seen.as_ref())) {
            if let Some(r) = remote.take() {
                return self.refuse(r, refusal, state).await;
            }
        }
        let LocalState { mut ring, files: local, base, seen } = state;
        if let Some(r) = &remote {
            let pki = self.paths.pki.clone();
            let (r, seen, has_previous) = (r.clone(), seen.clone(), ring.get(keys::Which::Previous).is_some());
            let changed = kustos_filework::run(move || accept(&pki, &r, seen.as_ref(), has_previous))
                .await
                .context("following the record")??;
            if changed {
                ring = keys::KeyRing::read(&self.paths.pki)?;
            }
        }
        let remote_files = remote.as_ref().map(|r| &r.opened.files);
        let plan = plan(&local, base.as_ref().map(|b| &b.files), remote_files);
        // A record without a generation is sealed again at once, with one.
        let push = plan
            .push
            .clone()
            .or_else(|| remote.as_ref().filter(|r| r.opened.generation.is_none()).map(|r| r.opened.files.clone()));
        let mut revision = remote.as_ref().map_or(0, |r| r.revision);
        let mut written_seen = None;
        if let Some(files) = &push {
            let generation = generation::next(seen.as_ref(), remote.as_ref().and_then(|r| r.opened.generation));
            let value = keys::sealing_key(files, &ring)?.seal(files, generation)?;
            let digest = kustos_ca::fingerprint(&value);
            let written = match &remote {
                None => self.store.create(RECORD_KEY, value).await,
                Some(r) => self.store.update(RECORD_KEY, value, r.revision).await,
            };
            match written {
                Ok(rev) => revision = rev,
                // Another apiserver wrote first: merge with what it wrote next round.
                Err(storage::Error::AlreadyExists(_) | storage::Error::Conflict { .. }) => return Ok(Round::default()),
                Err(e) => return Err(e).context("writing the shared PKI"),
            }
            let refused = seen.as_ref().and_then(|s| s.refused.clone());
            written_seen = Some(generation::Seen { generation, digest, refused });
        }
        let pki = self.paths.pki.clone();
        let changes = plan.local.clone();
        let agreed = Base { files: plan.agreed.clone(), revision };
        let unchanged_base = base.as_ref() == Some(&agreed);
        kustos_filework::run(move || {
            // The generation this apiserver wrote, before any of the record's files.
            if let Some(seen) = written_seen {
                generation::write(&pki, &seen)?;
            }
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
            pushed: push.is_some(),
            conflicts: plan.conflicts,
            revision,
            refused: None,
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

    /// Every `every`, while the server (`state`) runs: a round, then [`PkiSync::follow`] after a pull
    /// (again next time when it failed). Problems are logged once each.
    pub fn spawn<S: ?Sized + Send + Sync + 'static>(
        self,
        tasks: &crate::tasks::Tasks,
        state: Weak<S>,
        every: std::time::Duration,
    ) {
        tasks.spawn("shared-pki", async move {
            let mut reported: Option<String> = None;
            let mut follow_pending = false;
            loop {
                tokio::time::sleep(every).await;
                if state.strong_count() == 0 {
                    return Ok(());
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
