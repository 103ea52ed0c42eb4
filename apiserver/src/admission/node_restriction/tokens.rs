//! NodeRestriction for TokenRequest (`serviceaccounts/<name>/token` create), as upstream's
//! `admitServiceAccount` and `validateNodeServiceAccountAudience` (ServiceAccountNodeAudienceRestriction,
//! on by default since 1.33; same messages). A node asks only for a token:
//!
//! - bound to a Pod (`boundObjectRef` `v1`/`Pod` with a name) and naming its uid;
//! - of a pod that exists (else 404), still has that uid and is bound to the node;
//! - for no audience or one audience that the pod uses: a projected `serviceAccountToken`
//!   source with that audience (empty is the API's), or a CSI volume (inline, or through a
//!   claim or an ephemeral volume's claim and its PersistentVolume) whose CSIDriver asks for
//!   tokens of that audience; else the node must be allowed the verb
//!   `request-serviceaccounts-token-audience` on the resource named like the audience (name:
//!   the service account) by the authorizer.
//!
//! A lookup that fails on the way to a CSIDriver refuses the request (`error validating
//! audience ...`) unless another volume names the audience. Binding the token to the pod's
//! Node is the registry's (it reads the pod's `spec.nodeName`), so a node cannot bind a token
//! to a Node itself.
//!
//! In: the TokenRequest, the node's name, the pod ([`pod_problem`]) and what the pod's
//! volumes lead to ([`audience_sources`], read by the plugin). Out: why the request is
//! refused ([`Refusal`]), if it is.

use k8s_openapi::api::authentication::v1::TokenRequestSpec;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSIDriver;
use serde::Deserialize;

use super::pods::Refusal;

/// The verb an authorizer must allow for a node to request an audience no pod volume names.
pub const AUDIENCE_VERB: &str = "request-serviceaccounts-token-audience";

fn forbidden(why: &str) -> Refusal {
    Refusal::Forbidden(why.to_string())
}

fn text(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or_default()
}

/// What this rule reads of a TokenRequest: its spec. (Its status is the server's to fill; a
/// protobuf body carries an empty one, which the typed TokenRequest refuses.)
#[derive(Debug, Default, Deserialize)]
pub struct Request {
    #[serde(default)]
    pub spec: TokenRequestSpec,
}

/// The pod a node's TokenRequest must be bound to: its name and uid.
pub fn pod_binding(request: &Request) -> Result<(&str, &str), Refusal> {
    let Some(r) = &request.spec.bound_object_ref else {
        return Err(forbidden("node requested token not bound to a pod"));
    };
    let (api_version, kind, name) = (text(&r.api_version), text(&r.kind), text(&r.name));
    if api_version != "v1" || kind != "Pod" || name.is_empty() {
        return Err(forbidden("node requested token not bound to a pod"));
    }
    let uid = text(&r.uid);
    if uid.is_empty() {
        return Err(forbidden("node requested token with a pod binding without a uid"));
    }
    Ok((name, uid))
}

/// Why `node` may not have a token bound to `pod` (the stored one, `None`: not found) whose
/// uid the request names as `uid`.
pub fn pod_problem(node: &str, name: &str, uid: &str, pod: Option<&Pod>) -> Option<Refusal> {
    let Some(pod) = pod else { return Some(Refusal::PodNotFound(name.to_string())) };
    if text(&pod.metadata.uid) != uid {
        return Some(Refusal::Forbidden(format!(
            "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have \
             been deleted and then recreated"
        )));
    }
    (pod.spec.as_ref().map_or("", |s| text(&s.node_name)) != node)
        .then(|| forbidden("node requested token bound to a pod scheduled on a different node"))
}

/// The one audience a node may ask for (empty: none, the API's).
pub fn requested_audience(request: &Request) -> Result<String, Refusal> {
    match request.spec.audiences.as_deref().unwrap_or_default() {
        [] => Ok(String::new()),
        [one] => Ok(one.to_string()),
        _ => Err(forbidden("node may only request 0 or 1 audiences")),
    }
}

/// Where a pod volume may name an audience: itself, or a CSI driver reached directly or
/// through a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AudienceSource {
    /// A projected `serviceAccountToken` source names the audience.
    Projected,
    /// An inline CSI volume of this driver.
    Driver(String),
    /// A PersistentVolumeClaim of this name (its PersistentVolume may be a CSI one).
    Claim(String),
}

/// What each volume of `pod` may say about `audience`, in volume order (upstream's
/// `podReferencesAudience` walks them in this order and stops at the first match).
pub fn audience_sources(pod: &Pod, audience: &str) -> Vec<AudienceSource> {
    let pod_name = text(&pod.metadata.name);
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    let mut out = Vec::new();
    for v in volumes {
        let projected = v.projected.as_ref().and_then(|p| p.sources.as_deref()).unwrap_or_default();
        let names_it = projected
            .iter()
            .any(|src| src.service_account_token.as_ref().is_some_and(|t| text(&t.audience) == audience));
        if names_it {
            out.push(AudienceSource::Projected);
            continue;
        }
        if v.ephemeral.as_ref().is_some_and(|e| e.volume_claim_template.is_some()) {
            out.push(AudienceSource::Claim(format!("{pod_name}-{}", v.name)));
        } else if let Some(claim) = &v.persistent_volume_claim {
            out.push(AudienceSource::Claim(claim.claim_name.clone()));
        } else if let Some(driver) = v.csi.as_ref().map(|c| c.driver.as_str()).filter(|d| !d.is_empty()) {
            out.push(AudienceSource::Driver(driver.to_string()));
        }
    }
    out
}

/// Whether a CSIDriver asks for tokens of `audience` (`spec.tokenRequests[].audience`).
pub fn driver_has_audience(driver: &CSIDriver, audience: &str) -> bool {
    driver.spec.token_requests.as_deref().unwrap_or_default().iter().any(|r| r.audience == audience)
}

/// Upstream's aggregate of errors: one is itself, several are `[a, b]`.
pub fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The refusal when no volume names the audience: a lookup error if there was one, else the
/// node's lack of authorization (`authorized`: what the authorizer said).
pub fn audience_problem(audience: &str, errors: &[String], authorized: bool, user: &str) -> Option<Refusal> {
    if !errors.is_empty() {
        return Some(Refusal::Forbidden(format!("error validating audience {audience:?}: {}", aggregate(errors))));
    }
    (!authorized).then(|| {
        Refusal::Forbidden(format!(
            "audience {audience:?} not found in pod spec volume, {user} is not authorized to request tokens for this \
             audience"
        ))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::type_complexity)]
    use serde::de::DeserializeOwned;
    use serde_json::{json, Value};

    use super::*;

    fn typed<T: DeserializeOwned>(v: Value) -> T {
        crate::admission::decode(&v).unwrap()
    }

    fn request(bound: Value, audiences: Value) -> Request {
        typed(json!({"spec": {"boundObjectRef": bound, "audiences": audiences}}))
    }

    #[test]
    fn pod_bindings() {
        let ok = request(json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}), json!([]));
        assert_eq!(pod_binding(&ok).unwrap(), ("p", "u"));
        let not_bound = "node requested token not bound to a pod";
        let cases: Vec<(&str, Request, &str)> = vec![
            ("no binding", typed(json!({"spec": {}})), not_bound),
            ("null binding", request(json!(null), json!([])), not_bound),
            (
                "secret",
                request(json!({"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u"}), json!([])),
                not_bound,
            ),
            (
                "node",
                request(json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}), json!([])),
                not_bound,
            ),
            (
                "other version",
                request(json!({"apiVersion": "v2", "kind": "Pod", "name": "p", "uid": "u"}), json!([])),
                not_bound,
            ),
            ("no name", request(json!({"apiVersion": "v1", "kind": "Pod", "uid": "u"}), json!([])), not_bound),
            (
                "no uid",
                request(json!({"apiVersion": "v1", "kind": "Pod", "name": "p"}), json!([])),
                "node requested token with a pod binding without a uid",
            ),
        ];
        for (what, req, want) in cases {
            assert_eq!(pod_binding(&req).err(), Some(Refusal::Forbidden(want.into())), "{what}");
        }
    }

    #[test]
    fn pods_of_the_node_only() {
        let pod: Pod = typed(json!({"metadata": {"name": "p", "uid": "u1"}, "spec": {"nodeName": "n1"}}));
        let cases: Vec<(&str, &str, &str, Option<&Pod>, Option<Refusal>)> = vec![
            ("own pod", "n1", "u1", Some(&pod), None),
            ("missing pod", "n1", "u1", None, Some(Refusal::PodNotFound("p".into()))),
            (
                "recreated pod",
                "n1",
                "old",
                Some(&pod),
                Some(Refusal::Forbidden("the UID in the bound object reference (old) does not match the UID in record. The object might have been deleted and then recreated".into())),
            ),
            (
                "another node's pod",
                "n2",
                "u1",
                Some(&pod),
                Some(Refusal::Forbidden("node requested token bound to a pod scheduled on a different node".into())),
            ),
        ];
        for (what, node, uid, pod, want) in cases {
            assert_eq!(pod_problem(node, "p", uid, pod), want, "{what}");
        }
    }

    #[test]
    fn one_audience_at_most() {
        assert_eq!(requested_audience(&typed(json!({"spec": {}}))).unwrap(), "");
        assert_eq!(requested_audience(&request(json!(null), json!(["vault"]))).unwrap(), "vault");
        assert_eq!(
            requested_audience(&request(json!(null), json!(["a", "b"]))).err(),
            Some(Refusal::Forbidden("node may only request 0 or 1 audiences".into()))
        );
    }

    #[test]
    fn where_pod_volumes_name_audiences() {
        let pod: Pod = typed(json!({"metadata": {"name": "web"}, "spec": {"volumes": [
            {"name": "api", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}, {"configMap": {"name": "c"}}]}},
            {"name": "vault", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "vault"}}]}},
            {"name": "inline", "csi": {"driver": "csi.example.com"}},
            {"name": "disk", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "plain", "emptyDir": {}},
        ]}}));
        let common = || {
            vec![
                AudienceSource::Driver("csi.example.com".into()),
                AudienceSource::Claim("data".into()),
                AudienceSource::Claim("web-scratch".into()),
            ]
        };
        let cases: Vec<(&str, Vec<AudienceSource>)> = vec![
            ("", [vec![AudienceSource::Projected], common()].concat()),
            ("vault", [vec![AudienceSource::Projected], common()].concat()),
            ("other", common()),
        ];
        for (audience, want) in cases {
            assert_eq!(audience_sources(&pod, audience), want, "{audience:?}");
        }
        assert!(audience_sources(&typed(json!({"spec": {}})), "").is_empty());
    }

    #[test]
    fn drivers_and_refusals() {
        let driver: CSIDriver = typed(json!({"spec": {"tokenRequests": [{"audience": "vault"}, {"audience": ""}]}}));
        assert!(driver_has_audience(&driver, "vault"));
        assert!(driver_has_audience(&driver, ""));
        assert!(!driver_has_audience(&driver, "other"));
        assert!(!driver_has_audience(&typed(json!({"spec": {}})), ""));

        let user = "system:node:n1";
        let cases: Vec<(&str, Vec<String>, bool, Option<&str>)> = vec![
            ("authorized", vec![], true, None),
            ("not authorized", vec![], false, Some("audience \"x\" not found in pod spec volume, system:node:n1 is not authorized to request tokens for this audience")),
            (
                "a lookup failed",
                vec!["csidriver.storage.k8s.io \"d\" not found".into()],
                true,
                Some("error validating audience \"x\": csidriver.storage.k8s.io \"d\" not found"),
            ),
            (
                "two lookups failed",
                vec!["persistentvolumeclaim \"a\" not found".into(), "persistentvolumeclaim \"b\" not found".into()],
                false,
                Some("error validating audience \"x\": [persistentvolumeclaim \"a\" not found, persistentvolumeclaim \"b\" not found]"),
            ),
        ];
        for (what, errors, authorized, want) in cases {
            assert_eq!(
                audience_problem("x", &errors, authorized, user),
                want.map(|w| Refusal::Forbidden(w.into())),
                "{what}"
            );
        }
    }
}
