//! The `definitions` (v2) and `components.schemas` (v3) of the documents: each kind's schema
//! in OpenAPI form, with the extensions and `<Kind>List` types upstream's documents carry.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

use super::extensions::{self, Annotation};
use super::*;
use crate::registry::subresource_kind;
use crate::registry::{Registry, ResourceDef, SchemaFn};

/// The definition name a `$ref` points to (`#/$defs/io.k8s...`, `#/definitions/...`, ...).
pub(super) fn ref_name(reference: &str) -> &str {
    reference.rsplit('/').next().unwrap_or(reference)
}

/// Definition name of every kind, by (group, version, kind): the registered resources and
/// the kinds of subresources such as `serviceaccounts/token`.
pub(super) type KindNames = BTreeMap<(&'static str, &'static str, &'static str), String>;

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
pub(super) fn is_builtin(definition: &str) -> bool {
    definition.starts_with("io.k8s.api.")
}

pub(super) fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

/// The extensions upstream's documents give a property: `x-kubernetes-list-type`,
/// `-list-map-keys`, `-map-type`, `-patch-strategy` and `-patch-merge-key`.
fn property_extensions(a: &Annotation) -> Map<String, Value> {
    let mut ext = Map::new();
    if let Some(t) = a.list_type {
        ext.insert("x-kubernetes-list-type".into(), json!(t));
    }
    if !a.list_map_keys.is_empty() {
        ext.insert("x-kubernetes-list-map-keys".into(), json!(a.list_map_keys));
    }
    if let Some(t) = a.map_type {
        ext.insert("x-kubernetes-map-type".into(), json!(t));
    }
    if let Some(s) = a.patch_strategy {
        ext.insert("x-kubernetes-patch-strategy".into(), json!(s));
    }
    if let Some(k) = a.patch_merge_key {
        ext.insert("x-kubernetes-patch-merge-key".into(), json!(k));
    }
    ext
}

/// Every definition (v2 form, `#/definitions/` refs) by name, and the definition name of
/// every kind.
pub(super) fn definitions(reg: &Registry) -> (BTreeMap<String, Value>, KindNames) {
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
            let Some(schema_fn) = def.strategy.subresources().and_then(|s| s.subresource_schema(sub)) else { continue };
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

    for a in extensions::PROPERTIES {
        let Some(Value::Object(p)) =
            defs.get_mut(a.definition).and_then(|d| d.get_mut("properties")).and_then(|p| p.get_mut(a.property))
        else {
            continue;
        };
        p.extend(property_extensions(a));
    }
    for (definition, property, default) in DEFAULTS {
        if let Some(Value::Object(p)) =
            defs.get_mut(*definition).and_then(|d| d.get_mut("properties")).and_then(|p| p.get_mut(*property))
        {
            p.insert("default".into(), default());
        }
    }
    for name in extensions::ATOMIC_STRUCTS {
        if let Some(Value::Object(d)) = defs.get_mut(*name) {
            d.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
    }
    (defs, kinds)
}

/// The `default`s upstream's documents carry (`+default` markers) where a client or server-side
/// apply reads them: the `protocol` key of the port lists (an item without it is `TCP`, and
/// keyed so), and a PodCertificateRequest's `maxExpirationSeconds`.
type DefaultFn = fn() -> Value;
const DEFAULTS: &[(&str, &str, DefaultFn)] = &[
    ("io.k8s.api.core.v1.ContainerPort", "protocol", || json!("TCP")),
    ("io.k8s.api.core.v1.ServicePort", "protocol", || json!("TCP")),
    ("io.k8s.api.certificates.v1.PodCertificateRequestSpec", "maxExpirationSeconds", || json!(86400)),
    ("io.k8s.api.certificates.v1beta1.PodCertificateRequestSpec", "maxExpirationSeconds", || json!(86400)),
];

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
pub(super) fn normalize(schema: &mut Value) {
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
pub(super) fn to_v3(schema: &Value) -> Value {
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
