//! Reconciliation of the default RBAC policy, at every start.
//!
//! The pure part decides what to write for one object, given the stored one (if any):
//!
//! - roles: a missing role is created; an existing one gets the expected labels and
//!   annotations merged in (existing values win), the expected rules that its rules do not
//!   cover appended, and the expected aggregationRule selectors it lacks appended (an
//!   aggregationRule the expected role does not have is removed);
//! - bindings: a missing binding is created; one whose roleRef differs is deleted and
//!   recreated; otherwise labels and annotations are merged and missing subjects appended;
//! - an existing object annotated `rbac.authorization.kubernetes.io/autoupdate: "false"` is
//!   left alone.
//!
//! With `remove_extra` (not used at start) the existing rules/subjects/selectors are replaced
//! by the expected ones instead of being extended.
//!
//! [`ensure_default_policy`] applies it to every object of the default policy through the
//! REST create/update/delete paths, as `system:apiserver`.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::defaults::{default_policy, PolicyOptions};
use super::rules::covers;
use crate::error::ApiError;
use crate::registry::loopback::{Loopback, Write};
use crate::registry::ResourceDef;

/// Annotation by which an object opts out of reconciliation (value `"false"`).
pub const AUTO_UPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// The write a reconciliation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    None,
    Create,
    Update,
    /// Delete the existing object and create the expected one (a binding's roleRef changed).
    Recreate,
}

/// A Role or ClusterRole.
pub trait RuleOwner: Clone {
    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
    fn rules(&self) -> &[PolicyRule];
    fn set_rules(&mut self, rules: Vec<PolicyRule>);
    fn aggregation_rule(&self) -> Option<&AggregationRule> {
        None
    }
    fn set_aggregation_rule(&mut self, _rule: Option<AggregationRule>) {}
}

impl RuleOwner for Role {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn rules(&self) -> &[PolicyRule] {
        self.rules.as_deref().unwrap_or_default()
    }
    fn set_rules(&mut self, rules: Vec<PolicyRule>) {
        self.rules = Some(rules);
    }
}

impl RuleOwner for ClusterRole {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn rules(&self) -> &[PolicyRule] {
        self.rules.as_deref().unwrap_or_default()
    }
    fn set_rules(&mut self, rules: Vec<PolicyRule>) {
        self.rules = Some(rules);
    }
    fn aggregation_rule(&self) -> Option<&AggregationRule> {
        self.aggregation_rule.as_ref()
    }
    fn set_aggregation_rule(&mut self, rule: Option<AggregationRule>) {
        self.aggregation_rule = rule;
    }
}

/// A RoleBinding or ClusterRoleBinding.
pub trait Binding: Clone {
    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
    fn role_ref(&self) -> &RoleRef;
    fn subjects(&self) -> &[Subject];
    fn set_subjects(&mut self, subjects: Vec<Subject>);
}

macro_rules! binding_impl {
    ($t:ty) => {
        impl Binding for $t {
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
            fn role_ref(&self) -> &RoleRef {
                &self.role_ref
            }
            fn subjects(&self) -> &[Subject] {
                self.subjects.as_deref().unwrap_or_default()
            }
            fn set_subjects(&mut self, subjects: Vec<Subject>) {
                self.subjects = Some(subjects);
            }
        }
    };
}
binding_impl!(RoleBinding);
binding_impl!(ClusterRoleBinding);

/// What to write for one role.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleResult<T> {
    /// The object to create or update (for `None`/protected: the existing one, merged).
    pub role: T,
    pub missing_rules: Vec<PolicyRule>,
    pub extra_rules: Vec<PolicyRule>,
    pub missing_selectors: Vec<LabelSelector>,
    pub extra_selectors: Vec<LabelSelector>,
    pub operation: Operation,
    /// The existing object opted out: nothing is written.
    pub protected: bool,
}

/// What to write for one binding.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingResult<T> {
    pub binding: T,
    pub missing_subjects: Vec<Subject>,
    pub extra_subjects: Vec<Subject>,
    pub operation: Operation,
    pub protected: bool,
}

fn is_protected(meta: &ObjectMeta) -> bool {
    meta.annotations.as_ref().and_then(|a| a.get(AUTO_UPDATE_ANNOTATION)).is_some_and(|v| v == "false")
}

/// Expected entries overlaid by existing ones; None only when both are None.
fn merge(
    expected: Option<&BTreeMap<String, String>>,
    existing: Option<&BTreeMap<String, String>>,
) -> Option<BTreeMap<String, String>> {
    if expected.is_none() && existing.is_none() {
        return None;
    }
    let mut out = expected.cloned().unwrap_or_default();
    out.extend(existing.cloned().unwrap_or_default());
    Some(out)
}

/// Merge labels and annotations; true when they changed.
fn merge_meta(target: &mut ObjectMeta, expected: &ObjectMeta) -> bool {
    let annotations = merge(expected.annotations.as_ref(), target.annotations.as_ref());
    let labels = merge(expected.labels.as_ref(), target.labels.as_ref());
    let changed = annotations != target.annotations || labels != target.labels;
    target.annotations = annotations;
    target.labels = labels;
    changed
}

/// A selector with empty lists and maps as absent (semantic equality).
fn normalized(s: &LabelSelector) -> LabelSelector {
    let mut s = s.clone();
    if s.match_labels.as_ref().is_some_and(BTreeMap::is_empty) {
        s.match_labels = None;
    }
    if let Some(exprs) = s.match_expressions.as_mut() {
        for e in exprs.iter_mut() {
            if e.values.as_ref().is_some_and(Vec::is_empty) {
                e.values = None;
            }
        }
    }
    if s.match_expressions.as_ref().is_some_and(Vec::is_empty) {
        s.match_expressions = None;
    }
    s
}

/// The selectors of `servant` that `owner` does not have.
fn uncovered_selectors(owner: Option<&AggregationRule>, servant: Option<&AggregationRule>) -> Vec<LabelSelector> {
    let Some(servant) = servant else { return Vec::new() };
    let wanted = servant.cluster_role_selectors.as_deref().unwrap_or_default();
    let Some(owner) = owner else { return wanted.to_vec() };
    let held: Vec<LabelSelector> =
        owner.cluster_role_selectors.as_deref().unwrap_or_default().iter().map(normalized).collect();
    wanted.iter().filter(|s| !held.contains(&normalized(s))).cloned().collect()
}

/// Reconcile one role against what is stored.
pub fn reconcile_role<T: RuleOwner>(existing: Option<&T>, expected: &T, remove_extra: bool) -> RoleResult<T> {
    let Some(existing) = existing else {
        return RoleResult {
            role: expected.clone(),
            missing_rules: expected.rules().to_vec(),
            extra_rules: Vec::new(),
            missing_selectors: expected
                .aggregation_rule()
                .and_then(|a| a.cluster_role_selectors.clone())
                .unwrap_or_default(),
            extra_selectors: Vec::new(),
            operation: Operation::Create,
            protected: false,
        };
    };
    let mut role = existing.clone();
    let mut operation = Operation::None;
    if merge_meta(role.meta_mut(), expected.meta()) {
        operation = Operation::Update;
    }
    let (_, extra_rules) = covers(expected.rules(), existing.rules());
    let (_, missing_rules) = covers(existing.rules(), expected.rules());
    if !remove_extra && !missing_rules.is_empty() {
        let mut rules = role.rules().to_vec();
        rules.extend(missing_rules.iter().cloned());
        role.set_rules(rules);
        operation = Operation::Update;
    } else if remove_extra && (!missing_rules.is_empty() || !extra_rules.is_empty()) {
        role.set_rules(expected.rules().to_vec());
        operation = Operation::Update;
    }
    let extra_selectors = uncovered_selectors(expected.aggregation_rule(), existing.aggregation_rule());
    let missing_selectors = uncovered_selectors(existing.aggregation_rule(), expected.aggregation_rule());
    if expected.aggregation_rule().is_none() && existing.aggregation_rule().is_some() {
        role.set_aggregation_rule(None);
        operation = Operation::Update;
    } else if !remove_extra && !missing_selectors.is_empty() {
        let mut rule = role.aggregation_rule().cloned().unwrap_or_default();
        rule.cluster_role_selectors.get_or_insert_with(Vec::new).extend(missing_selectors.iter().cloned());
        role.set_aggregation_rule(Some(rule));
        operation = Operation::Update;
    } else if remove_extra && (!missing_selectors.is_empty() || !extra_selectors.is_empty()) {
        role.set_aggregation_rule(expected.aggregation_rule().cloned());
        operation = Operation::Update;
    }
    RoleResult {
        role,
        missing_rules,
        extra_rules,
        missing_selectors,
        extra_selectors,
        operation,
        protected: is_protected(existing.meta()),
    }
}

fn subject_key(s: &Subject) -> (&str, &str, &str, &str) {
    (&s.kind, s.api_group.as_deref().unwrap_or(""), &s.name, s.namespace.as_deref().unwrap_or(""))
}

/// Items of `a` not in `b` (first occurrences only).
fn subjects_missing(a: &[Subject], b: &[Subject]) -> Vec<Subject> {
    let mut out: Vec<Subject> = Vec::new();
    for s in a {
        let k = subject_key(s);
        if !b.iter().any(|x| subject_key(x) == k) && !out.iter().any(|x| subject_key(x) == k) {
            out.push(s.clone());
        }
    }
    out
}

/// Reconcile one binding against what is stored.
pub fn reconcile_binding<T: Binding>(existing: Option<&T>, expected: &T, remove_extra: bool) -> BindingResult<T> {
    let Some(existing) = existing else {
        return BindingResult {
            binding: expected.clone(),
            missing_subjects: expected.subjects().to_vec(),
            extra_subjects: Vec::new(),
            operation: Operation::Create,
            protected: false,
        };
    };
    let protected = is_protected(existing.meta());
    if expected.role_ref() != existing.role_ref() {
        return BindingResult {
            binding: expected.clone(),
            missing_subjects: Vec::new(),
            extra_subjects: Vec::new(),
            operation: Operation::Recreate,
            protected,
        };
    }
    let mut binding = existing.clone();
    let mut operation = Operation::None;
    if merge_meta(binding.meta_mut(), expected.meta()) {
        operation = Operation::Update;
    }
    let missing_subjects = subjects_missing(expected.subjects(), existing.subjects());
    let extra_subjects = subjects_missing(existing.subjects(), expected.subjects());
    if !remove_extra && !missing_subjects.is_empty() {
        let mut subjects = binding.subjects().to_vec();
        subjects.extend(missing_subjects.iter().cloned());
        binding.set_subjects(subjects);
        operation = Operation::Update;
    } else if remove_extra && (!missing_subjects.is_empty() || !extra_subjects.is_empty()) {
        binding.set_subjects(expected.subjects().to_vec());
        operation = Operation::Update;
    }
    BindingResult { binding, missing_subjects, extra_subjects, operation, protected }
}

// ---------------------------------------------------------------------------------------
// Applying the default policy
// ---------------------------------------------------------------------------------------

/// How often one object is retried when it changes under us.
const ATTEMPTS: usize = 5;

fn find_def<'a>(state: &'a dyn Loopback, group: &str, resource: &str) -> anyhow::Result<&'a ResourceDef> {
    state.find(group, "v1", resource)
}

async fn write(
    state: &dyn Loopback,
    def: &ResourceDef,
    verb: Write,
    namespace: &str,
    name: &str,
    body: Value,
) -> Result<(), ApiError> {
    state.write_as_apiserver(def, verb, namespace, name, "", &body).await
}

/// The stored object (with its resourceVersion), if any.
async fn read<T: DeserializeOwned>(
    state: &dyn Loopback,
    def: &ResourceDef,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<T>> {
    let ns = (!namespace.is_empty()).then_some(namespace);
    let Some(kv) = state.storage().get(&def.key(ns, name)).await? else { return Ok(None) };
    let v = crate::meta::from_stored(&kv)?;
    Ok(Some(serde_json::from_value(v)?))
}

/// Create `namespace` if it does not exist.
async fn ensure_namespace(state: &dyn Loopback, namespace: &str) -> anyhow::Result<()> {
    let def = find_def(state, "", "namespaces")?;
    if state.storage().get(&def.key(None, namespace)).await?.is_some() {
        return Ok(());
    }
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    match write(state, def, Write::Create, "", namespace, body).await {
        Ok(()) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(anyhow::anyhow!("creating namespace {namespace}: {e}")),
    }
}

fn describe_rules(rules: &[PolicyRule]) -> String {
    rules.iter().map(super::rules::compact_string).collect::<Vec<_>>().join(", ")
}

async fn ensure_role<T>(state: &dyn Loopback, resource: &str, expected: &T) -> anyhow::Result<()>
where
    T: RuleOwner + Serialize + DeserializeOwned,
{
    let def = find_def(state, crate::registry::rbac::GROUP, resource)?;
    let name = expected.meta().name.clone().unwrap_or_default();
    let namespace = expected.meta().namespace.clone().unwrap_or_default();
    let what = format!("{}.{}/{name}", def.singular, def.group);
    for _ in 0..ATTEMPTS {
        let existing: Option<T> = read(state, def, &namespace, &name).await?;
        let result = reconcile_role(existing.as_ref(), expected, false);
        if result.protected {
            if result.operation != Operation::None {
                tracing::warn!(
                    object = %what,
                    missing = %describe_rules(&result.missing_rules),
                    "skipped reconcile-protected object with missing permissions"
                );
            }
            return Ok(());
        }
        let body = serde_json::to_value(&result.role)?;
        let outcome = match result.operation {
            Operation::None => return Ok(()),
            Operation::Create => {
                if !namespace.is_empty() {
                    ensure_namespace(state, &namespace).await?;
                }
                write(state, def, Write::Create, &namespace, &name, body).await
            }
            Operation::Update | Operation::Recreate => write(state, def, Write::Update, &namespace, &name, body).await,
        };
        match outcome {
            Ok(()) => {
                if result.operation == Operation::Create {
                    tracing::debug!(object = %what, "created default RBAC object");
                } else {
                    tracing::info!(
                        object = %what,
                        added = %describe_rules(&result.missing_rules),
                        "updated default RBAC object with additional permissions"
                    );
                }
                return Ok(());
            }
            Err(ApiError::AlreadyExists { .. } | ApiError::NotFound { .. } | ApiError::Conflict { .. }) => continue,
            Err(e) => anyhow::bail!("{what}: {e}"),
        }
    }
    anyhow::bail!("{what}: exceeded maximum attempts")
}

async fn ensure_binding<T>(state: &dyn Loopback, resource: &str, expected: &T) -> anyhow::Result<()>
where
    T: Binding + Serialize + DeserializeOwned,
{
    let def = find_def(state, crate::registry::rbac::GROUP, resource)?;
    let name = expected.meta().name.clone().unwrap_or_default();
    let namespace = expected.meta().namespace.clone().unwrap_or_default();
    let what = format!("{}.{}/{name}", def.singular, def.group);
    for _ in 0..ATTEMPTS {
        let existing: Option<T> = read(state, def, &namespace, &name).await?;
        let result = reconcile_binding(existing.as_ref(), expected, false);
        if result.protected {
            if result.operation != Operation::None {
                tracing::warn!(object = %what, "skipped reconcile-protected object with missing subjects");
            }
            return Ok(());
        }
        let body = serde_json::to_value(&result.binding)?;
        let outcome = match result.operation {
            Operation::None => return Ok(()),
            Operation::Update => write(state, def, Write::Update, &namespace, &name, body).await,
            Operation::Create | Operation::Recreate => {
                if result.operation == Operation::Recreate {
                    let uid = existing.as_ref().and_then(|e| e.meta().uid.clone()).unwrap_or_default();
                    let pre = json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}});
                    match write(state, def, Write::Delete, &namespace, &name, pre).await {
                        Ok(()) | Err(ApiError::NotFound { .. }) => {}
                        Err(ApiError::Conflict { .. }) => continue,
                        Err(e) => anyhow::bail!("{what}: {e}"),
                    }
                } else if !namespace.is_empty() {
                    ensure_namespace(state, &namespace).await?;
                }
                let mut fresh = result.binding.clone();
                let m = fresh.meta_mut();
                m.resource_version = None;
                m.uid = None;
                write(state, def, Write::Create, &namespace, &name, serde_json::to_value(&fresh)?).await
            }
        };
        match outcome {
            Ok(()) => {
                tracing::debug!(object = %what, operation = ?result.operation, "reconciled default RBAC object");
                return Ok(());
            }
            Err(ApiError::AlreadyExists { .. } | ApiError::NotFound { .. } | ApiError::Conflict { .. }) => continue,
            Err(e) => anyhow::bail!("{what}: {e}"),
        }
    }
    anyhow::bail!("{what}: exceeded maximum attempts")
}

/// Create the default roles and bindings that are missing and reconcile the existing ones
/// (cluster roles, cluster role bindings, roles, role bindings, in that order). Every object
/// is tried; the error lists those that failed.
pub async fn ensure_default_policy(state: &dyn Loopback, opts: &PolicyOptions) -> anyhow::Result<()> {
    use futures::future::join_all;
    let policy = default_policy(opts);
    // The objects of one kind are independent: written concurrently, they share commits.
    let mut results = join_all(policy.cluster_roles.iter().map(|r| ensure_role(state, "clusterroles", r))).await;
    results.extend(
        join_all(policy.cluster_role_bindings.iter().map(|b| ensure_binding(state, "clusterrolebindings", b))).await,
    );
    results.extend(join_all(policy.roles.iter().map(|r| ensure_role(state, "roles", r))).await);
    results.extend(join_all(policy.role_bindings.iter().map(|b| ensure_binding(state, "rolebindings", b))).await);
    let failures: Vec<String> = results.into_iter().filter_map(|r| r.err().map(|e| e.to_string())).collect();
    if !failures.is_empty() {
        anyhow::bail!("reconciling the default RBAC policy: {}", failures.join("; "));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn rule(verbs: &[&str], resources: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            api_groups: Some(vec![String::new()]),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    fn cr(rules: Vec<PolicyRule>, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ClusterRole {
        ClusterRole {
            metadata: ObjectMeta {
                name: Some("r".into()),
                labels: if labels.is_empty() { None } else { map(labels) },
                annotations: if annotations.is_empty() { None } else { map(annotations) },
                ..Default::default()
            },
            rules: Some(rules),
            aggregation_rule: None,
        }
    }

    fn selector(k: &str, v: &str) -> LabelSelector {
        LabelSelector { match_labels: map(&[(k, v)]), match_expressions: None }
    }

    fn with_agg(mut r: ClusterRole, selectors: Vec<LabelSelector>) -> ClusterRole {
        r.aggregation_rule = Some(AggregationRule { cluster_role_selectors: Some(selectors) });
        r
    }

    #[test]
    fn roles_reconcile_like_upstream() {
        let boot = [("kubernetes.io/bootstrapping", "rbac-defaults")];
        let expected = cr(vec![rule(&["get", "list"], &["pods"])], &boot, &[(AUTO_UPDATE_ANNOTATION, "true")]);
        type Case<'a> = (&'a str, Option<ClusterRole>, Operation, bool, Option<ClusterRole>);
        let cases: Vec<Case> = vec![
            ("missing → create", None, Operation::Create, false, Some(expected.clone())),
            ("equal → none", Some(expected.clone()), Operation::None, false, None),
            (
                "extra rules are kept",
                Some(cr(vec![rule(&["get", "list", "watch"], &["pods"])], &boot, &[(AUTO_UPDATE_ANNOTATION, "true")])),
                Operation::None,
                false,
                None,
            ),
            (
                "missing rule appended as its pieces",
                Some(cr(vec![rule(&["get"], &["pods"])], &boot, &[(AUTO_UPDATE_ANNOTATION, "true")])),
                Operation::Update,
                false,
                Some(cr(
                    vec![rule(&["get"], &["pods"]), rule(&["list"], &["pods"])],
                    &boot,
                    &[(AUTO_UPDATE_ANNOTATION, "true")],
                )),
            ),
            (
                "labels and annotations merged, existing values win",
                Some(cr(vec![rule(&["*"], &["*"])], &[("kubernetes.io/bootstrapping", "mine"), ("x", "y")], &[])),
                Operation::Update,
                false,
                Some(cr(
                    vec![rule(&["*"], &["*"])],
                    &[("kubernetes.io/bootstrapping", "mine"), ("x", "y")],
                    &[(AUTO_UPDATE_ANNOTATION, "true")],
                )),
            ),
            (
                "protected: reported, not to be written",
                Some(cr(vec![], &boot, &[(AUTO_UPDATE_ANNOTATION, "false")])),
                Operation::Update,
                true,
                None,
            ),
        ];
        for (name, existing, op, protected, want) in cases {
            let got = reconcile_role(existing.as_ref(), &expected, false);
            assert_eq!((got.operation, got.protected), (op, protected), "{name}");
            if let Some(w) = want {
                assert_eq!(got.role, w, "{name}");
            }
        }
        // remove_extra replaces the rules.
        let existing =
            cr(vec![rule(&["get", "list", "delete"], &["pods"])], &boot, &[(AUTO_UPDATE_ANNOTATION, "true")]);
        let got = reconcile_role(Some(&existing), &expected, true);
        assert_eq!(got.operation, Operation::Update);
        assert_eq!(got.role.rules, expected.rules);
        assert_eq!(got.extra_rules, vec![rule(&["delete"], &["pods"])]);
    }

    #[test]
    fn aggregation_selectors_reconcile() {
        let expected = with_agg(cr(vec![], &[], &[]), vec![selector("a", "1"), selector("b", "1")]);
        let existing = with_agg(
            cr(vec![rule(&["get"], &["pods"])], &[], &[]),
            vec![
                LabelSelector { match_labels: map(&[("a", "1")]), match_expressions: Some(vec![]) },
                selector("c", "1"),
            ],
        );
        let got = reconcile_role(Some(&existing), &expected, false);
        assert_eq!(got.operation, Operation::Update);
        assert_eq!(got.missing_selectors, vec![selector("b", "1")]);
        assert_eq!(got.role.aggregation_rule.as_ref().unwrap().cluster_role_selectors.as_ref().unwrap().len(), 3);
        assert_eq!(got.role.rules, existing.rules, "aggregated rules are kept");
        // An aggregation rule the default does not have is removed.
        let plain = cr(vec![rule(&["get"], &["pods"])], &[], &[]);
        let got = reconcile_role(Some(&existing), &plain, false);
        assert_eq!(got.operation, Operation::Update);
        assert!(got.role.aggregation_rule.is_none());
        // Selector expressions compare semantically.
        let expr = |values: Option<Vec<String>>| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "k".into(),
                operator: "Exists".into(),
                values,
            }]),
        };
        let a = with_agg(cr(vec![], &[], &[]), vec![expr(None)]);
        let b = with_agg(cr(vec![], &[], &[]), vec![expr(Some(vec![]))]);
        assert_eq!(reconcile_role(Some(&a), &b, false).operation, Operation::None);
        // Roles never carry aggregation rules.
        let role = Role {
            metadata: ObjectMeta {
                name: Some("x".into()),
                namespace: Some("kube-system".into()),
                ..Default::default()
            },
            rules: Some(vec![rule(&["get"], &["pods"])]),
        };
        assert_eq!(reconcile_role(Some(&role), &role, false).operation, Operation::None);
    }

    fn subject(kind: &str, name: &str) -> Subject {
        let api_group = (kind != "ServiceAccount").then(|| "rbac.authorization.k8s.io".to_string());
        let namespace = (kind == "ServiceAccount").then(|| "kube-system".to_string());
        Subject { kind: kind.into(), name: name.into(), api_group, namespace }
    }

    fn crb(role: &str, subjects: Vec<Subject>, annotations: &[(&str, &str)]) -> ClusterRoleBinding {
        ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some("b".into()),
                uid: Some("u1".into()),
                annotations: if annotations.is_empty() { None } else { map(annotations) },
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: role.into(),
            },
            subjects: Some(subjects),
        }
    }

    #[test]
    fn bindings_reconcile_like_upstream() {
        let mut expected = crb("view", vec![subject("Group", "g"), subject("ServiceAccount", "sa")], &[]);
        expected.metadata.uid = None;
        type Case<'a> = (&'a str, Option<ClusterRoleBinding>, Operation, bool, Option<Vec<Subject>>);
        let cases: Vec<Case> = vec![
            ("missing → create", None, Operation::Create, false, Some(expected.subjects.clone().unwrap())),
            (
                "same → none",
                Some(crb("view", vec![subject("ServiceAccount", "sa"), subject("Group", "g")], &[])),
                Operation::None,
                false,
                None,
            ),
            (
                "extra subjects kept, missing appended",
                Some(crb("view", vec![subject("User", "u"), subject("Group", "g")], &[])),
                Operation::Update,
                false,
                Some(vec![subject("User", "u"), subject("Group", "g"), subject("ServiceAccount", "sa")]),
            ),
            (
                "roleRef differs → recreate",
                Some(crb("edit", vec![], &[])),
                Operation::Recreate,
                false,
                Some(expected.subjects.clone().unwrap()),
            ),
            (
                "protected",
                Some(crb("edit", vec![], &[(AUTO_UPDATE_ANNOTATION, "false")])),
                Operation::Recreate,
                true,
                None,
            ),
        ];
        for (name, existing, op, protected, subjects) in cases {
            let got = reconcile_binding(existing.as_ref(), &expected, false);
            assert_eq!((got.operation, got.protected), (op, protected), "{name}");
            if let Some(s) = subjects {
                assert_eq!(got.binding.subjects.unwrap(), s, "{name}");
            }
        }
        // An absent apiGroup equals an empty one.
        let mut sa = subject("ServiceAccount", "sa");
        sa.api_group = Some(String::new());
        let existing = crb("view", vec![subject("Group", "g"), sa], &[]);
        assert_eq!(reconcile_binding(Some(&existing), &expected, false).operation, Operation::None);
        // remove_extra replaces the subjects.
        let existing =
            crb("view", vec![subject("User", "u"), subject("Group", "g"), subject("ServiceAccount", "sa")], &[]);
        let got = reconcile_binding(Some(&existing), &expected, true);
        assert_eq!(got.operation, Operation::Update);
        assert_eq!(got.extra_subjects, vec![subject("User", "u")]);
        assert_eq!(got.binding.subjects, expected.subjects);
    }
}
