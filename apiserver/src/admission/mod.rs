//! Admission: an ordered chain of named plugins, as upstream's (`k8s.io/apiserver/pkg/admission`),
//! for the checks that need more than the object itself (the requester's rights, other
//! objects). The generic REST handlers call the chain; each plugin says which kinds and
//! operations it [`Plugin::handles`].
//!
//! Plugins are registered by name ([`plugins`], upstream's `admission.Plugins`), in the order
//! the chain runs them ([`chain`], [`chain_of`] for a subset), each in the phases it takes part in:
//!
//! | plugin | phase | what |
//! |---|---|---|
//! | NamespaceLifecycle | mutating | a namespaced object is created only in a namespace that exists and is not terminating; `default`, `kube-system`, `kube-public` are never deleted |
//! | NodeRestriction | mutating | a node writes only its own Lease, Node (within limits: no taint changes, no restricted labels) and CSINode, creates only its own mirror pods, writes the status of and deletes only pods bound to it, and asks for kubelet certificates only in its own name ([`crate::admission::node_restriction`]) |
//! | PodCertificateRequestNodeRestriction | mutating | NodeRestriction for PodCertificateRequests: a node requests certificates only for pods bound to it, for signers they mount ([`pod_certificates`]) |
//! | CertificateApproval | validating | a write to a CSR's `/approval` needs verb `approve` on `signers` for the signerName or `<domain>/*` |
//! | CertificateSigning | validating | changing `status.certificate` through `/status` needs `sign` |
//! | PodCertificateRequestSigning | validating | changing a PodCertificateRequest's status needs `sign` ([`pod_certificates`]) |
//! | ClusterTrustBundleAttest | validating | creating or changing a ClusterTrustBundle linked to a signer needs verb `attest` on `signers` for the signerName or `<domain>/*`; the signerName never changes |
//! | CertificateSubjectRestriction | validating | no `system:masters` in a `kube-apiserver-client` request |
//! | RBACEscalation | validating | no granting or binding of rights the requester lacks ([`crate::authz::rbac::escalation`]; upstream checks this in the RBAC storage) |
//! | BootstrapCSRReads | read | see below |
//!
//! Semantics follow upstream's chain: every mutating plugin that handles the request runs,
//! in order, then every validating one; the first error stops the chain and is the answer
//! (upstream's plugins answer 403 Forbidden, and so do these). A create or update runs the
//! phases apart ([`Chain::admit_phase`]), as upstream: mutating on the object as sent, then
//! the strategy's preparation and field validation (every field error of the object in one
//! 422 `Invalid`), then validating. A delete runs the whole chain on the stored object, read
//! (404 when missing) and checked against the preconditions first, as upstream's store does.
//!
//! Reads are not admitted upstream. kustos adds one read plugin, BootstrapCSRReads: a
//! bootstrap token (group `system:bootstrappers`) may list and watch
//! CertificateSigningRequests only one at a time by name (the way a kubelet waits for its
//! own certificate), so it cannot enumerate the CSRs of other nodes. Upstream's
//! `system:node-bootstrapper` role grants list on all CSRs; kustos keeps the role as it is
//! and narrows its use by the short-lived, widely shared bootstrap credentials.
//!
//! In this folder: what enters is a write (or a read, for the read plugin) with its user,
//! the new and the stored object ([`Attributes`]: a plugin reads them typed, through
//! [`Attributes::object_as`] and [`Attributes::old_object_as`], into k8s-openapi's type of
//! the kind or a view of its own, decoded once per request for every plugin asking for the
//! same type), and the few services a plugin may use ([`Services`]: stored objects by kind and
//! name, read only ([`Objects`]), the authorizer, the RBAC objects, built by the server from
//! its state); what leaves is the same write, or the first plugin's error (403, 404 where
//! upstream's plugin answers NotFound, 422 where upstream's check is a validation).
//! [`node_restriction`] is NodeRestriction.

pub mod node_restriction;
mod objects;
pub mod pod_certificates;

use std::any::Any;
use std::sync::{Arc, LazyLock, OnceLock};

use k8s_openapi::api::certificates::v1::{CertificateSigningRequest as Csr, ClusterTrustBundle};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::Metadata;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use objects::Objects;

use crate::authn::UserInfo;
use crate::authz::rbac::cache::RbacCache;
use crate::authz::Authorizer;
use crate::error::ApiError;
use crate::http::request_info::RequestInfo;
use crate::registry::{ResourceDef, Role};

const BOOTSTRAPPERS_GROUP: &str = kustos_ca::bootstrap_token::DEFAULT_GROUP;
const CSR_GROUP: &str = "certificates.k8s.io";
const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

/// Whether `user` may `verb` (`approve`, `sign`) for `signer`: on `signers` named the signer,
/// or `<domain>/*`.
pub async fn authorized_for_signer(
    authz: &dyn crate::authz::Authorizer,
    user: &UserInfo,
    verb: &str,
    signer: &str,
) -> bool {
    let mut names = vec![signer.to_string()];
    if let Some((domain, _)) = signer.split_once('/') {
        names.push(format!("{domain}/*"));
    }
    for name in names {
        let info = RequestInfo {
            is_resource_request: true,
            verb: verb.into(),
            api_group: CSR_GROUP.into(),
            api_version: "*".into(),
            resource: "signers".into(),
            name,
            ..Default::default()
        };
        if authz.authorize(&crate::authz::Attributes { user, info: &info }).await.allowed() {
            return true;
        }
    }
    false
}

fn csr_forbidden(name: &str, why: String) -> ApiError {
    ApiError::forbidden(
        CSR_GROUP,
        "certificatesigningrequests",
        name,
        format!("certificatesigningrequests.{CSR_GROUP} \"{name}\" is forbidden: {why}"),
    )
}

/// What is being done. Upstream's operations, and `Read` (list and watch) for the read plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Read,
}

/// The request as the plugins see it.
pub struct Attributes<'a> {
    pub op: Operation,
    pub def: &'a ResourceDef,
    /// Namespace, name (in the URL; empty on create), subresource, verb.
    pub info: &'a RequestInfo,
    pub user: &'a UserInfo,
    /// The request's `fieldSelector` (reads).
    pub field_selector: Option<&'a str>,
    /// The object written (none on delete and read).
    object: Option<Typed<'a>>,
    /// The stored object (update and delete).
    old_object: Option<Typed<'a>>,
}

/// One object of a request, decoded into a typed form on first use and kept for the plugins
/// that ask for the same type after.
struct Typed<'a> {
    raw: &'a Value,
    decoded: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl<'a> Typed<'a> {
    fn new(raw: Option<&'a Value>) -> Option<Self> {
        raw.map(|raw| Typed { raw, decoded: OnceLock::new() })
    }

    fn get<T: DeserializeOwned + Send + Sync + 'static>(&self, def: &ResourceDef) -> Result<Arc<T>, ApiError> {
        if let Some(done) = self.decoded.get().and_then(|d| Arc::clone(d).downcast::<T>().ok()) {
            return Ok(done);
        }
        let typed = Arc::new(decode::<T>(self.raw).map_err(|e| crate::registry::body::undecodable(def, e))?);
        // The first type asked for is kept; another is decoded each time it is asked for.
        let _ = self.decoded.set(typed.clone());
        Ok(typed)
    }
}

impl<'a> Attributes<'a> {
    /// A write (`object`: the object written, `old_object`: the stored one) or a read.
    pub fn new(
        op: Operation,
        def: &'a ResourceDef,
        info: &'a RequestInfo,
        user: &'a UserInfo,
        object: Option<&'a Value>,
        old_object: Option<&'a Value>,
    ) -> Self {
        Attributes {
            op,
            def,
            info,
            user,
            field_selector: None,
            object: Typed::new(object),
            old_object: Typed::new(old_object),
        }
    }

    /// A list or watch, with its `fieldSelector`.
    pub fn read(
        def: &'a ResourceDef,
        info: &'a RequestInfo,
        user: &'a UserInfo,
        field_selector: Option<&'a str>,
    ) -> Self {
        Attributes { field_selector, ..Attributes::new(Operation::Read, def, info, user, None, None) }
    }

    fn is(&self, group: &str, resource: &str) -> bool {
        self.def.group == group && self.def.resource == resource
    }

    /// The object written, decoded into `T` (a k8s-openapi type, or a plugin's own view of
    /// the kind); `None` on delete and read. Decoded once per request for every plugin that
    /// asks for the same `T`. The handlers decode every body through the kind's typed form
    /// before admission, so a body that does not decode never gets here; were it to, the
    /// answer is that decoding's 400 (`<Kind> in version "<v>" cannot be handled as a
    /// <Kind>: ...`).
    pub fn object_as<T: DeserializeOwned + Send + Sync + 'static>(&self) -> Result<Option<Arc<T>>, ApiError> {
        self.object.as_ref().map(|o| o.get(self.def)).transpose()
    }

    /// The stored object (update and delete), decoded into `T` as [`Attributes::object_as`].
    pub fn old_object_as<T: DeserializeOwned + Send + Sync + 'static>(&self) -> Result<Option<Arc<T>>, ApiError> {
        self.old_object.as_ref().map(|o| o.get(self.def)).transpose()
    }

    /// The object written as sent, for checks that compare whole objects (RBACEscalation).
    pub fn object(&self) -> Option<&'a Value> {
        self.object.as_ref().map(|o| o.raw)
    }

    /// The stored object as stored, as [`Attributes::object`].
    pub fn old_object(&self) -> Option<&'a Value> {
        self.old_object.as_ref().map(|o| o.raw)
    }
}

/// `obj` decoded into `T`, its `apiVersion` and `kind` left out: a plugin reads one kind in
/// whichever of its versions the request names (their fields are the same), and
/// k8s-openapi's types refuse any version but their own.
pub fn decode<T: DeserializeOwned>(obj: &Value) -> Result<T, serde_json::Error> {
    match obj.as_object() {
        Some(fields) => T::deserialize(serde::de::value::MapDeserializer::new(
            fields.iter().filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind")).map(|(k, v)| (k.as_str(), v)),
        )),
        None => T::deserialize(obj),
    }
}

/// What a plugin may ask of the server: stored objects of the built-in kinds, read only
/// ([`Objects`]), the authorizer (SubjectAccessReview-like checks) and the RBAC objects. The
/// server builds it from its state for each request.
#[derive(Clone, Copy)]
pub struct Services<'a> {
    pub objects: Objects<'a>,
    pub authz: &'a dyn Authorizer,
    pub rbac: &'a RbacCache,
}

impl Services<'_> {
    /// Whether `user` may do what `info` describes.
    pub async fn allowed(&self, user: &UserInfo, info: &RequestInfo) -> bool {
        self.authz.authorize(&crate::authz::Attributes { user, info }).await.allowed()
    }
}

/// Which phase a plugin takes part in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Mutating,
    Validating,
    Read,
}

/// One named admission plugin.
#[async_trait::async_trait]
pub trait Plugin: Send + Sync {
    /// Upstream's name for it (`NamespaceLifecycle`).
    fn name(&self) -> &'static str;
    fn phase(&self) -> Phase;
    /// Whether the plugin looks at this request (kind, operation, subresource).
    fn handles(&self, a: &Attributes<'_>) -> bool;
    /// Admit or refuse `a` (its object and stored object), asking `services` what else it
    /// needs.
    async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError>;
}

/// An ordered list of plugins.
pub struct Chain {
    plugins: Vec<Box<dyn Plugin>>,
}

/// Builds a plugin.
pub type Factory = fn() -> Box<dyn Plugin>;

/// Every plugin by name, in the order the chain runs them (upstream's `AllOrderedPlugins`,
/// for the plugins kustos has; see the module doc).
pub fn plugins() -> &'static [(&'static str, Factory)] {
    static PLUGINS: &[(&str, Factory)] = &[
        ("NamespaceLifecycle", || Box::new(NamespaceLifecycle)),
        ("NodeRestriction", || Box::new(node_restriction::NodeRestriction)),
        ("PodCertificateRequestNodeRestriction", || Box::new(pod_certificates::PodCertificateRequestNodeRestriction)),
        ("CertificateApproval", || Box::new(CertificateApproval)),
        ("CertificateSigning", || Box::new(CertificateSigning)),
        ("PodCertificateRequestSigning", || Box::new(pod_certificates::PodCertificateRequestSigning)),
        ("ClusterTrustBundleAttest", || Box::new(ClusterTrustBundleAttest)),
        ("CertificateSubjectRestriction", || Box::new(CertificateSubjectRestriction)),
        ("RBACEscalation", || Box::new(RbacEscalation)),
        ("BootstrapCSRReads", || Box::new(BootstrapCsrReads)),
    ];
    PLUGINS
}

/// The plugin registered as `name`.
pub fn plugin(name: &str) -> Option<Box<dyn Plugin>> {
    plugins().iter().find(|(n, _)| *n == name).map(|(_, make)| make())
}

/// A chain of the registered plugins `enabled` keeps, in the registered order.
pub fn chain_of(enabled: impl Fn(&str) -> bool) -> Chain {
    Chain { plugins: plugins().iter().filter(|(name, _)| enabled(name)).map(|(_, make)| make()).collect() }
}

/// The server's chain: every registered plugin (see the module doc for the order).
pub fn chain() -> &'static Chain {
    static CHAIN: LazyLock<Chain> = LazyLock::new(|| chain_of(|_| true));
    &CHAIN
}

impl Chain {
    pub fn new(plugins: Vec<Box<dyn Plugin>>) -> Self {
        Chain { plugins }
    }

    /// The plugin names in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// The plugins that would run for `a`, in the order they run.
    pub fn handling(&self, a: &Attributes<'_>) -> Vec<&'static str> {
        self.ordered(a).into_iter().map(|p| p.name()).collect()
    }

    fn ordered(&self, a: &Attributes<'_>) -> Vec<&dyn Plugin> {
        let phases: &[Phase] =
            if a.op == Operation::Read { &[Phase::Read] } else { &[Phase::Mutating, Phase::Validating] };
        let mut out = Vec::new();
        for ph in phases {
            out.extend(self.plugins.iter().map(|p| p.as_ref()).filter(|p| p.phase() == *ph && p.handles(a)));
        }
        out
    }

    /// Run one phase of the chain for `a` (a write runs [`Phase::Mutating`] before the
    /// strategy prepares and validates the object, [`Phase::Validating`] after, as
    /// upstream): the first refusal is the answer.
    pub async fn admit_phase(&self, services: &Services<'_>, a: &Attributes<'_>, phase: Phase) -> Result<(), ApiError> {
        for p in self.ordered(a).into_iter().filter(|p| p.phase() == phase) {
            p.admit(services, a).await?;
        }
        Ok(())
    }

    /// Run the chain for `a`, every phase in order: the first refusal is the answer.
    pub async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        for p in self.ordered(a) {
            p.admit(services, a).await?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// NamespaceLifecycle
// ---------------------------------------------------------------------------------------

/// Namespaces that may not be deleted.
pub const UNDELETABLE_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

struct NamespaceLifecycle;

#[async_trait::async_trait]
impl Plugin for NamespaceLifecycle {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }
    fn phase(&self) -> Phase {
        Phase::Mutating
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        match a.op {
            Operation::Create => a.def.namespaced && !a.info.namespace.is_empty(),
            Operation::Delete => a.def.strategy.role() == Role::Namespace,
            _ => false,
        }
    }
    async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        if a.op == Operation::Delete {
            let name = a.info.name.as_str();
            if UNDELETABLE_NAMESPACES.contains(&name) {
                return Err(ApiError::forbidden(
                    a.def.group,
                    a.def.resource,
                    name,
                    format!("{} \"{name}\" is forbidden: this namespace may not be deleted", a.def.resource),
                ));
            }
            return Ok(());
        }
        let ns = a.info.namespace.as_str();
        // As upstream's plugin reads its namespace informer: the namespace as this apiserver
        // knows it (every write it acknowledged included), and only when that has no such
        // namespace a read of the latest state (upstream's live lookup), for a namespace
        // just created through another apiserver. A consistent read here cost every
        // namespaced create on etcd one more round trip to etcd before its own write.
        // A namespace this apiserver knows as terminating is refused, as upstream's does.
        let Some(namespace) = services.objects.namespace::<Namespace>(ns).await? else {
            return Err(ApiError::not_found("", "namespaces", ns));
        };
        if namespace.metadata.deletion_timestamp.is_some() {
            return Err(ApiError::forbidden(
                a.def.group,
                a.def.resource,
                "",
                format!(
                    "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    crate::error::group_resource(a.def.group, a.def.resource)
                ),
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The CertificateSigningRequest plugins
// ---------------------------------------------------------------------------------------

const CSRS: &str = "certificatesigningrequests";

fn csr_signer(new: Option<&Csr>) -> String {
    new.map(|c| c.spec.signer_name.clone()).unwrap_or_default()
}

/// The name of a written object (empty when it has none).
fn object_name<T: Metadata<Ty = ObjectMeta>>(new: Option<&T>) -> String {
    new.and_then(|o| o.metadata().name.clone()).unwrap_or_default()
}

struct CertificateApproval;

#[async_trait::async_trait]
impl Plugin for CertificateApproval {
    fn name(&self) -> &'static str {
        "CertificateApproval"
    }
    fn phase(&self) -> Phase {
        Phase::Validating
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.is(CSR_GROUP, CSRS) && a.op == Operation::Update && a.info.subresource == "approval"
    }
    async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        let new = a.object_as::<Csr>()?;
        let signer = csr_signer(new.as_deref());
        if authorized_for_signer(services.authz, a.user, "approve", &signer).await {
            return Ok(());
        }
        Err(csr_forbidden(
            &object_name(new.as_deref()),
            format!("user not permitted to approve requests with signerName {signer:?}"),
        ))
    }
}

struct CertificateSigning;

#[async_trait::async_trait]
impl Plugin for CertificateSigning {
    fn name(&self) -> &'static str {
        "CertificateSigning"
    }
    fn phase(&self) -> Phase {
        Phase::Validating
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.is(CSR_GROUP, CSRS) && a.op == Operation::Update && a.info.subresource == "status"
    }
    async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        let (new, old) = (a.object_as::<Csr>()?, a.old_object_as::<Csr>()?);
        let (new, old) = (new.as_deref(), old.as_deref());
        fn cert(v: Option<&Csr>) -> Option<&k8s_openapi::ByteString> {
            v.and_then(|v| v.status.as_ref()).and_then(|s| s.certificate.as_ref())
        }
        let signer = csr_signer(new);
        if cert(new) == cert(old) || authorized_for_signer(services.authz, a.user, "sign", &signer).await {
            return Ok(());
        }
        Err(csr_forbidden(&object_name(new), format!("user not permitted to sign requests with signerName {signer:?}")))
    }
}

/// Upstream's ClusterTrustBundleAttest: a ClusterTrustBundle with a `spec.signerName` is
/// created or changed only by someone allowed to `attest` for that signer. An update that
/// leaves `spec` as it was (a label, a storage migration) needs nothing.
struct ClusterTrustBundleAttest;

#[async_trait::async_trait]
impl Plugin for ClusterTrustBundleAttest {
    fn name(&self) -> &'static str {
        "ClusterTrustBundleAttest"
    }
    fn phase(&self) -> Phase {
        Phase::Validating
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.is(CSR_GROUP, crate::registry::clustertrustbundles::RESOURCE)
            && matches!(a.op, Operation::Create | Operation::Update)
    }
    async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        let (new, old) = (a.object_as::<ClusterTrustBundle>()?, a.old_object_as::<ClusterTrustBundle>()?);
        let (new, old) = (new.as_deref(), old.as_deref());
        let name = object_name(new);
        let forbidden = |why: String| {
            let resource = crate::registry::clustertrustbundles::RESOURCE;
            ApiError::forbidden(
                CSR_GROUP,
                resource,
                &name,
                format!("{resource}.{CSR_GROUP} \"{name}\" is forbidden: {why}"),
            )
        };
        let bundle_signer =
            |v: Option<&ClusterTrustBundle>| v.and_then(|v| v.spec.signer_name.clone()).unwrap_or_default();
        let signer = bundle_signer(new);
        if a.op == Operation::Update {
            if bundle_signer(old) != signer {
                return Err(forbidden("changing signerName is forbidden".into()));
            }
            if new.map(|v| &v.spec) == old.map(|v| &v.spec) {
                return Ok(());
            }
        }
        if signer.is_empty() || authorized_for_signer(services.authz, a.user, "attest", &signer).await {
            return Ok(());
        }
        Err(forbidden(format!("user not permitted to attest for signerName {signer:?}")))
    }
}

struct CertificateSubjectRestriction;

#[async_trait::async_trait]
impl Plugin for CertificateSubjectRestriction {
    fn name(&self) -> &'static str {
        "CertificateSubjectRestriction"
    }
    fn phase(&self) -> Phase {
        Phase::Validating
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.is(CSR_GROUP, CSRS) && a.op == Operation::Create
    }
    async fn admit(&self, _services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        let new = a.object_as::<Csr>()?;
        let new = new.as_deref();
        let signer = csr_signer(new);
        if signer != KUBE_APISERVER_CLIENT {
            return Ok(());
        }
        let name = object_name(new);
        // `spec.request` is base64 on the wire; the typed form holds the PEM it encodes.
        let pem = new.map(|c| c.spec.request.0.as_slice()).unwrap_or_default();
        let parsed =
            kustos_ca::csr::parse_pem(pem).map_err(|e| csr_forbidden(&name, format!("failed to parse CSR: {e}")))?;
        if parsed.organizations.iter().any(|o| o == crate::authn::MASTERS_GROUP) {
            return Err(csr_forbidden(
                &name,
                format!("use of {signer} signer with system:masters group is not allowed"),
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// RBAC escalation
// ---------------------------------------------------------------------------------------

struct RbacEscalation;

#[async_trait::async_trait]
impl Plugin for RbacEscalation {
    fn name(&self) -> &'static str {
        "RBACEscalation"
    }
    fn phase(&self) -> Phase {
        Phase::Validating
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.def.group == crate::registry::rbac::GROUP
            && a.info.subresource.is_empty()
            && matches!(a.op, Operation::Create | Operation::Update)
    }
    async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        // Escalation compares whole objects and reads the rules, role references and
        // aggregation rules in their typed forms itself.
        let (new, old) = (a.object(), a.old_object());
        let Some(new) = new else { return Ok(()) };
        let cx = crate::authz::rbac::escalation::Context {
            authz: services.authz,
            rbac: services.rbac,
            user: a.user,
            info: a.info,
        };
        let old = if a.op == Operation::Update { old } else { None };
        crate::authz::rbac::escalation::check(&cx, a.def.resource, new, old).await
    }
}

// ---------------------------------------------------------------------------------------
// BootstrapCSRReads
// ---------------------------------------------------------------------------------------

struct BootstrapCsrReads;

#[async_trait::async_trait]
impl Plugin for BootstrapCsrReads {
    fn name(&self) -> &'static str {
        "BootstrapCSRReads"
    }
    fn phase(&self) -> Phase {
        Phase::Read
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.is(CSR_GROUP, CSRS) && a.op == Operation::Read
    }
    async fn admit(&self, _services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        restrict_read(a.info, a.user, a.field_selector)
    }
}

/// BootstrapCSRReads' decision (see the module doc). `field_selector` is the request's
/// `fieldSelector` parameter.
pub fn restrict_read(info: &RequestInfo, user: &UserInfo, field_selector: Option<&str>) -> Result<(), ApiError> {
    let csr = info.api_group == CSR_GROUP && info.resource == CSRS;
    let bootstrapper = user.groups.iter().any(|g| g == BOOTSTRAPPERS_GROUP)
        && !user.groups.iter().any(|g| g == crate::authn::MASTERS_GROUP);
    if !csr || !bootstrapper || !matches!(info.verb.as_str(), "list" | "watch") {
        return Ok(());
    }
    let by_name = field_selector.is_some_and(|fs| {
        let terms: Vec<&str> = fs.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
        terms.iter().any(|t| {
            t.strip_prefix("metadata.name")
                .and_then(|rest| rest.strip_prefix("==").or_else(|| rest.strip_prefix('=')))
                .is_some_and(|v| !v.is_empty() && !v.starts_with('='))
        })
    });
    if by_name {
        return Ok(());
    }
    Err(ApiError::forbidden(
        CSR_GROUP,
        CSRS,
        "",
        format!(
            "certificatesigningrequests.certificates.k8s.io is forbidden: User \"{}\" cannot {} resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope: bootstrap tokens may only {} CertificateSigningRequests by name (fieldSelector metadata.name=<name>)",
            user.name, info.verb, info.verb
        ),
    ))
}

#[cfg(test)]
mod tests;
