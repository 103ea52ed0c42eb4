use super::super::testutil::*;
use super::super::{compute, Env};
use super::*;
use crate::registry::Registry;

async fn run(resource: &str, requester: &UserInfo, obj: Value) -> Result<Value, ApiError> {
    let reg = Registry::builtin();
    let def = reg.find(AUTHORIZATION_GROUP, "v1", resource).unwrap();
    let authn = chain();
    let env = Env { authz: &FakeAuthorizer, authn: &authn, user: requester, now: chrono::Utc::now() };
    compute(def, &env, obj).await
}

fn pods(verb: &str, ns: &str) -> Value {
    json!({"resourceAttributes": {"namespace": ns, "verb": verb, "resource": "pods"}})
}

fn with(mut spec: Value, extra: Value) -> Value {
    if let (Some(a), Some(b)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in b {
            a.insert(k.clone(), v.clone());
        }
    }
    spec
}

#[tokio::test]
async fn subject_access_review_decisions() {
    let admin = user("admin", &["system:masters"]);
    // (name, spec, allowed, denied, reason, evaluationError)
    let cases: Vec<(&str, Value, bool, bool, &str, &str)> = vec![
        // §16 check 23: the permission is granted to Group devs only; alice with no groups
        // is in no group.
        ("user without groups is in no group", with(pods("get", "a"), json!({"user": "alice"})), false, false, "", ""),
        (
            "the same user in devs",
            with(pods("get", "a"), json!({"user": "alice", "groups": ["devs"]})),
            true,
            false,
            "devs read pods",
            "",
        ),
        ("a group alone is a subject", with(pods("list", ""), json!({"groups": ["devs"]})), true, false, "devs read pods", ""),
        (
            "devs may not delete",
            with(pods("delete", "a"), json!({"user": "alice", "groups": ["devs"]})),
            false,
            false,
            "",
            "",
        ),
        (
            "another group does not inherit",
            with(pods("get", "a"), json!({"user": "alice", "groups": ["system:authenticated"]})),
            false,
            false,
            "",
            "",
        ),
        (
            "explicit deny sets denied, never allowed",
            with(pods("get", "a"), json!({"user": "mallory", "groups": ["devs"]})),
            false,
            true,
            "mallory is banned",
            "",
        ),
        (
            "an authorizer error is reported",
            with(pods("get", "a"), json!({"user": "broken"})),
            false,
            false,
            "",
            "rule store unavailable",
        ),
        (
            "uid and extra reach the authorizer",
            with(pods("delete", "a"), json!({"user": "svc", "uid": "u-7", "extra": {"scopes": ["admin"]}})),
            true,
            false,
            "scoped admin",
            "",
        ),
        (
            "non-resource path",
            json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}, "groups": ["health"]}),
            true,
            false,
            "",
            "",
        ),
        (
            "subresource is part of the question",
            json!({"resourceAttributes": {"verb": "get", "resource": "pods", "subresource": "log"}, "groups": ["devs"]}),
            false,
            false,
            "",
            "",
        ),
        (
            "unparsable raw selectors are reported, not fatal",
            json!({"resourceAttributes": {"verb": "list", "resource": "pods",
                    "fieldSelector": {"rawSelector": "spec.nodeName"},
                    "labelSelector": {"rawSelector": "a in (b"}}, "groups": ["devs"]}),
            true,
            false,
            "devs read pods",
            "spec.resourceAttributes.fieldSelector ignored due to parse error; spec.resourceAttributes.labelSelector ignored due to parse error",
        ),
        (
            "partly usable selector requirements",
            json!({"resourceAttributes": {"verb": "list", "resource": "pods",
                    "fieldSelector": {"requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["n1"]},
                                                       {"key": "a", "operator": "Exists"}]},
                    "labelSelector": {"requirements": [{"key": "x", "operator": "Gt", "values": ["1"]}]}},
                   "user": "broken"}),
            false,
            false,
            "",
            "rule store unavailable; spec.resourceAttributes.fieldSelector partially ignored due to parse error; spec.resourceAttributes.labelSelector ignored due to parse error",
        ),
        (
            "valid selectors are not reported",
            json!({"resourceAttributes": {"verb": "list", "resource": "pods",
                    "fieldSelector": {"rawSelector": "spec.nodeName=n1"},
                    "labelSelector": {"requirements": [{"key": "app", "operator": "In", "values": ["web"]}]}},
                   "groups": ["devs"]}),
            true,
            false,
            "devs read pods",
            "",
        ),
    ];
    for (name, spec, allowed, denied, reason, eval) in cases {
        let obj = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": spec.clone()});
        let out = run("subjectaccessreviews", &admin, obj).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let st = &out["status"];
        assert_eq!(st["allowed"], json!(allowed), "{name}: {out}");
        assert_eq!(st.get("denied").cloned().unwrap_or(json!(false)), json!(denied), "{name}: {out}");
        assert!(!(st["allowed"] == json!(true) && st.get("denied") == Some(&json!(true))), "{name}: both set");
        assert_eq!(st.get("reason").and_then(Value::as_str).unwrap_or(""), reason, "{name}: {out}");
        assert_eq!(st.get("evaluationError").and_then(Value::as_str).unwrap_or(""), eval, "{name}: {out}");
        // The answer carries the question back (empty strings dropped, as Go's omitempty).
        let mut want_spec = spec.clone();
        super::super::omit_empty(&mut want_spec, &["key", "operator"], &["extra"]);
        assert_eq!(out["spec"], want_spec, "{name}");
        assert_eq!(out["metadata"], json!({"creationTimestamp": null}), "{name}");
        assert_eq!(out["kind"], "SubjectAccessReview");
        assert_eq!(out["apiVersion"], "authorization.k8s.io/v1");
    }
}

#[tokio::test]
async fn a_user_with_no_groups_gets_none_added() {
    // Recording authorizer: the review must not add system:authenticated.
    struct Record(std::sync::Mutex<Vec<UserInfo>>);
    #[async_trait::async_trait]
    impl Authorizer for Record {
        async fn authorize(&self, attrs: &Attributes<'_>) -> Verdict {
            if let Ok(mut v) = self.0.lock() {
                v.push(attrs.user.clone());
            }
            Verdict::no_opinion()
        }
    }
    let rec = Record(Default::default());
    let obj = json!({"spec": with(pods("get", "a"), json!({"user": "alice"}))});
    let out = subject_access_review(&rec, &obj).await.unwrap();
    assert_eq!(out["status"], json!({"allowed": false}));
    let seen = rec.0.lock().unwrap().clone();
    assert_eq!(seen, vec![user("alice", &[])]);
}

#[tokio::test]
async fn through_the_authorizer_chain_only_an_explicit_deny_is_denied() {
    use std::sync::Arc;
    let chain = crate::authz::Chain(vec![Arc::new(crate::authz::MastersAuthorizer), Arc::new(FakeAuthorizer)]);
    let ask = |spec: Value| json!({"spec": spec});
    let cases = [
        ("nobody has an opinion", with(pods("get", "a"), json!({"user": "alice"})), json!({"allowed": false})),
        (
            "masters",
            with(pods("get", "a"), json!({"user": "alice", "groups": ["system:masters"]})),
            json!({"allowed": true}),
        ),
        (
            "explicit deny",
            with(pods("get", "a"), json!({"user": "mallory"})),
            json!({"allowed": false, "denied": true, "reason": "mallory is banned"}),
        ),
    ];
    for (name, spec, want) in cases {
        let out = subject_access_review(&chain, &ask(spec)).await.unwrap();
        assert_eq!(out["status"], want, "{name}");
    }
}

#[test]
fn request_info_from_attributes() {
    let ra: authzv1::ResourceAttributes = serde_json::from_value(json!({
        "namespace": "ns", "verb": "update", "group": "apps", "resource": "deployments",
        "subresource": "scale", "name": "web"}))
    .unwrap();
    let info = request_info(Access { resource: Some(&ra), non_resource: None });
    assert_eq!(
        info,
        RequestInfo {
            is_resource_request: true,
            verb: "update".into(),
            api_group: "apps".into(),
            api_version: "*".into(),
            namespace: "ns".into(),
            resource: "deployments".into(),
            subresource: "scale".into(),
            name: "web".into(),
            ..Default::default()
        }
    );
    let nr = authzv1::NonResourceAttributes { path: Some("/metrics".into()), verb: Some("get".into()) };
    let info = request_info(Access { resource: None, non_resource: Some(&nr) });
    assert!(!info.is_resource_request);
    assert_eq!((info.path.as_str(), info.verb.as_str()), ("/metrics", "get"));
}

/// Status of the 422 and its causes as (field, reason, message).
fn causes(e: &ApiError) -> (String, Vec<(String, String, String)>) {
    let st = e.status();
    let causes = st["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    (st["message"].as_str().unwrap_or("").to_string(), causes)
}

#[tokio::test]
async fn validation_errors_like_upstream() {
    let admin = user("admin", &["system:masters"]);
    let c = |f: &str, r: &str, m: &str| (f.to_string(), r.to_string(), m.to_string());
    // (name, resource, object, causes)
    type Cause = (String, String, String);
    let cases: Vec<(&str, &str, Value, Vec<Cause>)> = vec![
        (
            "empty spec",
            "subjectaccessreviews",
            json!({"spec": {}}),
            vec![
                c("spec.resourceAttributes", "FieldValueInvalid", "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"),
                c("spec.user", "FieldValueInvalid", "Invalid value: \"\": at least one of user or group must be specified"),
            ],
        ),
        (
            "both attributes",
            "subjectaccessreviews",
            json!({"spec": {"user": "me", "resourceAttributes": {}, "nonResourceAttributes": {"path": "/x", "verb": "get"}}}),
            vec![c(
                "spec.nonResourceAttributes",
                "FieldValueInvalid",
                "Invalid value: {\"Path\":\"/x\",\"Verb\":\"get\"}: cannot be specified in combination with resourceAttributes",
            )],
        ),
        (
            "empty groups list is no subject",
            "subjectaccessreviews",
            json!({"spec": {"groups": [], "nonResourceAttributes": {}}}),
            vec![c("spec.user", "FieldValueInvalid", "Invalid value: \"\": at least one of user or group must be specified")],
        ),
        (
            "metadata must be empty",
            "subjectaccessreviews",
            json!({"metadata": {"name": "x"}, "spec": {"user": "me", "resourceAttributes": {}}}),
            vec![c("metadata", "FieldValueInvalid", "Invalid value: {\"name\":\"x\",\"creationTimestamp\":null}: must be empty")],
        ),
        (
            "self review metadata must be empty",
            "selfsubjectaccessreviews",
            json!({"metadata": {"labels": {"a": "b"}}, "spec": {"resourceAttributes": {}}}),
            vec![c("metadata", "FieldValueInvalid", "Invalid value: {\"creationTimestamp\":null,\"labels\":{\"a\":\"b\"}}: must be empty")],
        ),
        (
            "self review needs attributes but no user",
            "selfsubjectaccessreviews",
            json!({"spec": {}}),
            vec![c("spec.resourceAttributes", "FieldValueInvalid", "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified")],
        ),
        (
            "field selector: both raw and requirements",
            "subjectaccessreviews",
            json!({"spec": {"user": "me", "resourceAttributes": {"fieldSelector": {"rawSelector": "foo", "requirements": [{"key": "a", "operator": "In", "values": ["b"]}]}}}}),
            vec![c("spec.resourceAttributes.fieldSelector.rawSelector", "FieldValueInvalid", "Invalid value: \"foo\": may not specified at the same time as requirements")],
        ),
        (
            "field selector: neither",
            "selfsubjectaccessreviews",
            json!({"spec": {"resourceAttributes": {"fieldSelector": {}}}}),
            vec![c(
                "spec.resourceAttributes.fieldSelector.requirements",
                "FieldValueRequired",
                "Required value: when spec.resourceAttributes.fieldSelector is specified, requirements or rawSelector is required",
            )],
        ),
        (
            "field selector requirement checks",
            "subjectaccessreviews",
            json!({"spec": {"user": "me", "resourceAttributes": {"fieldSelector": {"requirements": [
                {"key": "", "operator": "In"},
                {"key": "a", "operator": "Exists", "values": ["x"]},
                {"key": "b", "operator": "Matches", "values": ["x"]}]}}}}),
            vec![
                c("spec.resourceAttributes.fieldSelector.requirements[0].key", "FieldValueRequired", "Required value: must be specified"),
                c("spec.resourceAttributes.fieldSelector.requirements[0].values", "FieldValueRequired", "Required value: must be specified when `operator` is 'In' or 'NotIn'"),
                c("spec.resourceAttributes.fieldSelector.requirements[1].values", "FieldValueForbidden", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"),
            ],
        ),
        (
            "label selector requirement checks",
            "subjectaccessreviews",
            json!({"spec": {"user": "me", "resourceAttributes": {"labelSelector": {"requirements": [
                {"key": "bad key", "operator": "NotIn", "values": ["-x-"]}]}}}}),
            vec![
                c("spec.resourceAttributes.labelSelector.requirements[0].key", "FieldValueInvalid", &format!("Invalid value: \"bad key\": {}", validation::is_qualified_name("bad key").join(""))),
                c("spec.resourceAttributes.labelSelector.requirements[0].values[0]", "FieldValueInvalid", &format!("Invalid value: \"-x-\": {}", validation::is_valid_label_value("-x-").join(""))),
            ],
        ),
        (
            "local review: namespace must match",
            "localsubjectaccessreviews",
            json!({"metadata": {"namespace": "ns1"}, "spec": {"user": "me", "resourceAttributes": {"namespace": "ns2", "verb": "get", "resource": "pods"}}}),
            vec![c("spec.resourceAttributes.namespace", "FieldValueInvalid", "Invalid value: \"ns2\": must match metadata.namespace")],
        ),
        (
            "local review: empty resource namespace does not match either",
            "localsubjectaccessreviews",
            json!({"metadata": {"namespace": "ns1"}, "spec": {"user": "me", "resourceAttributes": {"verb": "get", "resource": "pods"}}}),
            vec![c("spec.resourceAttributes.namespace", "FieldValueInvalid", "Invalid value: \"\": must match metadata.namespace")],
        ),
        (
            "local review: no non-resource checks, metadata only namespace",
            "localsubjectaccessreviews",
            json!({"metadata": {"namespace": "ns1", "name": "n"}, "spec": {"user": "me", "nonResourceAttributes": {"path": "/x", "verb": "get"}}}),
            vec![
                c("metadata", "FieldValueInvalid", "Invalid value: {\"name\":\"n\",\"namespace\":\"ns1\",\"creationTimestamp\":null}: must be empty except for namespace"),
                c("spec.nonResourceAttributes", "FieldValueInvalid", "Invalid value: {\"Path\":\"/x\",\"Verb\":\"get\"}: disallowed on this kind of request"),
            ],
        ),
    ];
    for (name, resource, obj, want) in cases {
        let err = run(resource, &admin, obj).await.err().unwrap_or_else(|| panic!("{name}: accepted"));
        assert_eq!(err.code().as_u16(), 422, "{name}: {err}");
        assert_eq!(err.reason(), "Invalid", "{name}");
        let (message, got) = causes(&err);
        assert_eq!(got, want, "{name}");
        assert!(message.starts_with(".authorization.k8s.io \"\" is invalid: "), "{name}: {message}");
        assert_eq!(err.status()["details"]["group"], "authorization.k8s.io", "{name}");
    }
}

#[tokio::test]
async fn local_subject_access_review_in_its_namespace() {
    let admin = user("admin", &["system:masters"]);
    let obj = json!({"metadata": {"namespace": "ns1"}, "spec": with(pods("get", "ns1"), json!({"groups": ["devs"]}))});
    let out = run("localsubjectaccessreviews", &admin, obj).await.unwrap();
    assert_eq!(out["metadata"], json!({"namespace": "ns1", "creationTimestamp": null}));
    assert_eq!(out["status"], json!({"allowed": true, "reason": "devs read pods"}));
    assert_eq!(out["kind"], "LocalSubjectAccessReview");
    let obj = json!({"spec": with(pods("get", ""), json!({"groups": ["devs"]}))});
    let err = run("localsubjectaccessreviews", &admin, obj).await.unwrap_err();
    assert_eq!(err.code().as_u16(), 400, "{err}");
}

#[tokio::test]
async fn self_subject_access_review_asks_about_the_requester() {
    let mut me = user("svc", &["team"]);
    me.uid = "u-7".into();
    me.extra.insert("scopes".into(), vec!["admin".into()]);
    let (dev, mallory) = (user("dev", &["devs"]), user("mallory", &["devs"]));
    let cases: Vec<(&str, &UserInfo, Value, Value)> = vec![
        (
            "uid and extra of the requester count",
            &me,
            pods("delete", "x"),
            json!({"allowed": true, "reason": "scoped admin"}),
        ),
        ("a dev may get pods", &dev, pods("get", ""), json!({"allowed": true, "reason": "devs read pods"})),
        ("nobody has an opinion", &dev, pods("delete", ""), json!({"allowed": false})),
        (
            "explicit deny",
            &mallory,
            pods("get", ""),
            json!({"allowed": false, "denied": true, "reason": "mallory is banned"}),
        ),
    ];
    for (name, requester, spec, want) in cases {
        let obj = json!({"metadata": {}, "spec": spec});
        let out = run("selfsubjectaccessreviews", requester, obj).await.unwrap();
        assert_eq!(out["status"], want, "{name}");
    }
}

#[tokio::test]
async fn self_subject_rules_review_lists_the_requesters_rules() {
    let out =
        run("selfsubjectrulesreviews", &user("dev", &["devs"]), json!({"spec": {"namespace": "team"}})).await.unwrap();
    assert_eq!(
        out,
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "metadata": {"creationTimestamp": null},
            "spec": {},
            "status": {
                "resourceRules": [
                    {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
                    {"verbs": ["update"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings"]},
                ],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
                "incomplete": false,
            },
        })
    );
    let out = run("selfsubjectrulesreviews", &user("broken", &[]), json!({"spec": {"namespace": "x"}})).await.unwrap();
    assert_eq!(
        out["status"],
        json!({"resourceRules": [], "nonResourceRules": [], "incomplete": true, "evaluationError": "rule store unavailable"})
    );
    let err = run("selfsubjectrulesreviews", &user("dev", &[]), json!({"spec": {}})).await.unwrap_err();
    assert_eq!((err.code().as_u16(), err.to_string()), (400, "no namespace on request".to_string()));
}
