use super::*;
use serde_json::json;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

#[test]
fn dns1123_subdomain_table() {
    let long = "a".repeat(254);
    let max = format!("{}.{}", "a".repeat(63), "b".repeat(189));
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("example.com", vec![]),
        ("a", vec![]),
        ("0-a.b-9", vec![]),
        (&max, vec![]),
        ("", vec![SUBDOMAIN_MSG.into()]),
        ("Bad_Name", vec![SUBDOMAIN_MSG.into()]),
        ("-a", vec![SUBDOMAIN_MSG.into()]),
        ("a-", vec![SUBDOMAIN_MSG.into()]),
        ("a..b", vec![SUBDOMAIN_MSG.into()]),
        (".a", vec![SUBDOMAIN_MSG.into()]),
        ("a.", vec![SUBDOMAIN_MSG.into()]),
        ("a\n", vec![SUBDOMAIN_MSG.into()]),
        ("ä", vec![SUBDOMAIN_MSG.into()]),
        (&long, vec!["must be no more than 253 characters".into()]),
    ];
    for (input, want) in cases {
        assert_eq!(is_dns1123_subdomain(input), want, "input {input:?}");
    }
}

#[test]
fn dns1123_label_table() {
    let cases: Vec<(String, Vec<String>)> = vec![
        ("kube-system".into(), vec![]),
        ("a".repeat(63), vec![]),
        ("a".repeat(64), vec!["must be no more than 63 characters".into()]),
        ("a.b".into(), vec!["must not contain dots".into()]),
        ("A".into(), vec![LABEL_MSG.into()]),
        ("".into(), vec![LABEL_MSG.into()]),
        (
            format!("{}.b", "a".repeat(63)),
            vec!["must be no more than 63 characters".into(), "must not contain dots".into()],
        ),
    ];
    for (input, want) in cases {
        assert_eq!(is_dns1123_label(&input), want, "input {input:?}");
    }
}

#[test]
fn dns1035_label_table() {
    assert!(is_dns1035_label("my-svc").is_empty());
    assert_eq!(is_dns1035_label("1abc").len(), 1);
    assert!(is_dns1035_label("1abc")[0].starts_with("a DNS-1035 label must consist"));
}

#[test]
fn qualified_name_table() {
    let cases: Vec<(String, Vec<String>)> = vec![
            ("app".into(), vec![]),
            ("MyName".into(), vec![]),
            ("my.name_x-1".into(), vec![]),
            ("example.com/MyName".into(), vec![]),
            ("kubernetes.io/metadata.name".into(), vec![]),
            ("a".repeat(63), vec![]),
            ("a".repeat(64), vec!["name part must be no more than 63 characters".into()]),
            ("".into(), vec!["name part must be non-empty".into(), NAME_PART_MSG.into()]),
            ("-a".into(), vec![NAME_PART_MSG.into()]),
            ("a b".into(), vec![NAME_PART_MSG.into()]),
            ("/a".into(), vec!["prefix part must be non-empty".into()]),
            ("Example.com/a".into(), vec![format!("prefix part {SUBDOMAIN_MSG}")]),
            ("example.com/".into(), vec!["name part must be non-empty".into(), NAME_PART_MSG.into()]),
            (
                "a/b/c".into(),
                vec!["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into()],
            ),
        ];
    for (input, want) in cases {
        assert_eq!(is_qualified_name(&input), want, "input {input:?}");
    }
}

#[test]
fn label_value_table() {
    let cases: Vec<(String, Vec<String>)> = vec![
        ("".into(), vec![]),
        ("v1".into(), vec![]),
        ("my_value.x-y".into(), vec![]),
        ("a".repeat(63), vec![]),
        ("a".repeat(64), vec!["must be no more than 63 characters".into()]),
        ("-a".into(), vec![VALUE_MSG.into()]),
        ("a/b".into(), vec![VALUE_MSG.into()]),
        ("a b".into(), vec![VALUE_MSG.into()]),
    ];
    for (input, want) in cases {
        assert_eq!(is_valid_label_value(&input), want, "input {input:?}");
    }
}

#[test]
fn config_map_key_table() {
    let re = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    let cases: Vec<(String, Vec<String>)> = vec![
        ("key.name".into(), vec![]),
        ("KEY_NAME".into(), vec![]),
        (".dotfile".into(), vec![]),
        ("a..b".into(), vec![]),
        ("".into(), vec![re.into()]),
        ("a/b".into(), vec![re.into()]),
        (".".into(), vec!["must not be '.'".into()]),
        ("..".into(), vec!["must not be '..'".into()]),
        ("..a".into(), vec!["must not start with '..'".into()]),
        ("a".repeat(254), vec!["must be no more than 253 characters".into()]),
    ];
    for (input, want) in cases {
        assert_eq!(is_config_map_key(&input), want, "input {input:?}");
    }
}

#[test]
fn path_segment_table() {
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("system:node:foo", vec![]),
        ("Anything_goes", vec![]),
        (".", vec!["may not be '.'"]),
        ("..", vec!["may not be '..'"]),
        ("a/b", vec!["may not contain '/'"]),
        ("a%b/c", vec!["may not contain '/'", "may not contain '%'"]),
    ];
    for (input, want) in cases {
        assert_eq!(validate_path_segment_name(input), want, "input {input:?}");
    }
    assert!(validate_path_segment_prefix("..").is_empty());
}

#[test]
fn generate_name_table() {
    let mut rng = rand::rng();
    let s = generate_name_suffix(&mut rng);
    assert_eq!(s.len(), 5);
    assert!(s.bytes().all(|c| NAME_SUFFIX_ALPHABET.contains(&c)));
    let n = generate_name("web-");
    assert!(n.starts_with("web-") && n.len() == 9);
    let n = generate_name(&"x".repeat(100));
    assert_eq!(n.len(), 63);
    assert!(n.starts_with(&"x".repeat(58)));
    // Never splits a character.
    let n = generate_name(&"é".repeat(40));
    assert!(n.len() <= 63);
}

type NameFn = fn(&str) -> Vec<String>;

#[test]
fn generate_name_prefix_rules() {
    let cases: Vec<(&str, NameFn, bool)> = vec![
        ("web-", is_dns1123_subdomain, true),
        ("web", is_dns1123_subdomain, true),
        ("Web-", is_dns1123_subdomain, false),
        ("-", is_dns1123_subdomain, false),
        ("ns-", is_dns1123_label, true),
        ("system:node-", validate_path_segment_name, true),
        (".", validate_path_segment_name, true),
        ("..", validate_path_segment_name, true),
        ("a/", validate_path_segment_name, false),
    ];
    for (gn, f, ok) in cases {
        assert_eq!(validate_generate_name(gn, f).is_empty(), ok, "generateName {gn:?}");
    }
}

fn render(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(FieldError::render).collect()
}

#[test]
fn object_meta_table() {
    let sub: fn(&str) -> Vec<String> = is_dns1123_subdomain;
    let cases: Vec<(Value, bool, Vec<String>)> = vec![
            (json!({"name": "ok", "namespace": "default"}), true, vec![]),
            (json!({"name": "ok"}), false, vec![]),
            (json!({"generateName": "web-", "name": "web-abcde", "namespace": "x"}), true, vec![]),
            (json!({}), false, vec!["metadata.name: Required value: name or generateName is required".into()]),
            (json!({"name": "ok"}), true, vec!["metadata.namespace: Required value".into()]),
            (json!({"name": "ok", "namespace": "x"}), false, vec!["metadata.namespace: Forbidden: not allowed on this type".into()]),
            (
                json!({"name": "ok", "namespace": "Bad"}),
                true,
                vec![format!("metadata.namespace: Invalid value: \"Bad\": {LABEL_MSG}")],
            ),
            (json!({"name": "Bad_Name"}), false, vec![format!("metadata.name: Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}")]),
            (
                json!({"name": "x", "generateName": "Bad-"}),
                false,
                vec![format!("metadata.generateName: Invalid value: \"Bad-\": {SUBDOMAIN_MSG}")],
            ),
            (
                json!({"name": "x", "generation": -1}),
                false,
                vec!["metadata.generation: Invalid value: -1: must be greater than or equal to 0".into()],
            ),
            (
                json!({"name": "x", "labels": {"a": "b", "bad key": "c", "d": "-e"}}),
                false,
                vec![
                    format!("metadata.labels: Invalid value: \"bad key\": {NAME_PART_MSG}"),
                    format!("metadata.labels: Invalid value: \"-e\": {VALUE_MSG}"),
                ],
            ),
            (json!({"name": "x", "annotations": {"Example.COM/Key": "v"}}), false, vec![]),
            (
                json!({"name": "x", "annotations": {"a b": "v"}}),
                false,
                vec![format!("metadata.annotations: Invalid value: \"a b\": {NAME_PART_MSG}")],
            ),
            (
                json!({"name": "x", "annotations": {"a": "v".repeat(262_144)}}),
                false,
                vec![FieldError::too_long("metadata.annotations", 262_144).render()],
            ),
            (json!({"name": "x", "annotations": {"a": "v".repeat(262_143)}}), false, vec![]),
            (
                json!({"name": "x", "finalizers": ["kubernetes.io/pv-protection", "orphan", "bad/key/x"]}),
                false,
                vec!["metadata.finalizers: Invalid value: \"bad/key/x\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into()],
            ),
            (
                json!({"name": "x", "finalizers": ["orphan", "foregroundDeletion"]}),
                false,
                vec!["metadata.finalizers: Invalid value: [\"orphan\",\"foregroundDeletion\"]: finalizer orphan and foregroundDeletion cannot be both set".into()],
            ),
            (
                json!({"name": "x", "ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u"}]}),
                false,
                vec![],
            ),
            (
                json!({"name": "x", "ownerReferences": [{}]}),
                false,
                vec![
                    "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty".into(),
                    "metadata.ownerReferences.kind: Invalid value: \"\": kind must not be empty".into(),
                    "metadata.ownerReferences.name: Invalid value: \"\": name must not be empty".into(),
                    "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty".into(),
                ],
            ),
            (
                json!({"name": "x", "ownerReferences": [{"apiVersion": "apps/", "kind": "K", "name": "n", "uid": "u"}]}),
                false,
                vec!["metadata.ownerReferences.apiVersion: Invalid value: \"apps/\": version must not be empty".into()],
            ),
            (
                json!({"name": "x", "ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "n", "uid": "u"}]}),
                false,
                vec!["metadata.ownerReferences: Invalid value: {\"apiVersion\":\"v1\",\"kind\":\"Event\",\"name\":\"n\",\"uid\":\"u\"}: /v1, Kind=Event is disallowed from being an owner".into()],
            ),
            // Upstream's ValidateManagedFields is part of ValidateObjectMeta.
            (
                json!({"name": "x", "managedFields": [{"whatever": 1}]}),
                false,
                vec!["metadata.managedFields[0].operation: Invalid value: \"\": must be `Apply` or `Update`".into()],
            ),
        ];
    for (meta, namespaced, want) in cases {
        assert_eq!(render(&validate_object_meta(&meta, namespaced, sub, "metadata")), want, "meta {meta}");
    }
}

#[test]
fn one_controller_only() {
    let meta = json!({"name": "x", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2", "controller": false},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "c", "uid": "3", "controller": true}
    ]});
    let errs = validate_object_meta(&meta, false, is_dns1123_subdomain, "metadata");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "metadata.ownerReferences");
    assert!(errs[0].message.ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and Deployment/c"
        ));
}

#[test]
fn object_meta_name_rules() {
    let m = json!({"name": "system:node:n1"});
    assert!(validate_object_meta(&m, false, validate_path_segment_name, "metadata").is_empty());
    assert_eq!(validate_object_meta(&m, false, is_dns1123_subdomain, "metadata").len(), 1);
    let m = json!({"name": "a.b"});
    assert_eq!(
        render(&validate_object_meta(&m, false, is_dns1123_label, "metadata")),
        vec!["metadata.name: Invalid value: \"a.b\": must not contain dots".to_string()]
    );
}

#[test]
fn object_meta_wrong_types_do_not_panic() {
    for meta in [
        json!(null),
        json!([]),
        json!({"name": 1, "labels": [], "annotations": "x", "finalizers": {}, "ownerReferences": 3}),
        json!({"name": "x", "labels": {"a": 1}, "finalizers": [1, null], "ownerReferences": [1, {"uid": 2}]}),
        json!({"name": "x", "generation": "1"}),
    ] {
        let _ = validate_object_meta(&meta, true, is_dns1123_subdomain, "metadata");
        let _ = validate_object_meta_update(&meta, &json!({}));
    }
}

#[test]
fn object_meta_update_table() {
    let old = json!({"name": "a", "namespace": "ns", "uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z"});
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (old.clone(), vec![]),
        (
            json!({"name": "a", "namespace": "ns", "uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z", "labels": {"x": "y"}}),
            vec![],
        ),
        (
            json!({"name": "b", "namespace": "ns2", "uid": "u2", "creationTimestamp": "2025-01-01T00:00:00Z"}),
            vec![
                "metadata.name: Invalid value: \"b\": field is immutable",
                "metadata.namespace: Invalid value: \"ns2\": field is immutable",
                "metadata.uid: Invalid value: \"u2\": field is immutable",
                "metadata.creationTimestamp: Invalid value: \"2025-01-01T00:00:00Z\": field is immutable",
            ],
        ),
        (
            json!({"name": "a", "namespace": "ns"}),
            vec![
                "metadata.uid: Invalid value: \"\": field is immutable",
                "metadata.creationTimestamp: Invalid value: null: field is immutable",
            ],
        ),
    ];
    for (new, want) in cases {
        assert_eq!(render(&validate_object_meta_update(&new, &old)), want, "new {new}");
    }
    // Missing, null and "" are the same.
    assert!(validate_object_meta_update(&json!({"namespace": ""}), &json!({"namespace": null})).is_empty());
}
