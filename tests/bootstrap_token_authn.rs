//! Bootstrap-token authentication and impersonation against the real binary: Secrets
//! created with kubectl, bearer tokens and `Impersonate-*` headers sent over raw HTTPS, and
//! kubectl's `--as`/`--as-group`.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use common::{assert_status, issue_user, send, shared_apiserver, unique, Reply, Server};
use serde_json::{json, Value};

const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const SECRET_PART: &str = "0123456789abcdef";

/// A token id unique in this process: 6 characters of `[a-z0-9]`.
fn token_id() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    format!("b{:03}{:02}", std::process::id() % 1000, n % 100)
}

/// A bootstrap-token Secret for `id` (valid unless `edit` spoils it).
fn token_secret(id: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "stringData": {
            "token-id": id, "token-secret": SECRET_PART,
            "usage-bootstrap-authentication": "true", "expiration": "2099-01-01T00:00:00Z",
        },
    });
    edit(&mut s);
    s
}

fn apply(s: &Server, manifest: &Value) {
    let out = s.kubectl_with_stdin(&["apply", "-f", "-"], Some(&manifest.to_string()));
    assert!(out.status.success(), "kubectl apply {manifest}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn as_token(s: &Server, token: &str, method: reqwest::Method, path: &str) -> Reply {
    let mut req = s.anonymous().request(method.clone(), format!("{}{path}", s.url)).bearer_auth(token);
    if method == reqwest::Method::POST {
        req = req.json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}));
    }
    send(req).await
}

async fn whoami(s: &Server, token: &str) -> Reply {
    as_token(s, token, reqwest::Method::POST, SSR).await
}

fn groups(review: &Value) -> Vec<String> {
    review["status"]["userInfo"]["groups"]
        .as_array()
        .map(|g| g.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_bootstrap_token_authenticates() {
    let s = shared_apiserver();
    let id = token_id();
    apply(
        &s,
        &token_secret(&id, |m| {
            m["stringData"]["auth-extra-groups"] =
                json!("system:bootstrappers:worker,system:bootstrappers:kubeadm:default-node-token");
            m["stringData"]["description"] = json!("e2e");
        }),
    );
    let token = format!("{id}.{SECRET_PART}");
    let r = whoami(&s, &token).await;
    r.expect_code(201, "SelfSubjectReview with a bootstrap token");
    assert_eq!(r.body["status"]["userInfo"]["username"], format!("system:bootstrap:{id}"), "{}", r.text);
    assert_eq!(
        groups(&r.body),
        vec![
            "system:bootstrappers",
            "system:bootstrappers:kubeadm:default-node-token",
            "system:bootstrappers:worker",
            "system:authenticated"
        ]
    );

    // Authenticated, but no more rights than a bootstrapper: 403 (not 401) on secrets.
    let r = as_token(&s, &token, reqwest::Method::GET, "/api/v1/namespaces/kube-system/secrets").await;
    assert_status(&r, 403, Some("Forbidden"), "a bootstrap token listing secrets");
    assert_eq!(
        r.body["message"],
        format!(
            "secrets is forbidden: User \"system:bootstrap:{id}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
        )
    );

    // kubectl with the token in its kubeconfig agrees.
    let boot = common::token_user(&s, "boot", &token);
    let me = boot.kubectl_ok(&s, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert_eq!(me, format!("system:bootstrap:{id}"));

    // The Secret changes take effect at once: usage switched off → 401.
    apply(&s, &token_secret(&id, |m| m["stringData"]["usage-bootstrap-authentication"] = json!("false")));
    assert_status(&whoami(&s, &token).await, 401, Some("Unauthorized"), "usage switched off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_bootstrap_tokens_get_401() {
    let s = shared_apiserver();
    type Edit = Box<dyn FnOnce(&mut Value, &str)>;
    type Case = (&'static str, Edit, fn(&str) -> String);
    // (what, edit of the Secret for id, token to send given id)
    let cases: Vec<Case> = vec![
        ("in namespace default", Box::new(|m, _| m["metadata"]["namespace"] = json!("default")), good),
        ("type Opaque", Box::new(|m, _| m["type"] = json!("Opaque")), good),
        ("another name", Box::new(|m, id| m["metadata"]["name"] = json!(format!("token-{id}"))), good),
        (
            "name of another id",
            Box::new(|m, _| m["metadata"]["name"] = json!(format!("bootstrap-token-{}", token_id()))),
            good,
        ),
        ("token-id differs", Box::new(|m, _| m["stringData"]["token-id"] = json!("zzzzzz")), good),
        ("usage false", Box::new(|m, _| m["stringData"]["usage-bootstrap-authentication"] = json!("false")), good),
        ("usage True", Box::new(|m, _| m["stringData"]["usage-bootstrap-authentication"] = json!("True")), good),
        (
            "usage missing",
            Box::new(|m, _| {
                m["stringData"].as_object_mut().map(|d| d.remove("usage-bootstrap-authentication"));
            }),
            good,
        ),
        ("expired", Box::new(|m, _| m["stringData"]["expiration"] = json!("2020-01-01T00:00:00Z")), good),
        ("unparsable expiration", Box::new(|m, _| m["stringData"]["expiration"] = json!("someday")), good),
        ("foreign extra group", Box::new(|m, _| m["stringData"]["auth-extra-groups"] = json!("system:masters")), good),
        ("wrong secret", Box::new(|_, _| {}), |id| format!("{id}.0123456789abcdee")),
        ("uppercase token", Box::new(|_, _| {}), |id| format!("{}.{}", id.to_uppercase(), SECRET_PART.to_uppercase())),
        ("short secret", Box::new(|_, _| {}), |id| format!("{id}.0123456789")),
        ("short id", Box::new(|_, _| {}), |id| format!("{}.{SECRET_PART}", &id[..5])),
        ("no dot", Box::new(|_, _| {}), |id| format!("{id}{SECRET_PART}")),
    ];
    fn good(id: &str) -> String {
        format!("{id}.{SECRET_PART}")
    }
    for (what, edit, token) in cases {
        let id = token_id();
        apply(&s, &token_secret(&id, |m| edit(m, &id)));
        let token = token(&id);
        let r = whoami(&s, &token).await;
        assert_status(&r, 401, Some("Unauthorized"), what);
        assert!(!r.text.contains(SECRET_PART), "{what}: the reply never echoes the secret: {}", r.text);
        let r = as_token(&s, &token, reqwest::Method::GET, "/api/v1/namespaces").await;
        assert_status(&r, 401, Some("Unauthorized"), what);
    }

    // A Secret being deleted (held by a finalizer) no longer authenticates.
    let id = token_id();
    apply(&s, &token_secret(&id, |m| m["metadata"]["finalizers"] = json!(["kustos.test/hold"])));
    let token = good(&id);
    whoami(&s, &token).await.expect_code(201, "before deletion");
    let name = format!("bootstrap-token-{id}");
    s.kubectl_ok(&["delete", "secret", &name, "-n", "kube-system", "--wait=false"]);
    assert_status(&whoami(&s, &token).await, 401, Some("Unauthorized"), "being deleted");
    s.kubectl_ok(&[
        "patch",
        "secret",
        &name,
        "-n",
        "kube-system",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_authorization_headers_never_give_500() {
    let s = shared_apiserver();
    let id = token_id();
    apply(&s, &token_secret(&id, |_| {}));
    let mut values: Vec<Vec<u8>> = vec![
        b"Bearer \xff\xfe\xfd".to_vec(),
        [format!("Bearer {id}.").as_bytes(), b"\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f"]
            .concat(),
        [format!("Bearer {id}.{SECRET_PART}").as_bytes(), b"\xff"].concat(),
        format!("Bearer {id}.{SECRET_PART} extra").into_bytes(),
        "Bearer ábcdef.0123456789abcdef".as_bytes().to_vec(),
        b"Bearer ".to_vec(),
        b"Basic \xff\xfe".to_vec(),
        format!("bearer  {id}.{SECRET_PART}").into_bytes(),
    ];
    values.push(format!("Bearer {}", "a".repeat(8 * 1024)).into_bytes());
    for v in &values {
        let Ok(header) = reqwest::header::HeaderValue::from_bytes(v) else { continue };
        let r = send(s.anonymous().get(format!("{}/api/v1/namespaces", s.url)).header("Authorization", header)).await;
        let shown = String::from_utf8_lossy(&v[..v.len().min(48)]).into_owned();
        assert!(r.code < 500, "Authorization {shown:?}: {} {}", r.code, r.text);
        assert!(matches!(r.code, 401 | 403), "Authorization {shown:?}: {} {}", r.code, r.text);
    }
    // The scheme is case-insensitive.
    let r = send(
        s.anonymous()
            .post(format!("{}{SSR}", s.url))
            .header("Authorization", format!("bearer {id}.{SECRET_PART}"))
            .json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
    )
    .await;
    r.expect_code(201, "lower-case bearer scheme");
    send(s.anonymous().get(format!("{}/readyz", s.url))).await.expect_code(200, "still healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_token_auth_can_be_turned_off() {
    let s = Server::apiserver_with(&["--enable-bootstrap-token-auth=false"]);
    let id = token_id();
    apply(&s, &token_secret(&id, |_| {}));
    assert_status(&whoami(&s, &format!("{id}.{SECRET_PART}")).await, 401, Some("Unauthorized"), "turned off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_is_checked_and_applied() {
    let s = shared_apiserver();
    let ns = unique("imp");
    s.kubectl_ok(&["create", "namespace", &ns]);

    // The admin (system:masters) may impersonate anyone; jane in devs may not list configmaps.
    let out = s.kubectl(&["get", "configmaps", "-n", &ns, "--as=jane", "--as-group=devs"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "jane may not list configmaps: {err}");
    assert!(err.contains("User \"jane\" cannot list resource \"configmaps\""), "{err}");

    // Who the impersonated request is: user, uid, groups, extras.
    let admin = s.http();
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let r = send(
        admin
            .post(format!("{}{SSR}", s.url))
            .header("Impersonate-User", "jane")
            .header("Impersonate-Group", "devs")
            .header("Impersonate-Group", "ops")
            .header("Impersonate-Uid", "u-1")
            .header("Impersonate-Extra-Example.com%2FScopes", "view")
            .header("Impersonate-Extra-Example.com%2FScopes", "edit")
            .json(&review),
    )
    .await;
    r.expect_code(201, "impersonated SelfSubjectReview");
    let u = &r.body["status"]["userInfo"];
    assert_eq!(u["username"], "jane", "{}", r.text);
    assert_eq!(u["uid"], "u-1", "{}", r.text);
    assert_eq!(groups(&r.body), vec!["devs", "ops", "system:authenticated"]);
    assert_eq!(u["extra"], json!({"example.com/scopes": ["view", "edit"]}), "{}", r.text);

    // A service account gets its groups.
    let r = send(
        admin
            .post(format!("{}{SSR}", s.url))
            .header("Impersonate-User", format!("system:serviceaccount:{ns}:robot"))
            .json(&review),
    )
    .await;
    r.expect_code(201, "impersonating a service account");
    assert_eq!(
        groups(&r.body),
        vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into()
        ]
    );

    // A name that only looks like a service account's is an ordinary user name.
    let r = send(
        admin
            .post(format!("{}{SSR}", s.url))
            .header("Impersonate-User", format!("system:serviceaccount:{ns}:Robot"))
            .json(&review),
    )
    .await;
    r.expect_code(201, "impersonating an SA-like user name");
    assert_eq!(groups(&r.body), vec!["system:authenticated"], "{}", r.text);

    // system:anonymous stays unauthenticated: not in system:authenticated, so system:basic-user
    // (SelfSubjectReview) does not apply.
    let r =
        send(admin.post(format!("{}{SSR}", s.url)).header("Impersonate-User", "system:anonymous").json(&review)).await;
    assert_status(&r, 403, Some("Forbidden"), "impersonated system:anonymous asking who it is");
    assert_eq!(
        r.body["message"],
        "selfsubjectreviews.authentication.k8s.io is forbidden: User \"system:anonymous\" cannot create resource \"selfsubjectreviews\" in API group \"authentication.k8s.io\" at the cluster scope",
    );

    // Anything but the user needs Impersonate-User: 400 with upstream's message.
    let cms = format!("{}/api/v1/namespaces/{ns}/configmaps", s.url);
    let r = send(admin.get(&cms).header("Impersonate-Group", "devs")).await;
    assert_status(&r, 400, Some("BadRequest"), "Impersonate-Group without Impersonate-User");
    assert_eq!(r.body["message"], "requested [{Group  devs    }] without impersonating a user");
    let r = send(admin.get(&cms).header("Impersonate-User", "").header("Impersonate-Uid", "u-1")).await;
    assert_status(&r, 400, Some("BadRequest"), "Impersonate-Uid with an empty user");
    // Bytes that are not UTF-8: 400, never a crash.
    let bad =
        reqwest::header::HeaderValue::from_bytes(b"j\xffne").unwrap_or(reqwest::header::HeaderValue::from_static("x"));
    let r = send(admin.get(&cms).header("Impersonate-User", bad)).await;
    assert_status(&r, 400, Some("BadRequest"), "non-UTF-8 Impersonate-User");

    // A user without the impersonate verb: 403 naming what was asked.
    let bob = issue_user(&s, "bob", &["devs"]);
    let bob_http = s.http_with_identity(&bob.identity);
    let r = send(bob_http.get(&cms).header("Impersonate-User", "jane")).await;
    assert_status(&r, 403, Some("Forbidden"), "bob impersonating jane");
    assert_eq!(
        r.body["message"],
        "users \"jane\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    assert_eq!(r.body["details"]["kind"], "users", "{}", r.text);
    assert_eq!(r.body["details"]["name"], "jane", "{}", r.text);
    let r = send(bob_http.get(&cms).header("Impersonate-User", format!("system:serviceaccount:{ns}:robot"))).await;
    assert_status(&r, 403, Some("Forbidden"), "bob impersonating a service account");
    assert_eq!(
        r.body["message"],
        format!("serviceaccounts \"robot\" is forbidden: User \"bob\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"{ns}\"")
    );

    let r = send(bob_http.get(&cms).header("Impersonate-User", format!("system:serviceaccount:{ns}:Robot"))).await;
    assert_status(&r, 403, Some("Forbidden"), "bob impersonating an SA-like user name");
    assert_eq!(
        r.body["message"],
        format!("users \"system:serviceaccount:{ns}:Robot\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope")
    );

    // With a grant for users/jane only, bob is jane — and still may not add a group or an extra.
    let role = format!("{ns}-impersonate-jane");
    apply(
        &s,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["jane"]}]}),
    );
    s.kubectl_ok(&["create", "clusterrolebinding", &role, &format!("--clusterrole={role}"), "--user=bob"]);
    let r = send(bob_http.post(format!("{}{SSR}", s.url)).header("Impersonate-User", "jane").json(&review)).await;
    r.expect_code(201, "bob as jane");
    assert_eq!(r.body["status"]["userInfo"]["username"], "jane");
    assert_eq!(groups(&r.body), vec!["system:authenticated"], "bob's own groups are not kept");
    let r = send(bob_http.get(&cms).header("Impersonate-User", "jane").header("Impersonate-Group", "admins")).await;
    assert_status(&r, 403, Some("Forbidden"), "bob adding a group");
    assert_eq!(
        r.body["message"],
        "groups \"admins\" is forbidden: User \"bob\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"
    );
    let r =
        send(bob_http.get(&cms).header("Impersonate-User", "jane").header("Impersonate-Extra-Scopes", "view")).await;
    assert_status(&r, 403, Some("Forbidden"), "bob adding an extra");
    assert!(
        r.body["message"].as_str().is_some_and(|m| m.starts_with(
            "userextras.authentication.k8s.io \"view\" is forbidden: User \"bob\" cannot impersonate resource \"userextras/scopes\""
        )),
        "{}",
        r.text
    );
    let r = send(bob_http.get(&cms).header("Impersonate-User", "alice")).await;
    assert_status(&r, 403, Some("Forbidden"), "bob impersonating alice");
    // The impersonated jane is then authorized as herself.
    let r = send(bob_http.get(&cms).header("Impersonate-User", "jane")).await;
    assert_status(&r, 403, Some("Forbidden"), "jane listing configmaps");
    assert!(r.body["message"].as_str().is_some_and(|m| m.contains("User \"jane\" cannot list")), "{}", r.text);

    // A bootstrap token may not impersonate either.
    let id = token_id();
    apply(&s, &token_secret(&id, |_| {}));
    let r = send(
        s.anonymous().get(&cms).bearer_auth(format!("{id}.{SECRET_PART}")).header("Impersonate-User", "system:admin"),
    )
    .await;
    assert_status(&r, 403, Some("Forbidden"), "a bootstrapper impersonating");
    assert!(
        r.body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("User \"system:bootstrap:{id}\" cannot impersonate"))),
        "{}",
        r.text
    );
}
