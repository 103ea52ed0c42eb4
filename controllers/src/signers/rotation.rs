//! The CA rotation of a [`Signer`](kustos_crds::Signer), as changes to its CA Secret's data:
//! each step is one write of the Secret (with its resourceVersion), so a rotation is a
//! sequence of durable states, and a step run again after it happened changes nothing.
//!
//! - begin: `next.crt`/`next.key` are added (a new CA, or an imported one): published in the
//!   Signer's ClusterTrustBundle, not signing yet;
//! - switch: the next CA signs (`tls.crt`/`tls.key`), the one before stays published as
//!   `previous.crt`;
//! - finish: `previous.crt` goes (the caller checks first that no certificate it issued is
//!   still valid, or is told to force).
//!
//! Pod certificates leave no trace to count (their requests are deleted 30 minutes after
//! creation, the certificates live on in pods), so `switch` also records on the Secret
//! ([`POD_CERTIFICATES_UNTIL`]) when the last pod certificate the previous CA may have
//! signed expires: the switch, plus `podCertificates.maxExpirationSeconds`, plus
//! [`SWITCH_MARGIN`] for the controller to stop signing from it. `finish` waits for that time
//! ([`pod_certificates_wait`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::ByteString;
use kustos_ca::Ca;
use kustos_crds::signer::PodCertificates;

use super::{CERT, KEY, NEXT_CERT, NEXT_KEY, PREVIOUS_CERT};

/// How long a rotated-in CA made here is valid.
const NEW_CA_VALIDITY_DAYS: i64 = 3650;
/// The annotation `switch` sets on the CA Secret: until when (RFC 3339) a pod certificate
/// the previous CA signed may be valid. `finish` removes it.
pub const POD_CERTIFICATES_UNTIL: &str = "kustos.dev/previous-ca-pod-certificates-until";
/// How long after a switch the previous CA may still sign a pod certificate, with room for
/// clocks that disagree: the controller reads the Secret at once on the Signer's annotation
/// and signs only from a reading younger than [`super::pod_certificates::FRESH_FOR`].
pub const SWITCH_MARGIN: Duration = Duration::minutes(5);

/// The value of [`POD_CERTIFICATES_UNTIL`] for a switch at `now` of a Signer signing pod
/// certificates as `pod` says; `None` when it signs none.
pub fn pod_certificates_until(pod: Option<&PodCertificates>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    pod.map(|p| now + Duration::seconds(i64::from(p.max_expiration_seconds())) + SWITCH_MARGIN)
}

/// Until when `finish` must wait for the previous CA's pod certificates to expire, given the
/// annotation's value: `Ok(None)` when none may be valid at `now`.
pub fn pod_certificates_wait(annotation: Option<&str>, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, String> {
    let Some(value) = annotation else { return Ok(None) };
    let until = DateTime::parse_from_rfc3339(value.trim())
        .map_err(|e| format!("the annotation {POD_CERTIFICATES_UNTIL} ({value:?}) is not an RFC 3339 time: {e}"))?
        .with_timezone(&Utc);
    Ok((until > now).then_some(until))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Begin,
    Switch,
    Finish,
}

/// Where a Signer's CA Secret is in a rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    None,
    Begun,
    Switched,
}

fn has(data: &BTreeMap<String, ByteString>, key: &str) -> bool {
    data.get(key).is_some_and(|v| !v.0.is_empty())
}

pub fn phase(data: &BTreeMap<String, ByteString>) -> Phase {
    if has(data, NEXT_CERT) {
        Phase::Begun
    } else if has(data, PREVIOUS_CERT) {
        Phase::Switched
    } else {
        Phase::None
    }
}

/// The Secret data after `step`, or `None` when the step is done already. `import` is the
/// CA (certificate and key PEM) `begin` adds instead of a new one; `signer_name` names a new
/// one.
pub fn apply(
    data: &BTreeMap<String, ByteString>,
    step: Step,
    import: Option<(&str, &str)>,
    signer_name: &str,
    now: DateTime<Utc>,
) -> Result<Option<BTreeMap<String, ByteString>>, String> {
    let mut out = data.clone();
    match (step, phase(data)) {
        (Step::Begin, Phase::Begun) => {
            if let Some((cert, _)) = import {
                let want = kustos_ca::certificates_from_pem(cert).map_err(|e| format!("the imported CA: {e}"))?;
                let have = data.get(NEXT_CERT).map(|b| String::from_utf8_lossy(&b.0).into_owned()).unwrap_or_default();
                if kustos_ca::certificates_from_pem(&have).ok().and_then(|v| v.into_iter().next())
                    != want.into_iter().next()
                {
                    return Err("a rotation to another CA is begun already; switch and finish it first".into());
                }
            }
            Ok(None)
        }
        (Step::Begin, Phase::Switched) => {
            Err("the previous rotation is not finished: run `kustos ca rotate finish --signer` first".into())
        }
        (Step::Begin, Phase::None) => {
            let ca = match import {
                Some((cert, key)) => Ca::from_pem(cert, key).map_err(|e| format!("the imported CA: {e}"))?,
                None => Ca::generate(
                    &format!("{signer_name} CA {}", now.format("%Y%m%dT%H%M%SZ")),
                    chrono::Duration::days(NEW_CA_VALIDITY_DAYS),
                    now,
                )
                .map_err(|e| e.to_string())?,
            };
            if !ca.info().valid_at(now) {
                return Err("the new CA is not valid now".into());
            }
            out.insert(NEXT_CERT.into(), ByteString(ca.cert_pem().as_bytes().to_vec()));
            out.insert(NEXT_KEY.into(), ByteString(ca.key_pem().into_bytes()));
            Ok(Some(out))
        }
        (Step::Switch, Phase::Begun) => {
            let (Some(next_cert), Some(next_key), Some(cert)) =
                (out.remove(NEXT_CERT), out.remove(NEXT_KEY), data.get(CERT).cloned())
            else {
                return Err(format!("the Secret has {NEXT_CERT} without {NEXT_KEY} or without {CERT}"));
            };
            out.insert(PREVIOUS_CERT.into(), cert);
            out.insert(CERT.into(), next_cert);
            out.insert(KEY.into(), next_key);
            Ok(Some(out))
        }
        (Step::Switch, Phase::Switched) => Ok(None),
        (Step::Switch, Phase::None) => Err("no rotation is begun: run `kustos ca rotate begin --signer` first".into()),
        (Step::Finish, Phase::Switched) => {
            out.remove(PREVIOUS_CERT);
            Ok(Some(out))
        }
        (Step::Finish, Phase::Begun) => Err("not switched yet: run `kustos ca rotate switch --signer` first".into()),
        (Step::Finish, Phase::None) => Ok(None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z").unwrap().with_timezone(&Utc)
    }

    fn cn(data: &BTreeMap<String, ByteString>, key: &str) -> Option<String> {
        let pem = String::from_utf8(data.get(key)?.0.clone()).unwrap();
        Some(kustos_ca::parse_certificate_pem(&pem).unwrap().common_name)
    }

    #[test]
    fn a_rotation_runs_begin_switch_finish_and_each_step_again_changes_nothing() {
        let first = Ca::generate("example.com/mesh CA", chrono::Duration::days(30), now()).unwrap();
        let start: BTreeMap<String, ByteString> = [
            (CERT.to_string(), ByteString(first.cert_pem().as_bytes().to_vec())),
            (KEY.to_string(), ByteString(first.key_pem().into_bytes())),
        ]
        .into();
        assert_eq!(phase(&start), Phase::None);
        assert!(apply(&start, Step::Switch, None, "example.com/mesh", now()).unwrap_err().contains("begin"));
        assert_eq!(apply(&start, Step::Finish, None, "example.com/mesh", now()), Ok(None), "nothing to finish");

        let begun = apply(&start, Step::Begin, None, "example.com/mesh", now()).unwrap().unwrap();
        assert_eq!(phase(&begun), Phase::Begun);
        assert_eq!(cn(&begun, CERT).as_deref(), Some("example.com/mesh CA"), "the old CA still signs");
        assert_eq!(cn(&begun, NEXT_CERT).as_deref(), Some("example.com/mesh CA 20261126T120000Z"));
        assert!(super::super::load_ca(&begun, now()).is_ok(), "the Secret loads mid-rotation");
        assert_eq!(apply(&begun, Step::Begin, None, "example.com/mesh", now()), Ok(None), "begin again: done");
        assert!(apply(&begun, Step::Finish, None, "example.com/mesh", now()).unwrap_err().contains("switch"));

        let switched = apply(&begun, Step::Switch, None, "example.com/mesh", now()).unwrap().unwrap();
        assert_eq!(phase(&switched), Phase::Switched);
        assert_eq!(cn(&switched, CERT).as_deref(), Some("example.com/mesh CA 20261126T120000Z"), "the new CA signs");
        assert_eq!(cn(&switched, PREVIOUS_CERT).as_deref(), Some("example.com/mesh CA"), "the old one published");
        assert!(!switched.contains_key(NEXT_KEY) && !switched.contains_key(NEXT_CERT));
        let (signing, _) = super::super::load_ca(&switched, now()).unwrap();
        assert_eq!(
            signing.info().common_name,
            "example.com/mesh CA 20261126T120000Z",
            "key and certificate moved together"
        );
        assert_eq!(apply(&switched, Step::Switch, None, "example.com/mesh", now()), Ok(None), "switch again: done");
        assert!(apply(&switched, Step::Begin, None, "example.com/mesh", now()).unwrap_err().contains("finish"));

        let finished = apply(&switched, Step::Finish, None, "example.com/mesh", now()).unwrap().unwrap();
        assert_eq!(phase(&finished), Phase::None);
        assert_eq!(finished.keys().collect::<Vec<_>>(), [CERT, KEY]);
    }

    #[test]
    fn pod_certificates_of_the_previous_ca_are_waited_for() {
        let pod = PodCertificates { trust_domain: "cluster.local".into(), ..Default::default() };
        let day = Duration::days(1);
        assert_eq!(pod_certificates_until(None, now()), None, "a Signer signing no pod certificates");
        let until = pod_certificates_until(Some(&pod), now()).unwrap();
        assert_eq!(until, now() + day + SWITCH_MARGIN, "the default day, and the margin");
        let short = PodCertificates { max_expiration_seconds: Some(3600), ..pod.clone() };
        assert_eq!(pod_certificates_until(Some(&short), now()), Some(now() + Duration::hours(1) + SWITCH_MARGIN));
        assert!(
            SWITCH_MARGIN > super::super::pod_certificates::FRESH_FOR,
            "the margin covers the controller's stale reading"
        );

        let value = until.to_rfc3339();
        // (what, annotation, at, wait until)
        type Want = Result<Option<DateTime<Utc>>, &'static str>;
        let cases: &[(&str, Option<&str>, DateTime<Utc>, Want)] = &[
            ("no annotation", None, now(), Ok(None)),
            ("right after the switch", Some(&value), now(), Ok(Some(until))),
            ("a second before", Some(&value), until - Duration::seconds(1), Ok(Some(until))),
            ("at the time", Some(&value), until, Ok(None)),
            ("after", Some(&value), until + day, Ok(None)),
            ("garbled", Some("tomorrow"), now(), Err("not an RFC 3339 time")),
        ];
        for (what, annotation, at, want) in cases {
            match (pod_certificates_wait(*annotation, *at), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, *w, "{what}"),
                (Err(got), Err(w)) => assert!(got.contains(w), "{what}: {got}"),
                (got, _) => panic!("{what}: {got:?}"),
            }
        }
    }

    #[test]
    fn begin_imports_a_ca() {
        let first = Ca::generate("first", chrono::Duration::days(30), now()).unwrap();
        let mine = Ca::generate("mine", chrono::Duration::days(30), now()).unwrap();
        let other = Ca::generate("other", chrono::Duration::days(30), now()).unwrap();
        let start: BTreeMap<String, ByteString> = [
            (CERT.to_string(), ByteString(first.cert_pem().as_bytes().to_vec())),
            (KEY.to_string(), ByteString(first.key_pem().into_bytes())),
        ]
        .into();
        let import = (mine.cert_pem(), mine.key_pem());
        let begun = apply(&start, Step::Begin, Some((import.0, &import.1)), "x/y", now()).unwrap().unwrap();
        assert_eq!(cn(&begun, NEXT_CERT).as_deref(), Some("mine"));
        assert_eq!(
            apply(&begun, Step::Begin, Some((import.0, &import.1)), "x/y", now()),
            Ok(None),
            "same import again"
        );
        let other_key = other.key_pem();
        assert!(apply(&begun, Step::Begin, Some((other.cert_pem(), &other_key)), "x/y", now()).is_err(), "another one");
        let mismatched = (mine.cert_pem(), other.key_pem());
        assert!(apply(&start, Step::Begin, Some((mismatched.0, &mismatched.1)), "x/y", now()).is_err(), "key mismatch");
    }
}
