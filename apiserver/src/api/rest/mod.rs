//! Generic REST handlers for every registered kind: get, list, create, update, patch,
//! delete, deletecollection (watch lives in `watch.rs`). Each handler does the I/O and calls
//! the kind's `Strategy` hooks in a fixed order (see `registry`).

mod decode;
pub mod delete;
mod read;
mod response;
mod write;

pub use decode::{check_type_meta, decode_body, duplicate_fields, typed_check};
pub use delete::{delete, delete_collection, delete_one, delete_options, DeleteOptions};
pub use read::{get, list, read_list, wait_for_rv, Filter, Listed};
pub use response::{render, send_bytes, warning_headers, WARNING_ITEM_CHARS, WARNING_TOTAL_CHARS};
pub use write::{create, finish_update, patch, update};

use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use crate::admission::{self, Attributes, Operation};
use crate::api::table::{self, IncludeObject};
use crate::authn::UserInfo;
use crate::error::{ApiError, Result};
use crate::http::negotiate::Output;
use crate::http::request_info::RequestInfo;
use crate::meta;
use crate::registry::{ResourceDef, Role};
use crate::storage::{self, Storage};
use crate::AppState;

/// Request bodies above this size are refused (413), like kube-apiserver's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Responses at least this big are gzipped when the client accepts it.
pub const GZIP_MIN: usize = 128 * 1024;
/// How long a continue token stays valid after its snapshot revision left the history.
const GENERATE_NAME_ATTEMPTS: usize = 8;

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

/// Everything a handler needs about the request.
pub struct Call<'a> {
    pub state: &'a Arc<AppState>,
    pub def: &'a ResourceDef,
    pub info: &'a RequestInfo,
    pub user: &'a UserInfo,
    pub params: Params,
    pub out: Output,
}

impl Call<'_> {
    fn store(&self) -> &Arc<dyn Storage> {
        &self.state.storage
    }
    fn ns(&self) -> Option<&str> {
        if self.def.namespaced && !self.info.namespace.is_empty() {
            Some(self.info.namespace.as_str())
        } else {
            None
        }
    }
    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(self.def.group, self.def.resource, name)
    }
    fn storage_err(&self, name: &str, e: storage::Error) -> ApiError {
        map_storage_error(self.def, name, e)
    }
    fn include_object(&self) -> IncludeObject {
        IncludeObject::parse(self.params.get("includeObject"))
    }
    /// Render one object per the negotiated output (Table/metadata/full).
    pub fn object_body(&self, obj: Value) -> Value {
        if self.out.table {
            let list_meta = json!({"resourceVersion": meta::rv(&obj)});
            table::table(self.def, &[obj], self.include_object(), list_meta, true)
        } else if self.out.metadata_only {
            table::partial_object_metadata(&obj)
        } else {
            obj
        }
    }
}

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

/// Run the admission chain for a write or delete through `c`.
async fn admit(c: &Call<'_>, op: Operation, new: Option<&Value>, old: Option<&Value>) -> Result<()> {
    let a = Attributes { op, def: c.def, info: c.info, user: c.user, field_selector: None };
    admission::chain().admit(c.state, &a, new, old).await
}

fn is_namespace(def: &ResourceDef) -> bool {
    def.strategy.role() == Role::Namespace
}

/// The apiserver's own identity, for the writes it makes itself (default objects).
pub fn apiserver_user() -> UserInfo {
    UserInfo {
        name: "system:apiserver".into(),
        groups: vec![crate::authz::MASTERS_GROUP.into(), crate::authn::AUTHENTICATED_GROUP.into()],
        ..Default::default()
    }
}

/// A write the apiserver makes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Create,
    Update,
    Delete,
}

impl Write {
    /// The request verb.
    pub fn verb(self) -> &'static str {
        match self {
            Write::Create => "create",
            Write::Update => "update",
            Write::Delete => "delete",
        }
    }
}

/// One write through the REST handlers as the apiserver itself: the same defaults,
/// validation and admission as a client's write.
pub async fn write_as_apiserver(
    state: &Arc<AppState>,
    def: &ResourceDef,
    write: Write,
    namespace: &str,
    name: &str,
    subresource: &str,
    body: &Value,
) -> Result<()> {
    let user = apiserver_user();
    let info = RequestInfo {
        is_resource_request: true,
        verb: write.verb().into(),
        api_prefix: if def.group.is_empty() { "api".into() } else { "apis".into() },
        api_group: def.group.into(),
        api_version: def.version.into(),
        resource: def.resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: if write == Write::Create { String::new() } else { name.into() },
        ..Default::default()
    };
    let call = Call { state, def, info: &info, user: &user, params: Params::default(), out: Default::default() };
    let bytes = Bytes::from(body.to_string());
    match write {
        Write::Create => create(&call, &bytes, "application/json").await.map(|_| ()),
        Write::Update => update(&call, &bytes, "application/json").await.map(|_| ()),
        Write::Delete => delete(&call, &bytes, "application/json").await.map(|_| ()),
    }
}
