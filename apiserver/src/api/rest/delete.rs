//! delete and deletecollection: DeleteOptions, preconditions, finalizers and graceful
//! deletion; what follows a deletion (dependents, a namespace's content) is in [`gc`].

pub mod gc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::*;
use crate::admission::Operation;
use crate::error::{ApiError, FieldError, Result};
use crate::http::request_info::RequestInfo;
use crate::meta;
use crate::registry::ResourceDef;
use crate::storage;
use crate::wire::negotiate::Output;

/// DeleteOptions from the body (JSON) and query.
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    pub uid: Option<String>,
    pub rv: Option<String>,
    pub dry_run: bool,
}

pub fn delete_options(params: &Params, body: &Bytes, content_type: &str) -> Result<DeleteOptions> {
    let mut o = DeleteOptions {
        grace_period: params.int("gracePeriodSeconds")?,
        dry_run: params.dry_run()?,
        ..Default::default()
    };
    if let Some(p) = params.get("propagationPolicy").filter(|p| !p.is_empty()) {
        o.propagation = Some(p.to_string());
    }
    if params.flag("orphanDependents").unwrap_or(false) {
        o.propagation.get_or_insert_with(|| "Orphan".into());
    }
    if !body.is_empty() {
        let v: Value = if content_type == crate::wire::protobuf::MEDIA_TYPE {
            crate::wire::protobuf::decode(body)
                .map_err(|e| ApiError::BadRequest(format!("invalid DeleteOptions: {e}")))?
        } else {
            serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("invalid DeleteOptions: {e}")))?
        };
        if !v.is_object() {
            return Err(ApiError::BadRequest("invalid DeleteOptions: not an object".into()));
        }
        if let Some(g) = v.get("gracePeriodSeconds").filter(|g| !g.is_null()) {
            o.grace_period =
                Some(g.as_i64().ok_or_else(|| ApiError::BadRequest("gracePeriodSeconds must be an integer".into()))?);
        }
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = Some(p.to_string());
        }
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            if o.propagation.is_some() {
                return Err(ApiError::invalid(
                    "meta.k8s.io",
                    "DeleteOptions",
                    "",
                    vec![FieldError::invalid(
                        "propagationPolicy",
                        &json!(o.propagation),
                        "orphanDependents and deletionPropagation cannot be both set",
                    )],
                ));
            }
            o.propagation = Some("Orphan".into());
        }
        if let Some(pre) = v.get("preconditions") {
            o.uid = pre.get("uid").and_then(Value::as_str).map(str::to_string);
            o.rv = pre.get("resourceVersion").and_then(Value::as_str).map(str::to_string);
        }
        if let Some(d) = v.get("dryRun").and_then(Value::as_array) {
            for x in d {
                match x.as_str() {
                    Some("All") => o.dry_run = true,
                    _ => {
                        return Err(ApiError::BadRequest(format!(
                            "Invalid dry run value: {x}: supported values: \"All\""
                        )))
                    }
                }
            }
        }
    }
    if let Some(g) = o.grace_period {
        if g < 0 {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![FieldError::invalid("gracePeriodSeconds", &json!(g), "must be greater than or equal to 0")],
            ));
        }
    }
    if let Some(p) = &o.propagation {
        if !["Orphan", "Background", "Foreground"].contains(&p.as_str()) {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![FieldError::not_supported(
                    "propagationPolicy",
                    &json!(p),
                    &["Foreground", "Background", "Orphan", "nil"],
                )],
            ));
        }
    }
    Ok(o)
}

/// Delete one object as the system (follow-ups of a deletion, [`gc`]): no admission. Returns
/// the response body.
pub async fn delete_one(c: &Call<'_>, name: &str, opts: &DeleteOptions) -> Result<Value> {
    delete_stored(c, name, opts, false).await
}

/// Delete one object for a client (delete and deletecollection): as upstream's store, the
/// object is read first (a missing one is 404), the preconditions are checked, then the
/// admission chain runs on the stored object, and the delete is a compare-and-swap on the
/// revision that admission saw (a conflict reads, checks and admits again).
async fn delete_admitted(c: &Call<'_>, name: &str, opts: &DeleteOptions) -> Result<Value> {
    delete_stored(c, name, opts, true).await
}

async fn delete_stored(c: &Call<'_>, name: &str, opts: &DeleteOptions, admitted: bool) -> Result<Value> {
    let key = c.def.key(c.ns(), name);
    for _ in 0..8 {
        let kv = c.store().get(&key).await.map_err(|e| c.storage_err(name, e))?;
        let Some(kv) = kv else { return Err(c.not_found(name)) };
        let mut obj = meta::from_stored(&kv)?;
        if let Some(u) = &opts.uid {
            if u != meta::uid(&obj) {
                return Err(ApiError::conflict(
                    c.def.group,
                    c.def.resource,
                    name,
                    &format!("Precondition failed: UID in precondition: {u}, UID in object meta: {}", meta::uid(&obj)),
                ));
            }
        }
        if let Some(r) = &opts.rv {
            if *r != kv.mod_rev.to_string() {
                return Err(ApiError::conflict(
                    c.def.group,
                    c.def.resource,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {r}, ResourceVersion in object meta: {}",
                        kv.mod_rev
                    ),
                ));
            }
        }
        if admitted {
            admit(c, Operation::Delete, None, Some(&obj)).await?;
        }
        let mut finalizers = meta::finalizers(&obj);
        if !meta::is_deleting(&obj) {
            if let Some(delete) = c.def.strategy.delete() {
                delete.prepare_for_delete(&mut obj, &mut finalizers);
            }
        }
        match opts.propagation.as_deref() {
            Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                finalizers.push("foregroundDeletion".into())
            }
            Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => finalizers.push("orphan".into()),
            _ => {}
        }
        let graceful = !finalizers.is_empty() || is_namespace(c.def);
        if !graceful {
            if opts.dry_run {
                return Ok(deleted_status(c.def, &obj));
            }
            match c.store().delete(&key, kv.mod_rev).await {
                Ok(_) => {
                    gc::after_delete(c.state, c.def, &obj);
                    return Ok(deleted_status(c.def, &obj));
                }
                Err(storage::Error::Conflict { .. }) => continue,
                Err(e) => return Err(c.storage_err(name, e)),
            }
        }
        if meta::is_deleting(&obj) && meta::finalizers(&obj) == finalizers {
            return Ok(obj);
        }
        {
            let m = meta::meta_mut(&mut obj);
            if m.get("deletionTimestamp").is_none_or(Value::is_null) {
                m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                if c.def.strategy.write().is_some_and(|w| w.tracks_generation()) {
                    let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            m.insert("finalizers".into(), json!(finalizers));
            m.remove("resourceVersion");
        }
        if let Some(delete) = c.def.strategy.delete() {
            delete.mark_deleting(&mut obj);
        }
        // The size and depth limits of a stored object, checked on a dry run too.
        let stored = meta::to_stored(&obj)?;
        if opts.dry_run {
            meta::set_rv(&mut obj, kv.mod_rev);
            return Ok(obj);
        }
        match c.store().update(&key, stored, kv.mod_rev).await {
            Ok(rev) => {
                meta::set_rv(&mut obj, rev);
                gc::after_mark_deleting(c.state, c.def, &obj);
                return Ok(obj);
            }
            Err(storage::Error::Conflict { .. }) => continue,
            Err(e) => return Err(c.storage_err(name, e)),
        }
    }
    Err(ApiError::conflict(c.def.group, c.def.resource, name, "too many concurrent writes, please retry"))
}

/// `Status{Success}` for an object that is gone.
fn deleted_status(def: &ResourceDef, obj: &Value) -> Value {
    let mut details = json!({"name": meta::name(obj), "kind": def.resource, "uid": meta::uid(obj)});
    if !def.group.is_empty() {
        details["group"] = json!(def.group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

pub async fn delete(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    if !c.info.subresource.is_empty() {
        return Err(ApiError::MethodNotAllowed(format!(
            "delete is not supported on {}/{}",
            c.def.resource, c.info.subresource
        )));
    }
    let opts = delete_options(&c.params, body, content_type)?;
    let out = delete_admitted(c, &c.info.name.clone(), &opts).await?;
    let body = if out.get("kind").and_then(Value::as_str) == Some("Status") { out } else { c.object_body(out) };
    Ok(Reply::ok(body))
}

pub async fn delete_collection(c: &Call<'_>, body: &Bytes, content_type: &str) -> Result<Reply> {
    let opts = delete_options(&c.params, body, content_type)?;
    let filter = Filter::from_params(c.def, &c.params)?;
    let mut params = c.params.clone();
    params.pairs.retain(|(k, _)| k != "limit" && k != "continue");
    let l = read_list(c.store(), c.def, c.ns(), &params, &filter, true).await?;
    let mut deleted = Vec::new();
    for obj in l.items {
        let ns = meta::namespace(&obj).to_string();
        let info = RequestInfo { namespace: ns, name: meta::name(&obj).to_string(), ..c.info.clone() };
        let call = Call {
            state: c.state,
            def: c.def,
            info: &info,
            user: c.user,
            params: c.params.clone(),
            out: Output::default(),
        };
        // Each object passes admission as its own delete would, so a collection is no way
        // around a plugin (upstream's DeleteCollection validates every item the same way).
        match delete_admitted(&call, &info.name, &opts).await {
            Ok(v) if v.get("kind").and_then(Value::as_str) == Some("Status") => deleted.push(obj),
            Ok(v) => deleted.push(v),
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let body = json!({
        "kind": c.def.list_kind(),
        "apiVersion": c.def.api_version(),
        "metadata": {"resourceVersion": c.store().current_rev().to_string()},
        "items": deleted,
    });
    Ok(Reply::ok(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_options_are_validated() {
        let q = Params::parse(Some("gracePeriodSeconds=-1"));
        assert_eq!(delete_options(&q, &Bytes::new(), "").err().map(|e| e.code().as_u16()), Some(422));
        let q = Params::parse(None);
        let body = Bytes::from_static(br#"{"propagationPolicy":"Sideways"}"#);
        assert_eq!(delete_options(&q, &body, "application/json").err().map(|e| e.code().as_u16()), Some(422));
        let body = Bytes::from_static(
            br#"{"preconditions":{"uid":"u1","resourceVersion":"3"},"propagationPolicy":"Background"}"#,
        );
        let o = delete_options(&q, &body, "application/json").ok();
        assert_eq!(o.as_ref().and_then(|o| o.uid.clone()).as_deref(), Some("u1"));
        assert_eq!(o.as_ref().and_then(|o| o.rv.clone()).as_deref(), Some("3"));
        let body = Bytes::from_static(b"[1,2]");
        assert_eq!(delete_options(&q, &body, "application/json").err().map(|e| e.code().as_u16()), Some(400));
    }
}
