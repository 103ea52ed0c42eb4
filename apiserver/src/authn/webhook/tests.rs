use super::*;
use k8s_openapi::api::authentication::v1::UserInfo as ReviewUser;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn versions_and_the_review_sent() {
    assert_eq!(Version::parse("v1"), Ok(Version::V1));
    assert_eq!(Version::parse("v1beta1"), Ok(Version::V1beta1));
    assert_eq!(
        Version::parse("v2"),
        Err("unsupported authentication webhook version \"v2\", supported versions are \"v1\", \"v1beta1\"".into())
    );
    let v: serde_json::Value = serde_json::from_slice(&review_body(Version::V1, "tok", &s(&["api"]))).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null}, "spec": {"token": "tok", "audiences": ["api"]},
            "status": {"user": {}}})
    );
    let v: serde_json::Value = serde_json::from_slice(&review_body(Version::V1beta1, "tok", &[])).unwrap();
    assert_eq!(v["apiVersion"], "authentication.k8s.io/v1beta1");
    assert!(v["spec"].get("audiences").is_none(), "no audiences: none sent, as upstream's omitempty");
}

#[test]
fn answers_table() {
    let ok = br#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{"authenticated":true,"user":{"username":"jane"}}}"#;
    let bare = br#"{"status":{"authenticated":false}}"#;
    // version, code, body, Ok(authenticated) or Err(part of the message)
    type Case<'a> = (Version, u16, &'a [u8], Result<Option<bool>, &'a str>);
    let cases: &[Case] = &[
        (Version::V1, 200, ok, Ok(Some(true))),
        (Version::V1, 201, bare, Ok(Some(false))),
        (Version::V1beta1, 200, bare, Ok(Some(false))),
        (Version::V1beta1, 200, ok, Err("answered authentication.k8s.io/v1, not authentication.k8s.io/v1beta1")),
        (Version::V1, 200, br#"{"kind":"Status"}"#, Err("answered a Status, not a TokenReview")),
        (Version::V1, 200, b"{}", Ok(None)),
        (Version::V1, 200, b"<html>", Err("not a TokenReview")),
        (Version::V1, 200, br#"{"status":{"authenticated":"yes"}}"#, Err("not a TokenReview")),
        (Version::V1, 403, b"go away\n", Err("the webhook answered HTTP 403: go away")),
        (Version::V1, 500, b"", Err("HTTP 500")),
    ];
    for (version, code, body, want) in cases {
        let got = read_answer(*version, *code, body).map(|st| st.authenticated);
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, *w, "{}", String::from_utf8_lossy(body)),
            (Err(e), Err(part)) => assert!(e.contains(part), "{e}"),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", String::from_utf8_lossy(body)),
        }
    }
}

fn status(authenticated: bool, audiences: &[&str], error: &str) -> TokenReviewStatus {
    TokenReviewStatus {
        authenticated: Some(authenticated),
        audiences: (!audiences.is_empty()).then(|| s(audiences)),
        error: (!error.is_empty()).then(|| error.to_string()),
        user: Some(ReviewUser {
            username: Some("jane".into()),
            uid: Some("42".into()),
            groups: Some(s(&["devs"])),
            extra: Some([("scopes".to_string(), s(&["a", "b"]))].into()),
        }),
    }
}

#[test]
fn decisions_table() {
    let jane = UserInfo {
        name: "jane".into(),
        uid: "42".into(),
        groups: s(&["devs"]),
        extra: [("scopes".to_string(), s(&["a", "b"]))].into(),
    };
    let implicit = s(&["https://kubernetes.default.svc", "api"]);
    let auth = |a: &[&str]| Outcome::Authenticated(jane.clone(), s(a));
    // name, status, wanted audiences, outcome
    let cases: Vec<(&str, TokenReviewStatus, Vec<String>, Outcome)> = vec![
        ("no audience check", status(true, &[], ""), vec![], auth(&[])),
        ("no audiences answered: the apiserver's", status(true, &[], ""), s(&["api"]), auth(&["api"])),
        ("answered audiences intersect", status(true, &["api", "x"], ""), s(&["api", "y"]), auth(&["api"])),
        ("answered audiences miss", status(true, &["x"], ""), s(&["api"]), Outcome::Unauthenticated),
        ("wanted audience not the apiserver's", status(true, &[], ""), s(&["other"]), Outcome::Unauthenticated),
        ("not authenticated", status(false, &[], ""), s(&["api"]), Outcome::Unauthenticated),
        (
            "refused with a reason",
            status(false, &[], "token expired"),
            vec![],
            Outcome::Refused("token expired".into()),
        ),
        (
            "audience mismatch wins over the reason",
            status(false, &["x"], "token expired"),
            s(&["api"]),
            Outcome::Unauthenticated,
        ),
        ("no status at all", TokenReviewStatus::default(), vec![], Outcome::Unauthenticated),
    ];
    for (name, st, wanted, want) in cases {
        assert_eq!(decide(&st, &wanted, &implicit), want, "{name}");
    }
}

#[test]
fn retries_as_upstream() {
    // code, Retry-After, retried
    let cases = [(429, false, true), (500, false, true), (504, false, true), (503, true, true), (503, false, false)];
    for (code, after, want) in cases {
        assert_eq!(retried(code, after), want, "{code} {after}");
    }
    assert!(!retried(401, false) && !retried(200, true));
    for n in 1..BACKOFF_STEPS {
        let d = backoff(n).as_secs_f64();
        let base = 0.5 * 1.5f64.powi(n as i32 - 1);
        assert!(d >= base && d <= base * 1.2 + 1e-9, "attempt {n}: {d}");
    }
}

/// A webhook on plain HTTP: `good` is jane, `bad` is refused, `reason` is refused with an
/// error, `flaky` fails with 500 once then is jane, `slow` never answers; every hit counted.
async fn webhook(version: &'static str) -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let flaky = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/authenticate",
        axum::routing::post(move |headers: http::HeaderMap, body: axum::body::Bytes| {
            let (hits, flaky) = (counter.clone(), flaky.clone());
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let api_version = format!("authentication.k8s.io/{version}");
                if review["apiVersion"] != api_version.as_str()
                    || headers.get("authorization").map(|v| v.as_bytes()) != Some(b"Bearer hook-secret")
                {
                    return (http::StatusCode::BAD_REQUEST, "wrong version or credentials".to_string());
                }
                let token = review["spec"]["token"].as_str().unwrap_or_default().to_string();
                let jane = serde_json::json!({"authenticated": true, "user": {"username": "jane", "groups": ["devs"]}});
                let st = match token.as_str() {
                    "good" => jane,
                    "flaky" if flaky.fetch_add(1, Ordering::SeqCst) == 0 => {
                        return (http::StatusCode::INTERNAL_SERVER_ERROR, "try again".into())
                    }
                    "flaky" => jane,
                    "reason" => serde_json::json!({"authenticated": false, "error": "revoked"}),
                    "slow" => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        serde_json::json!({})
                    }
                    _ => serde_json::json!({"authenticated": false}),
                };
                let answer = serde_json::json!({"apiVersion": api_version, "kind": "TokenReview", "status": st});
                (http::StatusCode::OK, answer.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/authenticate"), hits, task)
}

fn authenticator(url: &str, version: Version) -> WebhookAuthenticator {
    let text = format!(
        "clusters: [{{name: hook, cluster: {{server: '{url}'}}}}]\nusers: [{{name: api, user: {{token: hook-secret}}}}]\n\
         contexts: [{{name: w, context: {{cluster: hook, user: api}}}}]\ncurrent-context: w\n"
    );
    let target = kubeconfig::parse(&text, std::path::Path::new("/"), &kubeconfig::Disk).unwrap();
    WebhookAuthenticator::new(target, version, Duration::from_secs(60))
        .with_implicit_audiences(s(&["api"]))
        .with_timeout(Duration::from_secs(20))
}

#[tokio::test]
async fn reviews_are_cached_and_retried_as_upstream() {
    for (name, version) in [("v1", Version::V1), ("v1beta1", Version::V1beta1)] {
        let (url, hits, task) = webhook(name).await;
        let w = authenticator(&url, version);
        let api = s(&["api"]);
        for _ in 0..3 {
            match w.authenticate_token("good", &api).await {
                TokenResult::Authenticated { user, audiences } => {
                    assert_eq!(
                        (user.name.as_str(), user.groups.clone(), audiences),
                        ("jane", s(&["devs"]), api.clone())
                    )
                }
                other => panic!("{name}: good: {other:?}"),
            }
            assert_eq!(w.authenticate_token("bad", &api).await, TokenResult::NotMine, "{name}");
        }
        assert_eq!(hits.load(Ordering::SeqCst), 2, "{name}: one review per token, both answers remembered");
        // Another audience is another question.
        assert_eq!(w.authenticate_token("good", &s(&["elsewhere"])).await, TokenResult::NotMine, "{name}");
        assert_eq!(hits.load(Ordering::SeqCst), 3, "{name}");
        // A refusal with a reason is not remembered.
        for _ in 0..2 {
            assert_eq!(w.authenticate_token("reason", &api).await, TokenResult::Invalid("webhook: revoked".into()));
        }
        assert_eq!(hits.load(Ordering::SeqCst), 5, "{name}");
        // A 500 is retried.
        assert!(matches!(w.authenticate_token("flaky", &api).await, TokenResult::Authenticated { .. }), "{name}");
        assert_eq!(hits.load(Ordering::SeqCst), 7, "{name}: the 500 and the retry");
        task.abort();
    }
}

#[tokio::test]
async fn errors_are_not_users_and_not_remembered() {
    let (url, hits, task) = webhook("v1").await;
    // The webhook checks the version: a v1beta1 client gets 400, an error.
    let wrong = authenticator(&url, Version::V1beta1);
    for _ in 0..2 {
        match wrong.authenticate_token("good", &[]).await {
            TokenResult::Invalid(e) => assert!(e.contains("HTTP 400") && !e.contains("good"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2, "errors are asked again");
    // A webhook that does not answer: an error once the timeout is up.
    let slow = authenticator(&url, Version::V1).with_timeout(Duration::from_millis(300));
    match slow.authenticate_token("slow", &[]).await {
        TokenResult::Invalid(e) => assert!(e.contains("no answer from the webhook"), "{e}"),
        other => panic!("{other:?}"),
    }
    // Nobody listening.
    task.abort();
    let _ = task.await;
    let gone = authenticator(&url, Version::V1);
    assert!(matches!(gone.authenticate_token("good", &[]).await, TokenResult::Invalid(_)));
}

#[tokio::test]
async fn large_answers_are_refused() {
    let app = axum::Router::new().route(
        "/authenticate",
        axum::routing::post(|| async { format!("{{\"status\":{{\"error\":\"{}\"}}}}", "x".repeat(MAX_ANSWER)) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let w = authenticator(&format!("http://{addr}/authenticate"), Version::V1);
    match w.authenticate_token("good", &[]).await {
        TokenResult::Invalid(e) => assert!(e.contains(&format!("at most {MAX_ANSWER} bytes")), "{e}"),
        other => panic!("{other:?}"),
    }
    task.abort();
}
