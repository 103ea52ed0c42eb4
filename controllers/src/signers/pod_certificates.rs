//! The `signers` controller's PodCertificateRequests: a Signer with `spec.podCertificates`
//! signs the requests for its signer name, from its CA, in the version the apiserver serves
//! (`certificates.k8s.io/v1beta1`, else `v1`: [`crate::pod_certificate_requests::served`]).
//!
//! What enters: a request and, when one is ready, the Signer for its `spec.signerName` (its
//! CA and `podCertificates`), and `now`. What leaves: the request's next status, written
//! through `/status` — `Issued` with `certificateChain` (the leaf, then the Signer's CA),
//! `notBefore`, `beginRefreshAt`, `notAfter`; or `Denied` (a key type the Signer does not
//! sign: `UnsupportedKeyType`, as upstream; any `spec.unverifiedUserAnnotations`, of which a
//! Signer recognizes none: `InvalidUnverifiedUserAnnotations`); or `Failed` (the CA cannot issue an hour's
//! certificate). Requests already Issued, Denied or Failed are left alone, as are requests
//! for any other signer name — except `kubernetes.io/kube-apiserver-client-pod`, which
//! [`super::client_pod`] decides and the apiserver's client CA signs, where given
//! (`kustos server`).
//!
//! The certificate's identity comes only from fields the apiserver verified, held once more
//! against the objects before signing ([`pcrs::check_named`]: the pod with its UID, running
//! as that service account on that node, all three as named; else `Denied`,
//! `PodIdentityMismatch`): the request's namespace and `spec.serviceAccountName` make the
//! SPIFFE ID
//! `spiffe://<trustDomain>/ns/<namespace>/sa/<serviceAccountName>`, its only name (URI
//! subjectAltName, empty subject); the key is the stub request's (its self-signature
//! checked again here), or, for a v1beta1 request of the deprecated form, `pkixPublicKey`
//! once `proofOfPossession` verifies over `spec.podUID` as the apiserver's validation checks
//! it (a request whose key does not read or whose proof fails is `Denied`,
//! `InvalidRequest`). Usages: digital signature (+ key encipherment for RSA), client auth,
//! server auth. It begins at `now` (the apiserver wants `notBefore` within 5 minutes of its
//! clock) and lasts `min(spec.maxExpirationSeconds, podCertificates.maxExpirationSeconds)`,
//! cut at the CA's own end; `beginRefreshAt` is three quarters of the way.
//!
//! Each answer is counted on the Signer (`status.podCertificates.issued`/`denied`/`failed`)
//! and in the metrics (`kustos_pcr_issued_total`/`denied`/`failed`, by signer). Requests are
//! signed only from a CA read within [`FRESH_FOR`]: a CA that a rotation's `switch` replaced
//! stops signing within that time even if the Signers cannot be read again meanwhile, which
//! bounds how long its pod certificates can stay valid (`kustos ca rotate finish --signer`
//! relies on it).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, DurationRound as _, Utc};
use k8s_openapi::api::certificates::v1::PodCertificateRequestStatus;
use k8s_openapi::api::certificates::{v1, v1beta1};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt as _};
use kustos_ca::pod_certificate::{condition, KeyType};
use kustos_ca::{Ca, IssueParams, SubjectKey, Usage};
use kustos_crds::signer::{PodCertificateCounts, PodCertificates};
use kustos_crds::{Signer, SignerStatus};

use super::{client_pod, Loaded, Ready, NAME};
use crate::ca_files::CaFiles;
use crate::csr::to_time;
use crate::metrics::PcrOutcome;
use crate::pod_certificate_requests::{self as pcrs, Request, Version};
use crate::pod_certificate_requests::{is_done, requested_key, terminal};
use crate::runtime::{self, Action, Backoff};

/// How soon a request whose signer name has no ready Signer is looked at again (a Signer
/// may be loading).
const RECHECK: StdDuration = StdDuration::from_secs(10);
/// The shortest lifetime the API accepts.
const MIN_LIFETIME: Duration = Duration::hours(1);
/// How old a reading of a Signer's CA may be and still sign pod certificates. The Signers are
/// read every 30 s (at once on a rotation step); a CA read longer ago than this signs nothing
/// until read again.
pub const FRESH_FOR: Duration = Duration::minutes(2);

/// The Signer to sign with, if its CA was read recently enough ([`FRESH_FOR`]).
pub fn usable(signer: Option<Arc<Loaded>>, now: DateTime<Utc>) -> Option<Arc<Loaded>> {
    signer.filter(|s| now - s.loaded_at <= FRESH_FOR)
}

/// `status` with one more answer counted.
pub fn counted(status: Option<&SignerStatus>, outcome: PcrOutcome) -> SignerStatus {
    let mut next = status.cloned().unwrap_or_default();
    let counts = next.pod_certificates.get_or_insert_with(PodCertificateCounts::default);
    let n = match outcome {
        PcrOutcome::Issued => &mut counts.issued,
        PcrOutcome::Denied => &mut counts.denied,
        PcrOutcome::Failed => &mut counts.failed,
    };
    *n = n.saturating_add(1);
    next
}

/// What to sign: the request's verified identity and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The SPIFFE ID, the certificate's only name.
    pub spiffe_id: String,
    /// SubjectPublicKeyInfo, DER: the requested key.
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

/// Decide for `pcr` given the `podCertificates` of the ready Signer for its name, if any.
pub fn decide(pcr: &impl Request, signer: Option<&PodCertificates>) -> Decision {
    let Some(cfg) = signer else { return Decision::Skip("no ready Signer signs pod certificates for this name") };
    if is_done(pcr) {
        return Decision::Skip("issued, denied or failed already");
    }
    let spec = pcr.view();
    // Signers should deny keys they do not recognize (the API's word); a Signer recognizes none.
    if let Some(keys) = spec.unverified_user_annotations.filter(|a| !a.is_empty()) {
        let keys: Vec<&str> = keys.keys().map(String::as_str).collect();
        return Decision::Deny(
            condition::REASON_INVALID_USER_ANNOTATIONS,
            format!("the signer recognizes no unverifiedUserAnnotations; got {}", keys.join(", ")),
        );
    }
    let (public_key_der, key_type) = match requested_key(spec.key, spec.pod_uid) {
        Ok(k) => k,
        Err(message) => return Decision::Deny("InvalidRequest", message),
    };
    if !cfg.key_types.is_empty() && !cfg.key_types.iter().any(|k| k == key_type.name()) {
        return Decision::Deny(
            condition::REASON_UNSUPPORTED_KEY_TYPE,
            format!("the signer does not sign {} keys; it signs {}", key_type.name(), cfg.key_types.join(", ")),
        );
    }
    let namespace = pcr.meta().namespace.as_deref().unwrap_or_default();
    let sa = spec.service_account_name;
    if namespace.is_empty() || sa.is_empty() {
        return Decision::Deny("InvalidRequest", "the request names no namespace or service account".into());
    }
    let requested = spec.max_expiration_seconds.map(i64::from).unwrap_or(i64::from(cfg.max_expiration_seconds()));
    let lifetime = Duration::seconds(requested.min(i64::from(cfg.max_expiration_seconds())));
    Decision::Sign(Box::new(Plan {
        spiffe_id: format!("spiffe://{}/ns/{namespace}/sa/{sa}", cfg.trust_domain),
        public_key_der,
        key_type,
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

fn refused(type_: &str, reason: &str, message: &str, now: DateTime<Utc>) -> PodCertificateRequestStatus {
    PodCertificateRequestStatus { conditions: Some(vec![terminal(type_, reason, message, now)]), ..Default::default() }
}

pub(super) struct Context {
    client: Client,
    signers: Api<Signer>,
    ready: Ready,
    backoff: Backoff,
    metrics: crate::metrics::Metrics,
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
    #[error("reading the pod, service account and node PodCertificateRequest {name} names: {source}")]
    Named {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the status of PodCertificateRequest {name}: {source}")]
    Status {
        name: String,
        #[source]
        source: kube::Error,
    },
}

async fn reconcile<K: Request>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error> {
    if is_done(&*obj) {
        return Ok(Action::await_change());
    }
    let (name, namespace) = (obj.name_any(), obj.namespace().unwrap_or_default());
    let now = Utc::now();
    if obj.view().signer_name == client_pod::SIGNER_NAME {
        // Served here only where the apiserver reads these certificates (`kustos server`).
        let Some(files) = &ctx.client_pod else { return Ok(Action::await_change()) };
        let status = match client_pod::decide(&*obj) {
            client_pod::Decision::Skip(_) => return Ok(Action::await_change()),
            client_pod::Decision::Deny(reason, message) => {
                tracing::info!(controller = NAME, namespace = %namespace, request = %name, reason, "denied the PodCertificateRequest");
                refused(condition::DENIED, reason, &message, now)
            }
            client_pod::Decision::Sign(plan) => match not_as_named(&*obj, &ctx.client, &namespace).await? {
                Some(message) => {
                    tracing::info!(controller = NAME, namespace = %namespace, request = %name, reason = pcrs::REASON_NOT_AS_NAMED, "denied the PodCertificateRequest");
                    refused(condition::DENIED, pcrs::REASON_NOT_AS_NAMED, &message, now)
                }
                None => match client_pod::issue(files.current().signer(), &plan, now) {
                    Ok(status) => status,
                    Err(message) => refused(condition::FAILED, "SignerFailure", &message, now),
                },
            },
        };
        return Ok(write_status(&*obj, status, &ctx, &name, &namespace).await?.unwrap_or(Action::await_change()));
    }
    let signer = usable(ctx.ready.read().ok().and_then(|m| m.get(obj.view().signer_name).cloned()), now);
    let cfg = signer.as_ref().and_then(|s| s.pod_certificates.as_ref());
    let (status, outcome) = match decide(&*obj, cfg) {
        Decision::Skip(_) => return Ok(Action::requeue(RECHECK)),
        Decision::Deny(reason, message) => {
            tracing::info!(controller = NAME, namespace = %namespace, request = %name, reason, "denied the PodCertificateRequest");
            (refused(condition::DENIED, reason, &message, now), PcrOutcome::Denied)
        }
        Decision::Sign(plan) => {
            let Some(signer) = &signer else { return Ok(Action::requeue(RECHECK)) };
            if let Some(message) = not_as_named(&*obj, &ctx.client, &namespace).await? {
                tracing::info!(controller = NAME, namespace = %namespace, request = %name, reason = pcrs::REASON_NOT_AS_NAMED, "denied the PodCertificateRequest");
                (refused(condition::DENIED, pcrs::REASON_NOT_AS_NAMED, &message, now), PcrOutcome::Denied)
            } else {
                match issue(&signer.ca, &plan, now) {
                    Ok(status) => (status, PcrOutcome::Issued),
                    Err(message) => (refused(condition::FAILED, "SignerFailure", &message, now), PcrOutcome::Failed),
                }
            }
        }
    };
    if let Some(action) = write_status(&*obj, status, &ctx, &name, &namespace).await? {
        return Ok(action);
    }
    ctx.metrics.pcr_answered(obj.view().signer_name, outcome);
    if let Some(signer) = signer {
        let res = runtime::update_status(&ctx.signers, &signer.object, |s| {
            let mut next = s.clone();
            next.status = Some(counted(s.status.as_ref(), outcome));
            Some(next)
        })
        .await;
        if let Err(e) = res {
            tracing::warn!(controller = NAME, signer = %signer.object, error = %e, "could not count on the Signer");
        }
    }
    Ok(Action::await_change())
}

/// Why `obj` is not signed because its pod, service account or node are not as it names
/// them ([`pcrs::check_named`]), if so.
async fn not_as_named<K: Request>(obj: &K, client: &Client, namespace: &str) -> Result<Option<String>, Error> {
    let view = obj.view();
    let named = pcrs::read_named(client, &view, namespace)
        .await
        .map_err(|source| Error::Named { name: format!("{namespace}/{}", obj.name_any()), source })?;
    Ok(pcrs::check_named(&view, namespace, &named).err())
}

/// Write `status` to the request: `None` once written, else what to do instead.
async fn write_status<K: Request>(
    obj: &K,
    status: PodCertificateRequestStatus,
    ctx: &Context,
    name: &str,
    namespace: &str,
) -> Result<Option<Action>, Error> {
    let mut next = obj.clone();
    next.set_status(status);
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    match api.replace_status(name, &PostParams::default(), &next).await {
        Ok(_) => Ok(None),
        Err(e) if runtime::is_status(&e, 409) => Ok(Some(Action::requeue(crate::csr::AFTER_CONFLICT))),
        Err(e) if runtime::is_status(&e, 404) => Ok(Some(Action::await_change())),
        Err(source) => Err(Error::Status { name: format!("{namespace}/{name}"), source }),
    }
}

/// Sign requests until the task is dropped; nothing when the apiserver serves no
/// PodCertificateRequests.
/// `signers_changed` yields when the ready Signers change: every waiting request is looked at
/// again then.
pub(super) async fn run(
    client: Client,
    signers: Api<Signer>,
    ready: Ready,
    cfg: crate::Config,
    signers_changed: impl futures::Stream<Item = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Some(version) = pcrs::served(&client).await else {
        tracing::info!(
            controller = NAME,
            "the apiserver serves no PodCertificateRequests (certificates.k8s.io/v1 or v1beta1): Signers sign none"
        );
        return futures::future::pending().await;
    };
    tracing::info!(controller = NAME, version = version.name(), "signing PodCertificateRequests");
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
    let ctx = Arc::new(Context {
        client: client.clone(),
        signers,
        ready,
        backoff: Backoff::default(),
        metrics: cfg.metrics.clone(),
        client_pod,
    });
    match version {
        Version::V1 => run_for::<v1::PodCertificateRequest>(client, cfg, ctx, signers_changed).await,
        Version::V1beta1 => run_for::<v1beta1::PodCertificateRequest>(client, cfg, ctx, signers_changed).await,
    }
}

async fn run_for<K: Request>(
    client: Client,
    cfg: crate::Config,
    ctx: Arc<Context>,
    signers_changed: impl futures::Stream<Item = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let api: Api<K> = Api::all(client);
    runtime::per_object_watching(
        NAME,
        api,
        kube::runtime::watcher::Config::default(),
        &cfg.metrics,
        ctx,
        reconcile::<K>,
        signers_changed,
    )
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "pod_certificates_tests.rs"]
mod tests;
