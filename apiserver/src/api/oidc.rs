//! OIDC discovery of the service-account issuer (upstream's `pkg/serviceaccount/openidmetadata.go`):
//! `/.well-known/openid-configuration` and `/openid/v1/jwks`, served only when the issuer is an
//! `https` URL. Public documents, cacheable for an hour; with an external signer, until its
//! keys are fetched again (as kube-apiserver: a revoked key leaves verifiers' caches as soon
//! as it leaves the signer's answer).

use axum::response::{IntoResponse as _, Response};
use http::{header, HeaderValue, StatusCode};
use kustos_ca::jwt;
use serde_json::json;

use crate::pki::service_account::ServiceAccountTokens;
use crate::AppState;

/// Where the OIDC provider configuration is served.
pub const OPENID_CONFIG_PATH: &str = "/.well-known/openid-configuration";
/// How long discovery documents may be cached (upstream's static key getter).
const DISCOVERY_MAX_AGE_SECONDS: u32 = 3600;

/// Whether OIDC discovery can be served for `issuer`: an `https` URL without query or
/// fragment (upstream does not install the endpoints otherwise).
pub fn discovery_enabled(issuer: &str) -> bool {
    issuer.strip_prefix("https://").is_some_and(|rest| !rest.is_empty() && !rest.contains(['?', '#']))
}

/// The OIDC provider configuration, when discovery is enabled.
pub fn openid_configuration(tokens: &ServiceAccountTokens) -> Option<String> {
    if !discovery_enabled(tokens.issuer()) {
        return None;
    }
    // Field order as upstream's struct renders it.
    Some(format!(
        "{{\"issuer\":{},\"jwks_uri\":{},\"response_types_supported\":[\"id_token\"],\"subject_types_supported\":[\"public\"],\"id_token_signing_alg_values_supported\":{}}}",
        json!(tokens.issuer()),
        json!(tokens.jwks_uri()),
        json!(jwt::signing_algorithms(&tokens.published_keys())),
    ))
}

/// How long the documents may be cached, in seconds.
fn max_age(tokens: &ServiceAccountTokens) -> u64 {
    tokens.external_signer().map_or(u64::from(DISCOVERY_MAX_AGE_SECONDS), |s| s.cache_max_age_seconds())
}

fn discovery_response(body: Vec<u8>, content_type: &'static str, max_age: u64) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={max_age}")) {
        r.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    r
}

/// GET `/.well-known/openid-configuration` (None: discovery is not served).
pub fn openid_configuration_response(state: &AppState) -> Option<Response> {
    let tokens = state.security.service_accounts.as_ref()?;
    let body = openid_configuration(tokens)?;
    Some(discovery_response(body.into_bytes(), "application/json", max_age(tokens)))
}

/// GET `/openid/v1/jwks` (None: discovery is not served).
pub fn jwks_response(state: &AppState) -> Option<Response> {
    let tokens = state.security.service_accounts.as_ref()?;
    if !discovery_enabled(tokens.issuer()) {
        return None;
    }
    let body = serde_json::to_vec(&tokens.jwks()).unwrap_or_default();
    Some(discovery_response(body, "application/jwk-set+json", max_age(tokens)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use serde_json::Value;
    use tower::ServiceExt as _;

    use super::*;
    use crate::pki::service_account::{DEFAULT_ISSUER, JWKS_PATH};
    use crate::testing::serviceaccount::{env, strings};

    #[test]
    fn discovery_needs_an_https_issuer() {
        for (iss, want) in [
            (DEFAULT_ISSUER, true),
            ("https://issuer.example/path", true),
            ("http://insecure", false),
            ("https://", false),
            ("https://a?b=c", false),
            ("https://a#frag", false),
            ("kubernetes/serviceaccount", false),
        ] {
            assert_eq!(discovery_enabled(iss), want, "{iss}");
        }
    }

    async fn get(state: &Arc<AppState>, path: &str) -> (u16, Option<String>, Option<String>, Value) {
        let req = http::Request::builder().uri(path).body(axum::body::Body::empty()).unwrap();
        let resp = crate::router(state.clone()).oneshot(req).await.unwrap();
        let code = resp.status().as_u16();
        let h = |n: header::HeaderName| resp.headers().get(n).map(|v| v.to_str().unwrap().to_string());
        let (ct, cc) = (h(header::CONTENT_TYPE), h(header::CACHE_CONTROL));
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (code, ct, cc, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn oidc_discovery_documents() {
        let e = env().await;
        let (code, ct, cc, body) = get(&e.state, OPENID_CONFIG_PATH).await;
        assert_eq!(code, 200);
        assert_eq!(ct.as_deref(), Some("application/json"));
        assert_eq!(cc.as_deref(), Some("public, max-age=3600"));
        assert_eq!(
            body,
            json!({
                "issuer": DEFAULT_ISSUER,
                "jwks_uri": "https://127.0.0.1:6443/openid/v1/jwks",
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["ES256"],
            })
        );
        let raw = openid_configuration(&e.tokens).unwrap();
        assert!(raw.starts_with("{\"issuer\":"), "{raw}");
        let (code, ct, _, body) = get(&e.state, JWKS_PATH).await;
        assert_eq!(code, 200);
        assert_eq!(ct.as_deref(), Some("application/jwk-set+json"));
        let kid = e.tokens.signing_key().unwrap().public_key().key_id().to_string();
        assert_eq!(body["keys"][0]["kid"], kid);
        assert_eq!(body["keys"][0]["alg"], "ES256");
        assert!(body["keys"][0].get("d").is_none());

        // Not served when the issuer is not an https URL.
        let mut e2 = env().await;
        let pair = kustos_ca::generate_sa_keypair().unwrap();
        let plain = ServiceAccountTokens::new(
            strings(&["kubernetes/serviceaccount-issuer"]),
            &pair.private_key_pem,
            &pair.public_key_pem,
            &[],
            vec![],
            None,
            "127.0.0.1:6443",
        )
        .unwrap();
        assert!(openid_configuration(&plain).is_none());
        let mut security = e2.state.security.clone();
        security.service_accounts = Some(Arc::new(plain));
        e2.state = AppState::new(e2.state.storage.clone(), "127.0.0.1:6443".into(), security);
        assert_eq!(get(&e2.state, OPENID_CONFIG_PATH).await.0, 404);
        assert_eq!(get(&e2.state, JWKS_PATH).await.0, 404);
    }
}
