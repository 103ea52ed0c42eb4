//! `csrsigning`: issues the certificates of approved CertificateSigningRequests for the
//! `kubernetes.io` signers, as kube-controller-manager's local CA signers
//! (`pkg/controller/certificates/signer/signer.go`).
//!
//! Watches CertificateSigningRequests and reconciles each one on its own ([`crate::reconcile`]).
//! A CSR is handled when it is approved (and not denied), has no `Failed` condition and no
//! certificate yet, and its signer is one of `kubernetes.io/kube-apiserver-client`,
//! `kubernetes.io/kube-apiserver-client-kubelet`, `kubernetes.io/kubelet-serving` with a CA
//! configured. `kubernetes.io/legacy-unknown` never issues through certificates.k8s.io/v1,
//! and other signers belong to someone else: both are left alone.
//!
//! A request that breaks the signer's rules gets the condition `Failed` (status True, reason
//! `SignerValidationFailure`, the rule's message) through `/status` and no certificate.
//! Otherwise the certificate (lifetime: `spec.expirationSeconds` capped by
//! `--cluster-signing-duration` and, during a CA rotation, by `rotation.json`'s cap
//! ([`crate::ca_files::signer_cap`]), at least 10 minutes; see [`kustos_ca::csr`]) is written to
//! `status.certificate` through `/status`. Both writes carry the CSR's resourceVersion as
//! precondition: Conflict means it changed meanwhile (reconciled again), NotFound that it is
//! gone. Signing errors (e.g. an expired CA) are retried with a growing delay.
//!
//! Each signer's CA comes from a certificate and key file pair followed while running
//! ([`crate::ca_files`]); which files, from the flags as upstream ([`SigningConfig`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt as _};
use kustos_ca::csr::condition::{self, REASON_SIGNER_VALIDATION_FAILURE};
use kustos_ca::csr::{CertificateRequest, CsrError, Signer};

use crate::ca_files::{CaFiles, CaFilesError};
use crate::csr;
use crate::runtime::{self, Action, Backoff};

pub const NAME: &str = "csrsigning";
/// `--cluster-signing-duration`'s default: one year.
pub const DEFAULT_DURATION: chrono::Duration = chrono::Duration::hours(8760);
/// The signers this controller issues for.
pub const ISSUING: [Signer; 3] = [Signer::KubeApiserverClient, Signer::KubeletClient, Signer::KubeletServing];
/// How often the CA files are checked when nothing is being signed.
pub const CA_POLL_INTERVAL: Duration = Duration::from_secs(10);

/// A `--cluster-signing-*-{cert,key}-file` pair (unset: `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilePair {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl FilePair {
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        FilePair { cert_file: Some(cert_file.into()), key_file: Some(key_file.into()) }
    }

    fn any(&self) -> bool {
        self.cert_file.is_some() || self.key_file.is_some()
    }

    fn both(&self) -> Option<(PathBuf, PathBuf)> {
        self.cert_file.clone().zip(self.key_file.clone())
    }

    /// Upstream's `csrSigningFilesValid`: both or neither.
    fn check(&self) -> Result<(), &'static str> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err("cannot specify cert without key"),
            (None, Some(_)) => Err("cannot specify key without cert"),
            _ => Ok(()),
        }
    }
}

/// The CSR signing flags of kube-controller-manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningConfig {
    /// `--cluster-signing-cert-file`, `--cluster-signing-key-file`: every signer.
    pub cluster: FilePair,
    /// `--cluster-signing-kubelet-serving-{cert,key}-file`.
    pub kubelet_serving: FilePair,
    /// `--cluster-signing-kubelet-client-{cert,key}-file`.
    pub kubelet_client: FilePair,
    /// `--cluster-signing-kube-apiserver-client-{cert,key}-file`.
    pub kube_apiserver_client: FilePair,
    /// `--cluster-signing-legacy-unknown-{cert,key}-file` (accepted; that signer never
    /// issues through certificates.k8s.io/v1).
    pub legacy_unknown: FilePair,
    /// `--cluster-signing-duration`: the longest lifetime issued.
    pub duration: chrono::Duration,
}

impl Default for SigningConfig {
    fn default() -> Self {
        SigningConfig {
            cluster: FilePair::default(),
            kubelet_serving: FilePair::default(),
            kubelet_client: FilePair::default(),
            kube_apiserver_client: FilePair::default(),
            legacy_unknown: FilePair::default(),
            duration: DEFAULT_DURATION,
        }
    }
}

impl SigningConfig {
    fn specific(&self) -> [(&'static str, &FilePair); 4] {
        // Upstream's labels, as its messages print them.
        [
            ("cluster-signing-kubelet-serving", &self.kubelet_serving),
            ("cluster-signing-kube-apiserver-client", &self.kubelet_client),
            ("cluster-signing-kube-apiserver", &self.kube_apiserver_client),
            ("cluster-signing-legacy-unknown", &self.legacy_unknown),
        ]
    }

    fn any_specific(&self) -> bool {
        self.specific().iter().any(|(_, p)| p.any())
    }

    /// Whether any signing file flag is set.
    pub fn any_set(&self) -> bool {
        self.cluster.any() || self.any_specific()
    }

    /// Upstream's option validation: each per-signer pair complete or empty, and the general
    /// pair not combined with per-signer files. Every problem found, in that order.
    pub fn validate(&self) -> Result<(), InvalidSigningConfig> {
        let mut errs = Vec::new();
        for (label, pair) in self.specific() {
            if let Err(problem) = pair.check() {
                errs.push(SigningFlagError::Incomplete { label, problem });
            }
        }
        if self.cluster.any() && self.any_specific() {
            errs.push(SigningFlagError::GeneralWithSpecific);
        }
        if self.duration <= chrono::Duration::zero() {
            errs.push(SigningFlagError::Duration { seconds: self.duration.num_seconds() });
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(InvalidSigningConfig(errs))
        }
    }

    /// The files `signer` signs with: its own pair when any per-signer file is set (none if
    /// its own is not), else the general pair; `None` when that is incomplete.
    pub fn files(&self, signer: Signer) -> Option<(PathBuf, PathBuf)> {
        if !self.any_specific() {
            return self.cluster.both();
        }
        match signer {
            Signer::KubeletServing => self.kubelet_serving.both(),
            Signer::KubeletClient => self.kubelet_client.both(),
            Signer::KubeApiserverClient => self.kube_apiserver_client.both(),
            Signer::LegacyUnknown => self.legacy_unknown.both(),
        }
    }

    /// The issuing signers with files, and their files.
    pub fn configured(&self) -> Vec<(Signer, PathBuf, PathBuf)> {
        ISSUING.into_iter().filter_map(|s| self.files(s).map(|(c, k)| (s, c, k))).collect()
    }
}

/// One problem of the signing flags, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningFlagError {
    /// A per-signer pair with only one of its files (upstream's label for the pair).
    #[error("{label:?}: {problem}")]
    Incomplete { label: &'static str, problem: &'static str },
    #[error(
        "cannot specify --cluster-signing-{{cert,key}}-file and other --cluster-signing-*-file flags at the same time"
    )]
    GeneralWithSpecific,
    #[error("--cluster-signing-duration must be positive, not {seconds}s")]
    Duration { seconds: i64 },
}

/// The signing flags' problems (at least one). One line: the problem, or several as `[a, b]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSigningConfig(pub Vec<SigningFlagError>);

impl std::fmt::Display for InvalidSigningConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            all => {
                let all: Vec<String> = all.iter().map(ToString::to_string).collect();
                write!(f, "[{}]", all.join(", "))
            }
        }
    }
}

/// A signer's CA files do not load, so its controller cannot start. The message includes the
/// files' error (not also a `source`, so that a chain printed in full says it once).
#[derive(Debug, Clone, thiserror::Error)]
#[error("failed to start {signer} certificate controller: {error}")]
pub struct SignerLoadError {
    /// The signer's name.
    pub signer: &'static str,
    pub error: CaFilesError,
}

/// The CA of each issuing signer (signers sharing files share one [`CaFiles`]).
#[derive(Debug, Clone, Default)]
pub struct Signers {
    by_signer: BTreeMap<&'static str, Arc<CaFiles>>,
}

impl Signers {
    /// Load every configured pair; the first that does not load is the error (one line).
    pub fn load(cfg: &SigningConfig) -> Result<Signers, SignerLoadError> {
        let mut loaded: Vec<Arc<CaFiles>> = Vec::new();
        let mut by_signer = BTreeMap::new();
        for (signer, cert, key) in cfg.configured() {
            let files = match loaded.iter().find(|f| f.paths() == (cert.as_path(), key.as_path())) {
                Some(f) => f.clone(),
                None => {
                    let f = Arc::new(
                        CaFiles::load(&cert, &key).map_err(|error| SignerLoadError { signer: signer.name(), error })?,
                    );
                    loaded.push(f.clone());
                    f
                }
            };
            by_signer.insert(signer.name(), files);
        }
        Ok(Signers { by_signer })
    }

    /// The signers with a CA.
    pub fn names(&self) -> Vec<&'static str> {
        self.by_signer.keys().copied().collect()
    }

    pub fn get(&self, signer: Signer) -> Option<&Arc<CaFiles>> {
        self.by_signer.get(signer.name())
    }

    fn distinct(&self) -> Vec<Arc<CaFiles>> {
        let mut out: Vec<Arc<CaFiles>> = Vec::new();
        for f in self.by_signer.values() {
            if !out.iter().any(|o| Arc::ptr_eq(o, f)) {
                out.push(f.clone());
            }
        }
        out
    }
}

/// What to do with one CSR.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Nothing, for this reason.
    Skip(&'static str),
    /// Add the condition Failed with this message (SignerValidationFailure): the request
    /// breaks the signer's rules, or the CSR reader refuses it (a request stored before the
    /// reader's rules were what they are: `spec` is immutable, so it never will be signed).
    Fail(String),
    /// Issue a certificate for `request` with `signer`, lasting `duration`.
    Sign { signer: Signer, request: Box<CertificateRequest>, duration: chrono::Duration },
}

/// Decide for `csr`, given the signers that have a CA and the longest lifetime; `parse` is
/// called at most once, only when there is something to sign.
pub fn decide(
    csr: &CertificateSigningRequest,
    parse: impl FnOnce(&CertificateSigningRequest) -> Result<CertificateRequest, CsrError>,
    signers: &[Signer],
    max_duration: chrono::Duration,
) -> Decision {
    if !csr::is_approved(csr) {
        return Decision::Skip("not approved");
    }
    if csr::has_true_condition(csr, condition::FAILED) {
        return Decision::Skip("failed");
    }
    if !csr::certificate(csr).is_empty() {
        return Decision::Skip("already issued");
    }
    let Some(signer) = Signer::from_name(&csr.spec.signer_name).filter(|s| ISSUING.contains(s)) else {
        return Decision::Skip("not a signer of this controller");
    };
    if !signers.contains(&signer) {
        return Decision::Skip("no CA for this signer");
    }
    let request = match parse(csr) {
        Ok(r) => r,
        Err(e) => return Decision::Fail(format!("unable to parse csr: {e}")),
    };
    if let Err(rule) = kustos_ca::csr::validate(signer, &request, csr::usages(csr)) {
        return Decision::Fail(rule.to_string());
    }
    let duration = kustos_ca::csr::duration(csr.spec.expiration_seconds.map(i64::from), max_duration);
    Decision::Sign { signer, request: Box::new(request), duration }
}

/// The CSR with the condition Failed (SignerValidationFailure) added.
pub fn failed(csr: &CertificateSigningRequest, message: &str, now: DateTime<Utc>) -> CertificateSigningRequest {
    let mut out = csr.clone();
    out.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new).push(
        CertificateSigningRequestCondition {
            type_: condition::FAILED.into(),
            status: "True".into(),
            reason: Some(REASON_SIGNER_VALIDATION_FAILURE.into()),
            message: Some(message.into()),
            last_update_time: Some(csr::to_time(now)),
            ..Default::default()
        },
    );
    out
}

/// The CSR with `status.certificate` set.
pub fn issued(csr: &CertificateSigningRequest, cert_pem: &str) -> CertificateSigningRequest {
    let mut out = csr.clone();
    out.status.get_or_insert_with(Default::default).certificate = Some(ByteString(cert_pem.as_bytes().to_vec()));
    out
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("signing CSR {csr}: {source}")]
    Sign {
        csr: String,
        #[source]
        source: kustos_ca::Error,
    },
    #[error("updating the status of CSR {csr}: {source}")]
    Status {
        csr: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Context {
    csrs: Api<CertificateSigningRequest>,
    signers: Signers,
    enabled: Vec<Signer>,
    max_duration: chrono::Duration,
    backoff: Backoff,
    metrics: crate::metrics::Metrics,
}

impl Context {
    pub fn new(client: Client, signers: Signers, max_duration: chrono::Duration) -> Self {
        Context {
            csrs: Api::all(client),
            enabled: ISSUING.into_iter().filter(|s| signers.get(*s).is_some()).collect(),
            signers,
            max_duration,
            backoff: Backoff::default(),
            metrics: crate::metrics::Metrics::default(),
        }
    }

    /// Count issued and failed CSRs in `metrics` (`kustos_csr_signed_total`,
    /// `kustos_csr_failed_total`).
    pub fn with_metrics(self, metrics: crate::metrics::Metrics) -> Self {
        Context { metrics, ..self }
    }
}

impl runtime::Context for Context {
    fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

pub async fn reconcile(obj: Arc<CertificateSigningRequest>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = obj.name_any();
    let now = Utc::now();
    let (update, what) = match decide(&obj, csr::parse_request, &ctx.enabled, ctx.max_duration) {
        Decision::Skip(_) => {
            ctx.backoff.forget(&name);
            return Ok(Action::await_change());
        }
        Decision::Fail(message) => {
            tracing::info!(controller = NAME, csr = %name, reason = %message, "the request breaks the signer's rules");
            (failed(&obj, &message, now), "failed")
        }
        Decision::Sign { signer, request, duration } => {
            let Some(files) = ctx.signers.get(signer) else { return Ok(Action::await_change()) };
            let ca = files.current();
            let duration = crate::ca_files::capped(duration, files.issue_cap());
            let cert = kustos_ca::csr::sign(ca.signer(), &request, csr::usages(&obj), duration, now)
                .map_err(|source| Error::Sign { csr: name.clone(), source })?;
            (issued(&obj, &cert.cert_pem), "issued")
        }
    };
    match ctx.csrs.replace_status(&name, &PostParams::default(), &update).await {
        Ok(_) => {
            ctx.backoff.forget(&name);
            match what {
                "issued" => ctx.metrics.csr_signed(&obj.spec.signer_name),
                _ => ctx.metrics.csr_failed(&obj.spec.signer_name),
            }
            tracing::debug!(controller = NAME, csr = %name, outcome = what, "status written");
            Ok(Action::await_change())
        }
        Err(e) if crate::runtime::is_status(&e, 409) => Ok(Action::requeue(csr::AFTER_CONFLICT)),
        Err(e) if crate::runtime::is_status(&e, 404) => Ok(Action::await_change()),
        Err(source) => Err(Error::Status { csr: name, source }),
    }
}

/// Run until the task is dropped. Without any signing files, or when they do not load, it
/// does nothing (as upstream, which then does not start the controller; `kustos server`
/// checks the files before it starts anything).
pub async fn run(
    client: Client,
    csrs: runtime::Subscription<CertificateSigningRequest>,
    cfg: crate::Config,
) -> anyhow::Result<()> {
    let signers = if cfg.csr_signing.configured().is_empty() {
        tracing::info!(controller = NAME, "Skipping CSR signer controller because no csr cert/key was specified");
        None
    } else {
        for s in ISSUING {
            if cfg.csr_signing.files(s).is_none() {
                tracing::info!(
                    controller = NAME,
                    signer = s.name(),
                    "Skipping CSR signer controller because specific files were specified for other signers and not this one"
                );
            }
        }
        Signers::load(&cfg.csr_signing)
            .map_err(|e| tracing::error!(controller = NAME, error = %e, "not started: the signing CA does not load"))
            .ok()
    };
    let Some(signers) = signers else {
        // Unsubscribe, so that the shared watch never waits for this controller.
        drop(csrs);
        futures::future::pending::<()>().await;
        return Ok(());
    };
    // The CA file pollers are part of this controller's future: they end with it.
    let polls = futures::future::join_all(signers.distinct().into_iter().map(|f| f.poll(CA_POLL_INTERVAL)));
    let ctx = Arc::new(Context::new(client, signers, cfg.csr_signing.duration).with_metrics(cfg.metrics.clone()));
    let controller =
        runtime::per_object(NAME, csrs, cfg.csr_concurrency, &cfg.metrics, ctx, reconcile, futures::stream::pending());
    tokio::select! {
        res = controller => res,
        _ = polls => Ok(()),
    }
}

/// Check that the configured CA files load (e.g. before starting anything).
pub fn check(cfg: &SigningConfig) -> Result<(), SignerLoadError> {
    Signers::load(cfg).map(|_| ())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::csr_approver::tests::{base_csr, request_pem, with_conditions};
    use chrono::TimeZone as _;

    fn approved_csr() -> CertificateSigningRequest {
        let mut c = base_csr();
        with_conditions(&mut c, &["Approved"]);
        c
    }

    type Mutate = fn(&mut CertificateSigningRequest);
    const ALL: &[Signer] = &ISSUING;

    /// `O=system:nodes, CN=system:node:n1, CN=system:node:victim`, as a node could have stored
    /// it before the reader refused more than one CN.
    const TWO_CNS_PEM: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIIBCTCBrwIBADBNMRUwEwYDVQQKDAxzeXN0ZW06bm9kZXMxFzAVBgNVBAMMDnN5
c3RlbTpub2RlOm4xMRswGQYDVQQDDBJzeXN0ZW06bm9kZTp2aWN0aW0wWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAAR1AkQkv7Y3Ye/scPJXAJ7LpvMQpUKj6DJMAaib
HMwF5jihneo4+zT8K9Gv9OGZJCmRI9zbaQSWvozHI6p0YvjloAAwCgYIKoZIzj0E
AwIDSQAwRgIhALX+1suWZktBNzuxRirr/aMmZU7CSjbFe/jAIp1LaX2zAiEAnQu9
WZShDp2CcbwdKtgW/0JxiAUafV3R5RZNbXqQBMI=
-----END CERTIFICATE REQUEST-----
";

    /// name, mutation of an approved kubelet client CSR, signers with a CA, wanted:
    /// "sign <seconds>", "fail <message fragment>", "skip <reason fragment>".
    const CASES: &[(&str, Mutate, &[Signer], &str)] = &[
        ("approved kubelet client: a year", |_| {}, ALL, "sign 31536000"),
        ("expirationSeconds honoured", |c| c.spec.expiration_seconds = Some(3600), ALL, "sign 3600"),
        ("capped by the maximum", |c| c.spec.expiration_seconds = Some(i32::MAX), ALL, "sign 31536000"),
        ("at least ten minutes", |c| c.spec.expiration_seconds = Some(60), ALL, "sign 600"),
        ("pending", |c| c.status = None, ALL, "skip not approved"),
        ("denied", |c| with_conditions(c, &["Denied"]), ALL, "skip not approved"),
        ("approved and denied", |c| with_conditions(c, &["Approved", "Denied"]), ALL, "skip not approved"),
        ("failed", |c| with_conditions(c, &["Approved", "Failed"]), ALL, "skip failed"),
        (
            "already issued",
            |c| c.status.get_or_insert_with(Default::default).certificate = Some(ByteString(b"x".to_vec())),
            ALL,
            "skip already issued",
        ),
        ("someone else's signer", |c| c.spec.signer_name = "example.com/foo".into(), ALL, "skip not a signer"),
        (
            "legacy-unknown never issues through v1",
            |c| c.spec.signer_name = Signer::LegacyUnknown.name().into(),
            ALL,
            "skip not a signer",
        ),
        ("no CA for the signer", |_| {}, &[Signer::KubeletServing], "skip no CA"),
        (
            "kubelet client with a SAN",
            |c| c.spec.request = ByteString(request_pem("system:node:n1", &["system:nodes"], &["n1.example"])),
            ALL,
            "fail DNS subjectAltNames are not allowed",
        ),
        (
            "kubelet client with another organization",
            |c| c.spec.request = ByteString(request_pem("system:node:n1", &["system:nodes", "x"], &[])),
            ALL,
            "fail subject organization is not system:nodes",
        ),
        (
            "kubelet client with server auth",
            |c| c.spec.usages = Some(vec!["digital signature".into(), "client auth".into(), "server auth".into()]),
            ALL,
            "fail usages did not match",
        ),
        (
            "apiserver client with server auth",
            |c| {
                c.spec.signer_name = Signer::KubeApiserverClient.name().into();
                c.spec.request = ByteString(request_pem("jane", &["devs"], &[]));
                c.spec.usages = Some(vec!["client auth".into(), "server auth".into()]);
            },
            ALL,
            "fail invalid usage for client certificate: server auth",
        ),
        (
            "apiserver client without client auth",
            |c| {
                c.spec.signer_name = Signer::KubeApiserverClient.name().into();
                c.spec.request = ByteString(request_pem("jane", &["devs"], &[]));
                c.spec.usages = Some(vec!["digital signature".into()]);
            },
            ALL,
            "fail missing required usage for client certificate: client auth",
        ),
        (
            "apiserver client",
            |c| {
                c.spec.signer_name = Signer::KubeApiserverClient.name().into();
                c.spec.request = ByteString(request_pem("jane", &["devs"], &["jane.example"]));
                c.spec.usages = Some(vec!["client auth".into()]);
            },
            ALL,
            "sign 31536000",
        ),
        (
            "kubelet serving without a SAN",
            |c| c.spec.signer_name = Signer::KubeletServing.name().into(),
            ALL,
            "fail DNS or IP subjectAltName is required",
        ),
        (
            "kubelet serving",
            |c| {
                c.spec.signer_name = Signer::KubeletServing.name().into();
                c.spec.request = ByteString(request_pem("system:node:n1", &["system:nodes"], &["n1.example"]));
                c.spec.usages = Some(vec!["digital signature".into(), "server auth".into()]);
            },
            ALL,
            "sign 31536000",
        ),
        (
            "garbage request",
            |c| c.spec.request = ByteString(b"garbage".to_vec()),
            ALL,
            "fail unable to parse csr: PEM block type must be CERTIFICATE REQUEST",
        ),
        (
            "a stored request the reader now refuses: two CNs",
            |c| c.spec.request = ByteString(TWO_CNS_PEM.as_bytes().to_vec()),
            ALL,
            "fail unable to parse csr: subject has 2 common names",
        ),
    ];

    #[test]
    fn signing_decisions() {
        for (name, mutate, signers, want) in CASES {
            let mut csr = approved_csr();
            mutate(&mut csr);
            let mut parses = 0;
            let got = decide(
                &csr,
                |c| {
                    parses += 1;
                    csr::parse_request(c)
                },
                signers,
                DEFAULT_DURATION,
            );
            assert!(parses <= 1, "{name}: parsed {parses} times");
            let got = match got {
                Decision::Skip(why) => format!("skip {why}"),
                Decision::Fail(m) => format!("fail {m}"),
                Decision::Sign { duration, .. } => format!("sign {}", duration.num_seconds()),
            };
            assert!(got.starts_with(want), "{name}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn the_writes_carry_upstreams_condition_and_the_certificate() {
        let now = chrono::Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let csr = approved_csr();
        let out = failed(&csr, "subject organization is not system:nodes", now);
        let conds = out.status.as_ref().unwrap().conditions.as_ref().unwrap();
        assert_eq!(conds.len(), 2, "the Approved condition stays");
        let c = &conds[1];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Failed", "True"));
        assert_eq!(c.reason.as_deref(), Some("SignerValidationFailure"));
        assert_eq!(c.message.as_deref(), Some("subject organization is not system:nodes"));
        assert_eq!(c.last_update_time.as_ref().and_then(csr::to_chrono), Some(now));
        assert!(out.status.as_ref().unwrap().certificate.is_none(), "no certificate");
        assert_eq!(out.metadata.resource_version.as_deref(), Some("42"), "the precondition travels with it");

        let out = issued(&csr, "-----BEGIN CERTIFICATE-----\n...");
        assert_eq!(csr::certificate(&out), b"-----BEGIN CERTIFICATE-----\n...");
        assert_eq!(csr::conditions(&out), csr::conditions(&csr));
    }

    /// name, flags, wanted validation error fragment ("" = valid), files used per signer
    /// (kube-apiserver-client, kubelet-client, kubelet-serving; "" = none).
    type FlagCase = (&'static str, fn() -> SigningConfig, &'static str, [&'static str; 3]);

    fn pair(c: &str, k: &str) -> FilePair {
        FilePair::new(c, k)
    }

    const FLAG_CASES: &[FlagCase] = &[
        ("nothing set: no signer", SigningConfig::default, "", ["", "", ""]),
        (
            "the general pair signs for every signer",
            || SigningConfig { cluster: pair("ca.crt", "ca.key"), ..Default::default() },
            "",
            ["ca.crt", "ca.crt", "ca.crt"],
        ),
        (
            "per-signer pairs; the others are not started",
            || SigningConfig { kubelet_client: pair("kc.crt", "kc.key"), ..Default::default() },
            "",
            ["", "kc.crt", ""],
        ),
        (
            "all per-signer pairs",
            || SigningConfig {
                kubelet_client: pair("kc.crt", "kc.key"),
                kubelet_serving: pair("ks.crt", "ks.key"),
                kube_apiserver_client: pair("ac.crt", "ac.key"),
                legacy_unknown: pair("lu.crt", "lu.key"),
                ..Default::default()
            },
            "",
            ["ac.crt", "kc.crt", "ks.crt"],
        ),
        (
            "general and per-signer together",
            || SigningConfig {
                cluster: pair("ca.crt", "ca.key"),
                kubelet_serving: pair("ks.crt", "ks.key"),
                ..Default::default()
            },
            "cannot specify --cluster-signing-{cert,key}-file and other --cluster-signing-*-file flags at the same time",
            ["", "", "ks.crt"],
        ),
        (
            "only the general cert: incomplete, nothing signs",
            || SigningConfig { cluster: FilePair { cert_file: Some("ca.crt".into()), key_file: None }, ..Default::default() },
            "",
            ["", "", ""],
        ),
        (
            "a per-signer cert without its key (upstream's label)",
            || SigningConfig {
                kubelet_client: FilePair { cert_file: Some("kc.crt".into()), key_file: None },
                ..Default::default()
            },
            "\"cluster-signing-kube-apiserver-client\": cannot specify cert without key",
            ["", "", ""],
        ),
        (
            "two problems at once: one line",
            || SigningConfig {
                cluster: pair("ca.crt", "ca.key"),
                kubelet_serving: FilePair { cert_file: None, key_file: Some("ks.key".into()) },
                ..Default::default()
            },
            "[\"cluster-signing-kubelet-serving\": cannot specify key without cert, cannot specify --cluster-signing-{cert,key}-file",
            ["", "", ""],
        ),
        (
            "a zero duration",
            || SigningConfig { cluster: pair("ca.crt", "ca.key"), duration: chrono::Duration::zero(), ..Default::default() },
            "--cluster-signing-duration must be positive",
            ["ca.crt", "ca.crt", "ca.crt"],
        ),
    ];

    #[test]
    fn signing_flags() {
        for (name, cfg, want_err, want_files) in FLAG_CASES {
            let cfg = cfg();
            match (cfg.validate(), want_err.is_empty()) {
                (Ok(()), true) => {}
                (Err(e), false) => {
                    let e = e.to_string();
                    assert!(e.contains(want_err), "{name}: {e}");
                    assert!(!e.contains('\n'), "{name}: one line");
                }
                (got, _) => panic!("{name}: got {got:?}, want {want_err:?}"),
            }
            let files: Vec<String> = ISSUING
                .iter()
                .map(|s| cfg.files(*s).map(|(c, _)| c.display().to_string()).unwrap_or_default())
                .collect();
            assert_eq!(files, want_files, "{name}: files per signer");
        }
    }

    #[tokio::test]
    async fn reconcile_writes_the_certificate_or_the_failure_through_status() {
        use crate::mock::{status, Mock};
        const STATUS: &str = "PUT /apis/certificates.k8s.io/v1/certificatesigningrequests/node-csr-1/status";
        let dir = tempfile::tempdir().unwrap();
        let ca = kustos_ca::Ca::generate("signing-ca", chrono::Duration::days(365), Utc::now()).unwrap();
        let (crt, key) = (dir.path().join("ca.crt"), dir.path().join("ca.key"));
        std::fs::write(&crt, ca.cert_pem()).unwrap();
        std::fs::write(&key, ca.key_pem()).unwrap();
        let cfg = SigningConfig { cluster: FilePair::new(&crt, &key), ..Default::default() };
        let reply = (200, serde_json::to_value(approved_csr()).unwrap());
        // name, mutation, replies, wanted calls, wanted outcome, what the write carries.
        type Scenario =
            (&'static str, Mutate, Vec<(u16, serde_json::Value)>, Vec<&'static str>, &'static str, &'static str);
        let scenarios: Vec<Scenario> = vec![
            ("issued", |_| {}, vec![reply.clone()], vec![STATUS], "await", "certificate"),
            (
                "fails validation",
                |c| c.spec.usages = Some(vec!["server auth".into()]),
                vec![reply.clone()],
                vec![STATUS],
                "await",
                "failed",
            ),
            ("lost a race", |_| {}, vec![(409, status(409, "Conflict"))], vec![STATUS], "requeue", "certificate"),
            ("gone", |_| {}, vec![(404, status(404, "NotFound"))], vec![STATUS], "await", "certificate"),
            (
                "the write fails",
                |_| {},
                vec![(500, status(500, "InternalError"))],
                vec![STATUS],
                "error",
                "certificate",
            ),
            ("not approved: no calls", |c| c.status = None, vec![], vec![], "await", ""),
        ];
        for (name, mutate, replies, want_calls, want, carries) in scenarios {
            let mock = Mock::new(replies);
            let ctx = Arc::new(Context::new(mock.client(), Signers::load(&cfg).unwrap(), DEFAULT_DURATION));
            let mut c = approved_csr();
            mutate(&mut c);
            let res =
                tokio::time::timeout(std::time::Duration::from_secs(5), reconcile(Arc::new(c), ctx)).await.unwrap();
            let got = match res {
                Ok(a) if a == Action::await_change() => "await",
                Ok(a) if a == Action::requeue(csr::AFTER_CONFLICT) => "requeue",
                Ok(a) => panic!("{name}: {a:?}"),
                Err(_) => "error",
            };
            assert_eq!(got, want, "{name}");
            assert_eq!(mock.lines(), want_calls, "{name}: calls");
            for call in mock.calls() {
                assert_eq!(call.body["metadata"]["resourceVersion"], "42", "{name}: precondition");
                match carries {
                    "certificate" => {
                        let b64 = call.body["status"]["certificate"].as_str().unwrap();
                        use base64::Engine as _;
                        let pem = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
                        let der = kustos_ca::certificates_from_pem(std::str::from_utf8(&pem).unwrap()).unwrap();
                        assert!(ca.signed(&der[0]), "{name}: signed by the configured CA");
                    }
                    _ => {
                        assert!(call.body["status"]["certificate"].is_null(), "{name}: no certificate");
                        let failed = &call.body["status"]["conditions"][1];
                        assert_eq!(failed["type"], "Failed", "{name}");
                        assert_eq!(failed["reason"], "SignerValidationFailure", "{name}");
                    }
                }
            }
        }
    }
}
