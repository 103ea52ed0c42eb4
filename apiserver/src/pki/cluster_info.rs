//! The ConfigMap `kube-public/cluster-info`: key `kubeconfig` holds what a joining node needs
//! to find and trust the cluster (the apiserver URL and the cluster CA bundle, one cluster,
//! no users), as kubeadm writes it. Anonymous clients may read it (the default policy's
//! `kubeadm:bootstrap-signer-clusterinfo` Role and RoleBinding); the bootstrap signer adds
//! `jws-kubeconfig-<token id>` signatures beside it.
//!
//! Written at every apiserver start: created when missing, replaced when the URL or the CA
//! changed (signatures of the old content go with it, the signer makes new ones), left alone
//! otherwise; and again whenever the trust bundle in `ca.crt` changes while serving
//! ([`follower`], a CA rotation).

use std::sync::{Arc, Weak};

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::api::rest::{self, Call, Params};
use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::http::request_info::RequestInfo;
use crate::AppState;

pub use kustos_ca::bootstrap_token::{CLUSTER_INFO_NAME as NAME, CLUSTER_INFO_NAMESPACE as NAMESPACE, KUBECONFIG_KEY};

/// The `kubeconfig` value: one unnamed cluster with `server` and `certificate-authority-data`,
/// no contexts and no users, keys in kubeadm's order; the empty lists are written `[]`, as
/// the bootstrap-token documentation shows them.
pub fn kubeconfig(server_url: &str, ca_bundle_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_bundle_pem.as_bytes());
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server_url}\n  \
         name: \"\"\ncontexts: []\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: []\n"
    )
}

#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Create(Value),
    /// Replace (the body carries the resourceVersion read).
    Update(Value),
}

/// What to write so cluster-info holds `kubeconfig`, given the stored object (if any).
pub fn decide(existing: Option<&Value>, kubeconfig: &str) -> Option<Write> {
    let Some(existing) = existing else {
        return Some(Write::Create(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "data": {KUBECONFIG_KEY: kubeconfig},
        })));
    };
    if existing.pointer(&format!("/data/{KUBECONFIG_KEY}")).and_then(Value::as_str) == Some(kubeconfig) {
        return None;
    }
    let mut updated = existing.clone();
    if let Some(m) = updated.as_object_mut() {
        m.insert("data".into(), json!({KUBECONFIG_KEY: kubeconfig}));
        m.remove("binaryData");
    }
    Some(Write::Update(updated))
}

/// The ConfigMaps' definition and the stored cluster-info, if any.
async fn stored(state: &Arc<AppState>) -> anyhow::Result<(&crate::registry::ResourceDef, Option<Value>)> {
    let def =
        state.registry.find("", "v1", "configmaps").ok_or_else(|| anyhow::anyhow!("configmaps are not registered"))?;
    let existing = match state.storage.get(&def.key(Some(NAMESPACE), NAME)).await? {
        Some(kv) => {
            Some(crate::meta::from_stored(&kv).map_err(|e| anyhow::anyhow!("reading {NAMESPACE}/{NAME}: {e}"))?)
        }
        None => None,
    };
    Ok((def, existing))
}

/// Create or refresh cluster-info for `server_url` and `ca_bundle_pem`, as the apiserver.
pub async fn ensure(state: &Arc<AppState>, server_url: &str, ca_bundle_pem: &str) -> anyhow::Result<()> {
    let (def, existing) = stored(state).await?;
    let Some(write) = decide(existing.as_ref(), &kubeconfig(server_url, ca_bundle_pem)) else {
        return Ok(());
    };
    let user = UserInfo::apiserver();
    let (verb, body, name) = match &write {
        Write::Create(body) => ("create", body, ""),
        Write::Update(body) => ("update", body, NAME),
    };
    let info = RequestInfo {
        is_resource_request: true,
        verb: verb.into(),
        api_version: "v1".into(),
        resource: "configmaps".into(),
        namespace: NAMESPACE.into(),
        name: name.into(),
        ..Default::default()
    };
    let call = Call { state, def, info: &info, user: &user, params: Params::default(), out: Default::default() };
    let body = Bytes::from(body.to_string());
    let result = match write {
        Write::Create(_) => rest::create(&call, &body, "application/json").await,
        Write::Update(_) => rest::update(&call, &body, "application/json").await,
    };
    match result {
        Ok(_) => {
            tracing::info!(server = %server_url, "wrote {NAMESPACE}/{NAME}");
            Ok(())
        }
        // Another apiserver on the same store got there first; its view wins this round.
        Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => Ok(()),
        Err(e) => anyhow::bail!("writing {NAMESPACE}/{NAME}: {e}"),
    }
}

/// Keeps cluster-info in step with the trust bundle while serving: given to the client CA
/// follower, it rewrites cluster-info (in the background, retrying a few times) whenever the
/// bundle changes, e.g. in a CA rotation.
/// Holds the state weakly: nothing is written once the server is gone.
pub fn follower(state: Weak<AppState>, server_url: String) -> crate::authn::client_ca::OnTrust {
    Box::new(move |trust: &[Vec<u8>]| {
        let pem: String = trust.iter().map(|d| kustos_ca::pem_encode("CERTIFICATE", d)).collect();
        let Some(state) = state.upgrade() else { return };
        let url = server_url.clone();
        tokio::spawn(async move {
            for attempt in 1..=5u32 {
                // A write lost to a concurrent one (the bootstrap signer's) is tried again.
                let done = match ensure(&state, &url, &pem).await {
                    Ok(()) => {
                        stored(&state).await.map(|(_, cm)| decide(cm.as_ref(), &kubeconfig(&url, &pem)).is_none())
                    }
                    Err(e) => Err(e),
                };
                match done {
                    Ok(true) => return,
                    Ok(false) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
                    Err(e) => {
                        tracing::warn!(error = %e, attempt, "refreshing {NAMESPACE}/{NAME} with the new CA bundle failed");
                        tokio::time::sleep(std::time::Duration::from_secs(u64::from(attempt))).await;
                    }
                }
            }
        });
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::authn::AuthnChain;
    use crate::storage::sqlite::SqliteStorage;
    use crate::Security;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_kubeconfig_is_one_cluster_and_no_users() {
        let text = kubeconfig("https://127.0.0.1:6443", CA);
        let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(v["apiVersion"].as_str(), Some("v1"));
        assert_eq!(v["kind"].as_str(), Some("Config"));
        assert_eq!(v["clusters"].as_sequence().map(Vec::len), Some(1));
        assert_eq!(v["clusters"][0]["name"].as_str(), Some(""));
        assert_eq!(v["clusters"][0]["cluster"]["server"].as_str(), Some("https://127.0.0.1:6443"));
        let ca = v["clusters"][0]["cluster"]["certificate-authority-data"].as_str().unwrap();
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(ca).unwrap(), CA.as_bytes());
        assert_eq!(v["users"].as_sequence().map(Vec::len), Some(0));
        assert_eq!(v["contexts"].as_sequence().map(Vec::len), Some(0));
        assert_eq!(v["current-context"].as_str(), Some(""));
    }

    #[test]
    fn writes_only_what_changed() {
        let want = kubeconfig("https://127.0.0.1:6443", CA);
        let stored = |kc: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": NAME, "namespace": NAMESPACE, "resourceVersion": "9"},
                   "data": {KUBECONFIG_KEY: kc, "jws-kubeconfig-abcdef": "sig"}})
        };
        let cases: Vec<(&str, Option<Value>, Option<Value>)> = vec![
            (
                "missing: created",
                None,
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": NAME, "namespace": NAMESPACE},
                            "data": {KUBECONFIG_KEY: want}})),
            ),
            ("same URL and CA: left alone, signatures kept", Some(stored(&want)), None),
            (
                "another URL: replaced, stale signatures dropped",
                Some(stored(&kubeconfig("https://127.0.0.1:7443", CA))),
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": NAME, "namespace": NAMESPACE, "resourceVersion": "9"},
                            "data": {KUBECONFIG_KEY: want}})),
            ),
            (
                "another CA: replaced",
                Some(stored(&kubeconfig("https://127.0.0.1:6443", "OLD"))),
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": NAME, "namespace": NAMESPACE, "resourceVersion": "9"},
                            "data": {KUBECONFIG_KEY: want}})),
            ),
        ];
        for (name, existing, want_body) in cases {
            let got = decide(existing.as_ref(), &want);
            let got_body = got.as_ref().map(|w| match w {
                Write::Create(b) | Write::Update(b) => b.clone(),
            });
            assert_eq!(got_body, want_body, "{name}");
            assert_eq!(
                got.map(|w| matches!(w, Write::Create(_))),
                want_body.as_ref().map(|_| existing.is_none()),
                "{name}: create only when missing"
            );
        }
    }

    async fn state() -> Arc<AppState> {
        let (store, rbac) = crate::authz::rbac::cache::install(Arc::new(SqliteStorage::open_in_memory().unwrap()));
        let security = Security {
            authn: Arc::new(AuthnChain::from_parts(None, vec![], true)),
            authz: Arc::new(crate::authz::MastersAuthorizer),
            rbac,
            service_accounts: None,
        };
        let state = AppState::new(store, "127.0.0.1:6443".into(), security);
        crate::bootstrap(&state).await.unwrap();
        state
    }

    async fn stored(state: &Arc<AppState>) -> Option<(Value, u64)> {
        let def = state.registry.find("", "v1", "configmaps").unwrap();
        let kv = state.storage.get(&def.key(Some(NAMESPACE), NAME)).await.unwrap()?;
        Some((serde_json::from_slice(&kv.value).unwrap(), kv.mod_rev))
    }

    #[tokio::test]
    async fn ensure_creates_keeps_and_refreshes() {
        let state = state().await;
        assert!(stored(&state).await.is_none(), "absent before the first start");
        ensure(&state, "https://127.0.0.1:6443", CA).await.unwrap();
        let (first, rev) = stored(&state).await.unwrap();
        assert_eq!(first["data"][KUBECONFIG_KEY], json!(kubeconfig("https://127.0.0.1:6443", CA)));

        ensure(&state, "https://127.0.0.1:6443", CA).await.unwrap();
        assert_eq!(stored(&state).await.unwrap().1, rev, "same URL and CA: not written again");

        ensure(&state, "https://127.0.0.1:7443", CA).await.unwrap();
        let (moved, moved_rev) = stored(&state).await.unwrap();
        assert!(moved_rev > rev, "written again");
        assert_eq!(moved["data"][KUBECONFIG_KEY], json!(kubeconfig("https://127.0.0.1:7443", CA)));
        assert_eq!(moved["metadata"]["uid"], first["metadata"]["uid"], "the same object, updated");
    }
}
