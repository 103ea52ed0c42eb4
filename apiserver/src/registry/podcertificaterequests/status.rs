//! A PodCertificateRequest's `/status` rules (`ValidatePodCertificateRequestStatusUpdate`):
//! what enters is the new and the stored object (the spec already carried over) and `now`;
//! what leaves is every field error, upstream's messages.
//!
//! - `status.conditions`: only `Issued`, `Denied` and `Failed`, at most one of them, status
//!   `True`, each a valid `metav1.Condition` (reason, `lastTransitionTime` set...);
//! - once issued, denied or failed, the status never changes again;
//! - denying or failing sets nothing but the condition;
//! - issuing sets `certificateChain` (PEM certificates, the leaf issued to the requested key,
//!   at most 100 KiB, valid DNS names and email addresses), `notBefore` and `notAfter` equal
//!   to the leaf's (`notBefore` within 5 minutes of `now`), a lifetime of at least an hour and
//!   at most `spec.maxExpirationSeconds`, and `beginRefreshAt` at least 10 minutes after
//!   `notBefore` and 10 minutes before `notAfter`;
//! - anything else leaves the status as it was.
//!
//! Who may write it (`sign` on the signer) is admission's (`PodCertificateRequestSigning`).

use chrono::{DateTime, Duration, Utc};
use kustos_ca::pod_certificate::{self as pc, condition};
use serde_json::{json, Value};

use crate::error::FieldError;
use crate::registry::shared::{get_at, invalid_shown, is_zero_time, str_at, too_long};
use crate::validation;

const OMITTED: &str = "\"<value omitted>\"";
const MAX_REASON: usize = 1024;
const MAX_MESSAGE: usize = 32768;

fn conditions(obj: &Value) -> &[Value] {
    get_at(obj, &["status", "conditions"]).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn cond_str<'a>(c: &'a Value, key: &str) -> &'a str {
    c.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Whether `obj` has the terminal condition `type_` with status `True`.
pub fn has_condition(obj: &Value, type_: &str) -> bool {
    conditions(obj).iter().any(|c| cond_str(c, "type") == type_ && cond_str(c, "status") == "True")
}

fn is_terminal(obj: &Value) -> bool {
    condition::TERMINAL.iter().any(|t| has_condition(obj, t))
}

fn time_at(obj: &Value, key: &str) -> Option<DateTime<Utc>> {
    let s = str_at(obj, &["status", key])?;
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc))
}

/// A status with its times as instants, so that two spellings of one time compare equal
/// (upstream compares `metav1.Time` values, not their text).
fn normalized(status: Option<&Value>) -> Value {
    let mut s = status.cloned().unwrap_or_else(|| json!({}));
    let canon = |v: &mut Value| {
        if let Some(t) = v.as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok()) {
            *v = json!(t.with_timezone(&Utc).timestamp());
        }
    };
    if let Some(m) = s.as_object_mut() {
        m.retain(|_, v| !v.is_null() && *v != json!("") && *v != json!([]));
        for key in ["notBefore", "beginRefreshAt", "notAfter"] {
            if let Some(v) = m.get_mut(key) {
                canon(v);
            }
        }
        for c in m.get_mut("conditions").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(v) = c.get_mut("lastTransitionTime") {
                canon(v);
            }
        }
    }
    s
}

/// `metav1validation.ValidateConditions`.
fn validate_conditions(conds: &[Value], errs: &mut Vec<FieldError>) {
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (i, c) in conds.iter().enumerate() {
        let path = format!("status.conditions[{i}]");
        let t = cond_str(c, "type");
        if !seen.insert(t) {
            errs.push(FieldError::duplicate(format!("{path}.type"), &json!(t)));
        }
        for m in validation::is_qualified_name(t) {
            errs.push(FieldError::invalid(format!("{path}.type"), &json!(t), m));
        }
        let s = cond_str(c, "status");
        if !["True", "False", "Unknown"].contains(&s) {
            errs.push(FieldError::not_supported(format!("{path}.status"), &json!(s), &["False", "True", "Unknown"]));
        }
        if c.get("observedGeneration").and_then(Value::as_i64).is_some_and(|g| g < 0) {
            let g = c.get("observedGeneration").cloned().unwrap_or(Value::Null);
            errs.push(FieldError::invalid(
                format!("{path}.observedGeneration"),
                &g,
                "must be greater than or equal to zero",
            ));
        }
        if is_zero_time(c.get("lastTransitionTime")) {
            errs.push(FieldError::required(format!("{path}.lastTransitionTime"), "must be set"));
        }
        let reason = cond_str(c, "reason");
        if reason.is_empty() {
            errs.push(FieldError::required(format!("{path}.reason"), "must be set"));
        } else {
            if !is_condition_reason(reason) {
                errs.push(FieldError::invalid(
                    format!("{path}.reason"),
                    &json!(reason),
                    validation::regex_error(
                        "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'",
                        "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?",
                        &["my_name", "MY_NAME", "MyName", "ReasonA,ReasonB", "ReasonA:ReasonB"],
                    ),
                ));
            }
            if reason.len() > MAX_REASON {
                errs.push(too_long(format!("{path}.reason"), MAX_REASON));
            }
        }
        if cond_str(c, "message").len() > MAX_MESSAGE {
            errs.push(too_long(format!("{path}.message"), MAX_MESSAGE));
        }
    }
}

/// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`
fn is_condition_reason(r: &str) -> bool {
    let b = r.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':');
    let end = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_';
    match b {
        [] => false,
        [first] => first.is_ascii_alphabetic(),
        [first, mid @ .., last] => first.is_ascii_alphabetic() && mid.iter().all(inner) && end(last),
    }
}

/// See the module documentation.
pub fn validate_status_update(new: &Value, old: &Value, now: DateTime<Utc>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let terminal: Vec<&str> = condition::TERMINAL.to_vec();
    let mut known = 0;
    for (i, c) in conditions(new).iter().enumerate() {
        let t = cond_str(c, "type");
        if terminal.contains(&t) {
            known += 1;
            if known > 1 {
                errs.push(FieldError::invalid(
                    format!("status.conditions[{i}].type"),
                    &json!(t),
                    "There may be at most one condition with type \"Issued\", \"Denied\", or \"Failed\"",
                ));
            }
            if cond_str(c, "status") != "True" {
                errs.push(FieldError::not_supported(
                    format!("status.conditions[{i}].status"),
                    &json!(cond_str(c, "status")),
                    &["True"],
                ));
            }
        } else {
            errs.push(FieldError::not_supported(format!("status.conditions[{i}].type"), &json!(t), &terminal));
        }
    }
    validate_conditions(conditions(new), &mut errs);
    if !errs.is_empty() {
        return errs;
    }
    let (new_status, old_status) = (new.get("status"), old.get("status"));
    if is_terminal(old) {
        if normalized(new_status) != normalized(old_status) {
            errs.push(invalid_shown(
                "status",
                OMITTED,
                "immutable after PodCertificateRequest is issued, denied, or failed",
            ));
        }
        return errs;
    }
    if has_condition(new, condition::DENIED) || has_condition(new, condition::FAILED) {
        let only_conditions = json!({"conditions": conditions(new)});
        if normalized(new_status) != normalized(Some(&only_conditions)) {
            errs.push(invalid_shown(
                "status",
                OMITTED,
                "non-condition status fields must be empty when denying or failing the PodCertificateRequest",
            ));
        }
        return errs;
    }
    if has_condition(new, condition::ISSUED) {
        return validate_issued(new, old, now);
    }
    if normalized(new_status) != normalized(old_status) {
        errs.push(invalid_shown(
            "status",
            OMITTED,
            "status is immutable unless transitioning to \"Issued\", \"Denied\", or \"Failed\"",
        ));
    }
    errs
}

fn validate_issued(new: &Value, old: &Value, now: DateTime<Utc>) -> Vec<FieldError> {
    const CHAIN: &str = "status.certificateChain";
    let chain = str_at(new, &["status", "certificateChain"]).unwrap_or("");
    if chain.len() > pc::MAX_CERTIFICATE_CHAIN_SIZE {
        return vec![too_long(CHAIN, pc::MAX_CERTIFICATE_CHAIN_SIZE)];
    }
    let leaf = match pc::read_chain(chain) {
        Ok(leaf) => leaf,
        Err(p) => return vec![invalid_shown(CHAIN, OMITTED, &p.to_string())],
    };
    let mut errs: Vec<FieldError> =
        pc::leaf_name_problems(&leaf).into_iter().map(|(v, d)| FieldError::invalid(CHAIN, &json!(v), d)).collect();
    match super::requested_key(old) {
        None => {
            return vec![invalid_shown("spec.pkixPublicKey", OMITTED, "must be a valid PKIX-serialized public key")];
        }
        Some(want) if leaf.key.as_ref() != Some(&want) => {
            errs.push(invalid_shown(CHAIN, OMITTED, "leaf certificate was not issued to the requested public key"));
            return errs;
        }
        Some(_) => {}
    }
    let (not_before, not_after, refresh) =
        (time_at(new, "notBefore"), time_at(new, "notAfter"), time_at(new, "beginRefreshAt"));
    if not_before.is_none() {
        errs.push(FieldError::required(
            "status.notBefore",
            "must be present and consistent with the issued certificate",
        ));
    }
    if not_after.is_none() {
        errs.push(FieldError::required(
            "status.notAfter",
            "must be present and consistent with the issued certificate",
        ));
    }
    if refresh.is_none() {
        errs.push(FieldError::required(
            "status.beginRefreshAt",
            "must be present and in the range [notbefore+10min, notafter-10min]",
        ));
    }
    let (Some(not_before), Some(not_after), Some(refresh)) = (not_before, not_after, refresh) else { return errs };
    if !errs.is_empty() {
        return errs;
    }
    let shown = |t: DateTime<Utc>| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    if not_before != leaf.not_before {
        return vec![FieldError::invalid(
            "status.notBefore",
            &shown(not_before),
            "must be set to the NotBefore time encoded in the leaf certificate",
        )];
    }
    let skew = Duration::minutes(5);
    if !(not_before > now - skew && not_before < now + skew) {
        return vec![FieldError::invalid(
            "status.notBefore",
            &shown(not_before),
            "must be set to within 5 minutes of kube-apiserver's current time",
        )];
    }
    if not_after != leaf.not_after {
        return vec![FieldError::invalid(
            "status.notAfter",
            &shown(not_after),
            "must be set to the NotAfter time encoded in the leaf certificate",
        )];
    }
    let lifetime = leaf.not_after - leaf.not_before;
    let shown_lifetime = json!(go_duration(lifetime));
    if lifetime < Duration::hours(1) {
        return vec![FieldError::invalid(CHAIN, &shown_lifetime, "leaf certificate lifetime must be >= 1 hour")];
    }
    let max = get_at(old, &["spec", "maxExpirationSeconds"])
        .and_then(Value::as_i64)
        .unwrap_or(super::DEFAULT_MAX_EXPIRATION_SECONDS);
    if lifetime > Duration::seconds(max) {
        return vec![FieldError::invalid(
            CHAIN,
            &shown_lifetime,
            format!("leaf certificate lifetime must be <= spec.maxExpirationSeconds ({max})"),
        )];
    }
    if refresh < not_before + Duration::minutes(10) {
        return vec![FieldError::invalid(
            "status.beginRefreshAt",
            &shown(refresh),
            "must be at least 10 minutes after status.notBefore",
        )];
    }
    if refresh > not_after - Duration::minutes(10) {
        return vec![FieldError::invalid(
            "status.beginRefreshAt",
            &shown(refresh),
            "must be at least 10 minutes before status.notAfter",
        )];
    }
    errs
}

/// Go's `time.Duration` string for whole seconds (`24h0m0s`, `30m0s`).
fn go_duration(d: Duration) -> String {
    let s = d.num_seconds();
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{h}h{m}m{sec}s")
    } else if m > 0 {
        format!("{m}m{sec}s")
    } else {
        format!("{sec}s")
    }
}
