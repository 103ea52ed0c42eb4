//! The record's generation: every write of the shared record carries the generation of the
//! record it replaces plus one (sealed, so only a holder of the key can set it), and each
//! apiserver remembers the highest it has seen, with a digest of that record's value, in
//! `DIR/pki/sync-generation.json` (0600, written atomically before the record's files are
//! taken). A record older than that, or as old but different (a fork: one history written
//! over a restored backup), is refused ([`judge`]): putting an old record back into etcd, or
//! restoring an old etcd backup, cannot re-install a retired CA or service-account key.
//!
//! Writes are compare-and-swap on the record's etcd revision, so in one etcd history each
//! generation is written once. A record sealed before generations existed counts as
//! generation 0: accepted by an apiserver that has seen none yet, and sealed again as
//! generation 1 at once.
//!
//! In: the record's generation and digest, the file. Out: a verdict, the file.

use std::path::Path;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::super::{read_optional, write_private};

/// The file in `DIR/pki/`.
pub const FILE: &str = "sync-generation.json";

/// `sync-generation.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    /// The highest generation this apiserver has seen (taken or written).
    pub generation: u64,
    /// SHA-256 of the value of the record of that generation.
    pub digest: String,
    /// The last record this apiserver refused, for `kustos ca status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// A refused record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The refused record's generation (0: one without a generation).
    pub generation: u64,
    /// The highest generation seen then.
    pub highest: u64,
    /// As old as the highest, but another record.
    #[serde(default)]
    pub fork: bool,
    /// A record none of this apiserver's sync keys open (its generation is unknown).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unopened: bool,
    pub at: DateTime<Utc>,
    /// The generation this apiserver sealed its own PKI again as, over the refused record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resealed_as: Option<u64>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.unopened {
            write!(
                f,
                "refused a record that does not open with this apiserver's sync keys (one sealed under a sync key \
                 retired since, put back?), after generation {} this apiserver saw",
                self.highest
            )?;
        } else if self.fork {
            write!(
                f,
                "refused a record of generation {} that differs from the one this apiserver saw",
                self.generation
            )?;
        } else {
            write!(
                f,
                "refused a record of generation {}, older than generation {} this apiserver saw (an old record or \
                 etcd backup put back?)",
                self.generation, self.highest
            )?;
        }
        write!(f, " at {}", self.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))?;
        if let Some(g) = self.resealed_as {
            write!(f, "; kept this apiserver's PKI and sealed it again as generation {g}")?;
        }
        Ok(())
    }
}

/// What to do with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Older than the highest generation seen.
    Older,
    /// As old as the highest generation seen, and another record.
    Fork,
}

/// A record of `generation` whose value has `digest`, given what this apiserver saw.
pub fn judge(seen: Option<&Seen>, generation: u64, digest: &str) -> Verdict {
    match seen {
        None => Verdict::Accept,
        Some(s) if generation > s.generation => Verdict::Accept,
        Some(s) if generation == s.generation && digest == s.digest => Verdict::Accept,
        Some(s) if generation == s.generation => Verdict::Fork,
        Some(_) => Verdict::Older,
    }
}

/// The generation of the next write over a record of `record` (`None`: without one).
pub fn next(seen: Option<&Seen>, record: Option<u64>) -> u64 {
    record.unwrap_or(0).max(seen.map_or(0, |s| s.generation)).saturating_add(1)
}

pub fn read(pki: &Path) -> anyhow::Result<Option<Seen>> {
    let path = pki.join(FILE);
    match read_optional(&path)? {
        None => Ok(None),
        Some(text) => {
            serde_json::from_str(&text).map(Some).with_context(|| format!("{} does not parse", path.display()))
        }
    }
}

pub fn write(pki: &Path, seen: &Seen) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(seen).context("encoding the generation seen")?;
    write_private(&pki.join(FILE), &(text + "\n"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn seen(generation: u64, digest: &str) -> Seen {
        Seen { generation, digest: digest.into(), refused: None }
    }

    #[test]
    fn records_are_judged_by_generation_and_digest() {
        let cases: Vec<(&str, Option<Seen>, u64, &str, Verdict)> = vec![
            ("nothing seen yet: anything", None, 3, "x", Verdict::Accept),
            ("nothing seen, a record without a generation", None, 0, "x", Verdict::Accept),
            ("newer", Some(seen(5, "a")), 6, "b", Verdict::Accept),
            ("much newer", Some(seen(5, "a")), 60, "b", Verdict::Accept),
            ("the same record", Some(seen(5, "a")), 5, "a", Verdict::Accept),
            ("the same generation, another record", Some(seen(5, "a")), 5, "b", Verdict::Fork),
            ("older", Some(seen(5, "a")), 4, "c", Verdict::Older),
            ("a record without a generation once one was seen", Some(seen(1, "a")), 0, "c", Verdict::Older),
            ("a migrated record seen as 0, the same again", Some(seen(0, "a")), 0, "a", Verdict::Accept),
        ];
        for (what, s, generation, digest, want) in cases {
            assert_eq!(judge(s.as_ref(), generation, digest), want, "{what}");
        }
    }

    #[test]
    fn the_next_write_is_one_past_the_highest() {
        assert_eq!(next(None, None), 1, "the first write, or the upgrade of an old record");
        assert_eq!(next(None, Some(4)), 5);
        assert_eq!(next(Some(&seen(7, "a")), Some(2)), 8, "over a refused record: past what was seen");
        assert_eq!(next(Some(&seen(u64::MAX, "a")), None), u64::MAX);
    }

    #[test]
    fn the_file_is_private_and_round_trips() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read(tmp.path()).unwrap(), None);
        let s = Seen {
            refused: Some(Refusal {
                generation: 2,
                highest: 5,
                fork: false,
                unopened: false,
                at: Utc::now(),
                resealed_as: Some(6),
            }),
            ..seen(6, "d")
        };
        write(tmp.path(), &s).unwrap();
        let mut back = read(tmp.path()).unwrap().unwrap();
        back.refused.as_mut().unwrap().at = s.refused.as_ref().unwrap().at;
        assert_eq!(back.generation, 6);
        let mode = std::fs::metadata(tmp.path().join(FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = s.refused.unwrap().to_string();
        assert!(text.contains("generation 2, older than generation 5") && text.contains("as generation 6"), "{text}");
        std::fs::write(tmp.path().join(FILE), "{").unwrap();
        assert!(format!("{:#}", read(tmp.path()).unwrap_err()).contains(FILE));
    }
}
