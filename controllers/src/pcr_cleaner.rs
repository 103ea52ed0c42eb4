//! `podcertificaterequest-cleaner`: deletes PodCertificateRequests once they are older than
//! a threshold (30 minutes), as kube-controller-manager's PCR cleaner
//! (`pkg/controller/certificates/cleaner/pcrcleaner.go`): a kubelet reads its certificate
//! within minutes, so an older request is done with, whatever its state.
//!
//! Each request is reconciled on its own when it changes and again at its deadline (its
//! `creationTimestamp` plus the threshold). The delete carries the request's UID as
//! precondition: NotFound (already gone) and Conflict (a new request of the same name) are
//! not errors. The API version is chosen at start ([`pcrs::served`]):
//! `certificates.k8s.io/v1`, else `v1beta1` (a kube-apiserver 1.34 to 1.36 with the beta API
//! enabled); against an apiserver that serves neither the controller logs one line and does
//! nothing.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::certificates::{v1, v1beta1};
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client, Resource, ResourceExt as _};

use crate::pod_certificate_requests::{self as pcrs, Version};
use crate::runtime::{self, Action, Backoff};

pub const NAME: &str = "podcertificaterequest-cleaner";
/// Upstream's threshold.
pub const DEFAULT_THRESHOLD: chrono::Duration = chrono::Duration::minutes(30);

/// What to do with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Delete it (precondition: this UID).
    Delete { uid: String },
    /// Look again at this time.
    RecheckAt(DateTime<Utc>),
    /// No creation time to go by.
    Keep,
}

/// Decide for a request created at `created` (with `uid`) at `now`: delete once it is at
/// least `threshold` old (upstream deletes unless now is before the deadline).
pub fn decide(
    created: Option<DateTime<Utc>>,
    uid: Option<&str>,
    now: DateTime<Utc>,
    threshold: chrono::Duration,
) -> Decision {
    let Some(created) = created else { return Decision::Keep };
    let deadline = created + threshold;
    if now < deadline {
        return Decision::RecheckAt(deadline);
    }
    Decision::Delete { uid: uid.unwrap_or_default().to_string() }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("deleting PodCertificateRequest {name}: {source}")]
    Delete {
        name: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Context {
    client: Client,
    threshold: chrono::Duration,
    backoff: Backoff,
}

impl runtime::Context for Context {
    fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

async fn reconcile<K>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + Debug,
{
    let name = obj.name_any();
    let namespace = obj.namespace().unwrap_or_default();
    let now = Utc::now();
    let created = obj.meta().creation_timestamp.as_ref().and_then(crate::csr::to_chrono);
    match decide(created, obj.meta().uid.as_deref(), now, ctx.threshold) {
        Decision::Keep => Ok(Action::await_change()),
        Decision::RecheckAt(t) => Ok(Action::requeue(runtime::until(t, now, Duration::ZERO) + Duration::from_secs(1))),
        Decision::Delete { uid } => {
            let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
                ..Default::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => {
                    tracing::info!(controller = NAME, namespace = %namespace, request = %name, "cleaned up the PodCertificateRequest");
                    ctx.backoff.forget(&name);
                    Ok(Action::await_change())
                }
                Err(e) if runtime::is_status(&e, 404) || runtime::is_status(&e, 409) => Ok(Action::await_change()),
                Err(source) => Err(Error::Delete { name: format!("{namespace}/{name}"), source }),
            }
        }
    }
}

async fn run_for<K>(client: Client, cfg: crate::Config, ctx: Arc<Context>) -> anyhow::Result<()>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::all(client);
    runtime::per_object_watching(
        NAME,
        api,
        kube::runtime::watcher::Config::default(),
        &cfg.metrics,
        ctx,
        reconcile::<K>,
        futures::stream::pending(),
    )
    .await
}

/// Run until the task is dropped.
pub async fn run(client: Client, cfg: crate::Config) -> anyhow::Result<()> {
    let ctx =
        Arc::new(Context { client: client.clone(), threshold: cfg.pcr_cleaner_threshold, backoff: Backoff::default() });
    match pcrs::served(&client).await {
        Some(Version::V1) => return run_for::<v1::PodCertificateRequest>(client, cfg, ctx).await,
        Some(Version::V1beta1) => return run_for::<v1beta1::PodCertificateRequest>(client, cfg, ctx).await,
        None => {}
    }
    tracing::warn!(
        controller = NAME,
        "the apiserver serves no PodCertificateRequests (certificates.k8s.io/v1 or v1beta1): not cleaning"
    );
    futures::future::pending().await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    #[test]
    fn cleaning_decisions() {
        let t0 = Utc.with_ymd_and_hms(2030, 3, 1, 12, 0, 0).unwrap();
        let m = chrono::Duration::minutes;
        // (what, created, now, the decision)
        type Case<'a> = (&'a str, Option<DateTime<Utc>>, DateTime<Utc>, Decision);
        let cases: &[Case] = &[
            ("fresh", Some(t0), t0 + m(1), Decision::RecheckAt(t0 + m(30))),
            ("29 minutes", Some(t0), t0 + m(29), Decision::RecheckAt(t0 + m(30))),
            ("exactly 30 minutes: deleted", Some(t0), t0 + m(30), Decision::Delete { uid: "u".into() }),
            ("older", Some(t0), t0 + m(300), Decision::Delete { uid: "u".into() }),
            ("no creation time", None, t0, Decision::Keep),
        ];
        for (what, created, now, want) in cases {
            assert_eq!(decide(*created, Some("u"), *now, DEFAULT_THRESHOLD), *want, "{what}");
        }
        assert_eq!(
            decide(Some(t0), Some("u"), t0 + m(2), m(1)),
            Decision::Delete { uid: "u".into() },
            "a shorter threshold"
        );
    }
}
