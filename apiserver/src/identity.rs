//! API server identity, as kube-apiserver publishes it (APIServerIdentity): each apiserver
//! on etcd keeps a Lease `kube-system/apiserver-<hash>` with the labels
//! `apiserver.kubernetes.io/identity: kube-apiserver` and `kubernetes.io/hostname`, holder
//! `<name>_<uuid>` (a new one per process), `leaseDurationSeconds` 3600, renewed every 10 s.
//!
//! The hash is SHA-256 over the hostname and the apiserver's data directory (upstream hashes
//! the hostname alone; kustos runs several apiservers on one host as readily as on several).
//! A restarted apiserver takes its Lease over with a new holder, as upstream's does.
//! kustos adds the annotation `kustos.dev/shared-pki-revision`: the revision of the shared PKI
//! record whose files this apiserver holds and follows ([`crate::pki::sync`]), which
//! `kustos ca rotate` and `kustos sa-key rotate` wait for on every live apiserver.
//!
//! Leases of apiservers that stopped are left for an hour as upstream's are
//! ([`expired`]); the newest apiserver removes them.

use std::sync::Weak;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use crate::registry::loopback::{Loopback, Write};

pub const NAMESPACE: &str = "kube-system";
pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";
pub const IDENTITY_VALUE: &str = "kube-apiserver";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The shared PKI record revision this apiserver follows.
pub const PKI_REVISION_ANNOTATION: &str = "kustos.dev/shared-pki-revision";
pub const LEASE_DURATION_SECONDS: i64 = 3600;
pub const RENEW_EVERY: Duration = Duration::from_secs(10);

/// Who this apiserver is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub holder: String,
    pub hostname: String,
}

impl Identity {
    /// `instance`: what tells this apiserver from others on the host (its data directory).
    pub fn new(hostname: &str, instance: &str) -> Identity {
        let digest = kustos_ca::fingerprint(format!("{hostname}/{instance}").as_bytes());
        let name = format!("apiserver-{}", &digest[..26]);
        let holder = format!("{name}_{}", uuid::Uuid::new_v4());
        Identity { name, holder, hostname: hostname.to_string() }
    }

    /// This host's identity for the apiserver on `data_dir`.
    pub fn for_data_dir(data_dir: &std::path::Path) -> Identity {
        let hostname = gethostname::gethostname().to_string_lossy().trim().to_ascii_lowercase();
        let instance = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        Identity::new(&hostname, &instance.to_string_lossy())
    }
}

fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The Lease to write at `now`: created, or `existing` renewed (its other fields kept).
pub fn renewed(existing: Option<&Value>, id: &Identity, pki_revision: u64, now: DateTime<Utc>) -> (Write, Value) {
    let mut lease = existing.cloned().unwrap_or_else(|| {
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": id.name, "namespace": NAMESPACE},
        })
    });
    let meta = &mut lease["metadata"];
    meta["labels"][IDENTITY_LABEL] = json!(IDENTITY_VALUE);
    meta["labels"][HOSTNAME_LABEL] = json!(id.hostname);
    if pki_revision > 0 {
        meta["annotations"][PKI_REVISION_ANNOTATION] = json!(pki_revision.to_string());
    }
    lease["spec"]["holderIdentity"] = json!(id.holder);
    lease["spec"]["leaseDurationSeconds"] = json!(LEASE_DURATION_SECONDS);
    lease["spec"]["renewTime"] = json!(timestamp(now));
    if existing.is_none_or(|e| e["spec"]["holderIdentity"] != json!(id.holder)) {
        lease["spec"]["acquireTime"] = json!(timestamp(now));
    }
    (if existing.is_some() { Write::Update } else { Write::Create }, lease)
}

/// When `lease` was last renewed.
pub fn renew_time(lease: &Value) -> Option<DateTime<Utc>> {
    let t = lease["spec"]["renewTime"].as_str()?;
    DateTime::parse_from_rfc3339(t).ok().map(|t| t.with_timezone(&Utc))
}

/// An identity Lease no apiserver has renewed within its duration (upstream's rule).
pub fn expired(lease: &Value, now: DateTime<Utc>) -> bool {
    let duration = lease["spec"]["leaseDurationSeconds"].as_i64().unwrap_or(LEASE_DURATION_SECONDS);
    renew_time(lease).is_none_or(|t| t + chrono::Duration::seconds(duration) < now)
}

/// The shared PKI revision a Lease reports (`None`: none).
pub fn pki_revision(lease: &Value) -> Option<u64> {
    lease["metadata"]["annotations"][PKI_REVISION_ANNOTATION].as_str()?.parse().ok()
}

/// An apiserver renewed its Lease within this: it runs (three renewals).
pub const LIVE_WITHIN: chrono::Duration = chrono::Duration::seconds(30);

/// Of the identity Leases at `now`, the names of the running apiservers that follow the shared
/// PKI at `revision` or later, and of those that do not (yet). Leases not renewed within
/// [`LIVE_WITHIN`] are of apiservers that stopped: neither.
pub fn followers(leases: &[Value], revision: u64, now: DateTime<Utc>) -> (Vec<String>, Vec<String>) {
    let (mut following, mut lagging) = (Vec::new(), Vec::new());
    for lease in leases {
        if lease["metadata"]["labels"][IDENTITY_LABEL] != json!(IDENTITY_VALUE)
            || renew_time(lease).is_none_or(|t| t + LIVE_WITHIN < now)
        {
            continue;
        }
        let name = lease["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if pki_revision(lease).is_some_and(|r| r >= revision) {
            following.push(name);
        } else {
            lagging.push(name);
        }
    }
    (following, lagging)
}

async fn renew(state: &dyn Loopback, id: &Identity, pki_revision: u64) -> anyhow::Result<()> {
    let def = state.find("coordination.k8s.io", "v1", "leases")?.clone();
    let existing = match state.storage().get(&def.key(Some(NAMESPACE), &id.name)).await? {
        Some(kv) => Some(crate::meta::from_stored(&kv).map_err(|e| anyhow::anyhow!("reading {}: {e}", id.name))?),
        None => None,
    };
    let now = Utc::now();
    let (write, lease) = renewed(existing.as_ref(), id, pki_revision, now);
    state
        .write_as_apiserver(&def, write, NAMESPACE, &id.name, "", &lease)
        .await
        .map_err(|e| anyhow::anyhow!("writing the Lease {NAMESPACE}/{}: {e}", id.name))?;
    // Leases of apiservers gone for longer than their duration.
    let listed = state.storage().list(&def.ns_prefix(Some(NAMESPACE)), Default::default()).await?;
    for kv in listed.items {
        let Ok(other) = crate::meta::from_stored(&kv) else { continue };
        let name = other["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if name != id.name
            && other["metadata"]["labels"][IDENTITY_LABEL] == json!(IDENTITY_VALUE)
            && expired(&other, now)
        {
            // Another apiserver may remove it first.
            let _ = state.write_as_apiserver(&def, Write::Delete, NAMESPACE, &name, "", &json!({})).await;
        }
    }
    Ok(())
}

/// Renew this apiserver's Lease every [`RENEW_EVERY`], and at once when the shared PKI
/// revision it follows changes; until the server is gone.
pub fn spawn(
    tasks: &crate::tasks::Tasks,
    state: Weak<dyn Loopback>,
    id: Identity,
    mut pki_revision: tokio::sync::watch::Receiver<u64>,
) {
    tasks.spawn("identity-lease", async move {
        let mut reported: Option<String> = None;
        loop {
            let Some(st) = state.upgrade() else { return Ok(()) };
            let revision = *pki_revision.borrow_and_update();
            match renew(&*st, &id, revision).await {
                Ok(()) => reported = None,
                Err(e) => {
                    let msg = format!("{e:#}");
                    if reported.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(error = %msg, "renewing this apiserver's identity Lease failed; retrying");
                        reported = Some(msg);
                    }
                }
            }
            drop(st);
            tokio::select! {
                _ = tokio::time::sleep(RENEW_EVERY) => {}
                changed = pki_revision.changed() => if changed.is_err() {
                    tokio::time::sleep(RENEW_EVERY).await;
                },
            }
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    #[test]
    fn names_are_stable_per_host_and_instance_and_holders_per_process() {
        let a = Identity::new("host", "127.0.0.1:6443");
        let again = Identity::new("host", "127.0.0.1:6443");
        let other = Identity::new("host", "127.0.0.1:6444");
        assert_eq!(a.name, again.name);
        assert_ne!(a.holder, again.holder);
        assert_ne!(a.name, other.name);
        assert!(a.name.starts_with("apiserver-") && a.name.len() == "apiserver-".len() + 26, "{}", a.name);
        assert!(a.holder.starts_with(&format!("{}_", a.name)));
    }

    #[test]
    fn renewing_creates_keeps_other_fields_and_reports_the_pki_revision() {
        let id = Identity::new("host", "127.0.0.1:6443");
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let (write, created) = renewed(None, &id, 0, t0);
        assert_eq!(write, Write::Create);
        assert_eq!(created["metadata"]["labels"][IDENTITY_LABEL], IDENTITY_VALUE);
        assert_eq!(created["metadata"]["labels"][HOSTNAME_LABEL], "host");
        assert_eq!(created["spec"]["leaseDurationSeconds"], 3600);
        assert_eq!(pki_revision(&created), None, "no revision before the first agreement");
        assert_eq!(renew_time(&created), Some(t0));
        let mut stored = created.clone();
        stored["metadata"]["resourceVersion"] = json!("7");
        stored["metadata"]["annotations"]["keep"] = json!("me");
        let t1 = t0 + chrono::Duration::seconds(10);
        let (write, updated) = renewed(Some(&stored), &id, 42, t1);
        assert_eq!(write, Write::Update);
        assert_eq!(updated["metadata"]["resourceVersion"], "7");
        assert_eq!(updated["metadata"]["annotations"]["keep"], "me");
        assert_eq!(pki_revision(&updated), Some(42));
        assert_eq!(renew_time(&updated), Some(t1));
        assert_eq!(updated["spec"]["acquireTime"], created["spec"]["acquireTime"], "same holder: acquired once");
        let restarted = Identity::new("host", "127.0.0.1:6443");
        let (_, taken) = renewed(Some(&stored), &restarted, 42, t1);
        assert_eq!(taken["spec"]["holderIdentity"], json!(restarted.holder));
        assert_eq!(renew_time(&taken), Some(t1));
        assert_ne!(taken["spec"]["acquireTime"], created["spec"]["acquireTime"], "a new holder acquires");
    }

    #[test]
    fn followers_table() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 1, 0).unwrap();
        let lease = |name: &str, renew: &str, revision: Option<&str>| {
            let mut l = json!({"metadata": {"name": name, "labels": {IDENTITY_LABEL: IDENTITY_VALUE}},
                "spec": {"renewTime": renew}});
            if let Some(r) = revision {
                l["metadata"]["annotations"] = json!({PKI_REVISION_ANNOTATION: r});
            }
            l
        };
        let leases = [
            lease("at", "2026-01-01T00:00:55Z", Some("10")),
            lease("past", "2026-01-01T00:00:50Z", Some("11")),
            lease("behind", "2026-01-01T00:00:55Z", Some("9")),
            lease("none-yet", "2026-01-01T00:00:55Z", None),
            lease("garbled", "2026-01-01T00:00:55Z", Some("ten")),
            lease("stopped", "2026-01-01T00:00:29Z", Some("1")),
            json!({"metadata": {"name": "other-lease"}, "spec": {"renewTime": "2026-01-01T00:00:55Z"}}),
        ];
        let (following, lagging) = followers(&leases, 10, now);
        assert_eq!(following, ["at", "past"]);
        assert_eq!(lagging, ["behind", "none-yet", "garbled"]);
    }

    /// Through the REST handlers: the first renewal creates the Lease, the next one updates
    /// it with the revision, and an identity Lease nobody renewed for over an hour goes.
    #[tokio::test]
    async fn renewing_writes_the_lease_and_removes_expired_ones() {
        let server = crate::testing::TestServer::new().await.unwrap();
        let state: &dyn Loopback = &*server.state;
        let admin = crate::testing::Caller::admin();
        let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
        let stale = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "apiserver-gone", "labels": {IDENTITY_LABEL: IDENTITY_VALUE}},
            "spec": {"holderIdentity": "apiserver-gone_x", "leaseDurationSeconds": 3600,
                     "renewTime": "2020-01-01T00:00:00.000000Z"}});
        let foreign = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "someone-elses"},
            "spec": {"holderIdentity": "x", "leaseDurationSeconds": 10, "renewTime": "2020-01-01T00:00:00.000000Z"}});
        for lease in [&stale, &foreign] {
            assert_eq!(server.post(&admin, leases, lease).await.status.as_u16(), 201);
        }
        let id = Identity::new("host", "/data");
        renew(state, &id, 0).await.unwrap();
        let mine = server.get(&admin, &format!("{leases}/{}", id.name)).await;
        assert_eq!(mine.status.as_u16(), 200);
        assert_eq!(mine.body["spec"]["holderIdentity"], json!(id.holder));
        assert_eq!(pki_revision(&mine.body), None);
        assert_eq!(
            server.get(&admin, &format!("{leases}/apiserver-gone")).await.status.as_u16(),
            404,
            "expired: removed"
        );
        assert_eq!(
            server.get(&admin, &format!("{leases}/someone-elses")).await.status.as_u16(),
            200,
            "not an identity Lease"
        );
        renew(state, &id, 7).await.unwrap();
        let mine = server.get(&admin, &format!("{leases}/{}", id.name)).await;
        assert_eq!(pki_revision(&mine.body), Some(7));
    }

    #[test]
    fn expiry_table() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let lease = |renew: Option<&str>, secs: Option<i64>| json!({"spec": {"renewTime": renew, "leaseDurationSeconds": secs}});
        let cases = [
            ("renewed just now", lease(Some("2026-01-01T00:00:00Z"), Some(3600)), false),
            ("renewed 59 minutes ago", lease(Some("2025-12-31T23:01:00Z"), Some(3600)), false),
            ("renewed 61 minutes ago", lease(Some("2025-12-31T22:59:00Z"), Some(3600)), true),
            ("default duration", lease(Some("2025-12-31T22:59:00Z"), None), true),
            ("never renewed", lease(None, Some(3600)), true),
            ("unreadable time", lease(Some("yesterday"), Some(3600)), true),
        ];
        for (name, l, want) in cases {
            assert_eq!(expired(&l, t0), want, "{name}");
        }
    }
}
