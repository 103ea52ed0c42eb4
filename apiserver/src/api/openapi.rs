//! OpenAPI v2 (`/openapi/v2`) and v3 (`/openapi/v3`, `/openapi/v3/<group-version>`) documents,
//! generated once at startup from the registry of served kinds.
//!
//! Schemas come from each kind's `ResourceDef::schema` (the `k8s-openapi` `JsonSchema` impls,
//! which already use upstream's dotted names such as `io.k8s.api.core.v1.ConfigMap`). They are
//! rewritten from JSON Schema (`$defs`) into OpenAPI form (`#/definitions/...` for v2,
//! `#/components/schemas/...` for v3), and completed with what upstream's documents carry and
//! `k8s-openapi` leaves out: `x-kubernetes-group-version-kind` on kinds, `<Kind>List` types, and
//! the list/patch annotations (`x-kubernetes-patch-merge-key`, `x-kubernetes-patch-strategy`,
//! `x-kubernetes-list-type`, ...) of the types we serve.
//!
//! What kubectl 1.32 reads from these documents:
//! - `explain` (v3): the GV document's `paths` to find the kind of a resource (operation
//!   `x-kubernetes-group-version-kind`), then the schema whose GVK list holds that kind.
//! - default `--validate=strict` (v3, v2 as fallback): a `fieldValidation` query parameter on
//!   the PATCH operation of the kind means the server validates, so kubectl sends
//!   `fieldValidation=Strict` instead of validating client side.
//! - client-side `apply` (v3, v2 as fallback): a PATCH operation accepting
//!   `application/strategic-merge-patch+json`, and the patch annotations of the schemas.
//!
//! Each document is served with an ETag (upper-case hex SHA-256 of its bytes); the v3 index
//! links every GV document as `/openapi/v3/<gv>?hash=<etag>`, which is cacheable for good.

use std::collections::{BTreeMap, BTreeSet};

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

use crate::registry::{resource_verbs, subresource_kind, subresource_verbs};
use crate::registry::{Registry, ResourceDef, SchemaFn};

/// `info.version` of the documents.
const INFO_VERSION: &str = "v1.32.0";
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

/// SHA-256 of `data` (ring's implementation, reached through rustls' public crypto API).
pub fn sha256(data: &[u8]) -> Vec<u8> {
    rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .map(|suite| suite.common.hash_provider.hash(data).as_ref().to_vec())
        .unwrap_or_default()
}

/// Upper-case hex SHA-256, the ETag / `hash=` of a document.
fn etag_of(data: &[u8]) -> String {
    sha256(data).iter().map(|b| format!("{b:02X}")).collect()
}

/// One serialized document and its hash.
#[derive(Debug, Clone)]
struct Doc {
    bytes: Bytes,
    hash: String,
}

impl Doc {
    fn new(value: &Value) -> Self {
        let bytes = Bytes::from(serde_json::to_vec(value).unwrap_or_default());
        let hash = etag_of(&bytes);
        Doc { bytes, hash }
    }
}

/// The OpenAPI documents, built once from the registry.
#[derive(Debug, Clone)]
pub struct OpenApi {
    v2: Doc,
    v3_index: Doc,
    /// `api/v1`, `apis/certificates.k8s.io/v1`, `api`, `apis`, `apis/<g>`, `version` → document.
    v3: BTreeMap<String, Doc>,
}

impl OpenApi {
    /// Build every document from the registry.
    pub fn new(reg: &Registry) -> Self {
        let (defs, kinds) = definitions(reg);
        let mut paths_v2 = Map::new();
        let mut v3 = BTreeMap::new();

        for (key, items) in documents(reg, &kinds) {
            let mut paths_v3 = Map::new();
            for item in &items {
                paths_v2.insert(item.path.clone(), item.render(Flavor::V2));
                paths_v3.insert(item.path.clone(), item.render(Flavor::V3));
            }
            let mut schemas = Map::new();
            for name in closure(&defs, &items) {
                if let Some(schema) = defs.get(&name) {
                    schemas.insert(name, to_v3(schema));
                }
            }
            let doc = json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": INFO_VERSION},
                "paths": paths_v3,
                "components": {
                    "schemas": schemas,
                    "securitySchemes": {"BearerToken": bearer_token()},
                },
                "security": [{"BearerToken": []}],
            });
            v3.insert(key, Doc::new(&doc));
        }

        let v2 = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": INFO_VERSION},
            "paths": paths_v2,
            "definitions": defs.into_iter().collect::<Map<String, Value>>(),
            "securityDefinitions": {"BearerToken": bearer_token()},
            "security": [{"BearerToken": []}],
        });
        let index: Map<String, Value> = v3
            .iter()
            .map(|(k, d)| (k.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{k}?hash={}", d.hash)})))
            .collect();
        OpenApi { v2: Doc::new(&v2), v3_index: Doc::new(&json!({ "paths": index })), v3 }
    }

    /// The v2 document (JSON).
    pub fn v2(&self) -> &Bytes {
        &self.v2.bytes
    }
    /// ETag of the v2 document (upper-case hex, unquoted).
    pub fn v2_etag(&self) -> &str {
        &self.v2.hash
    }
    /// The v3 index (`{"paths": {"api/v1": {"serverRelativeURL": ...}}}`).
    pub fn v3_index(&self) -> &Bytes {
        &self.v3_index.bytes
    }
    /// ETag of the v3 index.
    pub fn v3_index_etag(&self) -> &str {
        &self.v3_index.hash
    }
    /// One v3 document by its index key (`api/v1`, `apis/<group>/<version>`, `apis/<group>`,
    /// `api`, `apis`, `version`).
    pub fn v3_document(&self, gv_path: &str) -> Option<&Bytes> {
        self.v3.get(gv_path.trim_matches('/')).map(|d| &d.bytes)
    }
    /// The hash (ETag) of one v3 document.
    pub fn v3_hash(&self, gv_path: &str) -> Option<&str> {
        self.v3.get(gv_path.trim_matches('/')).map(|d| d.hash.as_str())
    }
    /// Index keys of the v3 documents.
    pub fn v3_paths(&self) -> impl Iterator<Item = &str> {
        self.v3.keys().map(String::as_str)
    }

    /// `GET /openapi/v2`. JSON for `application/json`, `*/*` or no Accept; 406 when only the
    /// protobuf form is acceptable (client-go then reports the error and falls back).
    pub fn v2_response(&self, accept: &str) -> Response {
        let wants_json = accept.trim().is_empty()
            || accept.split(',').any(|r| {
                let essence = r.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
                matches!(essence.as_str(), "application/json" | "application/*" | "*/*")
            });
        if !wants_json && accept.contains(V2_PROTOBUF) {
            return not_acceptable("only application/json is supported for /openapi/v2");
        }
        doc_response(&self.v2, None)
    }

    /// `GET /openapi/v3`: the index.
    pub fn v3_index_response(&self) -> Response {
        let mut r = doc_response(&self.v3_index, None);
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
        r
    }

    /// `GET /openapi/v3/<gv_path>[?hash=...]`. None when there is no such document. A matching
    /// `hash` makes the response cacheable forever; a stale one redirects (301) to the current
    /// URL, like kube-apiserver.
    pub fn v3_response(&self, gv_path: &str, query: Option<&str>) -> Option<Response> {
        let key = gv_path.trim_matches('/');
        let doc = self.v3.get(key)?;
        let hash = query.unwrap_or("").split('&').find_map(|kv| kv.strip_prefix("hash=")).filter(|h| !h.is_empty());
        Some(match hash {
            Some(h) if h != doc.hash => {
                let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
                let location = format!("/openapi/v3/{key}?hash={}", doc.hash);
                if let Ok(v) = HeaderValue::from_str(&location) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                r
            }
            Some(_) => doc_response(doc, Some(true)),
            None => doc_response(doc, Some(false)),
        })
    }
}

/// 200 with the document, its quoted ETag, and for v3 GV documents (`immutable` is Some)
/// `Vary: Accept` plus, when asked by hash, a year-long public cache.
fn doc_response(doc: &Doc, immutable: Option<bool>) -> Response {
    let mut r = (StatusCode::OK, doc.bytes.clone()).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", doc.hash)) {
        h.insert(header::ETAG, v);
    }
    if let Some(immutable) = immutable {
        h.insert(header::VARY, HeaderValue::from_static("Accept"));
        if immutable {
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, immutable"));
            let expires = (chrono::Utc::now() + chrono::Duration::days(365)).format("%a, %d %b %Y %H:%M:%S GMT");
            if let Ok(v) = HeaderValue::from_str(&expires.to_string()) {
                h.insert(header::EXPIRES, v);
            }
        }
    }
    r
}

fn not_acceptable(message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "NotAcceptable", "code": 406,
    });
    let mut r = (StatusCode::NOT_ACCEPTABLE, body.to_string()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn bearer_token() -> Value {
    json!({"type": "apiKey", "name": "authorization", "in": "header", "description": "Bearer Token authentication"})
}

// ---------------------------------------------------------------------------------------------
// Definitions

/// Schema functions of the kinds subresources read and write when that is not the parent kind.
fn subresource_schema(sub: &str) -> Option<SchemaFn> {
    match sub {
        "token" => Some(|g| g.subschema_for::<k8s_openapi::api::authentication::v1::TokenRequest>()),
        "eviction" => Some(|g| g.subschema_for::<k8s_openapi::api::policy::v1::Eviction>()),
        "scale" => Some(|g| g.subschema_for::<k8s_openapi::api::autoscaling::v1::Scale>()),
        "binding" => Some(|g| g.subschema_for::<k8s_openapi::api::core::v1::Binding>()),
        _ => None,
    }
}

/// The definition name a `$ref` points to (`#/$defs/io.k8s...`, `#/definitions/...`, ...).
fn ref_name(reference: &str) -> &str {
    reference.rsplit('/').next().unwrap_or(reference)
}

/// Definition name of every kind, by (group, version, kind): the registered resources and
/// the kinds of subresources such as `serviceaccounts/token`.
type KindNames = BTreeMap<(&'static str, &'static str, &'static str), String>;

/// Register `schema_fn` with `gen` and return its definition name: the `$ref` target, or,
/// for a schema given inline (no `$ref`), upstream's CRD-style name `<reversed group>.<v>.<Kind>`
/// under which the schema is put into `inline`.
fn register(
    gen: &mut SchemaGenerator,
    schema_fn: SchemaFn,
    (group, version, kind): (&str, &str, &str),
    inline: &mut BTreeMap<String, Value>,
) -> String {
    let schema = schema_fn(gen);
    if let Some(r) = schema.as_value().get("$ref").and_then(Value::as_str) {
        return ref_name(r).to_string();
    }
    let name = inline_name((group, version, kind));
    inline.insert(name.clone(), schema.to_value());
    name
}

/// Upstream's CRD-style definition name `<reversed group>.<version>.<Kind>`.
fn inline_name((group, version, kind): (&str, &str, &str)) -> String {
    let mut reversed: Vec<&str> = group.split('.').filter(|p| !p.is_empty()).collect();
    reversed.reverse();
    reversed.extend([version, kind]);
    reversed.join(".")
}

/// Built-in kinds (k8s-openapi types) take strategic merge patches; custom resources do not.
fn is_builtin(definition: &str) -> bool {
    definition.starts_with("io.k8s.api.")
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

/// Upstream's list and patch annotations for the types kustos serves, per (definition,
/// property). Taken from the `+listType`/`+patchStrategy` tags of k8s.io/api and
/// k8s.io/apimachinery v0.32.
fn property_extensions() -> Vec<(&'static str, &'static str, Value)> {
    let atomic = || json!({"x-kubernetes-list-type": "atomic"});
    let merge_map = |key: &str| {
        json!({
            "x-kubernetes-list-map-keys": [key],
            "x-kubernetes-list-type": "map",
            "x-kubernetes-patch-merge-key": key,
            "x-kubernetes-patch-strategy": "merge",
        })
    };
    vec![
        ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", merge_map("uid")),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "finalizers",
            json!({"x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"}),
        ),
        ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "managedFields", atomic()),
        ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", "matchExpressions", atomic()),
        ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", "values", atomic()),
        ("io.k8s.apimachinery.pkg.apis.meta.v1.StatusDetails", "causes", atomic()),
        ("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions", "dryRun", atomic()),
        ("io.k8s.api.core.v1.ServiceAccount", "secrets", merge_map("name")),
        ("io.k8s.api.core.v1.ServiceAccount", "imagePullSecrets", atomic()),
        ("io.k8s.api.core.v1.NamespaceSpec", "finalizers", atomic()),
        ("io.k8s.api.core.v1.NamespaceStatus", "conditions", merge_map("type")),
        ("io.k8s.api.certificates.v1.CertificateSigningRequestSpec", "request", atomic()),
        ("io.k8s.api.certificates.v1.CertificateSigningRequestSpec", "usages", atomic()),
        ("io.k8s.api.certificates.v1.CertificateSigningRequestSpec", "groups", atomic()),
        (
            "io.k8s.api.certificates.v1.CertificateSigningRequestStatus",
            "conditions",
            json!({"x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map"}),
        ),
        ("io.k8s.api.certificates.v1.CertificateSigningRequestStatus", "certificate", atomic()),
        ("io.k8s.api.rbac.v1.PolicyRule", "verbs", atomic()),
        ("io.k8s.api.rbac.v1.PolicyRule", "apiGroups", atomic()),
        ("io.k8s.api.rbac.v1.PolicyRule", "resources", atomic()),
        ("io.k8s.api.rbac.v1.PolicyRule", "resourceNames", atomic()),
        ("io.k8s.api.rbac.v1.PolicyRule", "nonResourceURLs", atomic()),
        ("io.k8s.api.rbac.v1.Role", "rules", atomic()),
        ("io.k8s.api.rbac.v1.ClusterRole", "rules", atomic()),
        ("io.k8s.api.rbac.v1.AggregationRule", "clusterRoleSelectors", atomic()),
        ("io.k8s.api.rbac.v1.RoleBinding", "subjects", atomic()),
        ("io.k8s.api.rbac.v1.ClusterRoleBinding", "subjects", atomic()),
    ]
}

/// Structs upstream marks `+structType=atomic` (`x-kubernetes-map-type: atomic`).
const ATOMIC_STRUCTS: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "io.k8s.api.core.v1.ObjectReference",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.rbac.v1.Subject",
    "io.k8s.api.rbac.v1.RoleRef",
];

/// Every definition (v2 form, `#/definitions/` refs) by name, and the definition name of
/// every kind.
fn definitions(reg: &Registry) -> (BTreeMap<String, Value>, KindNames) {
    let mut gen = SchemaGenerator::default();
    let mut inline = BTreeMap::new();
    let mut kinds = KindNames::new();
    for def in &reg.resources {
        let gvk = (def.group, def.version, def.kind);
        let name = match def.strategy.openapi_schema() {
            Some(schema) => {
                let name = inline_name(gvk);
                inline.insert(name.clone(), schema);
                name
            }
            None => register(&mut gen, def.schema, gvk, &mut inline),
        };
        kinds.entry(gvk).or_insert(name);
        for sub in def.subresources {
            let Some(schema_fn) = subresource_schema(sub) else { continue };
            let gvk = subresource_kind(def, sub);
            let name = register(&mut gen, schema_fn, gvk, &mut inline);
            kinds.entry(gvk).or_insert(name);
        }
    }
    let meta_types: [SchemaFn; 9] = [
        |g| g.subschema_for::<meta::DeleteOptions>(),
        |g| g.subschema_for::<meta::Status>(),
        |g| g.subschema_for::<meta::WatchEvent<meta::Status>>(),
        |g| g.subschema_for::<meta::Patch>(),
        |g| g.subschema_for::<meta::APIResourceList>(),
        |g| g.subschema_for::<meta::APIGroupList>(),
        |g| g.subschema_for::<meta::APIGroup>(),
        |g| g.subschema_for::<meta::APIVersions>(),
        |g| g.subschema_for::<k8s_openapi::apimachinery::pkg::version::Info>(),
    ];
    for f in meta_types {
        f(&mut gen);
    }

    let mut defs: BTreeMap<String, Value> = gen
        .take_definitions(false)
        .into_iter()
        .chain(inline)
        .map(|(name, mut schema)| {
            normalize(&mut schema);
            (name, schema)
        })
        .collect();

    // Every group version served: DeleteOptions and WatchEvent belong to each of them.
    let mut gvs: Vec<(&str, &str)> = Vec::new();
    for r in &reg.resources {
        if !gvs.contains(&(r.group, r.version)) {
            gvs.push((r.group, r.version));
        }
    }
    if !gvs.contains(&("", "v1")) {
        gvs.insert(0, ("", "v1"));
    }
    for (kind, name) in [("DeleteOptions", "DeleteOptions"), ("WatchEvent", "WatchEvent")] {
        let list: Vec<Value> = gvs.iter().map(|(g, v)| gvk(g, v, kind)).collect();
        set_key(&mut defs, &format!("{META}{name}"), "x-kubernetes-group-version-kind", Value::Array(list));
    }
    set_key(&mut defs, &format!("{META}Status"), "x-kubernetes-group-version-kind", json!([gvk("", "v1", "Status")]));

    for ((g, v, k), name) in &kinds {
        let Some(schema) = defs.get_mut(name) else { continue };
        set_gvk(schema, g, v, k);
        // k8s-openapi makes `metadata` required (it is not optional in Rust); upstream does not.
        if let Some(Value::Array(req)) = schema.get_mut("required") {
            req.retain(|f| f != "metadata");
            if req.is_empty() {
                if let Some(m) = schema.as_object_mut() {
                    m.remove("required");
                }
            }
        }
    }
    // Kinds that are never stored (reviews) have no list type upstream.
    for def in reg.resources.iter().filter(|d| !d.create_only) {
        let Some(name) = kinds.get(&(def.group, def.version, def.kind)) else { continue };
        let list_name = format!("{name}List");
        let mut list = list_schema(def, name);
        set_gvk(&mut list, def.group, def.version, &def.list_kind());
        defs.insert(list_name, list);
    }

    for (def_name, prop, ext) in property_extensions() {
        let Some(Value::Object(p)) =
            defs.get_mut(def_name).and_then(|d| d.get_mut("properties")).and_then(|p| p.get_mut(prop))
        else {
            continue;
        };
        if let Value::Object(ext) = ext {
            p.extend(ext);
        }
    }
    for name in ATOMIC_STRUCTS {
        if let Some(Value::Object(d)) = defs.get_mut(*name) {
            d.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
    }
    (defs, kinds)
}

fn set_key(defs: &mut BTreeMap<String, Value>, name: &str, key: &str, value: Value) {
    if let Some(Value::Object(d)) = defs.get_mut(name) {
        d.insert(key.into(), value);
    }
}

fn set_gvk(schema: &mut Value, group: &str, version: &str, kind: &str) {
    if let Value::Object(m) = schema {
        m.insert("x-kubernetes-group-version-kind".into(), json!([gvk(group, version, kind)]));
    }
}

/// `<Kind>List`, shaped like upstream's list types.
fn list_schema(def: &ResourceDef, kind_def: &str) -> Value {
    json!({
        "description": format!("{}List is a list of {} objects.", def.kind, def.kind),
        "type": "object",
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
                "type": "string",
            },
            "items": {
                "description": format!("Items is the list of {} objects.", def.kind),
                "type": "array",
                "items": {"$ref": format!("#/definitions/{kind_def}")},
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                "type": "string",
            },
            "metadata": {
                "$ref": format!("#/definitions/{META}ListMeta"),
                "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            },
        },
        "required": ["items"],
    })
}

/// Apply `f` to every subschema directly inside `schema` (properties, items, ...).
fn for_each_subschema(schema: &mut Map<String, Value>, f: &mut dyn FnMut(&mut Value)) {
    for key in ["properties", "patternProperties", "$defs", "definitions"] {
        if let Some(Value::Object(m)) = schema.get_mut(key) {
            m.values_mut().for_each(&mut *f);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        match schema.get_mut(key) {
            Some(v @ Value::Object(_)) => f(v),
            Some(Value::Array(a)) => a.iter_mut().for_each(&mut *f),
            _ => {}
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = schema.get_mut(key) {
            a.iter_mut().for_each(&mut *f);
        }
    }
}

/// JSON Schema (2020-12, as schemars emits it) → OpenAPI v2 schema, in place: `#/definitions/`
/// refs; no `$schema`/`$id`; `type: [T, "null"]` → `T`; `anyOf`/`oneOf` of one schema and
/// `null` → that schema; `const` → a one-value `enum`.
fn normalize(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    for key in ["$schema", "$id", "$comment", "examples", "nullable"] {
        m.remove(key);
    }
    if let Some(Value::Array(types)) = m.get("type") {
        let non_null: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if non_null.len() == 1 {
            m.insert("type".into(), non_null[0].clone());
        } else {
            m.insert("type".into(), Value::Array(non_null));
        }
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(alts)) = m.get(key) else { continue };
        let non_null: Vec<Value> =
            alts.iter().filter(|a| a.get("type").and_then(Value::as_str) != Some("null")).cloned().collect();
        if non_null.len() == 1 && alts.len() == 2 {
            m.remove(key);
            if let Value::Object(inner) = &non_null[0] {
                for (k, v) in inner {
                    m.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
    if let Some(Value::String(r)) = m.get_mut("$ref") {
        *r = format!("#/definitions/{}", ref_name(r));
    }
    if let Some(c) = m.remove("const") {
        m.insert("enum".into(), json!([c]));
    }
    for_each_subschema(m, &mut normalize);
}

/// v2 schema → v3 schema: `#/components/schemas/` refs, and a `$ref` with siblings
/// (description, default) wrapped in `allOf` as upstream's v3 documents do.
fn to_v3(schema: &Value) -> Value {
    let mut s = schema.clone();
    to_v3_in_place(&mut s);
    s
}

fn to_v3_in_place(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    if let Some(Value::String(r)) = m.get("$ref") {
        let target = format!("#/components/schemas/{}", ref_name(r));
        if m.len() == 1 {
            m.insert("$ref".into(), json!(target));
        } else {
            m.remove("$ref");
            m.insert("allOf".into(), json!([{"$ref": target}]));
        }
    }
    for_each_subschema(m, &mut to_v3_in_place);
}

/// Collect every `$ref` target in `value` (any depth).
fn collect_refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        out.insert(ref_name(r).to_string());
                    }
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Names of the definitions the path items need, transitively.
fn closure(defs: &BTreeMap<String, Value>, items: &[PathItem]) -> BTreeSet<String> {
    let mut todo = BTreeSet::new();
    for item in items {
        collect_refs(&item.render(Flavor::V2), &mut todo);
    }
    let mut done = BTreeSet::new();
    while let Some(name) = todo.pop_first() {
        if !done.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = defs.get(&name) {
            let mut more = BTreeSet::new();
            collect_refs(schema, &mut more);
            todo.extend(more.into_iter().filter(|n| !done.contains(n)));
        }
    }
    done
}

// ---------------------------------------------------------------------------------------------
// Paths

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    V2,
    V3,
}

#[derive(Debug, Clone, Copy)]
struct Param {
    name: &'static str,
    location: &'static str,
    ty: &'static str,
    description: &'static str,
}

const fn q(name: &'static str, ty: &'static str, description: &'static str) -> Param {
    Param { name, location: "query", ty, description }
}

const P_NAME: &str = "name";
const P_NAMESPACE: &str = "namespace";
const PRETTY: Param = q(
    "pretty",
    "string",
    "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
);
const DRY_RUN: Param = q(
    "dryRun",
    "string",
    "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
);
const FIELD_MANAGER: Param = q(
    "fieldManager",
    "string",
    "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
);
const FIELD_MANAGER_PATCH: Param = q(
    "fieldManager",
    "string",
    "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint. This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch).",
);
const FIELD_VALIDATION: Param = q(
    "fieldValidation",
    "string",
    "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
);
const FORCE: Param = q(
    "force",
    "boolean",
    "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
);
const GRACE_PERIOD: Param = q(
    "gracePeriodSeconds",
    "integer",
    "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
);
const IGNORE_STORE_READ_ERROR: Param = q(
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "boolean",
    "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow fails with a corrupt object error. A resource is considered corrupt if it can not be retrieved from the underlying storage successfully because of a) its data can not be transformed e.g. decryption failure, or b) it fails to decode into an object. NOTE: unsafe deletion ignores finalizer constraints, skips precondition checks, and removes the object from the storage. WARNING: This may potentially break the cluster if the workload associated with the resource being unsafe-deleted relies on normal deletion flow. Use only if you REALLY know what you are doing. The default value is false, and the user must opt in to enable it",
);
const ORPHAN: Param = q(
    "orphanDependents",
    "boolean",
    "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.",
);
const PROPAGATION: Param = q(
    "propagationPolicy",
    "string",
    "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
);
const ALLOW_BOOKMARKS: Param = q(
    "allowWatchBookmarks",
    "boolean",
    "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
);
const CONTINUE: Param = q(
    "continue",
    "string",
    "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize. If the specified continue value is no longer valid whether due to expiration (generally five to fifteen minutes) or a configuration change on the server, the server will respond with a 410 ResourceExpired error together with a continue token.",
);
const FIELD_SELECTOR: Param = q(
    "fieldSelector",
    "string",
    "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
);
const LABEL_SELECTOR: Param = q(
    "labelSelector",
    "string",
    "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
);
const LIMIT: Param = q(
    "limit",
    "integer",
    "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results. The server may choose to return fewer items than the limit, but will never return more.",
);
const RESOURCE_VERSION: Param = q(
    "resourceVersion",
    "string",
    "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
);
const RESOURCE_VERSION_MATCH: Param = q(
    "resourceVersionMatch",
    "string",
    "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
);
const SEND_INITIAL_EVENTS: Param = q(
    "sendInitialEvents",
    "boolean",
    "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection. Once all such events have been sent, a synthetic \"Bookmark\" event will be sent. The bookmark will report the ResourceVersion (RV) corresponding to the set of objects, and be marked with `\"k8s.io/initial-events-end\": \"true\"` annotation. Afterwards, the watch stream will proceed as usual, sending watch events corresponding to changes (subsequent to the RV) to objects watched.",
);
const TIMEOUT: Param = q(
    "timeoutSeconds",
    "integer",
    "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
);
const WATCH: Param = q(
    "watch",
    "boolean",
    "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
);

const LIST_PARAMS: &[Param] = &[
    ALLOW_BOOKMARKS,
    CONTINUE,
    FIELD_SELECTOR,
    LABEL_SELECTOR,
    LIMIT,
    RESOURCE_VERSION,
    RESOURCE_VERSION_MATCH,
    SEND_INITIAL_EVENTS,
    TIMEOUT,
    WATCH,
];
const WRITE_PARAMS: &[Param] = &[DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
const PATCH_PARAMS: &[Param] = &[DRY_RUN, FIELD_MANAGER_PATCH, FIELD_VALIDATION, FORCE];
const DELETE_PARAMS: &[Param] = &[DRY_RUN, GRACE_PERIOD, IGNORE_STORE_READ_ERROR, ORPHAN, PROPAGATION];
const DELETE_COLLECTION_PARAMS: &[Param] = &[
    CONTINUE,
    DRY_RUN,
    FIELD_SELECTOR,
    GRACE_PERIOD,
    IGNORE_STORE_READ_ERROR,
    LABEL_SELECTOR,
    LIMIT,
    ORPHAN,
    PROPAGATION,
    RESOURCE_VERSION,
    RESOURCE_VERSION_MATCH,
    SEND_INITIAL_EVENTS,
    TIMEOUT,
];

const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
const PRODUCES: &[&str] = &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];
const PRODUCES_LIST: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json;stream=watch",
    "application/vnd.kubernetes.protobuf;stream=watch",
];

/// How an operation takes its request body.
#[derive(Debug, Clone)]
enum Body {
    None,
    /// The definition, required.
    Object(String),
    /// `meta.v1.Patch` with the four patch content types.
    Patch,
    /// `meta.v1.Patch` without strategic merge patch (custom resources).
    MergePatch,
    /// Optional `DeleteOptions`.
    DeleteOptions,
}

#[derive(Debug, Clone)]
struct Operation {
    method: &'static str,
    action: &'static str,
    id: String,
    description: String,
    params: &'static [Param],
    body: Body,
    /// (code, description, definition name)
    responses: Vec<(u16, &'static str, String)>,
    streaming: bool,
    gvk: Option<(&'static str, &'static str, &'static str)>,
    tag: String,
}

#[derive(Debug, Clone)]
struct PathItem {
    path: String,
    /// Path parameters (`name`, `namespace`), in order.
    path_params: Vec<(&'static str, String)>,
    /// Query parameters shared by all operations.
    common: Vec<Param>,
    ops: Vec<Operation>,
}

impl PathItem {
    fn render(&self, flavor: Flavor) -> Value {
        let mut item = Map::new();
        let mut params: Vec<Value> = self
            .path_params
            .iter()
            .map(|(name, description)| param_json(flavor, name, "path", "string", description, true))
            .collect();
        params.extend(self.common.iter().map(|p| param_json(flavor, p.name, p.location, p.ty, p.description, false)));
        if !params.is_empty() {
            item.insert("parameters".into(), Value::Array(params));
        }
        for op in &self.ops {
            item.insert(op.method.into(), op.render(flavor));
        }
        Value::Object(item)
    }
}

fn param_json(flavor: Flavor, name: &str, location: &str, ty: &str, description: &str, required: bool) -> Value {
    let mut p = json!({"description": description, "in": location, "name": name});
    match flavor {
        Flavor::V2 => {
            p["type"] = json!(ty);
            p["uniqueItems"] = json!(true);
        }
        Flavor::V3 => p["schema"] = json!({"type": ty, "uniqueItems": true}),
    }
    if required {
        p["required"] = json!(true);
    }
    p
}

fn schema_ref(flavor: Flavor, name: &str) -> Value {
    match flavor {
        Flavor::V2 => json!({"$ref": format!("#/definitions/{name}")}),
        Flavor::V3 => json!({"$ref": format!("#/components/schemas/{name}")}),
    }
}

impl Operation {
    fn render(&self, flavor: Flavor) -> Value {
        let mut op = json!({
            "description": self.description,
            "operationId": self.id,
            "tags": [self.tag],
        });
        let produces = if self.streaming { PRODUCES_LIST } else { PRODUCES };
        let mut params: Vec<Value> = Vec::new();
        let body_schema = match &self.body {
            Body::None => None,
            Body::Object(name) => Some((schema_ref(flavor, name), true, vec!["*/*"])),
            Body::Patch => Some((schema_ref(flavor, &format!("{META}Patch")), true, PATCH_TYPES.to_vec())),
            Body::MergePatch => Some((
                schema_ref(flavor, &format!("{META}Patch")),
                true,
                PATCH_TYPES.iter().copied().filter(|t| !t.contains("strategic")).collect(),
            )),
            Body::DeleteOptions => Some((schema_ref(flavor, &format!("{META}DeleteOptions")), false, vec!["*/*"])),
        };
        match flavor {
            Flavor::V2 => {
                let consumes = match &body_schema {
                    Some((_, _, types)) => types.clone(),
                    None => vec!["*/*"],
                };
                op["consumes"] = json!(consumes);
                op["produces"] = json!(produces);
                op["schemes"] = json!(["https"]);
                if let Some((schema, required, _)) = &body_schema {
                    let mut b = json!({"in": "body", "name": "body", "schema": schema});
                    if *required {
                        b["required"] = json!(true);
                    }
                    params.push(b);
                }
                let mut responses = Map::new();
                for (code, description, name) in &self.responses {
                    responses.insert(
                        code.to_string(),
                        json!({"description": description, "schema": schema_ref(flavor, name)}),
                    );
                }
                responses.insert("401".into(), json!({"description": "Unauthorized"}));
                op["responses"] = Value::Object(responses);
            }
            Flavor::V3 => {
                if let Some((schema, required, types)) = &body_schema {
                    let content: Map<String, Value> =
                        types.iter().map(|t| (t.to_string(), json!({"schema": schema}))).collect();
                    let mut b = json!({"content": content});
                    if *required {
                        b["required"] = json!(true);
                    }
                    op["requestBody"] = b;
                }
                let mut responses = Map::new();
                for (code, description, name) in &self.responses {
                    let content: Map<String, Value> =
                        produces.iter().map(|t| (t.to_string(), json!({"schema": schema_ref(flavor, name)}))).collect();
                    responses.insert(code.to_string(), json!({"description": description, "content": content}));
                }
                responses.insert("401".into(), json!({"description": "Unauthorized"}));
                op["responses"] = Value::Object(responses);
            }
        }
        params.extend(self.params.iter().map(|p| param_json(flavor, p.name, p.location, p.ty, p.description, false)));
        if !params.is_empty() {
            op["parameters"] = Value::Array(params);
        }
        if !self.action.is_empty() {
            op["x-kubernetes-action"] = json!(self.action);
        }
        if let Some((g, v, k)) = self.gvk {
            op["x-kubernetes-group-version-kind"] = gvk(g, v, k);
        }
        op
    }
}

/// `certificates.k8s.io` → `Certificates`, `rbac.authorization.k8s.io` → `RbacAuthorization`,
/// core → `Core` (upstream's operationId prefix).
fn group_id(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group.trim_end_matches(".k8s.io").split('.').map(upper_first).collect()
}

/// `rbacAuthorization`, `core`, `certificates` (upstream's tag prefix).
fn group_tag(group: &str) -> String {
    let id = group_id(group);
    let mut chars = id.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => id,
    }
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Path items of one resource (collection, object, subresources, watch paths).
fn resource_paths(def: &ResourceDef, kinds: &KindNames) -> Vec<PathItem> {
    let Some(kind_def) = kinds.get(&(def.group, def.version, def.kind)).cloned() else { return Vec::new() };
    let patch_body = if is_builtin(&kind_def) { Body::Patch } else { Body::MergePatch };
    let list_def = format!("{kind_def}List");
    let status = format!("{META}Status");
    let watch_event = format!("{META}WatchEvent");
    let g = group_id(def.group);
    let v = upper_first(def.version);
    let tag = format!("{}_{}", group_tag(def.group), def.version);
    let ns = if def.namespaced { "Namespaced" } else { "" };
    let kind = def.kind;
    let root =
        if def.group.is_empty() { format!("/api/{}", def.version) } else { format!("/apis/{}", def.api_version()) };
    let scope = if def.namespaced { format!("{root}/namespaces/{{namespace}}") } else { root.clone() };
    let watch_scope =
        if def.namespaced { format!("{root}/watch/namespaces/{{namespace}}") } else { format!("{root}/watch") };
    let gvk_main = Some((def.group, def.version, def.kind));
    let verbs = resource_verbs(def);
    let op = |method, action, id: String, description: String, params, body, responses, streaming| Operation {
        method,
        action,
        id,
        description,
        params,
        body,
        responses,
        streaming,
        gvk: gvk_main,
        tag: tag.clone(),
    };
    let ns_param = || vec![(P_NAMESPACE, "object name and auth scope, such as for teams and projects".to_string())];
    let name_param = |what: &str| (P_NAME, format!("name of the {what}"));
    let scoped = |mut v: Vec<(&'static str, String)>| {
        if def.namespaced {
            v.extend(ns_param());
        }
        v
    };

    let mut items = Vec::new();

    if def.create_only {
        // Reviews: POST only, answered with the computed object.
        items.push(PathItem {
            path: format!("{scope}/{}", def.resource),
            path_params: scoped(Vec::new()),
            common: vec![PRETTY],
            ops: vec![op(
                "post",
                "post",
                format!("create{g}{v}{ns}{kind}"),
                format!("create a {kind}"),
                WRITE_PARAMS,
                Body::Object(kind_def.clone()),
                vec![
                    (200, "OK", kind_def.clone()),
                    (201, "Created", kind_def.clone()),
                    (202, "Accepted", kind_def.clone()),
                ],
                false,
            )],
        });
        return items;
    }

    // Collection.
    let mut ops = vec![op(
        "get",
        "list",
        format!("list{g}{v}{ns}{kind}"),
        format!("list or watch objects of kind {kind}"),
        LIST_PARAMS,
        Body::None,
        vec![(200, "OK", list_def.clone())],
        true,
    )];
    ops.push(op(
        "post",
        "post",
        format!("create{g}{v}{ns}{kind}"),
        format!("create a {kind}"),
        WRITE_PARAMS,
        Body::Object(kind_def.clone()),
        vec![(200, "OK", kind_def.clone()), (201, "Created", kind_def.clone()), (202, "Accepted", kind_def.clone())],
        false,
    ));
    if verbs.contains(&"deletecollection") {
        ops.push(op(
            "delete",
            "deletecollection",
            format!("delete{g}{v}Collection{ns}{kind}"),
            format!("delete collection of {kind}"),
            DELETE_COLLECTION_PARAMS,
            Body::DeleteOptions,
            vec![(200, "OK", status.clone())],
            false,
        ));
    }
    items.push(PathItem {
        path: format!("{scope}/{}", def.resource),
        path_params: scoped(Vec::new()),
        common: vec![PRETTY],
        ops,
    });

    // Object.
    let delete_response = vec![(200, "OK", status.clone()), (202, "Accepted", status.clone())];
    items.push(PathItem {
        path: format!("{scope}/{}/{{name}}", def.resource),
        path_params: scoped(vec![name_param(kind)]),
        common: vec![PRETTY],
        ops: vec![
            op(
                "get",
                "get",
                format!("read{g}{v}{ns}{kind}"),
                format!("read the specified {kind}"),
                &[],
                Body::None,
                vec![(200, "OK", kind_def.clone())],
                false,
            ),
            op(
                "put",
                "put",
                format!("replace{g}{v}{ns}{kind}"),
                format!("replace the specified {kind}"),
                WRITE_PARAMS,
                Body::Object(kind_def.clone()),
                vec![(200, "OK", kind_def.clone()), (201, "Created", kind_def.clone())],
                false,
            ),
            op(
                "patch",
                "patch",
                format!("patch{g}{v}{ns}{kind}"),
                format!("partially update the specified {kind}"),
                PATCH_PARAMS,
                patch_body.clone(),
                vec![(200, "OK", kind_def.clone()), (201, "Created", kind_def.clone())],
                false,
            ),
            op(
                "delete",
                "delete",
                format!("delete{g}{v}{ns}{kind}"),
                format!("delete a {kind}"),
                DELETE_PARAMS,
                Body::DeleteOptions,
                delete_response,
                false,
            ),
        ],
    });

    // Subresources.
    for sub in def.subresources {
        let (sg, sv, skind) = subresource_kind(def, sub);
        let Some(sub_def) = kinds.get(&(sg, sv, skind)).cloned() else { continue };
        let s = upper_first(sub);
        let sub_gvk = Some((sg, sv, skind));
        let mut ops = Vec::new();
        for verb in subresource_verbs(def, sub) {
            let (method, action, id, description, params, body, responses) = match *verb {
                "get" => (
                    "get",
                    "get",
                    format!("read{g}{v}{ns}{kind}{s}"),
                    format!("read {sub} of the specified {kind}"),
                    &[][..],
                    Body::None,
                    vec![(200, "OK", sub_def.clone())],
                ),
                "update" => (
                    "put",
                    "put",
                    format!("replace{g}{v}{ns}{kind}{s}"),
                    format!("replace {sub} of the specified {kind}"),
                    WRITE_PARAMS,
                    Body::Object(sub_def.clone()),
                    vec![(200, "OK", sub_def.clone()), (201, "Created", sub_def.clone())],
                ),
                "patch" => (
                    "patch",
                    "patch",
                    format!("patch{g}{v}{ns}{kind}{s}"),
                    format!("partially update {sub} of the specified {kind}"),
                    PATCH_PARAMS,
                    patch_body.clone(),
                    vec![(200, "OK", sub_def.clone()), (201, "Created", sub_def.clone())],
                ),
                "create" => (
                    "post",
                    "post",
                    format!("create{g}{v}{ns}{kind}{s}"),
                    format!("create {sub} of a {kind}"),
                    WRITE_PARAMS,
                    Body::Object(sub_def.clone()),
                    vec![
                        (200, "OK", sub_def.clone()),
                        (201, "Created", sub_def.clone()),
                        (202, "Accepted", sub_def.clone()),
                    ],
                ),
                _ => continue,
            };
            ops.push(Operation {
                method,
                action,
                id,
                description,
                params,
                body,
                responses,
                streaming: false,
                gvk: sub_gvk,
                tag: tag.clone(),
            });
        }
        items.push(PathItem {
            path: format!("{scope}/{}/{{name}}/{sub}", def.resource),
            path_params: scoped(vec![name_param(kind)]),
            common: if ops.iter().any(|o| o.method == "post") { Vec::new() } else { vec![PRETTY] },
            ops,
        });
    }

    // List across namespaces.
    if def.namespaced {
        let mut common = LIST_PARAMS.to_vec();
        common.insert(5, PRETTY);
        items.push(PathItem {
            path: format!("{root}/{}", def.resource),
            path_params: Vec::new(),
            common,
            ops: vec![op(
                "get",
                "list",
                format!("list{g}{v}{kind}ForAllNamespaces"),
                format!("list or watch objects of kind {kind}"),
                &[],
                Body::None,
                vec![(200, "OK", list_def.clone())],
                true,
            )],
        });
    }

    // Deprecated watch paths.
    let mut watch_common = LIST_PARAMS.to_vec();
    watch_common.insert(5, PRETTY);
    items.push(PathItem {
        path: format!("{watch_scope}/{}", def.resource),
        path_params: scoped(Vec::new()),
        common: watch_common.clone(),
        ops: vec![op(
            "get",
            "watchlist",
            format!("watch{g}{v}{ns}{kind}List"),
            format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
            &[],
            Body::None,
            vec![(200, "OK", watch_event.clone())],
            true,
        )],
    });
    items.push(PathItem {
        path: format!("{watch_scope}/{}/{{name}}", def.resource),
        path_params: scoped(vec![name_param(kind)]),
        common: watch_common.clone(),
        ops: vec![op(
            "get",
            "watch",
            format!("watch{g}{v}{ns}{kind}"),
            format!("watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."),
            &[],
            Body::None,
            vec![(200, "OK", watch_event.clone())],
            true,
        )],
    });
    if def.namespaced {
        items.push(PathItem {
            path: format!("{root}/watch/{}", def.resource),
            path_params: Vec::new(),
            common: watch_common,
            ops: vec![op(
                "get",
                "watchlist",
                format!("watch{g}{v}{kind}ListForAllNamespaces"),
                format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
                &[],
                Body::None,
                vec![(200, "OK", watch_event)],
                true,
            )],
        });
    }
    items
}

/// A discovery path (`/api/`, `/apis/`, `/apis/<g>/`, `/api/v1/`, `/version/`): GET only.
fn discovery_path(path: String, id: String, description: &str, def: &str, tag: String) -> PathItem {
    PathItem {
        path,
        path_params: Vec::new(),
        common: Vec::new(),
        ops: vec![Operation {
            method: "get",
            action: "",
            id,
            description: description.into(),
            params: &[],
            body: Body::None,
            responses: vec![(200, "OK", def.into())],
            streaming: false,
            gvk: None,
            tag,
        }],
    }
}

/// The v3 documents by index key, each with its path items.
fn documents(reg: &Registry, kinds: &KindNames) -> Vec<(String, Vec<PathItem>)> {
    let mut docs = Vec::new();
    docs.push((
        "api".to_string(),
        vec![discovery_path(
            "/api/".into(),
            "getCoreAPIVersions".into(),
            "get available API versions",
            &format!("{META}APIVersions"),
            "core".into(),
        )],
    ));
    docs.push((
        "apis".to_string(),
        vec![discovery_path(
            "/apis/".into(),
            "getAPIVersions".into(),
            "get available API versions",
            &format!("{META}APIGroupList"),
            "apis".into(),
        )],
    ));
    docs.push((
        "version".to_string(),
        vec![discovery_path(
            "/version/".into(),
            "getCodeVersion".into(),
            "get the version information for this server",
            "io.k8s.apimachinery.pkg.version.Info",
            "version".into(),
        )],
    ));
    for group in reg.groups() {
        if !group.is_empty() {
            docs.push((
                format!("apis/{group}"),
                vec![discovery_path(
                    format!("/apis/{group}/"),
                    format!("get{}APIGroup", group_id(group)),
                    "get information of a group",
                    &format!("{META}APIGroup"),
                    group_tag(group),
                )],
            ));
        }
        for version in reg.versions(group) {
            let (key, root) = if group.is_empty() {
                (format!("api/{version}"), format!("/api/{version}/"))
            } else {
                (format!("apis/{group}/{version}"), format!("/apis/{group}/{version}/"))
            };
            let tag = format!("{}_{version}", group_tag(group));
            let mut items = vec![discovery_path(
                root,
                format!("get{}{}APIResources", group_id(group), upper_first(version)),
                "get available resources",
                &format!("{META}APIResourceList"),
                tag,
            )];
            for def in reg.resources.iter().filter(|r| r.group == group && r.version == version) {
                items.extend(resource_paths(def, kinds));
            }
            docs.push((key, items));
        }
    }
    docs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api() -> OpenApi {
        OpenApi::new(&Registry::builtin())
    }

    fn parse(bytes: &Bytes) -> Value {
        serde_json::from_slice(bytes).expect("valid JSON")
    }

    fn v3(api: &OpenApi, key: &str) -> Value {
        parse(api.v3_document(key).expect("document exists"))
    }

    /// Every `$ref` in `doc` resolves inside `doc` (prefix `prefix`).
    fn assert_refs_resolve(doc: &Value, prefix: &str, defs: &Map<String, Value>) {
        let mut refs = BTreeSet::new();
        let mut raw = Vec::new();
        fn walk(v: &Value, raw: &mut Vec<String>) {
            match v {
                Value::Object(m) => m.iter().for_each(|(k, v)| match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => raw.push(r.clone()),
                    _ => walk(v, raw),
                }),
                Value::Array(a) => a.iter().for_each(|v| walk(v, raw)),
                _ => {}
            }
        }
        walk(doc, &mut raw);
        for r in raw {
            let name = r.strip_prefix(prefix).unwrap_or_else(|| panic!("ref {r} does not start with {prefix}"));
            refs.insert(name.to_string());
        }
        for name in refs {
            assert!(defs.contains_key(&name), "unresolved ref {name}");
        }
    }

    fn has_gvk(schema: &Value, g: &str, v: &str, k: &str) -> bool {
        schema["x-kubernetes-group-version-kind"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| *x == json!({"group": g, "version": v, "kind": k})))
    }

    #[test]
    fn every_kind_has_a_definition_with_its_gvk() {
        let reg = Registry::builtin();
        let api = OpenApi::new(&reg);
        let v2 = parse(api.v2());
        let defs = v2["definitions"].as_object().expect("definitions");
        for def in &reg.resources {
            let key = if def.group.is_empty() {
                format!("api/{}", def.version)
            } else {
                format!("apis/{}/{}", def.group, def.version)
            };
            let doc = v3(&api, &key);
            let schemas = doc["components"]["schemas"].as_object().expect("schemas");
            let lists = if def.create_only { None } else { Some(def.list_kind()) };
            for kind in std::iter::once(def.kind.to_string()).chain(lists) {
                let in_v2 = defs.values().filter(|s| has_gvk(s, def.group, def.version, &kind)).count();
                assert_eq!(in_v2, 1, "v2 definition of {kind}");
                let in_v3 = schemas.values().filter(|s| has_gvk(s, def.group, def.version, &kind)).count();
                assert_eq!(in_v3, 1, "v3 schema of {kind} in {key}");
            }
        }
    }

    #[test]
    fn all_refs_resolve_in_each_document() {
        let api = api();
        let v2 = parse(api.v2());
        assert_refs_resolve(&v2, "#/definitions/", v2["definitions"].as_object().expect("definitions"));
        let keys: Vec<String> = api.v3_paths().map(str::to_string).collect();
        assert!(keys.contains(&"api/v1".to_string()));
        assert!(keys.contains(&"apis/certificates.k8s.io/v1".to_string()));
        for key in keys {
            let doc = v3(&api, &key);
            assert_eq!(doc["openapi"], "3.0.0");
            let schemas = doc["components"]["schemas"].as_object().expect("schemas");
            assert_refs_resolve(&doc, "#/components/schemas/", schemas);
        }
    }

    #[test]
    fn no_json_schema_leftovers() {
        let api = api();
        let text = String::from_utf8_lossy(api.v2()).to_string();
        // (`$schema` and `$ref` are property names of the CRD's JSONSchemaProps, as upstream.)
        assert!(!text.contains("$defs") && !text.contains("\"$schema\":\"http") && !text.contains("\"null\""));
        let doc = String::from_utf8_lossy(api.v3_document("api/v1").expect("core")).to_string();
        assert!(!doc.contains("#/definitions/") && !doc.contains("$defs"));
    }

    #[test]
    fn configmap_data_is_a_map_of_strings() {
        let api = api();
        let v2 = parse(api.v2());
        let cm = &v2["definitions"]["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(cm["properties"]["data"]["type"], "object");
        assert_eq!(cm["properties"]["data"]["additionalProperties"]["type"], "string");
        assert!(cm.get("required").is_none(), "metadata is not required upstream");
        let doc = v3(&api, "api/v1");
        let cm3 = &doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(cm3["properties"]["data"]["additionalProperties"]["type"], "string");
        assert_eq!(
            cm3["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
    }

    #[test]
    fn configmap_patch_has_field_validation() {
        let api = api();
        let path = "/api/v1/namespaces/{namespace}/configmaps/{name}";
        let v2 = parse(api.v2());
        let patch = &v2["paths"][path]["patch"];
        let names: Vec<&str> =
            patch["parameters"].as_array().expect("params").iter().filter_map(|p| p["name"].as_str()).collect();
        assert!(names.contains(&"fieldValidation"), "{names:?}");
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "", "kind": "ConfigMap", "version": "v1"})
        );
        assert!(patch["consumes"]
            .as_array()
            .expect("consumes")
            .contains(&json!("application/strategic-merge-patch+json")));

        let doc = v3(&api, "api/v1");
        let patch3 = &doc["paths"][path]["patch"];
        let q: Vec<&Value> = patch3["parameters"]
            .as_array()
            .expect("params")
            .iter()
            .filter(|p| p["name"] == "fieldValidation" && p["in"] == "query")
            .collect();
        assert_eq!(q.len(), 1);
        assert!(patch3["requestBody"]["content"].get("application/strategic-merge-patch+json").is_some());
        assert_eq!(patch3["x-kubernetes-action"], "patch");
        // Create carries it too (kubectl create --validate=strict).
        let post = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["post"];
        assert!(post["parameters"].as_array().expect("params").iter().any(|p| p["name"] == "fieldValidation"));
    }

    #[test]
    fn patch_annotations_for_strategic_merge() {
        let api = api();
        let doc = v3(&api, "api/v1");
        let s = &doc["components"]["schemas"];
        let owners = &s["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["ownerReferences"];
        assert_eq!(owners["x-kubernetes-patch-merge-key"], "uid");
        assert_eq!(owners["x-kubernetes-patch-strategy"], "merge");
        let fin = &s["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["finalizers"];
        assert_eq!(fin["x-kubernetes-patch-strategy"], "merge");
        let secrets = &s["io.k8s.api.core.v1.ServiceAccount"]["properties"]["secrets"];
        assert_eq!(secrets["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(secrets["x-kubernetes-patch-strategy"], "merge");
    }

    #[test]
    fn csr_document_has_subresources_and_gvk_paths() {
        let api = api();
        let doc = v3(&api, "apis/certificates.k8s.io/v1");
        let paths = doc["paths"].as_object().expect("paths");
        let approval = &paths["/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval"];
        assert_eq!(approval["put"]["operationId"], "replaceCertificatesV1CertificateSigningRequestApproval");
        assert!(approval.get("post").is_none());
        let list = &paths["/apis/certificates.k8s.io/v1/certificatesigningrequests"]["get"];
        assert_eq!(list["operationId"], "listCertificatesV1CertificateSigningRequest");
        assert_eq!(
            list["x-kubernetes-group-version-kind"],
            json!({"group": "certificates.k8s.io", "kind": "CertificateSigningRequest", "version": "v1"})
        );
        let csr = &doc["components"]["schemas"]["io.k8s.api.certificates.v1.CertificateSigningRequest"];
        assert_eq!(csr["required"], json!(["spec"]));
        // Namespaces: status and finalize, no deletecollection.
        let core = v3(&api, "api/v1");
        let cp = core["paths"].as_object().expect("paths");
        assert!(cp["/api/v1/namespaces/{name}/finalize"].get("put").is_some());
        assert!(cp["/api/v1/namespaces/{name}/finalize"].get("get").is_none());
        assert!(cp["/api/v1/namespaces"].get("delete").is_none());
        assert!(cp["/api/v1/namespaces/{namespace}/configmaps"].get("delete").is_some());
    }

    #[test]
    fn index_links_documents_by_hash() {
        let api = api();
        let index = parse(api.v3_index());
        let url = index["paths"]["api/v1"]["serverRelativeURL"].as_str().expect("url");
        let hash = api.v3_hash("api/v1").expect("hash");
        assert_eq!(url, format!("/openapi/v3/api/v1?hash={hash}"));
        assert_eq!(hash.len(), 64);
        assert!(hash.chars().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
        for key in ["api", "apis", "version", "apis/rbac.authorization.k8s.io", "apis/coordination.k8s.io/v1"] {
            assert!(index["paths"].get(key).is_some(), "{key}");
        }
        assert!(api.v3_document("/api/v1/").is_some());
        assert!(api.v3_document("apis/apps/v1").is_none());
    }

    #[test]
    fn v3_response_caching_and_redirect() {
        let api = api();
        let hash = api.v3_hash("api/v1").expect("hash").to_string();
        let ok = api.v3_response("api/v1", Some(&format!("hash={hash}"))).expect("doc");
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[header::CACHE_CONTROL], "public, immutable");
        assert_eq!(ok.headers()[header::ETAG], format!("\"{hash}\"").as_str());
        let stale = api.v3_response("api/v1", Some("hash=ABC")).expect("doc");
        assert_eq!(stale.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(stale.headers()[header::LOCATION], format!("/openapi/v3/api/v1?hash={hash}").as_str());
        let plain = api.v3_response("api/v1", None).expect("doc");
        assert!(plain.headers().get(header::CACHE_CONTROL).is_none());
        assert!(api.v3_response("apis/apps/v1", None).is_none());
        assert_eq!(api.v2_response("application/json").status(), StatusCode::OK);
        assert_eq!(
            api.v2_response("application/com.github.proto-openapi.spec.v2@v1.0+protobuf").status(),
            StatusCode::NOT_ACCEPTABLE
        );
    }

    struct NoRules;
    impl crate::registry::Strategy for NoRules {
        fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
            Ok(obj.clone())
        }
    }

    #[test]
    fn custom_resources_get_a_synthesized_definition_without_strategic_merge() {
        let mut reg = Registry::builtin();
        reg.resources.push(ResourceDef {
            group: "kustos.dev",
            version: "v1alpha1",
            resource: "widgets",
            singular: "widget",
            kind: "Widget",
            namespaced: true,
            short_names: &[],
            categories: &[],
            subresources: &["status"],
            create_only: false,
            strategy: std::sync::Arc::new(NoRules),
            schema: |g| {
                let meta = g.subschema_for::<meta::ObjectMeta>();
                schemars::json_schema!({
                    "type": "object",
                    "properties": {"metadata": meta, "spec": {"type": "object", "properties": {"size": {"type": ["integer", "null"], "format": "int32"}}}},
                })
            },
        });
        let api = OpenApi::new(&reg);
        let doc = v3(&api, "apis/kustos.dev/v1alpha1");
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let widget = &schemas["dev.kustos.v1alpha1.Widget"];
        assert!(has_gvk(widget, "kustos.dev", "v1alpha1", "Widget"));
        assert_eq!(widget["properties"]["spec"]["properties"]["size"]["type"], "integer");
        assert!(has_gvk(&schemas["dev.kustos.v1alpha1.WidgetList"], "kustos.dev", "v1alpha1", "WidgetList"));
        assert_refs_resolve(&doc, "#/components/schemas/", schemas);
        let patch = &doc["paths"]["/apis/kustos.dev/v1alpha1/namespaces/{namespace}/widgets/{name}"]["patch"];
        let content = patch["requestBody"]["content"].as_object().expect("content");
        assert!(content.contains_key("application/merge-patch+json"));
        assert!(!content.contains_key("application/strategic-merge-patch+json"));
        let status = &doc["paths"]["/apis/kustos.dev/v1alpha1/namespaces/{namespace}/widgets/{name}/status"]["patch"];
        assert!(!status["requestBody"]["content"]
            .as_object()
            .expect("content")
            .contains_key("application/strategic-merge-patch+json"));
        assert!(api.v3_document("apis/kustos.dev").is_some());
    }

    #[test]
    fn sha256_known_vector() {
        assert_eq!(etag_of(b"abc"), "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD");
    }

    #[test]
    fn normalize_handles_nullable_forms() {
        let mut s = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "a": {"type": ["string", "null"]},
                "b": {"anyOf": [{"$ref": "#/$defs/X"}, {"type": "null"}], "description": "d"},
                "c": {"const": "k"},
                "d": {"type": "array", "items": {"$ref": "#/$defs/Y"}},
            },
        });
        normalize(&mut s);
        assert_eq!(
            s,
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "string"},
                    "b": {"$ref": "#/definitions/X", "description": "d"},
                    "c": {"enum": ["k"]},
                    "d": {"type": "array", "items": {"$ref": "#/definitions/Y"}},
                },
            })
        );
        assert_eq!(
            to_v3(&s)["properties"]["b"],
            json!({"allOf": [{"$ref": "#/components/schemas/X"}], "description": "d"})
        );
        assert_eq!(to_v3(&s)["properties"]["d"]["items"], json!({"$ref": "#/components/schemas/Y"}));
    }
}
