//! Table tests of the OpenAPI documents and of server-side apply's schemas.

use super::*;
use crate::registry::ResourceDef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use std::collections::BTreeSet;

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

/// A subresource that takes another kind (a ServiceAccount's `token` takes a
/// TokenRequest, as its strategy says) has that kind's definition and its POST body.
#[test]
fn a_subresource_of_another_kind_has_its_definition() {
    let api = api();
    let v2 = parse(api.v2());
    let defs = v2["definitions"].as_object().expect("definitions");
    let token_request = defs
        .iter()
        .find(|(_, s)| has_gvk(s, "authentication.k8s.io", "v1", "TokenRequest"))
        .map(|(name, _)| name.clone());
    let Some(name) = token_request else { panic!("no TokenRequest definition") };
    let post = &v2["paths"]["/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"]["post"];
    let body = post["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["in"] == "body"))
        .map(|p| p["schema"]["$ref"].clone());
    assert_eq!(body, Some(json!(format!("#/definitions/{name}"))), "{post}");
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
    assert_eq!(patch["x-kubernetes-group-version-kind"], json!({"group": "", "kind": "ConfigMap", "version": "v1"}));
    assert!(patch["consumes"].as_array().expect("consumes").contains(&json!("application/strategic-merge-patch+json")));

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

/// The generated annotations reach the documents, keyed as upstream's Go markers say.
/// Properties of the generated annotations that the served (1.37) definitions lack
/// because upstream added them later: none at 1.37.
const NEWER_THAN_SERVED: &[(&str, &str)] = &[];

#[test]
fn list_annotations_from_upstream_markers() {
    let api = api();
    let doc = parse(api.v2());
    let defs = &doc["definitions"];
    let map_by_type = [
        ("io.k8s.api.flowcontrol.v1.FlowSchemaStatus", "conditions"),
        ("io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationStatus", "conditions"),
        ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus", "conditions"),
        ("io.k8s.api.certificates.v1.CertificateSigningRequestStatus", "conditions"),
        ("io.k8s.api.core.v1.NamespaceStatus", "conditions"),
    ];
    for (def, prop) in map_by_type {
        let p = &defs[def]["properties"][prop];
        assert_eq!(p["x-kubernetes-list-type"], "map", "{def}.{prop}: {p}");
        assert_eq!(p["x-kubernetes-list-map-keys"], json!(["type"]), "{def}.{prop}");
    }
    // Defaults server-side apply keys port lists by, as upstream's `+default` markers.
    for def in ["io.k8s.api.core.v1.ContainerPort", "io.k8s.api.core.v1.ServicePort"] {
        assert_eq!(defs[def]["properties"]["protocol"]["default"], "TCP", "{def}");
    }
    for v in ["v1", "v1beta1"] {
        let def = format!("io.k8s.api.certificates.{v}.PodCertificateRequestSpec");
        assert_eq!(defs[&def]["properties"]["maxExpirationSeconds"]["default"], 86400, "{def}");
    }
    let verbs = &defs["io.k8s.api.flowcontrol.v1.ResourcePolicyRule"]["properties"]["verbs"];
    assert_eq!(verbs["x-kubernetes-list-type"], "set");
    assert_eq!(defs["io.k8s.api.rbac.v1.Subject"]["x-kubernetes-map-type"], "atomic");
    // Every annotation of a served definition names a property it has: a JSON name read
    // wrongly from the Go tags would show here.
    // The upstream sources the table is generated from may be newer than the served API
    // (1.37, k8s-openapi's types): fields added since are named here, and are skipped.
    let mut missing = Vec::new();
    for a in extensions::PROPERTIES {
        if let Some(props) = defs.get(a.definition).and_then(|d| d.get("properties")) {
            if props.get(a.property).is_none() {
                missing.push((a.definition, a.property));
            }
        }
    }
    assert_eq!(missing, NEWER_THAN_SERVED, "annotations naming no property of a served definition");
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
}

#[test]
fn v2_form_follows_the_accept_header() {
    let pb = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let cases: &[(&str, &str, Option<V2Form>)] = &[
        ("no accept", "", Some(V2Form::Json)),
        ("json", "application/json", Some(V2Form::Json)),
        ("anything", "*/*", Some(V2Form::Json)),
        ("client-go's protobuf", pb, Some(V2Form::Protobuf)),
        (
            "the newer protobuf name",
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            Some(V2Form::Protobuf),
        ),
        ("protobuf first", &format!("{pb}, application/json"), Some(V2Form::Protobuf)),
        ("json first", &format!("application/json, {pb}"), Some(V2Form::Json)),
        ("by quality", &format!("application/json;q=0.5, {pb}"), Some(V2Form::Protobuf)),
        ("concrete before a wildcard", &format!("*/*, {pb}"), Some(V2Form::Protobuf)),
        ("quality zero is refused", &format!("{pb};q=0"), None),
        ("unknown", "application/yaml", None),
        ("unknown then anything", "application/yaml, */*;q=0.1", Some(V2Form::Json)),
    ];
    for (name, accept, want) in cases {
        assert_eq!(v2_form(accept), *want, "case {name}");
    }
}

#[test]
fn v2_response_serves_both_forms_with_one_etag() {
    let api = api();
    let json = api.v2_response("application/json");
    assert_eq!(json.status(), StatusCode::OK);
    assert_eq!(json.headers()[header::CONTENT_TYPE], "application/json");
    let pb = api.v2_response("application/com.github.proto-openapi.spec.v2@v1.0+protobuf");
    assert_eq!(pb.status(), StatusCode::OK);
    assert_eq!(pb.headers()[header::CONTENT_TYPE], "application/com.github.proto-openapi.spec.v2.v1.0+protobuf");
    assert_eq!(pb.headers()[header::ETAG], json.headers()[header::ETAG]);
    assert_eq!(pb.headers()[header::ETAG], format!("\"{}\"", api.v2_etag()).as_str());
    for r in [&json, &pb] {
        assert_eq!(r.headers()[header::VARY], "Accept");
    }
    // The message starts with `swagger: "2.0"` (field 1) and is the encoder's output.
    assert!(api.v2_protobuf().starts_with(&[0x0A, 3, b'2', b'.', b'0']));
    assert_eq!(api.v2_response("text/html").status(), StatusCode::NOT_ACCEPTABLE);
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

/// A kind's apply schema built from its own definitions (what a write builds) is the one the
/// definitions of every served kind give.
#[test]
fn apply_schemas_built_per_kind_are_those_of_the_whole_document() {
    let reg = Registry::builtin();
    let (defs, kinds) = definitions(&reg);
    let defs: Map<String, Value> = defs.into_iter().collect();
    let whole = apply_schemas(&reg, &defs, &kinds);
    let api = OpenApi::new(&reg);
    let mut checked = 0;
    for def in reg.resources.iter().filter(|d| !d.create_only) {
        let key = (def.group.to_string(), def.version.to_string(), def.kind.to_string());
        let per_kind = api.apply_schema(def).map(|s| format!("{s:?}"));
        assert_eq!(per_kind, whole.get(&key).map(|s| format!("{s:?}")), "{key:?}");
        checked += 1;
    }
    assert!(checked > 20, "every writable kind compared ({checked})");
    assert!(api.docs.get().is_none(), "no document was built for that");
}
