//! The test environment of service-account tokens: a state over an in-memory store with a
//! token issuer, the authenticator and an allow-all authorizer, and helpers to create
//! objects, request tokens and check them. Shared by the tests of the authenticator,
//! TokenRequest, OIDC discovery and legacy token tracking.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use crate::api::rest::{self, Call, Params, Reply};
use crate::api::serviceaccount_token::token_request;
pub(crate) use crate::authn::serviceaccount::tests::strings;
use crate::authn::serviceaccount::ServiceAccountAuthenticator;
use crate::authn::{AuthnChain, TokenAuthenticator as _, TokenResult, UserInfo};
use crate::authz::{Attributes, Authorizer, Verdict};
use crate::error::ApiError;
use crate::http::request_info::RequestInfo;
use crate::pki::service_account::{ServiceAccountTokens, DEFAULT_ISSUER};
use crate::storage::sqlite::SqliteStorage;
use crate::storage::KeyValue;
use crate::{AppState, Security};

struct AllowAll;

#[async_trait::async_trait]
impl Authorizer for AllowAll {
    async fn authorize(&self, _attrs: &Attributes<'_>) -> Verdict {
        Verdict::allow("")
    }
}

pub(crate) struct Env {
    pub(crate) state: Arc<AppState>,
    pub(crate) tokens: Arc<ServiceAccountTokens>,
    pub(crate) authn: ServiceAccountAuthenticator,
    pub(crate) signing_pem: String,
}

pub(crate) async fn env_with(max: Option<std::time::Duration>) -> Env {
    let pair = kustos_ca::generate_sa_keypair().unwrap();
    let tokens = Arc::new(
        ServiceAccountTokens::new(
            strings(&[DEFAULT_ISSUER, "https://old-issuer.example"]),
            &pair.private_key_pem,
            &pair.public_key_pem,
            &[],
            vec![],
            max,
            "127.0.0.1:6443",
        )
        .unwrap(),
    );
    let (store, rbac) = crate::authz::rbac::cache::install(Arc::new(SqliteStorage::open_in_memory().unwrap()));
    let authenticator = ServiceAccountAuthenticator::new(tokens.clone(), store.clone()).unwrap();
    let chain = AuthnChain::from_parts(
        None,
        vec![Arc::new(ServiceAccountAuthenticator::new(tokens.clone(), store.clone()).unwrap())],
        true,
    )
    .with_api_audiences(tokens.api_audiences().to_vec());
    let security =
        Security { authn: Arc::new(chain), authz: Arc::new(AllowAll), rbac, service_accounts: Some(tokens.clone()) };
    let state = AppState::new(store, "127.0.0.1:6443".into(), security);
    crate::bootstrap(&state).await.unwrap();
    Env { state, tokens, authn: authenticator, signing_pem: pair.private_key_pem }
}

pub(crate) async fn env() -> Env {
    env_with(None).await
}

pub(crate) fn admin() -> UserInfo {
    UserInfo { name: "admin".into(), groups: vec!["system:masters".into()], ..Default::default() }
}

impl Env {
    pub(crate) async fn create(&self, resource: &str, ns: &str, body: Value) -> Value {
        let def = self.state.registry.find("", "v1", resource).unwrap();
        let info = RequestInfo {
            is_resource_request: true,
            verb: "create".into(),
            api_version: "v1".into(),
            resource: resource.into(),
            namespace: ns.into(),
            ..Default::default()
        };
        let user = admin();
        let call = Call {
            state: &self.state,
            def,
            info: &info,
            user: &user,
            params: Params::default(),
            out: Default::default(),
        };
        rest::create(&call, &Bytes::from(body.to_string()), "application/json").await.unwrap().body
    }

    pub(crate) async fn namespace(&self, name: &str) {
        self.create("namespaces", "", json!({"metadata": {"name": name}})).await;
    }

    pub(crate) async fn service_account(&self, ns: &str, name: &str) -> Value {
        self.create("serviceaccounts", ns, json!({"metadata": {"name": name}})).await
    }

    pub(crate) async fn remove(&self, resource: &str, ns: &str, name: &str) {
        let def = self.state.registry.find("", "v1", resource).unwrap();
        let key = def.key(Some(ns), name);
        let kv = self.state.storage.get(&key).await.unwrap().unwrap();
        self.state.storage.delete(&key, kv.mod_rev).await.unwrap();
    }

    pub(crate) async fn stored(&self, resource: &str, ns: &str, name: &str) -> Option<KeyValue> {
        let def = self.state.registry.find("", "v1", resource).unwrap();
        self.state.storage.get(&def.key(Some(ns), name)).await.unwrap()
    }

    pub(crate) async fn stored_object(&self, resource: &str, ns: &str, name: &str) -> Value {
        serde_json::from_slice(&self.stored(resource, ns, name).await.unwrap().value).unwrap()
    }

    pub(crate) async fn request_token(&self, ns: &str, sa: &str, query: &str, body: Value) -> Result<Reply, ApiError> {
        let def = self.state.registry.find("", "v1", "serviceaccounts").unwrap();
        let info = RequestInfo {
            is_resource_request: true,
            verb: "create".into(),
            api_version: "v1".into(),
            resource: "serviceaccounts".into(),
            subresource: "token".into(),
            namespace: ns.into(),
            name: sa.into(),
            ..Default::default()
        };
        let user = admin();
        let call = Call {
            state: &self.state,
            def,
            info: &info,
            user: &user,
            params: Params::parse(Some(query)),
            out: Default::default(),
        };
        token_request(&call, &Bytes::from(body.to_string()), "application/json").await
    }

    pub(crate) async fn token(&self, ns: &str, sa: &str, spec: Value) -> String {
        let r = self
            .request_token(
                ns,
                sa,
                "",
                json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "spec": spec}),
            )
            .await
            .unwrap();
        r.body["status"]["token"].as_str().unwrap().to_string()
    }

    pub(crate) async fn check(&self, token: &str, audiences: &[&str]) -> TokenResult {
        self.authn.authenticate_token(token, &strings(audiences)).await
    }
}

pub(crate) fn invalid(r: TokenResult) -> String {
    match r {
        TokenResult::Invalid(reason) => reason,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

pub(crate) fn authenticated(r: TokenResult) -> (UserInfo, Vec<String>) {
    match r {
        TokenResult::Authenticated { user, audiences } => (user, audiences),
        other => panic!("expected Authenticated, got {other:?}"),
    }
}
