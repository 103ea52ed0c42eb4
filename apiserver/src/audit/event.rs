//! The `audit.k8s.io/v1` `Event` and its two line formats: what enters is an event the
//! filter built (request and response bodies still as bytes and a value, untouched), what
//! leaves is one line of text, `json` (one JSON object, as upstream's log backend) or
//! `legacy` (upstream's `AUDIT:` line).
//!
//! The bodies are turned into `requestObject` / `responseObject` here, on the writer's
//! thread, not on the request path: a request body (JSON, YAML or protobuf) becomes the
//! object (one that is not an object, as a JSON patch, is left out), `managedFields` are dropped when the policy says so, and an event
//! whose line would exceed [`MAX_EVENT_BYTES`] loses both objects and carries the annotation
//! `audit.k8s.io/truncated: "true"`, as upstream's truncating backend does.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::policy::{Level, Stage};

/// The longest event line kept with its objects (upstream's default
/// `--audit-log-truncate-max-event-size`).
pub const MAX_EVENT_BYTES: usize = 100 * 1024;

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct User {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&crate::authn::UserInfo> for User {
    fn from(u: &crate::authn::UserInfo) -> Self {
        User { username: u.name.clone(), uid: u.uid.clone(), groups: u.groups.clone(), extra: u.extra.clone() }
    }
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(rename = "apiGroup", skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(rename = "apiVersion", skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(rename = "resourceVersion", skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// `responseStatus`: the code, and for an error the Status' bounded fields.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ResponseStatus {
    pub metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

/// One event, as the filter builds it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: User,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<User>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    pub request_received_timestamp: String,
    pub stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What the writer turns into a line: the event and the bodies it may carry.
#[derive(Debug, Clone)]
pub struct Pending {
    pub event: Event,
    /// The request body (a shared handle on the bytes the handler read), at `Request` and up.
    pub request_body: Option<bytes::Bytes>,
    /// The handler's response object, at `RequestResponse`.
    pub response_object: Option<Value>,
    /// The response object's size on the wire (what the queue counts it as).
    pub response_bytes: usize,
    /// An error's Status body, for `responseStatus`.
    pub status_body: Option<bytes::Bytes>,
    pub omit_managed_fields: bool,
}

/// A request body as an object: protobuf (kubectl's typed clients send it), JSON or YAML.
fn decode_body(body: &[u8]) -> Option<Value> {
    if body.starts_with(b"k8s\x00") {
        return crate::wire::protobuf::decode(body).ok();
    }
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => serde_json::from_slice(body).ok(),
        Some(_) => crate::wire::yaml::from_slice(body).ok().map(|d| d.value),
        None => None,
    }
}

/// Upstream's timestamp of an event: RFC 3339 in UTC with microseconds.
pub fn timestamp(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn drop_managed_fields(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
    }
}

impl Pending {
    /// The finished event: the Status fields of an error, the objects its level carries.
    pub fn finish(self) -> Event {
        let Pending { mut event, request_body, response_object, status_body, omit_managed_fields, .. } = self;
        if let (Some(body), Some(status)) = (status_body, event.response_status.as_mut()) {
            if let Ok(Value::Object(s)) = serde_json::from_slice::<Value>(&body) {
                if s.get("kind").and_then(Value::as_str) == Some("Status") {
                    let text = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                    status.status = text("status");
                    status.message = text("message");
                    status.reason = text("reason");
                    status.details = s.get("details").cloned();
                }
            }
        }
        let request_object = request_body.as_deref().and_then(decode_body).filter(Value::is_object);
        // As upstream, the request object names what the path does not (at every level).
        if let (Some(r), Some(meta)) =
            (event.object_ref.as_mut(), request_object.as_ref().and_then(|o| o.get("metadata")))
        {
            let text = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            for (field, key) in [
                (&mut r.namespace, "namespace"),
                (&mut r.name, "name"),
                (&mut r.uid, "uid"),
                (&mut r.resource_version, "resourceVersion"),
            ] {
                if field.is_empty() {
                    *field = text(key);
                }
            }
        }
        if event.level >= Level::Request {
            event.request_object = request_object;
        }
        if event.level >= Level::RequestResponse {
            event.response_object = response_object;
        }
        if omit_managed_fields {
            for v in [event.request_object.as_mut(), event.response_object.as_mut()].into_iter().flatten() {
                drop_managed_fields(v);
            }
        }
        event
    }
}

/// The event as one JSON line (without the newline), truncated as upstream when too big.
pub fn json_line(mut event: Event) -> String {
    let line = serde_json::to_string(&event).unwrap_or_default();
    if line.len() <= MAX_EVENT_BYTES || (event.request_object.is_none() && event.response_object.is_none()) {
        return line;
    }
    event.request_object = None;
    event.response_object = None;
    event.annotations.insert("audit.k8s.io/truncated".into(), "true".into());
    serde_json::to_string(&event).unwrap_or_default()
}

/// Upstream's `legacy` line (`EventString`).
pub fn legacy_line(event: &Event) -> String {
    let quoted = |v: &[String]| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(",");
    let (user, groups) = if event.user.username.is_empty() {
        ("<none>".to_string(), "<none>".to_string())
    } else if event.user.groups.is_empty() {
        (event.user.username.clone(), "<none>".to_string())
    } else {
        (event.user.username.clone(), quoted(&event.user.groups))
    };
    let (as_user, as_groups) = match &event.impersonated_user {
        Some(u) => (u.username.clone(), if u.groups.is_empty() { "<lookup>".into() } else { quoted(&u.groups) }),
        None => ("<self>".to_string(), "<lookup>".to_string()),
    };
    let namespace =
        event.object_ref.as_ref().map(|o| o.namespace.as_str()).filter(|n| !n.is_empty()).unwrap_or("<none>");
    let response = event.response_status.as_ref().map_or("<deferred>".to_string(), |s| s.code.to_string());
    let ip = event.source_ips.first().map_or("<unknown>", String::as_str);
    format!(
        "{} AUDIT: id={:?} stage={:?} ip={:?} method={:?} user={:?} groups={:?} as={:?} asgroups={:?} user-agent={:?} namespace={} uri={:?} response=\"{}\"",
        event.request_received_timestamp,
        event.audit_id,
        event.stage.as_str(),
        ip,
        event.verb,
        user,
        groups,
        as_user,
        as_groups,
        event.user_agent,
        namespace,
        event.request_uri,
        response
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn event(level: Level) -> Event {
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level,
            audit_id: "id-1".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/default/configmaps".into(),
            verb: "create".into(),
            user: User { username: "alice".into(), groups: vec!["g".into()], ..Default::default() },
            impersonated_user: None,
            source_ips: vec!["127.0.0.1".into()],
            user_agent: "kubectl".into(),
            object_ref: Some(ObjectReference {
                resource: "configmaps".into(),
                namespace: "default".into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            response_status: Some(ResponseStatus { code: 201, ..Default::default() }),
            request_object: None,
            response_object: None,
            request_received_timestamp: timestamp(
                chrono::DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap(),
            ),
            stage_timestamp: "t".into(),
            annotations: BTreeMap::new(),
        }
    }

    fn pending(level: Level, omit: bool) -> Pending {
        let obj = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "a", "managedFields": [{}]}});
        Pending {
            event: event(level),
            request_body: Some(bytes::Bytes::from(obj.to_string())),
            response_object: Some(obj),
            response_bytes: 0,
            status_body: None,
            omit_managed_fields: omit,
        }
    }

    #[test]
    fn levels_carry_their_objects() {
        let cases =
            [(Level::Metadata, false, false), (Level::Request, true, false), (Level::RequestResponse, true, true)];
        for (level, req, resp) in cases {
            let e = pending(level, false).finish();
            assert_eq!(e.object_ref.as_ref().unwrap().name, "a", "{level:?}: the name from the request object");
            assert_eq!(e.request_object.is_some(), req, "{level:?}");
            assert_eq!(e.response_object.is_some(), resp, "{level:?}");
        }
        let e = pending(Level::RequestResponse, true).finish();
        assert!(e.request_object.unwrap()["metadata"].get("managedFields").is_none());
        assert!(e.response_object.unwrap()["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn the_json_line_is_upstreams_shape() {
        let line = json_line(pending(Level::Metadata, false).finish());
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(v["auditID"], "id-1");
        assert_eq!(v["stage"], "ResponseComplete");
        assert_eq!(v["requestURI"], "/api/v1/namespaces/default/configmaps");
        assert_eq!(v["user"]["username"], "alice");
        assert_eq!(v["sourceIPs"][0], "127.0.0.1");
        assert_eq!(v["objectRef"]["apiVersion"], "v1");
        assert_eq!(v["responseStatus"], serde_json::json!({"metadata": {}, "code": 201}));
        assert_eq!(v["requestReceivedTimestamp"], "2023-11-14T22:13:20.123456Z");
        assert!(v.get("requestObject").is_none());
    }

    #[test]
    fn an_error_carries_its_status_and_an_oversized_event_loses_its_objects() {
        let mut p = pending(Level::RequestResponse, false);
        p.status_body = Some(bytes::Bytes::from(
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no","reason":"Forbidden","code":403}"#,
        ));
        let e = p.finish();
        let s = e.response_status.clone().unwrap();
        assert_eq!((s.status.as_str(), s.reason.as_str(), s.message.as_str()), ("Failure", "Forbidden", "no"));
        let mut big = pending(Level::RequestResponse, false);
        big.response_object = Some(serde_json::json!({"data": "x".repeat(MAX_EVENT_BYTES)}));
        let v: Value = serde_json::from_str(&json_line(big.finish())).unwrap();
        assert!(v.get("responseObject").is_none() && v.get("requestObject").is_none());
        assert_eq!(v["annotations"]["audit.k8s.io/truncated"], "true");
    }

    #[test]
    fn the_legacy_line() {
        let line = legacy_line(&event(Level::Metadata));
        assert_eq!(
            line,
            "2023-11-14T22:13:20.123456Z AUDIT: id=\"id-1\" stage=\"ResponseComplete\" ip=\"127.0.0.1\" method=\"create\" user=\"alice\" groups=\"\\\"g\\\"\" as=\"<self>\" asgroups=\"<lookup>\" user-agent=\"kubectl\" namespace=default uri=\"/api/v1/namespaces/default/configmaps\" response=\"201\""
        );
    }
}
