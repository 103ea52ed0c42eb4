//! The registry: every kind the apiserver serves, with its per-kind strategy.
//!
//! A kind's strategy holds its rules with no I/O (like upstream's `rest.RESTCreateStrategy`).
//! It is split by capability, so that a kind implements only what it has:
//!
//! | trait | what | implement when the kind... |
//! | --- | --- | --- |
//! | [`Strategy`] (always) | decoding (`roundtrip`), [`Role`], name rule, strategic-merge keys, whether strategic merge is accepted, storage in another kind ([`StoredAs`]), a schema given as data | is served at all |
//! | [`WriteStrategy`] | defaults and validation on create and update, `metadata.generation` | has rules beyond decoding |
//! | [`StatusStrategy`] | writes through `status` (or `approval`, `finalize`) and the fields each write resets | has a subresource that edits the stored object |
//! | [`SubresourceStrategy`] | subresource verbs, create-only subresources and the kind their body is | has a subresource other than a plain `get`/`patch`/`update` of itself |
//! | [`DeleteStrategy`] | finalizers and changes on DELETE | does something before it goes |
//! | [`FieldSelectors`] | selectable fields beyond `metadata.name`/`metadata.namespace` | has more |
//! | [`TableStrategy`] | Table columns, cells and row order | has a printer upstream |
//!
//! A kind with a capability implements its trait and returns `Some(self)` from the method of
//! the same name on [`Strategy`] (`write()`, `status()`, `subresources()`, `delete()`,
//! `field_selectors()`, `table()`); without it, the generic path does what that trait's
//! defaults do. The generic REST handlers (`api/rest/`) do the I/O and call these hooks in a
//! fixed order:
//!
//! create:  decode → `prepare_for_create` → `prepare_for_create_by(requester)` → generic
//!          metadata → `validate` (one 422 with every field error) → admission → store
//! update:  decode → `prepare_for_update(new, old)` → generic metadata → `validate` +
//!          `validate_update(new, old)` → admission → store
//! subresource (status, approval): `prepare_for_subresource(sub, new, old)` →
//!          `validate` + `validate_subresource(sub, new, old)` → admission → store
//!
//! Everything kind-specific the generic path needs is asked of the strategy, never decided
//! by group or resource name: the kind's [`Role`] (namespaces), its name rule, its
//! strategic-merge-patch keys, its subresources' verbs and kinds and its create-only
//! subresources ([`SubresourceStrategy::create_only`]), its Table. Admission plugins
//! (`admission/`) say themselves which kinds they handle.
//!
//! Layer: below admission and the API handlers, above storage. Files here import `storage`,
//! `meta`, `error`, `validation`, `wire/`, `machinery/`, `http::request_info`, the user
//! type of `authn` and APF's defaults and arithmetic (`flowcontrol::{bootstrap, shuffle}`),
//! never `authz`, `admission`, `openapi`, `api` or the server state; the request parts below
//! the handlers ([`call::Params`], [`call::Reply`]), body decoding ([`body`]) and the
//! apiserver's own writes ([`loopback::Loopback`], implemented by the top layer) are defined
//! here for that reason, and so is [`schema::Structural`] (a CRD's compiled schema), which
//! the kinds declare and the handlers read. [`ListStrategy`] is the patches'
//! (`machinery::patch`), re-exported. The review kinds' answers ([`reviews::answer`]) sit
//! above `authz/` though they are filed here (docs/ARCHITECTURE.md has the layer table).
//!
//! Objects are `serde_json::Value`s in their wire form; strategies decode into the
//! `k8s-openapi` types where typing helps (validation, unknown-field detection). Validation
//! fails closed: an object that does not decode is invalid ([`decode`], [`decode_update`]).

pub mod apiextensions;
pub mod body;
pub mod budget;
pub mod call;
pub mod certificates;
pub mod clustertrustbundles;
pub mod coordination;
pub mod core;
pub mod custom;
pub mod events;
pub mod flowcontrol;
pub mod intern;
pub mod loopback;
pub mod node;
pub mod podcertificaterequests;
pub mod rbac;
pub mod reviews;
pub mod runtime_config;
pub mod schema;
pub mod shared;
pub mod storage;

use std::sync::Arc;

use serde_json::Value;

use crate::error::FieldError;

/// One Table column, as `columnDefinitions[]` carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    /// `string`, `integer`, `number`, `boolean` or `date`... upstream uses `string`/`date`/`integer`.
    pub type_: &'static str,
    /// e.g. `name` for the Name column, otherwise empty.
    pub format: &'static str,
    pub description: &'static str,
    /// 0 = shown by default; 1 = only with `-o wide`.
    pub priority: u32,
}

/// What a kind is to the generic request path, beyond its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// An ordinary object.
    #[default]
    Object,
    /// The kind whose objects are the namespaces: cluster-scoped but named where a namespace
    /// goes in the URL (`/api/v1/namespaces/<name>`), always deleted gracefully (its content
    /// first, by the deletion follow-ups in `api/rest/delete/gc.rs`; the object goes when its finalizers are gone through
    /// `/finalize`), no `deletecollection`; NamespaceLifecycle admission looks them up.
    Namespace,
}

/// Group, version and kind.
pub type Gvk = (&'static str, &'static str, &'static str);

/// A name rule (upstream's per-kind `ValidateName`): the problems with a name.
pub type NameRule = fn(&str) -> Vec<String>;

/// Field paths from the object root (`&[&["status"], &["spec"]]`): see [`StatusStrategy::reset_fields`].
pub type ResetFields = &'static [&'static [&'static str]];

/// The reset fields of a kind with a `status` subresource, as upstream's strategies have
/// them: the main resource may not set `status`, `/status` may not set `spec`.
pub fn status_reset_fields(sub: &str) -> ResetFields {
    match sub {
        "" => &[&["status"]],
        "status" => &[&["spec"]],
        _ => &[],
    }
}

/// Strategic-merge-patch list strategies by field path (`patchMergeKey` of the Go types).
pub type MergeKeys = &'static [(&'static [&'static str], ListStrategy)];

/// How a strategic merge patch treats a list field (defined with the patches).
pub use crate::machinery::patch::ListStrategy;

/// The rules for one kind: what the kind is (decoding, scope, names, patching, storage), and
/// which further capabilities it has. Every method has no I/O.
///
/// A kind implements `Strategy` and, for each capability it has, that capability's trait,
/// and says so by returning `Some(self)` from the capability's method here. Every capability
/// method answers `None` by default, and `None` means the generic request path does what
/// the capability trait's defaults do (see the module doc for the list).
pub trait Strategy: Send + Sync + 'static {
    /// Upstream's conversion into the internal form, once a body is decoded and its fields
    /// checked (a Secret's `stringData` merged into `data`): what the field manager and the
    /// rest of the write see. Nothing by default.
    fn converted(&self, _obj: &mut Value) {}

    /// Decode the object into its typed form and back: Ok(pruned) with unknown fields removed,
    /// Err if a known field has the wrong type (→ 400 BadRequest).
    /// The caller compares input and output to find unknown fields (fieldValidation).
    fn roundtrip(&self, obj: &Value) -> Result<Value, DecodeError>;

    /// See [`Role`].
    fn role(&self) -> Role {
        Role::Object
    }

    /// The rule for `metadata.name` (default: a DNS-1123 subdomain).
    fn name_rule(&self) -> NameRule {
        crate::validation::is_dns1123_subdomain
    }

    /// List merge keys for strategic merge patch, beyond the defaults of `machinery/patch/`.
    fn merge_keys(&self) -> MergeKeys {
        &[]
    }

    /// Whether `application/strategic-merge-patch+json` is accepted (built-in kinds only,
    /// as upstream: custom resources answer 415).
    fn strategic_merge_patch(&self) -> bool {
        true
    }

    /// When the kind's objects are kept in another kind's storage (events.k8s.io/v1 Events
    /// are core/v1 Events): which, and how the two forms convert. None: its own storage.
    fn stored_as(&self) -> Option<StoredAs> {
        None
    }

    /// The kind's schema as a value (custom resources, whose schema is data); None: the
    /// typed `ResourceDef::schema` is used.
    fn openapi_schema(&self) -> Option<Value> {
        None
    }

    /// Defaults and validation on create and update; None: any object that decodes is valid.
    fn write(&self) -> Option<&dyn WriteStrategy> {
        None
    }

    /// Writes through the stored object's own subresources (`status`, `approval`,
    /// `finalize`); None: the kind has none, and no field is reset on a write.
    fn status(&self) -> Option<&dyn StatusStrategy> {
        None
    }

    /// Subresources that are not plain reads and writes of the stored object (a
    /// ServiceAccount's create-only `token`, a namespace's update-only `finalize`); None:
    /// every subresource reads and writes the stored object with `get`, `patch`, `update`.
    fn subresources(&self) -> Option<&dyn SubresourceStrategy> {
        None
    }

    /// What a DELETE does to the object before it goes; None: nothing.
    fn delete(&self) -> Option<&dyn DeleteStrategy> {
        None
    }

    /// Selectable fields beyond `metadata.name` and `metadata.namespace`; None: only those.
    fn field_selectors(&self) -> Option<&dyn FieldSelectors> {
        None
    }

    /// The kind's Table columns; None: Name and `Created At`, as upstream's printer-less kinds.
    fn table(&self) -> Option<&dyn TableStrategy> {
        None
    }
}

/// Defaults and validation on create and on update of the main resource (upstream's
/// `RESTCreateStrategy` and `RESTUpdateStrategy`).
pub trait WriteStrategy {
    /// Defaults and server-owned fields on create (e.g. clear `status` when the kind has a
    /// status subresource). Metadata (uid, timestamps, generation) is done by the caller.
    fn prepare_for_create(&self, _obj: &mut Value) {}

    /// On create, after [`WriteStrategy::prepare_for_create`]: what the kind records about
    /// the requester (a CertificateSigningRequest's `spec.username`, `groups`...).
    fn prepare_for_create_by(&self, _obj: &mut Value, _requester: &crate::authn::UserInfo) {}

    /// On PUT/PATCH of the main resource: carry over what the main resource may not change
    /// (e.g. `status` from `old` when the kind has a status subresource).
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value) {}

    /// Full validation of the object (metadata name/namespace are checked by the caller).
    fn validate(&self, _obj: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Full validation of `new` when it replaces `old` (main resource or subresource): the
    /// same as [`WriteStrategy::validate`] unless a kind can skip work that `old` already
    /// passed.
    fn validate_on_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        self.validate(new)
    }

    /// Extra rules for an update of the main resource (immutability etc.).
    fn validate_update(&self, _new: &Value, _old: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Whether a spec change bumps `metadata.generation` (kinds with spec/status split).
    fn tracks_generation(&self) -> bool {
        false
    }
}

/// Writes through a subresource of the stored object (`status`, a CSR's `approval`, a
/// namespace's `finalize`), and the fields each write resets (upstream's
/// `ResetFieldsStrategy`).
pub trait StatusStrategy {
    /// On PUT/PATCH of a subresource (`status`, `approval`): keep everything but what the
    /// subresource owns from `old`.
    fn prepare_for_subresource(&self, _sub: &str, _new: &mut Value, _old: &Value) {}

    /// Extra rules for an update through a subresource.
    fn validate_subresource(&self, _sub: &str, _new: &Value, _old: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Whether a write through subresource `sub` may change labels, annotations, finalizers
    /// and owner references (upstream's `nodes/status`); by default they are kept from the
    /// stored object, as upstream's `ResetObjectMetaForStatus`.
    fn subresource_writes_metadata(&self, _sub: &str) -> bool {
        false
    }

    /// The fields a write through subresource `sub` (`""`: the main resource) does not set
    /// (the preparation hooks reset them), so that the writer never owns them in
    /// `metadata.managedFields` (upstream's `ResetFieldsStrategy.GetResetFields`).
    fn reset_fields(&self, _sub: &str) -> ResetFields {
        &[]
    }
}

/// What a kind's subresources are, when not plain `get`/`patch`/`update` of the stored
/// object: their verbs, and the kind a create-only one takes.
pub trait SubresourceStrategy {
    /// Whether `sub` is a create-only subresource: not stored, its only verb `create`, its
    /// body of the kind [`SubresourceStrategy::subresource_kind`] names, served by the API
    /// handler of that kind (`api::create_handler`; a ServiceAccount's `token`:
    /// TokenRequest). False: an ordinary subresource of the stored object (`status`,
    /// `approval`, `finalize`).
    fn create_only(&self, _sub: &str) -> bool {
        false
    }

    /// The verbs of subresource `sub`: `create` for a create-only subresource (one with a
    /// [`SubresourceStrategy::create_only`]), otherwise `get`, `patch` and `update` like
    /// `status`.
    fn subresource_verbs(&self, sub: &str) -> &'static [&'static str] {
        if self.create_only(sub) {
            &["create"]
        } else {
            DEFAULT_SUBRESOURCE_VERBS
        }
    }

    /// Group, version and kind subresource `sub` reads and writes when it is not the kind's
    /// own (a ServiceAccount's `token` takes a TokenRequest); None: the parent's.
    fn subresource_kind(&self, _sub: &str) -> Option<Gvk> {
        None
    }

    /// The schema of the kind [`SubresourceStrategy::subresource_kind`] names, for the
    /// OpenAPI documents; None when the subresource takes the parent's kind.
    fn subresource_schema(&self, _sub: &str) -> Option<SchemaFn> {
        None
    }
}

/// The verbs of a subresource that reads and writes the stored object (`status`).
pub const DEFAULT_SUBRESOURCE_VERBS: &[&str] = &["get", "patch", "update"];

/// What a DELETE does before the object goes (upstream's `RESTGracefulDeleteStrategy` and
/// the finalizers a kind adds itself).
pub trait DeleteStrategy {
    /// On the first DELETE of an object: finalizers to add and changes to make before it is
    /// marked for deletion (a CRD gets its cleanup finalizer and a Terminating condition).
    fn prepare_for_delete(&self, _obj: &mut Value, _finalizers: &mut Vec<String>) {}

    /// When an object is marked for deletion (gets its `deletionTimestamp`).
    fn mark_deleting(&self, _obj: &mut Value) {}
}

/// The fields a field selector may name besides `metadata.name` and `metadata.namespace`
/// (upstream's `GetAttrs` and field label conversion).
pub trait FieldSelectors {
    /// Value of a selectable field (e.g. `spec.signerName`, `type`). None = the field is
    /// not selectable (→ 400).
    fn field(&self, obj: &Value, path: &str) -> Option<String>;
}

/// The kind's Table (upstream's printer: `kubectl get` columns).
pub trait TableStrategy {
    /// Upstream prints some kinds (events) with Name last, at priority 1 (`-o wide` only).
    fn name_column_last(&self) -> bool {
        false
    }

    /// Table columns after Name.
    fn columns(&self) -> Vec<Column>;

    /// Put a Table's rows in the order upstream's printer shows them (default: as listed).
    fn order_table_rows(&self, _objs: &mut Vec<&Value>) {}

    /// One row's cells for the columns of `columns()` (Name excluded: the caller adds it).
    /// `now` is for ages.
    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value>;
}

/// A kind kept in another kind's storage, as upstream keeps one internal object for several
/// group versions: every read and write of the kind goes through a [`crate::storage::view::View`]
/// of that storage which converts the objects (see [`storage_of`]).
#[derive(Debug, Clone, Copy)]
pub struct StoredAs {
    /// Group, version and kind of the stored form (its storage version, as discovery's
    /// `storageVersionHash` names it).
    pub gvk: Gvk,
    /// The stored kind's resource: its objects are under `/registry/<group or core>/<resource>/`.
    pub resource: &'static str,
    /// The stored form (the other kind's wire form) → this kind's wire form.
    pub from_stored: fn(&Value) -> Value,
    /// This kind's wire form → the stored form.
    pub to_stored: fn(&Value) -> Value,
}

impl StoredAs {
    /// Storage prefix of the stored kind.
    pub fn prefix(&self) -> String {
        let g = if self.gvk.0.is_empty() { "core" } else { self.gvk.0 };
        format!("/registry/{g}/{}/", self.resource)
    }
}

impl crate::storage::view::Convert for StoredAs {
    fn read(&self, stored: &[u8]) -> crate::storage::Result<Vec<u8>> {
        let obj: Value = serde_json::from_slice(stored).map_err(crate::storage::view::conversion_error)?;
        serde_json::to_vec(&(self.from_stored)(&obj)).map_err(crate::storage::view::conversion_error)
    }
    fn write(&self, value: &[u8]) -> crate::storage::Result<Vec<u8>> {
        let obj: Value = serde_json::from_slice(value).map_err(crate::storage::view::conversion_error)?;
        serde_json::to_vec(&(self.to_stored)(&obj)).map_err(crate::storage::view::conversion_error)
    }
}

/// The storage `def`'s objects are read from and written to: `store` itself, or for a kind
/// kept in another's storage ([`Strategy::stored_as`]) a converting view of it.
pub fn storage_of(def: &ResourceDef, store: &Arc<dyn crate::storage::Storage>) -> Arc<dyn crate::storage::Storage> {
    match def.strategy.stored_as() {
        Some(stored) => {
            Arc::new(crate::storage::view::View::new(store.clone(), def.prefix(), stored.prefix(), Arc::new(stored)))
        }
        None => store.clone(),
    }
}

/// One served resource.
#[derive(Clone)]
pub struct ResourceDef {
    pub group: &'static str,
    pub version: &'static str,
    /// Plural lowercase name: `configmaps`.
    pub resource: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Subresources besides the main one: `status`, `approval`.
    pub subresources: &'static [&'static str],
    /// A create-only kind that is never stored (TokenReview, SubjectAccessReview...): the
    /// only verb is `create`, which answers with the computed object (`registry/reviews/answer/`).
    pub create_only: bool,
    pub strategy: Arc<dyn Strategy>,
    /// JSON schema of the kind: `|g| g.subschema_for::<k8s_openapi::api::core::v1::ConfigMap>()`
    /// (a `$ref`; the generator collects the definitions). Used for OpenAPI v2/v3.
    pub schema: SchemaFn,
}

/// See `ResourceDef::schema`.
pub type SchemaFn = fn(&mut schemars::SchemaGenerator) -> schemars::Schema;

impl ResourceDef {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
    /// Storage prefix of the whole resource: `/registry/<group or core>/<resource>/`.
    pub fn prefix(&self) -> String {
        let g = if self.group.is_empty() { "core" } else { self.group };
        format!("/registry/{g}/{}/", self.resource)
    }
    /// Storage prefix of one namespace (namespaced kinds) or the whole resource.
    pub fn ns_prefix(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/", self.prefix()),
            _ => self.prefix(),
        }
    }
    /// Storage key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.prefix()),
            _ => format!("{}{name}", self.prefix()),
        }
    }
}

/// The verbs of a main resource. Like upstream, namespaces have no `deletecollection`.
pub fn resource_verbs(def: &ResourceDef) -> &'static [&'static str] {
    if def.create_only {
        &["create"]
    } else if def.strategy.role() == Role::Namespace {
        &["create", "delete", "get", "list", "patch", "update", "watch"]
    } else {
        &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    }
}

/// The verbs of a subresource of `def`, as its strategy says
/// ([`SubresourceStrategy::subresource_verbs`]).
pub fn subresource_verbs(def: &ResourceDef, sub: &str) -> &'static [&'static str] {
    def.strategy.subresources().map_or(DEFAULT_SUBRESOURCE_VERBS, |s| s.subresource_verbs(sub))
}

/// Group, version and kind a subresource of `def` reads and writes: the parent's, unless its
/// strategy names another ([`SubresourceStrategy::subresource_kind`]).
pub fn subresource_kind(def: &ResourceDef, sub: &str) -> Gvk {
    def.strategy.subresources().and_then(|s| s.subresource_kind(sub)).unwrap_or((def.group, def.version, def.kind))
}

/// Whether `sub` is a create-only subresource of `def` ([`SubresourceStrategy::create_only`]).
pub fn create_only_subresource(def: &ResourceDef, sub: &str) -> bool {
    def.strategy.subresources().is_some_and(|s| s.create_only(sub))
}

/// All served resources.
#[derive(Clone)]
pub struct Registry {
    pub resources: Vec<ResourceDef>,
}

impl Registry {
    /// The built-in kinds.
    pub fn builtin() -> Self {
        let mut resources = Vec::new();
        resources.extend(core::resources());
        resources.extend(events::resources());
        resources.extend(coordination::resources());
        resources.extend(certificates::resources());
        resources.extend(clustertrustbundles::resources());
        resources.extend(podcertificaterequests::resources());
        resources.extend(rbac::resources());
        resources.extend(reviews::resources());
        resources.extend(apiextensions::resources());
        resources.extend(flowcontrol::resources());
        resources.extend(storage::resources());
        resources.extend(node::resources());
        Registry { resources }
    }

    pub fn find(&self, group: &str, version: &str, resource: &str) -> Option<&ResourceDef> {
        self.resources.iter().find(|r| r.group == group && r.version == version && r.resource == resource)
    }

    /// The kind whose objects are the namespaces (its strategy's role is [`Role::Namespace`]).
    pub fn namespace_kind(&self) -> Option<&ResourceDef> {
        self.resources.iter().find(|d| d.strategy.role() == Role::Namespace)
    }

    pub fn find_kind(&self, group: &str, kind: &str) -> Option<&ResourceDef> {
        self.resources.iter().find(|r| r.group == group && r.kind == kind)
    }

    /// Distinct groups (core first as ""), in registration order.
    pub fn groups(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for r in &self.resources {
            if !out.contains(&r.group) {
                out.push(r.group);
            }
        }
        out
    }

    /// Versions served for a group (registration order).
    pub fn versions(&self, group: &str) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for r in self.resources.iter().filter(|r| r.group == group) {
            if !out.contains(&r.version) {
                out.push(r.version);
            }
        }
        out
    }
}

/// The typed form of an object to validate. Validation fails closed: an object that does not
/// decode (which `roundtrip` normally refused with 400 already) is not valid, and the error
/// says why (→ 422).
pub fn decode<T: serde::de::DeserializeOwned>(obj: &Value) -> Result<T, Vec<FieldError>> {
    crate::work::decoded(crate::work::Format::Typed, crate::work::Site::Validation);
    T::deserialize(obj)
        .map_err(|e| vec![FieldError::invalid("", &Value::Null, format!("the object does not decode: {e}"))])
}

/// The typed forms of an update's new object and the stored one. A stored object that does
/// not decode is the server's problem: an `InternalError` cause, which the REST handlers
/// answer with 500 (see [`FieldError::internal`]).
pub fn decode_update<T: serde::de::DeserializeOwned>(new: &Value, old: &Value) -> Result<(T, T), Vec<FieldError>> {
    let new = decode(new)?;
    crate::work::decoded(crate::work::Format::Typed, crate::work::Site::Validation);
    let old = T::deserialize(old)
        .map_err(|e| vec![FieldError::internal("", format!("the stored object does not decode: {e}"))])?;
    Ok((new, old))
}

/// `let x = typed!(decode::<T>(obj))`: the decoded value, or return its field errors.
#[macro_export]
macro_rules! typed {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(errs) => return errs,
        }
    };
}

/// Why an object does not decode into its kind's typed form ([`Strategy::roundtrip`]); the
/// text follows `... cannot be handled as a <Kind>: ` in the 400.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Decode into a typed k8s-openapi object and encode back (helper for `Strategy::roundtrip`),
/// building at most [`budget::BYTES_PER_JSON_BYTE`] bytes per byte of the object's JSON.
pub fn typed_roundtrip<T>(obj: &Value) -> Result<Value, DecodeError>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    typed_roundtrip_within::<T>(obj, budget::BYTES_PER_JSON_BYTE)
}

/// [`typed_roundtrip`] with `per_byte` typed bytes allowed per byte of JSON.
pub fn typed_roundtrip_within<T>(obj: &Value, per_byte: usize) -> Result<Value, DecodeError>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    use crate::work::{decoded, encoded, Format::Typed, Site::Roundtrip};
    decoded(Typed, Roundtrip);
    let typed: T = budget::from_value(obj, budget::budget_for(budget::json_len(obj), per_byte))?;
    encoded(Typed, Roundtrip);
    Ok(serde_json::to_value(&typed)?)
}

/// Age column value like kubectl's (`5s`, `3m`, `2d`); used by strategies' cells.
pub fn age(ts: Option<&str>, now: chrono::DateTime<chrono::Utc>) -> Value {
    let Some(ts) = ts else { return Value::String("<unknown>".into()) };
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else { return Value::String("<unknown>".into()) };
    let secs = (now - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
    Value::String(human_duration(secs))
}

/// kubectl's short human duration (`HumanDuration`).
pub fn human_duration(secs: i64) -> String {
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        let s = secs % 60;
        if s == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{s}s")
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        let mm = m % 60;
        if mm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{mm}m")
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        let hh = h % 24;
        if hh == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{hh}h")
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        let y = d / 365;
        let dd = d % 365;
        if dd == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{dd}d")
        }
    } else {
        format!("{}y", d / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_that_do_not_decode_are_not_valid() {
        let good = serde_json::json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let bad = serde_json::json!({"metadata": {"name": "a"}, "data": {"k": 1}});
        type Cm = k8s_openapi::api::core::v1::ConfigMap;
        assert!(decode::<Cm>(&good).is_ok());
        let errs = decode::<Cm>(&bad).err().unwrap_or_default();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].reason, "FieldValueInvalid");
        assert!(errs[0].message.contains("does not decode"), "{}", errs[0].message);
        // A stored object that does not decode is the server's fault.
        let errs = decode_update::<Cm>(&good, &bad).err().unwrap_or_default();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].reason, crate::error::INTERNAL_ERROR);
        let errs = decode_update::<Cm>(&bad, &good).err().unwrap_or_default();
        assert_eq!(errs[0].reason, "FieldValueInvalid");
        // Every strategy with a typed validation fails closed.
        let reg = Registry::builtin();
        for def in &reg.resources {
            if def.create_only {
                continue;
            }
            let garbage = serde_json::json!({"metadata": {"name": "a"}, "spec": 7, "data": 7, "rules": 7, "subjects": 7, "roleRef": 7});
            // Either the strategy has no typed rules (nothing to decode) or it refuses.
            let errs = def.strategy.write().map(|w| w.validate(&garbage)).unwrap_or_default();
            let typed = [
                "configmaps",
                "secrets",
                "roles",
                "clusterroles",
                "rolebindings",
                "clusterrolebindings",
                "certificatesigningrequests",
                "flowschemas",
                "prioritylevelconfigurations",
                "pods",
                "services",
                "csinodes",
                "csidrivers",
                "runtimeclasses",
            ];
            if typed.contains(&def.resource) {
                assert!(!errs.is_empty(), "{} accepted an object that does not decode", def.resource);
            }
        }
    }
}
