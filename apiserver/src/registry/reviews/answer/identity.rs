//! The reviews of `authentication.k8s.io/v1`, after upstream's
//! `pkg/registry/authentication/{tokenreview,selfsubjectreview}`:
//!
//! - TokenReview: is `spec.token` valid for `spec.audiences` (empty = the apiserver's own)?
//!   The answer keeps the spec as sent and fills `status.authenticated`, `status.user`
//!   (with `system:authenticated`, as on requests), `status.audiences` (the audiences the
//!   token is valid for among those asked) or `status.error`. The token is never logged.
//! - SelfSubjectReview: who is the requester? A fresh object with `status.userInfo` and the
//!   current time as `metadata.creationTimestamp`.

use chrono::{DateTime, Utc};
use k8s_openapi::api::authentication::v1 as authnv1;
use serde_json::{json, Map, Value};

use super::{metadata_of, omit_empty, response_metadata, typed, user_info_json, Env};
use crate::authn::{TokenResult, UserInfo};
use crate::error::ApiError;

/// What a TokenReview concluded, before rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOutcome {
    Authenticated { user: UserInfo, audiences: Vec<String> },
    Failed(String),
}

/// Turn the authenticators' answer into the review's: an authenticated token must be valid for
/// at least one of the audiences asked (else the authenticator misbehaved: 500, as upstream).
pub fn token_outcome(result: TokenResult, audiences: &[String]) -> Result<TokenOutcome, ApiError> {
    match result {
        TokenResult::Authenticated { user, audiences: valid_for } => {
            if !audiences.is_empty() && !valid_for.iter().any(|a| audiences.contains(a)) {
                tracing::error!(want = ?audiences, got = ?valid_for, "token review: authenticator returned audiences not asked for");
                return Err(ApiError::internal("error validating audiences"));
            }
            Ok(TokenOutcome::Authenticated { user, audiences: valid_for })
        }
        TokenResult::Invalid(reason) => Ok(TokenOutcome::Failed(reason)),
        TokenResult::NotMine => Ok(TokenOutcome::Failed("invalid bearer token".into())),
    }
}

/// `TokenReviewStatus` (an unauthenticated status still has an empty `user`, as Go renders it).
pub fn token_status(outcome: &TokenOutcome) -> Value {
    match outcome {
        TokenOutcome::Authenticated { user, audiences } => {
            let mut m = Map::new();
            m.insert("authenticated".into(), json!(true));
            m.insert("user".into(), user_info_json(user));
            if !audiences.is_empty() {
                m.insert("audiences".into(), json!(audiences));
            }
            Value::Object(m)
        }
        TokenOutcome::Failed(error) => {
            let mut m = Map::new();
            m.insert("user".into(), json!({}));
            if !error.is_empty() {
                m.insert("error".into(), json!(error));
            }
            Value::Object(m)
        }
    }
}

/// POST `tokenreviews`.
pub async fn token_review(env: &Env<'_>, obj: &Value) -> Result<Value, ApiError> {
    let review: authnv1::TokenReview = typed("TokenReview", obj)?;
    let token = review.spec.token.as_str();
    if token.is_empty() {
        return Err(ApiError::BadRequest("token is required for TokenReview in authentication".into()));
    }
    let asked = review.spec.audiences.clone().unwrap_or_default();
    let audiences = if asked.is_empty() { env.authn.api_audiences().to_vec() } else { asked };
    let result = env.authn.authenticate_token(token, &audiences).await;
    let outcome = token_outcome(result, &audiences)?;
    let mut spec = serde_json::to_value(&review.spec).unwrap_or_else(|_| json!({}));
    omit_empty(&mut spec, &[], &[]);
    Ok(json!({
        "metadata": response_metadata(&metadata_of(obj)),
        "spec": spec,
        "status": token_status(&outcome),
    }))
}

/// POST `selfsubjectreviews`.
pub fn self_subject_review(requester: &UserInfo, now: DateTime<Utc>) -> Value {
    json!({
        "metadata": {"creationTimestamp": now.format("%Y-%m-%dT%H:%M:%SZ").to_string()},
        "status": {"userInfo": user_info_json(requester)},
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{compute, Env, AUTHENTICATION_GROUP};
    use super::*;
    use crate::authz::Authorizer;
    use crate::registry::Registry;

    async fn run(resource: &str, requester: &UserInfo, obj: Value) -> Result<Value, ApiError> {
        let reg = Registry::builtin();
        let def = reg.find(AUTHENTICATION_GROUP, "v1", resource).unwrap();
        let authn = chain();
        let authz: &dyn Authorizer = &FakeAuthorizer;
        let now = DateTime::parse_from_rfc3339("2024-05-06T07:08:09Z").unwrap().with_timezone(&Utc);
        compute(def, &Env { authz, authn: &authn, user: requester, now }, obj).await
    }

    #[tokio::test]
    async fn token_reviews() {
        let anyone = user("system:anonymous", &["system:unauthenticated"]);
        // (name, spec, Ok(status) | Err(code))
        let cases: Vec<(&str, Value, Result<Value, u16>)> = vec![
            (
                "valid for the apiserver's audiences",
                json!({"token": "good"}),
                Ok(json!({"authenticated": true, "audiences": ["api"],
                          "user": {"username": "alice", "uid": "alice-uid", "groups": ["devs", "system:authenticated"]}})),
            ),
            (
                "explicit audiences: the intersection comes back",
                json!({"token": "good", "audiences": ["other", "unrelated"]}),
                Ok(json!({"authenticated": true, "audiences": ["other"],
                          "user": {"username": "alice", "uid": "alice-uid", "groups": ["devs", "system:authenticated"]}})),
            ),
            (
                "disjoint audiences: not authenticated",
                json!({"token": "pod-bound", "audiences": ["elsewhere"]}),
                Ok(json!({"user": {}, "error": "token audiences do not match"})),
            ),
            (
                "extra of a bound token",
                json!({"token": "pod-bound"}),
                Ok(json!({"authenticated": true, "audiences": ["api"], "user": {
                    "username": "system:serviceaccount:ns1:sa1", "uid": "sa-uid",
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"],
                    "extra": {"authentication.kubernetes.io/pod-name": ["p"], "authentication.kubernetes.io/pod-uid": ["p-uid"]}}})),
            ),
            ("an invalid token", json!({"token": "bad-one"}), Ok(json!({"user": {}, "error": "token has expired"}))),
            (
                "garbage nobody claims",
                json!({"token": "garbage"}),
                Ok(json!({"user": {}, "error": "invalid bearer token"})),
            ),
            ("an authenticator lying about audiences", json!({"token": "lying"}), Err(500)),
            ("no token", json!({}), Err(400)),
            ("empty token", json!({"token": ""}), Err(400)),
        ];
        for (name, spec, want) in cases {
            let obj = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {}, "spec": spec.clone()});
            match (run("tokenreviews", &anyone, obj).await, want) {
                (Ok(out), Ok(status)) => {
                    assert_eq!(out["status"], status, "{name}");
                    // The spec comes back as sent (upstream keeps it), the metadata as Go renders it.
                    assert_eq!(out["spec"], spec, "{name}");
                    assert_eq!(out["metadata"], json!({"creationTimestamp": null}), "{name}");
                    assert_eq!(out["kind"], "TokenReview", "{name}");
                }
                (Err(e), Err(code)) => {
                    assert_eq!(e.code().as_u16(), code, "{name}: {e}");
                    assert!(!e.to_string().contains("lying") && !e.to_string().contains("garbage"), "{name}: {e}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
        let err = run("tokenreviews", &anyone, json!({"spec": {}})).await.unwrap_err();
        assert_eq!(err.to_string(), "token is required for TokenReview in authentication");
    }

    #[test]
    fn token_outcome_checks_audiences() {
        let alice = user("alice", &[]);
        let ok = |auds: &[&str]| TokenResult::Authenticated {
            user: alice.clone(),
            audiences: auds.iter().map(|s| s.to_string()).collect(),
        };
        let asked = vec!["a".to_string(), "b".to_string()];
        assert!(matches!(token_outcome(ok(&["b"]), &asked), Ok(TokenOutcome::Authenticated { .. })));
        assert_eq!(token_outcome(ok(&["c"]), &asked).unwrap_err().code().as_u16(), 500);
        assert_eq!(token_outcome(ok(&[]), &asked).unwrap_err().code().as_u16(), 500);
        // No audiences configured at all: nothing to check.
        assert!(matches!(token_outcome(ok(&[]), &[]), Ok(TokenOutcome::Authenticated { .. })));
        assert_eq!(
            token_outcome(TokenResult::NotMine, &asked).unwrap(),
            TokenOutcome::Failed("invalid bearer token".into())
        );
    }

    #[tokio::test]
    async fn self_subject_review_shows_the_requester() {
        // §16 check 1: CN=jbeda, O=app1, O=app2 → username jbeda, those groups.
        let mut jbeda = user("jbeda", &["app1", "app2", "system:authenticated"]);
        let out = run("selfsubjectreviews", &jbeda, json!({"metadata": {"name": "ignored"}})).await.unwrap();
        assert_eq!(
            out,
            json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "SelfSubjectReview",
                "metadata": {"creationTimestamp": "2024-05-06T07:08:09Z"},
                "status": {"userInfo": {"username": "jbeda", "groups": ["app1", "app2", "system:authenticated"]}},
            })
        );
        jbeda.uid = "1234".into();
        jbeda.extra.insert("scopes".into(), vec!["a".into()]);
        let out = run("selfsubjectreviews", &jbeda, json!({})).await.unwrap();
        assert_eq!(out["status"]["userInfo"]["uid"], "1234");
        assert_eq!(out["status"]["userInfo"]["extra"], json!({"scopes": ["a"]}));
        let anon = UserInfo::anonymous();
        let out = run("selfsubjectreviews", &anon, json!({})).await.unwrap();
        assert_eq!(
            out["status"]["userInfo"],
            json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]})
        );
    }
}
