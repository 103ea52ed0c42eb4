//! The admission rules of PodCertificateRequests: what enters is a write of one with its
//! user (and, for the node rule, the pod, service account and node it names, read here);
//! what leaves is the write or a 403 (404 when the pod, service account or node named does
//! not exist; 422 for a status write without `sign`).
//!
//! - `PodCertificateRequestNodeRestriction`, upstream's NodeRestriction for the kind
//!   (`admitPodCertificateRequest`, same messages): a node (`system:node:<name>`) only
//!   creates requests, and only for a pod bound to it, naming its own node, that pod's
//!   service account and the UIDs of all three as they are; and only for a signer the pod
//!   mounts through a `podCertificate` projected volume, unless the node may
//!   `request-podcertificate-signer` on `signers` for that signer (upstream PR 140006).
//!   Upstream answers a UID mismatch with a retryable error (its informers may lag); kustos
//!   reads the current objects, so a mismatch is refused (403).
//! - `PodCertificateRequestSigning`: a write through `/status` that changes the status needs
//!   `sign` on `signers` for the request's signer (or `<domain>/*`); as upstream (where the
//!   status strategy checks it, after the status validation), a refusal is a 422 whose cause
//!   is `spec.signerName: Forbidden`.

use k8s_openapi::api::certificates::v1::PodCertificateRequest;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use serde::de::DeserializeOwned;

use super::{authorized_for_signer, Attributes, Operation, Phase, Plugin, Services};
use crate::authn::UserInfo;
use crate::error::{ApiError, FieldError};
use crate::registry::podcertificaterequests::{GROUP, RESOURCE};

const KIND: &str = "PodCertificateRequest";

/// The verb that lets a node request certificates from a signer its pods do not mount.
pub const REQUEST_SIGNER_VERB: &str = "request-podcertificate-signer";

fn forbidden(name: &str, why: &str) -> ApiError {
    ApiError::forbidden(GROUP, RESOURCE, name, format!("{RESOURCE}.{GROUP} {name:?} is forbidden: {why}"))
}

fn text(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("")
}

/// Why `node` may not create `req` for `pod` (bound, named and UID'd as the request says),
/// before the service account, the node object and the signer are looked at.
pub fn pod_problem(node: &str, namespace: &str, req: &PodCertificateRequest, pod: &Pod) -> Option<String> {
    let pod_ref = format!("{namespace}/{}", text(&pod.metadata.name));
    if pod.spec.as_ref().map_or("", |s| text(&s.node_name)) != node {
        return Some(format!("pod {pod_ref:?} is not running on node {node:?} named in the PodCertificateRequest"));
    }
    let mirror = crate::admission::node_restriction::pods::MIRROR_ANNOTATION;
    if pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(mirror)) {
        return Some(format!("pod {pod_ref:?} is a mirror pod"));
    }
    let (want_sa, have_sa) = (req.spec.service_account_name.as_str(), pod_service_account(pod));
    if want_sa != have_sa {
        return Some(format!(
            "PodCertificateRequest for pod {pod_ref:?} contains serviceAccountName ({want_sa:?}) that differs from running pod ({have_sa:?})"
        ));
    }
    let (want_uid, have_uid) = (req.spec.pod_uid.as_str(), text(&pod.metadata.uid));
    if want_uid != have_uid {
        return Some(format!(
            "PodCertificateRequest for pod {pod_ref:?} contains pod UID ({want_uid:?}) which differs from running pod {have_uid:?}"
        ));
    }
    None
}

/// The pod's service account (`default` when unset, as the pod strategy defaults it).
fn pod_service_account(pod: &Pod) -> &str {
    match pod.spec.as_ref().map_or("", |s| text(&s.service_account_name)) {
        "" => "default",
        sa => sa,
    }
}

/// The signers a pod mounts through `podCertificate` projected volume sources.
pub fn mounted_signers(pod: &Pod) -> Vec<&str> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    volumes
        .iter()
        .filter_map(|v| v.projected.as_ref()?.sources.as_deref())
        .flatten()
        .filter_map(|s| s.pod_certificate.as_ref().map(|p| p.signer_name.as_str()))
        .collect()
}

/// The stored core object `resource`/`name` (404 when there is none).
async fn read<T: DeserializeOwned>(
    services: &Services<'_>,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<T, ApiError> {
    services.objects.get_as("", resource, namespace, name).await?.ok_or_else(|| ApiError::not_found("", resource, name))
}

/// NodeRestriction for PodCertificateRequests (see the module documentation).
pub struct PodCertificateRequestNodeRestriction;

#[async_trait::async_trait]
impl Plugin for PodCertificateRequestNodeRestriction {
    fn name(&self) -> &'static str {
        "PodCertificateRequestNodeRestriction"
    }
    fn phase(&self) -> Phase {
        Phase::Mutating
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.is(GROUP, RESOURCE)
            && matches!(a.op, Operation::Create | Operation::Update | Operation::Delete)
            && crate::authz::rbac::node::node_name(a.user).is_some()
    }
    async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        let new = a.object_as::<PodCertificateRequest>()?;
        let new = new.as_deref();
        let Some(node) = crate::authz::rbac::node::node_name(a.user) else { return Ok(()) };
        let subject =
            new.and_then(|n| n.metadata.name.as_deref()).filter(|n| !n.is_empty()).unwrap_or(a.info.name.as_str());
        let subject = if subject.is_empty() { "Unknown" } else { subject };
        if node.is_empty() {
            return Err(forbidden(subject, &format!("could not determine node from user {:?}", a.user.name)));
        }
        if a.op != Operation::Create {
            return Err(forbidden(subject, "unexpected operation"));
        }
        if !a.info.subresource.is_empty() {
            return Err(forbidden(subject, &format!("unexpected subresource {}", a.info.subresource)));
        }
        let Some(req) = new else { return Ok(()) };
        let named_node = req.spec.node_name.as_str();
        if named_node != node {
            return Err(forbidden(
                subject,
                &format!(
                    "PodCertificateRequest.Spec.NodeName={named_node:?}, which is not the requesting node {node:?}"
                ),
            ));
        }
        let namespace = a.info.namespace.as_str();
        let pod: Pod = read(services, "pods", Some(namespace), &req.spec.pod_name).await?;
        if let Some(why) = pod_problem(node, namespace, req, &pod) {
            return Err(forbidden(subject, &why));
        }
        let pod_ref = format!("{namespace}/{}", text(&pod.metadata.name));
        let sa: ServiceAccount = read(services, "serviceaccounts", Some(namespace), pod_service_account(&pod)).await?;
        let (want, have) = (req.spec.service_account_uid.as_str(), text(&sa.metadata.uid));
        if want != have {
            return Err(forbidden(
                subject,
                &format!("PodCertificateRequest for pod {pod_ref:?} names service account UID {want:?}, which differs from the running service account ({have:?})"),
            ));
        }
        let node_obj: Node = read(services, "nodes", None, node).await?;
        let (want, have) = (req.spec.node_uid.as_str(), text(&node_obj.metadata.uid));
        if want != have {
            return Err(forbidden(
                subject,
                &format!("PodCertificateRequest for pod {pod_ref:?} names node UID {want:?}, inconsistent with the running node ({have:?})"),
            ));
        }
        let signer = req.spec.signer_name.as_str();
        if mounted_signers(&pod).contains(&signer)
            || authorized_for_signer(services.authz, a.user, REQUEST_SIGNER_VERB, signer).await
        {
            return Ok(());
        }
        Err(forbidden(subject, &signer_refusal(a.user, &pod_ref, signer)))
    }
}

/// The refusal of a request for a signer the pod does not mount.
fn signer_refusal(user: &UserInfo, pod_ref: &str, signer: &str) -> String {
    format!(
        "pod {pod_ref:?} mounts no podCertificate projected volume for signer {signer:?}, and {:?} is not permitted to {REQUEST_SIGNER_VERB} for it",
        user.name
    )
}

/// Upstream's refusal of a status write without `sign` (its status strategy's validation,
/// so a 422 with one cause).
fn not_permitted_to_sign(user: &str, signer: &str) -> FieldError {
    FieldError::forbidden(
        "spec.signerName",
        format!("User {user:?} is not permitted to \"sign\" for signer {signer:?}"),
    )
}

/// `sign` for status writes (see the module documentation).
pub struct PodCertificateRequestSigning;

#[async_trait::async_trait]
impl Plugin for PodCertificateRequestSigning {
    fn name(&self) -> &'static str {
        "PodCertificateRequestSigning"
    }
    fn phase(&self) -> Phase {
        Phase::Validating
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.is(GROUP, RESOURCE) && a.op == Operation::Update && a.info.subresource == "status"
    }
    async fn admit(&self, services: &Services<'_>, a: &Attributes<'_>) -> Result<(), ApiError> {
        let (new, old) = (a.object_as::<PodCertificateRequest>()?, a.old_object_as::<PodCertificateRequest>()?);
        let (new, old) = (new.as_deref(), old.as_deref());
        if new.and_then(|v| v.status.as_ref()) == old.and_then(|v| v.status.as_ref()) {
            return Ok(());
        }
        let signer = old.map_or("", |o| o.spec.signer_name.as_str());
        if authorized_for_signer(services.authz, a.user, "sign", signer).await {
            return Ok(());
        }
        let name = new.map_or("", |n| text(&n.metadata.name));
        Err(ApiError::invalid(GROUP, KIND, name, vec![not_permitted_to_sign(&a.user.name, signer)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use serde_json::Value;

    fn typed<T: DeserializeOwned>(v: Value) -> T {
        match crate::admission::decode(&v) {
            Ok(t) => t,
            Err(e) => panic!("{v}: {e}"),
        }
    }

    fn pod_value(node: &str, sa: &str, uid: &str, volumes: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": uid},
               "spec": {"nodeName": node, "serviceAccountName": sa, "volumes": volumes}})
    }

    fn pod(node: &str, sa: &str, uid: &str, volumes: Value) -> Pod {
        typed(pod_value(node, sa, uid, volumes))
    }

    fn req(sa: &str, pod_uid: &str) -> PodCertificateRequest {
        typed(json!({"spec": {"serviceAccountName": sa, "podUID": pod_uid, "podName": "p"}}))
    }

    #[test]
    fn pod_rules() {
        let none = json!([]);
        let mut mirror = pod_value("n1", "default", "u1", none.clone());
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        let mirror = typed(mirror);
        let cases: &[(&str, Pod, PodCertificateRequest, Option<&str>)] = &[
            ("bound, same service account and UID", pod("n1", "sa", "u1", none.clone()), req("sa", "u1"), None),
            ("an unset service account is default", pod("n1", "", "u1", none.clone()), req("default", "u1"), None),
            (
                "bound to another node",
                pod("n2", "sa", "u1", none.clone()),
                req("sa", "u1"),
                Some("pod \"ns/p\" is not running on node \"n1\" named in the PodCertificateRequest"),
            ),
            ("a mirror pod", mirror, req("default", "u1"), Some("pod \"ns/p\" is a mirror pod")),
            (
                "another service account",
                pod("n1", "sa", "u1", none.clone()),
                req("other", "u1"),
                Some("PodCertificateRequest for pod \"ns/p\" contains serviceAccountName (\"other\") that differs from running pod (\"sa\")"),
            ),
            (
                "another pod UID",
                pod("n1", "sa", "u1", none.clone()),
                req("sa", "u2"),
                Some("PodCertificateRequest for pod \"ns/p\" contains pod UID (\"u2\") which differs from running pod \"u1\""),
            ),
        ];
        for (what, pod, req, want) in cases {
            assert_eq!(pod_problem("n1", "ns", req, pod).as_deref(), *want, "{what}");
        }
    }

    #[test]
    fn mounted_signers_are_the_projected_pod_certificate_sources() {
        let volumes = json!([
            {"name": "a", "projected": {"sources": [
                {"podCertificate": {"signerName": "example.com/a", "keyType": "ED25519"}},
                {"configMap": {"name": "x"}},
            ]}},
            {"name": "b", "configMap": {"name": "y"}},
            {"name": "c", "projected": {"sources": [{"podCertificate": {"signerName": "example.com/c"}}]}},
        ]);
        assert_eq!(mounted_signers(&pod("n", "sa", "u", volumes)), ["example.com/a", "example.com/c"]);
        assert!(mounted_signers(&typed(json!({"spec": {}}))).is_empty());
    }
}
