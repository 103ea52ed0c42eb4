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

use serde_json::Value;

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

fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Why `node` may not create `req` for `pod` (bound, named and UID'd as the request says),
/// before the service account, the node object and the signer are looked at.
pub fn pod_problem(node: &str, namespace: &str, req: &Value, pod: &Value) -> Option<String> {
    let pod_ref = format!("{namespace}/{}", text(pod, "/metadata/name"));
    if text(pod, "/spec/nodeName") != node {
        return Some(format!("pod {pod_ref:?} is not running on node {node:?} named in the PodCertificateRequest"));
    }
    let mirror = crate::admission::node_restriction::pods::MIRROR_ANNOTATION.replace('/', "~1");
    if pod.pointer(&format!("/metadata/annotations/{mirror}")).is_some() {
        return Some(format!("pod {pod_ref:?} is a mirror pod"));
    }
    let (want_sa, have_sa) = (text(req, "/spec/serviceAccountName"), pod_service_account(pod));
    if want_sa != have_sa {
        return Some(format!(
            "PodCertificateRequest for pod {pod_ref:?} contains serviceAccountName ({want_sa:?}) that differs from running pod ({have_sa:?})"
        ));
    }
    let (want_uid, have_uid) = (text(req, "/spec/podUID"), text(pod, "/metadata/uid"));
    if want_uid != have_uid {
        return Some(format!(
            "PodCertificateRequest for pod {pod_ref:?} contains pod UID ({want_uid:?}) which differs from running pod {have_uid:?}"
        ));
    }
    None
}

/// The pod's service account (`default` when unset, as the pod strategy defaults it).
fn pod_service_account(pod: &Value) -> &str {
    match text(pod, "/spec/serviceAccountName") {
        "" => "default",
        sa => sa,
    }
}

/// The signers a pod mounts through `podCertificate` projected volume sources.
pub fn mounted_signers(pod: &Value) -> Vec<&str> {
    let volumes = pod.pointer("/spec/volumes").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    volumes
        .iter()
        .filter_map(|v| v.pointer("/projected/sources").and_then(Value::as_array))
        .flatten()
        .filter_map(|s| s.pointer("/podCertificate/signerName").and_then(Value::as_str))
        .collect()
}

async fn read(services: &Services<'_>, resource: &str, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
    let Some(def) = services.registry.find("", "v1", resource) else {
        return Err(ApiError::internal(format!("no {resource} are served")));
    };
    let key = def.key(namespace, name);
    let kv = services
        .storage
        .get(&key)
        .await
        .map_err(|e| crate::registry::call::map_storage_error(def, name, e))?
        .ok_or_else(|| ApiError::not_found("", resource, name))?;
    crate::meta::from_stored(&kv)
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
        let new = a.object;
        let Some(node) = crate::authz::rbac::node::node_name(a.user) else { return Ok(()) };
        let subject = new.map(crate::meta::name).filter(|n| !n.is_empty()).unwrap_or(a.info.name.as_str());
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
        let named_node = text(req, "/spec/nodeName");
        if named_node != node {
            return Err(forbidden(
                subject,
                &format!(
                    "PodCertificateRequest.Spec.NodeName={named_node:?}, which is not the requesting node {node:?}"
                ),
            ));
        }
        let namespace = a.info.namespace.as_str();
        let pod = read(services, "pods", Some(namespace), text(req, "/spec/podName")).await?;
        if let Some(why) = pod_problem(node, namespace, req, &pod) {
            return Err(forbidden(subject, &why));
        }
        let pod_ref = format!("{namespace}/{}", text(&pod, "/metadata/name"));
        let sa = read(services, "serviceaccounts", Some(namespace), pod_service_account(&pod)).await?;
        let (want, have) = (text(req, "/spec/serviceAccountUID"), text(&sa, "/metadata/uid"));
        if want != have {
            return Err(forbidden(
                subject,
                &format!("PodCertificateRequest for pod {pod_ref:?} names service account UID {want:?}, which differs from the running service account ({have:?})"),
            ));
        }
        let node_obj = read(services, "nodes", None, node).await?;
        let (want, have) = (text(req, "/spec/nodeUID"), text(&node_obj, "/metadata/uid"));
        if want != have {
            return Err(forbidden(
                subject,
                &format!("PodCertificateRequest for pod {pod_ref:?} names node UID {want:?}, inconsistent with the running node ({have:?})"),
            ));
        }
        let signer = text(req, "/spec/signerName");
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
        let (new, old) = (a.object, a.old_object);
        let status = |v: Option<&Value>| v.and_then(|v| v.get("status")).cloned().unwrap_or(Value::Null);
        if status(new) == status(old) {
            return Ok(());
        }
        let signer = old.map(|o| text(o, "/spec/signerName")).unwrap_or("");
        if authorized_for_signer(services.authz, a.user, "sign", signer).await {
            return Ok(());
        }
        let name = new.map(crate::meta::name).unwrap_or("");
        Err(ApiError::invalid(GROUP, KIND, name, vec![not_permitted_to_sign(&a.user.name, signer)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str, sa: &str, uid: &str, volumes: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": uid},
               "spec": {"nodeName": node, "serviceAccountName": sa, "volumes": volumes}})
    }

    fn req(sa: &str, pod_uid: &str) -> Value {
        json!({"spec": {"serviceAccountName": sa, "podUID": pod_uid, "podName": "p"}})
    }

    #[test]
    fn pod_rules() {
        let none = json!([]);
        let mut mirror = pod("n1", "default", "u1", none.clone());
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        let cases: &[(&str, Value, Value, Option<&str>)] = &[
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
        assert!(mounted_signers(&json!({"spec": {}})).is_empty());
    }
}
