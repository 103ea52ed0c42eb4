//! The `signers` controller's PodCertificateRequests: a Signer with `spec.podCertificates`
//! signs the requests (`certificates.k8s.io/v1`) for its signer name, from its CA.
//!
//! What enters: a request and, when one is ready, the Signer for its `spec.signerName` (its
//! CA and `podCertificates`), and `now`. What leaves: the request's next status, written
//! through `/status` — `Issued` with `certificateChain` (the leaf, then the Signer's CA),
//! `notBefore`, `beginRefreshAt`, `notAfter`; or `Denied` (a key type the Signer does not
//! sign: `UnsupportedKeyType`, as upstream); or `Failed` (the CA cannot issue an hour's
//! certificate). Requests already Issued, Denied or Failed are left alone, as are requests
//! for any other signer name — except `kubernetes.io/kube-apiserver-client-pod`, which
//! [`super::client_pod`] decides and the apiserver's client CA signs, where given
//! (`kustos server`).
//!
//! The certificate's identity comes only from fields the apiserver verified: the request's
//! namespace and `spec.serviceAccountName` make the SPIFFE ID
//! `spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccountName>`, its only name (URI
//! subjectAltName, empty subject); the key is the stub request's (its self-signature
//! checked again here). Usages: digital signature (+ key encipherment for RSA), client auth,
//! server auth. It begins at `now` (the apiserver wants `notBefore` within 5 minutes of its
//! clock) and lasts `min(spec.maxExpirationSeconds, podCertificates.maxExpirationSeconds)`,
//! cut at the CA's own end; `beginRefreshAt` is three quarters of the way.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, DurationRound as _, Utc};
use k8s_openapi::api::certificates::v1::{PodCertificateRequest, PodCertificateRequestStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::{Api, Client, ResourceExt as _};
use kustos_ca::pod_certificate::{self as pc, condition, KeyType};
use kustos_ca::{Ca, IssueParams, SubjectKey, Usage};
use kustos_crds::signer::PodCertificates;

use super::{client_pod, Ready, NAME};
use crate::ca_files::CaFiles;
use crate::csr::to_time;
use crate::runtime::{self, Backoff};

/// How soon a request whose signer name has no ready Signer is looked at again (a Signer
/// may be loading).
const RECHECK: StdDuration = StdDuration::from_secs(10);
/// The shortest lifetime the API accepts.
const MIN_LIFETIME: Duration = Duration::hours(1);

/// What to sign: the request's verified identity and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The SPIFFE ID, the certificate's only name.
    pub spiffe_id: String,
    /// SubjectPublicKeyInfo, DER: the stub request's key.
    pub public_key_der: Vec<u8>,
    pub key_type: KeyType,
    pub lifetime: Duration,
}

/// What to do with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Skip(&'static str),
    /// Condition `Denied` with this reason and message.
    Deny(&'static str, String),
    Sign(Box<Plan>),
}

/// Whether the request has a terminal (`Issued`, `Denied`, `Failed`) condition.
pub fn is_done(pcr: &PodCertificateRequest) -> bool {
    pcr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| condition::TERMINAL.contains(&c.type_.as_str())))
}

/// Decide for `pcr` given the `podCertificates` of the ready Signer for its name, if any.
pub fn decide(pcr: &PodCertificateRequest, signer: Option<&PodCertificates>) -> Decision {
    let Some(cfg) = signer else { return Decision::Skip("no ready Signer signs pod certificates for this name") };
    if is_done(pcr) {
        return Decision::Skip("issued, denied or failed already");
    }
    let stub = match pc::parse_stub_request(&pcr.spec.stub_pkc_s10_request.0) {
        Ok(s) => s,
        // The apiserver checked it at create; a request that no longer reads is refused.
        Err(e) => return Decision::Deny("InvalidRequest", format!("spec.stubPKCS10Request: {e}")),
    };
    if !cfg.key_types.is_empty() && !cfg.key_types.iter().any(|k| k == stub.key_type.name()) {
        return Decision::Deny(
            condition::REASON_UNSUPPORTED_KEY_TYPE,
            format!("the signer does not sign {} keys; it signs {}", stub.key_type.name(), cfg.key_types.join(", ")),
        );
    }
    let namespace = pcr.metadata.namespace.as_deref().unwrap_or_default();
    let sa = &pcr.spec.service_account_name;
    if namespace.is_empty() || sa.is_empty() {
        return Decision::Deny("InvalidRequest", "the request names no namespace or service account".into());
    }
    let requested = pcr.spec.max_expiration_seconds.map(i64::from).unwrap_or(i64::from(cfg.max_expiration_seconds()));
    let lifetime = Duration::seconds(requested.min(i64::from(cfg.max_expiration_seconds())));
    Decision::Sign(Box::new(Plan {
        spiffe_id: format!("spiffe://{}/ns/{namespace}/sa/{sa}", cfg.trust_domain),
        public_key_der: stub.public_key_der,
        key_type: stub.key_type,
        lifetime,
    }))
}

/// The `Issued` status for `plan`, signed by `ca`, or why it cannot be issued (the
/// `Failed` message).
pub fn issue(ca: &Ca, plan: &Plan, now: DateTime<Utc>) -> Result<PodCertificateRequestStatus, String> {
    // Whole seconds: the certificate's times are, and the status must equal them.
    let now = now.duration_trunc(Duration::seconds(1)).map_err(|e| e.to_string())?;
    if ca.not_after() < now + MIN_LIFETIME {
        return Err(format!("the signer's CA expires at {}, within an hour", ca.not_after().to_rfc3339()));
    }
    let mut usages = vec![Usage::DigitalSignature, Usage::ClientAuth, Usage::ServerAuth];
    if matches!(plan.key_type, KeyType::Rsa3072 | KeyType::Rsa4096) {
        usages.push(Usage::KeyEncipherment);
    }
    let issued = ca
        .issue(
            IssueParams {
                uris: vec![plan.spiffe_id.clone()],
                usages,
                exact_usages: true,
                validity: plan.lifetime,
                key: SubjectKey::PublicKey(plan.public_key_der.clone()),
                backdate: Some(Duration::zero()),
                ..Default::default()
            },
            now,
        )
        .map_err(|e| format!("issuing the certificate: {e}"))?;
    let lifetime = issued.not_after - issued.not_before;
    let refresh = issued.not_before + lifetime * 3 / 4;
    let chain = format!("{}\n{}\n", issued.cert_pem.trim_end(), ca.cert_pem().trim_end());
    Ok(PodCertificateRequestStatus {
        certificate_chain: Some(chain),
        not_before: Some(to_time(issued.not_before)),
        begin_refresh_at: Some(to_time(refresh)),
        not_after: Some(to_time(issued.not_after)),
        conditions: Some(vec![terminal(condition::ISSUED, "Issued", "issued by the signer", now)]),
    })
}

/// A terminal condition (status `True`).
pub fn terminal(type_: &str, reason: &str, message: &str, now: DateTime<Utc>) -> Condition {
    Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: to_time(now),
        observed_generation: None,
    }
}

fn refused(type_: &str, reason: &str, message: &str, now: DateTime<Utc>) -> PodCertificateRequestStatus {
    PodCertificateRequestStatus { conditions: Some(vec![terminal(type_, reason, message, now)]), ..Default::default() }
}

pub(super) struct Context {
    client: Client,
    ready: Ready,
    backoff: Backoff,
    /// The CA of `kubernetes.io/kube-apiserver-client-pod`, when this process serves it.
    client_pod: Option<CaFiles>,
}

impl runtime::Context for Context {
    fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status of PodCertificateRequest {name}: {source}")]
    Status {
        name: String,
        #[source]
        source: kube::Error,
    },
}

async fn reconcile(obj: Arc<PodCertificateRequest>, ctx: Arc<Context>) -> Result<Action, Error> {
    if is_done(&obj) {
        return Ok(Action::await_change());
    }
    let (name, namespace) = (obj.name_any(), obj.namespace().unwrap_or_default());
    let now = Utc::now();
    let status = if obj.spec.signer_name == client_pod::SIGNER_NAME {
        // Served here only where the apiserver reads these certificates (`kustos server`).
        let Some(files) = &ctx.client_pod else { return Ok(Action::await_change()) };
        match client_pod::decide(&obj) {
            client_pod::Decision::Skip(_) => return Ok(Action::await_change()),
            client_pod::Decision::Deny(reason, message) => {
                tracing::info!(controller = NAME, namespace = %namespace, request = %name, reason, "denied the PodCertificateRequest");
                refused(condition::DENIED, reason, &message, now)
            }
            client_pod::Decision::Sign(plan) => match client_pod::issue(files.current().signer(), &plan, now) {
                Ok(status) => status,
                Err(message) => refused(condition::FAILED, "SignerFailure", &message, now),
            },
        }
    } else {
        match own_signer_status(&obj, &ctx, now) {
            Some(status) => status,
            None => return Ok(Action::requeue(RECHECK)),
        }
    };
    write_status(&obj, status, &ctx, &name, &namespace).await
}

/// The next status of a request for a Signer's own name; `None`: not now.
fn own_signer_status(
    obj: &PodCertificateRequest,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Option<PodCertificateRequestStatus> {
    let (name, namespace) = (obj.name_any(), obj.namespace().unwrap_or_default());
    let signer = ctx.ready.read().ok().and_then(|m| m.get(&obj.spec.signer_name).cloned());
    let cfg = signer.as_ref().and_then(|s| s.pod_certificates.as_ref());
    Some(match decide(obj, cfg) {
        Decision::Skip(_) => return None,
        Decision::Deny(reason, message) => {
            tracing::info!(controller = NAME, namespace = %namespace, request = %name, reason, "denied the PodCertificateRequest");
            refused(condition::DENIED, reason, &message, now)
        }
        Decision::Sign(plan) => {
            let signer = signer.as_ref()?;
            match issue(&signer.ca, &plan, now) {
                Ok(status) => status,
                Err(message) => refused(condition::FAILED, "SignerFailure", &message, now),
            }
        }
    })
}

async fn write_status(
    obj: &PodCertificateRequest,
    status: PodCertificateRequestStatus,
    ctx: &Context,
    name: &str,
    namespace: &str,
) -> Result<Action, Error> {
    let mut next = obj.clone();
    next.status = Some(status);
    let api: Api<PodCertificateRequest> = Api::namespaced(ctx.client.clone(), namespace);
    match api.replace_status(name, &PostParams::default(), &next).await {
        Ok(_) => Ok(Action::await_change()),
        Err(e) if runtime::is_status(&e, 409) => Ok(Action::requeue(crate::csr::AFTER_CONFLICT)),
        Err(e) if runtime::is_status(&e, 404) => Ok(Action::await_change()),
        Err(source) => Err(Error::Status { name: format!("{namespace}/{name}"), source }),
    }
}

/// Sign requests until the task is dropped; nothing when the apiserver serves no v1
/// PodCertificateRequests.
pub(super) async fn run(client: Client, ready: Ready, cfg: crate::Config) -> anyhow::Result<()> {
    let served = client
        .list_api_group_resources("certificates.k8s.io/v1")
        .await
        .is_ok_and(|l| l.resources.iter().any(|r| r.name == "podcertificaterequests"));
    if !served {
        tracing::info!(controller = NAME, "the apiserver serves no v1 PodCertificateRequests: Signers sign none");
        return futures::future::pending().await;
    }
    let client_pod = match &cfg.kube_apiserver_client_pod_ca {
        None => {
            tracing::info!(controller = NAME, "not serving {}: no client CA given", client_pod::SIGNER_NAME);
            None
        }
        Some((cert, key)) => match CaFiles::load(cert, key) {
            Ok(files) => Some(files),
            Err(e) => {
                tracing::error!(controller = NAME, error = %e, "not serving {}: its CA does not load", client_pod::SIGNER_NAME);
                None
            }
        },
    };
    let ctx = Arc::new(Context { client: client.clone(), ready, backoff: Backoff::default(), client_pod });
    let api: Api<PodCertificateRequest> = Api::all(client);
    runtime::per_object_watching(NAME, api, kube::runtime::watcher::Config::default(), &cfg.metrics, ctx, reconcile)
        .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "pod_certificates_tests.rs"]
mod tests;
