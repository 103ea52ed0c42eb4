#![allow(clippy::unwrap_used)]

use super::*;

const HEAD: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n";

fn check(body: &str) -> Result<usize, String> {
    let cfg = decode(format!("{HEAD}{body}").as_bytes())?;
    validate(&cfg, &["https://kubernetes.default.svc".to_string()]).map(|c| c.len()).map_err(|e| join(&e))
}

#[test]
fn table() {
    let good = "jwt:\n- issuer: {url: https://idp.example, audiences: [a]}\n  claimMappings:\n    username: {claim: sub, prefix: 'idp:'}\n";
    let with = |mappings: &str| format!("jwt:\n- issuer: {{url: https://idp.example, audiences: [a]}}\n{mappings}");
    let cases: Vec<(&str, String, Result<usize, &str>)> = vec![
        ("good", good.into(), Ok(1)),
        ("no authenticators", String::new(), Ok(0)),
        ("no url", "jwt:\n- issuer: {audiences: [a]}\n  claimMappings: {username: {claim: sub, prefix: ''}}\n".into(), Err("jwt[0].issuer.url: Required value")),
        ("http url", good.replace("https://idp", "http://idp"), Err("jwt[0].issuer.url: Invalid value: \"http://idp.example\": URL scheme must be https")),
        ("query", good.replace("idp.example", "idp.example?x=1"), Err("URL must not contain a query")),
        ("service-account issuer", good.replace("https://idp.example", "https://kubernetes.default.svc"), Err("URL must not overlap with disallowed issuers: [https://kubernetes.default.svc]")),
        ("same discovery url", good.replace("audiences", "discoveryURL: https://idp.example/, audiences"), Err("jwt[0].issuer.discoveryURL: Invalid value: \"https://idp.example/\": discoveryURL must be different from URL")),
        ("no audiences", good.replace("audiences: [a]", "audiences: []"), Err("jwt[0].issuer.audiences: Required value: at least one jwt[0].issuer.audiences is required")),
        ("duplicate audience", good.replace("[a]", "[a, a]"), Err("jwt[0].issuer.audiences[1]: Duplicate value: \"a\"")),
        ("two audiences need MatchAny", good.replace("[a]", "[a, b]"), Err("jwt[0].issuer.audienceMatchPolicy: Invalid value: \"\": audienceMatchPolicy must be MatchAny for multiple audiences")),
        ("two audiences with MatchAny", good.replace("[a]", "[a, b], audienceMatchPolicy: MatchAny"), Ok(1)),
        ("bad policy", good.replace("[a]", "[a], audienceMatchPolicy: MatchAll"), Err("audienceMatchPolicy must be empty or MatchAny for single audience")),
        ("bad CA", good.replace("[a]", "[a], certificateAuthority: junk"), Err("jwt[0].issuer.certificateAuthority: Invalid value: \"<omitted>\"")),
        ("no username", with(""), Err("jwt[0].claimMappings.username: Required value: claim or expression is required")),
        ("claim without prefix", with("  claimMappings: {username: {claim: sub}}\n"), Err("jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is set. It can be set to an empty string to disable prefixing")),
        ("claim and expression", with("  claimMappings: {username: {claim: sub, prefix: '', expression: claims.sub}}\n"), Err("jwt[0].claimMappings.username: Invalid value: \"\": claim and expression can't both be set")),
        ("prefix with expression", with("  claimMappings: {username: {expression: claims.sub, prefix: x}}\n"), Err("jwt[0].claimMappings.username.prefix: Invalid value: \"x\": may not be specified when expression is set")),
        ("email without email_verified", with("  claimMappings: {username: {expression: claims.email}}\n"), Err("claims.email_verified must be used in claimMappings.username.expression")),
        ("email with email_verified rule", with("  claimValidationRules: [{expression: 'claims.email_verified == true'}]\n  claimMappings: {username: {expression: claims.email}}\n"), Ok(1)),
        ("email claim (checked at run time)", with("  claimMappings: {username: {claim: email, prefix: ''}}\n"), Ok(1)),
        ("bad CEL", with("  claimMappings: {username: {expression: 'claims.sub +'}}\n"), Err("jwt[0].claimMappings.username.expression: Invalid value: \"claims.sub +\": compilation failed")),
        ("CEL on user in claims", with("  claimMappings: {username: {expression: user.username}}\n"), Err("undeclared reference to 'user'")),
        ("rule with claim and expression", format!("{good}  claimValidationRules: [{{claim: hd, expression: 'true'}}]\n"), Err("jwt[0].claimValidationRules[0]: Invalid value: \"hd\": claim and expression can't both be set")),
        ("rule with neither", format!("{good}  claimValidationRules: [{{message: x}}]\n"), Err("jwt[0].claimValidationRules[0]: Required value: claim or expression is required")),
        ("rule claim with message", format!("{good}  claimValidationRules: [{{claim: hd, requiredValue: x, message: m}}]\n"), Err("jwt[0].claimValidationRules[0].message: Invalid value: \"m\": may not be specified when claim is set")),
        ("duplicate rule claim", format!("{good}  claimValidationRules: [{{claim: hd}}, {{claim: hd}}]\n"), Err("jwt[0].claimValidationRules[1].claim: Duplicate value: \"hd\"")),
        ("extra key not prefixed", with("  claimMappings: {username: {expression: claims.sub}, extra: [{key: foo, valueExpression: claims.sub}]}\n"), Err("jwt[0].claimMappings.extra[0].key: Invalid value: \"foo\"")),
        ("extra key reserved", with("  claimMappings: {username: {expression: claims.sub}, extra: [{key: k8s.io/foo, valueExpression: claims.sub}]}\n"), Err("k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use")),
        ("extra key upper case", with("  claimMappings: {username: {expression: claims.sub}, extra: [{key: example.com/Foo, valueExpression: claims.sub}]}\n"), Err("must be lowercase")),
        ("extra without expression", with("  claimMappings: {username: {expression: claims.sub}, extra: [{key: example.com/foo}]}\n"), Err("jwt[0].claimMappings.extra[0].valueExpression: Required value")),
        ("user rule", format!("{good}  userValidationRules: [{{expression: \"!user.username.startsWith('system:')\"}}]\n"), Ok(1)),
        ("user rule on claims", format!("{good}  userValidationRules: [{{expression: 'claims.sub == \"\"'}}]\n"), Err("jwt[0].userValidationRules[0].expression: Invalid value")),
        ("duplicate issuer", format!("{good}{}", &good[5..]), Err("jwt[1].issuer.url: Duplicate value: \"https://idp.example\"")),
        ("anonymous conditions need enabled", "anonymous: {enabled: false, conditions: [{path: /livez}]}\n".into(), Err("anonymous.conditions: Invalid value: [\"/livez\"]: enabled should be set to true when conditions are defined")),
        ("egress selector", good.replace("[a]", "[a], egressSelectorType: cluster"), Err("jwt[0].issuer.egressSelectorType")),
    ];
    for (name, body, want) in cases {
        match (check(&body), want) {
            (Ok(n), Ok(w)) => assert_eq!(n, w, "{name}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{name}: {e}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
    let many = format!("jwt:\n{}", (0..65).map(|i| format!("- issuer: {{url: https://idp{i}.example, audiences: [a]}}\n  claimMappings: {{username: {{claim: sub, prefix: ''}}}}\n")).collect::<String>());
    assert_eq!(check(&many).unwrap_err(), "jwt: Too many: 65: must have at most 64 items");
}

#[test]
fn the_example_file_is_valid() {
    let text = include_str!("../../../../manifests/examples/authentication-config/authentication-config.yaml");
    let cfg = decode(text.as_bytes()).unwrap();
    assert_eq!(validate(&cfg, &[]).map_err(|e| join(&e)).unwrap().len(), 2);
    assert!(cfg.anonymous.is_some_and(|a| a.enabled && a.conditions.len() == 3));
}
