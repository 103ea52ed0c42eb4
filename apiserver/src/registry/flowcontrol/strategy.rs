//! The strategies of `flowschemas` and `prioritylevelconfigurations`: one generic strategy
//! ([`FlowStrategy`]) with the defaults and validation of each kind ([`FlowKind`], from the
//! parent module), the `status` subresource, and the Tables of upstream's printers.

use std::marker::PhantomData;

use k8s_openapi::api::flowcontrol::v1 as fcv1;
use serde_json::{json, Value};

use super::{default_flow_schema, default_priority_level, validate_flow_schema, validate_priority_level};
use crate::error::FieldError;
use crate::registry::shared::{age_column, col, creation_age, get_at, str_at};
use crate::registry::{typed_roundtrip, Column, StatusStrategy, Strategy, TableStrategy, WriteStrategy};

/// Create starts with an empty status; an update of the main resource keeps the stored one.
fn reset_status(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.insert("status".into(), json!({}));
    }
}

fn keep(new: &mut Value, old: &Value, key: &str) {
    if let Some(m) = new.as_object_mut() {
        match old.get(key) {
            Some(v) => m.insert(key.into(), v.clone()),
            None => m.remove(key),
        };
    }
}

/// What tells the two kinds apart: their typed form, their defaults and their validation.
/// Everything else of their strategies is one ([`FlowStrategy`]), but the Tables.
pub trait FlowKind: Send + Sync + 'static {
    type Typed: serde::de::DeserializeOwned + serde::Serialize;
    fn default(obj: &mut Value);
    fn validate(obj: &Value) -> Vec<FieldError>;
}

/// FlowSchemas.
pub struct FlowSchemas;

impl FlowKind for FlowSchemas {
    type Typed = fcv1::FlowSchema;
    fn default(obj: &mut Value) {
        default_flow_schema(obj);
    }
    fn validate(obj: &Value) -> Vec<FieldError> {
        validate_flow_schema(obj)
    }
}

/// PriorityLevelConfigurations.
pub struct PriorityLevels;

impl FlowKind for PriorityLevels {
    type Typed = fcv1::PriorityLevelConfiguration;
    fn default(obj: &mut Value) {
        default_priority_level(obj);
    }
    fn validate(obj: &Value) -> Vec<FieldError> {
        validate_priority_level(obj)
    }
}

/// The strategy of a flow-control kind `K` and its `status` subresource.
pub struct FlowStrategy<K>(PhantomData<K>);

impl<K> FlowStrategy<K> {
    pub const fn new() -> Self {
        FlowStrategy(PhantomData)
    }
}

impl<K> Default for FlowStrategy<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// `flowschemas` (and `flowschemas/status`).
pub type FlowSchemaStrategy = FlowStrategy<FlowSchemas>;
/// `prioritylevelconfigurations` (and `prioritylevelconfigurations/status`).
pub type PriorityLevelConfigurationStrategy = FlowStrategy<PriorityLevels>;

impl<K: FlowKind> Strategy for FlowStrategy<K>
where
    Self: TableStrategy,
{
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<K::Typed>(obj)
    }

    fn write(&self) -> Option<&dyn WriteStrategy> {
        Some(self)
    }

    fn status(&self) -> Option<&dyn StatusStrategy> {
        Some(self)
    }

    fn table(&self) -> Option<&dyn TableStrategy> {
        Some(self)
    }
}

impl<K: FlowKind> WriteStrategy for FlowStrategy<K> {
    fn prepare_for_create(&self, obj: &mut Value) {
        K::default(obj);
        reset_status(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        K::default(new);
        keep(new, old, "status");
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        K::validate(obj)
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

impl<K: FlowKind> StatusStrategy for FlowStrategy<K> {
    fn prepare_for_subresource(&self, _sub: &str, new: &mut Value, old: &Value) {
        keep(new, old, "spec");
    }

    fn reset_fields(&self, sub: &str) -> crate::registry::ResetFields {
        match sub {
            "status" => &[&["metadata"], &["spec"]],
            _ => crate::registry::status_reset_fields(sub),
        }
    }
}

impl TableStrategy for FlowSchemaStrategy {
    /// Upstream's printer lists FlowSchemas in matching order: precedence, then name.
    fn order_table_rows(&self, objs: &mut Vec<&Value>) {
        let key = |o: &Value| {
            let precedence = get_at(o, &["spec", "matchingPrecedence"]).and_then(Value::as_i64).unwrap_or(1000);
            (precedence, str_at(o, &["metadata", "name"]).unwrap_or("").to_string())
        };
        objs.sort_by_cached_key(|o| key(o));
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            col("PriorityLevel", "`name` is the name of the priority level configuration being referenced Required.", 0),
            col(
                "MatchingPrecedence",
                "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request. The chosen FlowSchema is among those with the numerically lowest (which we take to be logically highest) MatchingPrecedence.  Each MatchingPrecedence value must be ranged in [1,10000]. Note that if the precedence is not specified, it will be set to 1000 as default.",
                0,
            ),
            col(
                "DistinguisherMethod",
                "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema. `nil` specifies that the distinguisher is disabled and thus will always be the empty string.",
                0,
            ),
            age_column(),
            col("MissingPL", "references a broken or non-existent PriorityLevelConfiguration", 0),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let pl = str_at(obj, &["spec", "priorityLevelConfiguration", "name"]).unwrap_or("");
        let precedence = get_at(obj, &["spec", "matchingPrecedence"]).and_then(Value::as_i64).unwrap_or(0);
        let dm = str_at(obj, &["spec", "distinguisherMethod", "type"]).unwrap_or("<none>");
        let missing = get_at(obj, &["status", "conditions"])
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Dangling")))
            .map_or("?", |c| c.get("status").and_then(Value::as_str).unwrap_or(""));
        vec![json!(pl), json!(precedence), json!(dm), creation_age(obj, now), json!(missing)]
    }
}

impl TableStrategy for PriorityLevelConfigurationStrategy {
    fn columns(&self) -> Vec<Column> {
        vec![
            col(
                "Type",
                "`type` indicates whether this priority level is subject to limitation on request execution.  A value of `\"Exempt\"` means that requests of this priority level are not subject to a limit (and thus are never queued) and do not detract from the capacity made available to other priority levels.  A value of `\"Limited\"` means that (a) requests of this priority level _are_ subject to limits and (b) some of the server's limited capacity is made available exclusively to this priority level. Required.",
                0,
            ),
            col(
                "NominalConcurrencyShares",
                "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level. This is the number of execution seats available at this priority level. This is used both for requests dispatched from this priority level as well as requests dispatched from other priority levels borrowing seats from this level. The server's concurrency limit (ServerCL) is divided among the Limited priority levels in proportion to their NCS values:\n\nNominalCL(i)  = ceil( ServerCL * NCS(i) / sum_ncs ) sum_ncs = sum[priority level k] NCS(k)\n\nBigger numbers mean a larger nominal concurrency limit, at the expense of every other priority level.\n\nIf not specified, this field defaults to a value of 30.\n\nSetting this field to zero supports the construction of a \"jail\" for this priority level that is used to hold some request(s)",
                0,
            ),
            col(
                "Queues",
                "`queues` is the number of queues for this priority level. The queues exist independently at each apiserver. The value must be positive.  Setting it to 1 effectively precludes shufflesharding and thus makes the distinguisher method of associated flow schemas irrelevant.  This field has a default value of 64.",
                0,
            ),
            col(
                "HandSize",
                "`handSize` is a small positive number that configures the shuffle sharding of requests into queues.  When enqueuing a request at this priority level the request's flow identifier (a string pair) is hashed and the hash value is used to shuffle the list of queues and deal a hand of the size specified here.  The request is put into one of the shortest queues in that hand. `handSize` must be no larger than `queues`, and should be significantly smaller (so that a few heavy flows do not saturate most of the queues).  See the user-facing documentation for more extensive guidance on setting this field.  This field has a default value of 8.",
                0,
            ),
            col(
                "QueueLengthLimit",
                "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time; excess requests are rejected.  This value must be positive.  If not specified, it will be defaulted to 50.",
                0,
            ),
            age_column(),
        ]
    }

    fn cells(&self, obj: &Value, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        let type_ = str_at(obj, &["spec", "type"]).unwrap_or("");
        let none = json!("<none>");
        let (mut ncs, mut queues, mut hand, mut length) = (none.clone(), none.clone(), none.clone(), none);
        if let Some(limited) = get_at(obj, &["spec", "limited"]).filter(|l| l.is_object()) {
            ncs = json!(limited.get("nominalConcurrencyShares").and_then(Value::as_i64).unwrap_or(0));
            if let Some(q) = get_at(limited, &["limitResponse", "queuing"]).filter(|q| q.is_object()) {
                let int = |k: &str| json!(q.get(k).and_then(Value::as_i64).unwrap_or(0));
                (queues, hand, length) = (int("queues"), int("handSize"), int("queueLengthLimit"));
            }
        }
        vec![json!(type_), ncs, queues, hand, length, creation_age(obj, now)]
    }
}
