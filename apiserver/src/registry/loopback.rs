//! The apiserver's own reads and writes ([`Loopback`]): what its start-up and maintenance
//! loops (default RBAC policy, flow-control configuration, cluster-info, the legacy token
//! tracking ConfigMap, apiserver identity Leases) use in place of upstream's loopback client.
//!
//! Enters: a kind's registration, the verb, namespace, name, subresource and a JSON body, and
//! who writes ([`Author`]). Leaves: the stored object, or the `ApiError` a client making the
//! same request would get: the write passes the same decoding, defaults, validation and
//! admission as a client's (the implementation is the REST handlers', given by the top layer).
//!
//! Layer: registry. Files below the API handlers take a `&dyn Loopback` (or a
//! `Weak<dyn Loopback>` for a background loop) instead of the whole server state.

use std::sync::Arc;

use serde_json::Value;

use super::{Registry, ResourceDef};
use crate::authn::UserInfo;
use crate::error::Result;
use crate::storage::Storage;

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

/// Who makes a write: the user admission sees and the user agent (the field manager of the
/// write in `managedFields` is the user agent's product name).
#[derive(Debug, Clone)]
pub struct Author {
    pub user: UserInfo,
    pub user_agent: &'static str,
}

impl Author {
    /// The apiserver's own identity ([`UserInfo::apiserver`]), its writes recorded as
    /// upstream's loopback client's (`kube-apiserver`).
    pub fn apiserver() -> Self {
        Author { user: UserInfo::apiserver(), user_agent: "kube-apiserver" }
    }

    /// The same identity with no user agent (no field manager): how cluster-info and the
    /// legacy token tracking ConfigMap are written.
    pub fn apiserver_unnamed() -> Self {
        Author { user: UserInfo::apiserver(), user_agent: "" }
    }
}

/// One write of [`Loopback::write`].
#[derive(Clone, Copy)]
pub struct OwnWrite<'a> {
    pub def: &'a ResourceDef,
    pub write: Write,
    /// Empty for a cluster-scoped kind.
    pub namespace: &'a str,
    /// The object's name (not sent in the request path of a create, as a client's create).
    pub name: &'a str,
    /// Empty for the main resource.
    pub subresource: &'a str,
    /// The object (create, update) or the `DeleteOptions` (delete).
    pub body: &'a Value,
    pub author: &'a Author,
}

/// The apiserver's own access to its objects.
#[async_trait::async_trait]
pub trait Loopback: Send + Sync {
    /// The built-in kinds.
    fn registry(&self) -> &Registry;
    /// The store every kind is kept in.
    fn storage(&self) -> &Arc<dyn Storage>;
    /// One write through the request path: the same decoding, defaults, validation and
    /// admission as a client's; answers the body a client would get.
    async fn write(&self, w: OwnWrite<'_>) -> Result<Value>;
    /// Every kind served now (built-in and custom) but the create-only ones: its group, its
    /// resource and the storage prefix of its objects.
    fn served_prefixes(&self) -> Vec<(&'static str, &'static str, String)>;
}

impl dyn Loopback + '_ {
    /// The built-in kind `group`/`version`/`resource`, or an error naming it.
    pub fn find(&self, group: &str, version: &str, resource: &str) -> anyhow::Result<&ResourceDef> {
        self.registry().find(group, version, resource).ok_or_else(|| anyhow::anyhow!("{resource} are not registered"))
    }

    /// A write as the apiserver ([`Author::apiserver`]) of `body` to `def`'s object.
    pub async fn write_as_apiserver(
        &self,
        def: &ResourceDef,
        write: Write,
        namespace: &str,
        name: &str,
        subresource: &str,
        body: &Value,
    ) -> Result<()> {
        let author = Author::apiserver();
        self.write(OwnWrite { def, write, namespace, name, subresource, body, author: &author }).await.map(|_| ())
    }
}
