//! Legacy token tracking (upstream's `legacytokentracking` controller): the ConfigMap
//! `kube-system/kube-apiserver-legacy-service-account-token-tracking` records since when the
//! use of legacy tokens is recorded on their Secrets, so that the legacy token cleaner knows
//! which unused tokens it may trust to be unused.

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::error::ApiError;
use crate::registry::loopback::{Author, Loopback, OwnWrite, Write};

/// The ConfigMap (in `kube-system`) recording since when legacy token use is tracked.
pub const LEGACY_TOKEN_TRACKING_CONFIGMAP: &str = "kube-apiserver-legacy-service-account-token-tracking";
/// Its data key: the day tracking started.
pub const LEGACY_TOKEN_TRACKING_SINCE_KEY: &str = "since";

/// Create the ConfigMap `kube-system/kube-apiserver-legacy-service-account-token-tracking`
/// (`data.since` = today) unless it exists.
pub async fn ensure_legacy_token_tracking(state: &dyn Loopback, now: DateTime<Utc>) -> anyhow::Result<()> {
    let def = state.find("", "v1", "configmaps")?;
    if state.storage().get(&def.key(Some("kube-system"), LEGACY_TOKEN_TRACKING_CONFIGMAP)).await?.is_some() {
        return Ok(());
    }
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": LEGACY_TOKEN_TRACKING_CONFIGMAP, "namespace": "kube-system"},
        "data": {LEGACY_TOKEN_TRACKING_SINCE_KEY: now.format("%Y-%m-%d").to_string()},
    });
    let author = Author::apiserver_unnamed();
    let write = OwnWrite {
        def,
        write: Write::Create,
        namespace: "kube-system",
        name: LEGACY_TOKEN_TRACKING_CONFIGMAP,
        subresource: "",
        body: &body,
        author: &author,
    };
    match state.write(write).await {
        Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
        Err(e) => anyhow::bail!("creating the legacy token tracking ConfigMap: {e}"),
    }
}
