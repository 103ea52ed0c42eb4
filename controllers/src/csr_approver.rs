//! `csrapproving`: approves kubelet client certificates, as kube-controller-manager's
//! SubjectAccessReview approver (`pkg/controller/certificates/approver/sarapprove.go`).
//!
//! Watches CertificateSigningRequests and reconciles each one on its own ([`crate::reconcile`]).
//! A CSR that has no certificate and neither an Approved nor a Denied condition is matched
//! against [`RECOGNIZERS`] in order (`selfnodeclient`: a kubelet client CSR whose requester is
//! the node named in it; `nodeclient`: any kubelet client CSR, i.e. signer
//! `kubernetes.io/kube-apiserver-client-kubelet` and valid for it). For each recognizer that
//! matches, a SubjectAccessReview asks whether the requester (`spec.username`, `uid`,
//! `groups`, `extra`) may `create` `certificatesigningrequests/<subresource>` in
//! `certificates.k8s.io`. The first allowed one adds the condition `Approved` (status True,
//! reason `AutoApproved`, upstream's message) through the `/approval` subresource, with the
//! CSR's resourceVersion as precondition.
//!
//! It never denies. A CSR no recognizer matches is left alone; one whose requester is not
//! allowed stays Pending and is asked about again with a growing delay (a grant may come
//! later). Conflict on the write means the CSR changed meanwhile (it is reconciled again with
//! its new version); NotFound that it is gone.

use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt as _};
use kustos_ca::csr::condition::{self, REASON_AUTO_APPROVED};
use kustos_ca::csr::{CertificateRequest, CsrError, Signer};

use crate::csr;
use crate::runtime::{self, Action, Backoff};

pub const NAME: &str = "csrapproving";

/// A kind of CSR the approver knows, and the permission that approves it (upstream's
/// `csrRecognizer`).
#[derive(Debug)]
pub struct Recognizer {
    /// The subresource of `certificatesigningrequests` the requester needs `create` on.
    pub subresource: &'static str,
    pub recognize: fn(&CertificateSigningRequest, &CertificateRequest) -> bool,
    /// The Approved condition's message.
    pub message: &'static str,
}

/// Recognizers are told apart by their permission and message.
impl PartialEq for Recognizer {
    fn eq(&self, other: &Self) -> bool {
        self.subresource == other.subresource && self.message == other.message
    }
}

/// Upstream's recognizers, in the order they are tried.
pub const RECOGNIZERS: &[Recognizer] = &[
    Recognizer {
        subresource: "selfnodeclient",
        recognize: is_self_node_client,
        message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
    },
    Recognizer {
        subresource: "nodeclient",
        recognize: is_node_client,
        message: "Auto approving kubelet client certificate after SubjectAccessReview.",
    },
];

/// A kubelet client CSR: signer `kubernetes.io/kube-apiserver-client-kubelet` and a request
/// that signer accepts.
pub fn is_node_client(csr: &CertificateSigningRequest, req: &CertificateRequest) -> bool {
    csr.spec.signer_name == Signer::KubeletClient.name()
        && kustos_ca::csr::validate(Signer::KubeletClient, req, csr::usages(csr)).is_ok()
}

/// A kubelet client CSR made by the node it names (requester == subject CN): a renewal.
pub fn is_self_node_client(csr: &CertificateSigningRequest, req: &CertificateRequest) -> bool {
    csr.spec.username.as_deref() == Some(req.common_name.as_str()) && is_node_client(csr, req)
}

/// What to do with one CSR.
#[derive(Debug, PartialEq)]
pub enum Decision<'r> {
    /// Nothing, for this reason.
    Skip(&'static str),
    /// The request does not parse (it never will: `spec` is immutable).
    Unparseable(CsrError),
    /// Ask a SubjectAccessReview for each, in order; approve with the first allowed.
    Authorize(Vec<&'r Recognizer>),
}

/// Decide for `csr`; `parse` is called at most once, only when the CSR is still pending.
pub fn decide<'r>(
    csr: &CertificateSigningRequest,
    parse: impl FnOnce(&CertificateSigningRequest) -> Result<CertificateRequest, CsrError>,
    recognizers: &'r [Recognizer],
) -> Decision<'r> {
    if !csr::certificate(csr).is_empty() {
        return Decision::Skip("already issued");
    }
    if csr::approval(csr) != (false, false) {
        return Decision::Skip("already approved or denied");
    }
    let req = match parse(csr) {
        Ok(r) => r,
        Err(e) => return Decision::Unparseable(e),
    };
    let matching: Vec<&Recognizer> = recognizers.iter().filter(|r| (r.recognize)(csr, &req)).collect();
    if matching.is_empty() {
        return Decision::Skip("not a kubelet client certificate request");
    }
    Decision::Authorize(matching)
}

/// The SubjectAccessReview asking whether the CSR's requester may `create`
/// `certificatesigningrequests/<subresource>`.
pub fn subject_access_review(csr: &CertificateSigningRequest, subresource: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                verb: Some("create".into()),
                subresource: Some(subresource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The CSR with the Approved condition added (timestamps are defaulted by the apiserver).
pub fn approved(csr: &CertificateSigningRequest, message: &str) -> CertificateSigningRequest {
    let mut out = csr.clone();
    out.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new).push(
        CertificateSigningRequestCondition {
            type_: condition::APPROVED.into(),
            status: "True".into(),
            reason: Some(REASON_AUTO_APPROVED.into()),
            message: Some(message.into()),
            ..Default::default()
        },
    );
    out
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("SubjectAccessReview for CSR {csr}: {source}")]
    Review {
        csr: String,
        #[source]
        source: kube::Error,
    },
    #[error("updating the approval of CSR {csr}: {source}")]
    Approve {
        csr: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Context {
    csrs: Api<CertificateSigningRequest>,
    reviews: Api<SubjectAccessReview>,
    backoff: Backoff,
    metrics: crate::metrics::Metrics,
}

impl Context {
    pub fn new(client: Client) -> Self {
        Context {
            csrs: Api::all(client.clone()),
            reviews: Api::all(client),
            backoff: Backoff::default(),
            metrics: crate::metrics::Metrics::default(),
        }
    }

    /// Count approvals in `metrics` (`kustos_csr_approved_total`).
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
    let recognizers = match decide(&obj, csr::read_request, RECOGNIZERS) {
        Decision::Skip(_) => {
            ctx.backoff.forget(&name);
            return Ok(Action::await_change());
        }
        Decision::Unparseable(e) => {
            tracing::warn!(controller = NAME, csr = %name, error = %e, "unable to parse the CSR");
            return Ok(Action::await_change());
        }
        Decision::Authorize(r) => r,
    };
    let mut tried = Vec::new();
    for r in recognizers {
        tried.push(r.subresource);
        let sar = subject_access_review(&obj, r.subresource);
        let review = ctx
            .reviews
            .create(&PostParams::default(), &sar)
            .await
            .map_err(|source| Error::Review { csr: name.clone(), source })?;
        if !review.status.is_some_and(|s| s.allowed) {
            continue;
        }
        return match ctx
            .csrs
            .replace_subresource("approval", &name, &PostParams::default(), &approved(&obj, r.message))
            .await
        {
            Ok(_) => {
                ctx.backoff.forget(&name);
                ctx.metrics.csr_approved(&obj.spec.signer_name);
                tracing::debug!(controller = NAME, csr = %name, permission = r.subresource, "approved");
                Ok(Action::await_change())
            }
            Err(e) if crate::runtime::is_status(&e, 409) => Ok(Action::requeue(csr::AFTER_CONFLICT)),
            Err(e) if crate::runtime::is_status(&e, 404) => Ok(Action::await_change()),
            Err(source) => Err(Error::Approve { csr: name, source }),
        };
    }
    let delay = ctx.backoff.next(&name);
    tracing::debug!(
        controller = NAME,
        csr = %name,
        tried = ?tried,
        retry_in = ?delay,
        "recognized the CSR but the SubjectAccessReview was not approved"
    );
    Ok(Action::requeue(delay))
}

/// Run until the task is dropped.
pub async fn run(
    client: Client,
    csrs: runtime::Subscription<CertificateSigningRequest>,
    cfg: crate::Config,
) -> anyhow::Result<()> {
    let ctx = Arc::new(Context::new(client).with_metrics(cfg.metrics.clone()));
    runtime::per_object(NAME, csrs, cfg.csr_concurrency, &cfg.metrics, ctx, reconcile, futures::stream::pending()).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequestSpec, CertificateSigningRequestStatus};
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    /// A PEM CSR made with rcgen: CN, O list, DNS SANs.
    pub(crate) fn request_pem(cn: &str, orgs: &[&str], dns: &[&str]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
        }
        for d in dns {
            params.subject_alt_names.push(rcgen::SanType::DnsName((*d).try_into().unwrap()));
        }
        params.serialize_request(&key).unwrap().pem().unwrap().into_bytes()
    }

    /// A pending kubelet client CSR for node n1 made with a bootstrap token.
    pub(crate) fn base_csr() -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("node-csr-1".into()),
                uid: Some("uid-1".into()),
                resource_version: Some("42".into()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request_pem("system:node:n1", &["system:nodes"], &[])),
                signer_name: Signer::KubeletClient.name().into(),
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                username: Some("system:bootstrap:abcdef".into()),
                uid: Some("boot-uid".into()),
                groups: Some(vec!["system:bootstrappers".into(), "system:authenticated".into()]),
                extra: Some([("scopes".to_string(), vec!["a".to_string()])].into()),
                ..Default::default()
            },
            status: None,
        }
    }

    pub(crate) fn condition(type_: &str) -> CertificateSigningRequestCondition {
        CertificateSigningRequestCondition { type_: type_.into(), status: "True".into(), ..Default::default() }
    }

    pub(crate) fn with_conditions(csr: &mut CertificateSigningRequest, types: &[&str]) {
        csr.status.get_or_insert_with(Default::default).conditions = Some(types.iter().map(|t| condition(t)).collect());
    }

    type Mutate = fn(&mut CertificateSigningRequest);

    /// name, mutation of the base CSR, wanted decision (subresources to ask, or a skip reason
    /// fragment, or "unparseable").
    type Case = (&'static str, Mutate, Result<&'static [&'static str], &'static str>);
    const CASES: &[Case] = &[
        ("a new node with a bootstrap token", |_| {}, Ok(&["nodeclient"])),
        (
            "a node renewing its own certificate",
            |c| c.spec.username = Some("system:node:n1".into()),
            Ok(&["selfnodeclient", "nodeclient"]),
        ),
        (
            "a node asking for another node's certificate",
            |c| c.spec.username = Some("system:node:n2".into()),
            Ok(&["nodeclient"]),
        ),
        (
            "the RSA usage set is a kubelet client too",
            |c| c.spec.usages = Some(vec!["key encipherment".into(), "digital signature".into(), "client auth".into()]),
            Ok(&["nodeclient"]),
        ),
        ("already approved", |c| with_conditions(c, &["Approved"]), Err("approved or denied")),
        ("denied", |c| with_conditions(c, &["Denied"]), Err("approved or denied")),
        (
            "issued",
            |c| {
                c.status = Some(CertificateSigningRequestStatus {
                    certificate: Some(ByteString(b"x".to_vec())),
                    conditions: None,
                })
            },
            Err("already issued"),
        ),
        (
            "failed but not approved: still asked (as upstream)",
            |c| with_conditions(c, &["Failed"]),
            Ok(&["nodeclient"]),
        ),
        (
            "another signer",
            |c| c.spec.signer_name = Signer::KubeApiserverClient.name().into(),
            Err("not a kubelet client"),
        ),
        ("kubelet serving", |c| c.spec.signer_name = Signer::KubeletServing.name().into(), Err("not a kubelet client")),
        (
            "organization is not system:nodes",
            |c| c.spec.request = ByteString(request_pem("system:node:n1", &["system:masters"], &[])),
            Err("not a kubelet client"),
        ),
        (
            "a SAN",
            |c| c.spec.request = ByteString(request_pem("system:node:n1", &["system:nodes"], &["n1.example"])),
            Err("not a kubelet client"),
        ),
        (
            "CN not a node",
            |c| c.spec.request = ByteString(request_pem("jane", &["system:nodes"], &[])),
            Err("not a kubelet client"),
        ),
        (
            "server auth usage",
            |c| c.spec.usages = Some(vec!["digital signature".into(), "server auth".into()]),
            Err("not a kubelet client"),
        ),
        ("garbage request", |c| c.spec.request = ByteString(b"garbage".to_vec()), Err("unparseable")),
    ];

    #[test]
    fn approval_decisions() {
        for (name, mutate, want) in CASES {
            let mut csr = base_csr();
            mutate(&mut csr);
            let mut parses = 0;
            let got = decide(
                &csr,
                |c| {
                    parses += 1;
                    csr::parse_request(c)
                },
                RECOGNIZERS,
            );
            assert!(parses <= 1, "{name}: parsed {parses} times");
            match (&got, want) {
                (Decision::Authorize(rs), Ok(subs)) => {
                    assert_eq!(&rs.iter().map(|r| r.subresource).collect::<Vec<_>>(), subs, "{name}")
                }
                (Decision::Skip(why), Err(w)) => assert!(why.contains(w), "{name}: skipped because {why}"),
                (Decision::Unparseable(_), Err("unparseable")) => {}
                _ => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    fn allowed(yes: bool) -> (u16, serde_json::Value) {
        (
            201,
            serde_json::json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {}, "status": {"allowed": yes}}),
        )
    }

    fn csr_reply() -> (u16, serde_json::Value) {
        (200, serde_json::to_value(base_csr()).unwrap())
    }

    const SAR: &str = "POST /apis/authorization.k8s.io/v1/subjectaccessreviews";
    const APPROVAL: &str = "PUT /apis/certificates.k8s.io/v1/certificatesigningrequests/node-csr-1/approval";

    /// name, mutation, replies, wanted calls, wanted outcome ("await", "requeue <ms>" or "error").
    type Scenario = (&'static str, Mutate, Vec<(u16, serde_json::Value)>, Vec<&'static str>, &'static str);

    #[tokio::test]
    async fn reconcile_scenarios() {
        use crate::mock::{status, Mock};
        let renewal: Mutate = |c| c.spec.username = Some("system:node:n1".into());
        let scenarios: Vec<Scenario> = vec![
            ("allowed: approved", |_| {}, vec![allowed(true), csr_reply()], vec![SAR, APPROVAL], "await"),
            (
                "renewal: selfnodeclient allowed first",
                renewal,
                vec![allowed(true), csr_reply()],
                vec![SAR, APPROVAL],
                "await",
            ),
            (
                "renewal: selfnodeclient denied, nodeclient allowed",
                renewal,
                vec![allowed(false), allowed(true), csr_reply()],
                vec![SAR, SAR, APPROVAL],
                "await",
            ),
            (
                "not allowed: left pending, asked again later",
                renewal,
                vec![allowed(false), allowed(false)],
                vec![SAR, SAR],
                "requeue 100",
            ),
            (
                "lost a race: look again soon",
                |_| {},
                vec![allowed(true), (409, status(409, "Conflict"))],
                vec![SAR, APPROVAL],
                "requeue 100",
            ),
            (
                "gone meanwhile",
                |_| {},
                vec![allowed(true), (404, status(404, "NotFound"))],
                vec![SAR, APPROVAL],
                "await",
            ),
            ("the review fails: retried", |_| {}, vec![(500, status(500, "InternalError"))], vec![SAR], "error"),
            (
                "the write fails: retried",
                |_| {},
                vec![allowed(true), (500, status(500, "InternalError"))],
                vec![SAR, APPROVAL],
                "error",
            ),
            ("already approved: no calls", |c| with_conditions(c, &["Approved"]), vec![], vec![], "await"),
        ];
        for (name, mutate, replies, want_calls, want) in scenarios {
            let mock = Mock::new(replies);
            let ctx = Arc::new(Context::new(mock.client()));
            let mut csr = base_csr();
            mutate(&mut csr);
            let res =
                tokio::time::timeout(std::time::Duration::from_secs(5), reconcile(Arc::new(csr), ctx)).await.unwrap();
            let got = match res {
                Ok(a) if a == Action::await_change() => "await".to_string(),
                Ok(a) if a == Action::requeue(csr::AFTER_CONFLICT) => "requeue 100".to_string(),
                Ok(a) => format!("{a:?}"),
                Err(e) => {
                    assert!(e.to_string().contains("node-csr-1"), "{name}: the error names the CSR: {e}");
                    "error".to_string()
                }
            };
            assert_eq!(got, want, "{name}");
            assert_eq!(mock.lines(), want_calls, "{name}: calls");
            for call in mock.calls() {
                if call.line == SAR {
                    assert_eq!(call.body["spec"]["resourceAttributes"]["verb"], "create", "{name}");
                    assert_eq!(call.body["spec"]["user"], csr_user(mutate), "{name}: asked for the requester");
                }
                if call.line == APPROVAL {
                    assert_eq!(call.body["metadata"]["resourceVersion"], "42", "{name}: precondition");
                    assert_eq!(call.body["status"]["conditions"][0]["reason"], "AutoApproved", "{name}");
                }
            }
        }
    }

    fn csr_user(mutate: Mutate) -> String {
        let mut c = base_csr();
        mutate(&mut c);
        c.spec.username.unwrap_or_default()
    }

    #[test]
    fn recognizers_are_data_a_test_can_replace() {
        let only_self = [Recognizer { subresource: "custom", recognize: is_self_node_client, message: "m" }];
        assert_eq!(
            decide(&base_csr(), csr::parse_request, &only_self),
            Decision::Skip("not a kubelet client certificate request"),
            "a bootstrap user is not the node itself"
        );
        let mut renewal = base_csr();
        renewal.spec.username = Some("system:node:n1".into());
        let Decision::Authorize(rs) = decide(&renewal, csr::parse_request, &only_self) else { panic!("renewal") };
        assert_eq!(rs[0].subresource, "custom");
    }

    #[test]
    fn the_review_asks_for_the_requester_and_the_approval_is_upstreams() {
        let csr = base_csr();
        let sar = subject_access_review(&csr, "nodeclient");
        assert_eq!(sar.spec.user.as_deref(), Some("system:bootstrap:abcdef"));
        assert_eq!(sar.spec.uid.as_deref(), Some("boot-uid"));
        assert_eq!(sar.spec.groups, csr.spec.groups);
        assert_eq!(sar.spec.extra, csr.spec.extra);
        let attrs = sar.spec.resource_attributes.unwrap();
        assert_eq!(attrs.group.as_deref(), Some("certificates.k8s.io"));
        assert_eq!(attrs.resource.as_deref(), Some("certificatesigningrequests"));
        assert_eq!(attrs.subresource.as_deref(), Some("nodeclient"));
        assert_eq!(attrs.verb.as_deref(), Some("create"));
        assert_eq!(attrs.namespace, None);
        assert_eq!(attrs.name, None);

        let mut failed = base_csr();
        with_conditions(&mut failed, &["Failed"]);
        let out = approved(&failed, RECOGNIZERS[1].message);
        let conds = out.status.unwrap().conditions.unwrap();
        assert_eq!(conds.len(), 2, "existing conditions are kept");
        let c = &conds[1];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Approved", "True"));
        assert_eq!(c.reason.as_deref(), Some("AutoApproved"));
        assert_eq!(c.message.as_deref(), Some("Auto approving kubelet client certificate after SubjectAccessReview."));
        assert_eq!(out.metadata.resource_version.as_deref(), Some("42"), "the precondition travels with it");
        assert_eq!(out.spec, failed.spec);
    }
}
