//! PodCertificateRequests (certificates.k8s.io/v1 and v1beta1) end to end against
//! `kustos server`: a node (a `system:node:<name>` certificate) requests a certificate for a
//! pod bound to it, and both API versions see the same object, selected by `spec.nodeName`,
//! `spec.podName` and `spec.signerName`; NodeRestriction refuses (403, upstream's messages)
//! another node's pod, another service account, UIDs that are not the current ones and a
//! signer the pod does not mount (unless RBAC allows `request-podcertificate-signer`);
//! validation refuses (422) a bad proof of possession, a stub request whose signature does
//! not verify and the key types the API does not take; a status write needs `sign` (422, as
//! upstream) and follows the Issued rules; `podcertificaterequest-cleaner` deletes requests
//! older than `--pod-certificate-request-cleaner-threshold`; kubectl (the default Table) and
//! the Python client read PodCertificateRequests and v1 ClusterTrustBundles. Every wait is
//! bounded.

mod common;

use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use common::{assert_status, issue_user, run_bounded, send, unique, Server};
use serde_json::{json, Value};

const SIGNER: &str = "example.com/pods";
const V1: &str = "/apis/certificates.k8s.io/v1";
const V1BETA1: &str = "/apis/certificates.k8s.io/v1beta1";
const WAIT: Duration = Duration::from_secs(60);

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A kubelet's key: its PKIX form, a stub PKCS#10 request, and a proof of possession over
/// `pod_uid` (ring's ECDSA P-256 SHA-256 signature is the API's proof).
struct Key {
    pair: rcgen::KeyPair,
    pkix: Vec<u8>,
    stub: Vec<u8>,
}

fn key() -> Key {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let pkix = rcgen::PublicKeyData::subject_public_key_info(&pair);
    let stub = rcgen::CertificateParams::default().serialize_request(&pair).expect("stub request").der().to_vec();
    Key { pair, pkix, stub }
}

fn proof(k: &Key, pod_uid: &str) -> Vec<u8> {
    rcgen::SigningKey::sign(&k.pair, pod_uid.as_bytes()).expect("proof")
}

/// A field (`stub`, `pkix`) of a key Go made that the API refuses (`p224`, `rsa2048`,
/// `x25519`; ca/src/testdata, scripts/gen-pod-certificate-vectors.go).
fn go_key(name: &str, field: &str) -> Vec<u8> {
    let v: Value = serde_json::from_str(include_str!("../ca/src/testdata/pod_certificate_keys.json")).expect("vectors");
    let k = v["keys"].as_array().and_then(|ks| ks.iter().find(|k| k["name"] == name)).expect("a Go key");
    base64::engine::general_purpose::STANDARD.decode(k[field].as_str().unwrap_or_default()).expect("base64")
}

/// What a kubelet knows of one pod.
#[derive(Clone)]
struct PodRef {
    name: String,
    uid: String,
    sa: String,
    sa_uid: String,
    node: String,
    node_uid: String,
}

async fn create(s: &Server, path: &str, obj: Value) -> Value {
    let r = send(s.http().post(format!("{}{path}", s.url)).json(&obj)).await;
    assert!(r.code == 201 || r.code == 200, "POST {path}: {} {}", r.code, r.text);
    r.body
}

async fn node(s: &Server, name: &str) -> String {
    let r = send(s.http().get(format!("{}/api/v1/nodes/{name}", s.url))).await;
    let body = if r.code == 200 {
        r.body
    } else {
        create(s, "/api/v1/nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})).await
    };
    body["metadata"]["uid"].as_str().unwrap_or_default().to_string()
}

/// A pod bound to `node_name`, running as service account `app`, mounting `signers`
/// through `podCertificate` projected volume sources.
async fn pod(s: &Server, ns: &str, node_name: &str, signers: &[&str]) -> PodRef {
    let node_uid = node(s, node_name).await;
    let sa_path = format!("/api/v1/namespaces/{ns}/serviceaccounts/app");
    let r = send(s.http().get(format!("{}{sa_path}", s.url))).await;
    let sa = if r.code == 200 {
        r.body
    } else {
        create(s, &format!("/api/v1/namespaces/{ns}/serviceaccounts"), json!({"metadata": {"name": "app"}})).await
    };
    let name = unique("pod");
    let sources: Vec<Value> = signers
        .iter()
        .map(|sn| json!({"podCertificate": {"signerName": sn, "keyType": "ECDSAP256", "credentialBundlePath": "bundle.pem"}}))
        .collect();
    let pod = create(
        s,
        &format!("/api/v1/namespaces/{ns}/pods"),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"nodeName": node_name, "serviceAccountName": "app",
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                        "volumes": [{"name": "certs", "projected": {"sources": sources}}]}}),
    )
    .await;
    PodRef {
        name,
        uid: pod["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
        sa: "app".into(),
        sa_uid: sa["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
        node: node_name.to_string(),
        node_uid,
    }
}

/// A request for `p` as its kubelet writes it (v1: the stub request).
fn pcr(name: &str, p: &PodRef, signer: &str, key_fields: Value) -> Value {
    let mut spec = json!({
        "signerName": signer, "podName": p.name, "podUID": p.uid,
        "serviceAccountName": p.sa, "serviceAccountUID": p.sa_uid,
        "nodeName": p.node, "nodeUID": p.node_uid, "maxExpirationSeconds": 86400,
    });
    for (k, v) in key_fields.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

fn pcrs(version: &str, ns: &str) -> String {
    format!("{version}/namespaces/{ns}/podcertificaterequests")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_request_pod_certificates_and_signers_answer() {
    common::ensure_kubectl();
    let s = Server::start();
    let ns = s.create_namespace("pcr").await;
    let (n1, n2) = (unique("n1"), unique("n2"));
    let here = pod(&s, &ns, &n1, &[SIGNER]).await;
    let elsewhere = pod(&s, &ns, &n2, &[SIGNER]).await;
    let kubelet = issue_user(&s, &format!("system:node:{n1}"), &["system:nodes"]);
    let node1 = s.http_with_identity(&kubelet.identity);
    let k = key();
    let stub = json!({"stubPKCS10Request": b64(&k.stub)});

    // A request for a pod bound to the node: created, and the same object through both versions.
    let name = unique("req");
    let r =
        send(node1.post(format!("{}{}", s.url, pcrs(V1, &ns))).json(&pcr(&name, &here, SIGNER, stub.clone()))).await;
    r.expect_code(201, "the node's request for its own pod");
    assert_eq!(r.body["spec"]["maxExpirationSeconds"], 86400, "{}", r.text);
    let uid = r.body["metadata"]["uid"].clone();
    for (version, api_version) in [(V1, "certificates.k8s.io/v1"), (V1BETA1, "certificates.k8s.io/v1beta1")] {
        let got = send(node1.get(format!("{}{}/{name}", s.url, pcrs(version, &ns)))).await;
        got.expect_code(200, "a read through each version");
        assert_eq!(
            (got.body["apiVersion"].as_str(), &got.body["metadata"]["uid"]),
            (Some(api_version), &uid),
            "{}",
            got.text
        );
        assert_eq!(got.body["spec"]["stubPKCS10Request"], b64(&k.stub));
        let list =
            send(s.http().get(format!("{}{}?fieldSelector=spec.nodeName={n1}", s.url, pcrs(version, &ns)))).await;
        let names: Vec<&str> = list.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, [name.as_str()], "spec.nodeName selects: {}", list.text);
    }
    for (selector, want) in [
        (format!("spec.podName={}", here.name), vec![name.as_str()]),
        (format!("spec.podName={}", elsewhere.name), vec![]),
        (format!("spec.signerName={SIGNER}"), vec![name.as_str()]),
        ("spec.signerName=example.com/other".to_string(), vec![]),
    ] {
        let list =
            send(s.http().get(format!("{}{}", s.url, pcrs(V1, &ns))).query(&[("fieldSelector", &selector)])).await;
        list.expect_code(200, &selector);
        let names: Vec<&str> = list.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, want, "{selector}: {}", list.text);
    }
    let r = send(s.http().get(format!("{}{}?fieldSelector=spec.podUID%3Dx", s.url, pcrs(V1, &ns)))).await;
    assert_status(&r, 400, Some("BadRequest"), "a field that is not selectable");

    // Another node's pod: 403, whether the request names this node or the pod's.
    let not_here = format!("is not running on node \\\"{n1}\\\" named in the PodCertificateRequest");
    let not_me = format!("PodCertificateRequest.Spec.NodeName=\\\"{n2}\\\", which is not the requesting node");
    for (what, node_name, node_uid, why) in [
        ("naming this node", &n1, &here.node_uid, &not_here),
        ("naming the pod's node", &n2, &elsewhere.node_uid, &not_me),
    ] {
        let mut other = elsewhere.clone();
        other.node = node_name.clone();
        other.node_uid = node_uid.clone();
        let r = send(node1.post(format!("{}{}", s.url, pcrs(V1, &ns))).json(&pcr(
            &unique("x"),
            &other,
            SIGNER,
            stub.clone(),
        )))
        .await;
        assert_status(&r, 403, Some("Forbidden"), &format!("another node's pod, {what}"));
        assert!(r.text.contains(why), "{what}: {}", r.text);
    }
    // Another service account, or the account's UID not the current one.
    let mut wrong_sa = here.clone();
    wrong_sa.sa = "other".into();
    let r = send(node1.post(format!("{}{}", s.url, pcrs(V1, &ns))).json(&pcr(
        &unique("x"),
        &wrong_sa,
        SIGNER,
        stub.clone(),
    )))
    .await;
    assert_status(&r, 403, Some("Forbidden"), "another service account");
    assert!(
        r.text.contains("contains serviceAccountName (\\\"other\\\") that differs from running pod (\\\"app\\\")"),
        "{}",
        r.text
    );
    let mut wrong_sa_uid = here.clone();
    wrong_sa_uid.sa_uid = "not-the-account".into();
    let r = send(node1.post(format!("{}{}", s.url, pcrs(V1, &ns))).json(&pcr(
        &unique("x"),
        &wrong_sa_uid,
        SIGNER,
        stub.clone(),
    )))
    .await;
    assert_status(&r, 403, Some("Forbidden"), "a service account UID that is not the account's");
    assert!(r.text.contains("names service account UID \\\"not-the-account\\\""), "{}", r.text);
    // A UID that is not the pod's.
    let mut wrong = here.clone();
    wrong.uid = "not-the-pod".into();
    let r =
        send(node1.post(format!("{}{}", s.url, pcrs(V1, &ns))).json(&pcr(&unique("x"), &wrong, SIGNER, stub.clone())))
            .await;
    assert_status(&r, 403, Some("Forbidden"), "a pod UID that is not the pod's");
    assert!(r.text.contains("contains pod UID (\\\"not-the-pod\\\")"), "{}", r.text);

    // A signer the pod does not mount: 403, until RBAC allows request-podcertificate-signer.
    let other_signer = "example.com/unmounted";
    let attempt = || pcr(&unique("unmounted"), &here, other_signer, stub.clone());
    let r = send(node1.post(format!("{}{}", s.url, pcrs(V1, &ns))).json(&attempt())).await;
    assert_status(&r, 403, Some("Forbidden"), "an unmounted signer");
    assert!(r.text.contains("mounts no podCertificate projected volume"), "{}", r.text);
    let role = unique("request-signer");
    create(&s, "/apis/rbac.authorization.k8s.io/v1/clusterroles", json!({"metadata": {"name": role},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": [other_signer], "verbs": ["request-podcertificate-signer"]}]})).await;
    create(
        &s,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": kubelet.name}]}),
    )
    .await;
    let mut allowed = None;
    for _ in 0..100 {
        let r = send(node1.post(format!("{}{}", s.url, pcrs(V1, &ns))).json(&attempt())).await;
        if r.code == 201 {
            allowed = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(allowed.is_some(), "an unmounted signer the node may request-podcertificate-signer for");

    // Validation: a proof of another pod UID, an unsupported key (P-224), no key at all.
    let bad_proof = json!({"pkixPublicKey": b64(&k.pkix), "proofOfPossession": b64(&proof(&k, "another-uid"))});
    let r =
        send(node1.post(format!("{}{}", s.url, pcrs(V1BETA1, &ns))).json(&pcr(&unique("x"), &here, SIGNER, bad_proof)))
            .await;
    assert_status(&r, 422, Some("Invalid"), "a bad proof of possession");
    assert!(r.text.contains("could not verify proof-of-possession signature"), "{}", r.text);
    let mut tampered = k.stub.clone();
    if let Some(last) = tampered.last_mut() {
        *last ^= 1;
    }
    let r = send(node1.post(format!("{}{}", s.url, pcrs(V1, &ns))).json(&pcr(
        &unique("x"),
        &here,
        SIGNER,
        json!({"stubPKCS10Request": b64(&tampered)}),
    )))
    .await;
    assert_status(&r, 422, Some("Invalid"), "a stub request whose signature does not verify");
    assert!(r.text.contains("could not verify the request's signature"), "{}", r.text);
    let good_proof = json!({"pkixPublicKey": b64(&k.pkix), "proofOfPossession": b64(&proof(&k, &here.uid))});
    let r = send(node1.post(format!("{}{}", s.url, pcrs(V1BETA1, &ns))).json(&pcr(
        &unique("pkix"),
        &here,
        SIGNER,
        good_proof,
    )))
    .await;
    r.expect_code(201, "v1beta1's deprecated key and proof");
    let refused = [
        (V1, "p224", "stubPKCS10Request", "elliptic public keys must use curve P256 or P384"),
        (V1, "rsa2048", "stubPKCS10Request", "RSA keys must have modulus size 3072 or 4096"),
        (V1BETA1, "x25519", "pkixPublicKey", "unknown public key type; supported types are Ed25519, ECDSA, and RSA"),
    ];
    for (version, name, field, why) in refused {
        let mut key_fields = json!({field: b64(&go_key(name, if field == "pkixPublicKey" { "pkix" } else { "stub" }))});
        if field == "pkixPublicKey" {
            key_fields["proofOfPossession"] = json!(b64(b"no proof"));
        }
        let r = send(node1.post(format!("{}{}", s.url, pcrs(version, &ns))).json(&pcr(
            &unique("x"),
            &here,
            SIGNER,
            key_fields,
        )))
        .await;
        assert_status(&r, 422, Some("Invalid"), &format!("an unsupported key ({name})"));
        assert!(r.text.contains(why), "{name}: {}", r.text);
    }

    // The status: 403 without `sign`; with it, the Issued rules hold.
    let status_url = format!("{}{}/{name}/status", s.url, pcrs(V1, &ns));
    let signer_user = issue_user(&s, &unique("pod-signer"), &[]);
    let writer = unique("pcr-status-writer");
    create(&s, "/apis/rbac.authorization.k8s.io/v1/clusterroles", json!({"metadata": {"name": writer},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["podcertificaterequests", "podcertificaterequests/status"], "verbs": ["get", "update", "patch"]}]})).await;
    create(
        &s,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": writer},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": writer},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": signer_user.name}]}),
    )
    .await;
    let signer_http = s.http_with_identity(&signer_user.identity);
    let ca = kustos_ca::Ca::generate("pod-ca", chrono::Duration::days(1), chrono::Utc::now()).expect("CA");
    let mut params = kustos_ca::IssueParams::client("pod", vec![], chrono::Duration::hours(2));
    params.key = kustos_ca::SubjectKey::PublicKey(k.pkix.clone());
    // Issued two minutes ahead: the CA backdates by five, within the five minutes allowed.
    let issued = ca.issue(params, chrono::Utc::now() + chrono::Duration::minutes(2)).expect("leaf");
    let der = kustos_ca::certificates_from_pem(&issued.cert_pem).expect("pem").remove(0);
    let info = kustos_ca::parse_certificate_der(&der).expect("leaf");
    let ts = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let with_status = |refresh: chrono::DateTime<chrono::Utc>| {
        let mut o = pcr(&name, &here, SIGNER, stub.clone());
        o["apiVersion"] = json!("certificates.k8s.io/v1");
        o["kind"] = json!("PodCertificateRequest");
        o["status"] = json!({
            "conditions": [{"type": "Issued", "status": "True", "reason": "Issued", "message": "issued",
                            "lastTransitionTime": ts(chrono::Utc::now())}],
            "certificateChain": format!("{}{}", issued.cert_pem, ca.cert_pem()),
            "notBefore": ts(info.not_before), "notAfter": ts(info.not_after), "beginRefreshAt": ts(refresh),
        });
        o
    };
    let good = with_status(info.not_before + chrono::Duration::hours(1));
    let r = send(signer_http.put(&status_url).json(&good)).await;
    assert_status(&r, 422, Some("Invalid"), "a status write without sign");
    let not_permitted = format!(
        "spec.signerName: Forbidden: User \\\"{}\\\" is not permitted to \\\"sign\\\" for signer \\\"{SIGNER}\\\"",
        signer_user.name
    );
    assert!(r.text.contains(&not_permitted), "{}", r.text);
    let sign = unique("pod-sign");
    create(&s, "/apis/rbac.authorization.k8s.io/v1/clusterroles", json!({"metadata": {"name": sign},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": ["example.com/*"], "verbs": ["sign"]}]})).await;
    create(
        &s,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": sign},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sign},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": signer_user.name}]}),
    )
    .await;
    // The status rules hold whoever writes (upstream validates before it checks `sign`).
    let too_early = with_status(info.not_before + chrono::Duration::minutes(1));
    let r = send(signer_http.put(&status_url).json(&too_early)).await;
    assert_status(&r, 422, Some("Invalid"), "beginRefreshAt too early");
    assert!(r.text.contains("must be at least 10 minutes after status.notBefore"), "{}", r.text);
    let mut issued_ok = None;
    for _ in 0..100 {
        let r = send(signer_http.put(&status_url).json(&good)).await;
        if r.code == 200 {
            issued_ok = Some(r);
            break;
        }
        assert!(r.text.contains(&not_permitted), "only the missing sign refuses, until granted: {}", r.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = issued_ok.expect("issuing once sign is granted");
    assert_eq!(r.body["status"]["conditions"][0]["type"], "Issued", "{}", r.text);
    // Issued is final.
    let mut denied = good.clone();
    denied["status"] = json!({"conditions": [{"type": "Denied", "status": "True", "reason": "Changed", "message": "",
                                             "lastTransitionTime": ts(chrono::Utc::now())}]});
    let r = send(signer_http.put(&status_url).json(&denied)).await;
    assert_status(&r, 422, Some("Invalid"), "a status change after issuing");
    // The spec is immutable.
    let mut changed = good.clone();
    changed["spec"]["podName"] = json!("another");
    let r = send(s.http().put(format!("{}{}/{name}", s.url, pcrs(V1, &ns))).json(&changed)).await;
    assert_status(&r, 422, Some("Invalid"), "a spec change");

    // kubectl lists the requests, and the v1 ClusterTrustBundles.
    // Upstream prints no columns of its own for the kind: the default Table (Name, Created At).
    let table = s.kubectl_ok(&["get", "podcertificaterequests", "-n", &ns]);
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "CREATED", "AT"], "kubectl get podcertificaterequests:\n{table}");
    assert!(table.lines().any(|l| l.split_whitespace().next() == Some(name.as_str())), "{table}");
    let bundle = unique("bundle");
    let out = s.kubectl_with_stdin(
        &["create", "-f", "-"],
        Some(
            &json!({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
        "metadata": {"name": bundle}, "spec": {"trustBundle": ca.cert_pem()}})
            .to_string(),
        ),
    );
    assert!(out.status.success(), "kubectl create a v1 bundle: {}", String::from_utf8_lossy(&out.stderr));
    let table = s.kubectl_ok(&["get", "clustertrustbundles"]);
    assert!(table.contains(&bundle) && table.contains("SIGNERNAME"), "kubectl get clustertrustbundles:\n{table}");
    let got: Value =
        serde_json::from_str(&s.kubectl_ok(&["get", "clustertrustbundle", &bundle, "-o", "json"])).expect("json");
    assert_eq!(got["apiVersion"], "certificates.k8s.io/v1", "kubectl reads the preferred version");
    let beta = send(s.http().get(format!("{}{V1BETA1}/clustertrustbundles/{bundle}", s.url))).await;
    beta.expect_code(200, "the v1 bundle through v1beta1");
    assert_eq!(beta.body["apiVersion"], "certificates.k8s.io/v1beta1");
    assert_eq!(beta.body["spec"]["trustBundle"], ca.cert_pem());

    // The Python client reads both kinds through both versions.
    let script = s.work_dir().join("pod_certificates.py");
    std::fs::write(&script, PYTHON).expect("writing the script");
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg(&s.kubeconfig).arg(&ns).arg(&name).arg(&bundle).env_remove("KUBECONFIG");
    let out = run_bounded(&mut cmd, None, Duration::from_secs(120), "python3 pod_certificates.py");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("python OK"),
        "the Python client ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const PYTHON: &str = r#"
import sys
from kubernetes import client, config
kubeconfig, ns, name, bundle = sys.argv[1:5]
config.load_kube_config(config_file=kubeconfig)
v1, beta = client.CertificatesV1Api(), client.CertificatesV1beta1Api()
for api in (v1, beta):
    got = api.read_namespaced_pod_certificate_request(name, ns)
    assert got.metadata.name == name, got.metadata
    assert got.status.conditions[0].type == "Issued", got.status
    assert got.status.certificate_chain.startswith("-----BEGIN CERTIFICATE-----"), got.status
    # Selected: a v1 client cannot read the requests made with v1beta1's deprecated key
    # fields (v1's stubPKCS10Request is required), as against kube-apiserver.
    items = api.list_namespaced_pod_certificate_request(ns, field_selector="metadata.name=" + name).items
    assert [i.metadata.name for i in items] == [name], items
    b = api.read_cluster_trust_bundle(bundle)
    assert b.spec.trust_bundle.startswith("-----BEGIN CERTIFICATE-----"), b.spec
    assert bundle in [i.metadata.name for i in api.list_cluster_trust_bundle().items]
print("python OK")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_deletes_requests_older_than_the_threshold() {
    let s = Server::start_with(&["--pod-certificate-request-cleaner-threshold", "3s"]);
    let ns = s.create_namespace("pcr-clean").await;
    let p = pod(&s, &ns, &unique("n"), &[SIGNER]).await;
    let k = key();
    let name = unique("old");
    create(&s, &pcrs(V1, &ns), pcr(&name, &p, SIGNER, json!({"stubPKCS10Request": b64(&k.stub)}))).await;
    let path = format!("{}{}/{name}", s.url, pcrs(V1, &ns));
    let start = std::time::Instant::now();
    loop {
        let r = send(s.http().get(&path)).await;
        if r.code == 404 {
            break;
        }
        assert!(start.elapsed() < WAIT, "the cleaner did not delete {name} within {WAIT:?}:\n{}", s.stderr_tail());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
