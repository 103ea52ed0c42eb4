//! OpenAPI v2 (`/openapi/v2`) and v3 (`/openapi/v3`, `/openapi/v3/<group-version>`) documents,
//! generated from the registry of served kinds when first asked for (and again after the
//! served kinds change); server-side apply's schema of a kind is built when that kind is
//! first written. An idle server holds neither (the documents are ~4 MB, and the core/v1
//! schemas behind Pods and Services are large).
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
//! - `apply` (client-side or `--server-side`), `diff` and `explain` of kubectl 1.27 and 1.28,
//!   and kubectl 1.32's validation of kinds the v3 documents have no PATCH operation for (a
//!   TokenReview): the v2 document as gnostic's `openapi.v2.Document` protobuf
//!   (`Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), its definitions'
//!   group-version-kinds and patch annotations read from the YAML of their vendor extensions.
//!
//! Each document is served with an ETag (upper-case hex SHA-256 of its bytes; the protobuf form
//! of v2 carries the JSON form's, as upstream); the v3 index links every GV document as
//! `/openapi/v3/<gv>?hash=<etag>`, which is cacheable for good.
//!
//! [`definitions`] builds the schemas, [`paths`] the operations of each document, [`gnostic`]
//! encodes the v2 document as protobuf (with [`yaml`] for its `Any` values); this file
//! assembles and serves the documents.
//!
//! Layer: above `registry/` (the kinds it describes) and `machinery/` (server-side apply's
//! schema is built from these documents), below the handlers and `loops/crd.rs`, which
//! rebuilds the documents when CRDs change; files here never import `api/` or `lib.rs`.

mod definitions;
mod extensions;
pub mod gnostic;
mod paths;
mod yaml;

use definitions::*;
use paths::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Map, Value};

use crate::machinery::apply::{Schema as ApplySchema, SchemaError};
use crate::registry::{Registry, ResourceDef};

/// `info.version` of the documents.
const INFO_VERSION: &str = "v1.37.0";
/// The protobuf media types of `/openapi/v2` a client may ask for (the first is what client-go
/// sends), and the one the response names, as kube-apiserver does.
const V2_PROTOBUF_ACCEPTED: [&str; 2] = [
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
];
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

/// The apply schema of every kind in `reg`, built once per set of served kinds: a custom
/// resource's from its version's `openAPIV3Schema` (as apiextensions-apiserver builds it from
/// the structural schema), a built-in kind's from the v2 `definitions`. A schema that cannot
/// be built is left out (logged): writes of that kind then track fields by the shape of the
/// values (`Schema::deduced`, every list atomic).
fn apply_schemas(
    reg: &Registry,
    defs: &Map<String, Value>,
    kinds: &KindNames,
) -> HashMap<(String, String, String), Arc<ApplySchema>> {
    let mut out = HashMap::new();
    for def in reg.resources.iter().filter(|d| !d.create_only) {
        let built = match def.strategy.openapi_schema() {
            Some(schema) => serde_json::from_value(schema)
                .map_err(SchemaError::Encode)
                .and_then(|props| ApplySchema::from_crd(&props)),
            None => match kinds.get(&(def.group, def.version, def.kind)) {
                Some(name) => ApplySchema::from_definitions(defs, name),
                None => Err(SchemaError::NoDefinition(def.kind.to_string())),
            },
        };
        match built {
            Ok(schema) => {
                out.insert((def.group.to_string(), def.version.to_string(), def.kind.to_string()), Arc::new(schema));
            }
            Err(e) => tracing::warn!(kind = def.kind, group = def.group, error = %e, "no server-side apply schema"),
        }
    }
    out
}

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

/// The OpenAPI documents and server-side apply's schemas of one set of served kinds, each
/// built when first needed.
pub struct OpenApi {
    registry: Registry,
    docs: OnceLock<Docs>,
    /// Server-side apply's schema of each kind written so far, by group, version and kind
    /// (`None`: it could not be built): built-in kinds from their v2 definitions, custom
    /// resources from their CRD's schema.
    apply: Mutex<HashMap<KindKey, Option<Arc<ApplySchema>>>>,
}

/// Group, version and kind.
type KindKey = (String, String, String);

impl std::fmt::Debug for OpenApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenApi")
            .field("kinds", &self.registry.resources.len())
            .field("documents_built", &self.docs.get().is_some())
            .finish_non_exhaustive()
    }
}

/// The documents.
#[derive(Debug)]
struct Docs {
    v2: Doc,
    /// The v2 document as gnostic's `openapi.v2.Document` protobuf ([`gnostic`]); served with
    /// the JSON form's ETag, as kube-apiserver does.
    v2_protobuf: Bytes,
    v3_index: Doc,
    /// `api/v1`, `apis/certificates.k8s.io/v1`, `api`, `apis`, `apis/<g>`, `version` → document.
    v3: BTreeMap<String, Doc>,
}

impl Docs {
    /// Build every document from the registry.
    fn new(reg: &Registry) -> Self {
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

        let defs: Map<String, Value> = defs.into_iter().collect();
        let v2 = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": INFO_VERSION},
            "paths": paths_v2,
            "definitions": defs,
            "securityDefinitions": {"BearerToken": bearer_token()},
            "security": [{"BearerToken": []}],
        });
        let index: Map<String, Value> = v3
            .iter()
            .map(|(k, d)| (k.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{k}?hash={}", d.hash)})))
            .collect();
        let v2_protobuf = Bytes::from(gnostic::encode_document(&v2));
        Docs { v2: Doc::new(&v2), v2_protobuf, v3_index: Doc::new(&json!({ "paths": index })), v3 }
    }
}

impl OpenApi {
    /// The documents and schemas of the kinds in `reg` (nothing is built yet).
    pub fn new(reg: &Registry) -> Self {
        OpenApi { registry: reg.clone(), docs: OnceLock::new(), apply: Mutex::default() }
    }

    fn docs(&self) -> &Docs {
        self.docs.get_or_init(|| Docs::new(&self.registry))
    }

    /// Server-side apply's schema of `def`'s kind (None: it could not be built, see
    /// [`apply_schemas`]), built from that kind's definitions alone the first time.
    pub fn apply_schema(&self, def: &ResourceDef) -> Option<Arc<ApplySchema>> {
        let key = (def.group.to_string(), def.version.to_string(), def.kind.to_string());
        if let Some(known) = self.apply.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) {
            return known.clone();
        }
        let one = Registry { resources: vec![def.clone()] };
        let (defs, kinds) = definitions(&one);
        let defs: Map<String, Value> = defs.into_iter().collect();
        let built = apply_schemas(&one, &defs, &kinds).remove(&key);
        self.apply.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, built.clone());
        built
    }

    /// The v2 document (JSON).
    pub fn v2(&self) -> &Bytes {
        &self.docs().v2.bytes
    }
    /// ETag of the v2 document (upper-case hex, unquoted).
    pub fn v2_etag(&self) -> &str {
        &self.docs().v2.hash
    }
    /// The v3 index (`{"paths": {"api/v1": {"serverRelativeURL": ...}}}`).
    pub fn v3_index(&self) -> &Bytes {
        &self.docs().v3_index.bytes
    }
    /// ETag of the v3 index.
    pub fn v3_index_etag(&self) -> &str {
        &self.docs().v3_index.hash
    }
    /// One v3 document by its index key (`api/v1`, `apis/<group>/<version>`, `apis/<group>`,
    /// `api`, `apis`, `version`).
    pub fn v3_document(&self, gv_path: &str) -> Option<&Bytes> {
        self.docs().v3.get(gv_path.trim_matches('/')).map(|d| &d.bytes)
    }
    /// The hash (ETag) of one v3 document.
    pub fn v3_hash(&self, gv_path: &str) -> Option<&str> {
        self.docs().v3.get(gv_path.trim_matches('/')).map(|d| d.hash.as_str())
    }
    /// Index keys of the v3 documents.
    pub fn v3_paths(&self) -> impl Iterator<Item = &str> {
        self.docs().v3.keys().map(String::as_str)
    }

    /// The v2 document as gnostic's protobuf message.
    pub fn v2_protobuf(&self) -> &Bytes {
        &self.docs().v2_protobuf
    }

    /// `GET /openapi/v2`, in the form the client's Accept prefers (kube-apiserver's choice):
    /// the clauses by preference, the first that names JSON (or `*/*`, `application/*`) or
    /// gnostic's protobuf wins; no Accept is `*/*`; none acceptable is 406. Both forms carry
    /// the JSON document's ETag and `Vary: Accept`.
    pub fn v2_response(&self, accept: &str) -> Response {
        match v2_form(accept) {
            Some(V2Form::Json) => {
                let mut r = doc_response(&self.docs().v2, None);
                r.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
                r
            }
            Some(V2Form::Protobuf) => {
                let mut r = (StatusCode::OK, self.docs().v2_protobuf.clone()).into_response();
                let h = r.headers_mut();
                h.insert(header::CONTENT_TYPE, HeaderValue::from_static(V2_PROTOBUF));
                h.insert(header::VARY, HeaderValue::from_static("Accept"));
                if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", self.docs().v2.hash)) {
                    h.insert(header::ETAG, v);
                }
                r
            }
            None => not_acceptable(&format!(
                "only application/json and {} are supported for /openapi/v2",
                V2_PROTOBUF_ACCEPTED[0]
            )),
        }
    }

    /// `GET /openapi/v3`: the index.
    pub fn v3_index_response(&self) -> Response {
        let mut r = doc_response(&self.docs().v3_index, None);
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
        r
    }

    /// `GET /openapi/v3/<gv_path>[?hash=...]`. None when there is no such document. A matching
    /// `hash` makes the response cacheable forever; a stale one redirects (301) to the current
    /// URL, like kube-apiserver.
    pub fn v3_response(&self, gv_path: &str, query: Option<&str>) -> Option<Response> {
        let key = gv_path.trim_matches('/');
        let doc = self.docs().v3.get(key)?;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum V2Form {
    Json,
    Protobuf,
}

/// Which form of `/openapi/v2` an Accept header gets: its media ranges by quality (highest
/// first; at equal quality a concrete type before `type/*` before `*/*`, else in the order
/// given), the first one that JSON or the protobuf form matches. A range of quality 0 is
/// not acceptable.
fn v2_form(accept: &str) -> Option<V2Form> {
    let accept = if accept.trim().is_empty() { "*/*" } else { accept };
    let mut ranges: Vec<(f32, u8, String)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let range = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if range.is_empty() {
                return None;
            }
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q=").map(|q| q.trim().parse::<f32>().unwrap_or(1.0)))
                .next_back()
                .unwrap_or(1.0);
            let specificity = match range.as_str() {
                "*/*" | "*" => 0,
                r if r.ends_with("/*") => 1,
                _ => 2,
            };
            (q > 0.0).then_some((q, specificity, range))
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    ranges.iter().find_map(|(_, _, range)| match range.as_str() {
        "application/json" | "application/*" | "*/*" | "*" => Some(V2Form::Json),
        r if V2_PROTOBUF_ACCEPTED.contains(&r) => Some(V2Form::Protobuf),
        _ => None,
    })
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

#[cfg(test)]
mod tests;
