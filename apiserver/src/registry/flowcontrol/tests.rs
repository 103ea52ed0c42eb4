use super::*;
use crate::registry::{StatusStrategy, TableStrategy, WriteStrategy};

type Mutation = fn(&mut Value);

fn fs_base() -> Value {
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
               "metadata": {"name": "mine", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "matchingPrecedence": 500,
                        "distinguisherMethod": {"type": "ByUser"},
                        "rules": [{"subjects": [{"kind": "User", "user": {"name": "flood"}}],
                                   "resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
                                                      "namespaces": ["*"]}],
                                   "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["/healthz", "/apis/*"]}]}]}})
}

fn pl_base() -> Value {
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
               "metadata": {"name": "mine", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "spec": {"type": "Limited",
                        "limited": {"nominalConcurrencyShares": 10, "lendablePercent": 20,
                                    "limitResponse": {"type": "Queue",
                                                      "queuing": {"queues": 64, "handSize": 6, "queueLengthLimit": 50}}}}})
}

fn rendered(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(FieldError::render).collect()
}

#[test]
fn flow_schema_validation() {
    let cases: &[(&str, Mutation, &[&str])] = &[
            ("valid", |_| {}, &[]),
            ("precedence zero", |o| o["spec"]["matchingPrecedence"] = json!(0),
             &["spec.matchingPrecedence: Invalid value: 0: must be a positive value"]),
            ("precedence too big", |o| o["spec"]["matchingPrecedence"] = json!(10001),
             &["spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000"]),
            ("precedence one is reserved", |o| o["spec"]["matchingPrecedence"] = json!(1),
             &["spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1"]),
            ("unknown distinguisher", |o| o["spec"]["distinguisherMethod"]["type"] = json!("ByGroup"),
             &["spec.distinguisherMethod.type: Unsupported value: flowcontrol.FlowDistinguisherMethod{Type:\"ByGroup\"}: supported values: \"ByNamespace\", \"ByUser\""]),
            ("no priority level", |o| o["spec"]["priorityLevelConfiguration"]["name"] = json!(""),
             &["spec.priorityLevelConfiguration.name: Required value: must reference a priority level"]),
            ("bad priority level name", |o| o["spec"]["priorityLevelConfiguration"]["name"] = json!("Bad_Name"),
             &["spec.priorityLevelConfiguration.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
            ("no subjects", |o| o["spec"]["rules"][0]["subjects"] = json!([]),
             &["spec.rules[0].subjects: Required value: subjects must contain at least one value"]),
            ("no rules at all", |o| {
                let r = o["spec"]["rules"][0].as_object_mut().unwrap();
                r.remove("resourceRules");
                r.remove("nonResourceRules");
            }, &["spec.rules[0]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty"]),
            ("unknown subject kind", |o| o["spec"]["rules"][0]["subjects"][0] = json!({"kind": "Robot"}),
             &["spec.rules[0].subjects[0].kind: Unsupported value: \"Robot\": supported values: \"Group\", \"ServiceAccount\", \"User\""]),
            ("user without user", |o| o["spec"]["rules"][0]["subjects"][0] = json!({"kind": "User", "group": {"name": "g"}}),
             &["spec.rules[0].subjects[0].user: Required value: user is required when subject kind is 'User'",
               "spec.rules[0].subjects[0].group: Forbidden: group is forbidden when subject kind is not 'Group'"]),
            ("group with empty name", |o| o["spec"]["rules"][0]["subjects"][0] = json!({"kind": "Group", "group": {"name": ""}}),
             &["spec.rules[0].subjects[0].group.name: Required value"]),
            ("service account without namespace",
             |o| o["spec"]["rules"][0]["subjects"][0] = json!({"kind": "ServiceAccount", "serviceAccount": {"name": "*", "namespace": ""}}),
             &["spec.rules[0].subjects[0].serviceAccount.namespace: Required value: must specify namespace for service account"]),
            ("wildcard verb with others", |o| o["spec"]["rules"][0]["resourceRules"][0]["verbs"] = json!(["*", "get"]),
             &["spec.rules[0].resourceRules[0].verbs: Invalid value: []string{\"*\", \"get\"}: if '*' is present, must not specify other verbs"]),
            ("unsupported verb", |o| o["spec"]["rules"][0]["resourceRules"][0]["verbs"] = json!(["get", "escalate"]),
             &["spec.rules[0].resourceRules[0].verbs: Unsupported value: []string{\"get\", \"escalate\"}: supported values: \"create\", \"delete\", \"deletecollection\", \"get\", \"list\", \"patch\", \"proxy\", \"update\", \"watch\""]),
            ("no api groups", |o| o["spec"]["rules"][0]["resourceRules"][0]["apiGroups"] = json!([]),
             &["spec.rules[0].resourceRules[0].apiGroups: Required value: resource rules must supply at least one api group"]),
            ("wildcard resource with others", |o| o["spec"]["rules"][0]["resourceRules"][0]["resources"] = json!(["pods", "*"]),
             &["spec.rules[0].resourceRules[0].resources: Invalid value: []string{\"pods\", \"*\"}: if '*' is present, must not specify other resources"]),
            ("namespaced rule without namespaces", |o| o["spec"]["rules"][0]["resourceRules"][0]["namespaces"] = json!([]),
             &["spec.rules[0].resourceRules[0].namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace"]),
            ("cluster-scoped rule without namespaces", |o| {
                o["spec"]["rules"][0]["resourceRules"][0]["namespaces"] = json!([]);
                o["spec"]["rules"][0]["resourceRules"][0]["clusterScope"] = json!(true);
            }, &[]),
            ("bad namespace", |o| o["spec"]["rules"][0]["resourceRules"][0]["namespaces"] = json!(["Kube"]),
             &["spec.rules[0].resourceRules[0].namespaces[0]: Invalid value: \"Kube\": each member of this list must be '*' or a DNS-1123 label; a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]),
            ("wildcard url with others", |o| o["spec"]["rules"][0]["nonResourceURLs"] = json!(null), &[]),
            ("urls", |o| o["spec"]["rules"][0]["nonResourceRules"][0]["nonResourceURLs"] = json!(["healthz", "/a b", "/a//b", "/a*", "/*/*", "/"]),
             &["spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value: \"healthz\": must start with slash",
               "spec.rules[0].nonResourceRules[0].nonResourceURLs[1]: Invalid value: \"/a b\": must not contain white-space",
               "spec.rules[0].nonResourceRules[0].nonResourceURLs[2]: Invalid value: \"/a//b\": must not contain double slash",
               "spec.rules[0].nonResourceRules[0].nonResourceURLs[3]: Invalid value: \"/a*\": wildcard can only do suffix matching",
               "spec.rules[0].nonResourceRules[0].nonResourceURLs[4]: Invalid value: \"/*/*\": wildcard can only do suffix matching"]),
            ("wildcard url with other urls", |o| o["spec"]["rules"][0]["nonResourceRules"][0]["nonResourceURLs"] = json!(["*", "/x"]),
             &["spec.rules[0].nonResourceRules[0].nonResourceURLs: Invalid value: []string{\"*\", \"/x\"}: if '*' is present, must not specify other non-resource URLs"]),
            ("duplicate condition", |o| o["status"] = json!({"conditions": [{"type": "Dangling"}, {"type": "Dangling"}, {"status": "True"}]}),
             &["status.conditions[1].type: Duplicate value: \"Dangling\"",
               "status.conditions[2].type: Required value: must not be empty"]),
        ];
    for (name, mutate, want) in cases {
        let mut obj = fs_base();
        mutate(&mut obj);
        assert_eq!(rendered(&validate_flow_schema(&obj)), *want, "{name}");
    }
}

#[test]
fn mandatory_flow_schemas_are_fixed() {
    let mut exempt = serde_json::to_value(bootstrap::mandatory_flow_schema("exempt").unwrap()).unwrap();
    default_flow_schema(&mut exempt);
    assert_eq!(rendered(&validate_flow_schema(&exempt)), Vec::<String>::new(), "the fixed exempt schema");
    exempt["spec"]["matchingPrecedence"] = json!(2);
    let errs = validate_flow_schema(&exempt);
    assert_eq!(errs.len(), 1, "changed exempt schema: {errs:?}");
    assert_eq!(errs[0].field, "spec", "changed exempt schema: field");
    assert!(errs[0].message.ends_with("spec of 'exempt' must equal the fixed value"), "changed exempt: {errs:?}");

    let mut catch_all = serde_json::to_value(bootstrap::mandatory_flow_schemas()[1].clone()).unwrap();
    catch_all["spec"]["distinguisherMethod"] = json!(null);
    let errs = validate_flow_schema(&catch_all);
    assert!(
        errs.iter().any(|e| e.message.ends_with("spec of 'catch-all' must equal the fixed value")),
        "catch-all: {errs:?}"
    );
}

#[test]
fn priority_level_validation() {
    let cases: &[(&str, Mutation, &[&str])] = &[
            ("valid", |_| {}, &[]),
            ("zero shares allowed in v1", |o| o["spec"]["limited"]["nominalConcurrencyShares"] = json!(0), &[]),
            ("negative shares", |o| o["spec"]["limited"]["nominalConcurrencyShares"] = json!(-1),
             &["spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer"]),
            ("lendable over 100", |o| o["spec"]["limited"]["lendablePercent"] = json!(101),
             &["spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive"]),
            ("negative borrowing", |o| o["spec"]["limited"]["borrowingLimitPercent"] = json!(-5),
             &["spec.limited.borrowingLimitPercent: Invalid value: -5: if specified, must be a non-negative integer"]),
            ("exempt type on another name", |o| {
                o["spec"] = json!({"type": "Exempt"});
            }, &["spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'"]),
            ("unknown type", |o| o["spec"]["type"] = json!("Sometimes"),
             &["spec.type: Unsupported value: \"Sometimes\": supported values: \"Exempt\", \"Limited\""]),
            ("limited without limited", |o| { o["spec"].as_object_mut().unwrap().remove("limited"); },
             &["spec.limited: Required value: must not be empty when type is Limited"]),
            ("limited with exempt", |o| o["spec"]["exempt"] = json!({}),
             &["spec.exempt: Forbidden: must be nil if the type is Limited"]),
            ("reject with queuing", |o| o["spec"]["limited"]["limitResponse"]["type"] = json!("Reject"),
             &["spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited"]),
            ("queue without queuing", |o| { o["spec"]["limited"]["limitResponse"].as_object_mut().unwrap().remove("queuing"); },
             &["spec.limited.limitResponse.queuing: Required value: must not be empty if limited.limitResponse.type is Limited"]),
            ("unknown limit response", |o| o["spec"]["limited"]["limitResponse"] = json!({"type": "Drop"}),
             &["spec.limited.limitResponse.type: Unsupported value: \"Drop\": supported values: \"Queue\", \"Reject\""]),
            ("queuing bounds", |o| o["spec"]["limited"]["limitResponse"]["queuing"] = json!({"queues": 0, "handSize": -1, "queueLengthLimit": 0}),
             &["spec.limited.limitResponse.queuing.queueLengthLimit: Invalid value: 0: must be positive",
               "spec.limited.limitResponse.queuing.queues: Invalid value: 0: must be positive",
               "spec.limited.limitResponse.queuing.handSize: Invalid value: -1: must be positive"]),
            ("too many queues", |o| o["spec"]["limited"]["limitResponse"]["queuing"]["queues"] = json!(10_000_001),
             &[
                    "spec.limited.limitResponse.queuing.queues: Invalid value: 10000001: must not be greater than 10000000",
                    "spec.limited.limitResponse.queuing.handSize: Invalid value: 6: required entropy bits of deckSize 10000001 and handSize 6 should not be greater than 60",
                ]),
            ("hand bigger than deck", |o| o["spec"]["limited"]["limitResponse"]["queuing"]["handSize"] = json!(65),
             &["spec.limited.limitResponse.queuing.handSize: Invalid value: 65: should not be greater than queues (64)"]),
            ("too much entropy", |o| o["spec"]["limited"]["limitResponse"]["queuing"] = json!({"queues": 128, "handSize": 9, "queueLengthLimit": 5}),
             &["spec.limited.limitResponse.queuing.handSize: Invalid value: 9: required entropy bits of deckSize 128 and handSize 9 should not be greater than 60"]),
            ("entropy at the limit", |o| o["spec"]["limited"]["limitResponse"]["queuing"] = json!({"queues": 1024, "handSize": 6, "queueLengthLimit": 5}), &[]),
            ("duplicate condition", |o| o["status"] = json!({"conditions": [{"type": "X"}, {"type": "X"}]}),
             &["status.conditions[1].type: Duplicate value: \"X\""]),
        ];
    for (name, mutate, want) in cases {
        let mut obj = pl_base();
        mutate(&mut obj);
        assert_eq!(rendered(&validate_priority_level(&obj)), *want, "{name}");
    }
}

#[test]
fn mandatory_priority_levels_are_fixed() {
    let level = |name: &str| {
        let mut v = serde_json::to_value(bootstrap::mandatory_priority_level(name).unwrap()).unwrap();
        default_priority_level(&mut v);
        v
    };
    type Case = (&'static str, &'static str, Mutation, Option<&'static str>);
    let cases: &[Case] = &[
        ("fixed exempt", "exempt", |_| {}, None),
        (
            "exempt may change its exempt section",
            "exempt",
            |o| o["spec"]["exempt"] = json!({"nominalConcurrencyShares": 10, "lendablePercent": 50}),
            None,
        ),
        (
            "exempt may not become limited",
            "exempt",
            |o| {
                o["spec"] = json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 5, "limitResponse": {"type": "Reject"}}});
            },
            Some("spec of 'exempt' except the 'spec.exempt' field must equal the fixed value"),
        ),
        ("fixed catch-all", "catch-all", |_| {}, None),
        (
            "catch-all may not change its shares",
            "catch-all",
            |o| o["spec"]["limited"]["nominalConcurrencyShares"] = json!(50),
            Some("spec of 'catch-all' must equal the fixed value"),
        ),
    ];
    for (case, name, mutate, want) in cases {
        let mut obj = level(name);
        mutate(&mut obj);
        let errs = validate_priority_level(&obj);
        let got = errs.iter().find(|e| e.field == "spec").map(|e| e.message.clone());
        match want {
            None => assert!(errs.is_empty(), "{case}: {errs:?}"),
            Some(w) => assert!(got.as_deref().is_some_and(|g| g.ends_with(w)), "{case}: {errs:?}"),
        }
    }
}

#[test]
fn defaults() {
    let mut fs = json!({"spec": {"priorityLevelConfiguration": {"name": "x"}}});
    default_flow_schema(&mut fs);
    assert_eq!(fs["spec"]["matchingPrecedence"], 1000, "precedence default");
    let mut fs = json!({});
    default_flow_schema(&mut fs);
    assert_eq!(fs["spec"]["matchingPrecedence"], 1000, "precedence default without spec");

    type Case = (&'static str, Value, Value);
    let cases: Vec<Case> = vec![
        (
            "unset shares → 30",
            json!({"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}}),
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 30, "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}),
        ),
        (
            "null shares → 30",
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": null, "limitResponse": {"type": "Reject"}}}),
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 30, "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}),
        ),
        (
            "explicit zero stays",
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}}}),
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}),
        ),
        (
            "queuing defaults",
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 5, "limitResponse": {"type": "Queue", "queuing": {"queues": 0}}}}),
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 5, "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}}}),
        ),
        (
            "exempt section",
            json!({"type": "Exempt", "exempt": {}}),
            json!({"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}),
        ),
        ("exempt without section", json!({"type": "Exempt"}), json!({"type": "Exempt"})),
    ];
    for (name, spec, want) in cases {
        let mut obj = json!({"spec": spec});
        default_priority_level(&mut obj);
        assert_eq!(obj["spec"], want, "{name}");
    }
}

#[test]
fn bootstrap_objects_are_valid_and_already_defaulted() {
    let fss = bootstrap::mandatory_flow_schemas().into_iter().chain(bootstrap::suggested_flow_schemas());
    for fs in fss {
        let v = serde_json::to_value(&fs).unwrap();
        let mut d = v.clone();
        default_flow_schema(&mut d);
        let name = fs.metadata.name.unwrap();
        assert_eq!(semantic_form(&d), semantic_form(&v), "{name}: defaulting changes nothing");
        assert_eq!(rendered(&validate_flow_schema(&v)), Vec::<String>::new(), "{name}: valid");
    }
    let pls = bootstrap::mandatory_priority_levels().into_iter().chain(bootstrap::suggested_priority_levels());
    for pl in pls {
        let v = serde_json::to_value(&pl).unwrap();
        let mut d = v.clone();
        default_priority_level(&mut d);
        let name = pl.metadata.name.unwrap();
        assert_eq!(semantic_form(&d), semantic_form(&v), "{name}: defaulting changes nothing");
        assert_eq!(rendered(&validate_priority_level(&v)), Vec::<String>::new(), "{name}: valid");
    }
}

#[test]
fn semantic_form_ignores_nil_versus_empty() {
    let a = json!({"rules": [{"resourceRules": [{"clusterScope": false, "namespaces": []}]}], "x": null, "s": ""});
    let b = json!({"rules": [{"resourceRules": [{}]}]});
    assert_eq!(semantic_form(&a), semantic_form(&b), "zero values");
    assert_ne!(semantic_form(&json!({"n": 0})), semantic_form(&json!({})), "a set 0 differs from nil");
}

#[test]
fn tables() {
    let now = chrono::DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&chrono::Utc);
    let names: Vec<&str> = FlowSchemaStrategy::new().columns().iter().map(|c| c.name).collect();
    assert_eq!(names, ["PriorityLevel", "MatchingPrecedence", "DistinguisherMethod", "Age", "MissingPL"], "fs columns");
    let names: Vec<&str> = PriorityLevelConfigurationStrategy::new().columns().iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        ["Type", "NominalConcurrencyShares", "Queues", "HandSize", "QueueLengthLimit", "Age"],
        "pl columns"
    );

    let mut fs = fs_base();
    assert_eq!(
        FlowSchemaStrategy::new().cells(&fs, now),
        vec![json!("workload-low"), json!(500), json!("ByUser"), json!("60m"), json!("?")],
        "fs without status"
    );
    fs["spec"].as_object_mut().unwrap().remove("distinguisherMethod");
    fs["status"] = json!({"conditions": [{"type": "Dangling", "status": "True"}]});
    assert_eq!(
        FlowSchemaStrategy::new().cells(&fs, now),
        vec![json!("workload-low"), json!(500), json!("<none>"), json!("60m"), json!("True")],
        "fs dangling"
    );

    let mut pl = pl_base();
    assert_eq!(
        PriorityLevelConfigurationStrategy::new().cells(&pl, now),
        vec![json!("Limited"), json!(10), json!(64), json!(6), json!(50), json!("60m")],
        "queuing level"
    );
    pl["spec"]["limited"]["limitResponse"] = json!({"type": "Reject"});
    assert_eq!(
        PriorityLevelConfigurationStrategy::new().cells(&pl, now),
        vec![json!("Limited"), json!(10), json!("<none>"), json!("<none>"), json!("<none>"), json!("60m")],
        "reject level"
    );
    pl["spec"] = json!({"type": "Exempt"});
    assert_eq!(
        PriorityLevelConfigurationStrategy::new().cells(&pl, now),
        vec![json!("Exempt"), json!("<none>"), json!("<none>"), json!("<none>"), json!("<none>"), json!("60m")],
        "exempt level"
    );
}

#[test]
fn write_paths_keep_what_they_do_not_own() {
    let mut fs = fs_base();
    fs["status"] = json!({"conditions": [{"type": "Dangling", "status": "True"}]});
    FlowSchemaStrategy::new().prepare_for_create(&mut fs);
    assert_eq!(fs["status"], json!({}), "create clears status");

    let mut old = fs_base();
    old["status"] = json!({"conditions": [{"type": "Dangling", "status": "False"}]});
    let mut new = fs_base();
    new["spec"]["matchingPrecedence"] = json!(0);
    FlowSchemaStrategy::new().prepare_for_update(&mut new, &old);
    assert_eq!(new["status"], old["status"], "update keeps status");
    assert_eq!(new["spec"]["matchingPrecedence"], 1000, "update defaults");

    let mut sub = fs_base();
    sub["spec"]["matchingPrecedence"] = json!(7);
    sub["status"] = json!({"conditions": []});
    PriorityLevelConfigurationStrategy::new().prepare_for_subresource("status", &mut sub, &old);
    assert_eq!(sub["spec"], old["spec"], "status keeps spec");
    assert_eq!(sub["status"], json!({"conditions": []}), "status writes status");
}
