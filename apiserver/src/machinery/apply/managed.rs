//! `metadata.managedFields`: reading and writing its entries, and the ownership rules of
//! Apply and Update operations (structured-merge-diff's `Updater`, kube-apiserver's field
//! manager), without I/O.
//!
//! What enters: the live object, the applied configuration or the updated object, the
//! [`Schema`], and who writes ([`Writer`]). What leaves: the new object with its new
//! `managedFields`, or [`ApplyError::Conflicts`] (a 409 with `FieldManagerConflict`
//! causes) or [`ApplyError::BadRequest`].
//!
//! The entries an Update starts from are read as upstream's `decodeLiveOrNew` reads them,
//! before any ownership is computed: the written object's own entries when they all decode
//! (operation `Apply` or `Update`, an `apiVersion`, `fieldsType: FieldsV1`, a readable
//! `fieldsV1`; entries naming the same manager collapse to the last), else the live
//! object's; `[]` or `[{}]` resets them. Names and lengths are metadata validation's, after
//! (upstream's `ValidateManagedFields`). All work is linear in the entries and the objects
//! (see [`super::fieldset`]); a conflict report lists at most [`MAX_CONFLICT_REPORT`] bytes
//! of fields and counts the rest.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

use serde_json::{json, Map, Value};

use super::fieldset::{FieldSet, FieldsV1Error, Path};
use super::last_applied;
use super::schema::Schema;
use super::typed::{compare, merge, remove_unowned, to_field_set, TypedError};

/// `operation` of a managedFields entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Manager, operation, subresource, and API version (Update entries only).
type Identity<'a> = (&'a str, Operation, &'a str, &'a str);

/// One `managedFields` entry, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    /// RFC 3339, seconds (`2019-03-30T16:00:00Z`); kept as written.
    pub time: Option<String>,
    pub subresource: String,
    pub fields: FieldSet,
}

impl ManagedEntry {
    /// Who this entry belongs to, as upstream tells managers apart: manager, operation and
    /// subresource, plus the API version for Update entries (an applier keeps one entry
    /// whatever version it applies with).
    fn identity(&self) -> Identity<'_> {
        let version = match self.operation {
            Operation::Apply => "",
            Operation::Update => &self.api_version,
        };
        (&self.manager, self.operation, &self.subresource, version)
    }

    /// How conflict messages name this manager (`"kubectl"`, `"kube-controller-manager"
    /// using apps/v1`, `"x" with subresource "status"`).
    pub fn display(&self) -> String {
        let mut s = Value::String(self.manager.clone()).to_string();
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {}", Value::String(self.subresource.clone())));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        // Go's `omitempty`: a request with neither fieldManager nor User-Agent has no manager.
        if !self.manager.is_empty() {
            m.insert("manager".into(), json!(self.manager));
        }
        m.insert("operation".into(), json!(self.operation.as_str()));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(m)
    }

    pub fn from_value(v: &Value) -> Result<ManagedEntry, ManagedFieldsError> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = match s("operation").as_str() {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            other => return Err(ManagedFieldsError::InvalidOperation(other.to_string())),
        };
        if s("apiVersion").is_empty() {
            return Err(ManagedFieldsError::EmptyApiVersion);
        }
        match s("fieldsType").as_str() {
            "FieldsV1" => {}
            "" => return Err(ManagedFieldsError::MissingFieldsType),
            other => return Err(ManagedFieldsError::InvalidFieldsType(other.to_string())),
        }
        let fields = match v.get("fieldsV1") {
            Some(f) => FieldSet::from_fields_v1(f)?,
            None => FieldSet::new(),
        };
        Ok(ManagedEntry {
            manager: s("manager"),
            operation,
            api_version: s("apiVersion"),
            time: v.get("time").and_then(Value::as_str).map(str::to_string),
            subresource: s("subresource"),
            fields,
        })
    }
}

/// Why `metadata.managedFields` (or one of its entries) cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ManagedFieldsError {
    #[error("invalid operation {0:?}, must be Apply or Update")]
    InvalidOperation(String),
    #[error("apiVersion must not be empty")]
    EmptyApiVersion,
    #[error("missing fieldsType")]
    MissingFieldsType,
    #[error("invalid fieldsType {0:?}, must be FieldsV1")]
    InvalidFieldsType(String),
    #[error(transparent)]
    FieldsV1(#[from] FieldsV1Error),
    /// Entry `.0` of the list.
    #[error("metadata.managedFields[{0}]: {1}")]
    Entry(usize, Box<ManagedFieldsError>),
    #[error("metadata.managedFields: must be a list")]
    NotAList,
}

/// The entries of `obj`'s `metadata.managedFields` (none when absent or null), as
/// upstream's `DecodeManagedFields`: any entry that does not decode fails them all, and
/// entries of the same manager (see [`ManagedEntry::identity`]) collapse into the last one.
pub fn decode_managed_fields(obj: &Value) -> Result<Vec<ManagedEntry>, ManagedFieldsError> {
    decode_entries(obj.pointer("/metadata/managedFields"))
}

/// [`decode_managed_fields`] of the `managedFields` value itself.
fn decode_entries(managed_fields: Option<&Value>) -> Result<Vec<ManagedEntry>, ManagedFieldsError> {
    let list = match managed_fields {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ManagedFieldsError::NotAList),
    };
    let mut out: Vec<ManagedEntry> = Vec::with_capacity(list.len());
    let mut at: BTreeMap<(String, Operation, String, String), usize> = BTreeMap::new();
    for (i, e) in list.iter().enumerate() {
        let entry = ManagedEntry::from_value(e).map_err(|err| ManagedFieldsError::Entry(i, Box::new(err)))?;
        let (manager, op, subresource, version) = entry.identity();
        let id = (manager.to_string(), op, subresource.to_string(), version.to_string());
        match at.get(&id) {
            Some(&j) => out[j] = entry,
            None => {
                at.insert(id, out.len());
                out.push(entry);
            }
        }
    }
    Ok(out)
}

/// Upstream's order: Apply before Update, then by time, manager, apiVersion, subresource.
pub fn sort_entries(entries: &mut [ManagedEntry]) {
    entries.sort_by(|p, q| {
        p.operation
            .cmp(&q.operation)
            .then_with(|| p.time.as_deref().unwrap_or("").cmp(q.time.as_deref().unwrap_or("")))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.cmp(&q.subresource))
    });
}

/// Sets `obj`'s `metadata.managedFields` (removed when there are no entries).
pub fn encode_managed_fields(obj: &mut Value, entries: &[ManagedEntry]) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(entries.iter().map(ManagedEntry::to_value).collect()));
    }
}

/// Fields no manager owns: the type and identity of the object and what the server keeps
/// in its metadata (upstream's `StripMetaManager`). Built once: every write reads it.
fn stripped() -> &'static FieldSet {
    static STRIPPED: std::sync::LazyLock<FieldSet> = std::sync::LazyLock::new(stripped_fields);
    &STRIPPED
}

fn stripped_fields() -> FieldSet {
    let mut s = FieldSet::new();
    for p in [
        &["apiVersion"][..],
        &["kind"],
        &["metadata"],
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["metadata", "creationTimestamp"],
        &["metadata", "selfLink"],
        &["metadata", "uid"],
        &["metadata", "clusterName"],
        &["metadata", "generation"],
        &["metadata", "managedFields"],
        &["metadata", "resourceVersion"],
    ] {
        s.insert(&Path::fields(p));
    }
    s
}

/// Who writes.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    /// `fieldManager` (or the default derived from the user agent for non-apply writes).
    pub manager: &'a str,
    /// `apiVersion` of the request (`v1`, `apps/v1`).
    pub api_version: &'a str,
    /// `""` for the main resource, else the subresource (`status`, `scale`).
    pub subresource: &'a str,
    /// Now, RFC 3339 with seconds (`2026-01-02T03:04:05Z`).
    pub time: &'a str,
    /// Fields this write may not own: what the strategy resets (e.g. `status` on the main
    /// resource, everything but `status` on `/status`).
    pub reset_fields: &'a FieldSet,
}

/// One conflicting field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The owner, as messages name it (see [`ManagedEntry::display`]).
    pub manager: String,
    pub path: Path,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// 409 Conflict with `FieldManagerConflict` causes (see [`conflict_report`]): the
    /// conflicts listed, and how many more there are.
    #[error("{}", conflict_report(.0, *.1))]
    Conflicts(Vec<Conflict>, usize),
    /// 400: the configuration or the managedFields cannot be read with the schema.
    #[error("{0}")]
    BadRequest(String),
}

impl From<TypedError> for ApplyError {
    fn from(e: TypedError) -> Self {
        ApplyError::BadRequest(e.to_string())
    }
}

impl From<ManagedFieldsError> for ApplyError {
    fn from(e: ManagedFieldsError) -> Self {
        ApplyError::BadRequest(e.to_string())
    }
}

/// Upstream's message: `Apply failed with 1 conflict: conflict with "m" using v1: .data.key`,
/// or for several, one line per manager (sorted) and `- <path>` per field.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    conflict_report(conflicts, 0)
}

/// [`conflict_message`] of the conflicts `listed` when `unlisted` more were left out: the
/// count is all of them, and a last line says how many are not shown.
pub fn conflict_report(listed: &[Conflict], unlisted: usize) -> String {
    if let ([c], 0) = (listed, unlisted) {
        return format!("Apply failed with 1 conflict: conflict with {}: {}", c.manager, c.path);
    }
    let mut by_manager: BTreeMap<&str, Vec<&Path>> = BTreeMap::new();
    for c in listed {
        by_manager.entry(&c.manager).or_default().push(&c.path);
    }
    let mut lines = Vec::new();
    for (manager, paths) in by_manager {
        lines.push(format!("conflicts with {manager}:"));
        lines.extend(paths.iter().map(|p| format!("- {p}")));
    }
    if unlisted > 0 {
        lines.push(format!("... and {unlisted} more"));
    }
    format!("Apply failed with {} conflicts: {}", listed.len() + unlisted, lines.join("\n"))
}

/// Most bytes of conflicting fields (their paths and managers as printed) a conflict report
/// lists; upstream lists all, which for many fields under a long key grows with the square
/// of the object.
pub const MAX_CONFLICT_REPORT: usize = 256 * 1024;

/// The fields of other managers' entries in `changed`, ordered by manager as printed and
/// then by path; those past [`MAX_CONFLICT_REPORT`] bytes (the first excepted) are counted.
fn find_conflicts(entries: &[ManagedEntry], writer_id: &Identity<'_>, changed: &FieldSet) -> (Vec<Conflict>, usize) {
    let mut found: Vec<(String, FieldSet)> = entries
        .iter()
        .filter(|e| e.identity() != *writer_id)
        .map(|e| (e.display(), e.fields.intersection(changed)))
        .filter(|(_, set)| !set.is_empty())
        .collect();
    found.sort_by(|p, q| p.0.cmp(&q.0));
    let total: usize = found.iter().map(|(_, set)| set.len()).sum();
    let mut listed = Vec::new();
    let mut bytes = 0usize;
    for (manager, set) in &found {
        let flow = set.for_each_path(&mut |p| {
            let path = Path(p.iter().map(|pe| (*pe).clone()).collect());
            let size = manager.len() + path.to_string().len();
            if !listed.is_empty() && bytes.saturating_add(size) > MAX_CONFLICT_REPORT {
                return ControlFlow::Break(());
            }
            bytes = bytes.saturating_add(size);
            listed.push(Conflict { manager: manager.clone(), path });
            ControlFlow::Continue(())
        });
        if flow.is_break() {
            break;
        }
    }
    let unlisted = total - listed.len();
    (listed, unlisted)
}

/// The 409 `Status` body of a conflicting apply.
pub fn conflict_status(conflicts: &[Conflict]) -> Value {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {}", c.manager),
                "field": c.path.to_string(),
            })
        })
        .collect();
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": conflict_message(conflicts),
        "reason": "Conflict",
        "details": {"causes": causes},
        "code": 409,
    })
}

/// The result of a write: the object to store (with its `managedFields`), and whether it
/// differs from the live object in anything but `managedFields`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub object: Value,
    pub changed: bool,
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    take_managed_fields(&mut o);
    o
}

/// Takes `metadata.managedFields` out of `obj`, as it was (None when there was none).
fn take_managed_fields(obj: &mut Value) -> Option<Value> {
    obj.get_mut("metadata").and_then(Value::as_object_mut).and_then(|meta| meta.remove("managedFields"))
}

/// Whether a write may take fields other managers own.
#[derive(Debug, Clone, Copy)]
enum Force<'a> {
    /// Every changed field another manager owns is a conflict.
    No,
    /// Changed fields move to the writer (`force=true`, and every Update).
    Yes,
    /// As `No` but for these fields; when only they conflict, as `Yes`.
    Except(&'a FieldSet),
}

/// Ownership after `old` became `new`, for every manager but `writer_id`: fields another
/// manager owns that changed are conflicts (see [`Force`]), and move to the writer when
/// there are none; fields removed leave their owners.
fn update_owners(
    schema: &Schema,
    old: &Value,
    new: &Value,
    entries: &mut [ManagedEntry],
    writer_id: &Identity<'_>,
    force: Force<'_>,
    reset: &FieldSet,
) -> Result<super::typed::Comparison, ApplyError> {
    let mut cmp = compare(schema, old, new)?;
    cmp.added = cmp.added.recursive_difference(reset);
    cmp.modified = cmp.modified.recursive_difference(reset);
    cmp.removed = cmp.removed.recursive_difference(reset);
    let changed = cmp.modified.union(&cmp.added);
    let contested = match force {
        Force::Yes => None,
        Force::No => Some(Cow::Borrowed(&changed)),
        Force::Except(allowed) => Some(Cow::Owned(changed.difference(allowed))),
    };
    if let Some(contested) = contested {
        let (listed, unlisted) = find_conflicts(entries, writer_id, &contested);
        if !listed.is_empty() {
            return Err(ApplyError::Conflicts(listed, unlisted));
        }
    }
    for e in entries.iter_mut() {
        if e.identity() == *writer_id {
            continue;
        }
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    Ok(cmp)
}

/// Strips the server's fields from every entry, drops empty entries, stamps the writer's
/// entry with `time` when `touch` (Apply: the object changed; Update: the write took
/// fields), and sorts.
fn finish(entries: Vec<ManagedEntry>, writer_id: &Identity<'_>, touch: bool, time: &str) -> Vec<ManagedEntry> {
    let strip = stripped();
    let mut out: Vec<ManagedEntry> = entries
        .into_iter()
        .map(|mut e| {
            e.fields = e.fields.difference(strip);
            if touch && e.identity() == *writer_id {
                e.time = Some(time.to_string());
            }
            e
        })
        .filter(|e| !e.fields.is_empty())
        .collect();
    sort_entries(&mut out);
    out
}

/// Server-side apply of `config` (the decoded apply body) to `live` (`None`: the object
/// does not exist and apply creates it). For the manager `kubectl`, conflicts on fields the
/// live object still has as client-side apply last applied them are no conflicts, and the
/// last-applied annotation follows the configuration (see [`super::last_applied`]).
pub fn apply(
    schema: &Schema,
    live: Option<&Value>,
    config: &Value,
    writer: &Writer,
    force: bool,
) -> Result<Outcome, ApplyError> {
    let kubectl = writer.manager == last_applied::KUBECTL_MANAGER;
    let mut outcome = match apply_fields(schema, live, config, writer, if force { Force::Yes } else { Force::No }) {
        Err(conflicts @ ApplyError::Conflicts(..)) if kubectl => {
            match live.and_then(|l| last_applied::takeover_fields(schema, l, writer.api_version)) {
                Some(takeover) => apply_fields(schema, live, config, writer, Force::Except(&takeover))?,
                None => return Err(conflicts),
            }
        }
        other => other?,
    };
    if kubectl && last_applied::sync_annotation(&mut outcome.object, config) {
        outcome.changed = true;
    }
    Ok(outcome)
}

/// [`apply`] without the last-applied rules.
fn apply_fields(
    schema: &Schema,
    live: Option<&Value>,
    config: &Value,
    writer: &Writer,
    force: Force<'_>,
) -> Result<Outcome, ApplyError> {
    if !config.is_object() {
        return Err(ApplyError::BadRequest("apply configuration must be an object".into()));
    }
    if !matches!(config.pointer("/metadata/managedFields"), None | Some(Value::Null)) {
        return Err(ApplyError::BadRequest("metadata.managedFields must be nil".into()));
    }
    let version = config.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if version != writer.api_version {
        return Err(ApplyError::BadRequest(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, expected: {}",
            writer.api_version
        )));
    }
    let empty = super::typed::empty_object();
    let live_obj = live.map(without_managed_fields).unwrap_or(empty);
    let mut previous = match live {
        Some(l) => decode_managed_fields(l)?,
        None => Vec::new(),
    };
    // Upstream's skipNonAppliedManager: what an existing object holds that no manager owns
    // is first owned by an Update of `before-first-apply` (so applying over it conflicts).
    if previous.is_empty() && live.is_some() {
        let before = Writer { manager: BEFORE_FIRST_APPLY, ..writer.clone() };
        previous =
            updated_entries(schema, &super::typed::empty_object(), &live_obj, Vec::new(), &before).unwrap_or_default();
    }
    // `managedFields` is absent or null here: a copy without it only in the second case.
    let config = match config.pointer("/metadata/managedFields") {
        Some(_) => std::borrow::Cow::Owned(without_managed_fields(config)),
        None => std::borrow::Cow::Borrowed(config),
    };

    let applied = to_field_set(schema, &config)?.recursive_difference(writer.reset_fields);
    let mut merged = merge(schema, &live_obj, &config)?;

    let my_id: Identity<'_> = (writer.manager, Operation::Apply, writer.subresource, "");
    let mut entries: Vec<ManagedEntry> = Vec::with_capacity(previous.len() + 1);
    let mut last = None;
    let mut my_time = None;
    for e in previous {
        if e.identity() == my_id {
            my_time = e.time;
            last = Some(e.fields);
        } else {
            entries.push(e);
        }
    }
    entries.push(ManagedEntry {
        manager: writer.manager.to_string(),
        operation: Operation::Apply,
        api_version: writer.api_version.to_string(),
        time: my_time,
        subresource: writer.subresource.to_string(),
        fields: applied,
    });

    // Fields applied before and no longer: removed unless someone (the applier included)
    // still owns them or something below them.
    if let Some(last) = last.filter(|l| !l.is_empty()) {
        // The server's own fields (`metadata` and its identity) are never the applier's to drop.
        let mut owned = stripped().clone();
        for e in &entries {
            owned.union_with(&e.fields);
        }
        remove_unowned(schema, &mut merged, &last, &owned);
    }

    update_owners(schema, &live_obj, &merged, &mut entries, &my_id, force, writer.reset_fields)?;
    let changed = live.is_none() || merged != live_obj;
    let entries = finish(entries, &my_id, changed, writer.time);
    let mut object = merged;
    encode_managed_fields(&mut object, &entries);
    Ok(Outcome { object, changed })
}

/// The manager that owns what an object held before its first apply.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Upstream's `isResetManagedFields`: `[]`, or a single entry with nothing set (`[{}]`).
fn is_reset(managed_fields: Option<&Value>) -> bool {
    let zero = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        _ => false,
    };
    match managed_fields {
        Some(Value::Array(list)) => match list.as_slice() {
            [] => true,
            [only] => only.as_object().is_some_and(|m| m.values().all(zero)),
            _ => false,
        },
        _ => false,
    }
}

/// The entries an Update starts from, as upstream's `decodeLiveOrNew` picks them: a
/// subresource write takes the live object's; `[]` or `[{}]` resets them; otherwise the
/// written object's own entries when there are any and they all decode (a client may edit
/// them, as kubectl does when it moves an object from client-side to server-side apply),
/// else the live object's (none when those do not decode either).
fn update_base(live: Option<&Value>, written: Option<&Value>, subresource: &str) -> Vec<ManagedEntry> {
    let from_live = || live.and_then(|l| decode_managed_fields(l).ok()).unwrap_or_default();
    if !subresource.is_empty() {
        return from_live();
    }
    if is_reset(written) {
        return Vec::new();
    }
    match decode_entries(written) {
        Ok(entries) if !entries.is_empty() => entries,
        _ => from_live(),
    }
}

/// Ownership after an Update (create, PUT, or a JSON/merge/strategic patch): what the
/// write added or changed moves to the writer; nothing conflicts. `new` is the object the
/// write produced, taken by value (its `managedFields` are taken out, not copied). An Update
/// never fails: when the objects cannot be read with the schema the result carries no
/// `managedFields` at all, as upstream's field manager does then. An existing object that
/// starts from no entries keeps none (upstream's `skipNonAppliedManager`: ownership is
/// tracked from creation or from the first apply).
pub fn update(schema: &Schema, live: Option<&Value>, new: Value, writer: &Writer) -> Outcome {
    let live_obj = live.map(without_managed_fields).unwrap_or_else(super::typed::empty_object);
    let mut object = new;
    let written = take_managed_fields(&mut object);
    let changed = live.is_none() || object != live_obj;
    let previous = update_base(live, written.as_ref(), writer.subresource);
    if previous.is_empty() && live.is_some() {
        return Outcome { object, changed };
    }
    if let Some(entries) = updated_entries(schema, &live_obj, &object, previous, writer) {
        encode_managed_fields(&mut object, &entries);
    }
    Outcome { object, changed }
}

/// The entries after `writer`'s Update of `live_obj` into `new_obj` (neither carrying
/// `managedFields`), from `entries`; None when the objects cannot be read with the schema.
fn updated_entries(
    schema: &Schema,
    live_obj: &Value,
    new_obj: &Value,
    mut entries: Vec<ManagedEntry>,
    writer: &Writer,
) -> Option<Vec<ManagedEntry>> {
    let my_id: Identity<'_> = (writer.manager, Operation::Update, writer.subresource, writer.api_version);
    let cmp = update_owners(schema, live_obj, new_obj, &mut entries, &my_id, Force::Yes, writer.reset_fields).ok()?;
    let gained = cmp.modified.union(&cmp.added);
    let touch = !gained.difference(stripped()).is_empty();
    match entries.iter_mut().find(|e| e.identity() == my_id) {
        Some(e) => {
            let mut fields = e.fields.difference(&cmp.removed);
            fields.union_with(&gained);
            e.fields = fields;
        }
        None => entries.push(ManagedEntry {
            manager: writer.manager.to_string(),
            operation: Operation::Update,
            api_version: writer.api_version.to_string(),
            time: None,
            subresource: writer.subresource.to_string(),
            fields: gained,
        }),
    }
    let mut entries = finish(entries, &my_id, touch, writer.time);
    cap_update_managers(&mut entries);
    Some(entries)
}

/// Most Update entries an object keeps (upstream's `maxUpdateManagers`).
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager the oldest Update entries are merged into beyond [`MAX_UPDATE_MANAGERS`].
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// Keeps at most [`MAX_UPDATE_MANAGERS`] Update entries, as upstream's `capManagersManager`:
/// oldest first, an entry whose API version was already seen among the older ones is merged
/// into that version's `ancient-changes` bucket (the first such entry becoming the bucket),
/// which takes the newer entry's time.
fn cap_update_managers(entries: &mut Vec<ManagedEntry>) {
    let mut updaters: Vec<usize> = (0..entries.len()).filter(|i| entries[*i].operation == Operation::Update).collect();
    let mut length = updaters.len();
    if length <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|a, b| {
        let (p, q) = (&entries[*a], &entries[*b]);
        p.time
            .as_deref()
            .unwrap_or("")
            .cmp(q.time.as_deref().unwrap_or(""))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.cmp(&q.subresource))
    });
    let mut removed = vec![false; entries.len()];
    // Per API version: the entry standing for its bucket.
    let mut bucket_of: BTreeMap<String, usize> = BTreeMap::new();
    for i in updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[i].api_version.clone();
        match bucket_of.get(&version) {
            Some(&b) => {
                let (fields, time) = (std::mem::take(&mut entries[i].fields), entries[i].time.take());
                let bucket = &mut entries[b];
                bucket.manager = ANCIENT_CHANGES.to_string();
                bucket.subresource = String::new();
                bucket.fields.union_with(&fields);
                bucket.time = time;
                removed[i] = true;
                length -= 1;
            }
            None => {
                bucket_of.insert(version, i);
            }
        }
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        !removed[i - 1]
    });
    sort_entries(entries);
}
