//! A leader-election Lease as client-go's LeaseLock keeps it: acquire by creating the Lease,
//! renew by reading it and writing it back (resourceVersion from the read) with a new
//! `renewTime`, as long as we are its holder.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

/// `leaseDurationSeconds` of kube-controller-manager's leader election (its default).
pub const LEASE_DURATION_SECONDS: i64 = 15;

/// MicroTime as the API writes it: RFC 3339 with microseconds, UTC.
fn micro(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The Lease a new leader creates.
pub fn acquired(namespace: &str, name: &str, identity: &str, now: DateTime<Utc>) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "acquireTime": micro(now),
            "renewTime": micro(now),
            "leaseTransitions": 0,
        },
    })
}

/// The Lease as read, renewed by `identity` at `now`: the whole object written back (its
/// `metadata.resourceVersion` makes the write conditional), with only `renewTime` changed.
/// Err when someone else holds it.
pub fn renewed(lease: &Value, identity: &str, now: DateTime<Utc>) -> Result<Value, String> {
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or("");
    if holder != identity {
        return Err(format!("the lease is held by {holder:?}, not {identity:?}"));
    }
    if lease["metadata"]["resourceVersion"].as_str().unwrap_or("").is_empty() {
        return Err("the lease read has no resourceVersion".into());
    }
    let mut out = lease.clone();
    out["spec"]["renewTime"] = Value::String(micro(now));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn acquired_lease_is_held_from_now() {
        let l = acquired("kube-system", "kube-controller-manager", "me_1", at("2026-01-02T03:04:05.123456789Z"));
        let cases: &[(&str, &Value, Value)] = &[
            ("namespace", &l["metadata"]["namespace"], json!("kube-system")),
            ("name", &l["metadata"]["name"], json!("kube-controller-manager")),
            ("holder", &l["spec"]["holderIdentity"], json!("me_1")),
            ("duration", &l["spec"]["leaseDurationSeconds"], json!(15)),
            ("acquireTime in microseconds", &l["spec"]["acquireTime"], json!("2026-01-02T03:04:05.123456Z")),
            ("renewTime in microseconds", &l["spec"]["renewTime"], json!("2026-01-02T03:04:05.123456Z")),
            ("transitions", &l["spec"]["leaseTransitions"], json!(0)),
        ];
        for (name, got, want) in cases {
            assert_eq!(*got, want, "{name}");
        }
    }

    #[test]
    fn renewed_changes_only_the_renew_time_of_our_lease() {
        let t0 = at("2026-01-02T03:04:05Z");
        let now = at("2026-01-02T03:04:07.5Z");
        let mut ours = acquired("kube-system", "kcm", "me_1", t0);
        ours["metadata"]["resourceVersion"] = json!("42");
        let mut theirs = ours.clone();
        theirs["spec"]["holderIdentity"] = json!("other_2");
        let mut no_rv = ours.clone();
        no_rv["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        let mut want = ours.clone();
        want["spec"]["renewTime"] = json!("2026-01-02T03:04:07.500000Z");
        let cases: &[(&str, &Value, Result<Value, String>)] = &[
            ("our lease is renewed, resourceVersion kept", &ours, Ok(want)),
            ("someone else's is not", &theirs, Err("the lease is held by \"other_2\", not \"me_1\"".into())),
            ("a read without resourceVersion is refused", &no_rv, Err("the lease read has no resourceVersion".into())),
        ];
        for (name, lease, want) in cases {
            assert_eq!(renewed(lease, "me_1", now), *want, "{name}");
        }
    }
}
