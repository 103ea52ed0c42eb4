//! An OpenAPI v2 document (JSON) as gnostic's `openapi.v2.Document` protobuf message
//! (`openapiv2/OpenAPIv2.proto` of github.com/google/gnostic-models), the body of
//! `/openapi/v2` for `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`.
//!
//! kube-apiserver makes this form by parsing its JSON document with gnostic and marshaling the
//! message; kubectl 1.27 and 1.28 read only this form (`apply`, `diff`, `explain`), and newer
//! ones fall back to it. This writes the same message straight from the JSON value:
//!
//! - every field of the proto that a key of the JSON maps to, in field-number order, proto3
//!   style (an empty string, `false` and `0` are left out; a present object is written even
//!   when empty, so `properties: {}` stays present, as kubectl distinguishes it from none);
//! - JSON objects keyed by names (`paths`, `definitions`, `properties`, `responses`, ...) as
//!   gnostic's repeated `Named*` pairs, in the document's key order;
//! - the oneofs decided as gnostic decides them: a parameter `in: body` is a `BodyParameter`,
//!   others the `NonBodyParameter` sub-schema of their `in`; `$ref` parameters and responses are
//!   `JsonReference`s; `additionalProperties` is a schema or a boolean; `items` one schema or a
//!   list; a response schema of `type: file` a `FileSchema`; security definitions by `type`
//!   (and `flow` for OAuth2);
//! - `x-` keys as `NamedAny` vendor extensions, and `default`, `example` and `enum` values as
//!   `Any`, each holding the YAML text gnostic writes ([`super::yaml`]), which is what kubectl
//!   reads the group-version-kinds and patch strategies from.
//!
//! Keys the proto has no field for (`oneOf`, `anyOf`, `nullable`, ... of v3-style schemas) are
//! left out; values of the wrong JSON type for their field are left out too.

use serde_json::{Map, Value};

use super::yaml::to_yaml;

/// The `openapi.v2.Document` message for the OpenAPI v2 document `doc`.
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let Some(d) = doc.as_object() else { return Vec::new() };
    let mut w = Msg::default();
    w.string(1, d.get("swagger"));
    w.message(2, d.get("info"), info);
    w.string(3, d.get("host"));
    w.string(4, d.get("basePath"));
    w.strings(5, d.get("schemes"));
    w.strings(6, d.get("consumes"));
    w.strings(7, d.get("produces"));
    w.message(8, d.get("paths"), paths);
    w.message(9, d.get("definitions"), |w, m| w.named(1, m, schema));
    w.message(10, d.get("parameters"), |w, m| w.named(1, m, parameter));
    w.message(11, d.get("responses"), |w, m| w.named(1, m, response));
    w.each(12, d.get("security"), security_requirement);
    w.message(13, d.get("securityDefinitions"), |w, m| w.named(1, m, security_definition));
    w.each(14, d.get("tags"), tag);
    w.message(15, d.get("externalDocs"), external_docs);
    w.extensions(16, d);
    w.0
}

/// A message under construction.
#[derive(Default)]
struct Msg(Vec<u8>);

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8 & 0x7F) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u64) {
        self.varint((u64::from(field) << 3) | wire);
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn str(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    /// A `string` field from a JSON string.
    fn string(&mut self, field: u32, v: Option<&Value>) {
        if let Some(Value::String(s)) = v {
            self.str(field, s);
        }
    }

    /// A `repeated string` field from a JSON array of strings.
    fn strings(&mut self, field: u32, v: Option<&Value>) {
        for s in v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            self.bytes(field, s.as_bytes());
        }
    }

    fn boolean(&mut self, field: u32, v: Option<&Value>) {
        if let Some(Value::Bool(true)) = v {
            self.key(field, VARINT);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, v: Option<&Value>) {
        let n = match v {
            Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
            _ => None,
        };
        if let Some(n) = n.filter(|n| *n != 0) {
            self.key(field, VARINT);
            self.varint(n as u64);
        }
    }

    fn double(&mut self, field: u32, v: Option<&Value>) {
        if let Some(f) = v.and_then(Value::as_f64).filter(|f| *f != 0.0) {
            self.key(field, FIXED64);
            self.0.extend_from_slice(&f.to_le_bytes());
        }
    }

    /// A message field, written by `f` from a JSON object.
    fn message(&mut self, field: u32, v: Option<&Value>, f: impl FnOnce(&mut Msg, &Map<String, Value>)) {
        if let Some(Value::Object(m)) = v {
            self.sub(field, |w| f(w, m));
        }
    }

    /// A message field, written by `f` whatever the JSON is.
    fn sub(&mut self, field: u32, f: impl FnOnce(&mut Msg)) {
        let mut inner = Msg::default();
        f(&mut inner);
        self.bytes(field, &inner.0);
    }

    /// A repeated message field from a JSON array of objects.
    fn each(&mut self, field: u32, v: Option<&Value>, f: fn(&mut Msg, &Map<String, Value>)) {
        for m in v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object) {
            self.sub(field, |w| f(w, m));
        }
    }

    /// gnostic's `Named<T>` pairs (`name = 1`, `value = 2`) for the entries of `m` whose
    /// values are objects.
    fn named(&mut self, field: u32, m: &Map<String, Value>, f: fn(&mut Msg, &Map<String, Value>)) {
        self.named_where(field, m, |_| true, f);
    }

    /// [`Msg::named`] for the keys `keep` takes (gnostic's key patterns: paths start with `/`,
    /// responses are status codes or `default`).
    fn named_where(
        &mut self,
        field: u32,
        m: &Map<String, Value>,
        keep: fn(&str) -> bool,
        f: fn(&mut Msg, &Map<String, Value>),
    ) {
        for (name, value) in m.iter().filter(|(k, _)| keep(k)) {
            let Value::Object(value) = value else { continue };
            self.sub(field, |w| {
                w.str(1, name);
                w.sub(2, |w| f(w, value));
            });
        }
    }

    /// An `Any` field: the YAML text of the value (`yaml = 2`).
    fn any(&mut self, field: u32, v: Option<&Value>) {
        if let Some(v) = v {
            self.sub(field, |w| w.str(2, &to_yaml(v)));
        }
    }

    fn anys(&mut self, field: u32, v: Option<&Value>) {
        for item in v.and_then(Value::as_array).into_iter().flatten() {
            self.any(field, Some(item));
        }
    }

    /// The `x-` keys of `m` as `repeated NamedAny vendor_extension`.
    fn extensions(&mut self, field: u32, m: &Map<String, Value>) {
        for (name, value) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
            self.sub(field, |w| {
                w.str(1, name);
                w.any(2, Some(value));
            });
        }
    }
}

fn info(w: &mut Msg, m: &Map<String, Value>) {
    w.string(1, m.get("title"));
    w.string(2, m.get("version"));
    w.string(3, m.get("description"));
    w.string(4, m.get("termsOfService"));
    w.message(5, m.get("contact"), |w, c| {
        w.string(1, c.get("name"));
        w.string(2, c.get("url"));
        w.string(3, c.get("email"));
        w.extensions(4, c);
    });
    w.message(6, m.get("license"), |w, l| {
        w.string(1, l.get("name"));
        w.string(2, l.get("url"));
        w.extensions(3, l);
    });
    w.extensions(7, m);
}

fn external_docs(w: &mut Msg, m: &Map<String, Value>) {
    w.string(1, m.get("description"));
    w.string(2, m.get("url"));
    w.extensions(3, m);
}

fn tag(w: &mut Msg, m: &Map<String, Value>) {
    w.string(1, m.get("name"));
    w.string(2, m.get("description"));
    w.message(3, m.get("externalDocs"), external_docs);
    w.extensions(4, m);
}

/// `Paths`: vendor extensions (1), then each path's `PathItem` (2).
fn paths(w: &mut Msg, m: &Map<String, Value>) {
    w.extensions(1, m);
    w.named_where(2, m, |k| k.starts_with('/'), path_item);
}

fn path_item(w: &mut Msg, m: &Map<String, Value>) {
    w.string(1, m.get("$ref"));
    for (field, method) in
        [(2, "get"), (3, "put"), (4, "post"), (5, "delete"), (6, "options"), (7, "head"), (8, "patch")]
    {
        w.message(field, m.get(method), operation);
    }
    w.each(9, m.get("parameters"), parameters_item);
    w.extensions(10, m);
}

fn operation(w: &mut Msg, m: &Map<String, Value>) {
    w.strings(1, m.get("tags"));
    w.string(2, m.get("summary"));
    w.string(3, m.get("description"));
    w.message(4, m.get("externalDocs"), external_docs);
    w.string(5, m.get("operationId"));
    w.strings(6, m.get("produces"));
    w.strings(7, m.get("consumes"));
    w.each(8, m.get("parameters"), parameters_item);
    w.message(9, m.get("responses"), |w, r| {
        let status_code = |k: &str| k == "default" || (k.len() == 3 && k.bytes().all(|b| b.is_ascii_digit()));
        w.named_where(1, r, status_code, response_value);
        w.extensions(2, r);
    });
    w.strings(10, m.get("schemes"));
    w.boolean(11, m.get("deprecated"));
    w.each(12, m.get("security"), security_requirement);
    w.extensions(13, m);
}

fn json_reference(w: &mut Msg, m: &Map<String, Value>) {
    w.string(1, m.get("$ref"));
    w.string(2, m.get("description"));
}

/// `ParametersItem`: a `Parameter` (1) or a `JsonReference` (2).
fn parameters_item(w: &mut Msg, m: &Map<String, Value>) {
    if m.contains_key("$ref") {
        w.sub(2, |w| json_reference(w, m));
    } else {
        w.sub(1, |w| parameter(w, m));
    }
}

/// `Parameter`: a `BodyParameter` (1) or a `NonBodyParameter` (2) with the sub-schema of its
/// `in` (header 1, formData 2, query 3, path 4).
fn parameter(w: &mut Msg, m: &Map<String, Value>) {
    match m.get("in").and_then(Value::as_str) {
        Some("body") => w.sub(1, |w| {
            w.string(1, m.get("description"));
            w.string(2, m.get("name"));
            w.string(3, m.get("in"));
            w.boolean(4, m.get("required"));
            w.message(5, m.get("schema"), schema);
            w.extensions(6, m);
        }),
        Some(place @ ("header" | "formData" | "query" | "path")) => w.sub(2, |w| {
            let (field, allows_empty) = match place {
                "header" => (1, false),
                "formData" => (2, true),
                "query" => (3, true),
                _ => (4, false),
            };
            w.sub(field, |w| {
                w.boolean(1, m.get("required"));
                w.string(2, m.get("in"));
                w.string(3, m.get("description"));
                w.string(4, m.get("name"));
                let first = if allows_empty {
                    w.boolean(5, m.get("allowEmptyValue"));
                    6
                } else {
                    5
                };
                let vendor = primitive(w, m, first);
                w.extensions(vendor, m);
            });
        }),
        _ => {}
    }
}

/// The fields every primitive (non-body) parameter, `PrimitivesItems` and `Header` share, from
/// `type` to `multipleOf`, numbered from `first` on. Returns the next field number.
fn primitive(w: &mut Msg, m: &Map<String, Value>, first: u32) -> u32 {
    w.string(first, m.get("type"));
    w.string(first + 1, m.get("format"));
    w.message(first + 2, m.get("items"), primitives_items);
    w.string(first + 3, m.get("collectionFormat"));
    w.any(first + 4, m.get("default"));
    w.double(first + 5, m.get("maximum"));
    w.boolean(first + 6, m.get("exclusiveMaximum"));
    w.double(first + 7, m.get("minimum"));
    w.boolean(first + 8, m.get("exclusiveMinimum"));
    w.int64(first + 9, m.get("maxLength"));
    w.int64(first + 10, m.get("minLength"));
    w.string(first + 11, m.get("pattern"));
    w.int64(first + 12, m.get("maxItems"));
    w.int64(first + 13, m.get("minItems"));
    w.boolean(first + 14, m.get("uniqueItems"));
    w.anys(first + 15, m.get("enum"));
    w.double(first + 16, m.get("multipleOf"));
    first + 17
}

fn primitives_items(w: &mut Msg, m: &Map<String, Value>) {
    let vendor = primitive(w, m, 1);
    w.extensions(vendor, m);
}

/// `ResponseValue`: a `Response` (1) or a `JsonReference` (2).
fn response_value(w: &mut Msg, m: &Map<String, Value>) {
    if m.contains_key("$ref") {
        w.sub(2, |w| json_reference(w, m));
    } else {
        w.sub(1, |w| response(w, m));
    }
}

fn response(w: &mut Msg, m: &Map<String, Value>) {
    w.string(1, m.get("description"));
    // `SchemaItem`: a `Schema` (1) or, for `type: file`, a `FileSchema` (2).
    w.message(2, m.get("schema"), |w, s| {
        if s.get("type").and_then(Value::as_str) == Some("file") {
            w.sub(2, |w| file_schema(w, s));
        } else {
            w.sub(1, |w| schema(w, s));
        }
    });
    w.message(3, m.get("headers"), |w, h| {
        w.named(1, h, |w, header| {
            let next = primitive(w, header, 1);
            w.string(next, header.get("description"));
            w.extensions(next + 1, header);
        })
    });
    w.message(4, m.get("examples"), |w, e| {
        for (name, value) in e {
            w.sub(1, |w| {
                w.str(1, name);
                w.any(2, Some(value));
            });
        }
    });
    w.extensions(5, m);
}

fn file_schema(w: &mut Msg, m: &Map<String, Value>) {
    w.string(1, m.get("format"));
    w.string(2, m.get("title"));
    w.string(3, m.get("description"));
    w.any(4, m.get("default"));
    w.strings(5, m.get("required"));
    w.string(6, m.get("type"));
    w.boolean(7, m.get("readOnly"));
    w.message(8, m.get("externalDocs"), external_docs);
    w.any(9, m.get("example"));
    w.extensions(10, m);
}

/// `Schema`, every field of it.
fn schema(w: &mut Msg, m: &Map<String, Value>) {
    w.string(1, m.get("$ref"));
    w.string(2, m.get("format"));
    w.string(3, m.get("title"));
    w.string(4, m.get("description"));
    w.any(5, m.get("default"));
    w.double(6, m.get("multipleOf"));
    w.double(7, m.get("maximum"));
    w.boolean(8, m.get("exclusiveMaximum"));
    w.double(9, m.get("minimum"));
    w.boolean(10, m.get("exclusiveMinimum"));
    w.int64(11, m.get("maxLength"));
    w.int64(12, m.get("minLength"));
    w.string(13, m.get("pattern"));
    w.int64(14, m.get("maxItems"));
    w.int64(15, m.get("minItems"));
    w.boolean(16, m.get("uniqueItems"));
    w.int64(17, m.get("maxProperties"));
    w.int64(18, m.get("minProperties"));
    w.strings(19, m.get("required"));
    w.anys(20, m.get("enum"));
    // `AdditionalPropertiesItem`: a `Schema` (1) or a boolean (2, written even when false).
    match m.get("additionalProperties") {
        Some(Value::Object(s)) => w.sub(21, |w| w.sub(1, |w| schema(w, s))),
        Some(Value::Bool(b)) => w.sub(21, |w| {
            w.key(2, VARINT);
            w.varint(u64::from(*b));
        }),
        _ => {}
    }
    // `TypeItem`: one type or several.
    match m.get("type") {
        Some(Value::String(t)) => w.sub(22, |w| w.bytes(1, t.as_bytes())),
        Some(types @ Value::Array(_)) => w.sub(22, |w| w.strings(1, Some(types))),
        _ => {}
    }
    // `ItemsItem`: one schema, or a list of them.
    match m.get("items") {
        Some(Value::Object(s)) => w.sub(23, |w| w.sub(1, |w| schema(w, s))),
        Some(items @ Value::Array(_)) => w.sub(23, |w| w.each(1, Some(items), schema)),
        _ => {}
    }
    w.each(24, m.get("allOf"), schema);
    w.message(25, m.get("properties"), |w, p| w.named(1, p, schema));
    w.string(26, m.get("discriminator"));
    w.boolean(27, m.get("readOnly"));
    w.message(28, m.get("xml"), |w, x| {
        w.string(1, x.get("name"));
        w.string(2, x.get("namespace"));
        w.string(3, x.get("prefix"));
        w.boolean(4, x.get("attribute"));
        w.boolean(5, x.get("wrapped"));
        w.extensions(6, x);
    });
    w.message(29, m.get("externalDocs"), external_docs);
    w.any(30, m.get("example"));
    w.extensions(31, m);
}

/// `SecurityRequirement`: each scheme's scopes as a `NamedStringArray`.
fn security_requirement(w: &mut Msg, m: &Map<String, Value>) {
    for (name, scopes) in m {
        w.sub(1, |w| {
            w.str(1, name);
            w.sub(2, |w| w.strings(1, Some(scopes)));
        });
    }
}

/// `SecurityDefinitionsItem`, by `type` (and `flow` for OAuth2).
fn security_definition(w: &mut Msg, m: &Map<String, Value>) {
    let scopes = |w: &mut Msg, field: u32| {
        w.message(field, m.get("scopes"), |w, s| {
            for (name, value) in s {
                w.sub(1, |w| {
                    w.str(1, name);
                    w.string(2, Some(value));
                });
            }
        });
    };
    let kind = m.get("type").and_then(Value::as_str);
    let flow = m.get("flow").and_then(Value::as_str);
    match (kind, flow) {
        (Some("basic"), _) => w.sub(1, |w| {
            w.string(1, m.get("type"));
            w.string(2, m.get("description"));
            w.extensions(3, m);
        }),
        (Some("apiKey"), _) => w.sub(2, |w| {
            w.string(1, m.get("type"));
            w.string(2, m.get("name"));
            w.string(3, m.get("in"));
            w.string(4, m.get("description"));
            w.extensions(5, m);
        }),
        (Some("oauth2"), Some("implicit")) => w.sub(3, |w| {
            w.string(1, m.get("type"));
            w.string(2, m.get("flow"));
            scopes(w, 3);
            w.string(4, m.get("authorizationUrl"));
            w.string(5, m.get("description"));
            w.extensions(6, m);
        }),
        (Some("oauth2"), Some(flow @ ("password" | "application"))) => {
            w.sub(if flow == "password" { 4 } else { 5 }, |w| {
                w.string(1, m.get("type"));
                w.string(2, m.get("flow"));
                scopes(w, 3);
                w.string(4, m.get("tokenUrl"));
                w.string(5, m.get("description"));
                w.extensions(6, m);
            })
        }
        (Some("oauth2"), Some("accessCode")) => w.sub(6, |w| {
            w.string(1, m.get("type"));
            w.string(2, m.get("flow"));
            scopes(w, 3);
            w.string(4, m.get("authorizationUrl"));
            w.string(5, m.get("tokenUrl"));
            w.string(6, m.get("description"));
            w.extensions(7, m);
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
