//! flowcontrol.apiserver.k8s.io/v1 `flowschemas` and `prioritylevelconfigurations`, after
//! upstream's `pkg/registry/flowcontrol/{flowschema,prioritylevelconfiguration}/strategy.go`,
//! `pkg/apis/flowcontrol/v1/defaults.go` and `pkg/apis/flowcontrol/validation`.
//!
//! Both kinds are cluster-scoped, have a `status` subresource (create clears status, an
//! update of the main resource keeps it, `/status` keeps the spec) and track generation.
//! This file holds their shared defaults and validation, as upstream's one API group does;
//! `strategy.rs` the two strategies.
//! Only v1 is served, so `limited.nominalConcurrencyShares` may be 0 (a "jail" level) and
//! defaults to 30 when unset.
//!
//! The mandatory objects (`crate::flowcontrol::bootstrap`) are protected here: a FlowSchema
//! named `exempt` or `catch-all`, or the priority level `catch-all`, must carry exactly the
//! fixed spec; the priority level `exempt` must too, except its `spec.exempt` section.

use std::sync::Arc;

use k8s_openapi::api::flowcontrol::v1 as fcv1;
use serde_json::{json, Value};

use super::shared::{go_string_slice, invalid_shown};
use super::{decode, ResourceDef};
use crate::error::FieldError;
use crate::flowcontrol::bootstrap;
use crate::flowcontrol::shuffle::{required_entropy_bits, MAX_HASH_BITS};
use crate::validation;

mod strategy;
pub use strategy::{FlowSchemaStrategy, PriorityLevelConfigurationStrategy};

/// The API group.
pub const GROUP: &str = "flowcontrol.apiserver.k8s.io";

/// All flowcontrol.apiserver.k8s.io resources served.
pub fn resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef {
            group: GROUP,
            version: "v1",
            resource: "flowschemas",
            singular: "flowschema",
            kind: "FlowSchema",
            namespaced: false,
            short_names: &[],
            categories: &[],
            subresources: &["status"],
            create_only: false,
            strategy: Arc::new(FlowSchemaStrategy::new()),
            schema: |g| g.subschema_for::<fcv1::FlowSchema>(),
        },
        ResourceDef {
            group: GROUP,
            version: "v1",
            resource: "prioritylevelconfigurations",
            singular: "prioritylevelconfiguration",
            kind: "PriorityLevelConfiguration",
            namespaced: false,
            short_names: &[],
            categories: &[],
            subresources: &["status"],
            create_only: false,
            strategy: Arc::new(PriorityLevelConfigurationStrategy::new()),
            schema: |g| g.subschema_for::<fcv1::PriorityLevelConfiguration>(),
        },
    ]
}

// ---------------------------------------------------------------------------------------
// Defaults (v1)
// ---------------------------------------------------------------------------------------

const DEFAULT_MATCHING_PRECEDENCE: i64 = 1000;
const DEFAULT_NOMINAL_CONCURRENCY_SHARES: i64 = 30;
const DEFAULT_QUEUES: i64 = 64;
const DEFAULT_HAND_SIZE: i64 = 8;
const DEFAULT_QUEUE_LENGTH_LIMIT: i64 = 50;

/// The object at `key` of `parent` when it is an object (absent and null are Go's nil).
fn child<'a>(parent: &'a mut Value, key: &str) -> Option<&'a mut serde_json::Map<String, Value>> {
    parent.as_object_mut()?.get_mut(key)?.as_object_mut()
}

/// Set `key` to `value` when it is absent or null (a nil pointer).
fn default_nil(m: &mut serde_json::Map<String, Value>, key: &str, value: i64) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.into(), json!(value));
    }
}

/// Set `key` to `value` when it is absent, null or 0 (Go's zero value of a plain int32).
fn default_zero(m: &mut serde_json::Map<String, Value>, key: &str, value: i64) {
    if m.get(key).is_none_or(|v| v.is_null() || v.as_i64() == Some(0)) {
        m.insert(key.into(), json!(value));
    }
}

/// `SetObjectDefaults_FlowSchema`: `spec.matchingPrecedence` 0 or unset → 1000.
pub fn default_flow_schema(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    let spec = m.entry("spec").or_insert_with(|| json!({}));
    if spec.is_null() {
        *spec = json!({});
    }
    if let Some(spec) = spec.as_object_mut() {
        default_zero(spec, "matchingPrecedence", DEFAULT_MATCHING_PRECEDENCE);
    }
}

/// `SetObjectDefaults_PriorityLevelConfiguration`: `exempt` shares and lendable percent 0;
/// `limited` shares 30 and lendable percent 0 when unset (an explicit 0 stays); queuing
/// queues 64, handSize 8, queueLengthLimit 50 when 0 or unset.
pub fn default_priority_level(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec") else { return };
    if let Some(exempt) = child(spec, "exempt") {
        default_nil(exempt, "nominalConcurrencyShares", 0);
        default_nil(exempt, "lendablePercent", 0);
    }
    let Some(limited) = spec.get_mut("limited").filter(|l| l.is_object()) else { return };
    if let Some(l) = limited.as_object_mut() {
        default_nil(l, "nominalConcurrencyShares", DEFAULT_NOMINAL_CONCURRENCY_SHARES);
        default_nil(l, "lendablePercent", 0);
    }
    if let Some(queuing) = limited.get_mut("limitResponse").and_then(|lr| child(lr, "queuing")) {
        default_zero(queuing, "queues", DEFAULT_QUEUES);
        default_zero(queuing, "handSize", DEFAULT_HAND_SIZE);
        default_zero(queuing, "queueLengthLimit", DEFAULT_QUEUE_LENGTH_LIMIT);
    }
}

/// A spec as Go's `equality.Semantic` sees it: nil and empty slices or maps are equal, and
/// so are absent and zero-valued plain strings and booleans. Numbers are kept (the
/// specs' integers that could be absent are pointers, where nil and 0 differ).
pub fn semantic_form(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter().map(|(k, v)| (k.clone(), semantic_form(v))).filter(|(_, v)| !is_zero_like(v)).collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(semantic_form).collect()),
        other => other.clone(),
    }
}

fn is_zero_like(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// The defaulted spec of a bootstrap object in wire form.
fn defaulted_spec<T: serde::Serialize>(obj: &T, default: fn(&mut Value)) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    default(&mut v);
    v.get("spec").cloned().unwrap_or(Value::Null)
}

/// The spec of the mandatory FlowSchema `name`, defaulted, if it is one.
pub fn mandatory_flow_schema_spec(name: &str) -> Option<Value> {
    bootstrap::mandatory_flow_schema(name).map(|f| defaulted_spec(&f, default_flow_schema))
}

/// The spec of the mandatory priority level `name`, defaulted, if it is one.
pub fn mandatory_priority_level_spec(name: &str) -> Option<Value> {
    bootstrap::mandatory_priority_level(name).map(|p| defaulted_spec(&p, default_priority_level))
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

/// The largest number of queues of a priority level.
const MAX_QUEUES: i32 = 10_000_000;
/// The most hash bits shuffle sharding may use (`shufflesharding.MaxHashBits`).
/// The largest matching precedence (`FlowSchemaMaxMatchingPrecedence`).
const MAX_MATCHING_PRECEDENCE: i32 = 10000;
const SUPPORTED_VERBS: &[&str] =
    &["create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"];
const SUPPORTED_DISTINGUISHERS: &[&str] = &["ByNamespace", "ByUser"];
const SUPPORTED_SUBJECT_KINDS: &[&str] = &["Group", "ServiceAccount", "User"];
const SUPPORTED_TYPES: &[&str] = &["Exempt", "Limited"];
const SUPPORTED_LIMIT_RESPONSES: &[&str] = &["Queue", "Reject"];
const NS_ERR_INTRO: &str = "each member of this list must be '*' or a DNS-1123 label; ";

fn has_wildcard(items: &[String]) -> bool {
    items.iter().any(|s| s == "*")
}

/// `field.NotSupported` whose value upstream renders with `%#v`.
fn not_supported_shown(field: impl Into<String>, shown: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    FieldError {
        reason: "FieldValueNotSupported",
        field: field.into(),
        message: format!("Unsupported value: {shown}: supported values: {}", list.join(", ")),
    }
}

fn validate_verbs(verbs: &[String], path: &str, errs: &mut Vec<FieldError>) {
    let path = format!("{path}.verbs");
    if verbs.is_empty() {
        errs.push(FieldError::required(path, "verbs must contain at least one value"));
    } else if has_wildcard(verbs) {
        if verbs.len() > 1 {
            errs.push(invalid_shown(path, &go_string_slice(verbs), "if '*' is present, must not specify other verbs"));
        }
    } else if verbs.iter().any(|v| !SUPPORTED_VERBS.contains(&v.as_str())) {
        errs.push(not_supported_shown(path, &go_string_slice(verbs), SUPPORTED_VERBS));
    }
}

/// `ValidateNonResourceURLPath`.
fn validate_non_resource_url(url: &str) -> Option<&'static str> {
    if url.is_empty() {
        return Some("must not be empty");
    }
    if url == "/" {
        return None;
    }
    if !url.starts_with('/') {
        return Some("must start with slash");
    }
    if url.contains(' ') {
        return Some("must not contain white-space");
    }
    if url.contains("//") {
        return Some("must not contain double slash");
    }
    let wildcards = url.matches('*').count();
    if wildcards > 1 || (wildcards == 1 && !url.ends_with("/*")) {
        return Some("wildcard can only do suffix matching");
    }
    None
}

fn validate_resource_rule(rule: &fcv1::ResourcePolicyRule, path: &str, errs: &mut Vec<FieldError>) {
    validate_verbs(&rule.verbs, path, errs);
    let list_rule = |items: &[String], key: &str, what: &str, errs: &mut Vec<FieldError>| {
        let p = format!("{path}.{key}");
        if items.is_empty() {
            errs.push(FieldError::required(p, format!("resource rules must supply at least one {what}")));
        } else if items.len() > 1 && has_wildcard(items) {
            errs.push(invalid_shown(
                p,
                &go_string_slice(items),
                &format!("if '*' is present, must not specify other {what}s"),
            ));
        }
    };
    list_rule(&rule.api_groups, "apiGroups", "api group", errs);
    list_rule(&rule.resources, "resources", "resource", errs);
    let namespaces = rule.namespaces.as_deref().unwrap_or_default();
    let p = format!("{path}.namespaces");
    if namespaces.is_empty() && !rule.cluster_scope.unwrap_or(false) {
        errs.push(FieldError::required(
            p,
            "resource rules that are not cluster scoped must supply at least one namespace",
        ));
    } else if has_wildcard(namespaces) {
        if namespaces.len() > 1 {
            errs.push(invalid_shown(
                p,
                &go_string_slice(namespaces),
                "if '*' is present, must not specify other namespaces",
            ));
        }
    } else {
        for (i, ns) in namespaces.iter().enumerate() {
            for msg in validation::is_dns1123_label(ns) {
                errs.push(FieldError::invalid(format!("{p}[{i}]"), &json!(ns), format!("{NS_ERR_INTRO}{msg}")));
            }
        }
    }
}

fn validate_non_resource_rule(rule: &fcv1::NonResourcePolicyRule, path: &str, errs: &mut Vec<FieldError>) {
    validate_verbs(&rule.verbs, path, errs);
    let urls = &rule.non_resource_urls;
    let p = format!("{path}.nonResourceURLs");
    if urls.is_empty() {
        errs.push(FieldError::required(p, "nonResourceURLs must contain at least one value"));
    } else if has_wildcard(urls) {
        if urls.len() > 1 {
            errs.push(invalid_shown(
                p,
                &go_string_slice(urls),
                "if '*' is present, must not specify other non-resource URLs",
            ));
        }
    } else {
        for (i, url) in urls.iter().enumerate() {
            if let Some(msg) = validate_non_resource_url(url) {
                errs.push(FieldError::invalid(format!("{p}[{i}]"), &json!(url), msg));
            }
        }
    }
}

fn validate_subject(s: &fcv1::Subject, path: &str, errs: &mut Vec<FieldError>) {
    let forbid_user = |errs: &mut Vec<FieldError>| {
        if s.user.is_some() {
            errs.push(FieldError::forbidden(
                format!("{path}.user"),
                "user is forbidden when subject kind is not 'User'",
            ));
        }
    };
    let forbid_group = |errs: &mut Vec<FieldError>| {
        if s.group.is_some() {
            errs.push(FieldError::forbidden(
                format!("{path}.group"),
                "group is forbidden when subject kind is not 'Group'",
            ));
        }
    };
    let forbid_sa = |errs: &mut Vec<FieldError>| {
        if s.service_account.is_some() {
            errs.push(FieldError::forbidden(
                format!("{path}.serviceAccount"),
                "serviceAccount is forbidden when subject kind is not 'ServiceAccount'",
            ));
        }
    };
    match s.kind.as_str() {
        "ServiceAccount" => {
            let p = format!("{path}.serviceAccount");
            match &s.service_account {
                None => errs
                    .push(FieldError::required(p, "serviceAccount is required when subject kind is 'ServiceAccount'")),
                Some(sa) => {
                    if sa.name.is_empty() {
                        errs.push(FieldError::required(format!("{p}.name"), ""));
                    } else if sa.name != "*" {
                        for msg in validation::is_dns1123_subdomain(&sa.name) {
                            errs.push(FieldError::invalid(format!("{p}.name"), &json!(sa.name), msg));
                        }
                    }
                    if sa.namespace.is_empty() {
                        errs.push(FieldError::required(
                            format!("{p}.namespace"),
                            "must specify namespace for service account",
                        ));
                    } else {
                        for msg in validation::is_dns1123_label(&sa.namespace) {
                            errs.push(FieldError::invalid(format!("{p}.namespace"), &json!(sa.namespace), msg));
                        }
                    }
                }
            }
            forbid_user(errs);
            forbid_group(errs);
        }
        "User" => {
            let p = format!("{path}.user");
            match &s.user {
                None => errs.push(FieldError::required(p, "user is required when subject kind is 'User'")),
                Some(u) if u.name.is_empty() => errs.push(FieldError::required(format!("{p}.name"), "")),
                Some(_) => {}
            }
            forbid_sa(errs);
            forbid_group(errs);
        }
        "Group" => {
            let p = format!("{path}.group");
            match &s.group {
                None => errs.push(FieldError::required(p, "group is required when subject kind is 'Group'")),
                Some(g) if g.name.is_empty() => errs.push(FieldError::required(format!("{p}.name"), "")),
                Some(_) => {}
            }
            forbid_sa(errs);
            forbid_user(errs);
        }
        other => errs.push(FieldError::not_supported(format!("{path}.kind"), &json!(other), SUPPORTED_SUBJECT_KINDS)),
    }
}

fn validate_rule(rule: &fcv1::PolicyRulesWithSubjects, path: &str, errs: &mut Vec<FieldError>) {
    if rule.subjects.is_empty() {
        errs.push(FieldError::required(format!("{path}.subjects"), "subjects must contain at least one value"));
    }
    for (i, s) in rule.subjects.iter().enumerate() {
        validate_subject(s, &format!("{path}.subjects[{i}]"), errs);
    }
    let resource_rules = rule.resource_rules.as_deref().unwrap_or_default();
    let non_resource_rules = rule.non_resource_rules.as_deref().unwrap_or_default();
    if resource_rules.is_empty() && non_resource_rules.is_empty() {
        errs.push(FieldError::required(path, "at least one of resourceRules and nonResourceRules has to be non-empty"));
    }
    for (i, r) in resource_rules.iter().enumerate() {
        validate_resource_rule(r, &format!("{path}.resourceRules[{i}]"), errs);
    }
    for (i, r) in non_resource_rules.iter().enumerate() {
        validate_non_resource_rule(r, &format!("{path}.nonResourceRules[{i}]"), errs);
    }
}

/// `ValidateFlowSchemaSpec`.
fn validate_flow_schema_spec(name: &str, spec: &fcv1::FlowSchemaSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let precedence = spec.matching_precedence.unwrap_or(0);
    let p = "spec.matchingPrecedence";
    if precedence <= 0 {
        errs.push(FieldError::invalid(p, &json!(precedence), "must be a positive value"));
    }
    if precedence > MAX_MATCHING_PRECEDENCE {
        errs.push(FieldError::invalid(
            p,
            &json!(precedence),
            format!("must not be greater than {MAX_MATCHING_PRECEDENCE}"),
        ));
    }
    if precedence == 1 && name != bootstrap::EXEMPT {
        errs.push(FieldError::invalid(
            p,
            &json!(precedence),
            "only the schema named 'exempt' may have matchingPrecedence 1",
        ));
    }
    if let Some(dm) = &spec.distinguisher_method {
        if !SUPPORTED_DISTINGUISHERS.contains(&dm.type_.as_str()) {
            errs.push(not_supported_shown(
                "spec.distinguisherMethod.type",
                &format!("flowcontrol.FlowDistinguisherMethod{{Type:{:?}}}", dm.type_),
                SUPPORTED_DISTINGUISHERS,
            ));
        }
    }
    let pl = &spec.priority_level_configuration.name;
    let p = "spec.priorityLevelConfiguration.name";
    if pl.is_empty() {
        errs.push(FieldError::required(p, "must reference a priority level"));
    } else {
        for msg in validation::is_dns1123_subdomain(pl) {
            errs.push(FieldError::invalid(p, &json!(pl), msg));
        }
    }
    for (i, rule) in spec.rules.as_deref().unwrap_or_default().iter().enumerate() {
        validate_rule(rule, &format!("spec.rules[{i}]"), &mut errs);
    }
    errs
}

/// Conditions of a status: types set and distinct.
fn validate_conditions(conditions: &[Option<&str>], errs: &mut Vec<FieldError>) {
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (i, t) in conditions.iter().enumerate() {
        let t = t.unwrap_or("");
        let p = format!("status.conditions[{i}].type");
        if !seen.insert(t) {
            errs.push(FieldError::duplicate(p.clone(), &json!(t)));
        }
        if t.is_empty() {
            errs.push(FieldError::required(p, "must not be empty"));
        }
    }
}

/// `ValidateFlowSchema` over the wire form (metadata is checked by the caller).
pub fn validate_flow_schema(obj: &Value) -> Vec<FieldError> {
    let fs: fcv1::FlowSchema = crate::typed!(decode(obj));
    let name = fs.metadata.name.as_deref().unwrap_or("");
    let spec = fs.spec.clone();
    let mut errs = validate_flow_schema_spec(name, &spec);
    if let Some(fixed) = mandatory_flow_schema_spec(name) {
        let have = obj.get("spec").cloned().unwrap_or(Value::Null);
        if semantic_form(&have) != semantic_form(&fixed) {
            errs.push(FieldError::invalid("spec", &have, format!("spec of '{name}' must equal the fixed value")));
        }
    }
    let conditions = fs.status.and_then(|s| s.conditions).unwrap_or_default();
    let types: Vec<Option<&str>> = conditions.iter().map(|c| Some(c.type_.as_str())).collect();
    validate_conditions(&types, &mut errs);
    errs
}

fn validate_queuing(q: &fcv1::QueuingConfiguration, path: &str, errs: &mut Vec<FieldError>) {
    let (queues, hand, length) = (q.queues.unwrap_or(0), q.hand_size.unwrap_or(0), q.queue_length_limit.unwrap_or(0));
    if length <= 0 {
        errs.push(FieldError::invalid(format!("{path}.queueLengthLimit"), &json!(length), "must be positive"));
    }
    let qp = format!("{path}.queues");
    if queues <= 0 {
        errs.push(FieldError::invalid(qp, &json!(queues), "must be positive"));
    } else if queues > MAX_QUEUES {
        errs.push(FieldError::invalid(qp, &json!(queues), format!("must not be greater than {MAX_QUEUES}")));
    }
    let hp = format!("{path}.handSize");
    if hand <= 0 {
        errs.push(FieldError::invalid(hp, &json!(hand), "must be positive"));
    } else if hand > queues {
        errs.push(FieldError::invalid(hp, &json!(hand), format!("should not be greater than queues ({queues})")));
    } else if required_entropy_bits(queues.unsigned_abs(), hand.unsigned_abs()) > MAX_HASH_BITS {
        errs.push(FieldError::invalid(
            hp,
            &json!(hand),
            format!(
                "required entropy bits of deckSize {queues} and handSize {hand} should not be greater than {MAX_HASH_BITS}"
            ),
        ));
    }
}

fn validate_limited(l: &fcv1::LimitedPriorityLevelConfiguration, errs: &mut Vec<FieldError>) {
    let path = "spec.limited";
    let shares = l.nominal_concurrency_shares.unwrap_or(0);
    if shares < 0 {
        errs.push(FieldError::invalid(
            format!("{path}.nominalConcurrencyShares"),
            &json!(shares),
            "must be a non-negative integer",
        ));
    }
    let lr = l.limit_response.clone();
    let lp = format!("{path}.limitResponse");
    match lr.type_.as_str() {
        "Reject" => {
            if lr.queuing.is_some() {
                errs.push(FieldError::forbidden(
                    format!("{lp}.queuing"),
                    "must be nil if limited.limitResponse.type is not Limited",
                ));
            }
        }
        "Queue" => match &lr.queuing {
            None => errs.push(FieldError::required(
                format!("{lp}.queuing"),
                "must not be empty if limited.limitResponse.type is Limited",
            )),
            Some(q) => validate_queuing(q, &format!("{lp}.queuing"), errs),
        },
        other => errs.push(FieldError::not_supported(format!("{lp}.type"), &json!(other), SUPPORTED_LIMIT_RESPONSES)),
    }
    if let Some(p) = l.lendable_percent.filter(|p| !(0..=100).contains(p)) {
        errs.push(FieldError::invalid(
            format!("{path}.lendablePercent"),
            &json!(p),
            "must be between 0 and 100, inclusive",
        ));
    }
    if let Some(p) = l.borrowing_limit_percent.filter(|p| *p < 0) {
        errs.push(FieldError::invalid(
            format!("{path}.borrowingLimitPercent"),
            &json!(p),
            "if specified, must be a non-negative integer",
        ));
    }
}

fn validate_exempt(e: &fcv1::ExemptPriorityLevelConfiguration, errs: &mut Vec<FieldError>) {
    if let Some(n) = e.nominal_concurrency_shares.filter(|n| *n < 0) {
        errs.push(FieldError::invalid(
            "spec.exempt.nominalConcurrencyShares",
            &json!(n),
            "must be a non-negative integer",
        ));
    }
    if let Some(p) = e.lendable_percent.filter(|p| !(0..=100).contains(p)) {
        errs.push(FieldError::invalid(
            "spec.exempt.lendablePercent",
            &json!(p),
            "must be between 0 and 100, inclusive",
        ));
    }
}

/// `ValidatePriorityLevelConfigurationSpec` (v1: zero shares allowed).
fn validate_priority_level_spec(name: &str, spec: &fcv1::PriorityLevelConfigurationSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if (name == bootstrap::EXEMPT) != (spec.type_ == "Exempt") {
        errs.push(FieldError::invalid(
            "spec.type",
            &json!(spec.type_),
            "type must be 'Exempt' if and only if name is 'exempt'",
        ));
    }
    match spec.type_.as_str() {
        "Exempt" => {
            if spec.limited.is_some() {
                errs.push(FieldError::forbidden("spec.limited", "must be nil if the type is not Limited"));
            }
            if let Some(e) = &spec.exempt {
                validate_exempt(e, &mut errs);
            }
        }
        "Limited" => {
            if spec.exempt.is_some() {
                errs.push(FieldError::forbidden("spec.exempt", "must be nil if the type is Limited"));
            }
            match &spec.limited {
                None => errs.push(FieldError::required("spec.limited", "must not be empty when type is Limited")),
                Some(l) => validate_limited(l, &mut errs),
            }
        }
        other => errs.push(FieldError::not_supported("spec.type", &json!(other), SUPPORTED_TYPES)),
    }
    errs
}

/// `ValidateIfMandatoryPriorityLevelConfigurationObject`.
fn validate_mandatory_priority_level(name: &str, have: &Value) -> Option<FieldError> {
    let fixed = mandatory_priority_level_spec(name)?;
    let (want, compared, message) = if name == bootstrap::EXEMPT {
        // Only `spec.exempt` of the exempt level may differ.
        let mut compared = have.clone();
        if let Some(m) = compared.as_object_mut() {
            match fixed.get("exempt") {
                Some(e) => m.insert("exempt".into(), e.clone()),
                None => m.remove("exempt"),
            };
        }
        (fixed, compared, format!("spec of '{name}' except the 'spec.exempt' field must equal the fixed value"))
    } else {
        (fixed, have.clone(), format!("spec of '{name}' must equal the fixed value"))
    };
    (semantic_form(&want) != semantic_form(&compared)).then(|| FieldError::invalid("spec", have, message))
}

/// `ValidatePriorityLevelConfiguration` over the wire form (metadata is checked by the caller).
pub fn validate_priority_level(obj: &Value) -> Vec<FieldError> {
    let pl: fcv1::PriorityLevelConfiguration = crate::typed!(decode(obj));
    let name = pl.metadata.name.as_deref().unwrap_or("");
    let spec = pl.spec.clone();
    let mut errs = validate_priority_level_spec(name, &spec);
    let have = obj.get("spec").cloned().unwrap_or(Value::Null);
    errs.extend(validate_mandatory_priority_level(name, &have));
    let conditions = pl.status.and_then(|s| s.conditions).unwrap_or_default();
    let types: Vec<Option<&str>> = conditions.iter().map(|c| Some(c.type_.as_str())).collect();
    validate_conditions(&types, &mut errs);
    errs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
