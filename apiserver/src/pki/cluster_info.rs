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

use std::sync::Weak;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::registry::loopback::{self, Author, Loopback, OwnWrite};

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
async fn stored(state: &dyn Loopback) -> anyhow::Result<(&crate::registry::ResourceDef, Option<Value>)> {
    let def = state.find("", "v1", "configmaps")?;
    let existing = match state.storage().get(&def.key(Some(NAMESPACE), NAME)).await? {
        Some(kv) => {
            Some(crate::meta::from_stored(&kv).map_err(|e| anyhow::anyhow!("reading {NAMESPACE}/{NAME}: {e}"))?)
        }
        None => None,
    };
    Ok((def, existing))
}

/// Create or refresh cluster-info for `server_url` and `ca_bundle_pem`, as the apiserver.
pub async fn ensure(state: &dyn Loopback, server_url: &str, ca_bundle_pem: &str) -> anyhow::Result<()> {
    let (def, existing) = stored(state).await?;
    let Some(write) = decide(existing.as_ref(), &kubeconfig(server_url, ca_bundle_pem)) else {
        return Ok(());
    };
    let (verb, body, name) = match &write {
        Write::Create(body) => (loopback::Write::Create, body, ""),
        Write::Update(body) => (loopback::Write::Update, body, NAME),
    };
    let author = Author::apiserver_unnamed();
    let result = state
        .write(OwnWrite { def, write: verb, namespace: NAMESPACE, name, subresource: "", body, author: &author })
        .await;
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
/// follower, it rewrites cluster-info (a job of `tasks`, retrying a few times) whenever the
/// bundle changes, e.g. in a CA rotation.
/// Holds the state weakly: nothing is written once the server is gone.
pub fn follower(
    state: Weak<dyn Loopback>,
    tasks: crate::tasks::Tasks,
    server_url: String,
) -> crate::authn::client_ca::OnTrust {
    Box::new(move |trust: &[Vec<u8>]| {
        let pem: String = trust.iter().map(|d| kustos_ca::pem_encode("CERTIFICATE", d)).collect();
        let (state, url) = (state.clone(), server_url.clone());
        tasks.spawn_job("cluster-info-refresh", async move {
            for attempt in 1..=5u32 {
                let Some(st) = state.upgrade() else { return Ok(()) };
                // A write lost to a concurrent one (the bootstrap signer's) is tried again.
                let done = match ensure(&*st, &url, &pem).await {
                    Ok(()) => stored(&*st).await.map(|(_, cm)| decide(cm.as_ref(), &kubeconfig(&url, &pem)).is_none()),
                    Err(e) => Err(e),
                };
                drop(st);
                match done {
                    Ok(true) => return Ok(()),
                    Ok(false) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
                    Err(e) => {
                        tracing::warn!(error = %e, attempt, "refreshing {NAMESPACE}/{NAME} with the new CA bundle failed");
                        tokio::time::sleep(std::time::Duration::from_secs(u64::from(attempt))).await;
                    }
                }
            }
            Ok(())
        });
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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

    async fn stored(state: &dyn Loopback) -> Option<(Value, u64)> {
        let def = state.find("", "v1", "configmaps").unwrap();
        let kv = state.storage().get(&def.key(Some(NAMESPACE), NAME)).await.unwrap()?;
        Some((serde_json::from_slice(&kv.value).unwrap(), kv.mod_rev))
    }

    #[tokio::test]
    async fn ensure_creates_keeps_and_refreshes() {
        let server = crate::testing::TestServer::new().await.unwrap();
        let state: &dyn Loopback = &*server.state;
        assert!(stored(state).await.is_none(), "absent before the first start");
        ensure(state, "https://127.0.0.1:6443", CA).await.unwrap();
        let (first, rev) = stored(state).await.unwrap();
        assert_eq!(first["data"][KUBECONFIG_KEY], json!(kubeconfig("https://127.0.0.1:6443", CA)));

        ensure(state, "https://127.0.0.1:6443", CA).await.unwrap();
        assert_eq!(stored(state).await.unwrap().1, rev, "same URL and CA: not written again");

        ensure(state, "https://127.0.0.1:7443", CA).await.unwrap();
        let (moved, moved_rev) = stored(state).await.unwrap();
        assert!(moved_rev > rev, "written again");
        assert_eq!(moved["data"][KUBECONFIG_KEY], json!(kubeconfig("https://127.0.0.1:7443", CA)));
        assert_eq!(moved["metadata"]["uid"], first["metadata"]["uid"], "the same object, updated");
        server.stop().await;
    }
}
