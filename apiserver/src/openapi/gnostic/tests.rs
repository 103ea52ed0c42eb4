//! Table tests of the encoder: small documents decoded back field by field, and the served
//! document read back whole.

use super::*;
use serde_json::json;

/// An expected field value: a string or bytes field, a varint, a double, a message.
#[derive(Debug, Clone, PartialEq)]
enum E {
    S(String),
    V(u64),
    D(f64),
    M(Vec<(u32, E)>),
}
use E::{D, M, V};

/// The fields of a message, in order.
type Fields = Vec<(u32, E)>;

fn s(text: &str) -> E {
    E::S(text.to_string())
}

/// `Any` with the given YAML.
fn any(yaml: &str) -> E {
    M(vec![(2, s(yaml))])
}

/// A `Named*` pair.
fn named(name: &str, value: E) -> E {
    M(vec![(1, s(name)), (2, value)])
}

/// `TypeItem`.
fn ty(t: &str) -> E {
    M(vec![(1, s(t))])
}

fn varint(b: &[u8], i: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = b[*i];
        *i += 1;
        v |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            break;
        }
    }
    v
}

/// The fields of the message `b`, a length-delimited field read as a message where the
/// expected field at the same place is one, else as a string.
fn decode_like(b: &[u8], expected: &[(u32, E)]) -> Vec<(u32, E)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i);
        let field = (key >> 3) as u32;
        let value = match key & 7 {
            0 => V(varint(b, &mut i)),
            1 => {
                let bytes: [u8; 8] = b[i..i + 8].try_into().expect("8 bytes");
                i += 8;
                D(f64::from_le_bytes(bytes))
            }
            2 => {
                let len = varint(b, &mut i) as usize;
                let body = &b[i..i + len];
                i += len;
                match expected.get(out.len()) {
                    Some((_, M(sub))) => M(decode_like(body, sub)),
                    _ => E::S(String::from_utf8_lossy(body).into_owned()),
                }
            }
            wire => panic!("unexpected wire type {wire}"),
        };
        out.push((field, value));
    }
    out
}

fn encoded_schema(schema: &Value) -> Vec<u8> {
    let mut w = Msg::default();
    super::schema(&mut w, schema.as_object().expect("object"));
    w.0
}

#[test]
fn a_small_document_byte_for_byte() {
    let doc = json!({"swagger": "2.0", "info": {"title": "T", "version": "v"}, "paths": {}});
    let want = [
        0x0A, 3, b'2', b'.', b'0', // swagger
        0x12, 6, 0x0A, 1, b'T', 0x12, 1, b'v', // info
        0x42, 0, // paths, present and empty
    ];
    assert_eq!(encode_document(&doc), want);
    assert_eq!(encode_document(&json!([])), Vec::<u8>::new());
}

#[test]
fn schemas() {
    let gvk_yaml = "- group: \"\"\n  kind: ConfigMap\n  version: v1\n";
    let cases: Vec<(&str, Value, Fields)> = vec![
        (
            "reference with a description",
            json!({"$ref": "#/definitions/X", "description": "d"}),
            vec![(1, s("#/definitions/X")), (4, s("d"))],
        ),
        (
            "primitive with format and default",
            json!({"type": "integer", "format": "int32", "default": 3}),
            vec![(2, s("int32")), (5, any("3\n")), (22, ty("integer"))],
        ),
        (
            "several types",
            json!({"type": ["string", "integer"]}),
            vec![(22, M(vec![(1, s("string")), (1, s("integer"))]))],
        ),
        (
            "numbers: zero left out as proto3 does, negative int64 as two's complement",
            json!({"minimum": 0, "maximum": 5.5, "multipleOf": 2, "maxLength": 10, "minLength": -1, "exclusiveMaximum": true, "exclusiveMinimum": false}),
            vec![(6, D(2.0)), (7, D(5.5)), (8, V(1)), (11, V(10)), (12, V(u64::MAX))],
        ),
        (
            "array limits and pattern",
            json!({"type": "array", "maxItems": 2, "minItems": 1, "uniqueItems": true, "pattern": "^a$", "items": {"type": "string"}}),
            vec![
                (13, s("^a$")),
                (14, V(2)),
                (15, V(1)),
                (16, V(1)),
                (22, ty("array")),
                (23, M(vec![(1, M(vec![(22, ty("string"))]))])),
            ],
        ),
        (
            "items as a list",
            json!({"items": [{"type": "string"}, {"$ref": "#/definitions/Y"}]}),
            vec![(23, M(vec![(1, M(vec![(22, ty("string"))])), (1, M(vec![(1, s("#/definitions/Y"))]))]))],
        ),
        (
            "object with properties, required, map limits",
            json!({
                "type": "object", "required": ["b", "a"], "maxProperties": 4, "minProperties": 1,
                "properties": {"a": {"type": "string"}, "b": {"$ref": "#/definitions/B"}},
            }),
            vec![
                (17, V(4)),
                (18, V(1)),
                (19, s("b")),
                (19, s("a")),
                (22, ty("object")),
                (
                    25,
                    M(vec![
                        (1, named("a", M(vec![(22, ty("string"))]))),
                        (1, named("b", M(vec![(1, s("#/definitions/B"))]))),
                    ]),
                ),
            ],
        ),
        ("empty properties stay present", json!({"properties": {}}), vec![(25, M(vec![]))]),
        (
            "a property named like an extension is a property",
            json!({"properties": {"x-kubernetes-list-type": {"type": "string"}}}),
            vec![(25, M(vec![(1, named("x-kubernetes-list-type", M(vec![(22, ty("string"))])))]))],
        ),
        (
            "additionalProperties as a schema",
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            vec![(21, M(vec![(1, M(vec![(22, ty("string"))]))])), (22, ty("object"))],
        ),
        ("additionalProperties false", json!({"additionalProperties": false}), vec![(21, M(vec![(2, V(0))]))]),
        ("additionalProperties true", json!({"additionalProperties": true}), vec![(21, M(vec![(2, V(1))]))]),
        (
            "enum values as Any",
            json!({"type": "string", "enum": ["Always", "true", ""]}),
            vec![(20, any("Always\n")), (20, any("\"true\"\n")), (20, any("\"\"\n")), (22, ty("string"))],
        ),
        (
            "allOf",
            json!({"allOf": [{"$ref": "#/definitions/A"}, {"type": "object"}]}),
            vec![(24, M(vec![(1, s("#/definitions/A"))])), (24, M(vec![(22, ty("object"))]))],
        ),
        (
            "title, discriminator, readOnly, xml, externalDocs, example",
            json!({
                "title": "t", "discriminator": "kind", "readOnly": true,
                "xml": {"name": "n", "namespace": "ns", "prefix": "p", "attribute": true, "wrapped": true, "x-x": 1},
                "externalDocs": {"description": "more", "url": "https://example.com", "x-y": "z"},
                "example": {"a": [1]},
            }),
            vec![
                (3, s("t")),
                (26, s("kind")),
                (27, V(1)),
                (
                    28,
                    M(vec![
                        (1, s("n")),
                        (2, s("ns")),
                        (3, s("p")),
                        (4, V(1)),
                        (5, V(1)),
                        (6, named("x-x", any("1\n"))),
                    ]),
                ),
                (29, M(vec![(1, s("more")), (2, s("https://example.com")), (3, named("x-y", any("z\n")))])),
                (30, any("a:\n    - 1\n")),
            ],
        ),
        (
            "vendor extensions in key order",
            json!({
                "type": "array",
                "items": {"type": "string"},
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}],
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "name",
                "x-kubernetes-patch-strategy": "merge,retainKeys",
                "x-kubernetes-preserve-unknown-fields": true,
            }),
            vec![
                (22, ty("array")),
                (23, M(vec![(1, M(vec![(22, ty("string"))]))])),
                (31, named("x-kubernetes-group-version-kind", any(gvk_yaml))),
                (31, named("x-kubernetes-list-map-keys", any("- name\n"))),
                (31, named("x-kubernetes-list-type", any("map\n"))),
                (31, named("x-kubernetes-patch-merge-key", any("name\n"))),
                (31, named("x-kubernetes-patch-strategy", any("merge,retainKeys\n"))),
                (31, named("x-kubernetes-preserve-unknown-fields", any("true\n"))),
            ],
        ),
        (
            "keys without a field and values of the wrong type are left out",
            json!({"oneOf": [{"type": "string"}], "nullable": true, "description": 5, "required": "a", "type": 7}),
            vec![],
        ),
    ];
    for (name, schema, want) in cases {
        let got = decode_like(&encoded_schema(&schema), &want);
        assert_eq!(got, want, "case {name}");
    }
}

fn encoded_document_field(doc: &Value, field: u32, want: &[(u32, E)]) -> Vec<(u32, E)> {
    let all = decode_like(&encode_document(doc), &[(field, M(want.to_vec()))]);
    match all.into_iter().next() {
        Some((f, M(inner))) if f == field => inner,
        other => panic!("field {field} is not the first of the document: {other:?}"),
    }
}

#[test]
fn paths_operations_and_parameters() {
    let doc = json!({"paths": {
        "/api/v1/namespaces/{namespace}/configmaps/{name}": {
            "parameters": [
                {"name": "name", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": "name of the ConfigMap"},
                {"$ref": "#/parameters/pretty"},
            ],
            "patch": {
                "tags": ["core_v1"],
                "summary": "s",
                "description": "partially update",
                "operationId": "patchCoreV1NamespacedConfigMap",
                "produces": ["application/json"],
                "consumes": ["application/strategic-merge-patch+json"],
                "parameters": [
                    {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/P"}, "x-b": "c"},
                    {"name": "force", "in": "query", "type": "boolean", "allowEmptyValue": true},
                    {"name": "X-H", "in": "header", "type": "string", "default": "h"},
                    {"name": "f", "in": "formData", "type": "array", "items": {"type": "integer", "enum": [1, 2]}, "collectionFormat": "csv"},
                    {"name": "odd", "in": "cookie", "type": "string"},
                ],
                "responses": {
                    "200": {"description": "OK", "schema": {"$ref": "#/definitions/C"}},
                    "201": {"$ref": "#/responses/created"},
                    "401": {"description": "Unauthorized"},
                    "x-r": true,
                    "2xx": {"description": "not a status code gnostic takes"},
                },
                "schemes": ["https"],
                "deprecated": true,
                "security": [{"BearerToken": []}],
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": "", "kind": "ConfigMap", "version": "v1"},
            },
            "get": {"operationId": "read"},
            "x-p": "q",
        },
        "x-paths": 1,
        "relative": {"get": {"operationId": "not a path gnostic takes"}},
    }});
    let path_param = M(vec![(
        2,
        M(vec![(
            4,
            M(vec![
                (1, V(1)),
                (2, s("path")),
                (3, s("name of the ConfigMap")),
                (4, s("name")),
                (5, s("string")),
                (19, V(1)),
            ]),
        )]),
    )]);
    let operation = M(vec![
        (1, s("core_v1")),
        (2, s("s")),
        (3, s("partially update")),
        (5, s("patchCoreV1NamespacedConfigMap")),
        (6, s("application/json")),
        (7, s("application/strategic-merge-patch+json")),
        (
            8,
            M(vec![(
                1,
                M(vec![(
                    1,
                    M(vec![
                        (2, s("body")),
                        (3, s("body")),
                        (4, V(1)),
                        (5, M(vec![(1, s("#/definitions/P"))])),
                        (6, named("x-b", any("c\n"))),
                    ]),
                )]),
            )]),
        ),
        (
            8,
            M(vec![(
                1,
                M(vec![(2, M(vec![(3, M(vec![(2, s("query")), (4, s("force")), (5, V(1)), (6, s("boolean"))]))]))]),
            )]),
        ),
        (
            8,
            M(vec![(
                1,
                M(vec![(2, M(vec![(1, M(vec![(2, s("header")), (4, s("X-H")), (5, s("string")), (9, any("h\n"))]))]))]),
            )]),
        ),
        (
            8,
            M(vec![(
                1,
                M(vec![(
                    2,
                    M(vec![(
                        2,
                        M(vec![
                            (2, s("formData")),
                            (4, s("f")),
                            (6, s("array")),
                            (8, M(vec![(1, s("integer")), (16, any("1\n")), (16, any("2\n"))])),
                            (9, s("csv")),
                        ]),
                    )]),
                )]),
            )]),
        ),
        // A parameter `in` no place gnostic knows: a Parameter with neither oneof.
        (8, M(vec![(1, M(vec![]))])),
        (
            9,
            M(vec![
                (
                    1,
                    named(
                        "200",
                        M(vec![(1, M(vec![(1, s("OK")), (2, M(vec![(1, M(vec![(1, s("#/definitions/C"))]))]))]))]),
                    ),
                ),
                (1, named("201", M(vec![(2, M(vec![(1, s("#/responses/created"))]))]))),
                (1, named("401", M(vec![(1, M(vec![(1, s("Unauthorized"))]))]))),
                (2, named("x-r", any("true\n"))),
            ]),
        ),
        (10, s("https")),
        (11, V(1)),
        (12, M(vec![(1, named("BearerToken", M(vec![])))])),
        (13, named("x-kubernetes-action", any("patch\n"))),
        (13, named("x-kubernetes-group-version-kind", any("group: \"\"\nkind: ConfigMap\nversion: v1\n"))),
    ]);
    let want = vec![
        (1, named("x-paths", any("1\n"))),
        (
            2,
            named(
                "/api/v1/namespaces/{namespace}/configmaps/{name}",
                M(vec![
                    (2, M(vec![(5, s("read"))])),
                    (8, operation),
                    (9, M(vec![(1, path_param)])),
                    (9, M(vec![(2, M(vec![(1, s("#/parameters/pretty"))]))])),
                    (10, named("x-p", any("q\n"))),
                ]),
            ),
        ),
    ];
    assert_eq!(encoded_document_field(&doc, 8, &want), want);
}

#[test]
fn document_level_fields() {
    let cases: Vec<(&str, Value, u32, Fields)> = vec![
        (
            "info",
            json!({"info": {"title": "Kubernetes", "version": "v1.32.0", "description": "d", "termsOfService": "t",
                "contact": {"name": "n", "url": "u", "email": "e", "x-c": 1}, "license": {"name": "Apache", "url": "l"}, "x-i": "j"}}),
            2,
            vec![
                (1, s("Kubernetes")),
                (2, s("v1.32.0")),
                (3, s("d")),
                (4, s("t")),
                (5, M(vec![(1, s("n")), (2, s("u")), (3, s("e")), (4, named("x-c", any("1\n")))])),
                (6, M(vec![(1, s("Apache")), (2, s("l"))])),
                (7, named("x-i", any("j\n"))),
            ],
        ),
        (
            "definitions",
            json!({"definitions": {"A": {"type": "string"}, "B": {"properties": {}}}}),
            9,
            vec![(1, named("A", M(vec![(22, ty("string"))]))), (1, named("B", M(vec![(25, M(vec![]))])))],
        ),
        (
            "shared parameters",
            json!({"parameters": {"pretty": {"name": "pretty", "in": "query", "type": "string"}}}),
            10,
            vec![(
                1,
                named(
                    "pretty",
                    M(vec![(2, M(vec![(3, M(vec![(2, s("query")), (4, s("pretty")), (6, s("string"))]))]))]),
                ),
            )],
        ),
        (
            "shared responses, a file schema and headers",
            json!({"responses": {"file": {"description": "f", "schema": {"type": "file", "format": "binary"},
                "headers": {"X-Rate": {"type": "integer", "description": "rate", "x-h": 1}},
                "examples": {"application/json": {"a": 1}}}}}),
            11,
            vec![(
                1,
                named(
                    "file",
                    M(vec![
                        (1, s("f")),
                        (2, M(vec![(2, M(vec![(1, s("binary")), (6, s("file"))]))])),
                        (
                            3,
                            M(vec![(
                                1,
                                named(
                                    "X-Rate",
                                    M(vec![(1, s("integer")), (18, s("rate")), (19, named("x-h", any("1\n")))]),
                                ),
                            )]),
                        ),
                        (4, M(vec![(1, named("application/json", any("a: 1\n")))])),
                    ]),
                ),
            )],
        ),
        (
            "security definitions of every kind",
            json!({"securityDefinitions": {
                "a": {"type": "apiKey", "name": "authorization", "in": "header", "description": "Bearer"},
                "b": {"type": "basic"},
                "c": {"type": "oauth2", "flow": "implicit", "authorizationUrl": "https://a", "scopes": {"read": "r"}},
                "d": {"type": "oauth2", "flow": "password", "tokenUrl": "https://t", "scopes": {}},
                "e": {"type": "oauth2", "flow": "application", "tokenUrl": "https://t"},
                "f": {"type": "oauth2", "flow": "accessCode", "authorizationUrl": "https://a", "tokenUrl": "https://t"},
            }}),
            13,
            vec![
                (
                    1,
                    named(
                        "a",
                        M(vec![(
                            2,
                            M(vec![(1, s("apiKey")), (2, s("authorization")), (3, s("header")), (4, s("Bearer"))]),
                        )]),
                    ),
                ),
                (1, named("b", M(vec![(1, M(vec![(1, s("basic"))]))]))),
                (
                    1,
                    named(
                        "c",
                        M(vec![(
                            3,
                            M(vec![
                                (1, s("oauth2")),
                                (2, s("implicit")),
                                (3, M(vec![(1, named("read", s("r")))])),
                                (4, s("https://a")),
                            ]),
                        )]),
                    ),
                ),
                (
                    1,
                    named(
                        "d",
                        M(vec![(
                            4,
                            M(vec![(1, s("oauth2")), (2, s("password")), (3, M(vec![])), (4, s("https://t"))]),
                        )]),
                    ),
                ),
                (1, named("e", M(vec![(5, M(vec![(1, s("oauth2")), (2, s("application")), (4, s("https://t"))]))]))),
                (
                    1,
                    named(
                        "f",
                        M(vec![(
                            6,
                            M(vec![(1, s("oauth2")), (2, s("accessCode")), (4, s("https://a")), (5, s("https://t"))]),
                        )]),
                    ),
                ),
            ],
        ),
        (
            "tags",
            json!({"tags": [{"name": "core", "description": "c", "externalDocs": {"url": "u"}}]}),
            14,
            vec![(1, s("core")), (2, s("c")), (3, M(vec![(2, s("u"))]))],
        ),
        ("external docs", json!({"externalDocs": {"url": "u"}}), 15, vec![(2, s("u"))]),
    ];
    for (name, doc, field, want) in cases {
        assert_eq!(encoded_document_field(&doc, field, &want), want, "case {name}");
    }
    let tail =
        json!({"host": "h", "basePath": "/", "schemes": ["https"], "consumes": ["a"], "produces": ["b"], "x-d": 1});
    let want =
        vec![(3, s("h")), (4, s("/")), (5, s("https")), (6, s("a")), (7, s("b")), (16, named("x-d", any("1\n")))];
    assert_eq!(decode_like(&encode_document(&tail), &want), want);
}

/// A field of a decoded message: a varint or fixed64 as its number, else its bytes.
fn raw_fields(b: &[u8]) -> Vec<(u32, Result<u64, &[u8]>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i);
        let value = match key & 7 {
            0 => Ok(varint(b, &mut i)),
            1 => {
                i += 8;
                Ok(0)
            }
            _ => {
                let len = varint(b, &mut i) as usize;
                i += len;
                Err(&b[i - len..i])
            }
        };
        out.push(((key >> 3) as u32, value));
    }
    out
}

fn sub_messages(b: &[u8], field: u32) -> Vec<&[u8]> {
    raw_fields(b).into_iter().filter(|(f, _)| *f == field).filter_map(|(_, v)| v.err()).collect()
}

/// The `Named*` pairs of field `field` of `b`: name and value bytes.
fn named_pairs(b: &[u8], field: u32) -> Vec<(String, &[u8])> {
    sub_messages(b, field)
        .into_iter()
        .map(|pair| {
            let name =
                sub_messages(pair, 1).first().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
            (name, sub_messages(pair, 2).first().copied().unwrap_or_default())
        })
        .collect()
}

/// The vendor extensions in field `field` of `b`, their YAML read back.
fn extensions_of(b: &[u8], field: u32) -> Map<String, Value> {
    named_pairs(b, field)
        .into_iter()
        .map(|(name, any)| {
            let yaml =
                sub_messages(any, 2).first().map(|y| String::from_utf8_lossy(y).into_owned()).unwrap_or_default();
            let value: Value = serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("{name}: {yaml:?}: {e}"));
            (name, value)
        })
        .collect()
}

fn json_extensions(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter().filter(|(k, _)| k.starts_with("x-")).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The encoded schema `b` carries the JSON schema's references, properties, items and
/// vendor extensions (read back from their YAML), all the way down.
fn assert_schema_matches(b: &[u8], json: &Value, at: &str) {
    let m = json.as_object().unwrap_or_else(|| panic!("{at}: not an object"));
    let reference = sub_messages(b, 1).first().map(|r| String::from_utf8_lossy(r).into_owned());
    assert_eq!(reference.as_deref(), m.get("$ref").and_then(Value::as_str), "{at}: $ref");
    assert_eq!(extensions_of(b, 31), json_extensions(m), "{at}: vendor extensions");
    let props: Vec<(String, &[u8])> = sub_messages(b, 25).first().map(|p| named_pairs(p, 1)).unwrap_or_default();
    let json_props = m.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    assert_eq!(
        props.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        json_props.keys().collect::<Vec<_>>(),
        "{at}"
    );
    for (name, value) in props {
        assert_schema_matches(value, &json_props[&name], &format!("{at}.{name}"));
    }
    if let Some(items) = m.get("items") {
        let encoded = sub_messages(b, 23);
        let schemas = sub_messages(encoded.first().copied().unwrap_or_default(), 1);
        assert_eq!(schemas.len(), 1, "{at}: items");
        assert_schema_matches(schemas[0], items, &format!("{at}[]"));
    }
    if let Some(extra @ Value::Object(_)) = m.get("additionalProperties") {
        let encoded = sub_messages(b, 21);
        let schema = sub_messages(encoded.first().copied().unwrap_or_default(), 1);
        assert_schema_matches(schema.first().copied().unwrap_or_default(), extra, &format!("{at}{{}}"));
    }
}

/// The checks kubectl's reader of this message (`k8s.io/kube-openapi/pkg/util/proto`)
/// makes of every definition, each of which fails the whole document when it fails.
fn assert_kubectl_reads(json: &Value, defs: &Map<String, Value>, at: &str) {
    let m = json.as_object().unwrap_or_else(|| panic!("{at}: not an object"));
    let types: Vec<&str> = match m.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
        assert!(m.get("properties").is_none() && types.is_empty(), "{at}: a reference with a type or properties");
        let name = r.strip_prefix("#/definitions/").unwrap_or_else(|| panic!("{at}: reference {r}"));
        assert!(defs.contains_key(name), "{at}: unknown model {name}");
        return;
    }
    assert!(types.len() <= 1, "{at}: several types");
    match types.first().copied() {
        Some("array") => {
            let items = m
                .get("items")
                .filter(|i| i.is_object())
                .unwrap_or_else(|| panic!("{at}: array without one item schema"));
            assert_kubectl_reads(items, defs, &format!("{at}[]"));
        }
        Some("object") | None => {
            for (name, p) in m.get("properties").and_then(Value::as_object).into_iter().flatten() {
                assert_kubectl_reads(p, defs, &format!("{at}.{name}"));
            }
            if let Some(extra @ Value::Object(_)) = m.get("additionalProperties") {
                assert_kubectl_reads(extra, defs, &format!("{at}{{}}"));
            }
        }
        Some(t) => {
            assert!(["string", "number", "integer", "boolean"].contains(&t), "{at}: unknown primitive type {t}")
        }
    }
}

#[test]
fn the_served_document_carries_every_definition_and_extension() {
    let api = crate::openapi::OpenApi::new(&crate::registry::Registry::builtin());
    let json: Value = serde_json::from_slice(api.v2()).expect("JSON");
    let pb = api.v2_protobuf().to_vec();
    assert_eq!(pb, encode_document(&json));
    let defs = json["definitions"].as_object().expect("definitions");
    let encoded = named_pairs(sub_messages(&pb, 9).first().copied().expect("definitions"), 1);
    assert_eq!(encoded.len(), defs.len());
    for (name, schema) in encoded {
        assert_schema_matches(schema, &defs[&name], &name);
        assert_kubectl_reads(&defs[&name], defs, &name);
    }
    let paths = json["paths"].as_object().expect("paths");
    let encoded = named_pairs(sub_messages(&pb, 8).first().copied().expect("paths"), 2);
    assert_eq!(encoded.len(), paths.len());
    let mut gvks = 0;
    for (path, item) in encoded {
        for (field, method) in [(2, "get"), (3, "put"), (4, "post"), (5, "delete"), (8, "patch")] {
            let Some(op) = paths[&path].get(method).and_then(Value::as_object) else { continue };
            let ext = extensions_of(sub_messages(item, field).first().copied().expect("operation"), 13);
            assert_eq!(ext, json_extensions(op), "{method} {path}");
            gvks += usize::from(ext.contains_key("x-kubernetes-group-version-kind"));
        }
    }
    assert!(gvks > 100, "{gvks} operations with a group-version-kind");
    let cm = &defs["io.k8s.api.core.v1.ConfigMap"];
    assert_eq!(
        cm["x-kubernetes-group-version-kind"],
        serde_json::json!([{"group": "", "kind": "ConfigMap", "version": "v1"}])
    );
}
