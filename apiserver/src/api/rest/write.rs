//! create, update (PUT) and patch, of the main resource or a subresource: the strategy's
//! hooks, generic metadata, validation, admission, then a compare-and-swap write.
//!
//! Field ownership (`metadata.managedFields`, `machinery::apply`) is recorded first, as upstream's
//! field manager does it before the strategy and admission: an apply patch
//! (`application/apply-patch+yaml`) merges its configuration by the kind's schema (and may
//! create the object), every other write is an Update by `?fieldManager=` or the user
//! agent's product name. The kind's schema is built once with the served OpenAPI
//! ([`crate::openapi::OpenApi::apply_schema`]); what a write may not own comes from its
//! strategy ([`crate::registry::StatusStrategy::reset_fields`]).

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::*;
use crate::admission::{Operation, Phase};
use crate::error::{ApiError, FieldError, Result};
use crate::machinery::apply::{self, ApplyError, FieldSet, Schema, Writer};
use crate::machinery::patch::{self, PatchType};
use crate::meta;
use crate::registry::ResourceDef;
use crate::storage::{self, Rev};
use crate::validation;

fn validate_meta(def: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    let name_fn = def.strategy.name_rule();
    let empty = json!({});
    let m = obj.get("metadata").unwrap_or(&empty);
    validation::validate_object_meta(m, def.namespaced, name_fn, "metadata")
}

/// The one 422 `Invalid` for every field error found, or a 500 when one of them is the
/// server's (a stored object that does not decode: [`FieldError::internal`]).
fn invalid(def: &ResourceDef, obj: &Value, errs: Vec<FieldError>) -> ApiError {
    if let Some(e) = errs.iter().find(|e| e.reason == crate::error::INTERNAL_ERROR) {
        return ApiError::internal(e.render());
    }
    ApiError::invalid(def.group, def.kind, meta::name(obj), errs)
}

/// Server-owned metadata on create.
fn init_metadata(def: &ResourceDef, obj: &mut Value, ns: Option<&str>) {
    let tracks = def.strategy.write().is_some_and(|w| w.tracks_generation());
    let m = meta::meta_mut(obj);
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
    for k in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"] {
        m.remove(k);
    }
    if tracks {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
    match ns {
        Some(ns) if def.namespaced => {
            m.insert("namespace".into(), json!(ns));
        }
        // Cluster-scoped kinds: an empty namespace is dropped, a set one fails validation.
        _ if !def.namespaced && m.get("namespace").and_then(Value::as_str).is_some_and(str::is_empty) => {
            m.remove("namespace");
        }
        _ => {}
    }
    if m.get("generateName").and_then(Value::as_str).is_some_and(str::is_empty) {
        m.remove("generateName");
    }
}

/// The field manager of a write: `?fieldManager=`, checked as upstream's
/// `ValidateFieldManager` (a 422 about the request's `options` kind, e.g. `PatchOptions`),
/// required for an apply patch; for any other write the user agent's product name (what
/// precedes the first `/`, printable characters only, at most 128 bytes) when none is given.
pub fn field_manager(c: &Call<'_>, options: &str, apply: bool) -> Result<String> {
    let given = c.params.get("fieldManager").unwrap_or("");
    let mut errs = Vec::new();
    if apply && given.is_empty() {
        errs.push(FieldError::required("fieldManager", "is required for apply patch"));
    }
    errs.extend(validation::validate_field_manager(given, "fieldManager"));
    if !errs.is_empty() {
        return Err(ApiError::invalid("meta.k8s.io", options, "", errs));
    }
    if !given.is_empty() {
        return Ok(given.to_string());
    }
    let product = c.info.user_agent.split('/').next().unwrap_or("");
    let mut out = String::new();
    for ch in product.chars().filter(|ch| validation::is_printable(*ch)) {
        if out.len() >= validation::FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(ch);
    }
    Ok(out)
}

/// The kind's schema for field ownership (a deduced one when the kind has none).
fn apply_schema(c: &Call<'_>) -> Arc<Schema> {
    c.state.crds.current().openapi.apply_schema(c.def).unwrap_or_else(|| Arc::new(Schema::deduced()))
}

/// What a write through this request's subresource may not own.
fn reset_fields(c: &Call<'_>) -> FieldSet {
    let mut set = FieldSet::new();
    if let Some(status) = c.def.strategy.status() {
        for path in status.reset_fields(&c.info.subresource) {
            set.insert(&apply::Path::fields(path));
        }
    }
    set
}

/// How a write records field ownership.
#[derive(Clone, Copy)]
enum Ownership<'a> {
    /// An ordinary write by this manager: [`apply::update`] from the live object.
    Update(&'a str),
    /// An apply patch: the object already carries its new `managedFields`.
    Applied,
}

/// `new` with the `managedFields` an Update by `manager` leaves (from `live`, or none on
/// create). An object that cannot be stored for its size is refused (413) first: the
/// ownership of its fields is the costliest work a write does, and an object at most the
/// stored limit bounds it.
fn record_update(c: &Call<'_>, manager: &str, live: Option<&Value>, new: Value) -> Result<Value> {
    if c.info.subresource.is_empty() {
        let limit = if live.is_some() { meta::MAX_UPDATE_OBJECT_BYTES } else { meta::MAX_CREATE_OBJECT_BYTES };
        meta::check_object_size(at_least_stored(&new), limit)?;
    }
    let schema = apply_schema(c);
    let reset = reset_fields(c);
    let api_version = c.def.api_version();
    let time = meta::now_rfc3339();
    let writer = Writer {
        manager,
        api_version: &api_version,
        subresource: &c.info.subresource,
        time: &time,
        reset_fields: &reset,
    };
    Ok(apply::update(&schema, live, new, &writer).object)
}

/// A lower bound of the stored size of `obj`: its compact JSON less `status` and
/// `metadata.managedFields`, which the strategy or the field manager may drop.
fn at_least_stored(obj: &Value) -> usize {
    let len = crate::registry::budget::json_len;
    let dropped = [obj.get("status"), obj.pointer("/metadata/managedFields")];
    // Each dropped entry's key, quotes, colon and comma are left in: a bound, not the size.
    len(obj).saturating_sub(dropped.into_iter().flatten().map(len).sum())
}

pub async fn create(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    if !c.info.subresource.is_empty() {
        return Err(ApiError::MethodNotAllowed(format!(
            "create is not supported on {}/{}",
            c.def.resource, c.info.subresource
        )));
    }
    let manager = field_manager(c, "CreateOptions", false)?;
    let dry_run = c.params.dry_run()?;
    let mode = c.params.field_validation()?;
    let (raw, dups) = decode_body(c.def, body, content_type, mode)?;
    let (obj, warnings) = typed_check(c.def, raw, mode, &dups)?;
    // Namespace in the body must agree with the path.
    if c.def.namespaced {
        let body_ns = meta::namespace(&obj).to_string();
        let Some(path_ns) = c.ns() else {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        };
        if !body_ns.is_empty() && body_ns != path_ns {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
    }
    create_object(c, obj, warnings, dry_run, Ownership::Update(&manager)).await
}

/// Shared tail of create and of an apply that creates: metadata, ownership, prepare,
/// validate, admit, store.
async fn create_object(
    c: &Call<'_>,
    mut obj: Value,
    warnings: Vec<String>,
    dry_run: bool,
    ownership: Ownership<'_>,
) -> Result<Reply> {
    obj["apiVersion"] = json!(c.def.api_version());
    obj["kind"] = json!(c.def.kind);
    // As upstream: mutating admission sees the object as the client sent it, before the
    // server fills in metadata and the strategy prepares and validates it.
    admit_phase(c, Operation::Create, Phase::Mutating, Some(&obj), None).await?;
    // A client may give the new object's managedFields (an Update starts from them).
    let given_managed = obj.pointer("/metadata/managedFields").cloned();
    init_metadata(c.def, &mut obj, c.ns());
    let generate = meta::name(&obj).is_empty() && meta::meta_str(&obj, "generateName").is_some();
    if generate {
        let prefix = meta::meta_str(&obj, "generateName").unwrap_or("").to_string();
        meta::meta_mut(&mut obj).insert("name".into(), json!(validation::generate_name(&prefix)));
    }
    if let Some(managed) = given_managed {
        meta::meta_mut(&mut obj).insert("managedFields".into(), managed);
    }
    if let Ownership::Update(manager) = ownership {
        obj = record_update(c, manager, None, obj)?;
    }
    let write = c.def.strategy.write();
    if let Some(write) = write {
        write.prepare_for_create(&mut obj);
        write.prepare_for_create_by(&mut obj, c.user);
    }
    let mut errs = validate_meta(c.def, &obj);
    if let Some(write) = write {
        errs.extend(write.validate(&obj));
    }
    if !errs.is_empty() {
        return Err(invalid(c.def, &obj, errs));
    }
    admit_phase(c, Operation::Create, Phase::Validating, Some(&obj), None).await?;
    // The size and depth limits of a stored object, checked on a dry run too.
    let mut stored = meta::to_stored_new(&obj)?;
    if dry_run {
        return Ok(Reply { code: StatusCode::CREATED, body: c.object_body(obj), warnings });
    }
    let mut attempts = 0;
    loop {
        let name = meta::name(&obj).to_string();
        let key = c.def.key(c.ns(), &name);
        match c.store().create(&key, std::mem::take(&mut stored)).await {
            Ok(rev) => {
                meta::set_rv(&mut obj, rev);
                return Ok(Reply { code: StatusCode::CREATED, body: c.object_body(obj), warnings });
            }
            Err(storage::Error::AlreadyExists(_)) if generate && attempts + 1 < GENERATE_NAME_ATTEMPTS => {
                attempts += 1;
                let prefix = meta::meta_str(&obj, "generateName").unwrap_or("").to_string();
                meta::meta_mut(&mut obj).insert("name".into(), json!(validation::generate_name(&prefix)));
                stored = meta::to_stored_new(&obj)?;
            }
            Err(e) => return Err(c.storage_err(&name, e)),
        }
    }
}

/// The metadata a subresource write may not change (upstream ResetObjectMetaForStatus).
const STATUS_RESET_META: &[&str] =
    &["labels", "annotations", "finalizers", "ownerReferences", "deletionTimestamp", "generation"];
/// Metadata that always comes from the stored object.
const SERVER_META: &[&str] =
    &["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "selfLink"];

/// Spec changes bump generation for kinds that track it.
fn spec_changed(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(new) != strip(old)
}

/// Shared tail of update and patch: ownership, prepare, validate, store. `old_rev` is the
/// revision the caller read `old` at (the CAS precondition). The write is an Update by the
/// request's field manager.
pub async fn finish_update(
    c: &Call<'_>,
    old: &Value,
    old_rev: Rev,
    new: Value,
    warnings: Vec<String>,
    dry_run: bool,
) -> Result<Reply> {
    let manager = field_manager(c, "UpdateOptions", false)?;
    finish_write(c, old, old_rev, new, warnings, dry_run, Ownership::Update(&manager)).await
}

async fn finish_write(
    c: &Call<'_>,
    old: &Value,
    old_rev: Rev,
    mut new: Value,
    warnings: Vec<String>,
    dry_run: bool,
    ownership: Ownership<'_>,
) -> Result<Reply> {
    let sub = c.info.subresource.as_str();
    let name = meta::name(old).to_string();
    // Identity and server-owned metadata come from the stored object.
    new["apiVersion"] = json!(c.def.api_version());
    new["kind"] = json!(c.def.kind);
    {
        let old_meta = old.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
        let m = meta::meta_mut(&mut new);
        for k in SERVER_META {
            match old_meta.get(*k) {
                Some(v) => m.insert((*k).to_string(), v.clone()),
                None => m.remove(*k),
            };
        }
        if !sub.is_empty() && !c.def.strategy.status().is_some_and(|s| s.subresource_writes_metadata(sub)) {
            for k in STATUS_RESET_META {
                match old_meta.get(*k) {
                    Some(v) => m.insert((*k).to_string(), v.clone()),
                    None => m.remove(*k),
                };
            }
        }
        if m.get("namespace").and_then(Value::as_str).is_none_or(str::is_empty) {
            if let Some(ns) = old_meta.get("namespace") {
                m.insert("namespace".into(), ns.clone());
            }
        }
        if m.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert("name".into(), json!(name));
        }
        m.remove("resourceVersion");
    }
    if let Ownership::Update(manager) = ownership {
        new = record_update(c, manager, Some(old), new)?;
    }
    admit_phase(c, Operation::Update, Phase::Mutating, Some(&new), Some(old)).await?;
    let (write, status) = (c.def.strategy.write(), c.def.strategy.status());
    match (sub.is_empty(), write, status) {
        (true, Some(write), _) => write.prepare_for_update(&mut new, old),
        (false, _, Some(status)) => status.prepare_for_subresource(sub, &mut new, old),
        _ => {}
    }
    if sub.is_empty() && write.is_some_and(|w| w.tracks_generation()) && spec_changed(&new, old) {
        let g = old.get("metadata").and_then(|m| m.get("generation")).and_then(Value::as_i64).unwrap_or(0);
        meta::meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    // Validation.
    let mut errs = validate_meta(c.def, &new);
    let empty = json!({});
    errs.extend(validation::validate_object_meta_update(
        new.get("metadata").unwrap_or(&empty),
        old.get("metadata").unwrap_or(&empty),
    ));
    if meta::is_deleting(old) {
        let old_f = meta::finalizers(old);
        if meta::finalizers(&new).iter().any(|f| !old_f.contains(f)) {
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                "no new finalizers can be added if the object is being deleted",
            ));
        }
    }
    if let Some(write) = write {
        errs.extend(write.validate_on_update(&new, old));
    }
    match (sub.is_empty(), write, status) {
        (true, Some(write), _) => errs.extend(write.validate_update(&new, old)),
        (false, _, Some(status)) => errs.extend(status.validate_subresource(sub, &new, old)),
        _ => {}
    }
    if !errs.is_empty() {
        return Err(invalid(c.def, &new, errs));
    }
    admit_phase(c, Operation::Update, Phase::Validating, Some(&new), Some(old)).await?;
    let key = c.def.key(c.ns(), &name);
    // A write that changes nothing is not stored (the resourceVersion stays).
    let mut old_cmp = old.clone();
    meta::meta_mut(&mut old_cmp).remove("resourceVersion");
    if new == old_cmp {
        let mut same = new;
        meta::set_rv(&mut same, old_rev);
        return Ok(Reply { code: StatusCode::OK, body: c.object_body(same), warnings });
    }
    // The last finalizer removed from a deleting object completes its deletion.
    let completes_deletion = meta::is_deleting(&new) && meta::finalizers(&new).is_empty() && !is_namespace(c.def);
    // The size and depth limits of a stored object, checked on a dry run too.
    let stored = if completes_deletion { Vec::new() } else { meta::to_stored_update(&new)? };
    if dry_run {
        meta::set_rv(&mut new, old_rev);
        return Ok(Reply { code: StatusCode::OK, body: c.object_body(new), warnings });
    }
    if completes_deletion {
        let rev = c.store().delete(&key, old_rev).await.map_err(|e| c.storage_err(&name, e))?;
        meta::set_rv(&mut new, rev);
        super::delete::gc::after_delete(c.state, c.def, &new);
        return Ok(Reply { code: StatusCode::OK, body: c.object_body(new), warnings });
    }
    let rev = c.store().update(&key, stored, old_rev).await.map_err(|e| c.storage_err(&name, e))?;
    meta::set_rv(&mut new, rev);
    Ok(Reply { code: StatusCode::OK, body: c.object_body(new), warnings })
}

fn check_subresource(c: &Call<'_>, verb: &str) -> Result<()> {
    let sub = c.info.subresource.as_str();
    if !sub.is_empty() && !c.def.subresources.contains(&sub) {
        return Err(ApiError::not_found(c.def.group, &format!("{}/{sub}", c.def.resource), &c.info.name));
    }
    if !sub.is_empty() && !crate::registry::subresource_verbs(c.def, sub).contains(&verb) {
        return Err(ApiError::MethodNotAllowed(format!("{verb} is not supported on {}/{sub}", c.def.resource)));
    }
    Ok(())
}

pub async fn update(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    check_subresource(c, "update")?;
    let manager = field_manager(c, "UpdateOptions", false)?;
    let dry_run = c.params.dry_run()?;
    let mode = c.params.field_validation()?;
    let (raw, dups) = decode_body(c.def, body, content_type, mode)?;
    let (new, warnings) = typed_check(c.def, raw, mode, &dups)?;
    let name = c.info.name.clone();
    let body_name = meta::name(&new);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if c.def.namespaced {
        let body_ns = meta::namespace(&new);
        if !body_ns.is_empty() && Some(body_ns) != c.ns() {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
    }
    let key = c.def.key(c.ns(), &name);
    let kv = c.store().get(&key).await.map_err(|e| c.storage_err(&name, e))?;
    let Some(kv) = kv else { return Err(c.not_found(&name)) };
    let old = meta::from_stored(&kv)?;
    let body_rv = meta::rv(&new);
    if !body_rv.is_empty() && body_rv != kv.mod_rev.to_string() {
        return Err(ApiError::conflict(
            c.def.group,
            c.def.resource,
            &name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    finish_write(c, &old, kv.mod_rev, new, warnings, dry_run, Ownership::Update(&manager)).await
}

pub async fn patch(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    check_subresource(c, "patch")?;
    let Some(pt) = PatchType::from_content_type(content_type) else {
        return Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
        )));
    };
    if pt == PatchType::StrategicMerge && !c.def.strategy.strategic_merge_patch() {
        return Err(ApiError::UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
        ));
    }
    if pt == PatchType::Apply {
        return server_side_apply(c, body).await;
    }
    if c.params.get("force").is_some() {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![FieldError::forbidden("force", "may not be specified for non-apply patch")],
        ));
    }
    let manager = field_manager(c, "PatchOptions", false)?;
    let dry_run = c.params.dry_run()?;
    let mode = c.params.field_validation()?;
    if body.len() > MAX_BODY {
        return Err(ApiError::RequestEntityTooLarge("Request entity too large: limit is 3145728".into()));
    }
    let name = c.info.name.clone();
    let key = c.def.key(c.ns(), &name);
    let keys = patch::TableMergeKeys(c.def.strategy.merge_keys());
    // Retry on write conflicts unless the patch itself pins a resourceVersion.
    for _ in 0..8 {
        let kv = c.store().get(&key).await.map_err(|e| c.storage_err(&name, e))?;
        let Some(kv) = kv else { return Err(c.not_found(&name)) };
        let old = meta::from_stored(&kv)?;
        let patched = patch::apply_patch(&old, body, pt, &keys).map_err(|e| match e {
            patch::PatchError::BadRequest(m) => ApiError::BadRequest(m),
            patch::PatchError::TooLarge(m) => ApiError::RequestEntityTooLarge(m),
            patch::PatchError::Invalid(m) => ApiError::Invalid {
                message: m,
                subject: crate::error::Subject {
                    group: c.def.group.into(),
                    kind: c.def.kind.into(),
                    name: name.clone(),
                },
                causes: Vec::new(),
            },
        })?;
        if !patched.is_object() {
            return Err(ApiError::BadRequest("the patch produced a value that is not an object".into()));
        }
        check_type_meta(c.def, &patched)?;
        let patched_rv = meta::rv(&patched).to_string();
        let pinned = patched_rv != kv.mod_rev.to_string();
        if pinned && !patched_rv.is_empty() {
            return Err(ApiError::conflict(
                c.def.group,
                c.def.resource,
                &name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if meta::name(&patched) != name {
            return Err(invalid(
                c.def,
                &patched,
                vec![FieldError::immutable("metadata.name", &json!(meta::name(&patched)))],
            ));
        }
        let (new, warnings) = typed_check(c.def, patched, mode, &[])?;
        match finish_write(c, &old, kv.mod_rev, new, warnings, dry_run, Ownership::Update(&manager)).await {
            Err(ApiError::Conflict { .. }) if !pinned => continue,
            other => return other,
        }
    }
    Err(ApiError::conflict(c.def.group, c.def.resource, &name, "too many concurrent writes, please retry"))
}

/// An apply error as the API answers it: conflicts are a 409 with one `FieldManagerConflict`
/// cause per field, anything else the configuration's fault (400).
fn apply_error(e: ApplyError) -> ApiError {
    match e {
        ApplyError::Conflicts(conflicts, unlisted) => {
            let message = apply::conflict_report(&conflicts, unlisted);
            let causes = conflicts
                .iter()
                .map(|c| FieldError {
                    reason: "FieldManagerConflict",
                    field: c.path.to_string(),
                    message: format!("conflict with {}", c.manager),
                })
                .collect();
            ApiError::ApplyConflict { message, causes }
        }
        ApplyError::BadRequest(m) => ApiError::BadRequest(m),
    }
}

/// `metadata.managedFields` moved out of `obj` (not copied: it can be as large as the rest).
fn take_managed_fields(obj: &mut Value) -> Option<Value> {
    obj.get_mut("metadata").and_then(Value::as_object_mut).and_then(|m| m.remove("managedFields"))
}

/// PATCH with `application/apply-patch+yaml`: server-side apply of the configuration in the
/// body by `?fieldManager=` (required), taking conflicting fields when `force=true`. A
/// missing object is created (201) through the create path; an existing one goes through the
/// update path with the merged object. Write conflicts are retried on a fresh read.
async fn server_side_apply(c: &Call<'_>, body: &Bytes) -> Result<Reply> {
    let manager = field_manager(c, "PatchOptions", true)?;
    let force = c.params.flag("force")?;
    let dry_run = c.params.dry_run()?;
    let mode = c.params.field_validation()?;
    if body.len() > MAX_BODY {
        return Err(ApiError::RequestEntityTooLarge("Request entity too large: limit is 3145728".into()));
    }
    let config = patch::decode_apply_body(body).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    check_type_meta(c.def, &config)?;
    // The configuration must read as the kind, as upstream types an apply patch before it
    // merges it; the typed decoding budget this passes also bounds what the merge and the
    // field sets below build.
    drop(typed_roundtrip(c.def, &config)?);
    let name = c.info.name.clone();
    let body_name = meta::name(&config);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if c.def.namespaced {
        let body_ns = meta::namespace(&config);
        if !body_ns.is_empty() && Some(body_ns) != c.ns() {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
    }
    // What an apply sets all lands in the object: one too big to store is refused before
    // the costly merge (see `record_update`).
    if c.info.subresource.is_empty() {
        meta::check_object_size(at_least_stored(&config), meta::MAX_UPDATE_OBJECT_BYTES)?;
    }
    let schema = apply_schema(c);
    let reset = reset_fields(c);
    let api_version = c.def.api_version();
    let key = c.def.key(c.ns(), &name);
    for _ in 0..8 {
        let time = meta::now_rfc3339();
        let writer = Writer {
            manager: &manager,
            api_version: &api_version,
            subresource: &c.info.subresource,
            time: &time,
            reset_fields: &reset,
        };
        let kv = c.store().get(&key).await.map_err(|e| c.storage_err(&name, e))?;
        let Some(kv) = kv else {
            if !c.info.subresource.is_empty() {
                return Err(c.not_found(&name));
            }
            let outcome = apply::apply(&schema, None, &config, &writer, force).map_err(apply_error)?;
            let mut obj = outcome.object;
            if meta::name(&obj).is_empty() {
                meta::meta_mut(&mut obj).insert("name".into(), json!(name));
            }
            let managed = take_managed_fields(&mut obj);
            let (mut obj, warnings) = typed_check(c.def, obj, mode, &[])?;
            if let Some(managed) = managed {
                meta::meta_mut(&mut obj).insert("managedFields".into(), managed);
            }
            match create_object(c, obj, warnings, dry_run, Ownership::Applied).await {
                // Created meanwhile: apply to it.
                Err(ApiError::AlreadyExists { .. }) => continue,
                other => return other,
            }
        };
        let old = meta::from_stored(&kv)?;
        let outcome = apply::apply(&schema, Some(&old), &config, &writer, force).map_err(apply_error)?;
        let mut object = outcome.object;
        let managed = take_managed_fields(&mut object);
        let (mut new, warnings) = typed_check(c.def, object, mode, &[])?;
        match managed {
            Some(managed) => meta::meta_mut(&mut new).insert("managedFields".into(), managed),
            None => meta::meta_mut(&mut new).remove("managedFields"),
        };
        match finish_write(c, &old, kv.mod_rev, new, warnings, dry_run, Ownership::Applied).await {
            Err(ApiError::Conflict { .. }) => continue,
            other => return other,
        }
    }
    Err(ApiError::conflict(c.def.group, c.def.resource, &name, "too many concurrent writes, please retry"))
}
