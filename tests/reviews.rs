//! Review kinds end to end: the real binary, the real kubectl (`auth can-i`, `auth whoami`,
//! which send protobuf bodies) and raw HTTPS (SubjectAccessReview, TokenReview,
//! LocalSubjectAccessReview) as the admin (`system:masters`).

mod common;

use common::{assert_status, send, shared};
use serde_json::{json, Value};

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_as_admin() {
    let s = shared();
    let out = s.kubectl(&["auth", "can-i", "create", "secrets"]);
    assert!(out.status.success(), "can-i exits 0 on yes: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_of(&out).trim(), "yes");
    let out = s.kubectl_ok(&["auth", "can-i", "delete", "clusterroles.rbac.authorization.k8s.io", "-A"]);
    assert_eq!(out.trim(), "yes");
    let out = s.kubectl_ok(&["auth", "can-i", "get", "/healthz"]);
    assert_eq!(out.trim(), "yes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_list_shows_star_rules() {
    let s = shared();
    let out = s.kubectl_ok(&["auth", "can-i", "--list"]);
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        rows.first().cloned().unwrap_or_default(),
        ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"],
        "{out}"
    );
    assert!(rows.iter().any(|r| r.as_slice() == ["*.*", "[]", "[]", "[*]"]), "resource rule *.* in:\n{out}");
    assert!(rows.iter().any(|r| r.as_slice() == ["[*]", "[]", "[*]"]), "non-resource rule * in:\n{out}");
    let out = s.kubectl_ok(&["auth", "can-i", "--list", "-n", "kube-system", "--no-headers"]);
    let first: Vec<&str> = out.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(first, ["*.*", "[]", "[]", "[*]"], "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_whoami_shows_the_admin() {
    let s = shared();
    let out = s.kubectl_ok(&["auth", "whoami", "-o", "json"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("whoami -o json is not JSON ({e}): {out}"));
    assert_eq!(v["apiVersion"], "authentication.k8s.io/v1", "{out}");
    assert_eq!(v["kind"], "SelfSubjectReview", "{out}");
    assert_eq!(v["status"]["userInfo"]["username"], "kustos-admin", "{out}");
    let groups: Vec<&str> = v["status"]["userInfo"]["groups"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(groups.contains(&"system:masters"), "{out}");
    assert!(groups.contains(&"system:authenticated"), "{out}");
    assert!(v["metadata"]["creationTimestamp"].is_string(), "{out}");
    let table = s.kubectl_ok(&["auth", "whoami"]);
    assert!(table.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Username", "kustos-admin"]), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_access_reviews_over_http() {
    let s = shared();
    let http = s.http();
    let url = format!("{}/apis/authorization.k8s.io/v1/subjectaccessreviews", s.url);
    let sar =
        |spec: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});

    // A user with no groups is in no group: not even system:masters' powers through
    // system:authenticated, and nobody has an opinion, so neither allowed nor denied.
    let r = send(http.post(&url).json(&sar(json!({
        "user": "somebody",
        "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"},
    }))))
    .await;
    r.expect_code(201, "SAR for somebody");
    assert_eq!(r.body["kind"], "SubjectAccessReview", "{}", r.text);
    assert_eq!(r.body["apiVersion"], "authorization.k8s.io/v1", "{}", r.text);
    assert_eq!(r.body["metadata"], json!({"creationTimestamp": null}), "{}", r.text);
    assert_eq!(r.body["spec"]["user"], "somebody", "{}", r.text);
    assert_eq!(r.body["status"]["allowed"], false, "{}", r.text);
    assert!(r.body["status"].get("denied").is_none(), "{}", r.text);

    // The same user in system:masters may.
    let r = send(http.post(&url).json(&sar(json!({
        "user": "somebody", "groups": ["system:masters"],
        "resourceAttributes": {"verb": "delete", "resource": "secrets", "namespace": "kube-system"},
    }))))
    .await;
    r.expect_code(201, "SAR for a master");
    assert_eq!(r.body["status"]["allowed"], true, "{}", r.text);

    // Validation: neither attributes nor a subject.
    let r = send(http.post(&url).json(&sar(json!({})))).await;
    assert_status(&r, 422, Some("Invalid"), "empty SAR");
    let fields: Vec<&str> = r.body["details"]["causes"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["field"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(fields, ["spec.resourceAttributes", "spec.user"], "{}", r.text);

    // Bad JSON is a 400; a GET is not allowed; dryRun is accepted.
    let r = send(http.post(&url).header("Content-Type", "application/json").body("{\"spec\": ")).await;
    assert_status(&r, 400, Some("BadRequest"), "bad JSON");
    let r = send(http.get(&url)).await;
    assert_status(&r, 405, Some("MethodNotAllowed"), "GET subjectaccessreviews");
    let r = send(http.post(format!("{url}?dryRun=All")).json(&sar(json!({
        "groups": ["system:masters"], "nonResourceAttributes": {"path": "/healthz", "verb": "get"},
    }))))
    .await;
    r.expect_code(201, "dry-run SAR");
    assert_eq!(r.body["status"]["allowed"], true, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_subject_access_reviews_stay_in_their_namespace() {
    let s = shared();
    let ns = s.create_namespace("lsar").await;
    let http = s.http();
    let url = format!("{}/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews", s.url);
    let lsar = |meta: Value, ra_ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview", "metadata": meta,
               "spec": {"groups": ["system:masters"], "resourceAttributes": {"namespace": ra_ns, "verb": "get", "resource": "configmaps"}}})
    };
    let r = send(http.post(&url).json(&lsar(json!({}), &ns))).await;
    r.expect_code(201, "LSAR");
    assert_eq!(r.body["metadata"]["namespace"], ns.as_str(), "{}", r.text);
    assert_eq!(r.body["status"]["allowed"], true, "{}", r.text);
    let r = send(http.post(&url).json(&lsar(json!({"namespace": "elsewhere"}), &ns))).await;
    assert_status(&r, 400, Some("BadRequest"), "LSAR with another metadata.namespace");
    let r = send(http.post(&url).json(&lsar(json!({}), "elsewhere"))).await;
    assert_status(&r, 422, Some("Invalid"), "LSAR asking about another namespace");
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.resourceAttributes.namespace", "{}", r.text);
    // Cluster-wide, the kind does not exist.
    let r = send(
        http.post(format!("{}/apis/authorization.k8s.io/v1/localsubjectaccessreviews", s.url))
            .json(&lsar(json!({}), "")),
    )
    .await;
    assert_eq!(r.code, 405, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_review_of_garbage_is_not_authenticated() {
    let s = shared();
    let http = s.http();
    let url = format!("{}/apis/authentication.k8s.io/v1/tokenreviews", s.url);
    let r = send(http.post(&url).json(&json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": "not-a-real-token", "audiences": ["https://kubernetes.default.svc"]},
    })))
    .await;
    r.expect_code(201, "TokenReview");
    assert_eq!(r.body["kind"], "TokenReview", "{}", r.text);
    let status = &r.body["status"];
    assert_ne!(status.get("authenticated"), Some(&json!(true)), "{}", r.text);
    assert_eq!(status["user"], json!({}), "{}", r.text);
    assert!(status["error"].as_str().is_some_and(|e| !e.is_empty() && !e.contains("not-a-real-token")), "{}", r.text);
    // Upstream answers with the spec as sent.
    assert_eq!(r.body["spec"]["token"], "not-a-real-token", "{}", r.text);
    let r = send(http.post(&url).json(&json!({"spec": {}}))).await;
    assert_status(&r, 400, Some("BadRequest"), "TokenReview without a token");
    assert_eq!(r.body["message"], "token is required for TokenReview in authentication", "{}", r.text);
    let log = s.stderr_tail();
    assert!(!log.contains("not-a-real-token"), "the token reached the log:\n{log}");
}

/// A protobuf body as client-go sends it: `k8s\0`, then `runtime.Unknown{typeMeta, raw}`.
fn protobuf(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    kustos_apiserver::wire::protobuf::encode::envelope(api_version, kind, raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_review_bodies() {
    let s = shared();
    let http = s.http();
    let pb = "application/vnd.kubernetes.protobuf";
    // SubjectAccessReview{spec{resourceAttributes{verb: list, resource: nodes}, user: nobody}}
    let mut ra = Vec::new();
    ra.extend([0x12, 4]);
    ra.extend(b"list");
    ra.extend([0x2a, 5]);
    ra.extend(b"nodes");
    let mut spec = vec![0x0a, ra.len() as u8];
    spec.extend(&ra);
    spec.extend([0x1a, 6]);
    spec.extend(b"nobody");
    let mut raw = vec![0x12, spec.len() as u8];
    raw.extend(&spec);
    let body = protobuf("authorization.k8s.io/v1", "SubjectAccessReview", &raw);
    // Answered in protobuf, as client-go's Accept prefers.
    let resp = http
        .post(format!("{}/apis/authorization.k8s.io/v1/subjectaccessreviews", s.url))
        .header("Content-Type", pb)
        .header("Accept", "application/vnd.kubernetes.protobuf, application/json")
        .body(body)
        .send()
        .await
        .expect("protobuf SAR");
    assert_eq!(resp.status().as_u16(), 201, "protobuf SAR");
    let ct = resp.headers().get("content-type").map(|v| v.as_bytes().to_vec()).unwrap_or_default();
    assert_eq!(ct, pb.as_bytes(), "Content-Type");
    let bytes = resp.bytes().await.expect("the answer");
    let answer = kustos_apiserver::wire::protobuf::decode(&bytes).expect("a protobuf SubjectAccessReview");
    assert_eq!(answer["kind"], "SubjectAccessReview", "{answer}");
    assert_eq!(answer["spec"], json!({"resourceAttributes": {"verb": "list", "resource": "nodes"}, "user": "nobody"}));
    // `allowed: false` is the zero value: not on the wire, absent from the JSON form.
    assert_eq!(answer.get("status"), Some(&json!({})), "{answer}");
    // TokenReview{spec{token: garbage}}
    let mut spec = vec![0x0a, 7];
    spec.extend(b"garbage");
    let mut raw = vec![0x12, spec.len() as u8];
    raw.extend(&spec);
    let r = send(
        http.post(format!("{}/apis/authentication.k8s.io/v1/tokenreviews", s.url))
            .header("Content-Type", pb)
            .body(protobuf("authentication.k8s.io/v1", "TokenReview", &raw)),
    )
    .await;
    r.expect_code(201, "protobuf TokenReview");
    assert!(r.body["status"]["error"].is_string(), "{}", r.text);
    // A broken protobuf body is a 400.
    let r = send(
        http.post(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", s.url))
            .header("Content-Type", pb)
            .body(b"k8s\x00\x0a\xff".to_vec()),
    )
    .await;
    assert_status(&r, 400, Some("BadRequest"), "broken protobuf");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_the_review_kinds() {
    let s = shared();
    let out = s.kubectl_ok(&["api-resources", "--api-group=authorization.k8s.io", "-o", "wide"]);
    for (name, namespaced, kind) in [
        ("localsubjectaccessreviews", "true", "LocalSubjectAccessReview"),
        ("selfsubjectaccessreviews", "false", "SelfSubjectAccessReview"),
        ("selfsubjectrulesreviews", "false", "SelfSubjectRulesReview"),
        ("subjectaccessreviews", "false", "SubjectAccessReview"),
    ] {
        let row: Vec<&str> = out
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|r| r.first() == Some(&name))
            .unwrap_or_else(|| panic!("{name} missing:\n{out}"));
        assert_eq!(row, [name, "authorization.k8s.io/v1", namespaced, kind, "create"], "{out}");
    }
    let out = s.kubectl_ok(&["api-resources", "--api-group=authentication.k8s.io", "-o", "name"]);
    let names: Vec<&str> = out.lines().map(str::trim).collect();
    assert_eq!(names, ["selfsubjectreviews.authentication.k8s.io", "tokenreviews.authentication.k8s.io"], "{out}");
}
