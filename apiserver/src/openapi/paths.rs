//! The `paths` of the documents: every operation of every served resource, with upstream's
//! parameters, content types and extensions, grouped into one document per group-version.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::definitions::{gvk, ref_name, KindNames};
use super::*;
use crate::registry::{resource_verbs, subresource_kind, subresource_verbs};
use crate::registry::{Registry, ResourceDef};

/// Collect every `$ref` target in `value` (any depth).
fn collect_refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        out.insert(ref_name(r).to_string());
                    }
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Names of the definitions the path items need, transitively.
pub(super) fn closure(defs: &BTreeMap<String, Value>, items: &[PathItem]) -> BTreeSet<String> {
    let mut todo = BTreeSet::new();
    for item in items {
        collect_refs(&item.render(Flavor::V2), &mut todo);
    }
    let mut done = BTreeSet::new();
    while let Some(name) = todo.pop_first() {
        if !done.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = defs.get(&name) {
            let mut more = BTreeSet::new();
            collect_refs(schema, &mut more);
            todo.extend(more.into_iter().filter(|n| !done.contains(n)));
        }
    }
    done
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    V2,
    V3,
}

#[derive(Debug, Clone, Copy)]
struct Param {
    name: &'static str,
    location: &'static str,
    ty: &'static str,
    description: &'static str,
}

const fn q(name: &'static str, ty: &'static str, description: &'static str) -> Param {
    Param { name, location: "query", ty, description }
}

const P_NAME: &str = "name";
const P_NAMESPACE: &str = "namespace";
const PRETTY: Param = q(
    "pretty",
    "string",
    "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
);
const DRY_RUN: Param = q(
    "dryRun",
    "string",
    "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
);
const FIELD_MANAGER: Param = q(
    "fieldManager",
    "string",
    "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
);
const FIELD_MANAGER_PATCH: Param = q(
    "fieldManager",
    "string",
    "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint. This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch).",
);
const FIELD_VALIDATION: Param = q(
    "fieldValidation",
    "string",
    "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
);
const FORCE: Param = q(
    "force",
    "boolean",
    "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
);
const GRACE_PERIOD: Param = q(
    "gracePeriodSeconds",
    "integer",
    "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
);
const IGNORE_STORE_READ_ERROR: Param = q(
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "boolean",
    "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow fails with a corrupt object error. A resource is considered corrupt if it can not be retrieved from the underlying storage successfully because of a) its data can not be transformed e.g. decryption failure, or b) it fails to decode into an object. NOTE: unsafe deletion ignores finalizer constraints, skips precondition checks, and removes the object from the storage. WARNING: This may potentially break the cluster if the workload associated with the resource being unsafe-deleted relies on normal deletion flow. Use only if you REALLY know what you are doing. The default value is false, and the user must opt in to enable it",
);
const ORPHAN: Param = q(
    "orphanDependents",
    "boolean",
    "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.",
);
const PROPAGATION: Param = q(
    "propagationPolicy",
    "string",
    "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
);
const ALLOW_BOOKMARKS: Param = q(
    "allowWatchBookmarks",
    "boolean",
    "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
);
const CONTINUE: Param = q(
    "continue",
    "string",
    "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize. If the specified continue value is no longer valid whether due to expiration (generally five to fifteen minutes) or a configuration change on the server, the server will respond with a 410 ResourceExpired error together with a continue token.",
);
const FIELD_SELECTOR: Param = q(
    "fieldSelector",
    "string",
    "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
);
const LABEL_SELECTOR: Param = q(
    "labelSelector",
    "string",
    "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
);
const LIMIT: Param = q(
    "limit",
    "integer",
    "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results. The server may choose to return fewer items than the limit, but will never return more.",
);
const RESOURCE_VERSION: Param = q(
    "resourceVersion",
    "string",
    "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
);
const RESOURCE_VERSION_MATCH: Param = q(
    "resourceVersionMatch",
    "string",
    "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
);
const SEND_INITIAL_EVENTS: Param = q(
    "sendInitialEvents",
    "boolean",
    "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection. Once all such events have been sent, a synthetic \"Bookmark\" event will be sent. The bookmark will report the ResourceVersion (RV) corresponding to the set of objects, and be marked with `\"k8s.io/initial-events-end\": \"true\"` annotation. Afterwards, the watch stream will proceed as usual, sending watch events corresponding to changes (subsequent to the RV) to objects watched.",
);
const TIMEOUT: Param = q(
    "timeoutSeconds",
    "integer",
    "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
);
const WATCH: Param = q(
    "watch",
    "boolean",
    "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
);

const LIST_PARAMS: &[Param] = &[
    ALLOW_BOOKMARKS,
    CONTINUE,
    FIELD_SELECTOR,
    LABEL_SELECTOR,
    LIMIT,
    RESOURCE_VERSION,
    RESOURCE_VERSION_MATCH,
    SEND_INITIAL_EVENTS,
    TIMEOUT,
    WATCH,
];
const WRITE_PARAMS: &[Param] = &[DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
const PATCH_PARAMS: &[Param] = &[DRY_RUN, FIELD_MANAGER_PATCH, FIELD_VALIDATION, FORCE];
const DELETE_PARAMS: &[Param] = &[DRY_RUN, GRACE_PERIOD, IGNORE_STORE_READ_ERROR, ORPHAN, PROPAGATION];
const DELETE_COLLECTION_PARAMS: &[Param] = &[
    CONTINUE,
    DRY_RUN,
    FIELD_SELECTOR,
    GRACE_PERIOD,
    IGNORE_STORE_READ_ERROR,
    LABEL_SELECTOR,
    LIMIT,
    ORPHAN,
    PROPAGATION,
    RESOURCE_VERSION,
    RESOURCE_VERSION_MATCH,
    SEND_INITIAL_EVENTS,
    TIMEOUT,
];

const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
const PRODUCES: &[&str] = &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];
const PRODUCES_LIST: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json;stream=watch",
    "application/vnd.kubernetes.protobuf;stream=watch",
];

/// How an operation takes its request body.
#[derive(Debug, Clone)]
enum Body {
    None,
    /// The definition, required.
    Object(String),
    /// `meta.v1.Patch` with the four patch content types.
    Patch,
    /// `meta.v1.Patch` without strategic merge patch (custom resources).
    MergePatch,
    /// Optional `DeleteOptions`.
    DeleteOptions,
}

#[derive(Debug, Clone)]
struct Operation {
    method: &'static str,
    action: &'static str,
    id: String,
    description: String,
    params: &'static [Param],
    body: Body,
    /// (code, description, definition name)
    responses: Vec<(u16, &'static str, String)>,
    streaming: bool,
    gvk: Option<(&'static str, &'static str, &'static str)>,
    tag: String,
}

#[derive(Debug, Clone)]
pub(super) struct PathItem {
    pub(super) path: String,
    /// Path parameters (`name`, `namespace`), in order.
    path_params: Vec<(&'static str, String)>,
    /// Query parameters shared by all operations.
    common: Vec<Param>,
    ops: Vec<Operation>,
}

impl PathItem {
    pub(super) fn render(&self, flavor: Flavor) -> Value {
        let mut item = Map::new();
        let mut params: Vec<Value> = self
            .path_params
            .iter()
            .map(|(name, description)| param_json(flavor, name, "path", "string", description, true))
            .collect();
        params.extend(self.common.iter().map(|p| param_json(flavor, p.name, p.location, p.ty, p.description, false)));
        if !params.is_empty() {
            item.insert("parameters".into(), Value::Array(params));
        }
        for op in &self.ops {
            item.insert(op.method.into(), op.render(flavor));
        }
        Value::Object(item)
    }
}

fn param_json(flavor: Flavor, name: &str, location: &str, ty: &str, description: &str, required: bool) -> Value {
    let mut p = json!({"description": description, "in": location, "name": name});
    match flavor {
        Flavor::V2 => {
            p["type"] = json!(ty);
            p["uniqueItems"] = json!(true);
        }
        Flavor::V3 => p["schema"] = json!({"type": ty, "uniqueItems": true}),
    }
    if required {
        p["required"] = json!(true);
    }
    p
}

fn schema_ref(flavor: Flavor, name: &str) -> Value {
    match flavor {
        Flavor::V2 => json!({"$ref": format!("#/definitions/{name}")}),
        Flavor::V3 => json!({"$ref": format!("#/components/schemas/{name}")}),
    }
}

impl Operation {
    fn render(&self, flavor: Flavor) -> Value {
        let mut op = json!({
            "description": self.description,
            "operationId": self.id,
            "tags": [self.tag],
        });
        let produces = if self.streaming { PRODUCES_LIST } else { PRODUCES };
        let mut params: Vec<Value> = Vec::new();
        let body_schema = match &self.body {
            Body::None => None,
            Body::Object(name) => Some((schema_ref(flavor, name), true, vec!["*/*"])),
            Body::Patch => Some((schema_ref(flavor, &format!("{META}Patch")), true, PATCH_TYPES.to_vec())),
            Body::MergePatch => Some((
                schema_ref(flavor, &format!("{META}Patch")),
                true,
                PATCH_TYPES.iter().copied().filter(|t| !t.contains("strategic")).collect(),
            )),
            Body::DeleteOptions => Some((schema_ref(flavor, &format!("{META}DeleteOptions")), false, vec!["*/*"])),
        };
        match flavor {
            Flavor::V2 => {
                let consumes = match &body_schema {
                    Some((_, _, types)) => types.clone(),
                    None => vec!["*/*"],
                };
                op["consumes"] = json!(consumes);
                op["produces"] = json!(produces);
                op["schemes"] = json!(["https"]);
                if let Some((schema, required, _)) = &body_schema {
                    let mut b = json!({"in": "body", "name": "body", "schema": schema});
                    if *required {
                        b["required"] = json!(true);
                    }
                    params.push(b);
                }
                let mut responses = Map::new();
                for (code, description, name) in &self.responses {
                    responses.insert(
                        code.to_string(),
                        json!({"description": description, "schema": schema_ref(flavor, name)}),
                    );
                }
                responses.insert("401".into(), json!({"description": "Unauthorized"}));
                op["responses"] = Value::Object(responses);
            }
            Flavor::V3 => {
                if let Some((schema, required, types)) = &body_schema {
                    let content: Map<String, Value> =
                        types.iter().map(|t| (t.to_string(), json!({"schema": schema}))).collect();
                    let mut b = json!({"content": content});
                    if *required {
                        b["required"] = json!(true);
                    }
                    op["requestBody"] = b;
                }
                let mut responses = Map::new();
                for (code, description, name) in &self.responses {
                    let content: Map<String, Value> =
                        produces.iter().map(|t| (t.to_string(), json!({"schema": schema_ref(flavor, name)}))).collect();
                    responses.insert(code.to_string(), json!({"description": description, "content": content}));
                }
                responses.insert("401".into(), json!({"description": "Unauthorized"}));
                op["responses"] = Value::Object(responses);
            }
        }
        params.extend(self.params.iter().map(|p| param_json(flavor, p.name, p.location, p.ty, p.description, false)));
        if !params.is_empty() {
            op["parameters"] = Value::Array(params);
        }
        if !self.action.is_empty() {
            op["x-kubernetes-action"] = json!(self.action);
        }
        if let Some((g, v, k)) = self.gvk {
            op["x-kubernetes-group-version-kind"] = gvk(g, v, k);
        }
        op
    }
}

/// `certificates.k8s.io` → `Certificates`, `rbac.authorization.k8s.io` → `RbacAuthorization`,
/// core → `Core` (upstream's operationId prefix).
fn group_id(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group.trim_end_matches(".k8s.io").split('.').map(upper_first).collect()
}

/// `rbacAuthorization`, `core`, `certificates` (upstream's tag prefix).
fn group_tag(group: &str) -> String {
    let id = group_id(group);
    let mut chars = id.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => id,
    }
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Path items of one resource (collection, object, subresources, watch paths).
fn resource_paths(def: &ResourceDef, kinds: &KindNames) -> Vec<PathItem> {
    let Some(kind_def) = kinds.get(&(def.group, def.version, def.kind)).cloned() else { return Vec::new() };
    let patch_body = if is_builtin(&kind_def) { Body::Patch } else { Body::MergePatch };
    let list_def = format!("{kind_def}List");
    let status = format!("{META}Status");
    let watch_event = format!("{META}WatchEvent");
    let g = group_id(def.group);
    let v = upper_first(def.version);
    let tag = format!("{}_{}", group_tag(def.group), def.version);
    let ns = if def.namespaced { "Namespaced" } else { "" };
    let kind = def.kind;
    let root =
        if def.group.is_empty() { format!("/api/{}", def.version) } else { format!("/apis/{}", def.api_version()) };
    let scope = if def.namespaced { format!("{root}/namespaces/{{namespace}}") } else { root.clone() };
    let watch_scope =
        if def.namespaced { format!("{root}/watch/namespaces/{{namespace}}") } else { format!("{root}/watch") };
    let gvk_main = Some((def.group, def.version, def.kind));
    let verbs = resource_verbs(def);
    let op = |method, action, id: String, description: String, params, body, responses, streaming| Operation {
        method,
        action,
        id,
        description,
        params,
        body,
        responses,
        streaming,
        gvk: gvk_main,
        tag: tag.clone(),
    };
    let ns_param = || vec![(P_NAMESPACE, "object name and auth scope, such as for teams and projects".to_string())];
    let name_param = |what: &str| (P_NAME, format!("name of the {what}"));
    let scoped = |mut v: Vec<(&'static str, String)>| {
        if def.namespaced {
            v.extend(ns_param());
        }
        v
    };

    let mut items = Vec::new();

    if def.create_only {
        // Reviews: POST only, answered with the computed object.
        items.push(PathItem {
            path: format!("{scope}/{}", def.resource),
            path_params: scoped(Vec::new()),
            common: vec![PRETTY],
            ops: vec![op(
                "post",
                "post",
                format!("create{g}{v}{ns}{kind}"),
                format!("create a {kind}"),
                WRITE_PARAMS,
                Body::Object(kind_def.clone()),
                vec![
                    (200, "OK", kind_def.clone()),
                    (201, "Created", kind_def.clone()),
                    (202, "Accepted", kind_def.clone()),
                ],
                false,
            )],
        });
        return items;
    }

    // Collection.
    let mut ops = vec![op(
        "get",
        "list",
        format!("list{g}{v}{ns}{kind}"),
        format!("list or watch objects of kind {kind}"),
        LIST_PARAMS,
        Body::None,
        vec![(200, "OK", list_def.clone())],
        true,
    )];
    ops.push(op(
        "post",
        "post",
        format!("create{g}{v}{ns}{kind}"),
        format!("create a {kind}"),
        WRITE_PARAMS,
        Body::Object(kind_def.clone()),
        vec![(200, "OK", kind_def.clone()), (201, "Created", kind_def.clone()), (202, "Accepted", kind_def.clone())],
        false,
    ));
    if verbs.contains(&"deletecollection") {
        ops.push(op(
            "delete",
            "deletecollection",
            format!("delete{g}{v}Collection{ns}{kind}"),
            format!("delete collection of {kind}"),
            DELETE_COLLECTION_PARAMS,
            Body::DeleteOptions,
            vec![(200, "OK", status.clone())],
            false,
        ));
    }
    items.push(PathItem {
        path: format!("{scope}/{}", def.resource),
        path_params: scoped(Vec::new()),
        common: vec![PRETTY],
        ops,
    });

    // Object.
    let delete_response = vec![(200, "OK", status.clone()), (202, "Accepted", status.clone())];
    items.push(PathItem {
        path: format!("{scope}/{}/{{name}}", def.resource),
        path_params: scoped(vec![name_param(kind)]),
        common: vec![PRETTY],
        ops: vec![
            op(
                "get",
                "get",
                format!("read{g}{v}{ns}{kind}"),
                format!("read the specified {kind}"),
                &[],
                Body::None,
                vec![(200, "OK", kind_def.clone())],
                false,
            ),
            op(
                "put",
                "put",
                format!("replace{g}{v}{ns}{kind}"),
                format!("replace the specified {kind}"),
                WRITE_PARAMS,
                Body::Object(kind_def.clone()),
                vec![(200, "OK", kind_def.clone()), (201, "Created", kind_def.clone())],
                false,
            ),
            op(
                "patch",
                "patch",
                format!("patch{g}{v}{ns}{kind}"),
                format!("partially update the specified {kind}"),
                PATCH_PARAMS,
                patch_body.clone(),
                vec![(200, "OK", kind_def.clone()), (201, "Created", kind_def.clone())],
                false,
            ),
            op(
                "delete",
                "delete",
                format!("delete{g}{v}{ns}{kind}"),
                format!("delete a {kind}"),
                DELETE_PARAMS,
                Body::DeleteOptions,
                delete_response,
                false,
            ),
        ],
    });

    // Subresources.
    for sub in def.subresources {
        let (sg, sv, skind) = subresource_kind(def, sub);
        let Some(sub_def) = kinds.get(&(sg, sv, skind)).cloned() else { continue };
        let s = upper_first(sub);
        let sub_gvk = Some((sg, sv, skind));
        let mut ops = Vec::new();
        for verb in subresource_verbs(def, sub) {
            let (method, action, id, description, params, body, responses) = match *verb {
                "get" => (
                    "get",
                    "get",
                    format!("read{g}{v}{ns}{kind}{s}"),
                    format!("read {sub} of the specified {kind}"),
                    &[][..],
                    Body::None,
                    vec![(200, "OK", sub_def.clone())],
                ),
                "update" => (
                    "put",
                    "put",
                    format!("replace{g}{v}{ns}{kind}{s}"),
                    format!("replace {sub} of the specified {kind}"),
                    WRITE_PARAMS,
                    Body::Object(sub_def.clone()),
                    vec![(200, "OK", sub_def.clone()), (201, "Created", sub_def.clone())],
                ),
                "patch" => (
                    "patch",
                    "patch",
                    format!("patch{g}{v}{ns}{kind}{s}"),
                    format!("partially update {sub} of the specified {kind}"),
                    PATCH_PARAMS,
                    patch_body.clone(),
                    vec![(200, "OK", sub_def.clone()), (201, "Created", sub_def.clone())],
                ),
                "create" => (
                    "post",
                    "post",
                    format!("create{g}{v}{ns}{kind}{s}"),
                    format!("create {sub} of a {kind}"),
                    WRITE_PARAMS,
                    Body::Object(sub_def.clone()),
                    vec![
                        (200, "OK", sub_def.clone()),
                        (201, "Created", sub_def.clone()),
                        (202, "Accepted", sub_def.clone()),
                    ],
                ),
                _ => continue,
            };
            ops.push(Operation {
                method,
                action,
                id,
                description,
                params,
                body,
                responses,
                streaming: false,
                gvk: sub_gvk,
                tag: tag.clone(),
            });
        }
        items.push(PathItem {
            path: format!("{scope}/{}/{{name}}/{sub}", def.resource),
            path_params: scoped(vec![name_param(kind)]),
            common: if ops.iter().any(|o| o.method == "post") { Vec::new() } else { vec![PRETTY] },
            ops,
        });
    }

    // List across namespaces.
    if def.namespaced {
        let mut common = LIST_PARAMS.to_vec();
        common.insert(5, PRETTY);
        items.push(PathItem {
            path: format!("{root}/{}", def.resource),
            path_params: Vec::new(),
            common,
            ops: vec![op(
                "get",
                "list",
                format!("list{g}{v}{kind}ForAllNamespaces"),
                format!("list or watch objects of kind {kind}"),
                &[],
                Body::None,
                vec![(200, "OK", list_def.clone())],
                true,
            )],
        });
    }

    // Deprecated watch paths.
    let mut watch_common = LIST_PARAMS.to_vec();
    watch_common.insert(5, PRETTY);
    items.push(PathItem {
        path: format!("{watch_scope}/{}", def.resource),
        path_params: scoped(Vec::new()),
        common: watch_common.clone(),
        ops: vec![op(
            "get",
            "watchlist",
            format!("watch{g}{v}{ns}{kind}List"),
            format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
            &[],
            Body::None,
            vec![(200, "OK", watch_event.clone())],
            true,
        )],
    });
    items.push(PathItem {
        path: format!("{watch_scope}/{}/{{name}}", def.resource),
        path_params: scoped(vec![name_param(kind)]),
        common: watch_common.clone(),
        ops: vec![op(
            "get",
            "watch",
            format!("watch{g}{v}{ns}{kind}"),
            format!("watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."),
            &[],
            Body::None,
            vec![(200, "OK", watch_event.clone())],
            true,
        )],
    });
    if def.namespaced {
        items.push(PathItem {
            path: format!("{root}/watch/{}", def.resource),
            path_params: Vec::new(),
            common: watch_common,
            ops: vec![op(
                "get",
                "watchlist",
                format!("watch{g}{v}{kind}ListForAllNamespaces"),
                format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
                &[],
                Body::None,
                vec![(200, "OK", watch_event)],
                true,
            )],
        });
    }
    items
}

/// A discovery path (`/api/`, `/apis/`, `/apis/<g>/`, `/api/v1/`, `/version/`): GET only.
fn discovery_path(path: String, id: String, description: &str, def: &str, tag: String) -> PathItem {
    PathItem {
        path,
        path_params: Vec::new(),
        common: Vec::new(),
        ops: vec![Operation {
            method: "get",
            action: "",
            id,
            description: description.into(),
            params: &[],
            body: Body::None,
            responses: vec![(200, "OK", def.into())],
            streaming: false,
            gvk: None,
            tag,
        }],
    }
}

/// The v3 documents by index key, each with its path items.
pub(super) fn documents(reg: &Registry, kinds: &KindNames) -> Vec<(String, Vec<PathItem>)> {
    let mut docs = Vec::new();
    docs.push((
        "api".to_string(),
        vec![discovery_path(
            "/api/".into(),
            "getCoreAPIVersions".into(),
            "get available API versions",
            &format!("{META}APIVersions"),
            "core".into(),
        )],
    ));
    docs.push((
        "apis".to_string(),
        vec![discovery_path(
            "/apis/".into(),
            "getAPIVersions".into(),
            "get available API versions",
            &format!("{META}APIGroupList"),
            "apis".into(),
        )],
    ));
    docs.push((
        "version".to_string(),
        vec![discovery_path(
            "/version/".into(),
            "getCodeVersion".into(),
            "get the version information for this server",
            "io.k8s.apimachinery.pkg.version.Info",
            "version".into(),
        )],
    ));
    for group in reg.groups() {
        if !group.is_empty() {
            docs.push((
                format!("apis/{group}"),
                vec![discovery_path(
                    format!("/apis/{group}/"),
                    format!("get{}APIGroup", group_id(group)),
                    "get information of a group",
                    &format!("{META}APIGroup"),
                    group_tag(group),
                )],
            ));
        }
        for version in reg.versions(group) {
            let (key, root) = if group.is_empty() {
                (format!("api/{version}"), format!("/api/{version}/"))
            } else {
                (format!("apis/{group}/{version}"), format!("/apis/{group}/{version}/"))
            };
            let tag = format!("{}_{version}", group_tag(group));
            let mut items = vec![discovery_path(
                root,
                format!("get{}{}APIResources", group_id(group), upper_first(version)),
                "get available resources",
                &format!("{META}APIResourceList"),
                tag,
            )];
            for def in reg.resources.iter().filter(|r| r.group == group && r.version == version) {
                items.extend(resource_paths(def, kinds));
            }
            docs.push((key, items));
        }
    }
    docs
}
