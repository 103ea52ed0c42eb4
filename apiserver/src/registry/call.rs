//! The parts of a resource request below the handlers: the query [`Params`] and what a
//! handler answers ([`Reply`]), and how a storage error reads on the API
//! ([`map_storage_error`]). The request itself (`api::rest::Call`, with the server state) is
//! the handlers'.

use http::StatusCode;
use serde_json::Value;

use super::ResourceDef;
use crate::error::{ApiError, Result};
use crate::storage;

/// Parsed query parameters of a resource request.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pub pairs: Vec<(String, String)>,
}

impl Params {
    pub fn parse(query: Option<&str>) -> Self {
        Params { pairs: query.map(crate::http::request_info::url_pairs).unwrap_or_default() }
    }
    pub fn get(&self, k: &str) -> Option<&str> {
        self.pairs.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.as_str())
    }
    pub fn all(&self, k: &str) -> Vec<&str> {
        self.pairs.iter().filter(|(pk, _)| pk == k).map(|(_, v)| v.as_str()).collect()
    }
    pub fn flag(&self, k: &str) -> Result<bool> {
        match self.get(k) {
            None | Some("") | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(v) => Err(ApiError::BadRequest(format!("invalid value for {k}: {v:?}: expected true or false"))),
        }
    }
    pub fn int(&self, k: &str) -> Result<Option<i64>> {
        match self.get(k) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| ApiError::BadRequest(format!("invalid value for {k}: {v:?}: not an integer"))),
        }
    }
    /// `dryRun=All` (repeatable); anything else is an error, a bare `dryRun` is a normal write.
    pub fn dry_run(&self) -> Result<bool> {
        let vals: Vec<&str> = self.all("dryRun").into_iter().filter(|v| !v.is_empty()).collect();
        for v in &vals {
            if *v != "All" {
                return Err(ApiError::BadRequest(format!("Invalid dry run value: {v:?}: supported values: \"All\"")));
            }
        }
        Ok(!vals.is_empty())
    }
    pub fn field_validation(&self) -> Result<FieldValidation> {
        match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(v) => Err(ApiError::BadRequest(format!(
                "fieldValidation: Unsupported value: {v:?}: supported values: \"Ignore\", \"Warn\", \"Strict\""
            ))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

/// A JSON response with optional `Warning` headers, rendered per `Output`.
pub struct Reply {
    pub code: StatusCode,
    pub body: Value,
    pub warnings: Vec<String>,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Reply { code: StatusCode::OK, body, warnings: Vec::new() }
    }
}

/// A storage error as the API reports it for an object of `def` named `name`.
pub fn map_storage_error(def: &ResourceDef, name: &str, e: storage::Error) -> ApiError {
    match e {
        storage::Error::NotFound(_) => ApiError::not_found(def.group, def.resource, name),
        storage::Error::AlreadyExists(_) => ApiError::already_exists(def.group, def.resource, name),
        storage::Error::Conflict { .. } => ApiError::conflict(
            def.group,
            def.resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ),
        storage::Error::Compacted { requested, compacted } => ApiError::Expired {
            message: format!("too old resource version: {requested} ({compacted})"),
            continue_token: None,
        },
        storage::Error::FutureRevision { .. } => {
            ApiError::Timeout { message: "Too large resource version".into(), retry_after: Some(1) }
        }
        storage::Error::Backend(m) => ApiError::internal(m),
        storage::Error::Unavailable(m) => ApiError::ServiceUnavailable(m),
        storage::Error::Timeout(m) => ApiError::Timeout { message: m, retry_after: Some(1) },
    }
}
