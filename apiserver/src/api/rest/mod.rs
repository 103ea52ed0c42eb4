//! Generic REST handlers for every registered kind: get, list, create, update, patch,
//! delete, deletecollection (watch lives in `watch.rs`). Each handler does the I/O and calls
//! the kind's `Strategy` hooks in a fixed order (see `registry`).
//!
//! `read.rs`: get and list; `decode.rs`: request bodies; `write.rs`: create, update, patch;
//! [`delete`](mod@delete): delete, deletecollection and, in [`delete::gc`], what follows a deletion;
//! `response.rs`: rendering and `Warning` headers. The request types ([`Call`], [`Params`],
//! [`Reply`]) are the registry's (`registry/call.rs`), re-exported here.
//!
//! Layer: above `admission` and `registry`, below `lib.rs`'s dispatch.

mod decode;
pub mod delete;
mod read;
mod response;
mod write;

pub use decode::{check_type_meta, decode_body, typed_check, typed_roundtrip};
pub use delete::{delete, delete_collection, delete_one, delete_options, DeleteOptions};
pub use read::{get, list, read_list, wait_for_rv, Filter, Listed};
pub use response::{
    render, send_bytes, status_errors_negotiated, warning_headers, WARNING_ITEM_CHARS, WARNING_TOTAL_CHARS,
};
pub use write::{create, finish_update, patch, update};

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

pub use crate::registry::call::{map_storage_error, Call, FieldValidation, Params, Reply};

use crate::admission::{self, Attributes, Operation};
use crate::api::table::{self, IncludeObject};
use crate::authn::UserInfo;
use crate::error::Result;
use crate::http::request_info::RequestInfo;
use crate::meta;
use crate::registry::{ResourceDef, Role};
use crate::AppState;

/// Request bodies above this size are refused (413), like kube-apiserver's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Responses at least this big are gzipped when the client accepts it.
pub const GZIP_MIN: usize = 128 * 1024;
/// How long a continue token stays valid after its snapshot revision left the history.
const GENERATE_NAME_ATTEMPTS: usize = 8;

impl Call<'_> {
    fn include_object(&self) -> IncludeObject {
        IncludeObject::parse(self.params.get("includeObject"))
    }
    /// Render one object per the negotiated output (Table/metadata/full).
    pub fn object_body(&self, obj: Value) -> Value {
        if self.out.table {
            let list_meta = json!({"resourceVersion": meta::rv(&obj)});
            table::table(self.def, &[obj], self.include_object(), list_meta, true)
        } else if self.out.metadata_only {
            let mut p = table::partial_object_metadata(&obj);
            p["apiVersion"] = json!(self.out.meta_api_version());
            p
        } else {
            obj
        }
    }
}

/// Run the admission chain for a delete through `c`.
async fn admit(c: &Call<'_>, op: Operation, new: Option<&Value>, old: Option<&Value>) -> Result<()> {
    let a = Attributes { op, def: c.def, info: c.info, user: c.user, field_selector: None };
    admission::chain().admit(c.state, &a, new, old).await
}

/// Run one phase of the admission chain for a create or update through `c`.
async fn admit_phase(
    c: &Call<'_>,
    op: Operation,
    phase: admission::Phase,
    new: Option<&Value>,
    old: Option<&Value>,
) -> Result<()> {
    let a = Attributes { op, def: c.def, info: c.info, user: c.user, field_selector: None };
    admission::chain().admit_phase(c.state, &a, phase, new, old).await
}

fn is_namespace(def: &ResourceDef) -> bool {
    def.strategy.role() == Role::Namespace
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
    let user = UserInfo::apiserver();
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
        // Its writes are recorded in managedFields as upstream's loopback client's are.
        user_agent: "kube-apiserver".into(),
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
