//! Validation of an `AuthenticationConfiguration`, with upstream's field paths and messages
//! (k8s.io/apiserver `ValidateAuthenticationConfiguration`), compiling every CEL expression.
//!
//! What enters: the decoded file and the issuers it may not use (the service-account ones).
//! What leaves: the compiled rules and mappings of each `jwt` authenticator, or every error.

use super::cel::{self, Compiled, Variable};
use super::types::*;

/// Most `jwt` authenticators in one file (upstream's limit).
pub const MAX_JWT_AUTHENTICATORS: usize = 64;

/// A field error, printed as upstream's `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError(pub String);

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn required(path: &str, detail: &str) -> FieldError {
    if detail.is_empty() {
        FieldError(format!("{path}: Required value"))
    } else {
        FieldError(format!("{path}: Required value: {detail}"))
    }
}

fn invalid(path: &str, value: &str, detail: &str) -> FieldError {
    FieldError(format!("{path}: Invalid value: {value:?}: {detail}"))
}

fn duplicate(path: &str, value: &str) -> FieldError {
    FieldError(format!("{path}: Duplicate value: {value:?}"))
}

/// The errors as one line, as Go's aggregate prints them.
pub fn join(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.0.clone(),
        many => format!("[{}]", many.iter().map(|e| e.0.as_str()).collect::<Vec<_>>().join(", ")),
    }
}

/// A mapping: from a claim with a prefix, or by an expression.
#[derive(Debug)]
pub enum Mapping {
    None,
    Claim { claim: String, prefix: String },
    Expression(Compiled),
}

/// A claim validation rule, compiled.
#[derive(Debug)]
pub enum ClaimRule {
    Required { claim: String, value: String },
    Expression { expr: Compiled, message: String },
}

/// One `jwt` authenticator, validated and compiled.
#[derive(Debug)]
pub struct CompiledJwt {
    pub issuer: Issuer,
    pub claim_rules: Vec<ClaimRule>,
    pub username: Mapping,
    pub groups: Mapping,
    pub uid: Mapping,
    pub extra: Vec<(String, Compiled)>,
    pub user_rules: Vec<(Compiled, String)>,
}

/// Validate the whole file; `disallowed_issuers`: the service-account issuers.
pub fn validate(
    cfg: &AuthenticationConfiguration,
    disallowed_issuers: &[String],
) -> Result<Vec<CompiledJwt>, Vec<FieldError>> {
    let mut errs = Vec::new();
    if cfg.jwt.len() > MAX_JWT_AUTHENTICATORS {
        return Err(vec![FieldError(format!(
            "jwt: Too many: {}: must have at most {MAX_JWT_AUTHENTICATORS} items",
            cfg.jwt.len()
        ))]);
    }
    let mut out = Vec::new();
    let mut seen_issuers: Vec<&str> = Vec::new();
    let mut seen_discovery: Vec<&str> = Vec::new();
    for (i, a) in cfg.jwt.iter().enumerate() {
        let path = format!("jwt[{i}]");
        let compiled = validate_jwt(a, &path, disallowed_issuers, &mut errs);
        if seen_issuers.contains(&a.issuer.url.as_str()) {
            errs.push(duplicate(&format!("{path}.issuer.url"), &a.issuer.url));
        }
        seen_issuers.push(&a.issuer.url);
        if !a.issuer.discovery_url.is_empty() {
            if seen_discovery.contains(&a.issuer.discovery_url.as_str()) {
                errs.push(duplicate(&format!("{path}.issuer.discoveryURL"), &a.issuer.discovery_url));
            }
            seen_discovery.push(&a.issuer.discovery_url);
        }
        out.extend(compiled);
    }
    if let Some(anon) = &cfg.anonymous {
        if !anon.enabled && !anon.conditions.is_empty() {
            errs.push(FieldError(format!(
                "anonymous.conditions: Invalid value: {:?}: enabled should be set to true when conditions are defined",
                anon.conditions.iter().map(|c| c.path.as_str()).collect::<Vec<_>>()
            )));
        }
        for (i, c) in anon.conditions.iter().enumerate() {
            if c.path.is_empty() {
                errs.push(required(&format!("anonymous.conditions[{i}].path"), ""));
            }
        }
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(errs)
    }
}

fn validate_url(url: &str, disallowed: &[String], path: &str, errs: &mut Vec<FieldError>) {
    if disallowed.iter().any(|d| d == url) {
        let mut sorted = disallowed.to_vec();
        sorted.sort();
        errs.push(invalid(path, url, &format!("URL must not overlap with disallowed issuers: [{}]", sorted.join(" "))));
    }
    match reqwest::Url::parse(url) {
        Err(e) => errs.push(invalid(path, url, &e.to_string())),
        Ok(u) => {
            if u.scheme() != "https" {
                errs.push(invalid(path, url, "URL scheme must be https"));
            }
            if !u.username().is_empty() || u.password().is_some() {
                errs.push(invalid(path, url, "URL must not contain a username or password"));
            }
            if u.query().is_some() {
                errs.push(invalid(path, url, "URL must not contain a query"));
            }
            if u.fragment().is_some() {
                errs.push(invalid(path, url, "URL must not contain a fragment"));
            }
        }
    }
}

fn compile(src: &str, var: Variable, path: &str, errs: &mut Vec<FieldError>) -> Option<Compiled> {
    match cel::compile(src, var) {
        Ok(c) => Some(c),
        Err(e) => {
            errs.push(invalid(path, src, &e));
            None
        }
    }
}

/// Whether an expression reads `claims.<field>` (upstream's check for the email claim).
fn reads_claim(src: &str, field: &str) -> bool {
    let needle = format!("claims.{field}");
    src.match_indices(&needle).any(|(i, _)| {
        let after = src[i + needle.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    }) || src.contains(&format!("claims[\"{field}\"]"))
        || src.contains(&format!("claims['{field}']"))
}

fn validate_jwt(
    a: &JwtAuthenticator,
    path: &str,
    disallowed: &[String],
    errs: &mut Vec<FieldError>,
) -> Option<CompiledJwt> {
    let before = errs.len();
    let iss = &a.issuer;
    let ipath = format!("{path}.issuer");
    if iss.url.is_empty() {
        errs.push(required(&format!("{ipath}.url"), ""));
    } else {
        validate_url(&iss.url, disallowed, &format!("{ipath}.url"), errs);
    }
    if !iss.discovery_url.is_empty() {
        let dpath = format!("{ipath}.discoveryURL");
        if !iss.url.is_empty() && iss.url.trim_end_matches('/') == iss.discovery_url.trim_end_matches('/') {
            errs.push(invalid(&dpath, &iss.discovery_url, "discoveryURL must be different from URL"));
        }
        validate_url(&iss.discovery_url, &[], &dpath, errs);
    }
    let apath = format!("{ipath}.audiences");
    if iss.audiences.is_empty() {
        errs.push(required(&apath, &format!("at least one {apath} is required")));
    }
    for (i, aud) in iss.audiences.iter().enumerate() {
        if aud.is_empty() {
            errs.push(required(&format!("{apath}[{i}]"), ""));
        }
        if iss.audiences[..i].contains(aud) {
            errs.push(duplicate(&format!("{apath}[{i}]"), aud));
        }
    }
    let policy = iss.audience_match_policy.as_str();
    if iss.audiences.len() > 1 && policy != "MatchAny" {
        errs.push(invalid(
            &format!("{ipath}.audienceMatchPolicy"),
            policy,
            "audienceMatchPolicy must be MatchAny for multiple audiences",
        ));
    }
    if iss.audiences.len() == 1 && !policy.is_empty() && policy != "MatchAny" {
        errs.push(invalid(
            &format!("{ipath}.audienceMatchPolicy"),
            policy,
            "audienceMatchPolicy must be empty or MatchAny for single audience",
        ));
    }
    if !iss.certificate_authority.is_empty() {
        match kustos_ca::certificates_from_pem(&iss.certificate_authority) {
            Ok(c) if !c.is_empty() => {}
            _ => errs.push(invalid(
                &format!("{ipath}.certificateAuthority"),
                "<omitted>",
                "data does not contain any valid RSA or ECDSA certificates",
            )),
        }
    }
    if !iss.egress_selector_type.is_empty() {
        errs.push(invalid(
            &format!("{ipath}.egressSelectorType"),
            &iss.egress_selector_type,
            "egress selector is not supported",
        ));
    }

    let mut uses_email_verified = false;
    let mut claim_rules = Vec::new();
    let cpath = format!("{path}.claimValidationRules");
    for (i, r) in a.claim_validation_rules.iter().enumerate() {
        let p = format!("{cpath}[{i}]");
        match (r.claim.is_empty(), r.expression.is_empty()) {
            (false, false) => errs.push(invalid(&p, &r.claim, "claim and expression can't both be set")),
            (true, true) => errs.push(required(&p, "claim or expression is required")),
            (false, true) => {
                if !r.message.is_empty() {
                    errs.push(invalid(&format!("{p}.message"), &r.message, "may not be specified when claim is set"));
                }
                if a.claim_validation_rules[..i].iter().any(|o| o.claim == r.claim) {
                    errs.push(duplicate(&format!("{p}.claim"), &r.claim));
                }
                claim_rules.push(ClaimRule::Required { claim: r.claim.clone(), value: r.required_value.clone() });
            }
            (true, false) => {
                if !r.required_value.is_empty() {
                    errs.push(invalid(
                        &format!("{p}.requiredValue"),
                        &r.required_value,
                        "may not be specified when expression is set",
                    ));
                }
                if a.claim_validation_rules[..i].iter().any(|o| o.expression == r.expression) {
                    errs.push(duplicate(&format!("{p}.expression"), &r.expression));
                    continue;
                }
                uses_email_verified |= reads_claim(&r.expression, "email_verified");
                if let Some(expr) = compile(&r.expression, Variable::Claims, &format!("{p}.expression"), errs) {
                    claim_rules.push(ClaimRule::Expression { expr, message: r.message.clone() });
                }
            }
        }
    }

    let mpath = format!("{path}.claimMappings");
    let m = &a.claim_mappings;
    let username = prefixed(&m.username, &format!("{mpath}.username"), true, errs);
    let groups = prefixed(&m.groups, &format!("{mpath}.groups"), false, errs);
    let uid = match (m.uid.claim.is_empty(), m.uid.expression.is_empty()) {
        (false, false) => {
            errs.push(invalid(&format!("{mpath}.uid"), "", "claim and expression can't both be set"));
            Mapping::None
        }
        (false, true) => Mapping::Claim { claim: m.uid.claim.clone(), prefix: String::new() },
        (true, false) => compile(&m.uid.expression, Variable::Claims, &format!("{mpath}.uid.expression"), errs)
            .map_or(Mapping::None, Mapping::Expression),
        (true, true) => Mapping::None,
    };
    let mut extra = Vec::new();
    for (i, x) in m.extra.iter().enumerate() {
        let p = format!("{mpath}.extra[{i}]");
        let kpath = format!("{p}.key");
        validate_extra_key(&x.key, &kpath, errs);
        if m.extra[..i].iter().any(|o| o.key == x.key) {
            errs.push(duplicate(&kpath, &x.key));
            continue;
        }
        if x.value_expression.is_empty() {
            errs.push(required(&format!("{p}.valueExpression"), ""));
            continue;
        }
        uses_email_verified |= reads_claim(&x.value_expression, "email_verified");
        if let Some(c) = compile(&x.value_expression, Variable::Claims, &format!("{p}.valueExpression"), errs) {
            extra.push((x.key.clone(), c));
        }
    }
    let uexpr = &m.username.expression;
    uses_email_verified |= reads_claim(uexpr, "email_verified");
    if reads_claim(uexpr, "email") && !uses_email_verified {
        errs.push(invalid(&format!("{mpath}.username.expression"), uexpr, "claims.email_verified must be used in claimMappings.username.expression or claimMappings.extra[*].valueExpression or claimValidationRules[*].expression when claims.email is used in claimMappings.username.expression"));
    }

    let mut user_rules = Vec::new();
    for (i, r) in a.user_validation_rules.iter().enumerate() {
        let p = format!("{path}.userValidationRules[{i}].expression");
        if r.expression.is_empty() {
            errs.push(required(&p, ""));
            continue;
        }
        if a.user_validation_rules[..i].iter().any(|o| o.expression == r.expression) {
            errs.push(duplicate(&p, &r.expression));
            continue;
        }
        if let Some(c) = compile(&r.expression, Variable::User, &p, errs) {
            user_rules.push((c, r.message.clone()));
        }
    }
    (errs.len() == before).then(|| CompiledJwt {
        issuer: iss.clone(),
        claim_rules,
        username,
        groups,
        uid,
        extra,
        user_rules,
    })
}

fn prefixed(m: &PrefixedClaimOrExpression, path: &str, required_mapping: bool, errs: &mut Vec<FieldError>) -> Mapping {
    match (m.claim.is_empty(), m.expression.is_empty()) {
        (false, false) => {
            errs.push(invalid(path, "", "claim and expression can't both be set"));
            Mapping::None
        }
        (true, true) => {
            if required_mapping {
                errs.push(required(path, "claim or expression is required"));
            }
            Mapping::None
        }
        (true, false) => {
            if let Some(p) = &m.prefix {
                errs.push(invalid(&format!("{path}.prefix"), p, "may not be specified when expression is set"));
            }
            compile(&m.expression, Variable::Claims, &format!("{path}.expression"), errs)
                .map_or(Mapping::None, Mapping::Expression)
        }
        (false, true) => match &m.prefix {
            None => {
                errs.push(required(
                    &format!("{path}.prefix"),
                    "prefix is required when claim is set. It can be set to an empty string to disable prefixing",
                ));
                Mapping::None
            }
            Some(p) => Mapping::Claim { claim: m.claim.clone(), prefix: p.clone() },
        },
    }
}

/// Extra keys: a domain-prefixed path, lower case, not in k8s.io or kubernetes.io.
fn validate_extra_key(key: &str, path: &str, errs: &mut Vec<FieldError>) {
    let Some((domain, rest)) = key.split_once('/') else {
        errs.push(invalid(path, key, "must be a domain-prefixed path (such as \"acme.io/foo\")"));
        return;
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if domain.len() > 253 || !domain.split('.').all(label_ok) {
        errs.push(invalid(path, domain, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"));
    }
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&b)) {
        errs.push(invalid(path, rest, "Invalid path"));
    }
    if key != key.to_lowercase() {
        errs.push(invalid(path, key, "must be lowercase"));
    }
    let reserved = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    if reserved("kubernetes.io") || reserved("k8s.io") {
        errs.push(invalid(path, key, "k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use"));
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
