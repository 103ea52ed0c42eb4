//! Tests of the admission chain and its plugins.

use super::*;
use crate::http::request_info::resolve;
use http::Method;

use std::sync::{Arc, Mutex};

fn registry() -> crate::registry::Registry {
    crate::registry::Registry::builtin()
}

#[test]
fn the_chain_runs_in_upstreams_order() {
    assert_eq!(
        chain().names(),
        [
            "NamespaceLifecycle",
            "NodeRestriction",
            "PodCertificateRequestNodeRestriction",
            "CertificateApproval",
            "CertificateSigning",
            "PodCertificateRequestSigning",
            "ClusterTrustBundleAttest",
            "CertificateSubjectRestriction",
            "RBACEscalation",
            "BootstrapCSRReads",
        ]
    );
}

#[test]
fn plugins_are_found_by_name_and_a_chain_keeps_the_registered_order() {
    for (name, make) in plugins() {
        assert_eq!(make().name(), *name, "registered under its own name");
        assert_eq!(plugin(name).map(|p| p.name()), Some(*name));
    }
    assert!(plugin("AlwaysAdmit").is_none(), "not registered");
    let some = chain_of(|n| matches!(n, "RBACEscalation" | "NamespaceLifecycle" | "CertificateSigning"));
    assert_eq!(some.names(), ["NamespaceLifecycle", "CertificateSigning", "RBACEscalation"]);
    let without = chain_of(|n| n != "NodeRestriction");
    assert_eq!(without.names().len(), plugins().len() - 1);
    assert!(!without.names().contains(&"NodeRestriction"));
}

#[test]
fn each_plugin_handles_its_kinds_and_operations() {
    use Operation::*;
    let reg = registry();
    let user = UserInfo::default();
    /// group, resource, operation, namespace, subresource, plugins that run.
    type Case<'a> = (&'a str, &'a str, Operation, &'a str, &'a str, &'a [&'a str]);
    let cases: &[Case<'_>] = &[
        ("", "configmaps", Create, "default", "", &["NamespaceLifecycle"]),
        ("", "configmaps", Update, "default", "", &[]),
        ("", "configmaps", Delete, "default", "", &[]),
        ("", "namespaces", Create, "", "", &[]),
        ("", "namespaces", Delete, "", "", &["NamespaceLifecycle"]),
        ("coordination.k8s.io", "leases", Create, "kube-node-lease", "", &["NamespaceLifecycle", "NodeRestriction"]),
        ("coordination.k8s.io", "leases", Update, "kube-node-lease", "", &["NodeRestriction"]),
        ("", "nodes", Create, "", "", &["NodeRestriction"]),
        ("", "nodes", Update, "", "status", &["NodeRestriction"]),
        ("", "nodes", Delete, "", "", &["NodeRestriction"]),
        ("", "nodes", Read, "", "", &[]),
        (
            "certificates.k8s.io",
            "certificatesigningrequests",
            Create,
            "",
            "",
            &["NodeRestriction", "CertificateSubjectRestriction"],
        ),
        ("certificates.k8s.io", "certificatesigningrequests", Update, "", "approval", &["CertificateApproval"]),
        ("certificates.k8s.io", "certificatesigningrequests", Update, "", "status", &["CertificateSigning"]),
        ("certificates.k8s.io", "certificatesigningrequests", Update, "", "", &[]),
        ("certificates.k8s.io", "certificatesigningrequests", Read, "", "", &["BootstrapCSRReads"]),
        ("certificates.k8s.io", "clustertrustbundles", Create, "", "", &["ClusterTrustBundleAttest"]),
        ("certificates.k8s.io", "clustertrustbundles", Update, "", "", &["ClusterTrustBundleAttest"]),
        ("certificates.k8s.io", "clustertrustbundles", Delete, "", "", &[]),
        ("rbac.authorization.k8s.io", "rolebindings", Create, "default", "", &["NamespaceLifecycle", "RBACEscalation"]),
        ("rbac.authorization.k8s.io", "clusterroles", Update, "", "", &["RBACEscalation"]),
        ("rbac.authorization.k8s.io", "clusterroles", Delete, "", "", &[]),
        ("", "configmaps", Read, "default", "", &[]),
    ];
    for (group, resource, op, ns, sub, want) in cases {
        let Some(def) = reg.resources.iter().find(|d| d.group == *group && d.resource == *resource) else {
            panic!("{resource} registered")
        };
        let info = RequestInfo { namespace: ns.to_string(), subresource: sub.to_string(), ..Default::default() };
        let a = Attributes::new(*op, def, &info, &user, None, None);
        assert_eq!(chain().handling(&a), *want, "{resource}/{sub} {op:?}");
    }
}

/// A plugin that records its runs and refuses when told to.
struct Probe {
    name: &'static str,
    phase: Phase,
    refuse: bool,
    log: Arc<Mutex<Vec<&'static str>>>,
}

#[async_trait::async_trait]
impl Plugin for Probe {
    fn name(&self) -> &'static str {
        self.name
    }
    fn phase(&self) -> Phase {
        self.phase
    }
    fn handles(&self, a: &Attributes<'_>) -> bool {
        a.op != Operation::Delete
    }
    async fn admit(&self, _services: &Services<'_>, _a: &Attributes<'_>) -> Result<(), ApiError> {
        self.log.lock().map_err(|_| ApiError::internal("poisoned"))?.push(self.name);
        if self.refuse {
            Err(ApiError::forbidden("", "configmaps", "x", format!("refused by {}", self.name)))
        } else {
            Ok(())
        }
    }
}

/// A server prepared as a real one starts (its namespaces exist).
async fn server() -> crate::testing::TestServer {
    match crate::testing::TestServer::new().await {
        Ok(s) => s,
        Err(e) => panic!("test server: {e}"),
    }
}

#[tokio::test]
async fn mutating_then_validating_and_the_first_refusal_is_the_answer() {
    let server = server().await;
    let services = server.state.admission_services();
    let reg = registry();
    let Some(def) = reg.find("", "v1", "configmaps") else { panic!("configmaps registered") };
    let user = UserInfo::default();
    let info = RequestInfo { namespace: "default".into(), ..Default::default() };
    let run = |refusing: &'static [&'static str]| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let probe = |name: &'static str, phase| -> Box<dyn Plugin> {
            Box::new(Probe { name, phase, refuse: refusing.contains(&name), log: log.clone() })
        };
        // Registered with a validating plugin first: mutating ones still run first.
        let chain = Chain::new(vec![
            probe("V1", Phase::Validating),
            probe("M1", Phase::Mutating),
            probe("R1", Phase::Read),
            probe("M2", Phase::Mutating),
            probe("V2", Phase::Validating),
        ]);
        (chain, log)
    };
    let obj = serde_json::json!({"metadata": {"name": "x"}});
    for (op, refusing, want_log, want_err) in [
        (Operation::Create, &[][..], &["M1", "M2", "V1", "V2"][..], None),
        (Operation::Update, &["M2"][..], &["M1", "M2"][..], Some("refused by M2")),
        (Operation::Create, &["V1", "V2"][..], &["M1", "M2", "V1"][..], Some("refused by V1")),
        (Operation::Read, &[][..], &["R1"][..], None),
        (Operation::Delete, &["M1"][..], &[][..], None),
    ] {
        let (chain, log) = run(refusing);
        let a = Attributes::new(op, def, &info, &user, Some(&obj), None);
        let got = chain.admit(&services, &a).await;
        assert_eq!(got.err().map(|e| e.to_string()).as_deref(), want_err, "{op:?} {refusing:?}");
        let log = log.lock().map(|l| l.clone()).unwrap_or_default();
        assert_eq!(log, want_log, "{op:?} {refusing:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn namespace_lifecycle() {
    let server = server().await;
    let services = server.state.admission_services();
    let reg = registry();
    let (Some(cms), Some(nss)) = (reg.find("", "v1", "configmaps"), reg.find("", "v1", "namespaces")) else {
        panic!("registered")
    };
    let user = UserInfo::default();
    let obj = serde_json::json!({"metadata": {"name": "x"}});
    /// kind, operation, namespace, name, refusal (code, message).
    type Case<'a> = (&'a ResourceDef, Operation, &'a str, &'a str, Option<(u16, &'a str)>);
    let cases: &[Case<'_>] = &[
        (cms, Operation::Create, "default", "", None),
        (cms, Operation::Create, "nowhere", "", Some((404, "namespaces \"nowhere\" not found"))),
        (
            nss,
            Operation::Delete,
            "",
            "kube-system",
            Some((403, "namespaces \"kube-system\" is forbidden: this namespace may not be deleted")),
        ),
        (nss, Operation::Delete, "", "kube-node-lease", None),
    ];
    for (def, op, ns, name, want) in cases {
        let info = RequestInfo { namespace: ns.to_string(), name: name.to_string(), ..Default::default() };
        let a = Attributes::new(*op, def, &info, &user, Some(&obj), None);
        let got = chain().admit(&services, &a).await.err().map(|e| (e.code().as_u16(), e.to_string()));
        assert_eq!(got.as_ref().map(|(c, m)| (*c, m.as_str())), *want, "{ns}/{name} {op:?}");
    }
    server.stop().await;
}

#[test]
fn bootstrap_tokens_read_csrs_only_by_name() {
    let boot = UserInfo {
        name: "system:bootstrap:abcdef".into(),
        groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
        ..Default::default()
    };
    let node = UserInfo { name: "system:node:n1".into(), groups: vec!["system:nodes".into()], ..Default::default() };
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let cases: &[(&str, &UserInfo, &str, Option<&str>, bool)] = &[
        ("list all", &boot, csrs, None, false),
        ("watch all", &boot, &format!("{csrs}?watch=1"), None, false),
        ("list by name", &boot, csrs, Some("metadata.name=csr-1"), true),
        ("list by name ==", &boot, csrs, Some("metadata.name==csr-1"), true),
        ("list by name among other terms", &boot, csrs, Some("spec.signerName=x,metadata.name=csr-1"), true),
        ("not-equal is not by name", &boot, csrs, Some("metadata.name!=csr-1"), false),
        ("empty name", &boot, csrs, Some("metadata.name="), false),
        ("other selector", &boot, csrs, Some("spec.signerName=x"), false),
        ("get by name is fine", &boot, &format!("{csrs}/csr-1"), None, true),
        ("nodes may list", &node, csrs, None, true),
        ("other resources", &boot, "/api/v1/namespaces/default/configmaps", None, true),
    ];
    for (what, user, path, fs, ok) in cases {
        let (p, q) = path.split_once('?').map_or((*path, None), |(p, q)| (p, Some(q)));
        let info = resolve(&Method::GET, p, q);
        assert_eq!(restrict_read(&info, user, *fs).is_ok(), *ok, "{what}");
    }
}

#[test]
fn objects_are_decoded_once_for_every_plugin_asking_for_the_same_type() {
    use k8s_openapi::api::core::v1::Pod;
    let reg = registry();
    let Some(pods) = reg.find("", "v1", "pods") else { panic!("pods registered") };
    let (user, info) = (UserInfo::default(), RequestInfo::default());
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                 "spec": {"nodeName": "n1"}});
    let a = Attributes::new(Operation::Update, pods, &info, &user, Some(&pod), None);
    let (Ok(Some(first)), Ok(Some(again))) = (a.object_as::<Pod>(), a.object_as::<Pod>()) else {
        panic!("a pod decodes")
    };
    assert!(Arc::ptr_eq(&first, &again), "decoded once");
    assert_eq!(first.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("n1"));
    assert!(matches!(a.old_object_as::<Pod>(), Ok(None)), "no stored object");
    // Another version of the kind decodes as well: apiVersion and kind are not the type's to check.
    let beta = serde_json::json!({"apiVersion": "v1beta1", "kind": "Pod", "metadata": {"name": "p"}});
    let a = Attributes::new(Operation::Create, pods, &info, &user, Some(&beta), None);
    assert!(matches!(a.object_as::<Pod>(), Ok(Some(_))));
    // A field of the wrong type: the 400 the handlers' own decoding answers.
    let bad = serde_json::json!({"metadata": {"name": "p"}, "spec": {"nodeName": 5}});
    let a = Attributes::new(Operation::Create, pods, &info, &user, Some(&bad), None);
    let Err(e) = a.object_as::<Pod>() else { panic!("a number is no nodeName") };
    assert_eq!(e.code(), http::StatusCode::BAD_REQUEST);
    assert!(e.to_string().starts_with("Pod in version \"v1\" cannot be handled as a Pod: "), "{e}");
}

/// Plugins read typed objects; a body with a field of the wrong type is answered by the
/// handlers' typed decoding (400 BadRequest), before any plugin, as it was when plugins read
/// fields by hand, and never judged by NodeRestriction on a field read as absent.
#[tokio::test]
async fn a_nodes_malformed_body_is_answered_400_before_admission() {
    use crate::testing::Caller;
    let server = server().await;
    let node = Caller::node("n1");
    let mirror = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "etcd-n1", "annotations": {"kubernetes.io/config.mirror": "x"}},
        "spec": {"nodeName": 5, "containers": [{"name": "c", "image": "i"}]}});
    let node_obj = serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": 1}}});
    let lease = serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "n2"}, "spec": {"holderIdentity": 5}});
    let csr = serde_json::json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "c"},
        "spec": {"signerName": "kubernetes.io/kubelet-serving", "request": "%%%", "usages": ["server auth"]}});
    let cases = [
        ("/api/v1/namespaces/kube-system/pods", &mirror, "Pod"),
        ("/api/v1/nodes", &node_obj, "Node"),
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", &lease, "Lease"),
        ("/apis/certificates.k8s.io/v1/certificatesigningrequests", &csr, "CertificateSigningRequest"),
    ];
    for (path, body, kind) in cases {
        let r = server.post(&node, path, body).await;
        assert_eq!(r.status, http::StatusCode::BAD_REQUEST, "{kind}: {}", r.text);
        assert_eq!(r.reason(), "BadRequest", "{kind}");
        assert!(
            r.message().starts_with(&format!("{kind} in version \"v1\" cannot be handled as a {kind}")),
            "{}",
            r.text
        );
    }
    server.stop().await;
}
