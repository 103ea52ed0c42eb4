//! apiextensions.k8s.io/v1 `customresourcedefinitions`, after upstream's
//! `apiextensions-apiserver/pkg/registry/customresourcedefinition` (strategy),
//! `pkg/apis/apiextensions/validation` (validation) and the naming/establishing
//! controllers (status: `acceptedNames`, `NamesAccepted`, `Established`).
//!
//! Everything here is pure: the status a CRD should have ([`decide_status`]) and the
//! resources an established CRD serves ([`served_resources`]) are computed from values;
//! `loops/crd.rs` does the I/O.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextv1;
use serde::Deserialize as _;
use serde_json::{json, Value};

use super::custom::{self, CustomStrategy};
use super::intern::{intern, intern_list};
use super::schema::Structural;
use super::{typed_roundtrip_within, DeleteStrategy, ResourceDef, StatusStrategy, Strategy, WriteStrategy};

/// Typed bytes a CRD's decode may build per byte of its JSON (see `registry::budget`).
const CRD_BYTES_PER_JSON_BYTE: usize = 64;
use crate::error::FieldError;
use crate::validation;

pub const GROUP: &str = "apiextensions.k8s.io";
/// Finalizer that keeps a deleted CRD until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The CRD kind itself.
pub fn resources() -> Vec<ResourceDef> {
    vec![ResourceDef {
        group: GROUP,
        version: "v1",
        resource: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short_names: &["crd", "crds"],
        categories: &["api-extensions"],
        subresources: &["status"],
        create_only: false,
        strategy: Arc::new(CrdStrategy),
        schema: |g| g.subschema_for::<apiextv1::CustomResourceDefinition>(),
    }]
}

/// `customresourcedefinitions`: validation; status is owned by the server.
pub struct CrdStrategy;

fn status_condition(obj: &Value, ty: &str) -> Option<Value> {
    obj.get("status")?.get("conditions")?.as_array()?.iter().find(|c| c["type"] == ty).cloned()
}

fn set_condition(obj: &mut Value, cond: Value) {
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    let conds = obj["status"].as_object_mut().map(|m| m.entry("conditions").or_insert_with(|| json!([])));
    let Some(Value::Array(list)) = conds else { return };
    match list.iter_mut().find(|c| c["type"] == cond["type"]) {
        Some(c) => *c = cond,
        None => list.push(cond),
    }
}

impl Strategy for CrdStrategy {
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        // Schemas are B-trees of large structs: a CRD is many times its JSON once typed. Only
        // cluster administrators write them.
        typed_roundtrip_within::<apiextv1::CustomResourceDefinition>(obj, CRD_BYTES_PER_JSON_BYTE)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn status(&self) -> Option<&dyn StatusStrategy> {
        Some(self)
    }

    fn delete(&self) -> Option<&dyn DeleteStrategy> {
        Some(self)
    }
}

impl WriteStrategy for CrdStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"acceptedNames": {"kind": "", "plural": ""}, "storedVersions": []}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if let Some(m) = new.as_object_mut() {
            match old.get("status") {
                Some(s) => m.insert("status".into(), s.clone()),
                None => m.remove("status"),
            };
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_crd(obj)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if new["spec"]["group"] != old["spec"]["group"] {
            errs.push(FieldError::immutable("spec.group", &new["spec"]["group"]));
        }
        if new["spec"]["scope"] != old["spec"]["scope"] {
            errs.push(FieldError::immutable("spec.scope", &new["spec"]["scope"]));
        }
        // Every stored version must still be listed.
        let versions: Vec<&str> =
            new["spec"]["versions"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
        for (i, sv) in old["status"]["storedVersions"].as_array().into_iter().flatten().enumerate() {
            if let Some(sv) = sv.as_str().filter(|sv| !versions.contains(sv)) {
                errs.push(FieldError::invalid(
                    format!("status.storedVersions[{i}]"),
                    &json!(sv),
                    "must appear in spec.versions",
                ));
            }
        }
        errs
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

impl StatusStrategy for CrdStrategy {
    fn prepare_for_subresource(&self, _sub: &str, new: &mut Value, old: &Value) {
        if let (Some(m), Some(spec)) = (new.as_object_mut(), old.get("spec")) {
            m.insert("spec".into(), spec.clone());
        }
    }

    fn reset_fields(&self, sub: &str) -> super::ResetFields {
        match sub {
            "status" => &[&["metadata"], &["spec"]],
            _ => super::status_reset_fields(sub),
        }
    }
}

impl DeleteStrategy for CrdStrategy {
    fn prepare_for_delete(&self, obj: &mut Value, finalizers: &mut Vec<String>) {
        if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            finalizers.push(CLEANUP_FINALIZER.to_string());
        }
        set_condition(
            obj,
            json!({"type": "Terminating", "status": "True", "reason": "InstanceDeletionPending",
                   "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
                   "lastTransitionTime": crate::meta::now_rfc3339()}),
        );
    }
}

// ---------------------------------------------------------------------------------------
// Validation

fn dns1035(field: String, value: &str, errs: &mut Vec<FieldError>) {
    let problems = validation::is_dns1035_label(value);
    if !problems.is_empty() {
        errs.push(FieldError::invalid(field, &json!(value), problems.join(",")));
    }
}

const PRINTER_TYPES: &[&str] = &["integer", "number", "string", "boolean", "date"];
const PRINTER_FORMATS: &[&str] = &["int32", "int64", "float", "double", "byte", "date", "date-time", "password"];

/// `ValidateCustomResourceDefinition` for v1 (the rules kustos enforces).
pub fn validate_crd(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let crd: apiextv1::CustomResourceDefinition = match apiextv1::CustomResourceDefinition::deserialize(obj) {
        Ok(c) => c,
        Err(e) => return vec![FieldError::invalid("spec", &Value::Null, e.to_string())],
    };
    let spec = &crd.spec;
    let name = crd.metadata.name.clone().unwrap_or_default();
    let want = format!("{}.{}", spec.names.plural, spec.group);
    if name != want {
        errs.push(FieldError::invalid("metadata.name", &json!(name), "must be spec.names.plural+\".\"+spec.group"));
    }
    if spec.group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        let problems = validation::is_dns1123_subdomain(&spec.group);
        if !problems.is_empty() {
            errs.push(FieldError::invalid("spec.group", &json!(spec.group), problems.join(",")));
        } else if spec.group.split('.').count() < 2 {
            errs.push(FieldError::invalid(
                "spec.group",
                &json!(spec.group),
                "should be a domain with at least one dot",
            ));
        }
    }
    match spec.scope.as_str() {
        "Cluster" | "Namespaced" => {}
        "" => errs.push(FieldError::required("spec.scope", "")),
        other => errs.push(FieldError::not_supported("spec.scope", &json!(other), &["Cluster", "Namespaced"])),
    }
    validate_names(&spec.names, "spec.names", &mut errs);
    if spec.versions.is_empty() {
        errs.push(FieldError::required("spec.versions", "must have exactly one version marked as storage version"));
    }
    let storage = spec.versions.iter().filter(|v| v.storage).count();
    if !spec.versions.is_empty() && storage != 1 {
        errs.push(FieldError::invalid(
            "spec.versions",
            &json!(spec.versions.iter().map(|v| &v.name).collect::<Vec<_>>()),
            "must have exactly one version marked as storage version",
        ));
    }
    if !spec.versions.is_empty() && !spec.versions.iter().any(|v| v.served) {
        errs.push(FieldError::invalid(
            "spec.versions",
            &json!(spec.versions.iter().map(|v| &v.name).collect::<Vec<_>>()),
            "must have at least one version marked as served",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, v) in spec.versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        dns1035(format!("{path}.name"), &v.name, &mut errs);
        if !seen.insert(v.name.clone()) {
            errs.push(FieldError::duplicate(format!("{path}.name"), &json!(v.name)));
        }
        match v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()) {
            None => errs.push(FieldError::required(format!("{path}.schema.openAPIV3Schema"), "schemas are required")),
            Some(s) => {
                if let Err(e) = Structural::from_props(s, &format!("{path}.schema.openAPIV3Schema")) {
                    errs.extend(e);
                }
            }
        }
        if let Some(scale) = v.subresources.as_ref().and_then(|s| s.scale.as_ref()) {
            let sp = format!("{path}.subresources.scale");
            if !scale.spec_replicas_path.starts_with(".spec.") {
                errs.push(FieldError::invalid(
                    format!("{sp}.specReplicasPath"),
                    &json!(scale.spec_replicas_path),
                    "should be a json path under .spec",
                ));
            }
            if !scale.status_replicas_path.starts_with(".status.") {
                errs.push(FieldError::invalid(
                    format!("{sp}.statusReplicasPath"),
                    &json!(scale.status_replicas_path),
                    "should be a json path under .status",
                ));
            }
        }
        for (j, col) in v.additional_printer_columns.iter().flatten().enumerate() {
            let cp = format!("{path}.additionalPrinterColumns[{j}]");
            if col.name.is_empty() {
                errs.push(FieldError::required(format!("{cp}.name"), ""));
            }
            if !PRINTER_TYPES.contains(&col.type_.as_str()) {
                errs.push(FieldError::not_supported(format!("{cp}.type"), &json!(col.type_), PRINTER_TYPES));
            }
            if let Some(f) = col.format.as_deref().filter(|f| !f.is_empty() && !PRINTER_FORMATS.contains(f)) {
                errs.push(FieldError::not_supported(format!("{cp}.format"), &json!(f), PRINTER_FORMATS));
            }
            if let Some(p) = col.priority.filter(|p| *p < 0) {
                errs.push(FieldError::invalid(
                    format!("{cp}.priority"),
                    &json!(p),
                    "must be greater than or equal to 0",
                ));
            }
            if col.json_path.is_empty() {
                errs.push(FieldError::required(format!("{cp}.jsonPath"), ""));
            } else if let Err(e) = custom::JsonPath::parse(&col.json_path) {
                errs.push(FieldError::invalid(format!("{cp}.jsonPath"), &json!(col.json_path), e.to_string()));
            }
        }
    }
    errs
}

fn validate_names(n: &apiextv1::CustomResourceDefinitionNames, path: &str, errs: &mut Vec<FieldError>) {
    if n.plural.is_empty() {
        errs.push(FieldError::required(format!("{path}.plural"), ""));
    } else {
        dns1035(format!("{path}.plural"), &n.plural, errs);
    }
    if let Some(s) = n.singular.as_deref().filter(|s| !s.is_empty()) {
        dns1035(format!("{path}.singular"), s, errs);
    }
    for (i, s) in n.short_names.iter().flatten().enumerate() {
        dns1035(format!("{path}.shortNames[{i}]"), s, errs);
    }
    if n.kind.is_empty() {
        errs.push(FieldError::required(format!("{path}.kind"), ""));
    } else {
        let problems = validation::is_dns1035_label(&n.kind.to_lowercase());
        if !problems.is_empty() {
            errs.push(FieldError::invalid(format!("{path}.kind"), &json!(n.kind), problems.join(",")));
        }
    }
    if let Some(lk) = n.list_kind.as_deref().filter(|lk| !lk.is_empty()) {
        if *lk == n.kind {
            errs.push(FieldError::invalid(
                format!("{path}.listKind"),
                &json!(lk),
                "kind and listKind may not be the same",
            ));
        }
    }
    for (i, c) in n.categories.iter().flatten().enumerate() {
        dns1035(format!("{path}.categories[{i}]"), c, errs);
    }
}

// ---------------------------------------------------------------------------------------
// Status (naming and establishing)

/// Names already taken in a group: resource names (plural, singular, short names) and kinds
/// (kind, listKind).
#[derive(Debug, Default, Clone)]
pub struct TakenNames {
    pub resources: BTreeSet<String>,
    pub kinds: BTreeSet<String>,
}

impl TakenNames {
    /// The names the built-in resources of `group` use.
    pub fn builtin(reg: &super::Registry, group: &str) -> Self {
        let mut t = TakenNames::default();
        for d in reg.resources.iter().filter(|d| d.group == group) {
            t.resources.insert(d.resource.to_string());
            t.resources.insert(d.singular.to_string());
            t.resources.extend(d.short_names.iter().map(|s| s.to_string()));
            t.kinds.insert(d.kind.to_string());
            t.kinds.insert(d.list_kind());
        }
        t
    }

    /// Add the accepted names of a CRD status.
    pub fn add_accepted(&mut self, accepted: &Value) {
        for k in ["plural", "singular"] {
            if let Some(s) = accepted[k].as_str().filter(|s| !s.is_empty()) {
                self.resources.insert(s.to_string());
            }
        }
        for s in accepted["shortNames"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            self.resources.insert(s.to_string());
        }
        for k in ["kind", "listKind"] {
            if let Some(s) = accepted[k].as_str().filter(|s| !s.is_empty()) {
                self.kinds.insert(s.to_string());
            }
        }
    }
}

/// The requested names with upstream's defaults (singular = lower-case kind, listKind =
/// kind + "List").
pub fn requested_names(crd: &Value) -> Value {
    let n = &crd["spec"]["names"];
    let kind = n["kind"].as_str().unwrap_or("");
    let mut out = json!({
        "plural": n["plural"].as_str().unwrap_or(""),
        "singular": n["singular"].as_str().filter(|s| !s.is_empty()).map(str::to_string).unwrap_or_else(|| kind.to_lowercase()),
        "kind": kind,
        "listKind": n["listKind"].as_str().filter(|s| !s.is_empty()).map(str::to_string).unwrap_or_else(|| format!("{kind}List")),
    });
    if let Some(s) = n.get("shortNames").filter(|s| s.as_array().is_some_and(|a| !a.is_empty())) {
        out["shortNames"] = s.clone();
    }
    if let Some(c) = n.get("categories").filter(|s| s.as_array().is_some_and(|a| !a.is_empty())) {
        out["categories"] = c.clone();
    }
    out
}

fn condition(ty: &str, status: &str, reason: &str, message: &str, old: Option<&Value>, now: &str) -> Value {
    let since = match old {
        Some(o) if o["status"] == status => o["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    json!({"type": ty, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
}

/// The status a CRD should have, given the names other CRDs of its group (and built-in
/// resources) already use. `now` stamps changed conditions. Returns the new `status`.
pub fn decide_status(crd: &Value, taken: &TakenNames, now: &str) -> Value {
    let requested = requested_names(crd);
    let old_status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    let accepted_old = old_status.get("acceptedNames").cloned().unwrap_or_else(|| json!({}));
    let mut accepted = accepted_old.clone();
    if !accepted.is_object() {
        accepted = json!({});
    }
    let mut problem: Option<(&str, String)> = None;
    let check = |field: &str, set: &BTreeSet<String>| -> Result<(), NameInUse> {
        let want = requested[field].as_str().unwrap_or("");
        if want.is_empty() || accepted_old[field].as_str() == Some(want) {
            return Ok(());
        }
        if set.contains(want) {
            return Err(NameInUse(want.to_string()));
        }
        Ok(())
    };
    for (field, reason, set) in
        [("plural", "PluralConflict", &taken.resources), ("singular", "SingularConflict", &taken.resources)]
    {
        match check(field, set) {
            Ok(()) => accepted[field] = requested[field].clone(),
            Err(e) => problem = problem.or(Some((reason, e.to_string()))),
        }
    }
    let shorts: Vec<&str> =
        requested["shortNames"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let old_shorts: Vec<&str> =
        accepted_old["shortNames"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    match shorts.iter().find(|s| !old_shorts.contains(s) && taken.resources.contains(**s)) {
        Some(s) => problem = problem.or(Some(("ShortNamesConflict", format!("{s:?} is already in use")))),
        None => match requested.get("shortNames") {
            Some(s) => accepted["shortNames"] = s.clone(),
            None => {
                if let Some(m) = accepted.as_object_mut() {
                    m.remove("shortNames");
                }
            }
        },
    }
    for (field, reason) in [("kind", "KindConflict"), ("listKind", "ListKindConflict")] {
        match check(field, &taken.kinds) {
            Ok(()) => accepted[field] = requested[field].clone(),
            Err(e) => problem = problem.or(Some((reason, e.to_string()))),
        }
    }
    match requested.get("categories") {
        Some(c) => accepted["categories"] = c.clone(),
        None => {
            if let Some(m) = accepted.as_object_mut() {
                m.remove("categories");
            }
        }
    }
    let old_accepted_cond = status_condition(crd, "NamesAccepted");
    let old_established = status_condition(crd, "Established");
    let names_accepted = match &problem {
        Some((reason, msg)) => condition("NamesAccepted", "False", reason, msg, old_accepted_cond.as_ref(), now),
        None => {
            condition("NamesAccepted", "True", "NoConflicts", "no conflicts found", old_accepted_cond.as_ref(), now)
        }
    };
    let established_before = old_established.as_ref().is_some_and(|c| c["status"] == "True");
    let established = if established_before || problem.is_none() {
        condition(
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
            old_established.as_ref(),
            now,
        )
    } else {
        condition("Established", "False", "NotAccepted", "not all names are accepted", old_established.as_ref(), now)
    };
    let mut status = old_status;
    if !status.is_object() {
        status = json!({});
    }
    status["acceptedNames"] = accepted;
    for c in [names_accepted, established] {
        set_condition_in(&mut status, c);
    }
    let mut stored: Vec<Value> = status["storedVersions"].as_array().cloned().unwrap_or_default();
    if let Some(v) = crd["spec"]["versions"].as_array().into_iter().flatten().find(|v| v["storage"] == true) {
        if !stored.contains(&v["name"]) {
            stored.push(v["name"].clone());
        }
    }
    status["storedVersions"] = Value::Array(stored);
    status
}

fn set_condition_in(status: &mut Value, cond: Value) {
    let mut wrapper = json!({"status": std::mem::take(status)});
    set_condition(&mut wrapper, cond);
    *status = wrapper["status"].take();
}

/// Whether a CRD's endpoints are served: Established and not being deleted.
pub fn is_served(crd: &Value) -> bool {
    status_condition(crd, "Established").is_some_and(|c| c["status"] == "True") && !crate::meta::is_deleting(crd)
}

/// Upstream's version priority: GA before beta before alpha, higher numbers first, then
/// other names alphabetically.
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(v: &str) -> (u8, i64, i64, String) {
        let parse = || -> Option<(i64, u8, i64)> {
            let rest = v.strip_prefix('v')?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let major: i64 = digits.parse().ok()?;
            let tail = &rest[digits.len()..];
            if tail.is_empty() {
                return Some((major, 0, 0));
            }
            let (kind, n) = if let Some(n) = tail.strip_prefix("beta") {
                (1, n)
            } else if let Some(n) = tail.strip_prefix("alpha") {
                (2, n)
            } else {
                return None;
            };
            Some((major, kind, n.parse().ok()?))
        };
        match parse() {
            Some((major, kind, minor)) => (kind, -major, -minor, String::new()),
            None => (3, 0, 0, v.to_string()),
        }
    }
    key(a).cmp(&key(b))
}

/// A name a CRD asks for that another resource holds (the message of a `*Conflict`
/// condition).
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is already in use")]
struct NameInUse(String);

/// Why an established CRD cannot be served (logged; the CRD's kinds stay unserved).
#[derive(Debug, thiserror::Error)]
pub enum NotServable {
    #[error(transparent)]
    Decode(#[from] serde_json::Error),
    #[error("version {0} has no schema")]
    NoSchema(String),
    /// The schema is not structural: its field errors, rendered and joined.
    #[error("{0}")]
    Schema(String),
    #[error("{0}")]
    PrinterColumn(#[from] crate::registry::custom::JsonPathError),
}

/// The resources a served CRD adds: one `ResourceDef` per served version, in version
/// priority order. Names come from `status.acceptedNames`.
pub fn served_resources(crd: &Value) -> Result<Vec<ResourceDef>, NotServable> {
    let typed: apiextv1::CustomResourceDefinition = serde_json::from_value(crd.clone())?;
    let accepted = &crd["status"]["acceptedNames"];
    let group = intern(&typed.spec.group);
    let plural = accepted["plural"].as_str().unwrap_or(&typed.spec.names.plural);
    let kind = accepted["kind"].as_str().unwrap_or(&typed.spec.names.kind);
    let singular = accepted["singular"].as_str().map(str::to_string).unwrap_or_else(|| kind.to_lowercase());
    let short: Vec<String> =
        accepted["shortNames"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect();
    let categories: Vec<String> =
        accepted["categories"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect();
    let mut versions: Vec<&apiextv1::CustomResourceDefinitionVersion> =
        typed.spec.versions.iter().filter(|v| v.served).collect();
    versions.sort_by(|a, b| version_order(&a.name, &b.name));
    let mut out = Vec::new();
    for v in versions {
        let props = v
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .ok_or_else(|| NotServable::NoSchema(v.name.clone()))?;
        let structural = Structural::from_props(props, "openAPIV3Schema")
            .map_err(|e| NotServable::Schema(e.iter().map(FieldError::render).collect::<Vec<_>>().join("; ")))?;
        let status = v.subresources.as_ref().is_some_and(|s| s.status.is_some());
        let mut columns = Vec::new();
        for c in v.additional_printer_columns.iter().flatten() {
            columns.push(
                custom::printer_column(
                    &c.name,
                    &c.type_,
                    c.format.as_deref().unwrap_or(""),
                    c.description.as_deref().unwrap_or(""),
                    u32::try_from(c.priority.unwrap_or(0)).unwrap_or(0),
                    &c.json_path,
                )
                .map_err(NotServable::PrinterColumn)?,
            );
        }
        let openapi = custom::openapi_schema(&serde_json::to_value(props)?);
        out.push(ResourceDef {
            group,
            version: intern(&v.name),
            resource: intern(plural),
            singular: intern(&singular),
            kind: intern(kind),
            namespaced: typed.spec.scope == "Namespaced",
            short_names: intern_list(&short),
            categories: intern_list(&categories),
            subresources: if status { &["status"] } else { &[] },
            create_only: false,
            strategy: Arc::new(CustomStrategy { schema: Arc::new(structural), openapi, status, columns }),
            schema: |g| g.subschema_for::<serde_json::Value>(),
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn base() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.kustos.dev"},
            "spec": {
                "group": "kustos.dev", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}},
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                }],
            },
        })
    }

    type Mutation = fn(&mut Value);

    #[test]
    fn crd_validation() {
        let cases: &[(&str, Mutation, &[&str])] = &[
            ("valid", |_| {}, &[]),
            ("name mismatch", |o| o["metadata"]["name"] = json!("widget.kustos.dev"),
             &["metadata.name: Invalid value: \"widget.kustos.dev\": must be spec.names.plural+\".\"+spec.group"]),
            ("group without dot", |o| { o["spec"]["group"] = json!("kustos"); o["metadata"]["name"] = json!("widgets.kustos") },
             &["spec.group: Invalid value: \"kustos\": should be a domain with at least one dot"]),
            ("bad scope", |o| o["spec"]["scope"] = json!("Global"),
             &["spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\""]),
            ("no storage version", |o| o["spec"]["versions"][0]["storage"] = json!(false),
             &["spec.versions: Invalid value: [\"v1\"]: must have exactly one version marked as storage version"]),
            ("no versions", |o| o["spec"]["versions"] = json!([]),
             &["spec.versions: Required value: must have exactly one version marked as storage version"]),
            ("not served", |o| o["spec"]["versions"][0]["served"] = json!(false),
             &["spec.versions: Invalid value: [\"v1\"]: must have at least one version marked as served"]),
            ("missing schema", |o| { o["spec"]["versions"][0].as_object_mut().unwrap().remove("schema"); },
             &["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]),
            ("non-structural schema", |o| o["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({}),
             &["spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"]),
            ("bad plural", |o| { o["spec"]["names"]["plural"] = json!("Widgets"); o["metadata"]["name"] = json!("Widgets.kustos.dev") },
             &["spec.names.plural: Invalid value: \"Widgets\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]),
            ("missing kind", |o| o["spec"]["names"]["kind"] = json!(""), &["spec.names.kind: Required value"]),
            ("printer column path", |o| o["spec"]["versions"][0]["additionalPrinterColumns"][0]["jsonPath"] = json!("spec.size"),
             &["spec.versions[0].additionalPrinterColumns[0].jsonPath: Invalid value: \"spec.size\": must be a simple json path starting with ."]),
            ("printer column type", |o| o["spec"]["versions"][0]["additionalPrinterColumns"][0]["type"] = json!("int"),
             &["spec.versions[0].additionalPrinterColumns[0].type: Unsupported value: \"int\": supported values: \"integer\", \"number\", \"string\", \"boolean\", \"date\""]),
            ("duplicate version", |o| { let v = o["spec"]["versions"][0].clone(); let mut w = v.clone(); w["storage"] = json!(false); o["spec"]["versions"] = json!([v, w]); },
             &["spec.versions[1].name: Duplicate value: \"v1\""]),
        ];
        for (name, mutate, want) in cases {
            let mut o = base();
            mutate(&mut o);
            let got: Vec<String> = validate_crd(&o).iter().map(FieldError::render).collect();
            assert_eq!(got, *want, "case {name}");
        }
    }

    #[test]
    fn status_accepts_free_names_and_refuses_taken_ones() {
        let now = "2024-05-01T12:00:00Z";
        let mut taken_plural = TakenNames::default();
        taken_plural.resources.insert("widgets".into());
        let mut taken_kind = TakenNames::default();
        taken_kind.kinds.insert("Widget".into());
        let mut taken_short = TakenNames::default();
        taken_short.resources.insert("wd".into());
        let cases: &[(&str, &TakenNames, &str, &str, &str)] = &[
            ("no conflicts", &TakenNames::default(), "True", "NoConflicts", "True"),
            ("plural taken", &taken_plural, "False", "PluralConflict", "False"),
            ("kind taken", &taken_kind, "False", "KindConflict", "False"),
            ("short name taken", &taken_short, "False", "ShortNamesConflict", "False"),
        ];
        for (name, taken, accepted, reason, established) in cases {
            let status = decide_status(&base(), taken, now);
            let mut crd = base();
            crd["status"] = status.clone();
            let na = status_condition(&crd, "NamesAccepted").unwrap();
            assert_eq!(na["status"], *accepted, "case {name}");
            assert_eq!(na["reason"], *reason, "case {name}");
            assert_eq!(status_condition(&crd, "Established").unwrap()["status"], *established, "case {name}");
            assert_eq!(status["storedVersions"], json!(["v1"]), "case {name}");
            assert_eq!(is_served(&crd), *established == "True", "case {name}");
        }
        // Once accepted, names stay accepted and conditions keep their transition time.
        let mut crd = base();
        crd["status"] = decide_status(&crd, &TakenNames::default(), now);
        let again = decide_status(&crd, &taken_plural, "2030-01-01T00:00:00Z");
        assert_eq!(again, crd["status"], "accepted names are not re-checked against later CRDs");
        assert_eq!(again["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(again["acceptedNames"]["singular"], "widget");
    }

    #[test]
    fn served_resources_follow_version_priority() {
        let mut crd = base();
        let mut v2 = crd["spec"]["versions"][0].clone();
        v2["name"] = json!("v1beta1");
        v2["storage"] = json!(false);
        v2["subresources"] = json!({"status": {}});
        let mut v3 = v2.clone();
        v3["name"] = json!("v2alpha1");
        crd["spec"]["versions"] = json!([v2, crd["spec"]["versions"][0].clone(), v3]);
        crd["status"] = decide_status(&crd, &TakenNames::default(), "2024-05-01T12:00:00Z");
        let defs = served_resources(&crd).unwrap();
        let versions: Vec<&str> = defs.iter().map(|d| d.version).collect();
        assert_eq!(versions, ["v1", "v1beta1", "v2alpha1"]);
        assert_eq!(defs[0].key(Some("ns"), "a"), "/registry/kustos.dev/widgets/ns/a");
        assert_eq!(defs[0].short_names, &["wd"]);
        assert!(defs[0].subresources.is_empty());
        assert_eq!(defs[1].subresources, &["status"]);
    }

    #[test]
    fn version_priority_order() {
        let mut v = vec!["foo", "v1alpha1", "v11alpha2", "v1", "v2beta1", "v10", "v12alpha1", "v10beta3", "bar", "v2"];
        v.sort_by(|a, b| version_order(a, b));
        assert_eq!(v, ["v10", "v2", "v1", "v10beta3", "v2beta1", "v12alpha1", "v11alpha2", "v1alpha1", "bar", "foo"]);
    }
}
