//! rbac.authorization.k8s.io/v1 `roles`, `clusterroles`, `rolebindings`, `clusterrolebindings`,
//! after upstream's `pkg/registry/rbac/*/strategy.go`, `pkg/apis/rbac/v1/defaults.go` and
//! `pkg/apis/rbac/validation`.
//!
//! Names follow the path-segment rule (the caller applies it). Escalation checks (a user may
//! only grant what they hold) are authorization's job, not the strategy's.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::rbac::v1 as rbacv1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use super::shared::{
    age_column, child_obj, col, creation_age, get_at, go_string_slice, invalid_shown, str_at, AGE_DESCRIPTION,
};
use super::{decode, decode_update, typed_roundtrip, Column, ResourceDef, Strategy, TableStrategy, WriteStrategy};
use crate::error::FieldError;
use crate::validation;

/// The RBAC API group.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// All rbac.authorization.k8s.io resources served.
pub fn resources() -> Vec<ResourceDef> {
    let def = |resource, singular, kind, namespaced, strategy: Arc<dyn Strategy>, schema| ResourceDef {
        group: GROUP,
        version: "v1",
        resource,
        singular,
        kind,
        namespaced,
        short_names: &[],
        categories: &[],
        subresources: &[],
        create_only: false,
        strategy,
        schema,
    };
    vec![
        def(
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
            false,
            Arc::new(ClusterRoleBindingStrategy),
            |g| g.subschema_for::<rbacv1::ClusterRoleBinding>(),
        ),
        def("clusterroles", "clusterrole", "ClusterRole", false, Arc::new(ClusterRoleStrategy), |g| {
            g.subschema_for::<rbacv1::ClusterRole>()
        }),
        def("rolebindings", "rolebinding", "RoleBinding", true, Arc::new(RoleBindingStrategy), |g| {
            g.subschema_for::<rbacv1::RoleBinding>()
        }),
        def("roles", "role", "Role", true, Arc::new(RoleStrategy), |g| g.subschema_for::<rbacv1::Role>()),
    ]
}

// ---------------------------------------------------------------------------------------
// Rules and roles
// ---------------------------------------------------------------------------------------

/// `ValidatePolicyRule`.
fn validate_policy_rule(rule: &rbacv1::PolicyRule, namespaced: bool, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let len = |v: &Option<Vec<String>>| v.as_ref().map_or(0, Vec::len);
    if rule.verbs.is_empty() {
        errs.push(FieldError::required(format!("{path}.verbs"), "verbs must contain at least one value"));
    }
    if let Some(urls) = rule.non_resource_urls.as_ref().filter(|u| !u.is_empty()) {
        let shown = go_string_slice(urls);
        let field = format!("{path}.nonResourceURLs");
        if namespaced {
            errs.push(invalid_shown(&field, &shown, "namespaced rules cannot apply to non-resource URLs"));
        }
        if len(&rule.api_groups) > 0 || len(&rule.resources) > 0 || len(&rule.resource_names) > 0 {
            errs.push(invalid_shown(
                &field,
                &shown,
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return errs;
    }
    if len(&rule.api_groups) == 0 {
        errs.push(FieldError::required(
            format!("{path}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if len(&rule.resources) == 0 {
        errs.push(FieldError::required(
            format!("{path}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
    errs
}

fn validate_rules(rules: Option<&Vec<rbacv1::PolicyRule>>, namespaced: bool) -> Vec<FieldError> {
    rules
        .map(|rs| {
            rs.iter()
                .enumerate()
                .flat_map(|(i, r)| validate_policy_rule(r, namespaced, &format!("rules[{i}]")))
                .collect()
        })
        .unwrap_or_default()
}

/// `IsValidLabelValue`.
fn label_value_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = v.as_bytes();
    let ok = b.is_empty()
        || (b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric());
    if !ok {
        errs.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string());
    }
    errs
}

/// `ValidateLabelSelector` (invalid label values are not tolerated).
fn validate_label_selector(sel: &LabelSelector, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let labels_path = format!("{path}.matchLabels");
    for (k, v) in sel.match_labels.iter().flatten() {
        for m in validation::is_qualified_name(k) {
            errs.push(FieldError::invalid(&labels_path, &json!(k), m));
        }
        for m in label_value_errors(v) {
            errs.push(FieldError::invalid(&labels_path, &json!(v), m));
        }
    }
    for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(FieldError::required(
                        format!("{p}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(FieldError::forbidden(
                        format!("{p}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            op => errs.push(FieldError::invalid(format!("{p}.operator"), &json!(op), "not a valid selector operator")),
        }
        for m in validation::is_qualified_name(&req.key) {
            errs.push(FieldError::invalid(format!("{p}.key"), &json!(req.key), m));
        }
        for (j, v) in values.iter().enumerate() {
            for m in label_value_errors(v) {
                errs.push(FieldError::invalid(format!("{p}.values[{j}]"), &json!(v), m));
            }
        }
    }
    errs
}

/// `roles`: rules may not name non-resource URLs.
pub struct RoleStrategy;

/// `clusterroles`: rules and the optional `aggregationRule`.
pub struct ClusterRoleStrategy;

/// The `Created At` column of upstream's default table convertor (kinds without a printer).
fn created_at_column() -> Column {
    Column { name: "Created At", type_: "date", format: "", description: AGE_DESCRIPTION, priority: 0 }
}

/// `creationTimestamp` in UTC RFC 3339, Go's zero time when unset.
fn created_at(obj: &Value) -> Value {
    let t = str_at(obj, &["metadata", "creationTimestamp"])
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc).format("%Y-%m-%dT%H:%M:%SZ").to_string());
    json!(t.unwrap_or_else(|| "0001-01-01T00:00:00Z".to_string()))
}

impl Strategy for RoleStrategy {
    fn name_rule(&self) -> super::NameRule {
        validation::validate_path_segment_name
    }

    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<rbacv1::Role>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for RoleStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let role: rbacv1::Role = crate::typed!(decode(obj));
        validate_rules(role.rules.as_ref(), true)
    }
}

impl TableStrategy for RoleStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![created_at_column()]
    }

    fn cells(&self, obj: &Value, _now: DateTime<Utc>) -> Vec<Value> {
        vec![created_at(obj)]
    }
}

impl Strategy for ClusterRoleStrategy {
    fn name_rule(&self) -> super::NameRule {
        validation::validate_path_segment_name
    }

    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<rbacv1::ClusterRole>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for ClusterRoleStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let role: rbacv1::ClusterRole = crate::typed!(decode(obj));
        let mut errs = validate_rules(role.rules.as_ref(), false);
        if let Some(rule) = &role.aggregation_rule {
            let selectors = rule.cluster_role_selectors.as_deref().unwrap_or_default();
            if selectors.is_empty() {
                errs.push(FieldError::required(
                    "aggregationRule.clusterRoleSelectors",
                    "at least one clusterRoleSelector required if aggregationRule is non-nil",
                ));
            }
            for (i, sel) in selectors.iter().enumerate() {
                let path = format!("aggregationRule.clusterRoleSelectors[{i}]");
                let sel_errs = validate_label_selector(sel, &path);
                // LabelSelectorAsSelector fails exactly when the selector is invalid; upstream
                // then reports the nil selector it got back, rendered as the string "null".
                let unusable = !sel_errs.is_empty();
                errs.extend(sel_errs);
                if unusable {
                    errs.push(FieldError::invalid(&path, &json!("null"), "invalid label selector."));
                }
            }
        }
        errs
    }
}

impl TableStrategy for ClusterRoleStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![created_at_column()]
    }

    fn cells(&self, obj: &Value, _now: DateTime<Utc>) -> Vec<Value> {
        vec![created_at(obj)]
    }
}

// ---------------------------------------------------------------------------------------
// Bindings
// ---------------------------------------------------------------------------------------

/// `rolebindings`: roleRef to a Role or ClusterRole; roleRef immutable.
pub struct RoleBindingStrategy;

/// `clusterrolebindings`: roleRef to a ClusterRole; service account subjects need a namespace.
pub struct ClusterRoleBindingStrategy;

/// v1 defaulting of bindings: `roleRef.apiGroup` and User/Group subjects' `apiGroup`.
fn default_binding(obj: &mut Value) {
    if !obj.is_object() {
        return;
    }
    if let Some(role_ref) = child_obj(obj, &["roleRef"]) {
        if role_ref.get("apiGroup").and_then(Value::as_str).is_none_or(str::is_empty) {
            role_ref.insert("apiGroup".into(), json!(GROUP));
        }
    }
    let Some(Value::Array(subjects)) = obj.get_mut("subjects") else { return };
    for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        if matches!(kind, "User" | "Group") && s.get("apiGroup").and_then(Value::as_str).is_none_or(str::is_empty) {
            s.insert("apiGroup".into(), json!(GROUP));
        }
    }
}

/// `ValidateRoleBindingSubject`.
fn validate_subject(s: &rbacv1::Subject, namespaced: bool, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let api_group = s.api_group.as_deref().unwrap_or("");
    if s.name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name"), ""));
    }
    match s.kind.as_str() {
        "ServiceAccount" => {
            if !s.name.is_empty() {
                for m in validation::is_dns1123_subdomain(&s.name) {
                    errs.push(FieldError::invalid(format!("{path}.name"), &json!(s.name), m));
                }
            }
            if !api_group.is_empty() {
                errs.push(FieldError::not_supported(format!("{path}.apiGroup"), &json!(api_group), &[""]));
            }
            if !namespaced && s.namespace.as_deref().unwrap_or("").is_empty() {
                errs.push(FieldError::required(format!("{path}.namespace"), ""));
            }
        }
        "User" | "Group" => {
            if api_group != GROUP {
                errs.push(FieldError::not_supported(format!("{path}.apiGroup"), &json!(api_group), &[GROUP]));
            }
        }
        kind => errs.push(FieldError::not_supported(
            format!("{path}.kind"),
            &json!(kind),
            &["ServiceAccount", "User", "Group"],
        )),
    }
    errs
}

/// `ValidateRoleBinding` / `ValidateClusterRoleBinding` (metadata excepted).
fn validate_binding(
    role_ref: &rbacv1::RoleRef,
    subjects: Option<&Vec<rbacv1::Subject>>,
    namespaced: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let api_group = role_ref.api_group.as_deref().unwrap_or("");
    if api_group != GROUP {
        errs.push(FieldError::not_supported("roleRef.apiGroup", &json!(api_group), &[GROUP]));
    }
    let kinds: &[&str] = if namespaced { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    if !kinds.contains(&role_ref.kind.as_str()) {
        errs.push(FieldError::not_supported("roleRef.kind", &json!(role_ref.kind), kinds));
    }
    if role_ref.name.is_empty() {
        errs.push(FieldError::required("roleRef.name", ""));
    } else {
        for m in validation::validate_path_segment_name(&role_ref.name) {
            errs.push(FieldError::invalid("roleRef.name", &json!(role_ref.name), m));
        }
    }
    for (i, s) in subjects.into_iter().flatten().enumerate() {
        errs.extend(validate_subject(s, namespaced, &format!("subjects[{i}]")));
    }
    errs
}

/// "cannot change roleRef", with the new roleRef as Go's `%#v` prints it.
fn validate_role_ref_update(new: &rbacv1::RoleRef, old: &rbacv1::RoleRef) -> Vec<FieldError> {
    if new == old {
        return Vec::new();
    }
    let group = new.api_group.as_deref().unwrap_or_default();
    let shown = format!("rbac.RoleRef{{APIGroup:{group:?}, Kind:{:?}, Name:{:?}}}", new.kind, new.name);
    vec![invalid_shown("roleRef", &shown, "cannot change roleRef")]
}

/// `rbac.SubjectsStrings`: users, groups and `namespace/name` service accounts.
fn subject_cells(obj: &Value) -> [Value; 3] {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in get_at(obj, &["subjects"]).and_then(Value::as_array).into_iter().flatten() {
        let f = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match f("kind").as_str() {
            "ServiceAccount" => sas.push(format!("{}/{}", f("namespace"), f("name"))),
            "User" => users.push(f("name")),
            "Group" => groups.push(f("name")),
            _ => {}
        }
    }
    [json!(users.join(", ")), json!(groups.join(", ")), json!(sas.join(", "))]
}

fn binding_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        str_at(obj, &["roleRef", "kind"]).unwrap_or(""),
        str_at(obj, &["roleRef", "name"]).unwrap_or("")
    );
    let mut cells = vec![json!(role), creation_age(obj, now)];
    cells.extend(subject_cells(obj));
    cells
}

impl Strategy for RoleBindingStrategy {
    fn name_rule(&self) -> super::NameRule {
        validation::validate_path_segment_name
    }

    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<rbacv1::RoleBinding>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for RoleBindingStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        default_binding(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        default_binding(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let b: rbacv1::RoleBinding = crate::typed!(decode(obj));
        validate_binding(&b.role_ref, b.subjects.as_ref(), true)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (rbacv1::RoleBinding, rbacv1::RoleBinding) = crate::typed!(decode_update(new, old));
        validate_role_ref_update(&new.role_ref, &old.role_ref)
    }
}

impl TableStrategy for RoleBindingStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col("Role", "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.", 0),
            age_column(),
            col("Users", "Users in the roleBinding", 1),
            col("Groups", "Groups in the roleBinding", 1),
            col("ServiceAccounts", "ServiceAccounts in the roleBinding", 1),
        ]
    }

    fn cells(&self, obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
        binding_cells(obj, now)
    }
}

impl Strategy for ClusterRoleBindingStrategy {
    fn name_rule(&self) -> super::NameRule {
        validation::validate_path_segment_name
    }

    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<rbacv1::ClusterRoleBinding>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl WriteStrategy for ClusterRoleBindingStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        default_binding(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        default_binding(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let b: rbacv1::ClusterRoleBinding = crate::typed!(decode(obj));
        validate_binding(&b.role_ref, b.subjects.as_ref(), false)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (new, old): (rbacv1::ClusterRoleBinding, rbacv1::ClusterRoleBinding) =
            crate::typed!(decode_update(new, old));
        validate_role_ref_update(&new.role_ref, &old.role_ref)
    }
}

impl TableStrategy for ClusterRoleBindingStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col("Role", "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.", 0),
            age_column(),
            col("Users", "Users in the clusterRoleBinding", 1),
            col("Groups", "Groups in the clusterRoleBinding", 1),
            col("ServiceAccounts", "ServiceAccounts in the clusterRoleBinding", 1),
        ]
    }

    fn cells(&self, obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
        binding_cells(obj, now)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    type Mutation = fn(&mut Value);

    fn rendered(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::render).collect()
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&Utc)
    }

    fn base_role() -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "reader", "namespace": "default", "creationTimestamp": "2024-05-01T13:00:00+01:00"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]})
    }

    fn base_cluster_role() -> Value {
        let mut r = base_role();
        r["kind"] = json!("ClusterRole");
        r["metadata"].as_object_mut().unwrap().remove("namespace");
        r
    }

    #[test]
    fn role_rules() {
        let cases: &[(&str, bool, Mutation, &[&str])] = &[
            ("valid role", false, |_| {}, &[]),
            ("no verbs", false, |o| o["rules"][0]["verbs"] = json!([]),
             &["rules[0].verbs: Required value: verbs must contain at least one value"]),
            ("no api groups or resources", false, |o| o["rules"] = json!([{"verbs": ["get"]}]), &[
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[0].resources: Required value: resource rules must supply at least one resource",
            ]),
            ("non-resource URL in a Role", false, |o| o["rules"] = json!([{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]),
             &["rules[0].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs"]),
            ("non-resource URL in a ClusterRole", true, |o| o["rules"] = json!([{"nonResourceURLs": ["/healthz", "/version"], "verbs": ["get"]}]), &[]),
            ("mixed rule", true, |o| o["rules"][0]["nonResourceURLs"] = json!(["/api"]),
             &["rules[0].nonResourceURLs: Invalid value: []string{\"/api\"}: rules cannot apply to both regular resources and non-resource URLs"]),
            ("empty aggregation rule", true, |o| o["aggregationRule"] = json!({}),
             &["aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"]),
            ("good aggregation rule", true, |o| o["aggregationRule"] = json!({"clusterRoleSelectors": [
                {"matchLabels": {"rbac.example.com/aggregate-to-view": "true"}},
                {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}]}), &[]),
            ("bad aggregation selector", true, |o| o["aggregationRule"] = json!({"clusterRoleSelectors": [
                {"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["a"]}, {"key": "x", "operator": "Near"}]}]}), &[
                "aggregationRule.clusterRoleSelectors[0].matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                "aggregationRule.clusterRoleSelectors[0].matchExpressions[1].operator: Invalid value: \"Near\": not a valid selector operator",
                "aggregationRule.clusterRoleSelectors[0]: Invalid value: \"null\": invalid label selector.",
            ]),
            ("bad matchLabels value", true, |o| o["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"a": "-x"}}]}), &[
                "aggregationRule.clusterRoleSelectors[0].matchLabels: Invalid value: \"-x\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                "aggregationRule.clusterRoleSelectors[0]: Invalid value: \"null\": invalid label selector.",
            ]),
        ];
        for (name, cluster, mutate, want) in cases {
            let mut obj = if *cluster { base_cluster_role() } else { base_role() };
            mutate(&mut obj);
            let errs = if *cluster { ClusterRoleStrategy.validate(&obj) } else { RoleStrategy.validate(&obj) };
            assert_eq!(rendered(&errs), *want, "{name}");
        }
    }

    #[test]
    fn role_tables() {
        let c = RoleStrategy.columns();
        assert_eq!((c[0].name, c[0].type_, c.len()), ("Created At", "date", 1), "role columns");
        assert_eq!(RoleStrategy.cells(&base_role(), now()), vec![json!("2024-05-01T12:00:00Z")], "UTC RFC 3339");
        assert_eq!(ClusterRoleStrategy.cells(&json!({}), now()), vec![json!("0001-01-01T00:00:00Z")], "zero time");
    }

    fn base_binding(kind: &str) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
               "metadata": {"name": "b", "namespace": "default", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "User", "apiGroup": GROUP, "name": "alice"},
                            {"kind": "Group", "apiGroup": GROUP, "name": "devs"},
                            {"kind": "ServiceAccount", "name": "bot", "namespace": "ci"}]})
    }

    #[test]
    fn binding_defaults() {
        let mut b = json!({"roleRef": {"kind": "Role", "name": "r"},
                           "subjects": [{"kind": "User", "name": "a"}, {"kind": "ServiceAccount", "name": "s"}, {"kind": "Group", "name": "g", "apiGroup": "x"}]});
        RoleBindingStrategy.prepare_for_create(&mut b);
        assert_eq!(b["roleRef"]["apiGroup"], GROUP, "roleRef apiGroup defaults");
        assert_eq!(b["subjects"][0]["apiGroup"], GROUP, "user apiGroup defaults");
        assert!(b["subjects"][1].get("apiGroup").is_none(), "service account apiGroup stays empty");
        assert_eq!(b["subjects"][2]["apiGroup"], "x", "set apiGroup kept");
        let mut u = json!({"roleRef": {"kind": "ClusterRole", "name": "r"}});
        ClusterRoleBindingStrategy.prepare_for_update(&mut u, &b);
        assert_eq!(u["roleRef"]["apiGroup"], GROUP, "update defaults too");
    }

    #[test]
    fn binding_validation() {
        let cases: &[(&str, bool, Mutation, &[&str])] = &[
            ("valid rolebinding", false, |_| {}, &[]),
            ("valid clusterrolebinding", true, |_| {}, &[]),
            ("rolebinding to Role", false, |o| o["roleRef"]["kind"] = json!("Role"), &[]),
            ("clusterrolebinding to Role", true, |o| o["roleRef"]["kind"] = json!("Role"),
             &["roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""]),
            ("bad roleRef kind", false, |o| o["roleRef"]["kind"] = json!("Thing"),
             &["roleRef.kind: Unsupported value: \"Thing\": supported values: \"Role\", \"ClusterRole\""]),
            ("bad roleRef group", false, |o| o["roleRef"]["apiGroup"] = json!("example.com"),
             &["roleRef.apiGroup: Unsupported value: \"example.com\": supported values: \"rbac.authorization.k8s.io\""]),
            ("no roleRef name", false, |o| o["roleRef"]["name"] = json!(""), &["roleRef.name: Required value"]),
            ("roleRef name with slash", false, |o| o["roleRef"]["name"] = json!("a/b"),
             &["roleRef.name: Invalid value: \"a/b\": may not contain '/'"]),
            ("subject without name", false, |o| o["subjects"][0]["name"] = json!(""), &["subjects[0].name: Required value"]),
            ("unknown subject kind", false, |o| o["subjects"][0]["kind"] = json!("Robot"),
             &["subjects[0].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\""]),
            ("user with wrong group", false, |o| o["subjects"][0]["apiGroup"] = json!(""),
             &["subjects[0].apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\""]),
            ("service account with group", false, |o| o["subjects"][2]["apiGroup"] = json!(GROUP),
             &["subjects[2].apiGroup: Unsupported value: \"rbac.authorization.k8s.io\": supported values: \"\""]),
            ("service account bad name", false, |o| o["subjects"][2]["name"] = json!("Bot"),
             &["subjects[2].name: Invalid value: \"Bot\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
            ("rolebinding SA without namespace", false, |o| { o["subjects"][2].as_object_mut().unwrap().remove("namespace"); }, &[]),
            ("clusterrolebinding SA without namespace", true, |o| { o["subjects"][2].as_object_mut().unwrap().remove("namespace"); },
             &["subjects[2].namespace: Required value"]),
        ];
        for (name, cluster, mutate, want) in cases {
            let mut obj = base_binding(if *cluster { "ClusterRoleBinding" } else { "RoleBinding" });
            mutate(&mut obj);
            let errs =
                if *cluster { ClusterRoleBindingStrategy.validate(&obj) } else { RoleBindingStrategy.validate(&obj) };
            assert_eq!(rendered(&errs), *want, "{name}");
        }
    }

    #[test]
    fn role_ref_is_immutable() {
        let old = base_binding("RoleBinding");
        let mut new = old.clone();
        new["subjects"] = json!([]);
        assert!(RoleBindingStrategy.validate_update(&new, &old).is_empty(), "subjects may change");
        new["roleRef"]["name"] = json!("edit");
        assert_eq!(rendered(&RoleBindingStrategy.validate_update(&new, &old)), [
            "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"edit\"}: cannot change roleRef",
        ], "rolebinding");
        let old = base_binding("ClusterRoleBinding");
        let mut new = old.clone();
        new["roleRef"]["kind"] = json!("Role");
        assert_eq!(ClusterRoleBindingStrategy.validate_update(&new, &old).len(), 1, "clusterrolebinding");
    }

    #[test]
    fn binding_tables() {
        for (name, s) in [
            ("rolebinding", &RoleBindingStrategy as &dyn TableStrategy),
            ("clusterrolebinding", &ClusterRoleBindingStrategy),
        ] {
            let cols = s.columns();
            let names: Vec<&str> = cols.iter().map(|c| c.name).collect();
            assert_eq!(names, ["Role", "Age", "Users", "Groups", "ServiceAccounts"], "{name}");
            let prio: Vec<u32> = cols.iter().map(|c| c.priority).collect();
            assert_eq!(prio, [0, 0, 1, 1, 1], "{name}");
            assert_eq!(
                s.cells(&base_binding("RoleBinding"), now()),
                vec![json!("ClusterRole/view"), json!("60m"), json!("alice"), json!("devs"), json!("ci/bot"),],
                "{name}"
            );
        }
    }

    #[test]
    fn registry_lists_four_kinds() {
        let kinds: Vec<(&str, bool)> = resources().iter().map(|r| (r.kind, r.namespaced)).collect();
        assert_eq!(
            kinds,
            [("ClusterRoleBinding", false), ("ClusterRole", false), ("RoleBinding", true), ("Role", true)],
            "rbac resources"
        );
    }

    #[test]
    fn no_panics_on_odd_json() {
        let odd = [
            json!(null),
            json!([]),
            json!({"roleRef": 1, "subjects": {}, "rules": "x"}),
            json!({"subjects": [1, null]}),
        ];
        let all: [(&dyn WriteStrategy, &dyn TableStrategy); 4] = [
            (&RoleStrategy, &RoleStrategy),
            (&ClusterRoleStrategy, &ClusterRoleStrategy),
            (&RoleBindingStrategy, &RoleBindingStrategy),
            (&ClusterRoleBindingStrategy, &ClusterRoleBindingStrategy),
        ];
        for (s, t) in all {
            for o in &odd {
                let mut a = o.clone();
                s.prepare_for_create(&mut a);
                s.prepare_for_update(&mut a, o);
                let _ = s.validate(o);
                let _ = s.validate_update(o, o);
                let _ = t.cells(o, now());
            }
        }
    }
}
