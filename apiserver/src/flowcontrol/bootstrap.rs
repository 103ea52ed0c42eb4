//! The API Priority and Fairness configuration objects every server ships, as kube-apiserver
//! 1.32 defines them (`k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap`).
//!
//! - **Mandatory** (4): the PriorityLevelConfigurations `exempt` and `catch-all` and the
//!   FlowSchemas `exempt` (group `system:masters`) and `catch-all` (everyone). The server
//!   always keeps their spec; the registry refuses writes that contradict it.
//! - **Suggested**: six further priority levels and eleven FlowSchemas that make a sensible
//!   default configuration. Users may take one over (annotation
//!   `apf.kubernetes.io/autoupdate-spec: "false"`); a deleted one is recreated.
//!
//! Every object carries `apf.kubernetes.io/autoupdate-spec: "true"`. The specs here are not
//! defaulted (e.g. `lendablePercent` of `exempt` is explicit, but queuing defaults are not
//! needed): the registry's defaulting makes no change to them, which a test pins.

use std::collections::BTreeMap;

use k8s_openapi::api::flowcontrol::v1::{
    ExemptPriorityLevelConfiguration, FlowDistinguisherMethod, FlowSchema, FlowSchemaSpec, GroupSubject, LimitResponse,
    LimitedPriorityLevelConfiguration, NonResourcePolicyRule, PolicyRulesWithSubjects, PriorityLevelConfiguration,
    PriorityLevelConfigurationReference, PriorityLevelConfigurationSpec, QueuingConfiguration, ResourcePolicyRule,
    ServiceAccountSubject, Subject, UserSubject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The annotation that says who owns a configuration object's spec: `"true"` the server,
/// `"false"` the users.
pub const AUTO_UPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";

/// Name of the mandatory exempt priority level (and FlowSchema).
pub const EXEMPT: &str = "exempt";
/// Name of the mandatory catch-all priority level (and FlowSchema).
pub const CATCH_ALL: &str = "catch-all";

const ALL: &str = "*";
const KUBE_SYSTEM: &str = "kube-system";
use crate::authn::user::{
    AUTHENTICATED_GROUP as AUTHENTICATED, KUBE_CONTROLLER_MANAGER_USER as KUBE_CONTROLLER_MANAGER,
    SERVICE_ACCOUNTS_GROUP as SERVICE_ACCOUNTS, UNAUTHENTICATED_GROUP as UNAUTHENTICATED,
};
use kustos_ca::users::NODES_GROUP as NODES;
const KUBE_SCHEDULER: &str = "system:kube-scheduler";
const COORDINATION: &str = "coordination.k8s.io";

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        annotations: Some(BTreeMap::from([(AUTO_UPDATE_ANNOTATION.to_string(), "true".to_string())])),
        ..Default::default()
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

fn groups(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|n| Subject {
            kind: "Group".into(),
            group: Some(GroupSubject { name: (*n).to_string() }),
            ..Default::default()
        })
        .collect()
}

fn users(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|n| Subject {
            kind: "User".into(),
            user: Some(UserSubject { name: (*n).to_string() }),
            ..Default::default()
        })
        .collect()
}

fn kube_system_service_accounts(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|n| Subject {
            kind: "ServiceAccount".into(),
            service_account: Some(ServiceAccountSubject { name: (*n).to_string(), namespace: KUBE_SYSTEM.into() }),
            ..Default::default()
        })
        .collect()
}

fn resource_rule(verbs: &[&str], api_groups: &[&str], resources: &[&str], cluster_scope: bool) -> ResourcePolicyRule {
    ResourcePolicyRule {
        verbs: strings(verbs),
        api_groups: strings(api_groups),
        resources: strings(resources),
        namespaces: Some(strings(&[ALL])),
        cluster_scope: Some(cluster_scope),
    }
}

fn non_resource_rule(verbs: &[&str], urls: &[&str]) -> NonResourcePolicyRule {
    NonResourcePolicyRule { verbs: strings(verbs), non_resource_urls: strings(urls) }
}

/// Every verb on every resource, namespaced or not, and every non-resource URL.
fn everything(subjects: Vec<Subject>) -> PolicyRulesWithSubjects {
    PolicyRulesWithSubjects {
        subjects,
        resource_rules: Some(vec![resource_rule(&[ALL], &[ALL], &[ALL], true)]),
        non_resource_rules: Some(vec![non_resource_rule(&[ALL], &[ALL])]),
    }
}

fn flow_schema(
    name: &str,
    priority_level: &str,
    precedence: i32,
    distinguisher: Option<&str>,
    rules: Vec<PolicyRulesWithSubjects>,
) -> FlowSchema {
    FlowSchema {
        metadata: meta(name),
        spec: FlowSchemaSpec {
            priority_level_configuration: PriorityLevelConfigurationReference { name: priority_level.to_string() },
            matching_precedence: Some(precedence),
            distinguisher_method: distinguisher.map(|t| FlowDistinguisherMethod { type_: t.to_string() }),
            rules: Some(rules),
        },
        status: None,
    }
}

/// A Limited level that queues: shares, lendable percent, queues, hand size, queue length.
fn queuing_level(
    name: &str,
    shares: i32,
    lendable: i32,
    queues: i32,
    hand: i32,
    length: i32,
) -> PriorityLevelConfiguration {
    PriorityLevelConfiguration {
        metadata: meta(name),
        spec: PriorityLevelConfigurationSpec {
            type_: "Limited".into(),
            limited: Some(LimitedPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(shares),
                lendable_percent: Some(lendable),
                borrowing_limit_percent: None,
                limit_response: LimitResponse {
                    type_: "Queue".into(),
                    queuing: Some(QueuingConfiguration {
                        queues: Some(queues),
                        hand_size: Some(hand),
                        queue_length_limit: Some(length),
                    }),
                },
            }),
            exempt: None,
        },
        status: None,
    }
}

/// PL `exempt`: never queued, takes no share of the server's capacity.
pub fn priority_level_exempt() -> PriorityLevelConfiguration {
    PriorityLevelConfiguration {
        metadata: meta(EXEMPT),
        spec: PriorityLevelConfigurationSpec {
            type_: "Exempt".into(),
            exempt: Some(ExemptPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(0),
                lendable_percent: Some(0),
            }),
            limited: None,
        },
        status: None,
    }
}

/// PL `catch-all`: a small share and no queuing (excess is rejected at once).
pub fn priority_level_catch_all() -> PriorityLevelConfiguration {
    PriorityLevelConfiguration {
        metadata: meta(CATCH_ALL),
        spec: PriorityLevelConfigurationSpec {
            type_: "Limited".into(),
            limited: Some(LimitedPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(5),
                lendable_percent: Some(0),
                borrowing_limit_percent: None,
                limit_response: LimitResponse { type_: "Reject".into(), queuing: None },
            }),
            exempt: None,
        },
        status: None,
    }
}

/// The mandatory priority levels, `exempt` last (as upstream orders them).
pub fn mandatory_priority_levels() -> Vec<PriorityLevelConfiguration> {
    vec![priority_level_catch_all(), priority_level_exempt()]
}

/// The mandatory FlowSchemas: `exempt` (precedence 1) and `catch-all` (10000).
pub fn mandatory_flow_schemas() -> Vec<FlowSchema> {
    vec![
        flow_schema(EXEMPT, EXEMPT, 1, None, vec![everything(groups(&[crate::authn::MASTERS_GROUP]))]),
        flow_schema(
            CATCH_ALL,
            CATCH_ALL,
            10000,
            Some("ByUser"),
            vec![everything(groups(&[UNAUTHENTICATED, AUTHENTICATED]))],
        ),
    ]
}

/// The suggested priority levels.
pub fn suggested_priority_levels() -> Vec<PriorityLevelConfiguration> {
    vec![
        queuing_level("system", 30, 33, 64, 6, 50),
        queuing_level("node-high", 40, 25, 64, 6, 50),
        queuing_level("leader-election", 10, 0, 16, 4, 50),
        queuing_level("workload-high", 40, 50, 128, 6, 50),
        queuing_level("workload-low", 100, 90, 128, 6, 50),
        queuing_level("global-default", 20, 50, 128, 6, 50),
    ]
}

/// The suggested FlowSchemas.
pub fn suggested_flow_schemas() -> Vec<FlowSchema> {
    let rw = ["get", "create", "update"];
    let kube_system_all = || kube_system_service_accounts(&[ALL]);
    vec![
        flow_schema("system-nodes", "system", 500, Some("ByUser"), vec![everything(groups(&[NODES]))]),
        flow_schema(
            "system-node-high",
            "node-high",
            400,
            Some("ByUser"),
            vec![PolicyRulesWithSubjects {
                subjects: groups(&[NODES]),
                resource_rules: Some(vec![
                    resource_rule(&[ALL], &[""], &["nodes", "nodes/status"], true),
                    resource_rule(&[ALL], &[COORDINATION], &["leases"], false),
                ]),
                non_resource_rules: None,
            }],
        ),
        flow_schema(
            "probes",
            EXEMPT,
            2,
            None,
            vec![PolicyRulesWithSubjects {
                subjects: groups(&[UNAUTHENTICATED, AUTHENTICATED]),
                resource_rules: None,
                non_resource_rules: Some(vec![non_resource_rule(&["get"], &["/healthz", "/readyz", "/livez"])]),
            }],
        ),
        flow_schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            vec![PolicyRulesWithSubjects {
                subjects: [users(&[KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER]), kube_system_all()].concat(),
                resource_rules: Some(vec![resource_rule(&rw, &[COORDINATION], &["leases"], false)]),
                non_resource_rules: None,
            }],
        ),
        flow_schema(
            "workload-leader-election",
            "leader-election",
            200,
            Some("ByUser"),
            vec![PolicyRulesWithSubjects {
                subjects: kube_system_all(),
                resource_rules: Some(vec![
                    resource_rule(&rw, &[""], &["endpoints", "configmaps"], false),
                    resource_rule(&rw, &[COORDINATION], &["leases"], false),
                ]),
                non_resource_rules: None,
            }],
        ),
        flow_schema(
            "endpoint-controller",
            "workload-high",
            150,
            Some("ByUser"),
            vec![PolicyRulesWithSubjects {
                subjects: [
                    users(&[KUBE_CONTROLLER_MANAGER]),
                    kube_system_service_accounts(&["endpoint-controller", "endpointslicemirroring-controller"]),
                ]
                .concat(),
                resource_rules: Some(vec![resource_rule(&rw, &[""], &["endpoints"], false)]),
                non_resource_rules: None,
            }],
        ),
        flow_schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            vec![everything(users(&[KUBE_CONTROLLER_MANAGER]))],
        ),
        flow_schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some("ByNamespace"),
            vec![everything(users(&[KUBE_SCHEDULER]))],
        ),
        flow_schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            vec![everything(kube_system_all())],
        ),
        flow_schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            vec![everything(groups(&[SERVICE_ACCOUNTS]))],
        ),
        flow_schema(
            "global-default",
            "global-default",
            9900,
            Some("ByUser"),
            vec![everything(groups(&[UNAUTHENTICATED, AUTHENTICATED]))],
        ),
    ]
}

/// The mandatory FlowSchema of that name, if it is one.
pub fn mandatory_flow_schema(name: &str) -> Option<FlowSchema> {
    mandatory_flow_schemas().into_iter().find(|f| f.metadata.name.as_deref() == Some(name))
}

/// The mandatory priority level of that name, if it is one.
pub fn mandatory_priority_level(name: &str) -> Option<PriorityLevelConfiguration> {
    mandatory_priority_levels().into_iter().find(|p| p.metadata.name.as_deref() == Some(name))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn name_of(m: &ObjectMeta) -> &str {
        m.name.as_deref().unwrap()
    }

    fn level(name: &str) -> PriorityLevelConfiguration {
        mandatory_priority_levels()
            .into_iter()
            .chain(suggested_priority_levels())
            .find(|p| name_of(&p.metadata) == name)
            .unwrap()
    }

    fn schema(name: &str) -> FlowSchema {
        mandatory_flow_schemas()
            .into_iter()
            .chain(suggested_flow_schemas())
            .find(|f| name_of(&f.metadata) == name)
            .unwrap()
    }

    fn shares(p: &PriorityLevelConfiguration) -> i32 {
        p.spec.limited.as_ref().and_then(|l| l.nominal_concurrency_shares).unwrap_or(0)
    }

    /// The spec's worked example: ServerCL 600 split by the Limited levels' shares
    /// (ceil(600·NCS/ΣNCS)), ΣNCS = 245.
    #[test]
    fn nominal_concurrency_example_from_the_shares() {
        let limited: Vec<PriorityLevelConfiguration> = mandatory_priority_levels()
            .into_iter()
            .chain(suggested_priority_levels())
            .filter(|p| p.spec.type_ == "Limited")
            .collect();
        let sum: i32 = limited.iter().map(shares).sum();
        assert_eq!(sum, 245, "sum of shares");
        let cases = [
            ("catch-all", 13),
            ("system", 74),
            ("node-high", 98),
            ("leader-election", 25),
            ("workload-high", 98),
            ("workload-low", 245),
            ("global-default", 49),
        ];
        for (name, want) in cases {
            let ncs = shares(&level(name));
            let nominal = (600 * ncs + sum - 1) / sum;
            assert_eq!(nominal, want, "{name}: NominalCL");
        }
    }

    #[test]
    fn key_values() {
        let precedence = |n: &str| schema(n).spec.matching_precedence.unwrap();
        let pl = |n: &str| schema(n).spec.priority_level_configuration.name;
        let dm = |n: &str| schema(n).spec.distinguisher_method.map(|d| d.type_);
        let cases: &[(&str, i32, &str, Option<&str>)] = &[
            ("exempt", 1, "exempt", None),
            ("probes", 2, "exempt", None),
            ("system-leader-election", 100, "leader-election", Some("ByUser")),
            ("endpoint-controller", 150, "workload-high", Some("ByUser")),
            ("workload-leader-election", 200, "leader-election", Some("ByUser")),
            ("system-node-high", 400, "node-high", Some("ByUser")),
            ("system-nodes", 500, "system", Some("ByUser")),
            ("kube-controller-manager", 800, "workload-high", Some("ByNamespace")),
            ("kube-scheduler", 800, "workload-high", Some("ByNamespace")),
            ("kube-system-service-accounts", 900, "workload-high", Some("ByNamespace")),
            ("service-accounts", 9000, "workload-low", Some("ByUser")),
            ("global-default", 9900, "global-default", Some("ByUser")),
            ("catch-all", 10000, "catch-all", Some("ByUser")),
        ];
        for (name, prec, level_name, distinguisher) in cases {
            assert_eq!(precedence(name), *prec, "{name}: precedence");
            assert_eq!(pl(name), *level_name, "{name}: priority level");
            assert_eq!(dm(name).as_deref(), *distinguisher, "{name}: distinguisher");
        }
        assert_eq!(suggested_flow_schemas().len(), 11, "suggested FlowSchemas");
        assert_eq!(suggested_priority_levels().len(), 6, "suggested priority levels");

        let catch_all = level("catch-all").spec;
        let limited = catch_all.limited.unwrap();
        assert_eq!(limited.limit_response.type_, "Reject", "catch-all rejects");
        assert_eq!(limited.nominal_concurrency_shares, Some(5), "catch-all shares");
        let exempt = level("exempt").spec;
        assert_eq!(exempt.type_, "Exempt", "exempt type");
        assert!(exempt.limited.is_none(), "exempt has no limited section");
        let le = level("leader-election").spec.limited.unwrap();
        let q = le.limit_response.queuing.unwrap();
        assert_eq!(
            (q.queues, q.hand_size, q.queue_length_limit),
            (Some(16), Some(4), Some(50)),
            "leader-election queuing"
        );

        let subjects = |n: &str| schema(n).spec.rules.unwrap()[0].subjects.clone();
        assert_eq!(subjects("exempt")[0].group.as_ref().unwrap().name, "system:masters", "exempt subject");
        assert_eq!(
            subjects("service-accounts")[0].group.as_ref().unwrap().name,
            "system:serviceaccounts",
            "sa subject"
        );
    }

    #[test]
    fn every_object_is_annotated_for_auto_update() {
        let metas: Vec<ObjectMeta> = mandatory_flow_schemas()
            .into_iter()
            .chain(suggested_flow_schemas())
            .map(|f| f.metadata)
            .chain(mandatory_priority_levels().into_iter().chain(suggested_priority_levels()).map(|p| p.metadata))
            .collect();
        assert_eq!(metas.len(), 4 + 6 + 11, "object count");
        for m in metas {
            let value = m.annotations.as_ref().and_then(|a| a.get(AUTO_UPDATE_ANNOTATION)).map(String::as_str);
            assert_eq!(value, Some("true"), "{}: annotation", name_of(&m));
        }
        assert!(mandatory_flow_schema("exempt").is_some(), "mandatory lookup");
        assert!(mandatory_flow_schema("probes").is_none(), "suggested is not mandatory");
        assert!(mandatory_priority_level("catch-all").is_some(), "mandatory level lookup");
        assert!(mandatory_priority_level("global-default").is_none(), "suggested level is not mandatory");
    }
}
