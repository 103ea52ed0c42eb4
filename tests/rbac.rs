//! RBAC end to end: the real binary, kubectl as the admin and as users holding client
//! certificates issued from the cluster CA (`DIR/pki/ca.{crt,key}`).

mod common;

use common::{issue_user, send, shared, unique, Server, User};
use serde_json::{json, Value};

fn apply(s: &Server, manifest: &Value) {
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string()));
    assert!(out.status.success(), "kubectl apply {manifest}:\n{}", String::from_utf8_lossy(&out.stderr));
}

fn namespace(s: &Server, prefix: &str) -> String {
    let ns = unique(prefix);
    s.kubectl_ok(&["create", "namespace", &ns]);
    ns
}

fn role(ns: &str, name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": {"name": name, "namespace": ns}, "rules": rules})
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
}

fn role_binding(ns: &str, name: &str, kind: &str, role: &str, user: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": name, "namespace": ns},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
}

fn assert_contains(haystack: &str, needle: &str) {
    assert!(haystack.contains(needle), "expected {needle:?} in:\n{haystack}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_grants_exactly_its_rules_in_its_namespace() {
    let s = shared();
    let ns = namespace(&s, "rbac-role");
    let other = namespace(&s, "rbac-other");
    let name = unique("alice");
    apply(
        &s,
        &role(&ns, "cm-reader", json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}])),
    );
    apply(&s, &role_binding(&ns, "alice-reads", "Role", "cm-reader", &name));
    s.kubectl_ok(&["create", "configmap", "c1", "-n", &ns, "--from-literal=a=b"]);
    let alice = issue_user(&s, &name, &["team"]);

    let out = alice.kubectl_ok(&s, &["get", "configmaps", "-n", &ns, "-o", "name"]);
    assert_contains(&out, "configmap/c1");
    alice.kubectl_ok(&s, &["get", "configmap", "c1", "-n", &ns]);

    let err = alice.kubectl_err(&s, &["get", "secrets", "-n", &ns]);
    assert_contains(
        &err,
        &format!(
            "Error from server (Forbidden): secrets is forbidden: User \"{name}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"{ns}\""
        ),
    );
    let err = alice.kubectl_err(&s, &["delete", "configmap", "c1", "-n", &ns]);
    assert_contains(
        &err,
        &format!(
            "configmaps \"c1\" is forbidden: User \"{name}\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"{ns}\""
        ),
    );
    let err = alice.kubectl_err(&s, &["get", "configmaps", "-n", &other]);
    assert_contains(&err, &format!("in the namespace \"{other}\""));

    // The raw reply is a Forbidden Status naming the resource.
    let http = s.http_with_identity(&alice.identity);
    let r = send(http.get(format!("{}/api/v1/namespaces/{ns}/secrets/x", s.url))).await;
    common::assert_status(&r, 403, Some("Forbidden"), "get a secret");
    assert_eq!(r.body["details"], json!({"name": "x", "kind": "secrets"}), "{}", r.text);

    // Removing the binding takes the access away at once.
    s.kubectl_ok(&["delete", "rolebinding", "alice-reads", "-n", &ns]);
    alice.kubectl_err(&s, &["get", "configmaps", "-n", &ns]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolebinding_to_a_clusterrole_grants_only_in_its_namespace() {
    let s = shared();
    let ns = namespace(&s, "rbac-dev");
    let other = namespace(&s, "rbac-prod");
    let name = unique("dave");
    let reader = unique("secret-reader");
    apply(
        &s,
        &cluster_role(
            &reader,
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]),
        ),
    );
    apply(&s, &role_binding(&ns, "read-secrets", "ClusterRole", &reader, &name));
    let dave = issue_user(&s, &name, &[]);
    dave.kubectl_ok(&s, &["get", "secrets", "-n", &ns]);
    let err = dave.kubectl_err(&s, &["get", "secrets", "-n", &other]);
    assert_contains(
        &err,
        &format!("User \"{name}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"{other}\""),
    );
    let err = dave.kubectl_err(&s, &["get", "secrets", "--all-namespaces"]);
    assert_contains(
        &err,
        &format!("User \"{name}\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_names_limit_a_rule_to_named_objects() {
    let s = shared();
    let ns = namespace(&s, "rbac-names");
    let name = unique("erin");
    s.kubectl_ok(&["create", "configmap", "allowed", "-n", &ns]);
    s.kubectl_ok(&["create", "configmap", "other", "-n", &ns]);
    apply(
        &s,
        &role(
            &ns,
            "one-cm",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["allowed"], "verbs": ["get"]}]),
        ),
    );
    apply(&s, &role_binding(&ns, "one-cm", "Role", "one-cm", &name));
    let erin = issue_user(&s, &name, &[]);
    erin.kubectl_ok(&s, &["get", "configmap", "allowed", "-n", &ns]);
    let err = erin.kubectl_err(&s, &["get", "configmap", "other", "-n", &ns]);
    assert_contains(
        &err,
        &format!("configmaps \"other\" is forbidden: User \"{name}\" cannot get resource \"configmaps\""),
    );
    let err = erin.kubectl_err(&s, &["get", "configmaps", "-n", &ns]);
    assert_contains(&err, "cannot list resource \"configmaps\"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_role_needs_its_permissions_or_escalate() {
    let s = shared();
    let ns = namespace(&s, "rbac-esc");
    let name = unique("carol");
    apply(
        &s,
        &role(
            &ns,
            "role-writer",
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["create", "get", "list"]},
                                                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
        ),
    );
    apply(&s, &role_binding(&ns, "carol-writes", "Role", "role-writer", &name));
    let carol = issue_user(&s, &name, &["devs"]);

    // What carol holds she may grant.
    carol.kubectl_ok(&s, &["create", "role", "cm-get", "--verb=get", "--resource=configmaps", "-n", &ns]);
    // What she does not hold she may not.
    let err =
        carol.kubectl_err(&s, &["create", "role", "secret-reader", "--verb=get,list", "--resource=secrets", "-n", &ns]);
    assert_contains(
        &err,
        &format!(
            "Error from server (Forbidden): roles.rbac.authorization.k8s.io \"secret-reader\" is forbidden: user \"{name}\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}}"
        ),
    );
    // With `escalate` on roles she may.
    apply(
        &s,
        &role(
            &ns,
            "escalator",
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}]),
        ),
    );
    apply(&s, &role_binding(&ns, "carol-escalates", "Role", "escalator", &name));
    carol.kubectl_ok(&s, &["create", "role", "secret-reader", "--verb=get,list", "--resource=secrets", "-n", &ns]);
    let got = s.kubectl_ok(&["get", "role", "secret-reader", "-n", &ns, "-o", "jsonpath={.rules[0].resources}"]);
    assert_contains(&got, "secrets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_on_a_named_role_allows_binding_only_that_role() {
    let s = shared();
    let ns = namespace(&s, "rbac-bind");
    let name = unique("bob");
    // `edit` gets its rules by aggregation; make sure it grants something bob lacks.
    let edit = s.kubectl_ok(&["get", "clusterrole", "edit", "-o", "json"]);
    let edit: Value = serde_json::from_str(&edit).expect("clusterrole edit as JSON");
    if edit["rules"].as_array().is_none_or(|r| r.is_empty()) {
        s.kubectl_ok(&["patch", "clusterrole", "edit", "--type=merge", "-p",
            r#"{"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list","watch","create","update","patch","delete"]}]}"#]);
    }
    let grantor = unique("view-grantor");
    apply(
        &s,
        &cluster_role(
            &grantor,
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["view"], "verbs": ["bind"]}]),
        ),
    );
    apply(
        &s,
        &role(
            &ns,
            "rb-writer",
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": ["create", "get"]}]),
        ),
    );
    apply(&s, &role_binding(&ns, "bob-writes", "Role", "rb-writer", &name));
    apply(&s, &role_binding(&ns, "bob-grants", "ClusterRole", &grantor, &name));
    let bob = issue_user(&s, &name, &[]);
    bob.kubectl_ok(&s, &["create", "rolebinding", "viewers", "--clusterrole=view", "--user=someone", "-n", &ns]);
    let err =
        bob.kubectl_err(&s, &["create", "rolebinding", "editors", "--clusterrole=edit", "--user=someone", "-n", &ns]);
    assert_contains(&err, &format!("rolebindings.rbac.authorization.k8s.io \"editors\" is forbidden: user \"{name}\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"));
    let err = bob.kubectl_err(
        &s,
        &["create", "rolebinding", "admins", "--clusterrole=cluster-admin", "--user=someone", "-n", &ns],
    );
    assert_contains(&err, "is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_a_binding_role_ref_is_invalid() {
    let s = shared();
    let ns = namespace(&s, "rbac-ref");
    s.kubectl_ok(&["create", "rolebinding", "b", "--clusterrole=view", "--user=u", "-n", &ns]);
    let url = format!("{}/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/b", s.url);
    let r = send(
        s.http()
            .patch(&url)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"roleRef":{"name":"edit"}}"#),
    )
    .await;
    common::assert_status(&r, 422, Some("Invalid"), "changing roleRef");
    assert_contains(r.body["message"].as_str().unwrap_or(""), "cannot change roleRef");
    // Subjects may change.
    let r = send(
        s.http()
            .patch(&url)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"v"}]}"#),
    )
    .await;
    r.expect_code(200, "changing subjects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_policy_is_there() {
    let s = shared();
    let names = s.kubectl_ok(&["get", "clusterroles", "-l", "kubernetes.io/bootstrapping=rbac-defaults", "-o", "name"]);
    for want in ["cluster-admin", "system:discovery", "system:public-info-viewer", "view", "edit"] {
        assert!(
            names.lines().any(|l| l == format!("clusterrole.rbac.authorization.k8s.io/{want}")),
            "{want} in:\n{names}"
        );
    }
    let crb = s.kubectl_ok(&["get", "clusterrolebinding", "cluster-admin", "-o", "json"]);
    let crb: Value = serde_json::from_str(&crb).expect("JSON");
    assert_eq!(crb["metadata"]["labels"]["kubernetes.io/bootstrapping"], "rbac-defaults");
    assert_eq!(crb["roleRef"]["name"], "cluster-admin");
    assert_eq!(
        crb["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}])
    );
    let piv =
        s.kubectl_ok(&["get", "clusterrolebinding", "system:public-info-viewer", "-o", "jsonpath={.subjects[*].name}"]);
    assert_eq!(piv.split_whitespace().collect::<Vec<_>>(), ["system:authenticated", "system:unauthenticated"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_sees_version_and_health_only() {
    let s = shared();
    let anon = s.anonymous();
    for path in ["/version", "/healthz", "/livez", "/readyz"] {
        send(anon.get(format!("{}{path}", s.url))).await.expect_code(200, path);
    }
    let r = send(anon.get(format!("{}/api", s.url))).await;
    common::assert_status(&r, 403, Some("Forbidden"), "anonymous GET /api");
    assert_eq!(r.body["message"], "forbidden: User \"system:anonymous\" cannot get path \"/api\"");
    let u = issue_user(&s, &unique("frank"), &[]);
    let http = s.http_with_identity(&u.identity);
    for path in ["/api", "/apis", "/api/v1", "/version"] {
        send(http.get(format!("{}{path}", s.url))).await.expect_code(200, path);
    }
    let r = send(http.get(format!("{}/api/v1/namespaces", s.url))).await;
    common::assert_status(&r, 403, Some("Forbidden"), "authenticated list namespaces");
}

/// GET /api as a user of `system:authenticated` only (granted by system:discovery).
async fn discovery_code(s: &Server, u: &User) -> u16 {
    send(s.http_with_identity(&u.identity).get(format!("{}/api", s.url))).await.code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_roles_are_reconciled_at_start_unless_opted_out() {
    let mut s = Server::start();
    let u = issue_user(&s, "grace", &[]);
    assert_eq!(discovery_code(&s, &u).await, 200);

    // Drop every rule of system:discovery: /api is forbidden now; a restart brings it back.
    s.kubectl_ok(&["patch", "clusterrole", "system:discovery", "--type=merge", "-p", r#"{"rules":[]}"#]);
    assert_eq!(discovery_code(&s, &u).await, 403);
    s.restart();
    assert_eq!(discovery_code(&s, &u).await, 200, "rules restored at start:\n{}", s.stderr_tail());
    let urls = s.kubectl_ok(&["get", "clusterrole", "system:discovery", "-o", "jsonpath={.rules[*].nonResourceURLs}"]);
    assert_contains(&urls, "/api");

    // A deleted default binding is recreated, too.
    s.kubectl_ok(&["delete", "clusterrolebinding", "system:discovery"]);
    assert_eq!(discovery_code(&s, &u).await, 403);
    s.restart();
    assert_eq!(discovery_code(&s, &u).await, 200);

    // Opted out: left as it is.
    s.kubectl_ok(&[
        "annotate",
        "--overwrite",
        "clusterrole",
        "system:discovery",
        "rbac.authorization.kubernetes.io/autoupdate=false",
    ]);
    s.kubectl_ok(&["patch", "clusterrole", "system:discovery", "--type=merge", "-p", r#"{"rules":[]}"#]);
    s.restart();
    assert_eq!(discovery_code(&s, &u).await, 403);
    let rules = s.kubectl_ok(&["get", "clusterrole", "system:discovery", "-o", "jsonpath={.rules}"]);
    assert!(rules.trim().is_empty() || rules.trim() == "[]", "rules stay empty: {rules}");
}
