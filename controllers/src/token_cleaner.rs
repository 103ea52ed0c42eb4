//! `tokencleaner`: deletes bootstrap-token Secrets (`kube-system`, type
//! `bootstrap.kubernetes.io/token`) once their `expiration` has passed; an unparsable
//! `expiration` counts as passed, a missing one never does.
//!
//! Each Secret is reconciled on its own ([`crate::runtime::per_object_watching`]) when it
//! is added or changed. One that is still valid is queued again for the moment it expires
//! (at most [`MAX_RECHECK`] ahead, then again), so every token is re-checked exactly when it
//! expires rather than by a periodic sweep of all of them. The delete carries the Secret's
//! UID as a precondition, so a token re-created under the same name in the meantime
//! survives; NotFound (already gone) and Conflict (another object now) are not errors.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::watcher;
use kube::{Api, Client};
use kustos_ca::bootstrap_token::{Expiration, NAMESPACE, SECRET_TYPE};

use crate::bootstrap_tokens::{expiration, is_token_secret};
use crate::runtime::{self, is_status, Action, Backoff};

/// The furthest ahead a re-check is queued: tokens living longer are looked at again after
/// this and then at their expiration (timer queues cannot hold arbitrarily distant times).
pub const MAX_RECHECK: Duration = Duration::from_secs(24 * 3600);
/// Delay before retrying a failed delete.
const RETRY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not a bootstrap-token Secret.
    Ignore,
    /// Never expires: nothing to do until it changes.
    Keep,
    /// Valid for this long (capped at [`MAX_RECHECK`]): check again then.
    RequeueAfter(Duration),
    /// Expired: delete, on condition that the UID is still this one (when known).
    Delete { uid: Option<String> },
}

/// What to do with `secret` at `now`.
pub fn decide(secret: &Secret, now: DateTime<Utc>) -> Decision {
    if !is_token_secret(secret) {
        return Decision::Ignore;
    }
    match expiration(secret, now) {
        Expiration::Never => Decision::Keep,
        Expiration::Expired => Decision::Delete { uid: secret.metadata.uid.clone().filter(|u| !u.is_empty()) },
        Expiration::At { remaining, .. } => {
            // `remaining` is positive here; sub-nanosecond rounding can only make it zero,
            // which re-checks at once.
            Decision::RequeueAfter(remaining.to_std().unwrap_or_default().min(MAX_RECHECK))
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("deleting expired bootstrap token secret {NAMESPACE}/{name}: {source}")]
    Delete {
        name: String,
        #[source]
        source: kube::Error,
    },
}

struct Context {
    secrets: Api<Secret>,
    metrics: crate::metrics::Metrics,
    /// A failed delete is retried after [`RETRY`], every time.
    backoff: Backoff,
}

impl runtime::Context for Context {
    fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

async fn reconcile(secret: Arc<Secret>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    match decide(&secret, Utc::now()) {
        Decision::Ignore | Decision::Keep => Ok(Action::await_change()),
        Decision::RequeueAfter(after) => Ok(Action::requeue(after)),
        Decision::Delete { uid } => {
            let dp = DeleteParams {
                preconditions: uid.map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
                ..Default::default()
            };
            match ctx.secrets.delete(&name, &dp).await {
                Ok(_) => {
                    ctx.metrics.token_cleaned();
                    tracing::info!(controller = "tokencleaner", secret = %name, "deleted an expired bootstrap token");
                    Ok(Action::await_change())
                }
                // Already deleted, or the name now belongs to another object.
                Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(Action::await_change()),
                Err(source) => Err(Error::Delete { name, source }),
            }
        }
    }
}

pub async fn run(client: Client, cfg: crate::Config) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client, NAMESPACE);
    let only_tokens = watcher::Config::default().fields(&format!("type={SECRET_TYPE}"));
    let ctx = Arc::new(Context {
        secrets: secrets.clone(),
        metrics: cfg.metrics.clone(),
        backoff: Backoff::new(RETRY, RETRY),
    });
    runtime::per_object_watching(
        "tokencleaner",
        secrets,
        only_tokens,
        &cfg.metrics,
        ctx,
        reconcile,
        futures::stream::pending(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
    }

    fn secret(expiration: Option<&str>, edit: fn(&mut Secret)) -> Secret {
        let mut data = std::collections::BTreeMap::new();
        if let Some(e) = expiration {
            data.insert("expiration".to_string(), ByteString(e.as_bytes().to_vec()));
        }
        let mut s = Secret {
            metadata: ObjectMeta {
                name: Some("bootstrap-token-abcdef".into()),
                namespace: Some(NAMESPACE.into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            data: Some(data),
            ..Default::default()
        };
        edit(&mut s);
        s
    }

    #[test]
    fn cleaner_decisions() {
        let now = at("2026-01-01T00:00:00Z");
        let delete = Decision::Delete { uid: Some("uid-1".into()) };
        let cases: Vec<(&str, Secret, Decision)> = vec![
            ("no expiration: kept", secret(None, |_| {}), Decision::Keep),
            ("empty expiration: kept", secret(Some(""), |_| {}), Decision::Keep),
            (
                "expires in 90 s: re-checked exactly then",
                secret(Some("2026-01-01T00:01:30Z"), |_| {}),
                Decision::RequeueAfter(Duration::from_secs(90)),
            ),
            (
                "expires in half a second",
                secret(Some("2026-01-01T00:00:00.5Z"), |_| {}),
                Decision::RequeueAfter(Duration::from_millis(500)),
            ),
            (
                "expires in a year: re-checked within a day",
                secret(Some("2027-01-01T00:00:00Z"), |_| {}),
                Decision::RequeueAfter(MAX_RECHECK),
            ),
            ("expires exactly now: deleted", secret(Some("2026-01-01T00:00:00Z"), |_| {}), delete.clone()),
            ("expired: deleted", secret(Some("2025-12-31T23:59:59Z"), |_| {}), delete.clone()),
            ("unparsable: deleted as expired", secret(Some("tomorrow"), |_| {}), delete.clone()),
            (
                "no UID known: deleted without a precondition",
                secret(Some("2025-01-01T00:00:00Z"), |s| s.metadata.uid = None),
                Decision::Delete { uid: None },
            ),
            (
                "other type: ignored",
                secret(Some("2025-01-01T00:00:00Z"), |s| s.type_ = Some("Opaque".into())),
                Decision::Ignore,
            ),
            (
                "other namespace: ignored",
                secret(Some("2025-01-01T00:00:00Z"), |s| s.metadata.namespace = Some("default".into())),
                Decision::Ignore,
            ),
        ];
        for (name, s, want) in cases {
            assert_eq!(decide(&s, now), want, "{name}");
        }
    }
}
