//! Following the client CA file (`DIR/pki/ca.crt`) while serving, so that a CA rotation
//! takes effect without a restart.
//!
//! The file is polled. Its CA certificates that have not expired are the trust set of the
//! x509 authenticator and the CA subjects the TLS handshake hints (Go clients only send a
//! client certificate whose issuer is hinted). A file that does not load (a half-written
//! rotation, garbage, no unexpired CA) is reported once and the last good CA certificates
//! stay; they still leave the trust set as they expire. [`decide`] is the whole policy; the
//! loop in [`spawn`] only reads the file, logs and applies.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kustos_ca::bundle::{ca_certificates, BundleCert};
use rustls::ServerConfig;
use tokio::sync::watch;

use super::AuthnChain;

/// What the reloader knows between two polls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    /// The CA certificates of the last file that loaded.
    pub last_good: Vec<BundleCert>,
    /// The trust set in use, DER.
    pub active: Vec<Vec<u8>>,
}

impl State {
    /// The state right after start: `cas` loaded, trusting those unexpired at `now`.
    pub fn new(cas: Vec<BundleCert>, now: DateTime<Utc>) -> State {
        let active = unexpired(&cas, now);
        State { last_good: cas, active }
    }
}

/// What to do after one poll.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Remember these as the last good CA certificates.
    pub remember: Option<Vec<BundleCert>>,
    /// Trust exactly these CA certificates (DER) from now on; `None`: no change.
    pub replace: Option<Vec<Vec<u8>>>,
    /// Why the file was not used (the last good CA certificates were), if it was not.
    pub problem: Option<Problem>,
}

/// Why the client CA file was not used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// The file could not be read (the I/O error's message).
    #[error("reading the file: {0}")]
    Unreadable(String),
    /// Its contents are not a CA bundle.
    #[error(transparent)]
    Invalid(#[from] kustos_ca::Error),
    #[error("every CA certificate in it has expired")]
    AllExpired,
}

fn unexpired(cas: &[BundleCert], now: DateTime<Utc>) -> Vec<Vec<u8>> {
    cas.iter().filter(|c| c.unexpired_at(now)).map(|c| c.der.clone()).collect()
}

/// Decide from the file's contents (or why it could not be read) at `now`.
pub fn decide(state: &State, file: Result<&str, &std::io::Error>, now: DateTime<Utc>) -> Decision {
    let loaded = match file {
        Ok(text) => match ca_certificates(text) {
            Ok(cas) if unexpired(&cas, now).is_empty() => Err(Problem::AllExpired),
            Ok(cas) => Ok(cas),
            Err(e) => Err(Problem::Invalid(e)),
        },
        Err(e) => Err(Problem::Unreadable(e.to_string())),
    };
    let (remember, problem, source) = match loaded {
        Ok(cas) => {
            let remember = (cas != state.last_good).then(|| cas.clone());
            (remember, None, cas)
        }
        Err(problem) => (None, Some(problem), state.last_good.clone()),
    };
    let active = unexpired(&source, now);
    Decision { remember, replace: (active != state.active).then_some(active), problem }
}

/// The serving certificate chain and key files, followed too (a CA rotation re-issues them).
#[derive(Clone)]
pub struct Serving {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    /// The chain and key (PEM) in use.
    pub current: (String, String),
}

/// The serving pair to use from now on, given the one in use and the files' contents: `None`
/// when they are the same, unreadable, or do not belong together (a pair caught between its
/// two writes: the next poll sees it whole).
pub fn serving_decision(
    current: &(String, String),
    cert: Option<String>,
    key: Option<String>,
) -> Option<(String, String)> {
    let (cert, key) = (cert?, key?);
    if (cert.as_str(), key.as_str()) == (current.0.as_str(), current.1.as_str()) {
        return None;
    }
    if !crate::pki::rotation::key_matches(&cert, &key) {
        return None;
    }
    // Normalized to PKCS#8 for the TLS layer, as at start.
    let key = kustos_ca::KeyPair::from_pem(&key).ok()?.private_key_pem();
    (cert != current.0 || key != current.1).then_some((cert, key))
}

/// Called with the trust bundle (DER) whenever it changes (e.g. to publish it).
pub type OnTrust = Box<dyn Fn(&[Vec<u8>]) + Send + Sync>;

/// Poll `path` every `every` until the TLS configuration's receivers are gone (the serve
/// loop ended); apply each [`Decision`] to the authenticator and the TLS hints. The serving
/// files are followed the same way; the TLS configuration is rebuilt when either changes.
/// Run by the server's supervisor as `client-ca-files`.
pub async fn follow(
    path: PathBuf,
    mut state: State,
    authn: Arc<AuthnChain>,
    tls: watch::Sender<Arc<ServerConfig>>,
    mut serving: Serving,
    every: Duration,
    on_trust: OnTrust,
) -> anyhow::Result<()> {
    let mut reported: Option<Problem> = None;
    loop {
        tokio::select! {
            _ = tls.closed() => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
        let cert = kustos_filework::read_to_string(serving.cert_path.clone()).await.ok();
        let key = kustos_filework::read_to_string(serving.key_path.clone()).await.ok();
        if let Some(pair) = serving_decision(&serving.current, cert, key) {
            match crate::http::serve::tls_config_with(&pair.0, &pair.1, &state.active) {
                Ok(config) => {
                    tls.send_replace(config);
                    tracing::info!(file = %serving.cert_path.display(), "serving the new certificate");
                    serving.current = pair;
                }
                Err(e) => {
                    tracing::warn!(file = %serving.cert_path.display(), error = %e, "the new serving certificate does not load")
                }
            }
        }
        let read = kustos_filework::read_to_string(path.clone()).await;
        let d = decide(&state, read.as_deref(), Utc::now());
        if d.problem != reported {
            match &d.problem {
                Some(p) => tracing::warn!(
                    file = %path.display(),
                    problem = %p,
                    "the client CA file does not load; keeping the last good CA certificates"
                ),
                None => tracing::info!(file = %path.display(), "the client CA file loads again"),
            }
            reported = d.problem.clone();
        }
        if let Some(cas) = d.remember {
            state.last_good = cas;
        }
        let Some(trust) = d.replace else { continue };
        let applied = authn.x509().map_or(Ok(()), |x| x.set_trust(&trust)).and_then(|()| {
            let config = crate::http::serve::tls_config_with(&serving.current.0, &serving.current.1, &trust)?;
            tls.send_replace(config);
            Ok(())
        });
        match applied {
            Ok(()) => {
                tracing::info!(file = %path.display(), cas = trust.len(), "trusting the new client CA bundle");
                on_trust(&trust);
                state.active = trust;
            }
            Err(e) => tracing::warn!(file = %path.display(), error = %e, "applying the client CA bundle failed"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone as _};
    use kustos_ca::Ca;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 6, 1, 0, 0, 0).unwrap()
    }

    struct World {
        old: Ca,
        new: Ca,
        /// Valid for 30 days from t0.
        short: Ca,
    }

    fn world() -> World {
        World {
            old: Ca::generate("old", Duration::days(3650), t0() - Duration::days(365)).unwrap(),
            new: Ca::generate("new", Duration::days(3650), t0()).unwrap(),
            short: Ca::generate("short", Duration::days(30), t0()).unwrap(),
        }
    }

    fn cas(pems: &[&str]) -> Vec<BundleCert> {
        ca_certificates(&pems.concat()).unwrap()
    }

    fn cns(ders: &[Vec<u8>]) -> Vec<String> {
        ders.iter().map(|d| kustos_ca::parse_certificate_der(d).unwrap().common_name).collect()
    }

    type Case = (
        &'static str,
        // state before: the CAs loaded last (their unexpired ones active)
        fn(&World) -> Vec<BundleCert>,
        // the file: its text, or why it could not be read
        fn(&World) -> Result<String, std::io::Error>,
        // days after t0
        i64,
        // wanted: new trust set (CNs) or None, remembered (CNs) or None, problem text or ""
        Option<&'static [&'static str]>,
        Option<&'static [&'static str]>,
        &'static str,
    );

    const CASES: &[Case] = &[
        (
            "unchanged file: nothing to do",
            |w| cas(&[w.old.cert_pem()]),
            |w| Ok(w.old.cert_pem().into()),
            0,
            None,
            None,
            "",
        ),
        (
            "a new CA added: both trusted",
            |w| cas(&[w.old.cert_pem()]),
            |w| Ok(format!("{}{}", w.new.cert_pem(), w.old.cert_pem())),
            0,
            Some(&["new", "old"]),
            Some(&["new", "old"]),
            "",
        ),
        (
            "the old CA removed: only the new one",
            |w| cas(&[w.new.cert_pem(), w.old.cert_pem()]),
            |w| Ok(w.new.cert_pem().into()),
            0,
            Some(&["new"]),
            Some(&["new"]),
            "",
        ),
        (
            "garbage: the last good set stays",
            |w| cas(&[w.old.cert_pem()]),
            |_| Ok("garbage".into()),
            0,
            None,
            None,
            "no CERTIFICATE block",
        ),
        (
            "unreadable: the last good set stays",
            |w| cas(&[w.old.cert_pem()]),
            |_| Err(std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory")),
            0,
            None,
            None,
            "reading the file: No such file",
        ),
        (
            "a file of expired CAs is not used",
            |w| cas(&[w.old.cert_pem()]),
            |w| Ok(w.short.cert_pem().into()),
            31,
            None,
            None,
            "expired",
        ),
        (
            "a CA of the last good set expires while the file is bad",
            |w| cas(&[w.short.cert_pem(), w.old.cert_pem()]),
            |_| Ok("garbage".into()),
            31,
            Some(&["old"]),
            None,
            "no CERTIFICATE block",
        ),
        (
            "a CA of a good file expires: it leaves the trust set",
            |w| cas(&[w.short.cert_pem(), w.new.cert_pem()]),
            |w| Ok(format!("{}{}", w.short.cert_pem(), w.new.cert_pem())),
            31,
            Some(&["new"]),
            None,
            "",
        ),
    ];

    #[test]
    fn reload_decisions() {
        let w = world();
        for (name, before, file, days, want_trust, want_remember, want_problem) in CASES {
            // The state as it was at t0, then polled `days` later.
            let state = State::new(before(&w), t0());
            let text = file(&w);
            let d = decide(&state, text.as_deref(), t0() + Duration::days(*days));
            assert_eq!(
                d.replace.as_deref().map(cns),
                want_trust.map(|v| v.iter().map(|s| s.to_string()).collect()),
                "{name}: trust"
            );
            assert_eq!(
                d.remember.as_ref().map(|c| c.iter().map(|b| b.info.common_name.clone()).collect::<Vec<_>>()),
                want_remember.map(|v| v.iter().map(|s| s.to_string()).collect()),
                "{name}: remembered"
            );
            match (&d.problem, want_problem.is_empty()) {
                (None, true) => {}
                (Some(p), false) => assert!(p.to_string().contains(want_problem), "{name}: problem {p}"),
                (got, _) => panic!("{name}: problem {got:?}, want {want_problem:?}"),
            }
        }
    }
}
