#![allow(clippy::unwrap_used)]

use super::*;
use crate::authn::authentication_config::types::decode;
use crate::authn::authentication_config::validate::validate;
use serde_json::json;

fn compiled(body: &str) -> CompiledJwt {
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer: {{url: https://idp.example, audiences: [a]}}\n{body}"
    );
    validate(&decode(text.as_bytes()).unwrap(), &[]).unwrap().pop().unwrap()
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::with_groups(name, groups)
}

#[test]
fn claim_mappings_and_rules() {
    let claims = |v: Value| v.as_object().unwrap().clone();
    let alice = json!({"sub": "alice", "email": "a@example.com", "email_verified": true, "groups": ["dev", "ops"], "hd": "example.com", "id": "u1"});
    let by_claim = "  claimMappings:\n    username: {claim: sub, prefix: 'idp:'}\n    groups: {claim: groups, prefix: 'idp:'}\n    uid: {claim: id}\n";
    let cases: Vec<(&str, String, Value, Result<UserInfo, &str>)> = vec![
        (
            "claims with prefixes",
            by_claim.into(),
            alice.clone(),
            Ok(UserInfo { uid: "u1".into(), ..user("idp:alice", &["idp:dev", "idp:ops"]) }),
        ),
        ("a string group", by_claim.into(), json!({"sub": "b", "groups": "one"}), Ok(user("idp:b", &["idp:one"]))),
        ("no username claim", by_claim.into(), json!({"groups": []}), Err("oidc: parse username claims \"sub\": claim not present")),
        ("groups not strings", by_claim.into(), json!({"sub": "b", "groups": [1]}), Err("parse groups claim")),
        ("email verified", "  claimMappings: {username: {claim: email, prefix: ''}}\n".into(), alice.clone(), Ok(user("a@example.com", &[]))),
        (
            "email not verified",
            "  claimMappings: {username: {claim: email, prefix: ''}}\n".into(),
            json!({"email": "a@example.com", "email_verified": false}),
            Err("oidc: email not verified"),
        ),
        (
            "email without email_verified",
            "  claimMappings: {username: {claim: email, prefix: ''}}\n".into(),
            json!({"email": "a@example.com"}),
            Ok(user("a@example.com", &[])),
        ),
        (
            "CEL mappings and extra",
            "  claimMappings:\n    username: {expression: \"'cel:' + claims.sub\"}\n    groups: {expression: \"claims.groups.map(g, 'g:' + g)\"}\n    extra: [{key: example.com/hd, valueExpression: claims.hd}, {key: example.com/none, valueExpression: \"''\"}]\n".into(),
            alice.clone(),
            Ok(UserInfo {
                extra: [("example.com/hd".to_string(), vec!["example.com".to_string()])].into(),
                ..user("cel:alice", &["g:dev", "g:ops"])
            }),
        ),
        (
            "CEL username not a string",
            "  claimMappings: {username: {expression: claims.groups}}\n".into(),
            alice.clone(),
            Err("did not evaluate to a string"),
        ),
        ("empty username", "  claimMappings: {username: {expression: \"''\"}}\n".into(), alice.clone(), Err("oidc: empty username via CEL expression is not allowed")),
        (
            "required claim",
            format!("{by_claim}  claimValidationRules: [{{claim: hd, requiredValue: other.com}}]\n"),
            alice.clone(),
            Err("oidc: required claim hd value does not match. Got = example.com, want = other.com"),
        ),
        (
            "required claim missing",
            format!("{by_claim}  claimValidationRules: [{{claim: tenant, requiredValue: x}}]\n"),
            alice.clone(),
            Err("oidc: required claim tenant not provided"),
        ),
        (
            "CEL rule with message",
            format!("{by_claim}  claimValidationRules: [{{expression: \"claims.hd == 'other.com'\", message: wrong domain}}]\n"),
            alice.clone(),
            Err("oidc: error evaluating claim validation expression: wrong domain"),
        ),
        (
            "CEL rule without message",
            format!("{by_claim}  claimValidationRules: [{{expression: \"claims.hd == 'other.com'\"}}]\n"),
            alice.clone(),
            Err("validation expression 'claims.hd == 'other.com'' failed"),
        ),
        (
            "CEL rule passes",
            format!("{by_claim}  claimValidationRules: [{{expression: \"claims.hd == 'example.com'\"}}]\n"),
            json!({"sub": "b", "hd": "example.com"}),
            Ok(user("idp:b", &[])),
        ),
        (
            "user validation rule",
            "  claimMappings: {username: {claim: sub, prefix: 'system:'}}\n  userValidationRules: [{expression: \"!user.username.startsWith('system:')\", message: no system users}]\n".into(),
            alice.clone(),
            Err("oidc: error evaluating user info validation rule: no system users"),
        ),
    ];
    for (name, body, c, want) in cases {
        let got = map_claims(&compiled(&body), &claims(c));
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{name}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{name}: {e}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}
