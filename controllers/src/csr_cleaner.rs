//! `csrcleaner`: deletes CertificateSigningRequests that are done or abandoned, as
//! kube-controller-manager's CSR cleaner (`pkg/controller/certificates/cleaner/cleaner.go`).
//!
//! A CSR is deleted once one of these deadlines has passed:
//!
//! | CSR | deadline |
//! | --- | --- |
//! | approved and issued | 1 h after the Approved condition's `lastUpdateTime` |
//! | denied | 1 h after the Denied condition's `lastUpdateTime` |
//! | failed | 1 h after the Failed condition's `lastUpdateTime` |
//! | pending (no conditions) | 24 h after creation |
//! | approved, never issued | 24 h after creation (issue #4's rule; upstream has none) |
//! | approved and issued, a certificate expired | the earliest NotAfter of the PEM blocks |
//!
//! A missing time makes its rule not apply (as upstream's zero times). Rather than listing
//! every CSR every hour like upstream, each CSR is reconciled on its own
//! ([`crate::reconcile`]) when it changes and again at its next deadline. The delete carries
//! the CSR's UID as precondition: NotFound (already gone) and Conflict (a new CSR of the same
//! name) are not errors.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client, ResourceExt as _};
use kustos_ca::csr::condition;

use crate::csr;
use crate::runtime::{self, Action, Backoff};

pub const NAME: &str = "csrcleaner";
pub const APPROVED_EXPIRATION: chrono::Duration = chrono::Duration::hours(1);
pub const DENIED_EXPIRATION: chrono::Duration = chrono::Duration::hours(1);
pub const PENDING_EXPIRATION: chrono::Duration = chrono::Duration::hours(24);

/// What to do with one CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Delete it (precondition: this UID), for this reason.
    Delete { uid: String, reason: &'static str },
    /// Look again at this time (its earliest deadline).
    RecheckAt(DateTime<Utc>),
    /// No rule will ever apply (e.g. no times to go by).
    Keep,
}

/// Every PEM certificate's NotAfter in `status.certificate` (unparseable blocks are skipped).
fn certificate_expiries(pem: &[u8]) -> Vec<DateTime<Utc>> {
    let text = String::from_utf8_lossy(pem);
    kustos_ca::certificates_from_pem(&text)
        .unwrap_or_default()
        .iter()
        .filter_map(|der| kustos_ca::parse_certificate_der(der).ok().map(|i| i.not_after))
        .collect()
}

/// The deadlines of `csr` (reason, time): each passed one is a reason to delete it.
pub fn deadlines(csr: &CertificateSigningRequest) -> Vec<(&'static str, DateTime<Utc>)> {
    let conds = csr::conditions(csr);
    let updated = |type_: &str| -> Vec<DateTime<Utc>> {
        conds
            .iter()
            .filter(|c| c.type_ == type_)
            .filter_map(|c| c.last_update_time.as_ref().and_then(csr::to_chrono))
            .collect()
    };
    let approved = conds.iter().any(|c| c.type_ == condition::APPROVED);
    let issued = !csr::certificate(csr).is_empty();
    let created = csr::creation_time(csr);
    let mut out = Vec::new();
    if issued {
        out.extend(updated(condition::APPROVED).into_iter().map(|t| ("approved and issued", t + APPROVED_EXPIRATION)));
    }
    out.extend(updated(condition::DENIED).into_iter().map(|t| ("denied", t + DENIED_EXPIRATION)));
    out.extend(updated(condition::FAILED).into_iter().map(|t| ("failed", t + DENIED_EXPIRATION)));
    if conds.is_empty() {
        out.extend(created.map(|t| ("pending", t + PENDING_EXPIRATION)));
    }
    if approved && !issued {
        out.extend(created.map(|t| ("approved but never issued", t + PENDING_EXPIRATION)));
    }
    if approved && issued {
        out.extend(certificate_expiries(csr::certificate(csr)).into_iter().map(|t| ("certificate expired", t)));
    }
    out
}

/// Decide for `csr` at `now`: delete once a deadline has passed (strictly, as upstream).
pub fn decide(csr: &CertificateSigningRequest, now: DateTime<Utc>) -> Decision {
    let deadlines = deadlines(csr);
    if let Some((reason, _)) = deadlines.iter().find(|(_, t)| now > *t) {
        return Decision::Delete { uid: csr.metadata.uid.clone().unwrap_or_default(), reason };
    }
    deadlines.iter().map(|(_, t)| *t).min().map_or(Decision::Keep, Decision::RecheckAt)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("deleting CSR {csr}: {source}")]
    Delete {
        csr: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Context {
    csrs: Api<CertificateSigningRequest>,
    backoff: Backoff,
}

impl Context {
    pub fn new(client: Client) -> Self {
        Context { csrs: Api::all(client), backoff: Backoff::default() }
    }
}

impl runtime::Context for Context {
    fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

/// Rechecks happen a little after the deadline, which must have passed strictly.
const AFTER_DEADLINE: Duration = Duration::from_secs(1);

pub async fn reconcile(obj: Arc<CertificateSigningRequest>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = obj.name_any();
    let now = Utc::now();
    match decide(&obj, now) {
        Decision::Keep => Ok(Action::await_change()),
        Decision::RecheckAt(t) => Ok(Action::requeue(runtime::until(t, now, Duration::ZERO) + AFTER_DEADLINE)),
        Decision::Delete { uid, reason } => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
                ..Default::default()
            };
            match ctx.csrs.delete(&name, &dp).await {
                Ok(_) => {
                    tracing::info!(controller = NAME, csr = %name, reason, "cleaned up the CSR");
                    ctx.backoff.forget(&name);
                    Ok(Action::await_change())
                }
                // NotFound: already deleted. Conflict: the UID precondition failed (another
                // CSR of that name), which its own reconcile handles.
                Err(e) if crate::runtime::is_status(&e, 404) || crate::runtime::is_status(&e, 409) => {
                    Ok(Action::await_change())
                }
                Err(source) => Err(Error::Delete { csr: name, source }),
            }
        }
    }
}

/// Run until the task is dropped.
pub async fn run(
    client: Client,
    csrs: runtime::Subscription<CertificateSigningRequest>,
    cfg: crate::Config,
) -> anyhow::Result<()> {
    let ctx = Arc::new(Context::new(client));
    runtime::per_object(NAME, csrs, cfg.csr_concurrency, &cfg.metrics, ctx, reconcile, futures::stream::pending()).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;
    use kustos_ca::{Ca, IssueParams};

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 3, 1, 12, 0, 0).unwrap()
    }

    fn h(n: i64) -> chrono::Duration {
        chrono::Duration::hours(n)
    }

    /// Created at t0; conditions (type, hours after t0 of lastUpdateTime or None), and
    /// whether a certificate valid until t0 + `cert_hours` (per block) is issued.
    fn csr(conds: &[(&str, Option<i64>)], certs: &[i64]) -> CertificateSigningRequest {
        let ca = Ca::generate("ca", chrono::Duration::days(3650), t0() - h(48)).unwrap();
        let pem: String = certs
            .iter()
            .map(|hours| {
                // Issued at t0 - 1h for (hours + 1) h: NotAfter = t0 + hours.
                ca.issue(IssueParams::client("u", vec![], h(hours + 1)), t0() - h(1)).unwrap().cert_pem
            })
            .collect();
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("csr-1".into()),
                uid: Some("uid-1".into()),
                creation_timestamp: Some(csr::to_time(t0())),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(Vec::new()),
                signer_name: "kubernetes.io/kube-apiserver-client".into(),
                ..Default::default()
            },
            status: Some(CertificateSigningRequestStatus {
                certificate: (!pem.is_empty()).then(|| ByteString(pem.into_bytes())),
                conditions: (!conds.is_empty()).then(|| {
                    conds
                        .iter()
                        .map(|(t, at)| CertificateSigningRequestCondition {
                            type_: t.to_string(),
                            status: "True".into(),
                            last_update_time: at.map(|hours| csr::to_time(t0() + h(hours))),
                            ..Default::default()
                        })
                        .collect()
                }),
            }),
        }
    }

    /// name, conditions, certificate lifetimes (hours after t0), now (hours after t0),
    /// wanted: "delete <reason>", "recheck <hours after t0>", "keep".
    type Case = (&'static str, &'static [(&'static str, Option<i64>)], &'static [i64], i64, &'static str);

    const CASES: &[Case] = &[
        ("pending, fresh", &[], &[], 1, "recheck 24"),
        ("pending, exactly 24 h: not yet (strict)", &[], &[], 24, "recheck 24"),
        ("pending past 24 h", &[], &[], 25, "delete pending"),
        ("approved and issued, fresh", &[("Approved", Some(0))], &[8760], 0, "recheck 1"),
        ("approved and issued past 1 h", &[("Approved", Some(0))], &[8760], 2, "delete approved and issued"),
        ("approved and issued, approval updated later", &[("Approved", Some(5))], &[8760], 2, "recheck 6"),
        ("denied, fresh", &[("Denied", Some(0))], &[], 0, "recheck 1"),
        ("denied past 1 h", &[("Denied", Some(-2))], &[], 0, "delete denied"),
        ("failed past 1 h", &[("Approved", Some(0)), ("Failed", Some(0))], &[], 2, "delete failed"),
        ("failed, fresh", &[("Approved", Some(0)), ("Failed", Some(0))], &[], 0, "recheck 1"),
        ("approved, never issued: 24 h after creation", &[("Approved", Some(0))], &[], 2, "recheck 24"),
        ("approved, never issued, past 24 h", &[("Approved", Some(0))], &[], 25, "delete approved but never issued"),
        ("issued certificate expired", &[("Approved", None)], &[1], 2, "delete certificate expired"),
        ("issued, no approval time: the certificate's expiry", &[("Approved", None)], &[10], 2, "recheck 10"),
        ("any PEM block expired counts", &[("Approved", None)], &[8760, 1], 2, "delete certificate expired"),
        ("denied without a time: nothing applies", &[("Denied", None)], &[], 100, "keep"),
        ("a certificate without approval: no approval rules", &[], &[8760], 2, "recheck 24"),
    ];

    #[test]
    fn cleaning_decisions() {
        for (name, conds, certs, now, want) in CASES {
            let c = csr(conds, certs);
            let got = match decide(&c, t0() + h(*now)) {
                Decision::Delete { uid, reason } => {
                    assert_eq!(uid, "uid-1", "{name}: UID precondition");
                    format!("delete {reason}")
                }
                Decision::RecheckAt(t) => format!("recheck {}", (t - t0()).num_hours()),
                Decision::Keep => "keep".to_string(),
            };
            assert_eq!(got, *want, "{name}");
        }
    }

    #[tokio::test]
    async fn reconcile_deletes_with_the_uid_precondition() {
        use crate::mock::{status, Mock};
        const DELETE: &str = "DELETE /apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1";
        let ok = (200, serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        // name, denied how many hours ago, replies, wanted calls, wanted outcome.
        type Scenario = (&'static str, i64, Vec<(u16, serde_json::Value)>, Vec<&'static str>, &'static str);
        let scenarios: Vec<Scenario> = vec![
            ("denied long ago: deleted", 2, vec![ok.clone()], vec![DELETE], "await"),
            ("already gone", 2, vec![(404, status(404, "NotFound"))], vec![DELETE], "await"),
            ("another CSR of that name", 2, vec![(409, status(409, "Conflict"))], vec![DELETE], "await"),
            ("the delete fails: retried", 2, vec![(500, status(500, "InternalError"))], vec![DELETE], "error"),
            ("denied just now: rechecked in about an hour", 0, vec![], vec![], "requeue"),
        ];
        for (name, hours_ago, replies, want_calls, want) in scenarios {
            let mock = Mock::new(replies);
            let ctx = Arc::new(Context::new(mock.client()));
            let mut c = csr(&[("Denied", Some(0))], &[]);
            let at = Utc::now() - h(hours_ago);
            c.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_update_time = Some(csr::to_time(at));
            let res = tokio::time::timeout(Duration::from_secs(5), reconcile(Arc::new(c), ctx)).await.unwrap();
            let got = match res {
                Ok(a) if a == Action::await_change() => "await".to_string(),
                Ok(a) => {
                    // Due at lastUpdateTime + 1 h (+1 s): within the hour from now.
                    let dbg = format!("{a:?}");
                    assert!(dbg.contains("requeue_after: Some("), "{name}: {dbg}");
                    "requeue".to_string()
                }
                Err(_) => "error".to_string(),
            };
            assert_eq!(got, want, "{name}");
            assert_eq!(mock.lines(), want_calls, "{name}: calls");
            for call in mock.calls() {
                assert_eq!(call.body["preconditions"]["uid"], "uid-1", "{name}: UID precondition");
            }
        }
    }
}
