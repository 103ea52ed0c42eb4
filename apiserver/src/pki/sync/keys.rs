//! The keys that seal the shared record, and replacing `sync.key` while every apiserver runs:
//! `kustos pki sync-key rotate`.
//!
//! | file in `DIR/pki/` | shared | what |
//! | --- | --- | --- |
//! | `sync.key` | no | the key this apiserver seals with (0600) |
//! | `sync-next.key` | yes | the new key, while a rotation is under way (0600) |
//! | `sync-rotation.json` | yes | `{"phase": "begun"/"switched", "key": ID}` (ID: [`key_id`]) |
//! | `sync-prev.key` | no | the key replaced, until the rotation is finished (0600) |
//!
//! An apiserver opens the record with any of its keys ([`KeyRing`]) and seals it with
//! `sync.key`, except while the shared files say `switched`: then with `sync-next.key`
//! ([`sealing_key`]). A rotation is a sequence of durable steps on one directory ([`next_step`]),
//! each taken only once every running apiserver follows the record as the step before left it
//! (the command waits, as a CA rotation's does):
//!
//! 1. `sync-next.key` written: it reaches every apiserver inside the record (sealed under
//!    the old key), so each can open a record sealed under either key;
//! 2. `sync-rotation.json` `begun`, then 3. `switched`: the record is sealed under the new
//!    key; an apiserver that opens it with its `sync-next.key` makes that its `sync.key` and
//!    keeps the old one as `sync-prev.key` ([`follow`]; the command does the same in its
//!    directory: 4);
//! 5. `sync-rotation.json`, 6. `sync-next.key` removed (from the record too), 7. each
//!    apiserver drops its `sync-prev.key` once the record holds neither.
//!
//! Killed between two steps, every apiserver still opens the record, and running the command
//! again goes on from the files. The new key travels inside the record sealed under the old
//! one: whoever holds the old key and reads etcd during the rotation learns the new key too.
//!
//! In: files of `DIR/pki`. Out: the keys, the steps.

use std::fs;
use std::path::Path;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use super::super::{read_optional, write_private, write_public};
use super::seal::{key_id, SealKey};
use super::{Files, SEAL_KEY_FILE};

pub const NEXT_KEY: &str = "sync-next.key";
pub const PREV_KEY: &str = "sync-prev.key";
pub const STATE_FILE: &str = "sync-rotation.json";
/// Steps one command takes at most (a rotation needs seven).
pub const MAX_STEPS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Every apiserver learns the new key; the old one seals.
    Begun,
    /// The new key seals.
    Switched,
}

/// `sync-rotation.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRotation {
    pub phase: Phase,
    /// [`key_id`] of the new key.
    pub key: String,
}

/// Which key file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Current,
    Next,
    Previous,
}

/// An apiserver's keys: `sync.key`, and `sync-next.key`/`sync-prev.key` when present. The
/// texts are secret; `Debug` shows ids only.
pub struct KeyRing {
    keys: Vec<(Which, String, SealKey)>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<(Which, String)> = self.keys.iter().map(|(w, t, _)| (*w, key_id(t).unwrap_or_default())).collect();
        f.debug_struct("KeyRing").field("keys", &ids).finish()
    }
}

fn load_key(pki: &Path, name: &str) -> anyhow::Result<Option<(String, SealKey)>> {
    let path = pki.join(name);
    match read_optional(&path)? {
        None => Ok(None),
        Some(text) => {
            let key = SealKey::from_text(&text).with_context(|| format!("{} is not a seal key", path.display()))?;
            Ok(Some((text, key)))
        }
    }
}

impl KeyRing {
    /// Read the key files of `pki` (`sync.key` must exist).
    pub fn read(pki: &Path) -> anyhow::Result<KeyRing> {
        let Some((text, key)) = load_key(pki, SEAL_KEY_FILE)? else {
            bail!("{} is missing", pki.join(SEAL_KEY_FILE).display());
        };
        let mut keys = vec![(Which::Current, text, key)];
        for (which, name) in [(Which::Next, NEXT_KEY), (Which::Previous, PREV_KEY)] {
            if let Some((text, key)) = load_key(pki, name)? {
                keys.push((which, text, key));
            }
        }
        Ok(KeyRing { keys })
    }

    /// The key `which`, when present.
    pub fn get(&self, which: Which) -> Option<&SealKey> {
        self.keys.iter().find(|(w, _, _)| *w == which).map(|(_, _, k)| k)
    }

    /// The text of the key `which`, when present. Secret.
    pub fn text(&self, which: Which) -> Option<&str> {
        self.keys.iter().find(|(w, _, _)| *w == which).map(|(_, t, _)| t.as_str())
    }

    /// Open `value` with the first key that opens it; which one it was.
    pub fn open(&self, value: &[u8]) -> anyhow::Result<(super::seal::Opened, Which)> {
        let mut first_err = None;
        for (which, _, key) in &self.keys {
            match key.open(value) {
                Ok(opened) => return Ok((opened, *which)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err.unwrap_or_else(|| anyhow::anyhow!("no key")))
    }
}

/// The rotation state the shared `files` hold.
pub fn rotation_of(files: &Files) -> Option<KeyRotation> {
    files.get(STATE_FILE).and_then(|b| serde_json::from_slice(b).ok())
}

/// The key to seal `files` with: `sync-next.key` of `files` while they say `switched` (the
/// key is one of them), else this apiserver's `sync.key`.
pub fn sealing_key(files: &Files, ring: &KeyRing) -> anyhow::Result<SealKey> {
    if rotation_of(files).is_some_and(|r| r.phase == Phase::Switched) {
        if let Some(text) = files.get(NEXT_KEY) {
            return SealKey::from_text(&String::from_utf8_lossy(text)).context("the shared sync-next.key");
        }
    }
    let text = ring.text(Which::Current).unwrap_or_default();
    SealKey::from_text(text).context("sync.key")
}

/// What an apiserver does with its own key files after taking a record opened with `opened`
/// whose shared files are `files`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    Nothing,
    /// The record is sealed under `sync-next.key`: it becomes `sync.key`, the old one
    /// `sync-prev.key`.
    Promote,
    /// The rotation is over: drop `sync-prev.key`.
    DropPrevious,
}

/// [`Follow`] for a record opened with `opened`, holding `files`; `has_previous`: this
/// directory has a `sync-prev.key`.
pub fn follow_step(opened: Which, files: &Files, has_previous: bool) -> Follow {
    match opened {
        Which::Next => Follow::Promote,
        Which::Current if has_previous && !files.contains_key(STATE_FILE) && !files.contains_key(NEXT_KEY) => {
            Follow::DropPrevious
        }
        _ => Follow::Nothing,
    }
}

/// Make `step` in `pki`. Keys are written whole (0600), the old one kept before `sync.key`
/// is replaced.
pub fn follow(pki: &Path, step: Follow) -> anyhow::Result<()> {
    match step {
        Follow::Nothing => Ok(()),
        Follow::Promote => apply(pki, &Step::Promote),
        Follow::DropPrevious => apply(pki, &Step::RemovePrev),
    }
}

/// The durable state of a rotation in one directory, as key ids.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    pub current: String,
    pub next: Option<String>,
    pub previous: bool,
    pub state: Option<KeyRotation>,
}

impl Observed {
    /// A rotation is under way (a run goes on with it rather than starting one).
    pub fn under_way(&self) -> bool {
        self.next.is_some() || self.state.is_some() || self.previous
    }
}

/// One durable change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    WriteNext,
    Begin,
    Switch,
    Promote,
    RemoveState,
    RemoveNext,
    RemovePrev,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::WriteNext => write!(f, "wrote the new key ({NEXT_KEY}); it reaches every apiserver in the record"),
            Step::Begin => write!(f, "every apiserver opens records sealed under either key ({STATE_FILE}: begun)"),
            Step::Switch => write!(f, "the record is sealed under the new key from now on ({STATE_FILE}: switched)"),
            Step::Promote => write!(f, "the new key is this directory's {SEAL_KEY_FILE}; the old one is {PREV_KEY}"),
            Step::RemoveState => write!(f, "removed {STATE_FILE}"),
            Step::RemoveNext => write!(f, "removed {NEXT_KEY}"),
            Step::RemovePrev => write!(f, "removed {PREV_KEY}: the old key is gone; the rotation is done"),
        }
    }
}

/// The step that takes a rotation under way on (`None`: done); an error when the files do
/// not agree with each other.
pub fn next_step(obs: &Observed) -> Result<Option<Step>, String> {
    match (&obs.state, &obs.next) {
        (Some(s), Some(n)) if s.key != *n => Err(format!(
            "{STATE_FILE} names the key {} but {NEXT_KEY} is the key {n}: restore the {NEXT_KEY} of that rotation",
            s.key
        )),
        (Some(s), None) if s.key != obs.current => {
            Err(format!("{STATE_FILE} names the key {} but there is no {NEXT_KEY}", s.key))
        }
        (Some(s), _) if s.phase == Phase::Begun => Ok(Some(Step::Switch)),
        (Some(s), _) if s.key != obs.current => Ok(Some(Step::Promote)),
        (Some(_), _) => Ok(Some(Step::RemoveState)),
        (None, Some(n)) if *n != obs.current => Ok(Some(Step::Begin)),
        (None, Some(_)) => Ok(Some(Step::RemoveNext)),
        (None, None) if obs.previous => Ok(Some(Step::RemovePrev)),
        (None, None) => Ok(None),
    }
}

/// Read the durable state of `pki`.
pub fn observe(pki: &Path) -> anyhow::Result<Observed> {
    let ring = KeyRing::read(pki)?;
    let id = |w| ring.text(w).map(key_id).transpose();
    let state = match read_optional(&pki.join(STATE_FILE))? {
        None => None,
        Some(text) => Some(
            serde_json::from_str(&text)
                .with_context(|| format!("{} does not parse", pki.join(STATE_FILE).display()))?,
        ),
    };
    Ok(Observed {
        current: id(Which::Current)?.unwrap_or_default(),
        next: id(Which::Next)?,
        previous: ring.get(Which::Previous).is_some(),
        state,
    })
}

fn remove(pki: &Path, name: &str) -> anyhow::Result<()> {
    match fs::remove_file(pki.join(name)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", pki.join(name).display())),
    }
}

fn write_state(pki: &Path, phase: Phase) -> anyhow::Result<()> {
    let ring = KeyRing::read(pki)?;
    let Some(next) = ring.text(Which::Next) else { bail!("{} is missing", pki.join(NEXT_KEY).display()) };
    let state = KeyRotation { phase, key: key_id(next)? };
    let text = serde_json::to_string_pretty(&state).context("encoding the rotation state")?;
    write_public(&pki.join(STATE_FILE), &(text + "\n"))
}

/// Make `step`.
pub fn apply(pki: &Path, step: &Step) -> anyhow::Result<()> {
    match step {
        Step::WriteNext => {
            let (_, text) = SealKey::generate()?;
            write_private(&pki.join(NEXT_KEY), &text)?;
        }
        Step::Begin => write_state(pki, Phase::Begun)?,
        Step::Switch => write_state(pki, Phase::Switched)?,
        Step::Promote => {
            let ring = KeyRing::read(pki)?;
            let (Some(current), Some(next)) = (ring.text(Which::Current), ring.text(Which::Next)) else {
                bail!("{} is missing", pki.join(NEXT_KEY).display());
            };
            if current != next {
                write_private(&pki.join(PREV_KEY), current)?;
                write_private(&pki.join(SEAL_KEY_FILE), next)?;
            }
        }
        Step::RemoveState => remove(pki, STATE_FILE)?,
        Step::RemoveNext => remove(pki, NEXT_KEY)?,
        Step::RemovePrev => remove(pki, PREV_KEY)?,
    }
    // Makes renames and removals durable; not every filesystem allows it.
    let _ = fs::File::open(pki).and_then(|d| d.sync_all());
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
