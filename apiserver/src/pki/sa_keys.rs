//! Rotating the service-account signing key without a restart: `kustos sa-key rotate`.
//!
//! In `DIR/pki/`:
//!
//! | file | what |
//! | --- | --- |
//! | `sa.key`, `sa.pub` | the key that signs (as before a rotation) |
//! | `sa-next.key` | the new key, while a rotation is under way (0600) |
//! | `sa-keys.json` | the retired keys: `{"retired": [{"kid", "publicKey", "retiredAt", "tokensExpireBy"}]}` |
//! | `sa-keys.lock` | taken (`flock`) by whoever rewrites `sa-keys.json` |
//!
//! A key verifies while it signs or is listed in `sa-keys.json`: the JWKS serves the same set.
//! A rotation is a sequence of durable steps ([`next_step`]): the new key written to
//! `sa-next.key`, the signing key's public half recorded as retired, `sa.key` replaced
//! (atomically, 0600), `sa.pub` rewritten, `sa-next.key` removed. The key that signed is
//! recorded before it stops signing, so a reader that takes `sa.key` first and `sa-keys.json`
//! second ([`load`]) never misses it; a rotation killed between two steps resumes when run
//! again (a `sa-next.key` left behind is the key it goes on with).
//!
//! A retired key can go once every token it signed has expired and no legacy token Secret
//! is signed by it any more. Bound tokens: the server that signed them knows the longest
//! lifetime it issues (`--service-account-max-token-expiration`, else 2^32 seconds) and
//! records `tokensExpireBy` = retiredAt + that + [`PRUNE_MARGIN_SECONDS`] ([`fill_expiry`]).
//! Legacy tokens: the serviceaccount-token controller re-issues those signed by a retired
//! key (the JWT header's `kid`) and counts what is left ([`prunable`]).

use std::collections::BTreeMap;
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
    /// When every bound token it signed has expired (set by the server that signed them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_expire_by: Option<DateTime<Utc>>,
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

/// Fill `tokensExpireBy` of the retired keys that lack it: retiredAt + the longest bound
/// token lifetime the server issues + [`PRUNE_MARGIN_SECONDS`]. Whether anything changed.
pub fn fill_expiry(state: &mut KeyState, max_token_seconds: i64) -> bool {
    let mut changed = false;
    for k in state.retired.iter_mut().filter(|k| k.tokens_expire_by.is_none()) {
        let window =
            Duration::try_seconds(max_token_seconds.saturating_add(PRUNE_MARGIN_SECONDS)).unwrap_or(Duration::MAX);
        k.tokens_expire_by = Some(k.retired_at.checked_add_signed(window).unwrap_or(DateTime::<Utc>::MAX_UTC));
        changed = true;
    }
    changed
}

/// Why a retired key stays (or that it can go).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// No server has recorded its token window yet.
    WindowUnknown,
    /// Bound tokens it signed may be valid until then.
    TokensUntil(DateTime<Utc>),
    /// This many legacy token Secrets are signed by it.
    LegacySecrets(usize),
    /// Nothing it signed is in use: it can be pruned.
    Prunable,
}

/// Whether `key` may go at `now`, given how many legacy token Secrets each kid signed.
pub fn keep(key: &RetiredKey, legacy: &BTreeMap<String, usize>, now: DateTime<Utc>) -> Keep {
    match key.tokens_expire_by {
        None => Keep::WindowUnknown,
        Some(t) if t > now => Keep::TokensUntil(t),
        Some(_) => match legacy.get(&key.kid).copied().unwrap_or(0) {
            0 => Keep::Prunable,
            n => Keep::LegacySecrets(n),
        },
    }
}

/// The kids of the retired keys that can be pruned at `now`.
pub fn prunable(state: &KeyState, legacy: &BTreeMap<String, usize>, now: DateTime<Utc>) -> Vec<String> {
    state.retired.iter().filter(|k| keep(k, legacy, now) == Keep::Prunable).map(|k| k.kid.clone()).collect()
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

/// The kid of a private key (PEM).
pub fn kid_of_private(pem: &str) -> anyhow::Result<String> {
    let key = KeyPair::from_pem(pem).context("not a usable private key")?;
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

/// Run `f` holding `sa-keys.lock`: whoever rewrites `sa-keys.json` does it under the lock.
pub fn with_lock<T>(pki: &Path, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let lock_path = at(pki, LOCK_FILE);
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    lock.lock().with_context(|| format!("locking {}", lock_path.display()))?;
    let result = f();
    drop(lock);
    result
}

/// What the server signs and verifies with: `sa.key` (read first), then the retired keys.
pub struct Loaded {
    pub signing_pem: String,
    pub retired: Vec<PublicKey>,
}

/// Read `sa.key`, then `sa-keys.json` (in that order: see the module doc).
pub fn load(pki: &Path) -> anyhow::Result<Loaded> {
    let key_path = at(pki, SIGNING_KEY);
    let signing_pem = fs::read_to_string(&key_path).with_context(|| format!("reading {}", key_path.display()))?;
    let state = read_state(pki)?;
    let mut retired = Vec::new();
    for k in &state.retired {
        let keys = jwt::public_keys_from_pem(&k.public_key)
            .with_context(|| format!("the retired key {} of {STATE_FILE} does not load", k.kid))?;
        retired.extend(keys);
    }
    Ok(Loaded { signing_pem, retired })
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

/// Fill the token windows (`max_token_seconds`: the longest bound token lifetime this
/// server issues) and drop the retired keys [`prunable`] at `now`. Returns the kids pruned.
pub fn maintain(
    pki: &Path,
    max_token_seconds: i64,
    legacy: &BTreeMap<String, usize>,
    now: DateTime<Utc>,
) -> anyhow::Result<Vec<String>> {
    let mut pruned = Vec::new();
    update_state(pki, |s| {
        let filled = fill_expiry(s, max_token_seconds);
        pruned = prunable(s, legacy, now);
        s.retired.retain(|k| !pruned.contains(&k.kid));
        filled || !pruned.is_empty()
    })?;
    Ok(pruned)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
