//! What admission plugins may read of the stored objects, and nothing more: plugins decide,
//! they never write. In: a built-in kind, a namespace and a name. Out: the stored object
//! (`None`: not found), as stored or decoded into a typed form ([`super::decode`]), or the
//! storage error as the API answers it (a stored object that does not decode: 500).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;
use crate::registry::{Registry, ResourceDef};
use crate::storage::Storage;

/// Read-only access to the stored objects of the built-in kinds.
#[derive(Clone, Copy)]
pub struct Objects<'a> {
    registry: &'a Registry,
    storage: &'a dyn Storage,
}

impl<'a> Objects<'a> {
    pub fn new(registry: &'a Registry, storage: &'a dyn Storage) -> Self {
        Objects { registry, storage }
    }

    fn def(&self, group: &str, resource: &str) -> Result<&'a ResourceDef, ApiError> {
        let registry: &'a Registry = self.registry;
        registry
            .resources
            .iter()
            .find(|d| d.group == group && d.resource == resource)
            .ok_or_else(|| ApiError::internal(format!("no kind serves {resource}")))
    }

    /// The stored object `name` of the built-in kind `group`/`resource`, if there is one.
    pub async fn get(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        let def = self.def(group, resource)?;
        let kv = self
            .storage
            .get(&def.key(namespace, name))
            .await
            .map_err(|e| crate::registry::call::map_storage_error(def, name, e))?;
        kv.map(|kv| crate::meta::from_stored(&kv)).transpose()
    }

    /// Whether any stored object of the built-in kind `group`/`resource` in `namespace`
    /// satisfies `wanted`: read 64 at a time, at one revision, each dropped once looked at.
    pub async fn any(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        wanted: impl Fn(&Value) -> bool,
    ) -> Result<bool, ApiError> {
        let def = self.def(group, resource)?;
        let prefix = def.ns_prefix(namespace);
        let (mut at_rev, mut start_after) = (None, None);
        loop {
            let opts = crate::storage::ListOptions { at_rev, start_after: start_after.take(), limit: Some(64) };
            let page = self
                .storage
                .list(&prefix, opts)
                .await
                .map_err(|e| crate::registry::call::map_storage_error(def, "", e))?;
            for kv in &page.items {
                if wanted(&crate::meta::from_stored(kv)?) {
                    return Ok(true);
                }
            }
            match page.items.last() {
                Some(last) if page.remaining > 0 => {
                    at_rev = Some(page.rev);
                    start_after = Some(last.key.clone());
                }
                _ => return Ok(false),
            }
        }
    }

    /// [`Objects::get`], decoded into `T`.
    pub async fn get_as<T: DeserializeOwned>(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<T>, ApiError> {
        let Some(obj) = self.get(group, resource, namespace, name).await? else { return Ok(None) };
        super::decode(&obj)
            .map(Some)
            .map_err(|e| ApiError::internal(format!("the stored {resource} {name:?} does not decode: {e}")))
    }

    /// The namespace `name` as this apiserver knows it (every write it acknowledged
    /// included), and only when that has none, as it is now (one more round trip on etcd),
    /// as upstream's NamespaceLifecycle reads its informer, then the server.
    pub async fn namespace<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, ApiError> {
        let Some(def) = self.registry.namespace_kind() else {
            return Err(ApiError::internal("no kind holds the namespaces"));
        };
        let key = def.key(None, name);
        let map_err = |e| crate::registry::call::map_storage_error(def, name, e);
        let mut kv = self.storage.get_recent(&key).await.map_err(map_err)?;
        if kv.is_none() {
            kv = self.storage.get(&key).await.map_err(map_err)?;
        }
        let Some(kv) = kv else { return Ok(None) };
        super::decode(&crate::meta::from_stored(&kv)?)
            .map(Some)
            .map_err(|e| ApiError::internal(format!("the stored namespace {name:?} does not decode: {e}")))
    }
}
