//! The configuration the dispatcher works from: FlowSchemas and PriorityLevelConfigurations
//! digested into classification order and per-level settings. Pure.
//!
//! As upstream: a FlowSchema whose priority level does not exist ("dangling") is not used
//! for classification, and the mandatory objects (`exempt` and `catch-all`, schema and level)
//! are always in effect — from storage when there, otherwise their built-in definitions — so
//! every request is classified even while someone has deleted them.

use k8s_openapi::api::flowcontrol::v1 as fc;

use super::classify;
use super::limits::LevelConfig;
use super::queueset::Queuing;

/// One FlowSchema in effect.
#[derive(Debug, Clone)]
pub struct SchemaEntry {
    pub name: String,
    pub uid: String,
    pub spec: fc::FlowSchemaSpec,
}

impl SchemaEntry {
    pub fn level(&self) -> &str {
        &self.spec.priority_level_configuration.name
    }
}

/// One priority level in effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelEntry {
    pub name: String,
    pub uid: String,
    pub config: LevelConfig,
    /// None: exempt, or limited with `limitResponse.type: Reject`.
    pub queuing: Option<Queuing>,
}

impl LevelEntry {
    pub fn exempt(&self) -> bool {
        self.config.exempt
    }
}

/// The digested configuration.
#[derive(Debug, Clone, Default)]
pub struct Digest {
    /// Sorted by matching precedence, then name; only schemas whose level exists.
    pub schemas: Vec<SchemaEntry>,
    /// Sorted by name.
    pub levels: Vec<LevelEntry>,
}

impl Digest {
    pub fn level(&self, name: &str) -> Option<&LevelEntry> {
        self.levels.iter().find(|l| l.name == name)
    }
}

fn uid(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.uid.clone().unwrap_or_default()
}

/// A level's settings with v1's defaults for anything unset.
pub fn level_entry(pl: &fc::PriorityLevelConfiguration) -> Option<LevelEntry> {
    let name = pl.metadata.name.clone()?;
    let spec = &pl.spec;
    let uid = uid(&pl.metadata);
    if spec.type_ == "Exempt" {
        let e = spec.exempt.clone().unwrap_or_default();
        let config = LevelConfig {
            name: name.clone(),
            exempt: true,
            nominal_shares: e.nominal_concurrency_shares.unwrap_or(0).max(0) as u32,
            lendable_percent: e.lendable_percent.unwrap_or(0).clamp(0, 100) as u32,
            borrowing_limit_percent: None,
        };
        return Some(LevelEntry { name, uid, config, queuing: None });
    }
    let l = spec.limited.clone().unwrap_or_default();
    let config = LevelConfig {
        name: name.clone(),
        exempt: false,
        nominal_shares: l.nominal_concurrency_shares.unwrap_or(30).max(0) as u32,
        lendable_percent: l.lendable_percent.unwrap_or(0).clamp(0, 100) as u32,
        borrowing_limit_percent: l.borrowing_limit_percent.map(|b| b.max(0) as u32),
    };
    let response = l.limit_response;
    let queuing = (response.type_ == "Queue").then(|| {
        let q = response.queuing.unwrap_or_default();
        Queuing {
            queues: q.queues.unwrap_or(64).max(1) as u32,
            hand_size: q.hand_size.unwrap_or(8).max(1) as u32,
            queue_length_limit: q.queue_length_limit.unwrap_or(50).max(1) as u32,
        }
    });
    Some(LevelEntry { name, uid, config, queuing })
}

/// Digest stored objects, adding the built-in `mandatory` ones whose names are missing.
pub fn digest(
    schemas: &[fc::FlowSchema],
    levels: &[fc::PriorityLevelConfiguration],
    mandatory_schemas: &[fc::FlowSchema],
    mandatory_levels: &[fc::PriorityLevelConfiguration],
) -> Digest {
    let mut out_levels: Vec<LevelEntry> = levels.iter().filter_map(level_entry).collect();
    for m in mandatory_levels {
        if let Some(e) = level_entry(m) {
            if !out_levels.iter().any(|l| l.name == e.name) {
                out_levels.push(e);
            }
        }
    }
    out_levels.sort_by(|a, b| a.name.cmp(&b.name));
    let entry = |fs: &fc::FlowSchema| -> Option<SchemaEntry> {
        Some(SchemaEntry { name: fs.metadata.name.clone()?, uid: uid(&fs.metadata), spec: fs.spec.clone() })
    };
    let mut out_schemas: Vec<SchemaEntry> = schemas.iter().filter_map(entry).collect();
    for m in mandatory_schemas {
        if let Some(e) = entry(m) {
            if !out_schemas.iter().any(|s| s.name == e.name) {
                out_schemas.push(e);
            }
        }
    }
    out_schemas.retain(|s| out_levels.iter().any(|l| l.name == s.level()));
    out_schemas.sort_by_cached_key(|s| classify::precedence_key(&s.name, &s.spec));
    Digest { schemas: out_schemas, levels: out_levels }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fs(name: &str, uid: &str, level: &str, precedence: i32) -> fc::FlowSchema {
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": uid},
            "spec": {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence,
                "rules": [{"subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}
        }))
        .unwrap()
    }

    fn pl(name: &str, spec: serde_json::Value) -> fc::PriorityLevelConfiguration {
        serde_json::from_value(json!({"metadata": {"name": name, "uid": format!("uid-{name}")}, "spec": spec})).unwrap()
    }

    #[test]
    fn level_defaults() {
        let cases = [
            ("limited, nothing set", json!({"type": "Limited", "limited": {}}), false, 30, 0, None, None),
            (
                "explicit zero shares",
                json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 0}}),
                false,
                0,
                0,
                None,
                None,
            ),
            (
                "queue defaults",
                json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 5, "lendablePercent": 50,
                    "borrowingLimitPercent": 200, "limitResponse": {"type": "Queue"}}}),
                false,
                5,
                50,
                Some(200),
                Some((64, 8, 50)),
            ),
            (
                "queue explicit",
                json!({"type": "Limited", "limited": {"limitResponse": {"type": "Queue",
                    "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 10}}}}),
                false,
                30,
                0,
                None,
                Some((16, 4, 10)),
            ),
            (
                "exempt",
                json!({"type": "Exempt", "exempt": {"nominalConcurrencyShares": 3, "lendablePercent": 10}}),
                true,
                3,
                10,
                None,
                None,
            ),
            ("exempt unset", json!({"type": "Exempt"}), true, 0, 0, None, None),
        ];
        for (name, spec, exempt, shares, lend, borrow, queuing) in cases {
            let e = level_entry(&pl("x", spec)).unwrap();
            assert_eq!(e.exempt(), exempt, "{name}");
            assert_eq!(e.config.nominal_shares, shares, "{name}");
            assert_eq!(e.config.lendable_percent, lend, "{name}");
            assert_eq!(e.config.borrowing_limit_percent, borrow, "{name}");
            let got = e.queuing.map(|q| (q.queues, q.hand_size, q.queue_length_limit));
            assert_eq!(got, queuing, "{name}");
        }
    }

    #[test]
    fn digest_orders_drops_dangling_and_fills_mandatory() {
        let mandatory_levels = [
            pl("exempt", json!({"type": "Exempt"})),
            pl("catch-all", json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 5}})),
        ];
        let mandatory_schemas = [fs("exempt", "", "exempt", 1), fs("catch-all", "", "catch-all", 10000)];
        let stored_levels =
            [pl("exempt", json!({"type": "Exempt"})), pl("global-default", json!({"type": "Limited", "limited": {}}))];
        let stored = [
            fs("global-default", "u1", "global-default", 9900),
            fs("dangling", "u2", "missing", 50),
            fs("b", "u3", "global-default", 200),
            fs("a", "u4", "global-default", 200),
            fs("exempt", "u5", "exempt", 1),
        ];
        let d = digest(&stored, &stored_levels, &mandatory_schemas, &mandatory_levels);
        let names: Vec<&str> = d.schemas.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["exempt", "a", "b", "global-default", "catch-all"],
            "order, dangling dropped, catch-all added"
        );
        assert_eq!(d.schemas[0].uid, "u5", "the stored exempt schema wins over the built-in one");
        let levels: Vec<&str> = d.levels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(levels, ["catch-all", "exempt", "global-default"], "levels sorted, catch-all added");
        assert_eq!(d.level("exempt").unwrap().uid, "uid-exempt", "stored level kept");
    }
}
