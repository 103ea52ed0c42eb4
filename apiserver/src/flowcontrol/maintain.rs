//! The APF config-producer: keeps the mandatory and suggested configuration objects
//! (`super::bootstrap`) in the store, as kube-apiserver's
//! `apiserver/bootstrap-system-flowcontrol-configuration` post-start hook does, and keeps
//! every FlowSchema's `Dangling` condition current (upstream's APF config controller).
//!
//! One pass, in upstream's order: suggested priority levels, suggested FlowSchemas,
//! mandatory FlowSchemas, mandatory priority levels, then removal of unwanted objects,
//! then the `Dangling` conditions. Per object the decision is [`decide`]:
//!
//! - a missing mandatory or suggested object is created (a deleted one comes back);
//! - mandatory: the server owns the spec; it is put back and the annotation set `"true"`;
//! - suggested: `apf.kubernetes.io/autoupdate-spec` says who owns the spec (`"true"` the
//!   server, `"false"` the users; it is read like Go's `strconv.ParseBool`); without a
//!   readable value, `metadata.generation == 1` means the server, anything else the users.
//!   The server writes the annotation to record the decision;
//! - an object that is neither, annotated `"true"`, is deleted.
//!
//! Specs are compared after defaulting, as `equality.Semantic` would; for the `exempt`
//! priority level its `spec.exempt` section is the users' to set.
//!
//! [`spawn`] runs a pass every period (upstream: one minute) and about a second after any
//! change to FlowSchemas or priority levels, so a deleted default object comes back and a
//! FlowSchema's `Dangling` condition follows its priority level promptly. Writes go through
//! the REST handlers (`registry::loopback`) as `system:apiserver`, with resourceVersion preconditions.

use std::sync::Weak;
use std::time::Duration;

use serde_json::{json, Value};

use super::bootstrap::{self, AUTO_UPDATE_ANNOTATION};
use crate::error::ApiError;
use crate::registry::flowcontrol::{default_flow_schema, default_priority_level, semantic_form, GROUP};
use crate::registry::loopback::{Loopback, Write};
use crate::registry::ResourceDef;

/// How often a pass runs without any change (upstream: every minute).
pub const PERIOD: Duration = Duration::from_secs(60);
/// How long after a change the pass runs (further changes in the meantime join it).
const DEBOUNCE: Duration = Duration::from_secs(1);
/// How often one object is retried when it changes under us during a pass.
const ATTEMPTS: usize = 3;
/// The condition a FlowSchema carries about its priority level reference.
pub const CONDITION_DANGLING: &str = "Dangling";

/// The two kinds of configuration object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    FlowSchema,
    PriorityLevel,
}

impl ConfigKind {
    pub(super) fn resource(self) -> &'static str {
        match self {
            ConfigKind::FlowSchema => "flowschemas",
            ConfigKind::PriorityLevel => "prioritylevelconfigurations",
        }
    }
}

/// A mandatory or suggested object: its kind and wire form (not defaulted).
#[derive(Debug, Clone, PartialEq)]
pub struct DefaultObj {
    pub kind: ConfigKind,
    pub object: Value,
}

impl DefaultObj {
    fn name(&self) -> &str {
        self.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
    }
}

/// What one object needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create this object.
    Create(Value),
    /// Replace the stored object with this one (it carries the stored resourceVersion).
    Update(Value),
    /// Delete the stored object.
    Delete,
    Nothing,
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn auto_update_annotation(obj: &Value) -> Option<&str> {
    obj.get("metadata")?.get("annotations")?.get(AUTO_UPDATE_ANNOTATION)?.as_str()
}

/// Whether the server owns a suggested object's spec.
fn server_owns_spec(existing: &Value) -> bool {
    match auto_update_annotation(existing).and_then(parse_bool) {
        Some(owned) => owned,
        None => existing.pointer("/metadata/generation").and_then(Value::as_i64) == Some(1),
    }
}

/// Whether `actual`'s spec is what `expected`'s becomes once defaulted.
fn spec_equalish(expected: &DefaultObj, actual: &Value) -> bool {
    let mut want = expected.object.clone();
    match expected.kind {
        ConfigKind::FlowSchema => default_flow_schema(&mut want),
        ConfigKind::PriorityLevel => {
            default_priority_level(&mut want);
            if expected.name() == bootstrap::EXEMPT {
                let Some(have) = actual.pointer("/spec/exempt").filter(|e| e.is_object()) else { return false };
                if let Some(e) = want.pointer_mut("/spec/exempt").and_then(Value::as_object_mut) {
                    for key in ["nominalConcurrencyShares", "lendablePercent"] {
                        match have.get(key) {
                            Some(v) => e.insert(key.into(), v.clone()),
                            None => e.remove(key),
                        };
                    }
                }
            }
        }
    }
    let have = actual.get("spec").cloned().unwrap_or(Value::Null);
    semantic_form(want.get("spec").unwrap_or(&Value::Null)) == semantic_form(&have)
}

/// The decision for one object: `default` is the mandatory or suggested object of that
/// name (None: the name is not one of them), `existing` the stored object.
pub fn decide(default: Option<&DefaultObj>, existing: Option<&Value>, mandatory: bool) -> Action {
    let (default, existing) = match (default, existing) {
        (None, None) => return Action::Nothing,
        (Some(d), None) => return Action::Create(d.object.clone()),
        (None, Some(e)) => {
            let owned = auto_update_annotation(e).and_then(parse_bool) == Some(true);
            return if owned { Action::Delete } else { Action::Nothing };
        }
        (Some(d), Some(e)) => (d, e),
    };
    let server_owns = mandatory || server_owns_spec(existing);
    let annotation_current = auto_update_annotation(existing).and_then(parse_bool) == Some(server_owns);
    let spec_stale = server_owns && !spec_equalish(default, existing);
    if annotation_current && !spec_stale {
        return Action::Nothing;
    }
    let mut revised = existing.clone();
    if spec_stale {
        revised["spec"] = default.object.get("spec").cloned().unwrap_or(Value::Null);
    }
    if !annotation_current {
        if let Some(meta) = revised.get_mut("metadata").and_then(Value::as_object_mut) {
            let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
            if !annotations.is_object() {
                *annotations = json!({});
            }
            annotations[AUTO_UPDATE_ANNOTATION] = json!(server_owns.to_string());
        }
    }
    Action::Update(revised)
}

/// The status a FlowSchema should get so that its `Dangling` condition says whether its
/// priority level exists, or None when the condition already says so. Other conditions
/// are kept; `now` becomes the condition's `lastTransitionTime`.
pub fn dangling_status(flow_schema: &Value, level_exists: bool, now: &str) -> Option<Value> {
    let level = flow_schema.pointer("/spec/priorityLevelConfiguration/name").and_then(Value::as_str).unwrap_or("");
    let (status, reason, message) = if level_exists {
        (
            "False",
            "Found",
            format!("This FlowSchema references the PriorityLevelConfiguration object named {level:?} and it exists"),
        )
    } else {
        (
            "True",
            "NotFound",
            format!(
                "This FlowSchema references the PriorityLevelConfiguration object named {level:?} but there is no such object"
            ),
        )
    };
    let conditions: Vec<Value> =
        flow_schema.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let is_dangling = |c: &Value| c.get("type").and_then(Value::as_str) == Some(CONDITION_DANGLING);
    if let Some(c) = conditions.iter().find(|c| is_dangling(c)) {
        let field = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
        if field("status") == status && field("reason") == reason && field("message") == message {
            return None;
        }
    }
    let wanted = json!({"type": CONDITION_DANGLING, "status": status, "lastTransitionTime": now,
                        "reason": reason, "message": message});
    let mut out: Vec<Value> = conditions.into_iter().filter(|c| !is_dangling(c)).collect();
    out.push(wanted);
    let mut status_obj = flow_schema.get("status").filter(|s| s.is_object()).cloned().unwrap_or_else(|| json!({}));
    status_obj["conditions"] = Value::Array(out);
    Some(status_obj)
}

// ---------------------------------------------------------------------------------------
// I/O
// ---------------------------------------------------------------------------------------

fn to_defaults<T: serde::Serialize>(kind: ConfigKind, objs: Vec<T>) -> anyhow::Result<Vec<DefaultObj>> {
    objs.into_iter().map(|o| Ok(DefaultObj { kind, object: serde_json::to_value(o)? })).collect()
}

fn find_def(state: &dyn Loopback, kind: ConfigKind) -> anyhow::Result<&ResourceDef> {
    state.find(GROUP, "v1", kind.resource())
}

/// One write through the REST handlers, as the apiserver itself.
async fn write(
    state: &dyn Loopback,
    def: &ResourceDef,
    verb: Write,
    name: &str,
    subresource: &str,
    body: &Value,
) -> Result<(), ApiError> {
    state.write_as_apiserver(def, verb, "", name, subresource, body).await
}

async fn read(state: &dyn Loopback, def: &ResourceDef, name: &str) -> anyhow::Result<Option<Value>> {
    match state.storage().get(&def.key(None, name)).await? {
        Some(kv) => Ok(Some(crate::meta::from_stored(&kv)?)),
        None => Ok(None),
    }
}

async fn list(state: &dyn Loopback, def: &ResourceDef) -> anyhow::Result<Vec<Value>> {
    let page = state.storage().list(&def.prefix(), Default::default()).await?;
    page.items.iter().map(|kv| crate::meta::from_stored(kv).map_err(anyhow::Error::from)).collect()
}

/// Create or bring up to date one mandatory or suggested object.
async fn ensure_one(
    state: &dyn Loopback,
    def: &ResourceDef,
    default: &DefaultObj,
    mandatory: bool,
) -> anyhow::Result<()> {
    let name = default.name();
    let what = format!("{}.{}/{name}", def.singular, def.group);
    for _ in 0..ATTEMPTS {
        let existing = read(state, def, name).await?;
        let outcome = match decide(Some(default), existing.as_ref(), mandatory) {
            Action::Nothing | Action::Delete => return Ok(()),
            Action::Create(body) => write(state, def, Write::Create, name, "", &body).await.map(|()| "created"),
            Action::Update(body) => write(state, def, Write::Update, name, "", &body).await.map(|()| "updated"),
        };
        match outcome {
            Ok("created") => {
                tracing::debug!(object = %what, mandatory, "created APF configuration object");
                return Ok(());
            }
            Ok(done) => {
                tracing::info!(object = %what, mandatory, "{done} APF configuration object");
                return Ok(());
            }
            Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } | ApiError::NotFound { .. }) => continue,
            Err(e) => anyhow::bail!("{what}: {e}"),
        }
    }
    anyhow::bail!("{what}: kept changing during the pass; will retry")
}

/// Delete the objects that are neither mandatory nor suggested but claim the server owns them.
async fn remove_unwanted(state: &dyn Loopback, def: &ResourceDef, wanted: &[DefaultObj]) -> anyhow::Result<()> {
    for obj in list(state, def).await? {
        let name = crate::meta::name(&obj).to_string();
        if wanted.iter().any(|w| w.name() == name) || decide(None, Some(&obj), false) != Action::Delete {
            continue;
        }
        let pre = json!({"apiVersion": "v1", "kind": "DeleteOptions",
                         "preconditions": {"uid": crate::meta::uid(&obj), "resourceVersion": crate::meta::rv(&obj)}});
        match write(state, def, Write::Delete, &name, "", &pre).await {
            Ok(()) => {
                tracing::info!(object = %format!("{}.{}/{name}", def.singular, def.group), "deleted unwanted APF configuration object")
            }
            // Deleted or changed meanwhile: the next pass looks again.
            Err(ApiError::NotFound { .. } | ApiError::Conflict { .. }) => {}
            Err(e) => anyhow::bail!("deleting {}/{name}: {e}", def.resource),
        }
    }
    Ok(())
}

/// Bring every FlowSchema's `Dangling` condition up to date.
async fn sync_dangling(state: &dyn Loopback, fs_def: &ResourceDef, pl_def: &ResourceDef) -> anyhow::Result<()> {
    let levels: Vec<String> = list(state, pl_def).await?.iter().map(|p| crate::meta::name(p).to_string()).collect();
    let now = crate::meta::now_rfc3339();
    for fs in list(state, fs_def).await? {
        let level = fs.pointer("/spec/priorityLevelConfiguration/name").and_then(Value::as_str).unwrap_or("");
        let Some(status) = dangling_status(&fs, levels.iter().any(|l| l == level), &now) else { continue };
        let mut body = fs.clone();
        body["status"] = status;
        let name = crate::meta::name(&fs).to_string();
        match write(state, fs_def, Write::Update, &name, "status", &body).await {
            // Changed or deleted meanwhile: the change triggers another pass.
            Ok(()) | Err(ApiError::NotFound { .. } | ApiError::Conflict { .. }) => {}
            Err(e) => anyhow::bail!("updating the status of flowschemas/{name}: {e}"),
        }
    }
    Ok(())
}

/// One maintenance pass. Every object is tried; the error lists those that failed.
pub async fn ensure(state: &dyn Loopback) -> anyhow::Result<()> {
    let fs_def = find_def(state, ConfigKind::FlowSchema)?;
    let pl_def = find_def(state, ConfigKind::PriorityLevel)?;
    let suggested_pls = to_defaults(ConfigKind::PriorityLevel, bootstrap::suggested_priority_levels())?;
    let suggested_fss = to_defaults(ConfigKind::FlowSchema, bootstrap::suggested_flow_schemas())?;
    let mandatory_fss = to_defaults(ConfigKind::FlowSchema, bootstrap::mandatory_flow_schemas())?;
    let mandatory_pls = to_defaults(ConfigKind::PriorityLevel, bootstrap::mandatory_priority_levels())?;
    let mut failures = Vec::new();
    let groups = [
        (pl_def, &suggested_pls, false),
        (fs_def, &suggested_fss, false),
        (fs_def, &mandatory_fss, true),
        (pl_def, &mandatory_pls, true),
    ];
    for (def, objs, mandatory) in groups {
        for obj in objs.iter() {
            if let Err(e) = ensure_one(state, def, obj, mandatory).await {
                failures.push(e.to_string());
            }
        }
    }
    let all_fss: Vec<DefaultObj> = mandatory_fss.into_iter().chain(suggested_fss).collect();
    let all_pls: Vec<DefaultObj> = mandatory_pls.into_iter().chain(suggested_pls).collect();
    for (def, wanted) in [(fs_def, &all_fss), (pl_def, &all_pls)] {
        if let Err(e) = remove_unwanted(state, def, wanted).await {
            failures.push(e.to_string());
        }
    }
    if let Err(e) = sync_dangling(state, fs_def, pl_def).await {
        failures.push(e.to_string());
    }
    if !failures.is_empty() {
        anyhow::bail!("maintaining the APF configuration: {}", failures.join("; "));
    }
    Ok(())
}

async fn pass(state: &dyn Loopback) {
    if let Err(e) = ensure(state).await {
        tracing::warn!(error = %e, "APF configuration pass failed; will retry");
    }
}

/// Keep the configuration maintained: a pass every `every`, and one [`DEBOUNCE`] after any
/// change to FlowSchemas or priority levels (`changes`: the one watch of the APF
/// configuration, whose value moves on every change; changes arriving meanwhile are taken in
/// the same pass). The caller has done the initial pass.
pub fn spawn(
    tasks: &crate::tasks::Tasks,
    state: Weak<dyn Loopback>,
    every: Duration,
    mut changes: tokio::sync::watch::Receiver<u64>,
) {
    tasks.spawn("flowcontrol-maintain", async move {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        changes.borrow_and_update();
        loop {
            let by_change = tokio::select! {
                _ = ticker.tick() => Some(false),
                changed = changes.changed() => changed.is_ok().then_some(true),
            };
            match by_change {
                // Let the changes that follow the first one arrive.
                Some(true) => tokio::time::sleep(DEBOUNCE).await,
                Some(false) => {}
                // The shared watch is gone (the server is stopping): passes by the ticker only.
                None => {
                    ticker.tick().await;
                }
            }
            changes.borrow_and_update();
            let Some(st) = state.upgrade() else { return Ok(()) };
            pass(&*st).await;
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn suggested_fs(name: &str) -> DefaultObj {
        let fs =
            bootstrap::suggested_flow_schemas().into_iter().find(|f| f.metadata.name.as_deref() == Some(name)).unwrap();
        DefaultObj { kind: ConfigKind::FlowSchema, object: serde_json::to_value(fs).unwrap() }
    }

    fn level(name: &str) -> DefaultObj {
        let pl = bootstrap::mandatory_priority_levels()
            .into_iter()
            .chain(bootstrap::suggested_priority_levels())
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap();
        DefaultObj { kind: ConfigKind::PriorityLevel, object: serde_json::to_value(pl).unwrap() }
    }

    /// The default as the server stores it: defaulted, with server metadata.
    fn stored(d: &DefaultObj, generation: i64, annotation: Option<&str>) -> Value {
        let mut v = d.object.clone();
        match d.kind {
            ConfigKind::FlowSchema => default_flow_schema(&mut v),
            ConfigKind::PriorityLevel => default_priority_level(&mut v),
        }
        v["metadata"]["generation"] = json!(generation);
        v["metadata"]["resourceVersion"] = json!("42");
        match annotation {
            Some(a) => v["metadata"]["annotations"] = json!({AUTO_UPDATE_ANNOTATION: a}),
            None => {
                v["metadata"].as_object_mut().unwrap().remove("annotations");
            }
        }
        v
    }

    fn annotation_of(v: &Value) -> Option<&str> {
        auto_update_annotation(v)
    }

    #[test]
    fn decisions() {
        let sa = suggested_fs("service-accounts");
        let gd = level("global-default");
        let exempt = level("exempt");
        let catch_all = level("catch-all");
        let edited = |d: &DefaultObj, gen: i64, ann: Option<&str>, f: fn(&mut Value)| {
            let mut v = stored(d, gen, ann);
            f(&mut v);
            v
        };
        // (case, default, existing, mandatory, want) where want is
        // "create" / "delete" / "nothing" / "update:<annotation>:<spec reset?>"
        type Case<'a> = (&'a str, Option<&'a DefaultObj>, Option<Value>, bool, &'a str);
        let cases: Vec<Case> = vec![
            ("missing suggested is created", Some(&sa), None, false, "create"),
            ("missing mandatory is created", Some(&catch_all), None, true, "create"),
            ("suggested up to date", Some(&sa), Some(stored(&sa, 1, Some("true"))), false, "nothing"),
            (
                "suggested owned by server is reset",
                Some(&gd),
                Some(edited(&gd, 2, Some("true"), |v| v["spec"]["limited"]["nominalConcurrencyShares"] = json!(99))),
                false,
                "update:true:reset",
            ),
            (
                "suggested owned by users is left",
                Some(&gd),
                Some(edited(&gd, 2, Some("false"), |v| v["spec"]["limited"]["nominalConcurrencyShares"] = json!(99))),
                false,
                "nothing",
            ),
            (
                "ParseBool spellings count",
                Some(&gd),
                Some(edited(&gd, 2, Some("F"), |v| v["spec"]["limited"]["nominalConcurrencyShares"] = json!(99))),
                false,
                "nothing",
            ),
            (
                "no annotation, generation 1: server's, annotation recorded",
                Some(&sa),
                Some(stored(&sa, 1, None)),
                false,
                "update:true:kept",
            ),
            (
                "no annotation, generation 1, changed spec: server resets",
                Some(&gd),
                Some(edited(&gd, 1, None, |v| v["spec"]["limited"]["lendablePercent"] = json!(7))),
                false,
                "update:true:reset",
            ),
            (
                "no annotation, edited: users', annotation recorded",
                Some(&gd),
                Some(edited(&gd, 3, None, |v| v["spec"]["limited"]["lendablePercent"] = json!(7))),
                false,
                "update:false:kept",
            ),
            (
                "unreadable annotation, generation 2: users'",
                Some(&sa),
                Some(stored(&sa, 2, Some("maybe"))),
                false,
                "update:false:kept",
            ),
            (
                "mandatory reset even when annotated false",
                Some(&catch_all),
                Some(edited(&catch_all, 2, Some("false"), |v| {
                    v["spec"]["limited"]["nominalConcurrencyShares"] = json!(1)
                })),
                true,
                "update:true:reset",
            ),
            (
                "mandatory up to date, annotation missing",
                Some(&catch_all),
                Some(stored(&catch_all, 4, None)),
                true,
                "update:true:kept",
            ),
            (
                "exempt level keeps its exempt section",
                Some(&exempt),
                Some(edited(&exempt, 2, Some("true"), |v| {
                    v["spec"]["exempt"] = json!({"nominalConcurrencyShares": 40, "lendablePercent": 10})
                })),
                true,
                "nothing",
            ),
            (
                "exempt level without exempt section is reset",
                Some(&exempt),
                Some(edited(&exempt, 2, Some("true"), |v| {
                    v["spec"].as_object_mut().unwrap().remove("exempt");
                })),
                true,
                "update:true:reset",
            ),
            (
                "unwanted object annotated true is deleted",
                None,
                Some(json!({"metadata": {"name": "old", "annotations": {AUTO_UPDATE_ANNOTATION: "true"}}})),
                false,
                "delete",
            ),
            (
                "unwanted object annotated 1 is deleted",
                None,
                Some(json!({"metadata": {"name": "old", "annotations": {AUTO_UPDATE_ANNOTATION: "1"}}})),
                false,
                "delete",
            ),
            (
                "unwanted object annotated false is kept",
                None,
                Some(json!({"metadata": {"name": "mine", "annotations": {AUTO_UPDATE_ANNOTATION: "false"}}})),
                false,
                "nothing",
            ),
            (
                "user object without annotation is kept",
                None,
                Some(json!({"metadata": {"name": "mine", "generation": 1}})),
                false,
                "nothing",
            ),
            ("nothing at all", None, None, false, "nothing"),
        ];
        for (case, default, existing, mandatory, want) in cases {
            let got = decide(default, existing.as_ref(), mandatory);
            match (want, &got) {
                ("create", Action::Create(body)) => assert_eq!(Some(body), default.map(|d| &d.object), "{case}"),
                ("delete", Action::Delete) | ("nothing", Action::Nothing) => {}
                (w, Action::Update(new)) if w.starts_with("update:") => {
                    let parts: Vec<&str> = w.split(':').collect();
                    let old = existing.as_ref().unwrap();
                    assert_eq!(annotation_of(new), Some(parts[1]), "{case}: annotation");
                    assert_eq!(new["metadata"]["resourceVersion"], "42", "{case}: precondition kept");
                    let want_spec =
                        if parts[2] == "reset" { default.unwrap().object["spec"].clone() } else { old["spec"].clone() };
                    assert_eq!(new["spec"], want_spec, "{case}: spec");
                }
                _ => panic!("{case}: want {want}, got {got:?}"),
            }
        }
    }

    #[test]
    fn dangling_condition() {
        let now = "2024-05-01T12:00:00Z";
        let fs = |conditions: Value| {
            json!({"metadata": {"name": "f"}, "spec": {"priorityLevelConfiguration": {"name": "pl"}},
                   "status": {"conditions": conditions}})
        };
        let missing_msg =
            "This FlowSchema references the PriorityLevelConfiguration object named \"pl\" but there is no such object";
        let found_msg = "This FlowSchema references the PriorityLevelConfiguration object named \"pl\" and it exists";

        let got = dangling_status(&fs(json!([])), false, now).unwrap();
        assert_eq!(
            got["conditions"],
            json!([{"type": "Dangling", "status": "True", "lastTransitionTime": now,
                                             "reason": "NotFound", "message": missing_msg}]),
            "missing level"
        );

        let got = dangling_status(&fs(got["conditions"].clone()), true, now).unwrap();
        assert_eq!(got["conditions"][0]["status"], "False", "level appeared: status");
        assert_eq!(got["conditions"][0]["reason"], "Found", "level appeared: reason");
        assert_eq!(got["conditions"][0]["message"], found_msg, "level appeared: message");

        let current = json!([{"type": "Dangling", "status": "False", "reason": "Found", "message": found_msg,
                              "lastTransitionTime": "2020-01-01T00:00:00Z"}]);
        assert_eq!(dangling_status(&fs(current), true, now), None, "already current");

        let other = json!([{"type": "Other", "status": "True"}]);
        let got = dangling_status(&fs(other), true, now).unwrap();
        assert_eq!(got["conditions"].as_array().unwrap().len(), 2, "other conditions kept");
        assert_eq!(got["conditions"][0]["type"], "Other", "other condition first");

        let bare = json!({"metadata": {"name": "f"}, "spec": {"priorityLevelConfiguration": {"name": "pl"}}});
        assert!(dangling_status(&bare, true, now).is_some(), "no status yet");
    }

    #[test]
    fn parse_bool_like_go() {
        for (s, want) in [
            ("true", Some(true)),
            ("T", Some(true)),
            ("1", Some(true)),
            ("false", Some(false)),
            ("0", Some(false)),
            ("FALSE", Some(false)),
            ("yes", None),
            ("", None),
            ("tRuE", None),
        ] {
            assert_eq!(parse_bool(s), want, "{s:?}");
        }
    }
}
