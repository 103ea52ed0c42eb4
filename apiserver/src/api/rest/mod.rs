//! Generic REST handlers for every registered kind: get, list, create, update, patch,
//! delete, deletecollection (watch lives in `watch.rs`). Each handler does the I/O and calls
//! the kind's `Strategy` hooks in a fixed order (see `registry`).
//!
//! `read.rs`: get and list; request bodies are decoded by `registry/body.rs` (re-exported
//! here); `write.rs`: create, update, patch;
//! [`delete`](mod@delete): delete, deletecollection and, in [`delete::gc`], what follows a deletion;
//! `response.rs`: rendering and `Warning` headers. [`Call`] is what every handler is given
//! (a kind's create-only subresource handler too, `api::CreateHandler`); [`Params`] and
//! [`Reply`] are the registry's (`registry/call.rs`), re-exported here.
//!
//! Layer: above `admission` and `registry`, below `lib.rs`'s dispatch.

pub mod delete;
mod read;
mod response;
mod write;

pub use crate::registry::body::{check_type_meta, decode_body, typed_check, typed_roundtrip};
pub use delete::{delete, delete_collection, delete_one, delete_options, DeleteOptions};
pub use read::{get, list, read_list, wait_for_rv, Filter, Listed};
pub use response::{
    render, send_bytes, status_errors_negotiated, warning_headers, WARNING_ITEM_CHARS, WARNING_TOTAL_CHARS,
};
pub use write::{create, finish_update, patch, update};

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

pub use crate::registry::call::{map_storage_error, FieldValidation, Params, Reply};

use crate::admission::{self, Attributes, Operation};
use crate::api::table::{self, IncludeObject};
use crate::authn::UserInfo;
use crate::error::{ApiError, Result};
use crate::http::request_info::RequestInfo;
use crate::meta;
pub use crate::registry::loopback::Write;
use crate::registry::loopback::{Loopback, OwnWrite};
use crate::registry::{ResourceDef, Role};
use crate::storage::{self, Storage};
use crate::wire::negotiate::Output;
use crate::AppState;

/// Request bodies above this size are refused (413), like kube-apiserver's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Responses at least this big are gzipped when the client accepts it.
pub const GZIP_MIN: usize = 128 * 1024;
/// How long a continue token stays valid after its snapshot revision left the history.
const GENERATE_NAME_ATTEMPTS: usize = 8;

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
    /// The storage of this kind's objects ([`AppState::store_for`]).
    pub(crate) fn store(&self) -> &Arc<dyn Storage> {
        self.state.store_for(self.def)
    }
    pub(crate) fn ns(&self) -> Option<&str> {
        if self.def.namespaced && !self.info.namespace.is_empty() {
            Some(self.info.namespace.as_str())
        } else {
            None
        }
    }
    pub(crate) fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(self.def.group, self.def.resource, name)
    }
    pub(crate) fn storage_err(&self, name: &str, e: storage::Error) -> ApiError {
        map_storage_error(self.def, name, e)
    }
}

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
    let a = Attributes::new(op, c.def, c.info, c.user, new, old);
    admission::chain().admit(&c.state.admission_services(), &a).await
}

/// Run one phase of the admission chain for a create or update through `c`.
async fn admit_phase(
    c: &Call<'_>,
    op: Operation,
    phase: admission::Phase,
    new: Option<&Value>,
    old: Option<&Value>,
) -> Result<()> {
    let a = Attributes::new(op, c.def, c.info, c.user, new, old);
    admission::chain().admit_phase(&c.state.admission_services(), &a, phase).await
}

fn is_namespace(def: &ResourceDef) -> bool {
    def.strategy.role() == Role::Namespace
}

impl AppState {
    /// What admission plugins may use of this state.
    pub fn admission_services(&self) -> admission::Services<'_> {
        admission::Services {
            objects: admission::Objects::new(&self.registry, self.storage.as_ref()),
            authz: self.security.authz.as_ref(),
            rbac: &self.security.rbac,
        }
    }
}

/// The request limiter of the flow-control filter.
impl crate::flowcontrol::filter::Limited for AppState {
    fn limiter(&self) -> Option<&crate::flowcontrol::filter::Limiter> {
        self.limiter.get()
    }
}

/// The apiserver's own writes (`registry::loopback`) go through the same handlers as a
/// client's: the same decoding, defaults, validation and admission.
#[async_trait::async_trait]
impl Loopback for AppState {
    fn registry(&self) -> &crate::registry::Registry {
        &self.registry
    }
    fn storage(&self) -> &Arc<dyn crate::storage::Storage> {
        &self.storage
    }
    fn served_prefixes(&self) -> Vec<(&'static str, &'static str, String)> {
        let served = self.crds.current();
        served.registry.resources.iter().filter(|d| !d.create_only).map(|d| (d.group, d.resource, d.prefix())).collect()
    }
    async fn write(&self, w: OwnWrite<'_>) -> Result<Value> {
        let OwnWrite { def, write, namespace, name, subresource, body, author } = w;
        let Some(state) = self.me.upgrade() else {
            return Err(ApiError::ServiceUnavailable("the server is shutting down".into()));
        };
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
            user_agent: author.user_agent.into(),
            ..Default::default()
        };
        let call = Call {
            state: &state,
            def,
            info: &info,
            user: &author.user,
            params: Params::default(),
            out: Default::default(),
        };
        let bytes = Bytes::from(body.to_string());
        let reply = match write {
            Write::Create => create(&call, &bytes, "application/json").await?,
            Write::Update => update(&call, &bytes, "application/json").await?,
            Write::Delete => delete(&call, &bytes, "application/json").await?,
        };
        Ok(reply.body)
    }
}
