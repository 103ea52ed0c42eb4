//! A signing CA kept in a certificate file and a key file, followed while running
//! (upstream's `dynamiccertificates` loader behind the CSR signer's `caProvider`).
//!
//! The certificate file may hold several CA certificates (a rotation): the one matching the
//! key signs ([`kustos_ca::SignerBundle`]). [`CaFiles::current`] looks at the files' metadata
//! on every call (cheap) and reads them again only when it changed (or was written in the last
//! two seconds, which coarse file timestamps cannot tell apart), so the next certificate after
//! a change is signed with the new CA; [`CaFiles::poll`] does the same on a timer so a
//! bad file is reported even when nothing is being signed. A pair that does not load is
//! reported once (file names and the reason, never key material) and the last good CA
//! keeps signing. [`reload`] is the whole policy.
//!
//! During a CA rotation (`kustos ca rotate`), `rotation.json` beside the certificate file may
//! cap the lifetime of what the signer issues ([`signer_cap`], [`CaFiles::issue_cap`]).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kustos_ca::SignerBundle;

/// The CA rotation's state file, beside the CA certificate file.
pub const ROTATION_FILE: &str = "rotation.json";
/// Its field holding the longest lifetime the signer issues, in seconds.
pub const SIGNER_MAX_DURATION_FIELD: &str = "signerMaxDurationSeconds";

/// The signer's cap in the text of [`ROTATION_FILE`]: `None` when absent, not positive, or
/// the text is not JSON.
pub fn signer_cap(state_json: &str) -> Option<chrono::Duration> {
    let v: serde_json::Value = serde_json::from_str(state_json).ok()?;
    let secs = v.get(SIGNER_MAX_DURATION_FIELD)?.as_i64().filter(|s| *s > 0)?;
    chrono::Duration::try_seconds(secs)
}

/// `duration` capped by `cap`, never below [`kustos_ca::csr::MIN_DURATION`].
pub fn capped(duration: chrono::Duration, cap: Option<chrono::Duration>) -> chrono::Duration {
    match cap {
        Some(cap) if cap < duration => cap.max(kustos_ca::csr::MIN_DURATION),
        _ => duration,
    }
}

/// Why a certificate and key file pair does not load. One line naming the files, never key
/// material. The message includes the underlying error (it is not also a `source`, so that a
/// chain printed in full does not say it twice).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CaFilesError {
    /// A file could not be read.
    #[error("reading {}: {error}", path.display())]
    Read { path: PathBuf, error: Arc<std::io::Error> },
    /// A file is not UTF-8.
    #[error("{} or {} is not PEM text", cert.display(), key.display())]
    NotText { cert: PathBuf, key: PathBuf },
    /// The PEM does not make a signing CA (no certificate, a bad key, a key of none of the
    /// certificates...).
    #[error("loading the CA from {} and {}: {error}", cert.display(), key.display())]
    Bundle { cert: PathBuf, key: PathBuf, error: kustos_ca::Error },
}

/// What to do with the files' contents.
#[derive(Debug)]
pub enum Reload {
    /// The same bytes as last time.
    Unchanged,
    /// A new pair that loads: sign with it from now on.
    Replace(Box<SignerBundle>),
    /// The pair does not load (the reason); keep signing with the last good CA.
    Reject(CaFilesError),
}

/// Decide from the contents last seen (`None` before the first load) and the files' current
/// contents (or why they could not be read).
pub fn reload(
    seen: Option<(&[u8], &[u8])>,
    cert: Result<&[u8], CaFilesError>,
    key: Result<&[u8], CaFilesError>,
    names: (&Path, &Path),
) -> Reload {
    let (cert, key) = match (cert, key) {
        (Ok(c), Ok(k)) => (c, k),
        (Err(e), _) | (_, Err(e)) => return Reload::Reject(e),
    };
    if seen == Some((cert, key)) {
        return Reload::Unchanged;
    }
    match bundle(cert, key, names) {
        Ok(b) => Reload::Replace(Box::new(b)),
        Err(e) => Reload::Reject(e),
    }
}

/// The signing CA of the pair's contents.
fn bundle(cert: &[u8], key: &[u8], names: (&Path, &Path)) -> Result<SignerBundle, CaFilesError> {
    let (cert_path, key_path) = (names.0.to_path_buf(), names.1.to_path_buf());
    let (Ok(cert_text), Ok(key_text)) = (std::str::from_utf8(cert), std::str::from_utf8(key)) else {
        return Err(CaFilesError::NotText { cert: cert_path, key: key_path });
    };
    SignerBundle::from_pem(cert_text, key_text).map_err(|error| CaFilesError::Bundle {
        cert: cert_path,
        key: key_path,
        error,
    })
}

/// Identity and version of a file: changes whenever it is rewritten or replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// Modification times closer to now than this are not trusted to reveal a change: file
/// systems keep coarse timestamps, so a second write of the same size in the same tick
/// leaves the metadata as it was. Such files are compared by content.
const RACY: Duration = Duration::from_secs(2);

impl Stamp {
    /// Whether the metadata alone tells changes apart (no write within [`RACY`] of `now`).
    fn settled(&self, now: std::time::SystemTime) -> bool {
        let now = now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let secs = |(s, ns): (i64, i64)| s as f64 + ns as f64 / 1e9;
        secs(self.mtime).max(secs(self.ctime)) + RACY.as_secs_f64() < now
    }

    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

struct State {
    stamps: Option<(Stamp, Stamp)>,
    seen: (Vec<u8>, Vec<u8>),
    current: Arc<SignerBundle>,
    problem: Option<String>,
}

/// A CA certificate and key file pair.
pub struct CaFiles {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<State>,
}

impl std::fmt::Debug for CaFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaFiles").field("cert", &self.cert).field("key", &self.key).finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, CaFilesError> {
    std::fs::read(path).map_err(|e| CaFilesError::Read { path: path.to_path_buf(), error: Arc::new(e) })
}

impl CaFiles {
    /// Load the pair; an error (one line, no key material) when it does not load.
    pub fn load(cert: &Path, key: &Path) -> Result<CaFiles, CaFilesError> {
        let stamps = Stamp::of(cert).zip(Stamp::of(key));
        let (c, k) = (read(cert)?, read(key)?);
        let current = Arc::new(bundle(&c, &k, (cert, key))?);
        Ok(CaFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            state: Mutex::new(State { stamps, seen: (c, k), current, problem: None }),
        })
    }

    pub fn paths(&self) -> (&Path, &Path) {
        (&self.cert, &self.key)
    }

    /// The CA to sign with now: re-read first when either file changed. Reads small files
    /// synchronously, only after a change.
    /// The cap [`ROTATION_FILE`] beside the certificate file sets, read at each call
    /// (signing is rare; the file is small).
    pub fn issue_cap(&self) -> Option<chrono::Duration> {
        let dir = self.cert.parent()?;
        let text = std::fs::read_to_string(dir.join(ROTATION_FILE)).ok()?;
        signer_cap(&text)
    }

    pub fn current(&self) -> Arc<SignerBundle> {
        // Metadata first, contents second: a change after the stat is seen next time.
        let stamps = Stamp::of(&self.cert).zip(Stamp::of(&self.key));
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::SystemTime::now();
        let settled = stamps.as_ref().is_some_and(|(c, k)| c.settled(now) && k.settled(now));
        if settled && stamps == state.stamps {
            return state.current.clone();
        }
        let (c, k) = (read(&self.cert), read(&self.key));
        let seen = Some((state.seen.0.as_slice(), state.seen.1.as_slice()));
        let decision =
            reload(seen, c.as_deref().map_err(Clone::clone), k.as_deref().map_err(Clone::clone), self.paths());
        state.stamps = stamps;
        match decision {
            Reload::Unchanged => {}
            Reload::Replace(b) => {
                state.current = Arc::from(b);
                state.problem = None;
                if let (Ok(c), Ok(k)) = (c, k) {
                    state.seen = (c, k);
                }
                tracing::info!(
                    cert = %self.cert.display(),
                    key = %self.key.display(),
                    signer = %state.current.signer().common_name(),
                    not_after = %state.current.signer().not_after(),
                    "loaded the new signing CA"
                );
            }
            Reload::Reject(problem) => {
                // Reported once per distinct message.
                let problem = problem.to_string();
                if state.problem.as_ref() != Some(&problem) {
                    tracing::warn!(problem = %problem, "the signing CA files do not load; the last good CA keeps signing");
                    state.problem = Some(problem);
                }
                // Remember the bad contents so that they are not parsed again.
                if let (Ok(c), Ok(k)) = (c, k) {
                    state.seen = (c, k);
                }
            }
        }
        state.current.clone()
    }

    /// Check the files every `every` until the task is dropped, on the file-work thread
    /// (`kustos_filework`).
    pub async fn poll(self: Arc<Self>, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            let files = self.clone();
            // A check that panicked is tried again next time, like any other.
            let _ = kustos_filework::run(move || {
                files.current();
            })
            .await;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::{Duration as ChronoDuration, Utc};
    use kustos_ca::Ca;

    struct World {
        old: Ca,
        new: Ca,
    }

    fn world() -> World {
        World {
            old: Ca::generate("old-ca", ChronoDuration::days(365), Utc::now()).unwrap(),
            new: Ca::generate("new-ca", ChronoDuration::days(365), Utc::now()).unwrap(),
        }
    }

    type Files = fn(&World) -> (Result<String, CaFilesError>, Result<String, CaFilesError>);
    /// name, seen (cert, key) or none, files now, wanted: "unchanged", "replace <signer CN>",
    /// or "reject <text>".
    const CASES: &[(&str, Option<Files>, Files, &str)] = &[
        ("first load", None, |w| (Ok(w.old.cert_pem().into()), Ok(w.old.key_pem())), "replace old-ca"),
        (
            "same bytes again",
            Some(|w| (Ok(w.old.cert_pem().into()), Ok(w.old.key_pem()))),
            |w| (Ok(w.old.cert_pem().into()), Ok(w.old.key_pem())),
            "unchanged",
        ),
        (
            "rotated: new and old certificates, new key",
            Some(|w| (Ok(w.old.cert_pem().into()), Ok(w.old.key_pem()))),
            |w| (Ok(format!("{}{}", w.new.cert_pem(), w.old.cert_pem())), Ok(w.new.key_pem())),
            "replace new-ca",
        ),
        (
            "certificate file written first: the old key still matches a certificate",
            Some(|w| (Ok(w.old.cert_pem().into()), Ok(w.old.key_pem()))),
            |w| (Ok(format!("{}{}", w.new.cert_pem(), w.old.cert_pem())), Ok(w.old.key_pem())),
            "replace old-ca",
        ),
        (
            "key file written first: it matches no certificate yet",
            Some(|w| (Ok(w.old.cert_pem().into()), Ok(w.old.key_pem()))),
            |w| (Ok(w.old.cert_pem().into()), Ok(w.new.key_pem())),
            "reject does not belong",
        ),
        (
            "garbage certificate file",
            Some(|w| (Ok(w.old.cert_pem().into()), Ok(w.old.key_pem()))),
            |w| (Ok("garbage".into()), Ok(w.old.key_pem())),
            "reject no CERTIFICATE block",
        ),
        (
            "key file gone",
            Some(|w| (Ok(w.old.cert_pem().into()), Ok(w.old.key_pem()))),
            |w| {
                let gone = std::io::Error::from_raw_os_error(2);
                (Ok(w.old.cert_pem().into()), Err(CaFilesError::Read { path: "ca.key".into(), error: Arc::new(gone) }))
            },
            "reject No such file",
        ),
    ];

    #[test]
    fn reload_decisions() {
        let w = world();
        let names = (Path::new("ca.crt"), Path::new("ca.key"));
        for (name, seen, now, want) in CASES {
            let seen = seen.map(|f| {
                let (c, k) = f(&w);
                (c.unwrap().into_bytes(), k.unwrap().into_bytes())
            });
            let (c, k) = now(&w);
            let got = reload(
                seen.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
                c.as_deref().map(str::as_bytes).map_err(Clone::clone),
                k.as_deref().map(str::as_bytes).map_err(Clone::clone),
                names,
            );
            let got = match got {
                Reload::Unchanged => "unchanged".to_string(),
                Reload::Replace(b) => format!("replace {}", b.signer().common_name()),
                Reload::Reject(e) => {
                    let e = e.to_string();
                    assert!(!e.contains("PRIVATE KEY"), "{name}: no key material in {e}");
                    format!("reject {e}")
                }
            };
            let (kind, text) = want.split_once(' ').unwrap_or((want, ""));
            assert!(got.starts_with(kind) && got.contains(text), "{name}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn files_are_followed_and_a_bad_pair_keeps_the_last_good_ca() {
        let w = world();
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (dir.path().join("ca.crt"), dir.path().join("ca.key"));
        std::fs::write(&crt, w.old.cert_pem()).unwrap();
        std::fs::write(&key, w.old.key_pem()).unwrap();
        let files = CaFiles::load(&crt, &key).unwrap();
        // name, new cert file (None: keep), new key file (None: keep), wanted signer.
        type Step = (&'static str, Option<String>, Option<String>, &'static str);
        let steps: Vec<Step> = vec![
            ("at start", None, None, "old-ca"),
            ("garbage: the last good CA signs", Some("garbage".into()), None, "old-ca"),
            ("rotation: certificates first", Some(format!("{}{}", w.new.cert_pem(), w.old.cert_pem())), None, "old-ca"),
            ("then the new key", None, Some(w.new.key_pem()), "new-ca"),
            (
                "a key of no certificate in the file",
                None,
                Some(Ca::generate("x", ChronoDuration::days(1), Utc::now()).unwrap().key_pem()),
                "new-ca",
            ),
            ("back to the old pair", Some(w.old.cert_pem().into()), Some(w.old.key_pem()), "old-ca"),
        ];
        for (name, c, k, want) in steps {
            if let Some(c) = c {
                std::fs::write(&crt, c).unwrap();
            }
            if let Some(k) = k {
                std::fs::write(&key, k).unwrap();
            }
            assert_eq!(files.current().signer().common_name(), want, "{name}");
        }
        std::fs::remove_file(&key).unwrap();
        assert_eq!(files.current().signer().common_name(), "old-ca", "key file removed");
        assert!(CaFiles::load(&crt, &key).unwrap_err().to_string().contains("ca.key"), "loading fails naming the file");
    }

    #[test]
    fn signer_cap_and_capping() {
        let h = chrono::Duration::hours;
        let cases: &[(&str, Option<i64>)] = &[
            (r#"{"phase":"switched","signerMaxDurationSeconds":3600}"#, Some(3600)),
            (r#"{"phase":"switched"}"#, None),
            (r#"{"signerMaxDurationSeconds":0}"#, None),
            (r#"{"signerMaxDurationSeconds":-5}"#, None),
            (r#"{"signerMaxDurationSeconds":"3600"}"#, None),
            ("not json", None),
        ];
        for (text, want) in cases {
            assert_eq!(signer_cap(text), want.map(chrono::Duration::seconds), "{text}");
        }
        let cases = [
            (h(8760), None, h(8760)),
            (h(8760), Some(h(24)), h(24)),
            (h(1), Some(h(24)), h(1)),
            (h(1), Some(chrono::Duration::seconds(1)), kustos_ca::csr::MIN_DURATION),
        ];
        for (duration, cap, want) in cases {
            assert_eq!(capped(duration, cap), want, "{duration} capped by {cap:?}");
        }
    }
}
