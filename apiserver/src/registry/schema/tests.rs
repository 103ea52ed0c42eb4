use super::*;
use serde_json::json;

fn schema() -> Structural {
    let props: JSONSchemaProps = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                    "mode": {"type": "string", "enum": ["Fast", "Slow"], "default": "Fast"},
                    "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5},
                    "tags": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "string"}},
                    "port": {"x-kubernetes-int-or-string": true},
                    "when": {"type": "string", "format": "date-time"},
                    "ip": {"type": "string", "format": "ipv4"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "nested": {"type": "object", "default": {}, "properties": {"level": {"type": "integer", "default": 3}}},
                    "opt": {"type": "string", "nullable": true},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"x": {"type": "string"}}},
                },
            },
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        },
    }))
    .unwrap();
    Structural::from_props(&props, "schema").unwrap()
}

fn obj(spec: Value) -> Value {
    json!({"apiVersion": "x.dev/v1", "kind": "W", "metadata": {"name": "a"}, "spec": spec})
}

fn rendered(s: &Structural, v: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    s.validate(v, "", &mut errs);
    errs.iter().map(FieldError::render).collect()
}

#[test]
fn validation_reports_upstream_field_causes() {
    let s = schema();
    let cases: &[(&str, Value, &[&str])] = &[
        (
            "valid",
            json!({"size": 3, "mode": "Slow", "name": "abc", "tags": ["x"], "port": "http", "ip": "10.0.0.1"}),
            &[],
        ),
        ("int or string as integer", json!({"size": 3, "port": 8080}), &[]),
        (
            "wrong type",
            json!({"size": "three"}),
            &["spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""],
        ),
        ("missing required", json!({}), &["spec.size: Required value"]),
        (
            "below minimum",
            json!({"size": 0}),
            &["spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"],
        ),
        (
            "above maximum",
            json!({"size": 11}),
            &["spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"],
        ),
        (
            "enum",
            json!({"size": 1, "mode": "Medium"}),
            &["spec.mode: Unsupported value: \"Medium\": supported values: \"Fast\", \"Slow\""],
        ),
        (
            "pattern",
            json!({"size": 1, "name": "AB"}),
            &["spec.name: Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'"],
        ),
        (
            "min length",
            json!({"size": 1, "name": "a"}),
            &["spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long"],
        ),
        ("max length", json!({"size": 1, "name": "abcdef"}), &["spec.name: Too long: may not be more than 5 bytes"]),
        (
            "max items",
            json!({"size": 1, "tags": ["a", "b", "c"]}),
            &["spec.tags: Too many: 3: must have at most 2 items"],
        ),
        (
            "min items",
            json!({"size": 1, "tags": []}),
            &["spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"],
        ),
        (
            "item type",
            json!({"size": 1, "tags": [1]}),
            &["spec.tags[0]: Invalid value: \"integer\": spec.tags[0] in body must be of type string: \"integer\""],
        ),
        (
            "int or string rejects bool",
            json!({"size": 1, "port": true}),
            &["spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""],
        ),
        (
            "date-time format",
            json!({"size": 1, "when": "yesterday"}),
            &["spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\""],
        ),
        (
            "ipv4 format",
            json!({"size": 1, "ip": "300.1.1.1"}),
            &["spec.ip: Invalid value: \"300.1.1.1\": spec.ip in body must be of type ipv4: \"300.1.1.1\""],
        ),
        (
            "map values",
            json!({"size": 1, "labels": {"a": 1}}),
            &["spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\""],
        ),
        ("nullable accepts null", json!({"size": 1, "opt": null}), &[]),
        (
            "null where not nullable",
            json!({"size": null}),
            &["spec.size: Invalid value: \"null\": spec.size in body must be of type integer: \"null\""],
        ),
    ];
    for (name, spec, want) in cases {
        assert_eq!(rendered(&s, &obj(spec.clone())), *want, "case {name}");
    }
}

#[test]
fn pruning_drops_unspecified_fields_and_keeps_preserved_ones() {
    let s = schema();
    let cases: &[(&str, Value, Value)] = &[
        ("unknown spec field", json!({"size": 1, "bogus": 2}), json!({"size": 1})),
        (
            "preserve unknown fields",
            json!({"size": 1, "free": {"a": {"b": 1}}}),
            json!({"size": 1, "free": {"a": {"b": 1}}}),
        ),
        ("map keys kept", json!({"size": 1, "labels": {"x": "y"}}), json!({"size": 1, "labels": {"x": "y"}})),
        (
            "embedded resource keeps apiVersion kind metadata",
            json!({"size": 1, "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "x": "1", "y": 2}}),
            json!({"size": 1, "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "x": "1"}}),
        ),
    ];
    for (name, spec, want) in cases {
        let mut v = obj(spec.clone());
        v["extra"] = json!(1);
        s.prune(&mut v, true);
        assert_eq!(v, obj(want.clone()), "case {name}");
    }
}

#[test]
fn defaults_fill_absent_and_non_nullable_null_fields() {
    let s = schema();
    let cases: &[(&str, Value, Value)] = &[
        ("absent fields", json!({"size": 1}), json!({"size": 1, "mode": "Fast", "nested": {"level": 3}})),
        (
            "given values stay",
            json!({"size": 1, "mode": "Slow", "nested": {"level": 5}}),
            json!({"size": 1, "mode": "Slow", "nested": {"level": 5}}),
        ),
        (
            "null is defaulted",
            json!({"size": 1, "mode": null, "nested": {}}),
            json!({"size": 1, "mode": "Fast", "nested": {"level": 3}}),
        ),
    ];
    for (name, spec, want) in cases {
        let mut v = obj(spec.clone());
        let mut unbounded = usize::MAX;
        s.apply_defaults(&mut v, &mut unbounded).unwrap();
        assert_eq!(v, obj(want.clone()), "case {name}");
    }
    // Each default set is paid for: a list of many empty items stops at the budget.
    let props: JSONSchemaProps = serde_json::from_value(json!({"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"d": {"type": "array", "items": {"type": "object", "properties": {
            "x": {"type": "integer", "default": 7}}}}}}}}))
    .unwrap();
    let list = Structural::from_props(&props, "schema").unwrap();
    let items = |n: usize| json!({"spec": {"d": vec![json!({}); n]}});
    let cost = DEFAULT_COST + DEFAULT_COST_PER_BYTE;
    let mut budget = 10 * cost;
    let mut v = items(10);
    list.apply_defaults(&mut v, &mut budget).unwrap();
    assert_eq!((v["spec"]["d"][9]["x"].clone(), budget), (json!(7), 0), "ten defaults fit ten defaults' budget");
    let mut budget = 10 * cost;
    assert_eq!(list.apply_defaults(&mut items(11), &mut budget), Err(ExcessiveDefaults), "the eleventh does not");
}

#[test]
fn structural_rules_are_checked() {
    let cases: &[(&str, Value, &[&str])] = &[
        ("good", json!({"type": "object", "properties": {"spec": {"type": "object"}}}), &[]),
        ("root not object", json!({"type": "string"}), &["s.type: Invalid value: \"string\": must be object at the root"]),
        ("missing type", json!({"type": "object", "properties": {"spec": {}}}), &["s.properties[spec].type: Required value: must not be empty for specified object fields"]),
        ("array without items", json!({"type": "object", "properties": {"l": {"type": "array"}}}), &["s.properties[l].items: Required value: must be specified"]),
        ("missing item type", json!({"type": "object", "properties": {"l": {"type": "array", "items": {}}}}), &["s.properties[l].items.type: Required value: must not be empty for specified array items"]),
        ("bad type", json!({"type": "object", "properties": {"x": {"type": "date"}}}), &["s.properties[x].type: Unsupported value: \"date\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""]),
        ("int or string with type", json!({"type": "object", "properties": {"x": {"type": "string", "x-kubernetes-int-or-string": true}}}), &["s.properties[x].type: Invalid value: \"string\": must be empty if x-kubernetes-int-or-string is true"]),
        ("preserve unknown needs no type", json!({"type": "object", "properties": {"x": {"x-kubernetes-preserve-unknown-fields": true}}}), &[]),
        ("bad pattern", json!({"type": "object", "properties": {"x": {"type": "string", "pattern": "("}}}), &["PATTERN"]),
        ("metadata fields", json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}), &["s.properties[metadata].properties: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"]),
    ];
    for (name, schema, want) in cases {
        let props: JSONSchemaProps = serde_json::from_value(schema.clone()).unwrap();
        let got: Vec<String> = match Structural::from_props(&props, "s") {
            Ok(_) => Vec::new(),
            Err(errs) => errs.iter().map(FieldError::render).collect(),
        };
        if want == &["PATTERN"] {
            assert_eq!(got.len(), 1, "case {name}: {got:?}");
            assert!(
                got[0].starts_with("s.properties[x].pattern: Invalid value: \"(\": must be a valid regular expression"),
                "case {name}: {got:?}"
            );
        } else {
            assert_eq!(got, *want, "case {name}");
        }
    }
}

#[test]
fn formats() {
    let cases: &[(&str, &str, &str, bool)] = &[
        ("uuid ok", "uuid", "123e4567-e89b-12d3-a456-426614174000", true),
        ("uuid bad", "uuid", "123", false),
        ("date ok", "date", "2024-02-29", true),
        ("date bad", "date", "2023-02-29", false),
        ("cidr ok", "cidr", "10.0.0.0/8", true),
        ("cidr bad", "cidr", "10.0.0.0/33", false),
        ("ipv6 ok", "ipv6", "::1", true),
        ("byte ok", "byte", "aGVsbG8=", true),
        ("byte bad", "byte", "!!", false),
        ("duration ok", "duration", "1h30m", true),
        ("duration bad", "duration", "1 hour", false),
        ("email ok", "email", "a@b.dev", true),
        ("email bad", "email", "nobody", false),
        ("hostname bad", "hostname", "-a.b", false),
        ("unknown format", "frobnicate", "anything", true),
    ];
    for (name, f, s, want) in cases {
        assert_eq!(format_ok(f, s), *want, "case {name}");
    }
}
