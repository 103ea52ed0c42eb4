//! `ApiError`: the one error type of the request path. Every error leaves the server as a
//! `metav1.Status` JSON body with the HTTP code, a CamelCase reason and, for validation
//! failures, the list of causes.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};

/// One problem with one field, as `details.causes[]` carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Cause reason, e.g. `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`.
    pub reason: &'static str,
    /// JSON path of the field, e.g. `metadata.name` or `spec.usages[0]`.
    pub field: String,
    /// Human-readable message (without the field prefix).
    pub message: String,
}

/// The cause reason of [`FieldError::internal`].
pub const INTERNAL_ERROR: &str = "InternalError";

impl FieldError {
    fn new(reason: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { reason, field: field.into(), message: message.into() }
    }
    /// `Invalid value: <value>: <detail>`
    pub fn invalid(field: impl Into<String>, value: &Value, detail: impl AsRef<str>) -> Self {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            Value::Null => "null".to_string(),
            other => other.to_string(),
        };
        Self::new("FieldValueInvalid", field, format!("Invalid value: {shown}: {}", detail.as_ref()))
    }
    pub fn required(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        let d = detail.as_ref();
        let msg = if d.is_empty() { "Required value".to_string() } else { format!("Required value: {d}") };
        Self::new("FieldValueRequired", field, msg)
    }
    pub fn forbidden(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        Self::new("FieldValueForbidden", field, format!("Forbidden: {}", detail.as_ref()))
    }
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Self::new(
            "FieldValueNotSupported",
            field,
            format!("Unsupported value: {value}: supported values: {}", list.join(", ")),
        )
    }
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self::new("FieldValueDuplicate", field, format!("Duplicate value: {value}"))
    }
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self::new("FieldValueTooLong", field, too_long_message(max))
    }
    /// `Internal error: <detail>` (upstream's `field.InternalError`): the server, not the
    /// request, is at fault; an Invalid error with such a cause is answered with 500.
    pub fn internal(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        Self::new(INTERNAL_ERROR, field, format!("Internal error: {}", detail.as_ref()))
    }
    /// The immutability error upstream uses: `field is immutable`.
    pub fn immutable(field: impl Into<String>, value: &Value) -> Self {
        Self::invalid(field, value, "field is immutable")
    }
    /// Upstream renders a cause as `<field>: <message>`.
    pub fn render(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// Which object an error is about (fills `details`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    pub group: String,
    /// For most errors the plural resource (`configmaps`); for Invalid the Kind (`ConfigMap`).
    pub kind: String,
    pub name: String,
}

/// Every way a request can fail. Renders as a `Status`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{message}")]
    Forbidden { message: String, subject: Subject },
    #[error("{message}")]
    NotFound { message: String, subject: Subject },
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    NotAcceptable(String),
    #[error("{message}")]
    AlreadyExists { message: String, subject: Subject },
    #[error("{message}")]
    Conflict { message: String, subject: Subject },
    /// 409 with reason Conflict and one `FieldManagerConflict` cause per field a
    /// server-side apply would take from another manager (upstream `NewApplyConflict`).
    #[error("{message}")]
    ApplyConflict { message: String, causes: Vec<FieldError> },
    /// 410 with reason Expired; `continue_token` is the fresh token upstream returns.
    #[error("{message}")]
    Expired { message: String, continue_token: Option<String> },
    #[error("{0}")]
    RequestEntityTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{message}")]
    Invalid { message: String, subject: Subject, causes: Vec<FieldError> },
    #[error("{0}")]
    TooManyRequests(String),
    /// 504 with reason Timeout (e.g. "Too large resource version").
    #[error("{message}")]
    Timeout { message: String, retry_after: Option<u64> },
    #[error("{0}")]
    InternalError(String),
    #[error("{0}")]
    ServiceUnavailable(String),
}

impl ApiError {
    /// `<resource> "<name>" not found`
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let gr = group_resource(group, resource);
        ApiError::NotFound {
            message: format!("{gr} \"{name}\" not found"),
            subject: Subject { group: group.into(), kind: resource.into(), name: name.into() },
        }
    }
    /// `<resource> "<name>" already exists`
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let gr = group_resource(group, resource);
        ApiError::AlreadyExists {
            message: format!("{gr} \"{name}\" already exists"),
            subject: Subject { group: group.into(), kind: resource.into(), name: name.into() },
        }
    }
    /// `Operation cannot be fulfilled on <resource> "<name>": <detail>`
    pub fn conflict(group: &str, resource: &str, name: &str, detail: &str) -> Self {
        let gr = group_resource(group, resource);
        ApiError::Conflict {
            message: format!("Operation cannot be fulfilled on {gr} \"{name}\": {detail}"),
            subject: Subject { group: group.into(), kind: resource.into(), name: name.into() },
        }
    }
    /// `<Kind> "<name>" is invalid: [cause, cause]` with details.kind = Kind.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<FieldError>) -> Self {
        let rendered: Vec<String> = causes.iter().map(FieldError::render).collect();
        let joined = if rendered.len() == 1 { rendered[0].clone() } else { format!("[{}]", rendered.join(", ")) };
        let gk = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        ApiError::Invalid {
            message: format!("{gk} \"{name}\" is invalid: {joined}"),
            subject: Subject { group: group.into(), kind: kind.into(), name: name.into() },
            causes,
        }
    }
    pub fn forbidden(group: &str, resource: &str, name: &str, message: String) -> Self {
        ApiError::Forbidden {
            message,
            subject: Subject { group: group.into(), kind: resource.into(), name: name.into() },
        }
    }
    pub fn internal(e: impl std::fmt::Display) -> Self {
        ApiError::InternalError(format!("Internal error occurred: {e}"))
    }

    pub fn code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => {
                StatusCode::CONFLICT
            }
            ApiError::Expired { .. } => StatusCode::GONE,
            ApiError::RequestEntityTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ApiError::InternalError(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::ServiceUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized(_) => "Unauthorized",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::NotFound { .. } => "NotFound",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::Expired { .. } => "Expired",
            ApiError::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::TooManyRequests(_) => "TooManyRequests",
            ApiError::Timeout { .. } => "Timeout",
            ApiError::InternalError(_) => "InternalError",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
        }
    }

    /// The `metav1.Status` body.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code().as_u16(),
        });
        let subject = match self {
            ApiError::Forbidden { subject, .. }
            | ApiError::NotFound { subject, .. }
            | ApiError::AlreadyExists { subject, .. }
            | ApiError::Conflict { subject, .. }
            | ApiError::Invalid { subject, .. } => Some(subject),
            _ => None,
        };
        let mut details = serde_json::Map::new();
        if let Some(s) = subject {
            if !s.name.is_empty() {
                details.insert("name".into(), json!(s.name));
            }
            if !s.group.is_empty() {
                details.insert("group".into(), json!(s.group));
            }
            if !s.kind.is_empty() {
                details.insert("kind".into(), json!(s.kind));
            }
        }
        if let ApiError::Invalid { causes, .. } | ApiError::ApplyConflict { causes, .. } = self {
            let causes: Vec<Value> =
                causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let ApiError::Timeout { retry_after: Some(s), .. } = self {
            details.insert("retryAfterSeconds".into(), json!(s));
        }
        if let ApiError::TooManyRequests(_) = self {
            details.insert("retryAfterSeconds".into(), json!(1));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        if let ApiError::Expired { continue_token: Some(t), .. } = self {
            status["metadata"] = json!({ "continue": t });
        }
        status
    }
}

/// `configmaps` or `leases.coordination.k8s.io`.
pub fn group_resource(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        crate::work::encoded(crate::work::Format::Json, crate::work::Site::Response);
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        let mut resp = (self.code(), body).into_response();
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let retry = match &self {
            ApiError::TooManyRequests(_) => Some(1),
            ApiError::Timeout { retry_after, .. } => *retry_after,
            _ => None,
        };
        if let Some(s) = retry {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// `field.TooLong`'s message as kube-apiserver 1.35 words it.
pub fn too_long_message(max: usize) -> String {
    let unit = if max == 1 { "byte" } else { "bytes" };
    format!("Too long: may not be more than {max} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_long_is_worded_as_upstream() {
        let cases = [(1, "Too long: may not be more than 1 byte"), (253, "Too long: may not be more than 253 bytes")];
        for (max, want) in cases {
            assert_eq!(too_long_message(max), want);
        }
    }

    #[test]
    fn not_found_status_matches_the_upstream_example() {
        let s = ApiError::not_found("", "pods", "grafana").status();
        assert_eq!(
            s,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"pods \"grafana\" not found","reason":"NotFound",
                   "details":{"name":"grafana","kind":"pods"},"code":404})
        );
    }

    #[test]
    fn invalid_names_the_kind_and_lists_causes() {
        let e = ApiError::invalid(
            "",
            "ConfigMap",
            "Bad_Name",
            vec![FieldError::invalid("metadata.name", &json!("Bad_Name"), "a lowercase RFC 1123 subdomain")],
        );
        let s = e.status();
        assert_eq!(s["code"], 422);
        assert_eq!(s["details"]["kind"], "ConfigMap");
        assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
        assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueInvalid");
        assert!(s["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value"));
    }
}
