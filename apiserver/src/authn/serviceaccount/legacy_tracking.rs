//! Legacy token tracking (upstream's `legacytokentracking` controller): the ConfigMap
//! `kube-system/kube-apiserver-legacy-service-account-token-tracking` records since when the
//! use of legacy tokens is recorded on their Secrets, so that the legacy token cleaner knows
//! which unused tokens it may trust to be unused.

use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::api::rest::{self, Call, Params};
use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::http::request_info::RequestInfo;
use crate::AppState;

/// The ConfigMap (in `kube-system`) recording since when legacy token use is tracked.
pub const LEGACY_TOKEN_TRACKING_CONFIGMAP: &str = "kube-apiserver-legacy-service-account-token-tracking";
/// Its data key: the day tracking started.
pub const LEGACY_TOKEN_TRACKING_SINCE_KEY: &str = "since";

/// Create the ConfigMap `kube-system/kube-apiserver-legacy-service-account-token-tracking`
/// (`data.since` = today) unless it exists.
pub async fn ensure_legacy_token_tracking(state: &Arc<AppState>, now: DateTime<Utc>) -> anyhow::Result<()> {
    let def = state.registry.find("", "v1", "configmaps").cloned().context("configmaps are not registered")?;
    if state.storage.get(&def.key(Some("kube-system"), LEGACY_TOKEN_TRACKING_CONFIGMAP)).await?.is_some() {
        return Ok(());
    }
    let user = UserInfo::apiserver();
    let info = RequestInfo {
        is_resource_request: true,
        verb: "create".into(),
        api_version: "v1".into(),
        resource: "configmaps".into(),
        namespace: "kube-system".into(),
        ..Default::default()
    };
    let call = Call { state, def: &def, info: &info, user: &user, params: Params::default(), out: Default::default() };
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": LEGACY_TOKEN_TRACKING_CONFIGMAP, "namespace": "kube-system"},
        "data": {LEGACY_TOKEN_TRACKING_SINCE_KEY: now.format("%Y-%m-%d").to_string()},
    });
    match rest::create(&call, &Bytes::from(body.to_string()), "application/json").await {
        Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
        Err(e) => anyhow::bail!("creating the legacy token tracking ConfigMap: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use chrono::{Duration, TimeZone as _};
    use serde_json::Value;

    use super::*;
    use crate::authn::serviceaccount::fixture::env;

    #[tokio::test]
    async fn tracking_configmap_created_once() {
        let e = env().await;
        let now = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
        ensure_legacy_token_tracking(&e.state, now).await.unwrap();
        let kv = e.stored("configmaps", "kube-system", LEGACY_TOKEN_TRACKING_CONFIGMAP).await.unwrap();
        let cm: Value = serde_json::from_slice(&kv.value).unwrap();
        assert_eq!(cm["data"], json!({"since": "2024-05-01"}));
        ensure_legacy_token_tracking(&e.state, now + Duration::days(3)).await.unwrap();
        let again = e.stored("configmaps", "kube-system", LEGACY_TOKEN_TRACKING_CONFIGMAP).await.unwrap();
        assert_eq!(again.mod_rev, kv.mod_rev);
    }
}
