//! ClusterTrustBundles (certificates.k8s.io/v1beta1) end to end against `kustos server`:
//! kubectl create and get, 422 for a bundle that is not a CA or is misnamed, the `attest`
//! check for signer-linked bundles, and the bundles the publisher keeps from
//! `DATA_DIR/pki/ca.crt`, followed when that file gains a second CA; and the publisher run by
//! `kustos controller-manager` with only the shipped ClusterRole. Every wait is bounded.

mod common;

use std::time::Duration;

use common::{assert_status, issue_user, send, unique, Server};
use serde_json::{json, Value};

const CTBS: &str = "/apis/certificates.k8s.io/v1beta1/clustertrustbundles";
const WAIT: Duration = Duration::from_secs(60);

fn new_ca(cn: &str) -> kustos_ca::Ca {
    kustos_ca::Ca::generate(cn, chrono::Duration::days(30), chrono::Utc::now()).expect("CA")
}

fn bundle(name: &str, signer: Option<&str>, pem: &str) -> Value {
    let mut spec = json!({"trustBundle": pem});
    if let Some(s) = signer {
        spec["signerName"] = json!(s);
    }
    json!({"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle",
           "metadata": {"name": name}, "spec": spec})
}

/// The certificates of a PEM text, DER.
/// The bundles of a ClusterTrustBundle list for `signer`.
fn bundles_of<'a>(list: &'a Value, signer: &str) -> Vec<&'a Value> {
    list["items"].as_array().into_iter().flatten().filter(|i| i["spec"]["signerName"] == signer).collect()
}

fn ders(pem: &str) -> Vec<Vec<u8>> {
    kustos_ca::certificates_from_pem(pem).unwrap_or_default()
}

#[tokio::test]
async fn clustertrustbundles_end_to_end() {
    common::ensure_kubectl();
    let s = Server::start();
    let ca = new_ca("e2e-ctb");

    // kubectl create and get of an unlinked bundle; the Table shows SignerName <none>.
    let name = unique("ctb");
    let out = s.kubectl_with_stdin(&["create", "-f", "-"], Some(&bundle(&name, None, ca.cert_pem()).to_string()));
    assert!(out.status.success(), "kubectl create: {}", String::from_utf8_lossy(&out.stderr));
    let table = s.kubectl_ok(&["get", "clustertrustbundles", &name]);
    assert!(table.contains("SIGNERNAME") && table.contains("<none>"), "kubectl get: {table}");
    let got: Value =
        serde_json::from_str(&s.kubectl_ok(&["get", "clustertrustbundle", &name, "-o", "json"])).expect("json");
    assert_eq!(got["spec"]["trustBundle"], ca.cert_pem());

    // A certificate that is not a CA, and a misnamed bundle: 422 with the causes.
    let leaf = ca
        .issue(kustos_ca::IssueParams::client("leaf", vec![], chrono::Duration::hours(1)), chrono::Utc::now())
        .expect("leaf");
    let r = send(s.http().post(format!("{}{CTBS}", s.url)).json(&bundle(&unique("leaf"), None, &leaf.cert_pem))).await;
    assert_status(&r, 422, Some("Invalid"), "a leaf certificate");
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.trustBundle", "{}", r.body);
    assert!(r.body["message"].as_str().unwrap_or("").contains("entry 0 does not have the CA bit set"), "{}", r.body);
    let r = send(s.http().post(format!("{}{CTBS}", s.url)).json(&bundle("has:colon", None, ca.cert_pem()))).await;
    assert_status(&r, 422, Some("Invalid"), "a colon without a signer");
    assert_eq!(r.body["details"]["causes"][0]["field"], "metadata.name", "{}", r.body);

    // A signer-linked bundle needs `attest` on the signer.
    let user = issue_user(&s, &unique("attester"), &[]);
    let writer = s.http_with_identity(&user.identity);
    let signer = "example.com/e2e";
    let linked = format!("example.com:e2e:{}", unique("v"));
    let role = unique("ctb-writer");
    let rules = json!([
        {"apiGroups": ["certificates.k8s.io"], "resources": ["clustertrustbundles"], "verbs": ["create", "get"]}
    ]);
    let cr = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": role}, "rules": rules});
    send(s.http().post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterroles", s.url)).json(&cr))
        .await
        .expect_code(201, "writer role");
    let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": role},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user.name}]});
    send(s.http().post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", s.url)).json(&crb))
        .await
        .expect_code(201, "writer binding");
    let post = || writer.post(format!("{}{CTBS}", s.url)).json(&bundle(&linked, Some(signer), ca.cert_pem()));
    let r = send(post()).await;
    assert_status(&r, 403, Some("Forbidden"), "no attest");
    assert!(
        r.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("user not permitted to attest for signerName \"example.com/e2e\""),
        "{}",
        r.body
    );
    // An unlinked bundle needs no attest.
    send(writer.post(format!("{}{CTBS}", s.url)).json(&bundle(&unique("free"), None, ca.cert_pem())))
        .await
        .expect_code(201, "unlinked bundle by the writer");
    let attest = unique("attest");
    let role_obj = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": attest},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": ["example.com/*"], "verbs": ["attest"]}]});
    send(s.http().post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterroles", s.url)).json(&role_obj))
        .await
        .expect_code(201, "attest role");
    let mut binding = crb.clone();
    binding["metadata"]["name"] = json!(attest);
    binding["roleRef"]["name"] = json!(attest);
    send(s.http().post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", s.url)).json(&binding))
        .await
        .expect_code(201, "attest binding");
    let mut created = false;
    for _ in 0..100 {
        let r = send(post()).await;
        if r.code == 201 {
            created = true;
            break;
        }
        assert_eq!(r.code, 403, "{}", r.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(created, "the bundle was not created with attest granted");
    let selected = send(s.http().get(format!("{}{CTBS}?fieldSelector=spec.signerName%3D{signer}", s.url))).await;
    let names: Vec<&str> = selected.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, [linked.as_str()], "field selector spec.signerName");

    // The publisher: a bundle per signer, from pki/ca.crt.
    let ca_path = s.data_dir.join("pki/ca.crt");
    let cluster_ca = std::fs::read_to_string(&ca_path).expect("ca.crt");
    let want = ders(&cluster_ca);
    let signers = [
        "kubernetes.io/kube-apiserver-serving",
        "kubernetes.io/kube-apiserver-client",
        "kubernetes.io/kube-apiserver-client-kubelet",
        "kubernetes.io/kubelet-serving",
    ];
    let published = |want: Vec<Vec<u8>>| {
        move |list: &Value| {
            signers.iter().all(|signer| {
                let items = bundles_of(list, signer);
                items.len() == 1
                    && items[0]["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(&format!("{}:", signer.replace('/', ":"))))
                    && ders(items[0]["spec"]["trustBundle"].as_str().unwrap_or("")) == want
            })
        }
    };
    s.wait_for_object(CTBS, "the published bundles", WAIT, published(want.clone())).await;

    // A second CA appended to ca.crt: every bundle holds both, the old ones are gone.
    let second = new_ca("e2e-second");
    std::fs::write(&ca_path, format!("{cluster_ca}{}", second.cert_pem())).expect("writing ca.crt");
    let mut both = want.clone();
    both.push(second.cert_der().to_vec());
    s.wait_for_object(CTBS, "the bundles following ca.crt", WAIT, published(both)).await;
}

/// `kustos controller-manager` as the shipped Deployment runs it: the publisher against an
/// apiserver it does not run in, holding only `manifests/`' ClusterRole for it, publishes the
/// signing CA for the kubernetes.io signers and the root CA for kube-apiserver-serving.
#[tokio::test]
async fn the_publisher_in_operator_mode_works_with_the_shipped_role_alone() {
    let s = Server::start_apiserver();
    // The role from manifests/, bound to a user of its own.
    let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/rbac-controller-manager.yaml"))
        .expect("reading the manifests' RBAC");
    let role_name = "kustos:controller:clustertrustbundle-publisher";
    let mut role: Value = format!("\n{rbac}")
        .split("\n---\n")
        .filter_map(|doc| serde_yaml::from_str::<Value>(doc).ok())
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == role_name)
        .expect("the publisher's ClusterRole in manifests/");
    role["metadata"]["name"] = json!(unique("publisher"));
    send(s.http().post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterroles", s.url)).json(&role))
        .await
        .expect_code(201, "the publisher's role");
    let user = issue_user(&s, &unique("publisher"), &[]);
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user.name}]});
    send(s.http().post(format!("{}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", s.url)).json(&binding))
        .await
        .expect_code(201, "the publisher's binding");

    // A signing CA of its own (as the Deployment's kustos-ca Secret), the cluster CA as root.
    let tmp = tempfile::tempdir().expect("tempdir");
    let signing = new_ca("e2e-operator-signing");
    let (cert, key) = (tmp.path().join("tls.crt"), tmp.path().join("tls.key"));
    std::fs::write(&cert, signing.cert_pem()).expect("writing tls.crt");
    std::fs::write(&key, signing.key_pem()).expect("writing tls.key");
    let root = s.data_dir.join("pki/ca.crt");
    let cm = common::ControllerManager::start_with_kubeconfig(
        &s,
        &user.kubeconfig,
        &[
            "--controllers=kube-apiserver-serving-clustertrustbundle-publisher",
            "--leader-elect=false",
            &format!("--cluster-signing-cert-file={}", cert.display()),
            &format!("--cluster-signing-key-file={}", key.display()),
            &format!("--root-ca-file={}", root.display()),
        ],
    );
    let root_ders = ders(&std::fs::read_to_string(&root).expect("ca.crt"));
    let signing_ders = vec![signing.cert_der().to_vec()];
    let want = [
        ("kubernetes.io/kube-apiserver-serving", root_ders),
        ("kubernetes.io/kube-apiserver-client", signing_ders.clone()),
        ("kubernetes.io/kube-apiserver-client-kubelet", signing_ders.clone()),
        ("kubernetes.io/kubelet-serving", signing_ders),
    ];
    let got = s
        .wait_for_object(CTBS, "the bundles published with the shipped role", WAIT, |list| {
            want.iter().all(|(signer, ders_want)| {
                let items = bundles_of(list, signer);
                items.len() == 1 && ders(items[0]["spec"]["trustBundle"].as_str().unwrap_or("")) == *ders_want
            })
        })
        .await;
    assert!(got["items"].as_array().is_some_and(|i| i.len() >= 4), "{got}");
    assert!(!cm.stderr().contains("Forbidden"), "the shipped role was enough:\n{}", cm.stderr_tail());
}
