//! Rotating the service-account signing key without a restart: `kustos sa-key rotate`, and
//! dropping a retired key at once: `kustos sa-key revoke`.
//!
//! In `DIR/pki/`:
//!
//! | file | what |
//! | --- | --- |
//! | `sa.key`, `sa.pub` | the key that signs (as before a rotation) |
//! | `sa-next.key` | the new key, while a rotation is under way (0600) |
//! | `sa-keys.json` | the retired keys: `{"retired": [{"kid", "publicKey", "retiredAt", "tokensExpireBy", "revokedAt"}]}` |
//! | `sa-keys.lock` | taken (`flock`) by whoever rewrites `sa-keys.json` |
//! | `sa-rotate.lock` | taken (`flock`) by a `kustos sa-key rotate` for its whole run: one at a time |
//!
//! A key verifies while it signs, or while it is retired and its end has not passed and it
//! was not revoked ([`verifies`]): the JWKS serves the same set.
//! A rotation is a sequence of durable steps ([`next_step`]): the new key written to
//! `sa-next.key`, the signing key's public half recorded as retired, `sa.key` replaced
//! (atomically, 0600), `sa.pub` rewritten, `sa-next.key` removed. The key that signed is
//! recorded before it stops signing, so a reader that takes `sa.key` first and `sa-keys.json`
//! second ([`load`]) never misses it; a rotation killed between two steps resumes when run
//! again (a `sa-next.key` left behind is the key it goes on with).
//!
//! A retired key's end (`tokensExpireBy`) is when the longest token it could have signed
//! expires: retiredAt + the longest lifetime the apiserver issues
//! (`--service-account-max-token-expiration`) + [`PRUNE_MARGIN_SECONDS`]. Every apiserver
//! records it ([`extend_ends`], the longest of theirs wins) and, until one has, counts with
//! its own ([`end`]). Legacy tokens (Secrets, no expiry) signed by a retired key stop
//! verifying at the same end: the serviceaccount-token controller re-issues them with the new
//! key right after the rotation. Past its end a key no longer verifies and is dropped from
//! `sa-keys.json` ([`prunable`]). A revoked key (`revokedAt`, [`revoke`]) stops verifying at
//! once; its entry stays for [`REVOKED_KEPT_SECONDS`] so that a concurrent change merged from
//! another apiserver cannot bring it back, then it is dropped too.
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use chrono::{DateTime, Duration, Utc};
use kustos_ca::jwt::{self, PublicKey};
use kustos_ca::KeyPair;
use serde::{Deserialize, Serialize};

use super::{read_optional, write_private, write_public};

pub const SIGNING_KEY: &str = "sa.key";
pub const SIGNING_PUB: &str = "sa.pub";
pub const NEXT_KEY: &str = "sa-next.key";
pub const STATE_FILE: &str = "sa-keys.json";
pub const LOCK_FILE: &str = "sa-keys.lock";
/// Added to a retired key's token window: the time a running server takes to follow
/// `sa.key` (it signs with the old key until then) and the verifier's leeway, with room.
pub const PRUNE_MARGIN_SECONDS: i64 = 300;
/// How long a revoked key's entry stays in `sa-keys.json` (not verifying) before it is dropped.
pub const REVOKED_KEPT_SECONDS: i64 = 24 * 3600;
/// Steps one rotation takes at most (it needs five).
const MAX_STEPS: usize = 16;

/// A key that no longer signs but still verifies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetiredKey {
    pub kid: String,
    /// SubjectPublicKeyInfo PEM.
    pub public_key: String,
    /// When it stopped signing.
    pub retired_at: DateTime<Utc>,
    /// Its end: when every token it signed has expired (recorded by the apiservers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_expire_by: Option<DateTime<Utc>>,
    /// When `kustos sa-key revoke` dropped it: it verifies nothing from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// `sa-keys.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyState {
    #[serde(default)]
    pub retired: Vec<RetiredKey>,
}

impl KeyState {
    pub fn retired_kids(&self) -> Vec<String> {
        self.retired.iter().map(|k| k.kid.clone()).collect()
    }

    /// Join two versions of the state (changed on two apiservers at once): every key of
    /// either, each with the later end and the earlier revocation.
    pub fn join(mut self, other: KeyState) -> KeyState {
        for key in other.retired {
            match self.retired.iter_mut().find(|k| k.kid == key.kid) {
                Some(k) => {
                    k.tokens_expire_by = k.tokens_expire_by.max(key.tokens_expire_by);
                    k.revoked_at = match (k.revoked_at, key.revoked_at) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                None => self.retired.push(key),
            }
        }
        self
    }
}

/// The durable state of a rotation, as key ids: what [`next_step`] decides from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// The kid of `sa.key`.
    pub signing: String,
    /// `sa.pub` is `sa.key`'s public key.
    pub pub_matches: bool,
    /// The kid of `sa-next.key`, when there is one that loads.
    pub next: Option<String>,
    /// `sa-next.key` exists (loading or not).
    pub next_exists: bool,
    /// The kids of `sa-keys.json`.
    pub retired: Vec<String>,
}

/// One durable change of a rotation to the key `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write `sa-next.key` (the new key).
    WriteNext,
    /// Record the signing key in `sa-keys.json` as retired now.
    RetireCurrent,
    /// `sa.key` ← `sa-next.key`: the new key signs.
    InstallNext,
    /// `sa.pub` ← `sa.key`'s public key.
    WritePub,
    /// Remove `sa-next.key`.
    RemoveNext,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::WriteNext => write!(f, "wrote the new signing key ({NEXT_KEY})"),
            Step::RetireCurrent => write!(f, "recorded the current key as retired; it keeps verifying ({STATE_FILE})"),
            Step::InstallNext => write!(f, "the new key signs from now on ({SIGNING_KEY})"),
            Step::WritePub => write!(f, "wrote the new public key ({SIGNING_PUB})"),
            Step::RemoveNext => write!(f, "removed {NEXT_KEY}; the rotation is done"),
        }
    }
}

/// The one step that brings `obs` closer to `target` (the kid of the new key) signing;
/// `None`: it signs, and the files are tidy.
pub fn next_step(target: &str, obs: &Observed) -> Option<Step> {
    if obs.signing == target {
        if !obs.pub_matches {
            return Some(Step::WritePub);
        }
        return obs.next_exists.then_some(Step::RemoveNext);
    }
    if obs.next.as_deref() != Some(target) {
        return Some(Step::WriteNext);
    }
    if !obs.retired.contains(&obs.signing) {
        return Some(Step::RetireCurrent);
    }
    Some(Step::InstallNext)
}

/// The window a retired key keeps verifying for on an apiserver whose longest token
/// lifetime is `max_token_seconds`.
pub fn window(max_token_seconds: i64) -> Duration {
    Duration::try_seconds(max_token_seconds.saturating_add(PRUNE_MARGIN_SECONDS)).unwrap_or(Duration::MAX)
}

/// retiredAt + [`window`].
fn own_end(key: &RetiredKey, max_token_seconds: i64) -> DateTime<Utc> {
    key.retired_at.checked_add_signed(window(max_token_seconds)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Record this apiserver's end on every retired key whose recorded end is earlier (or not
/// recorded): a token it signed may live that long. Whether anything changed.
pub fn extend_ends(state: &mut KeyState, max_token_seconds: i64) -> bool {
    let mut changed = false;
    for k in state.retired.iter_mut() {
        let mine = own_end(k, max_token_seconds);
        if k.tokens_expire_by.is_none_or(|t| t < mine) {
            k.tokens_expire_by = Some(mine);
            changed = true;
        }
    }
    changed
}

/// A retired key's end: the recorded one, else this apiserver's own.
pub fn end(key: &RetiredKey, max_token_seconds: i64) -> DateTime<Utc> {
    key.tokens_expire_by.unwrap_or_else(|| own_end(key, max_token_seconds))
}

/// Whether a retired key verifies tokens at `now`.
pub fn verifies(key: &RetiredKey, max_token_seconds: i64, now: DateTime<Utc>) -> bool {
    key.revoked_at.is_none() && now < end(key, max_token_seconds)
}

/// The kids of the retired keys to drop from `sa-keys.json` at `now`: past their end, or
/// revoked more than [`REVOKED_KEPT_SECONDS`] ago.
pub fn prunable(state: &KeyState, max_token_seconds: i64, now: DateTime<Utc>) -> Vec<String> {
    let kept = Duration::seconds(REVOKED_KEPT_SECONDS);
    state
        .retired
        .iter()
        .filter(|k| match k.revoked_at {
            Some(at) => at + kept <= now || end(k, max_token_seconds) <= now,
            None => end(k, max_token_seconds) <= now,
        })
        .map(|k| k.kid.clone())
        .collect()
}

/// Why a key cannot be revoked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevokeError {
    #[error("{0} is the key that signs: rotate first (`kustos sa-key rotate`), then revoke it")]
    Signing(String),
    #[error("{0} is the new key of an unfinished rotation: finish it (`kustos sa-key rotate`) first")]
    Next(String),
    #[error("no service-account key {0} (see `kustos sa-key status`)")]
    Unknown(String),
}

/// Revoke the retired key `kid` at `now` (`signing`, `next`: the kids of `sa.key` and
/// `sa-next.key`). `Ok(false)`: it was revoked already.
pub fn revoke(
    state: &mut KeyState,
    kid: &str,
    signing: &str,
    next: Option<&str>,
    now: DateTime<Utc>,
) -> Result<bool, RevokeError> {
    if kid == signing {
        return Err(RevokeError::Signing(kid.to_string()));
    }
    if next == Some(kid) {
        return Err(RevokeError::Next(kid.to_string()));
    }
    let key = state.retired.iter_mut().find(|k| k.kid == kid).ok_or_else(|| RevokeError::Unknown(kid.to_string()))?;
    if key.revoked_at.is_some() {
        return Ok(false);
    }
    key.revoked_at = Some(now);
    Ok(true)
}

/// The retired keys that verify at `now`.
pub fn verifying_retired(state: &KeyState, max_token_seconds: i64, now: DateTime<Utc>) -> Vec<&RetiredKey> {
    state.retired.iter().filter(|k| verifies(k, max_token_seconds, now)).collect()
}

/// The keys that verify: the signing key, then each retired key (deduplicated by kid).
pub fn verifying(signing: &PublicKey, retired: &[PublicKey]) -> Vec<PublicKey> {
    let mut keys = vec![signing.clone()];
    for k in retired {
        if !keys.iter().any(|have| have.key_id() == k.key_id()) {
            keys.push(k.clone());
        }
    }
    keys
}

/// The `kid` of a token's header, if it has one (the token is not verified).
pub fn token_kid(token: &str) -> Option<String> {
    jwt::decode_unverified(token).ok()?.0.kid
}

// ---- files ----

fn at(pki: &Path, name: &str) -> PathBuf {
    pki.join(name)
}

/// The kid of a private key (PEM) that can sign tokens (RSA, ECDSA P-256 or P-384): any
/// other key is refused here, before a rotation could make it the signing key.
pub fn kid_of_private(pem: &str) -> anyhow::Result<String> {
    let key = KeyPair::from_pem(pem).context("not a usable private key")?;
    jwt::SigningKey::from_key_pair(&key).context("not a key that signs tokens")?;
    Ok(jwt::key_id(&key.public_key_der()))
}

/// `sa-keys.json` (empty when there is none).
pub fn read_state(pki: &Path) -> anyhow::Result<KeyState> {
    let path = at(pki, STATE_FILE);
    match read_optional(&path)? {
        None => Ok(KeyState::default()),
        Some(text) => serde_json::from_str(&text).with_context(|| format!("{} does not parse", path.display())),
    }
}

fn write_state(pki: &Path, state: &KeyState) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(state).context("encoding the key state")?;
    write_public(&at(pki, STATE_FILE), &(text + "\n"))
}

/// Change `sa-keys.json` under its lock (the rotation and the server's pruning both write
/// it); `change` says whether it changed anything. Returns the state as left.
pub fn update_state(pki: &Path, change: impl FnOnce(&mut KeyState) -> bool) -> anyhow::Result<KeyState> {
    with_lock(pki, || {
        let mut state = read_state(pki)?;
        if change(&mut state) {
            write_state(pki, &state)?;
        }
        Ok(state)
    })
}

/// The lock file `name` of `pki`, opened (made when missing), and its path.
fn open_lock(pki: &Path, name: &str) -> anyhow::Result<(fs::File, PathBuf)> {
    let path = at(pki, name);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    Ok((file, path))
}

/// `sa-rotate.lock`: held (`flock`) by a `kustos sa-key rotate` for its whole run.
pub const ROTATE_LOCK_FILE: &str = "sa-rotate.lock";

/// Run `f` as the one rotation of `pki`: refused while another holds [`ROTATE_LOCK_FILE`]
/// (two at once would each take the other's steps for their own).
pub fn as_only_rotation<T>(pki: &Path, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let (lock, lock_path) = open_lock(pki, ROTATE_LOCK_FILE)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            bail!("another `kustos sa-key rotate` is running on {}: let it finish", pki.display())
        }
        Err(fs::TryLockError::Error(e)) => return Err(e).with_context(|| format!("locking {}", lock_path.display())),
    }
    let result = f();
    drop(lock);
    result
}

/// Run `f` holding `sa-keys.lock`: whoever rewrites `sa-keys.json` does it under the lock.
pub fn with_lock<T>(pki: &Path, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let (lock, lock_path) = open_lock(pki, LOCK_FILE)?;
    lock.lock().with_context(|| format!("locking {}", lock_path.display()))?;
    let result = f();
    drop(lock);
    result
}

/// What the server signs and verifies with: `sa.key` (read first), then the retired keys.
pub struct Loaded {
    pub signing_pem: String,
    pub state: KeyState,
}

impl Loaded {
    /// The public keys of the retired keys that verify at `now`.
    pub fn retired_verifying(&self, max_token_seconds: i64, now: DateTime<Utc>) -> anyhow::Result<Vec<PublicKey>> {
        let mut keys = Vec::new();
        for k in verifying_retired(&self.state, max_token_seconds, now) {
            keys.extend(
                jwt::public_keys_from_pem(&k.public_key)
                    .with_context(|| format!("the retired key {} of {STATE_FILE} does not load", k.kid))?,
            );
        }
        Ok(keys)
    }
}

/// Read `sa.key`, then `sa-keys.json` (in that order: see the module doc).
pub fn load(pki: &Path) -> anyhow::Result<Loaded> {
    let key_path = at(pki, SIGNING_KEY);
    let signing_pem = fs::read_to_string(&key_path).with_context(|| format!("reading {}", key_path.display()))?;
    let state = read_state(pki)?;
    for k in &state.retired {
        jwt::public_keys_from_pem(&k.public_key)
            .with_context(|| format!("the retired key {} of {STATE_FILE} does not load", k.kid))?;
    }
    Ok(Loaded { signing_pem, state })
}

/// Read the durable state of a rotation.
pub fn observe(pki: &Path) -> anyhow::Result<Observed> {
    let key_path = at(pki, SIGNING_KEY);
    let key_pem = fs::read_to_string(&key_path).with_context(|| format!("reading {}", key_path.display()))?;
    let key = KeyPair::from_pem(&key_pem).with_context(|| format!("{} does not load", key_path.display()))?;
    let pub_matches = read_optional(&at(pki, SIGNING_PUB))?
        .and_then(|p| kustos_ca::public_key_der_from_pem(&p).ok())
        .is_some_and(|der| der == key.public_key_der());
    let next_pem = read_optional(&at(pki, NEXT_KEY))?;
    Ok(Observed {
        signing: jwt::key_id(&key.public_key_der()),
        pub_matches,
        next: next_pem.as_deref().and_then(|p| kid_of_private(p).ok()),
        next_exists: next_pem.is_some(),
        retired: read_state(pki)?.retired_kids(),
    })
}

/// Make `step`. `new_key_pem`: the key [`Step::WriteNext`] writes.
pub fn apply(pki: &Path, step: &Step, new_key_pem: &str, now: DateTime<Utc>) -> anyhow::Result<()> {
    match step {
        Step::WriteNext => {
            let key = KeyPair::from_pem(new_key_pem).context("the new signing key does not load")?;
            write_private(&at(pki, NEXT_KEY), &key.private_key_pem())?;
        }
        Step::RetireCurrent => {
            let pem = fs::read_to_string(at(pki, SIGNING_KEY)).context("reading sa.key")?;
            let key = KeyPair::from_pem(&pem).context("sa.key does not load")?;
            let kid = jwt::key_id(&key.public_key_der());
            update_state(pki, |s| {
                if s.retired.iter().any(|k| k.kid == kid) {
                    return false;
                }
                s.retired.push(RetiredKey {
                    kid: kid.clone(),
                    public_key: key.public_key_pem(),
                    retired_at: now,
                    tokens_expire_by: None,
                    revoked_at: None,
                });
                true
            })?;
        }
        Step::InstallNext => {
            let pem = fs::read_to_string(at(pki, NEXT_KEY)).context("reading sa-next.key")?;
            let key = KeyPair::from_pem(&pem).context("sa-next.key does not load")?;
            write_private(&at(pki, SIGNING_KEY), &key.private_key_pem())?;
        }
        Step::WritePub => {
            let pem = fs::read_to_string(at(pki, SIGNING_KEY)).context("reading sa.key")?;
            let key = KeyPair::from_pem(&pem).context("sa.key does not load")?;
            write_public(&at(pki, SIGNING_PUB), &key.public_key_pem())?;
        }
        Step::RemoveNext => match fs::remove_file(at(pki, NEXT_KEY)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).context("removing sa-next.key"),
        },
    }
    // Makes renames and removals durable; not every filesystem allows it.
    let _ = fs::File::open(pki).and_then(|d| d.sync_all());
    Ok(())
}

/// The key a rotation goes to: a `sa-next.key` left by an interrupted run (which `import`,
/// when given, must be), else `import`, else a new key. Returns its PEM and kid.
pub fn target_key(pki: &Path, import: Option<&str>) -> anyhow::Result<(String, String)> {
    let imported = match import {
        Some(pem) => Some((pem.to_string(), kid_of_private(pem).context("the key given with --key")?)),
        None => None,
    };
    // A revoked key (one leaked, say) does not come back by being imported.
    if let Some((_, kid)) = &imported {
        if read_state(pki)?.retired.iter().any(|k| k.kid == *kid && k.revoked_at.is_some()) {
            bail!("the key given with --key ({kid}) was revoked: it cannot sign again");
        }
    }
    if let Some(pem) = read_optional(&at(pki, NEXT_KEY))? {
        let Ok(kid) = kid_of_private(&pem) else {
            // Half a key never reaches sa-next.key (it is written whole); this is foreign.
            bail!("{} does not load: remove it and run the rotation again", at(pki, NEXT_KEY).display());
        };
        if let Some((_, want)) = &imported {
            if *want != kid {
                bail!("an interrupted rotation to the key {kid} is under way: run `kustos sa-key rotate` without --key to finish it first");
            }
        }
        return Ok((pem, kid));
    }
    match imported {
        Some(pair) => Ok(pair),
        None => {
            let pair = kustos_ca::generate_sa_keypair().context("generating the new signing key")?;
            let kid = kid_of_private(&pair.private_key_pem)?;
            Ok((pair.private_key_pem, kid))
        }
    }
}

/// Rotate to the key `target` (PEM `key_pem`): observe, decide, apply, until it signs.
/// `on_step` is told of each step once it is durable (and may end the process).
pub fn run(
    pki: &Path,
    key_pem: &str,
    target: &str,
    now: DateTime<Utc>,
    mut on_step: impl FnMut(&Step),
) -> anyhow::Result<Vec<Step>> {
    let mut done = Vec::new();
    for _ in 0..MAX_STEPS {
        let obs = observe(pki)?;
        let Some(step) = next_step(target, &obs) else { return Ok(done) };
        if done.last() == Some(&step) {
            bail!("the step \"{step}\" did not take effect; the files in {} need a look", pki.display());
        }
        apply(pki, &step, key_pem, now)?;
        on_step(&step);
        done.push(step);
    }
    bail!("the rotation did not settle within {MAX_STEPS} steps")
}

/// An apiserver's pass (`max_token_seconds`: the longest token lifetime it issues): record
/// its end on the retired keys ([`extend_ends`]) and drop those [`prunable`] at `now`.
/// Returns the kids dropped.
pub fn maintain(pki: &Path, max_token_seconds: i64, now: DateTime<Utc>) -> anyhow::Result<Vec<String>> {
    let mut pruned = Vec::new();
    update_state(pki, |s| {
        let extended = extend_ends(s, max_token_seconds);
        pruned = prunable(s, max_token_seconds, now);
        s.retired.retain(|k| !pruned.contains(&k.kid));
        extended || !pruned.is_empty()
    })?;
    Ok(pruned)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
