//! One `jwt` authenticator: a token of its issuer is verified with the issuer's keys, its
//! claims checked (times, audiences, claim validation rules), mapped to a user (claim
//! mappings) and the user checked (user validation rules), as upstream's OIDC authenticator.
//!
//! What enters: a bearer token. What leaves: the user, "not mine" (not a JWT, or another
//! issuer's), or why the token is refused (messages never contain the token).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::cel::{self, Compiled};
use super::jwt::{self, SignatureError};
use super::keys::KeySource;
use super::metrics::Metrics;
use super::validate::{ClaimRule, CompiledJwt, Mapping};
use crate::authn::{TokenResult, UserInfo};

pub struct JwtAuthenticator {
    pub config: CompiledJwt,
    pub keys: Arc<KeySource>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for JwtAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuthenticator").field("issuer", &self.config.issuer.url).finish_non_exhaustive()
    }
}

/// The error of a failed CEL evaluation, upstream-like.
fn cel_error(what: &str, expr: &Compiled, e: &str) -> String {
    format!("oidc: error evaluating {what} expression: expression '{}' resulted in error: {e}", expr.source)
}

fn claim_string(claims: &Map<String, Value>, claim: &str) -> Result<Option<String>, String> {
    match claims.get(claim) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => {
            Err(format!("oidc: parse username claims {claim:?}: json: cannot unmarshal into Go value of type string"))
        }
    }
}

/// Check the claims against the rules and map them to a user (pure; no signature check).
pub fn map_claims(c: &CompiledJwt, claims: &Map<String, Value>) -> Result<UserInfo, String> {
    let cel_claims = cel::from_json(&Value::Object(claims.clone()));
    for rule in &c.claim_rules {
        match rule {
            ClaimRule::Required { claim, value } => match claims.get(claim) {
                None => return Err(format!("oidc: required claim {claim} not provided")),
                Some(Value::String(s)) if s == value => {}
                Some(Value::String(s)) => {
                    return Err(format!("oidc: required claim {claim} value does not match. Got = {s}, want = {value}"))
                }
                Some(_) => {
                    return Err(format!(
                        "oidc: parse claim {claim}: json: cannot unmarshal into Go value of type string"
                    ))
                }
            },
            ClaimRule::Expression { expr, message } => match expr.eval(&cel_claims) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) if !message.is_empty() => {
                    return Err(format!("oidc: error evaluating claim validation expression: {message}"))
                }
                Ok(cel::Value::Bool(false)) => {
                    return Err(format!(
                        "oidc: error evaluating claim validation expression: validation expression '{}' failed",
                        expr.source
                    ))
                }
                Ok(_) => return Err(cel_error("claim validation", expr, "the expression did not evaluate to a bool")),
                Err(e) => return Err(cel_error("claim validation", expr, &e)),
            },
        }
    }
    let name = match &c.username {
        Mapping::Claim { claim, prefix } => {
            let v = claim_string(claims, claim)?
                .ok_or_else(|| format!("oidc: parse username claims {claim:?}: claim not present"))?;
            if claim == "email" {
                match claims.get("email_verified") {
                    None | Some(Value::Bool(true)) => {}
                    Some(Value::Bool(false)) => return Err("oidc: email not verified".into()),
                    Some(_) => {
                        return Err(
                            "oidc: parse 'email_verified' claim: json: cannot unmarshal into Go value of type bool"
                                .into(),
                        )
                    }
                }
            }
            format!("{prefix}{v}")
        }
        Mapping::Expression(e) => match e.eval(&cel_claims) {
            Ok(v) => cel::as_string(&v)
                .ok_or_else(|| cel_error("username claim", e, "the expression did not evaluate to a string"))?,
            Err(err) => return Err(cel_error("username claim", e, &err)),
        },
        Mapping::None => String::new(),
    };
    if name.is_empty() {
        return Err("oidc: empty username via CEL expression is not allowed".into());
    }
    let groups = match &c.groups {
        Mapping::Claim { claim, prefix } => match claims.get(claim) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![format!("{prefix}{s}")],
            Some(Value::Array(a)) => a
                .iter()
                .map(|g| g.as_str().map(|g| format!("{prefix}{g}")))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("oidc: parse groups claim {claim:?}: not a string or an array of strings"))?,
            Some(_) => return Err(format!("oidc: parse groups claim {claim:?}: not a string or an array of strings")),
        },
        Mapping::Expression(e) => {
            let v = e.eval(&cel_claims).map_err(|err| cel_error("groups claim", e, &err))?;
            cel::as_strings(&v).ok_or_else(|| {
                cel_error("groups claim", e, "the expression did not evaluate to a string or a list of strings")
            })?
        }
        Mapping::None => Vec::new(),
    };
    let uid = match &c.uid {
        Mapping::Claim { claim, .. } => claim_string(claims, claim)?.unwrap_or_default(),
        Mapping::Expression(e) => {
            let v = e.eval(&cel_claims).map_err(|err| cel_error("uid claim", e, &err))?;
            cel::as_string(&v)
                .ok_or_else(|| cel_error("uid claim", e, "the expression did not evaluate to a string"))?
        }
        Mapping::None => String::new(),
    };
    let mut extra = BTreeMap::new();
    for (key, e) in &c.extra {
        let v = e.eval(&cel_claims).map_err(|err| cel_error("extra claim", e, &err))?;
        let values = cel::as_strings(&v).ok_or_else(|| {
            cel_error("extra claim", e, "the expression did not evaluate to a string or a list of strings")
        })?;
        if !values.is_empty() {
            extra.insert(key.clone(), values);
        }
    }
    let user = UserInfo { name, uid, groups, extra };
    if !c.user_rules.is_empty() {
        let cel_user = user_value(&user);
        for (rule, message) in &c.user_rules {
            match rule.eval(&cel_user) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) if !message.is_empty() => {
                    return Err(format!("oidc: error evaluating user info validation rule: {message}"))
                }
                Ok(cel::Value::Bool(false)) => {
                    return Err(format!(
                        "oidc: error evaluating user info validation rule: validation expression '{}' failed",
                        rule.source
                    ))
                }
                Ok(_) => {
                    return Err(cel_error(
                        "user info validation rule",
                        rule,
                        "the expression did not evaluate to a bool",
                    ))
                }
                Err(e) => return Err(cel_error("user info validation rule", rule, &e)),
            }
        }
    }
    Ok(user)
}

/// `user` for user validation rules: `username`, `uid`, `groups`, `extra`.
fn user_value(u: &UserInfo) -> cel::Value {
    cel::from_json(&serde_json::json!({
        "username": u.name,
        "uid": u.uid,
        "groups": u.groups,
        "extra": u.extra,
    }))
}

impl JwtAuthenticator {
    pub fn new(config: CompiledJwt, keys: Arc<KeySource>, metrics: Arc<Metrics>) -> Self {
        JwtAuthenticator { config, keys, metrics }
    }

    /// Authenticate a token at `now` (not mine: not a JWT, or of another issuer).
    pub async fn authenticate(&self, token: &str, now: DateTime<Utc>) -> TokenResult {
        let Some(parts) = jwt::split(token) else { return TokenResult::NotMine };
        let issuer = &self.config.issuer.url;
        let parts = match parts {
            Ok(p) if p.claims.get("iss").and_then(Value::as_str) == Some(issuer.as_str()) => p,
            _ => return TokenResult::NotMine,
        };
        let start = std::time::Instant::now();
        let result = self.check(&parts, now).await;
        self.metrics.authenticated(issuer, result.is_ok(), start.elapsed());
        match result {
            Ok(user) => TokenResult::Authenticated { user, audiences: Vec::new() },
            Err(reason) => TokenResult::Invalid(reason),
        }
    }

    async fn check(&self, parts: &jwt::Parts<'_>, now: DateTime<Utc>) -> Result<UserInfo, String> {
        let mut keys = self.keys.keys();
        // Keys not fetched yet, or none with the token's key id: fetch (rate-limited).
        let unknown = keys.as_ref().is_none_or(|k| jwt::verify_signature(parts, k) == Err(SignatureError::UnknownKey));
        if unknown && self.keys.refresh().await {
            keys = self.keys.keys();
        }
        self.check_with(parts, now, keys)
    }

    fn check_with(
        &self,
        parts: &jwt::Parts<'_>,
        now: DateTime<Utc>,
        keys: Option<Arc<Vec<jwt::Jwk>>>,
    ) -> Result<UserInfo, String> {
        let issuer = &self.config.issuer.url;
        let Some(keys) = keys else {
            return Err(format!("oidc: authenticator for issuer {issuer:?} is not initialized"));
        };
        match jwt::verify_signature(parts, &keys) {
            Ok(()) => {}
            Err(SignatureError::UnknownKey) => {
                return Err("oidc: verify token: failed to verify signature: no keys matched the token's key id".into())
            }
            Err(SignatureError::Malformed(e)) => return Err(format!("oidc: malformed jwt: {e}")),
            Err(SignatureError::Invalid(e)) => return Err(format!("oidc: verify token: {e}")),
        }
        jwt::check_times(&parts.claims, now).map_err(|e| format!("oidc: verify token: oidc: {e}"))?;
        jwt::check_audience(&parts.claims, &self.config.issuer.audiences)
            .map_err(|e| format!("oidc: verify token: oidc: {e}"))?;
        map_claims(&self.config, &parts.claims)
    }
}

#[cfg(test)]
#[path = "authenticator_tests.rs"]
mod tests;
