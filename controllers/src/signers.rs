//! `signers`: signs the approved CertificateSigningRequests of [`Signer`]s (`kustos.dev`),
//! signers of your own, from each Signer's CA and within its rules, and publishes each CA as a
//! ClusterTrustBundle linked to the signer name.
//!
//! Two loops in one registration:
//! - **Signers** (whole-world, when a Signer is created, deleted, or its spec or annotations
//!   change, and every 30 s; not on its status, which the counts below write): for each Signer, check the
//!   spec ([`SignerSpec::problems`]: never a `kubernetes.io`/`k8s.io` name), find its CA
//!   Secret (`spec.caSecretRef`, else `kube-system/kustos-signer-<name>`, generated on first
//!   sight: a P-256 CA named after the signer, valid ten years), load it ([`load_ca`]),
//!   publish the bundle, and write `status` (`Ready` with the reason, `trustBundle`,
//!   `caSecret`, `caFingerprint`: the CA that signs). Two Signers naming the same signer name: the older one signs, the other is
//!   `Ready` False (`SignerNameTaken`). A CSR re-check follows any change to what signs.
//! - **CSRs** (per object, the shared CSR informer): an approved CSR for a Ready Signer's
//!   name with no certificate and no `Failed` condition is checked against the Signer's rules
//!   (the CertificateApprovalPolicy check, [`crate::csr_policy_approver::check`]) and either
//!   gets `Failed` (`SignerValidationFailure`, the broken rule) or a certificate lasting
//!   `expirationSeconds` capped by `maxExpirationSeconds`; the Signer's `issued`/`failed`
//!   counts follow. CSRs for any other signer name are left alone.
//!
//! - **PodCertificateRequests** (per object, [`pod_certificates`]): a Ready Signer with
//!   `spec.podCertificates` issues SPIFFE certificates for the requests naming it (v1, else
//!   v1beta1).
//!
//! The CA Secret's keys: `tls.crt` and `tls.key` sign; during a rotation (`kustos ca rotate
//! … --signer NAME`) `next.crt`/`next.key` (begun, not yet signing) and `previous.crt` (the
//! CA that signed before the switch) are published in the bundle too, so every certificate
//! either CA issued keeps verifying until the rotation finishes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::runtime::{predicates, watcher, Predicate as _, PredicateConfig, WatchStreamExt as _};
use kube::{Api, Client, ResourceExt as _};
use kustos_ca::csr::{CertificateRequest, CsrError};
use kustos_ca::Ca;
use kustos_crds::certificate_approval_policy::Compiled;
use kustos_crds::signer::{SecretReference, CONDITION_READY};
use kustos_crds::{CertificateApprovalPolicySpec, Signer, SignerSpec, SignerStatus};

use crate::clustertrustbundle_publisher as ctb;
use crate::csr;
use crate::runtime::{self, whole_world_until, Action, Backoff};

pub mod client_pod;
pub mod pod_certificates;
pub mod rotation;

pub const NAME: &str = "signers";
/// The annotation `kustos ca rotate … --signer` sets on the Signer after each step, so the
/// controller looks at it at once.
pub const ROTATION_ANNOTATION: &str = "kustos.dev/ca-rotation";
/// Where generated CAs are kept.
pub const GENERATED_NAMESPACE: &str = "kube-system";
/// The CA that signs.
pub const CERT: &str = "tls.crt";
pub const KEY: &str = "tls.key";
/// A CA begun by a rotation, published but not signing yet.
pub const NEXT_CERT: &str = "next.crt";
pub const NEXT_KEY: &str = "next.key";
/// The CA that signed before a rotation's switch, published until it finishes.
pub const PREVIOUS_CERT: &str = "previous.crt";
/// How long a generated CA is valid.
const GENERATED_VALIDITY_DAYS: i64 = 3650;
/// How often every Signer is looked at even when none changed (a referenced Secret may have).
const RESYNC: Duration = Duration::from_secs(30);
/// How soon the Signers are read again while the apiserver does not serve them (no CRD), and
/// for [`NO_CRD_WINDOW`] after it last did not.
const NO_CRD_RECHECK: Duration = Duration::from_secs(2);
const NO_CRD_WINDOW: Duration = Duration::from_secs(60);

/// The Secret a Signer's CA lives in.
pub fn ca_secret(signer: &Signer) -> SecretReference {
    signer.spec.ca_secret_ref.clone().unwrap_or_else(|| SecretReference {
        namespace: GENERATED_NAMESPACE.into(),
        name: format!("kustos-signer-{}", signer.name_any()),
    })
}

/// A Signer ready to sign: its CA and its rules, parsed once.
pub struct Loaded {
    /// The Signer object's name (for its status counts).
    pub object: String,
    pub ca: Ca,
    /// The CA certificates published (PEM): the signing one, and during a rotation the next
    /// or the previous one.
    pub bundle: String,
    pub rules: CertificateApprovalPolicySpec,
    pub compiled: Compiled,
    pub max_duration: chrono::Duration,
    /// How it signs PodCertificateRequests, if it does.
    pub pod_certificates: Option<kustos_crds::signer::PodCertificates>,
    /// When its CA Secret was read: pod certificates are signed only from a recent reading
    /// ([`pod_certificates::FRESH_FOR`]), so that a CA a rotation switched away from stops
    /// signing within a known time even when the Signers cannot be read again.
    pub loaded_at: DateTime<Utc>,
}

fn text<'a>(data: &'a BTreeMap<String, ByteString>, key: &str) -> Option<&'a str> {
    data.get(key).and_then(|b| std::str::from_utf8(&b.0).ok()).filter(|s| !s.trim().is_empty())
}

/// The signing CA and the bundle to publish from a CA Secret's data, or what is wrong.
pub fn load_ca(data: &BTreeMap<String, ByteString>, now: DateTime<Utc>) -> Result<(Ca, String), String> {
    let cert = text(data, CERT).ok_or_else(|| format!("the Secret has no {CERT}"))?;
    let key = text(data, KEY).ok_or_else(|| format!("the Secret has no {KEY}"))?;
    let ca = Ca::from_pem(cert, key).map_err(|e| format!("{CERT}/{KEY} are not a CA: {e}"))?;
    if !ca.info().valid_at(now) {
        return Err(format!("the CA is not valid now (valid {} to {})", ca.info().not_before, ca.info().not_after));
    }
    let published: String = [Some(ca.cert_pem()), text(data, NEXT_CERT), text(data, PREVIOUS_CERT)]
        .into_iter()
        .flatten()
        .map(|pem| format!("{}\n", pem.trim_end()))
        .collect();
    let bundle = ctb::bundle_of(&published, now).map_err(|e| format!("the CA certificates do not read: {e}"))?;
    Ok((ca, bundle))
}

/// A new CA Secret's data for `signer_name`.
pub fn generate_ca(signer_name: &str, now: DateTime<Utc>) -> anyhow::Result<BTreeMap<String, ByteString>> {
    let ca = Ca::generate(&format!("{signer_name} CA"), chrono::Duration::days(GENERATED_VALIDITY_DAYS), now)?;
    Ok([
        (CERT.to_string(), ByteString(ca.cert_pem().as_bytes().to_vec())),
        (KEY.to_string(), ByteString(ca.key_pem().into_bytes())),
    ]
    .into())
}

/// Which Signer names a signer name first: the oldest, then by object name.
pub fn owners(signers: &[Arc<Signer>]) -> HashMap<String, String> {
    let mut sorted: Vec<&Signer> = signers.iter().map(|s| &**s).collect();
    sorted.sort_by(|a, b| {
        let created = |s: &Signer| s.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a).cmp(&created(b)).then_with(|| a.name_any().cmp(&b.name_any()))
    });
    let mut out = HashMap::new();
    for s in sorted {
        out.entry(s.spec.signer_name.clone()).or_insert_with(|| s.name_any());
    }
    out
}

/// The `Ready` condition and the rest of the status a Signer should carry; `None` when it
/// already does.
pub fn next_status(
    signer: &Signer,
    ready: Result<String, (&str, String)>,
    trust_bundle: Option<String>,
    ca_fingerprint: Option<String>,
    now: DateTime<Utc>,
) -> Option<SignerStatus> {
    let (status, reason, message) = match ready {
        Ok(message) => ("True", "CALoaded", message),
        Err((reason, message)) => ("False", reason, message),
    };
    let current = signer.status.clone().unwrap_or_default();
    let existing = current.conditions.iter().find(|c| c.type_ == CONDITION_READY);
    let generation = signer.metadata.generation;
    let ca_secret = Some(ca_secret(signer));
    if existing.is_some_and(|c| c.status == status && c.reason == reason && c.message == message)
        && current.observed_generation == generation
        && current.trust_bundle == trust_bundle
        && current.ca_secret == ca_secret
        && current.ca_fingerprint == ca_fingerprint
    {
        return None;
    }
    let mut next = current.clone();
    next.observed_generation = generation;
    next.trust_bundle = trust_bundle;
    next.ca_secret = ca_secret;
    next.ca_fingerprint = ca_fingerprint;
    csr::set_condition(&mut next.conditions, CONDITION_READY, (status, reason, message), generation, now);
    Some(next)
}

/// What to do with one CSR.
#[derive(Debug)]
pub enum Decision {
    Skip(&'static str),
    /// Condition `Failed` with this message: the request breaks the signer's rules.
    Fail(String),
    Sign {
        request: Box<CertificateRequest>,
        duration: chrono::Duration,
    },
}

/// Decide for `csr` given the Signer for its name, if one is ready; `parse` is called at most
/// once, only when there is something to sign.
pub fn decide(
    csr: &CertificateSigningRequest,
    parse: impl FnOnce(&CertificateSigningRequest) -> Result<CertificateRequest, CsrError>,
    signer: Option<&Loaded>,
) -> Decision {
    let Some(signer) = signer else { return Decision::Skip("no ready Signer for this signer name") };
    if !csr::is_approved(csr) {
        return Decision::Skip("not approved");
    }
    if csr::has_true_condition(csr, kustos_ca::csr::condition::FAILED) {
        return Decision::Skip("failed");
    }
    if !csr::certificate(csr).is_empty() {
        return Decision::Skip("already issued");
    }
    let request = match parse(csr) {
        Ok(r) => r,
        Err(e) => return Decision::Fail(format!("unable to parse csr: {e}")),
    };
    if let Err(rule) = crate::csr_policy_approver::check(
        &signer.rules,
        &signer.compiled,
        csr,
        &request,
        &crate::csr_policy_approver::World::unknown(),
    ) {
        return Decision::Fail(rule.to_string());
    }
    let duration = kustos_ca::csr::duration(csr.spec.expiration_seconds.map(i64::from), signer.max_duration);
    Decision::Sign { request: Box::new(request), duration }
}

/// The ready Signers, by signer name.
type Ready = Arc<RwLock<HashMap<String, Arc<Loaded>>>>;

struct Context {
    csrs: Api<CertificateSigningRequest>,
    signers: Api<Signer>,
    ready: Ready,
    backoff: Backoff,
    metrics: crate::metrics::Metrics,
}

impl runtime::Context for Context {
    fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("signing CSR {csr}: {source}")]
    Sign {
        csr: String,
        #[source]
        source: kustos_ca::Error,
    },
    #[error("writing the status of CSR {csr}: {source}")]
    Status {
        csr: String,
        #[source]
        source: kube::Error,
    },
}

async fn reconcile(obj: Arc<CertificateSigningRequest>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = obj.name_any();
    let now = Utc::now();
    let signer = ctx.ready.read().ok().and_then(|m| m.get(&obj.spec.signer_name).cloned());
    let (update, issued) = match decide(&obj, csr::parse_request, signer.as_deref()) {
        Decision::Skip(_) => return Ok(Action::await_change()),
        Decision::Fail(message) => {
            tracing::info!(controller = NAME, csr = %name, reason = %message, "the request breaks the signer's rules");
            (crate::csr_signer::failed(&obj, &message, now), false)
        }
        Decision::Sign { request, duration } => {
            let Some(signer) = &signer else { return Ok(Action::await_change()) };
            let cert = kustos_ca::csr::sign(&signer.ca, &request, csr::usages(&obj), duration, now)
                .map_err(|source| Error::Sign { csr: name.clone(), source })?;
            (crate::csr_signer::issued(&obj, &cert.cert_pem), true)
        }
    };
    match ctx.csrs.replace_status(&name, &PostParams::default(), &update).await {
        Ok(_) => {}
        Err(e) if runtime::is_status(&e, 409) => return Ok(Action::requeue(csr::AFTER_CONFLICT)),
        Err(e) if runtime::is_status(&e, 404) => return Ok(Action::await_change()),
        Err(source) => return Err(Error::Status { csr: name, source }),
    }
    if issued {
        ctx.metrics.csr_signed(&obj.spec.signer_name);
    } else {
        ctx.metrics.csr_failed(&obj.spec.signer_name);
    }
    if let Some(signer) = signer {
        let res = runtime::update_status(&ctx.signers, &signer.object, |s| {
            let mut next = s.clone();
            let status = next.status.get_or_insert_with(Default::default);
            if issued {
                status.issued = status.issued.saturating_add(1);
            } else {
                status.failed = status.failed.saturating_add(1);
            }
            Some(next)
        })
        .await;
        if let Err(e) = res {
            tracing::warn!(controller = NAME, signer = %signer.object, error = %e, "could not count on the Signer");
        }
    }
    Ok(Action::await_change())
}

/// Find, generate or load every Signer's CA; publish the bundles; write the statuses.
/// Returns whether what signs changed.
async fn sync_signers(
    signers: &Api<Signer>,
    client: &Client,
    bundles: Option<&(Api<DynamicObject>, kube::api::ApiResource)>,
    ready: &Ready,
) -> anyhow::Result<bool> {
    let now = Utc::now();
    let all: Vec<Arc<Signer>> = signers.list(&ListParams::default()).await?.items.into_iter().map(Arc::new).collect();
    let owners = owners(&all);
    let mut loaded: HashMap<String, Arc<Loaded>> = HashMap::new();
    let mut sources = Vec::new();
    let mut statuses = Vec::new();
    for signer in &all {
        let spec: &SignerSpec = &signer.spec;
        let outcome = load_signer(signer, &owners, client, now).await;
        let mut bundle_name = None;
        let mut fingerprint = None;
        let ready_now = match outcome {
            Ok(l) => {
                fingerprint = Some(kustos_ca::fingerprint(l.ca.cert_der()));
                sources.push((spec.signer_name.clone(), Ok(l.bundle.clone())));
                let name = ctb::bundle_name(&spec.signer_name, &l.bundle);
                let message = format!(
                    "signing with CA {:?}, valid until {}{}",
                    l.ca.info().common_name,
                    l.ca.info().not_after.to_rfc3339(),
                    if bundles.is_some() { format!("; published in ClusterTrustBundle {name}") } else { String::new() }
                );
                if bundles.is_some() {
                    bundle_name = Some(name);
                }
                loaded.insert(spec.signer_name.clone(), Arc::new(l));
                Ok(message)
            }
            Err((reason, message)) => {
                // Its bundles (if any) stay as they are.
                sources.push((spec.signer_name.clone(), Err(message.clone())));
                Err((reason, message))
            }
        };
        statuses.push((signer.clone(), ready_now, bundle_name, fingerprint));
    }
    if let Some((api, ar)) = bundles {
        let existing: Vec<ctb::Existing> =
            api.list(&ListParams::default()).await?.items.iter().map(|o| ctb::existing_of(o, NAME)).collect();
        ctb::apply(api, ar, ctb::decide(&sources, &existing), NAME).await?;
    }
    let changed = {
        let mut map = ready.write().map_err(|_| anyhow::anyhow!("the Signer map is poisoned"))?;
        let before: Vec<(String, String)> = map.iter().map(|(k, v)| (k.clone(), v.bundle.clone())).collect();
        *map = loaded;
        let after: Vec<(String, String)> = map.iter().map(|(k, v)| (k.clone(), v.bundle.clone())).collect();
        let (mut b, mut a) = (before, after);
        b.sort();
        a.sort();
        a != b
    };
    for (signer, ready_now, bundle, fingerprint) in statuses {
        if next_status(&signer, ready_now.clone(), bundle.clone(), fingerprint.clone(), now).is_some() {
            let res = runtime::update_status(signers, &signer.name_any(), |cur| {
                let status = next_status(cur, ready_now.clone(), bundle.clone(), fingerprint.clone(), now)?;
                let mut next = cur.clone();
                next.status = Some(status);
                Some(next)
            })
            .await;
            if let Err(e) = res {
                tracing::warn!(controller = NAME, signer = %signer.name_any(), error = %e, "could not write the Signer's status");
            }
        }
    }
    Ok(changed)
}

/// One Signer's CA and rules, or the reason and message for `Ready` False.
async fn load_signer(
    signer: &Signer,
    owners: &HashMap<String, String>,
    client: &Client,
    now: DateTime<Utc>,
) -> Result<Loaded, (&'static str, String)> {
    let spec = &signer.spec;
    let problems = spec.problems();
    if !problems.is_empty() {
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(("InvalidSpec", format!("the Signer signs nothing: {}", text.join("; "))));
    }
    if owners.get(&spec.signer_name).is_some_and(|o| *o != signer.name_any()) {
        let owner = owners.get(&spec.signer_name).cloned().unwrap_or_default();
        return Err(("SignerNameTaken", format!("Signer {owner:?} already signs for {:?}", spec.signer_name)));
    }
    let compiled = spec.rules().compile().map_err(|_| ("InvalidSpec", "the rules do not compile".to_string()))?;
    let at = ca_secret(signer);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &at.namespace);
    let found = secrets.get_opt(&at.name).await.map_err(|e| ("CASecretUnreadable", e.to_string()))?;
    let data = match found {
        Some(s) => s.data.unwrap_or_default(),
        None if spec.ca_secret_ref.is_some() => {
            return Err(("CASecretNotFound", format!("Secret {}/{} does not exist", at.namespace, at.name)))
        }
        None => {
            let data = generate_ca(&spec.signer_name, now).map_err(|e| ("CAGenerationFailed", e.to_string()))?;
            let secret = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(at.name.clone()),
                    namespace: Some(at.namespace.clone()),
                    labels: Some([("kustos.dev/signer".to_string(), signer.name_any())].into()),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/tls".into()),
                data: Some(data.clone()),
                ..Default::default()
            };
            match secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(controller = NAME, signer = %spec.signer_name, secret = %at.name, "generated a CA");
                    data
                }
                // Someone made it meanwhile: use theirs next time.
                Err(e) if runtime::is_status(&e, 409) => {
                    return Err(("CASecretUnreadable", "the CA Secret appeared meanwhile; reading it next".into()))
                }
                Err(e) => return Err(("CAGenerationFailed", e.to_string())),
            }
        }
    };
    let (ca, bundle) = load_ca(&data, now).map_err(|m| ("InvalidCA", m))?;
    Ok(Loaded {
        object: signer.name_any(),
        ca,
        bundle,
        rules: spec.rules(),
        compiled,
        max_duration: chrono::Duration::seconds(i64::from(spec.max_expiration_seconds())),
        pod_certificates: spec.pod_certificates.clone(),
        loaded_at: now,
    })
}

/// Run until the task is dropped. Without the CRD (404) the Signer loop keeps retrying and
/// no CSR is touched.
pub async fn run(
    client: Client,
    csrs: runtime::Subscription<CertificateSigningRequest>,
    cfg: crate::Config,
) -> anyhow::Result<()> {
    let signers: Api<Signer> = Api::all(client.clone());
    let ready: Ready = Arc::default();
    let bundles = ctb::served(&client).await.map(|ar| (Api::all_with(client.clone(), &ar), ar));
    if bundles.is_none() {
        tracing::info!(
            controller = NAME,
            "the apiserver serves no ClusterTrustBundles: Signers' CAs are not published"
        );
    }
    let (trigger, redecide) = futures::channel::mpsc::channel(1);
    let (pcr_trigger, pcrs_redecide) = futures::channel::mpsc::channel(1);
    let loop_signers = {
        let (signers, ready, client) = (signers.clone(), ready.clone(), client.clone());
        let bundles = Arc::new(bundles);
        // A new, edited, annotated (a rotation step) or deleted Signer; not its status, which
        // this controller writes itself (on every certificate it counts).
        let edits = runtime::watch(signers.clone(), watcher::Config::default())
            .applied_objects()
            .predicate_filter(predicates::generation.combine(predicates::annotations), PredicateConfig::default())
            .map(|_| ())
            .boxed();
        let removals = runtime::deletions(signers.clone(), watcher::Config::default()).map(|_| ()).boxed();
        let triggers = vec![edits, removals];
        // When the Signers were last found not served (no CRD). Until a while after, they are
        // read every NO_CRD_RECHECK: the watches, which backed off while the CRD was missing,
        // may take up to 30 s to notice a Signer made right after it is installed.
        let last_missing = Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
        whole_world_until(NAME, triggers, RESYNC, cfg.metrics.clone(), move || {
            let (signers, ready, client, bundles, mut trigger, mut pcr_trigger, last_missing) = (
                signers.clone(),
                ready.clone(),
                client.clone(),
                bundles.clone(),
                trigger.clone(),
                pcr_trigger.clone(),
                last_missing.clone(),
            );
            async move {
                let next = || {
                    let recent = last_missing.lock().ok().and_then(|t| *t).is_some_and(|t| t.elapsed() < NO_CRD_WINDOW);
                    Some(if recent { NO_CRD_RECHECK } else { RESYNC })
                };
                match sync_signers(&signers, &client, bundles.as_ref().as_ref(), &ready).await {
                    Ok(true) => {
                        let _ = trigger.try_send(());
                        let _ = pcr_trigger.try_send(());
                        Ok(next())
                    }
                    Ok(false) => Ok(next()),
                    // No CRD yet: nothing signs; look again soon.
                    Err(e) if e.downcast_ref::<kube::Error>().is_some_and(|k| runtime::is_status(k, 404)) => {
                        if let Ok(mut t) = last_missing.lock() {
                            *t = Some(std::time::Instant::now());
                        }
                        Ok(Some(NO_CRD_RECHECK))
                    }
                    Err(e) => Err(e),
                }
            }
        })
    };
    let loop_pcrs = pod_certificates::run(client.clone(), signers.clone(), ready.clone(), cfg.clone(), pcrs_redecide);
    let ctx = Arc::new(Context {
        csrs: Api::all(client),
        signers,
        ready,
        backoff: Backoff::default(),
        metrics: cfg.metrics.clone(),
    });
    let loop_csrs = runtime::per_object(NAME, csrs, cfg.csr_concurrency, &cfg.metrics, ctx, reconcile, redecide);
    let (a, b, c) = tokio::join!(loop_signers, loop_csrs, loop_pcrs);
    a.and(b).and(c)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests;
