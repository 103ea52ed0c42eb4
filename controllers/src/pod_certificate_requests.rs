//! PodCertificateRequests (`certificates.k8s.io`) in whichever version the apiserver serves,
//! for the controllers that read and write them (`signers`, `podcertificaterequest-cleaner`).
//!
//! What enters: the apiserver's discovery of `certificates.k8s.io/v1` and `v1beta1`; a typed
//! request of either version. What leaves: the one [`Version`] to use, and a version-free
//! [`View`] of a request's spec (the key it asks to certify, in the form the request carries
//! it) plus a way to set its status, so each controller has one loop, generic over
//! [`Request`], and no copy per version.
//!
//! The version: v1beta1 where it is served, else v1. v1beta1 is the one that shows every
//! request whole: one made through it in the deprecated form (`pkixPublicKey` and
//! `proofOfPossession`, no `stubPKCS10Request`) has no key that v1's type can carry.
//! kube-apiserver 1.37 serves v1 (v1beta1 only when turned on), 1.34–1.36 v1beta1 when
//! turned on.
//!
//! Before anything is signed, [`check_named`] holds the request's names and UIDs against the
//! objects as they are: the pod exists with that UID, runs as that service account and is
//! bound to that node, which exist with their UIDs. The apiserver checks this at create only
//! for nodes (NodeRestriction); any other identity allowed to create requests could name a
//! service account its pod does not run as.

use std::collections::BTreeMap;
use std::fmt::Debug;

use chrono::{DateTime, Utc};

use k8s_openapi::api::certificates::{v1, v1beta1};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::core::NamespaceResourceScope;
use kube::{Client, Resource};
use kustos_ca::pod_certificate::{self as pc, condition, KeyType};

use crate::csr::to_time;

pub const GROUP: &str = "certificates.k8s.io";
pub const RESOURCE: &str = "podcertificaterequests";

/// A served version of PodCertificateRequests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V1beta1,
}

impl Version {
    /// In order of preference.
    pub const ALL: [Version; 2] = [Version::V1beta1, Version::V1];

    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V1beta1 => "v1beta1",
        }
    }
}

/// The version the apiserver serves PodCertificateRequests in, by discovery: the first of
/// [`Version::ALL`] whose group version lists them; None when neither does (a group version
/// that cannot be read counts as not serving them).
pub async fn served(client: &Client) -> Option<Version> {
    for v in Version::ALL {
        let listed = client
            .list_api_group_resources(&format!("{GROUP}/{}", v.name()))
            .await
            .is_ok_and(|l| l.resources.iter().any(|r| r.name == RESOURCE));
        if listed {
            return Some(v);
        }
    }
    None
}

/// The key a request asks to have certified, as it carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestedKey<'a> {
    /// `spec.stubPKCS10Request` (DER): the key, self-signed.
    Stub(&'a [u8]),
    /// v1beta1's deprecated pair: `spec.pkixPublicKey` (DER SubjectPublicKeyInfo) and
    /// `spec.proofOfPossession` (a signature over the pod UID).
    Pkix { public_key: &'a [u8], proof: &'a [u8] },
}

/// The fields of a request's spec the controllers read, whatever the version.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View<'a> {
    pub signer_name: &'a str,
    pub service_account_name: &'a str,
    pub service_account_uid: &'a str,
    pub pod_name: &'a str,
    pub pod_uid: &'a str,
    pub node_name: &'a str,
    pub node_uid: &'a str,
    pub max_expiration_seconds: Option<i32>,
    pub key: RequestedKey<'a>,
    pub unverified_user_annotations: Option<&'a BTreeMap<String, String>>,
    pub conditions: &'a [Condition],
}

/// A PodCertificateRequest of one version. The status written is v1's type (v1beta1's has
/// the same fields).
pub trait Request:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + serde::de::DeserializeOwned
    + serde::Serialize
    + Send
    + Sync
    + 'static
{
    fn view(&self) -> View<'_>;
    fn set_status(&mut self, status: v1::PodCertificateRequestStatus);
}

fn conditions<T>(c: Option<&Option<Vec<T>>>) -> &[T] {
    c.and_then(Option::as_deref).unwrap_or_default()
}

impl Request for v1::PodCertificateRequest {
    fn view(&self) -> View<'_> {
        let s = &self.spec;
        View {
            signer_name: &s.signer_name,
            service_account_name: &s.service_account_name,
            service_account_uid: &s.service_account_uid,
            pod_name: &s.pod_name,
            pod_uid: &s.pod_uid,
            node_name: &s.node_name,
            node_uid: &s.node_uid,
            max_expiration_seconds: s.max_expiration_seconds,
            unverified_user_annotations: s.unverified_user_annotations.as_ref(),
            key: RequestedKey::Stub(&s.stub_pkc_s10_request.0),
            conditions: conditions(self.status.as_ref().map(|st| &st.conditions)),
        }
    }

    fn set_status(&mut self, status: v1::PodCertificateRequestStatus) {
        self.status = Some(status);
    }
}

impl Request for v1beta1::PodCertificateRequest {
    fn view(&self) -> View<'_> {
        let s = &self.spec;
        let stub = &s.stub_pkc_s10_request.0;
        // Validation takes one form or the other, never both.
        let key = if stub.is_empty() {
            RequestedKey::Pkix {
                public_key: s.pkix_public_key.as_ref().map(|b| b.0.as_slice()).unwrap_or_default(),
                proof: s.proof_of_possession.as_ref().map(|b| b.0.as_slice()).unwrap_or_default(),
            }
        } else {
            RequestedKey::Stub(stub)
        };
        View {
            signer_name: &s.signer_name,
            service_account_name: &s.service_account_name,
            service_account_uid: &s.service_account_uid,
            pod_name: &s.pod_name,
            pod_uid: &s.pod_uid,
            node_name: &s.node_name,
            node_uid: &s.node_uid,
            max_expiration_seconds: s.max_expiration_seconds,
            unverified_user_annotations: s.unverified_user_annotations.as_ref(),
            key,
            conditions: conditions(self.status.as_ref().map(|st| &st.conditions)),
        }
    }

    fn set_status(&mut self, status: v1::PodCertificateRequestStatus) {
        self.status = Some(v1beta1::PodCertificateRequestStatus {
            begin_refresh_at: status.begin_refresh_at,
            certificate_chain: status.certificate_chain,
            conditions: status.conditions,
            not_after: status.not_after,
            not_before: status.not_before,
        });
    }
}

/// Whether the request has a terminal (`Issued`, `Denied`, `Failed`) condition.
pub fn is_done(pcr: &impl Request) -> bool {
    pcr.view().conditions.iter().any(|c| condition::TERMINAL.contains(&c.type_.as_str()))
}

/// The requested key (DER SubjectPublicKeyInfo) and its type, checked as the apiserver's
/// validation checks it, or why it is refused. The apiserver checked it at create; a request
/// that does not pass again is refused all the same.
pub fn requested_key(key: RequestedKey<'_>, pod_uid: &str) -> Result<(Vec<u8>, KeyType), String> {
    match key {
        RequestedKey::Stub(stub) => pc::parse_stub_request(stub)
            .map(|s| (s.public_key_der, s.key_type))
            .map_err(|e| format!("spec.stubPKCS10Request: {e}")),
        RequestedKey::Pkix { public_key, proof } => {
            if public_key.is_empty() {
                return Err("spec.stubPKCS10Request: Required value".into());
            }
            let (key, key_type) =
                pc::accepted_key(public_key).map_err(|p| format!("spec.pkixPublicKey: {}", p.detail()))?;
            if !pc::verify_proof_of_possession(&key, pod_uid, proof) {
                return Err("spec.proofOfPossession: could not verify proof-of-possession signature".into());
            }
            Ok((public_key.to_vec(), key_type))
        }
    }
}

/// The `Denied` reason of a request whose names and UIDs are not those of the objects.
pub const REASON_NOT_AS_NAMED: &str = "PodIdentityMismatch";

/// The objects a request names, as read now (None: not found).
#[derive(Debug, Clone, Default)]
pub struct Named {
    pub pod: Option<Pod>,
    pub service_account: Option<ServiceAccount>,
    pub node: Option<Node>,
}

fn uid_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

/// Whether `view`'s pod, service account and node (in `namespace`) are `named` as they are
/// now: the pod with its UID, running as the service account (unset: `default`) on the node,
/// and the service account and node with their UIDs. Else why not (the `Denied` message).
pub fn check_named(view: &View<'_>, namespace: &str, named: &Named) -> Result<(), String> {
    let pod_ref = format!("pod {namespace}/{}", view.pod_name);
    let Some(pod) = named.pod.as_ref().filter(|p| uid_of(&p.metadata) == view.pod_uid) else {
        return Err(format!("{pod_ref} with UID {:?} does not exist", view.pod_uid));
    };
    let spec = pod.spec.as_ref();
    let runs_as = spec.and_then(|s| s.service_account_name.as_deref()).filter(|n| !n.is_empty()).unwrap_or("default");
    if runs_as != view.service_account_name {
        return Err(format!("{pod_ref} runs as service account {runs_as:?}, not {:?}", view.service_account_name));
    }
    let bound_to = spec.and_then(|s| s.node_name.as_deref()).unwrap_or_default();
    if bound_to != view.node_name {
        return Err(format!("{pod_ref} is bound to node {bound_to:?}, not {:?}", view.node_name));
    }
    if named.service_account.as_ref().is_none_or(|sa| uid_of(&sa.metadata) != view.service_account_uid) {
        return Err(format!(
            "service account {namespace}/{} with UID {:?} does not exist",
            view.service_account_name, view.service_account_uid
        ));
    }
    if named.node.as_ref().is_none_or(|n| uid_of(&n.metadata) != view.node_uid) {
        return Err(format!("node {} with UID {:?} does not exist", view.node_name, view.node_uid));
    }
    Ok(())
}

/// Read the objects `view` names in `namespace` (a name that is empty or not found: None).
pub async fn read_named(client: &Client, view: &View<'_>, namespace: &str) -> Result<Named, kube::Error> {
    async fn get<K>(api: kube::Api<K>, name: &str) -> Result<Option<K>, kube::Error>
    where
        K: Resource + Clone + Debug + serde::de::DeserializeOwned,
    {
        if name.is_empty() {
            return Ok(None);
        }
        api.get_opt(name).await
    }
    Ok(Named {
        pod: get(kube::Api::namespaced(client.clone(), namespace), view.pod_name).await?,
        service_account: get(kube::Api::namespaced(client.clone(), namespace), view.service_account_name).await?,
        node: get(kube::Api::all(client.clone()), view.node_name).await?,
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::mock::Mock;
    use serde_json::json;

    fn resources(names: &[&str]) -> serde_json::Value {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "certificates.k8s.io/v1",
               "resources": names.iter().map(|n| json!({"name": n, "singularName": "", "namespaced": true,
                   "kind": "K", "verbs": ["get"]})).collect::<Vec<_>>()})
    }

    #[tokio::test]
    async fn discovery_prefers_v1beta1_then_v1() {
        let not_found = crate::mock::status(404, "NotFound");
        // (what, the replies to GET /apis/certificates.k8s.io/v1beta1 and then v1, the answer)
        type Case<'a> = (&'a str, Vec<(u16, serde_json::Value)>, Option<Version>);
        let cases: Vec<Case> = vec![
            (
                "v1beta1 served (beside v1 or not)",
                vec![(200, resources(&[RESOURCE, "x/status"]))],
                Some(Version::V1beta1),
            ),
            (
                "v1beta1 without the resource, v1 with it",
                vec![
                    (200, resources(&["clustertrustbundles"])),
                    (200, resources(&["certificatesigningrequests", RESOURCE])),
                ],
                Some(Version::V1),
            ),
            (
                "only v1 (1.37's default)",
                vec![(404, not_found.clone()), (200, resources(&[RESOURCE]))],
                Some(Version::V1),
            ),
            ("neither", vec![(404, not_found.clone()), (200, resources(&["certificatesigningrequests"]))], None),
            ("discovery fails", vec![(500, not_found.clone()), (500, not_found)], None),
        ];
        for (what, replies, want) in cases {
            let mock = Mock::new(replies);
            assert_eq!(served(&mock.client()).await, want, "{what}");
            let asked: Vec<String> = mock.lines();
            let expected: Vec<&str> = ["GET /apis/certificates.k8s.io/v1beta1", "GET /apis/certificates.k8s.io/v1"]
                .into_iter()
                .take(if want == Some(Version::V1beta1) { 1 } else { 2 })
                .collect();
            assert_eq!(asked, expected, "{what}");
        }
    }

    #[test]
    fn a_request_is_held_against_the_objects_it_names() {
        let pod = |sa: &str, node: &str, uid: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "web-0", "uid": uid},
                "spec": {"serviceAccountName": sa, "nodeName": node, "containers": []}}))
            .unwrap()
        };
        let sa = |uid: &str| -> ServiceAccount { serde_json::from_value(json!({"metadata": {"uid": uid}})).unwrap() };
        let node = |uid: &str| -> Node { serde_json::from_value(json!({"metadata": {"uid": uid}})).unwrap() };
        let all = |p: Pod| Named { pod: Some(p), service_account: Some(sa("sa-uid")), node: Some(node("node-uid")) };
        let mut request = v1::PodCertificateRequest::default();
        let s = &mut request.spec;
        (s.pod_name, s.pod_uid) = ("web-0".into(), "pod-uid".into());
        (s.service_account_name, s.service_account_uid) = ("web".into(), "sa-uid".into());
        (s.node_name, s.node_uid) = ("node-1".into(), "node-uid".into());
        let view = request.view();
        let cases: Vec<(&str, Named, Option<&str>)> = vec![
            ("all as named", all(pod("web", "node-1", "pod-uid")), None),
            (
                "no pod",
                Named { pod: None, ..all(pod("web", "node-1", "pod-uid")) },
                Some("pod ns/web-0 with UID \"pod-uid\" does not exist"),
            ),
            (
                "the pod was replaced",
                all(pod("web", "node-1", "other")),
                Some("pod ns/web-0 with UID \"pod-uid\" does not exist"),
            ),
            (
                "the pod runs as another service account",
                all(pod("powerful", "node-1", "pod-uid")),
                Some("pod ns/web-0 runs as service account \"powerful\", not \"web\""),
            ),
            (
                "an unset service account is default",
                all(pod("", "node-1", "pod-uid")),
                Some("pod ns/web-0 runs as service account \"default\", not \"web\""),
            ),
            (
                "bound to another node",
                all(pod("web", "node-2", "pod-uid")),
                Some("pod ns/web-0 is bound to node \"node-2\", not \"node-1\""),
            ),
            (
                "the service account was replaced",
                Named { service_account: Some(sa("new")), ..all(pod("web", "node-1", "pod-uid")) },
                Some("service account ns/web with UID \"sa-uid\" does not exist"),
            ),
            (
                "no node",
                Named { node: None, ..all(pod("web", "node-1", "pod-uid")) },
                Some("node node-1 with UID \"node-uid\" does not exist"),
            ),
        ];
        for (what, named, want) in cases {
            assert_eq!(check_named(&view, "ns", &named).err().as_deref(), want, "{what}");
        }
    }

    #[test]
    fn a_v1beta1_request_carries_its_key_in_one_form() {
        let mut pcr = v1beta1::PodCertificateRequest::default();
        pcr.spec.pkix_public_key = Some(k8s_openapi::ByteString(vec![1, 2]));
        pcr.spec.proof_of_possession = Some(k8s_openapi::ByteString(vec![3]));
        assert_eq!(pcr.view().key, RequestedKey::Pkix { public_key: &[1, 2], proof: &[3] });
        pcr.spec.stub_pkc_s10_request = k8s_openapi::ByteString(vec![9]);
        assert_eq!(pcr.view().key, RequestedKey::Stub(&[9]), "the stub request wins when it is there");
        pcr.set_status(v1::PodCertificateRequestStatus { certificate_chain: Some("c".into()), ..Default::default() });
        assert_eq!(pcr.status.unwrap().certificate_chain.as_deref(), Some("c"));
    }
}
