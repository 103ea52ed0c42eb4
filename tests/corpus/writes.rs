//! Writes: JSON patches (self-copying bombs), merge and strategic-merge patches (deep
//! nulls, directives), server-side apply (long field managers, huge list keys, deep
//! objects), forged managedFields, and object fields a node controls (labels, names). A
//! node sends them to its own Lease, Node and mirror pods.

use serde_json::json;

use super::*;

fn lease_path(ctx: &Ctx) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}", ctx.node)
}

fn mirror_pod(
    ctx: &Ctx,
    name: &str,
    extra_meta: serde_json::Value,
    containers: serde_json::Value,
) -> serde_json::Value {
    let mut meta = json!({"name": name, "namespace": ctx.ns, "annotations": {"kubernetes.io/config.mirror": "x"},
        "ownerReferences": [ctx.node_owner()]});
    if let (Some(m), Some(extra)) = (meta.as_object_mut(), extra_meta.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": ctx.node, "containers": containers}})
}

pub fn cases(ctx: &Ctx) -> Vec<Case> {
    let mut c = Vec::new();
    json_patches(&mut c, ctx);
    merge_patches(&mut c, ctx);
    apply(&mut c, ctx);
    managed_fields(&mut c, ctx);
    fields(&mut c, ctx);
    validation_costs(&mut c, ctx);
    c
}

fn json_patches(c: &mut Vec<Case>, ctx: &Ctx) {
    let lease = lease_path(ctx);
    let p = |name: &str, ops: serde_json::Value, expect: &[u16]| {
        Case::patch(name, Who::Node, lease.clone(), JSON_PATCH, ops.to_string()).expect(expect)
    };
    let self_copies: Vec<_> =
        (0..30).map(|i| json!({"op": "copy", "from": "", "path": format!("/spec/x{i}")})).collect();
    c.push(p("json-patch: 30 copies of the whole object into itself", json!(self_copies), &[422]));
    let mut grow = vec![json!({"op": "add", "path": "/metadata/annotations", "value": {"a": "x".repeat(100_000)}})];
    grow.extend((0..28).map(
        |i| json!({"op": "copy", "from": "/metadata/annotations", "path": format!("/metadata/annotations/a{i}")}),
    ));
    c.push(p("json-patch: a 100 KB value doubled 28 times", json!(grow), &[422]));
    let mut fan = vec![json!({"op": "add", "path": "/spec/holderIdentity", "value": "x".repeat(60_000)})];
    fan.extend(
        (0..9_000).map(|_| json!({"op": "copy", "from": "/spec/holderIdentity", "path": "/spec/holderIdentity"})),
    );
    c.push(p("json-patch: 9,000 copies of a 60 KB string over itself", json!(fan), &[422]));
    let moves: Vec<_> = (0..9_999)
        .map(|i| {
            if i % 2 == 0 {
                json!({"op": "move", "from": "/spec", "path": "/metadata/x"})
            } else {
                json!({"op": "move", "from": "/metadata/x", "path": "/spec"})
            }
        })
        .collect();
    c.push(p("json-patch: 9,999 moves of spec back and forth", json!(moves), &[200, 422]));
    c.push(p(
        "json-patch: 10,001 operations",
        json!(vec![json!({"op": "test", "path": "/kind", "value": "Lease"}); 10_001]),
        &[413],
    ));
    c.push(p(
        "json-patch: a 1 MB pointer",
        json!([{"op": "test", "path": format!("/spec/{}", "a/".repeat(500_000)), "value": 1}]),
        &[422],
    ));
    c.push(p(
        "json-patch: a pointer of 300k ~1 escapes",
        json!([{"op": "add", "path": format!("/metadata/labels/{}", "~1".repeat(300_000)), "value": "v"}]),
        &[422],
    ));
    let mut deep_value = json!(1);
    for _ in 0..120 {
        deep_value = json!({"a": deep_value});
    }
    let deep: Vec<_> =
        (0..80).map(|i| json!({"op": "add", "path": format!("/spec/d{i}"), "value": deep_value})).collect();
    c.push(p("json-patch: 80 values 120 levels deep", json!(deep), &[200, 422]));
    c.push(p("json-patch: index 2^64 and -1", json!([{"op": "add", "path": "/metadata/finalizers", "value": []}, {"op": "add", "path": "/metadata/finalizers/18446744073709551616", "value": "a"}, {"op": "add", "path": "/metadata/finalizers/-1", "value": "a"}]), &[422]));
}

fn merge_patches(c: &mut Vec<Case>, ctx: &Ctx) {
    let lease = lease_path(ctx);
    let n = 100_000;
    c.push(
        Case::patch(
            "merge-patch: nulls nested 100k deep",
            Who::Node,
            lease.clone(),
            MERGE,
            format!("{{\"spec\":{}null{}}}", "{\"a\":".repeat(n), "}".repeat(n)),
        )
        .expect(&[400]),
    );
    let nulls = (0..200_000).map(|i| format!("\"k{i}\":null")).collect::<Vec<_>>().join(",");
    c.push(
        Case::patch(
            "merge-patch: 200k null keys",
            Who::Node,
            lease.clone(),
            MERGE,
            format!("{{\"spec\":{{{nulls}}}}}"),
        )
        .expect(&[200]),
    );
    let mut deep_nulls = json!(null);
    for _ in 0..125 {
        deep_nulls = json!({"a": deep_nulls, "b": null});
    }
    c.push(
        Case::patch(
            "strategic: nulls 125 levels deep",
            Who::Node,
            lease.clone(),
            STRATEGIC,
            json!({"spec": deep_nulls}).to_string(),
        )
        .expect(&[200, 422]),
    );
    let list = |n: usize| (0..n).map(|i| format!("\"f{i}\"")).collect::<Vec<_>>().join(",");
    c.push(
        Case::patch(
            "strategic: $setElementOrder of 300k finalizers",
            Who::Node,
            lease.clone(),
            STRATEGIC,
            format!("{{\"metadata\":{{\"$setElementOrder/finalizers\":[{}]}}}}", list(300_000)),
        )
        .expect(&[200, 400, 422]),
    );
    c.push(
        Case::patch(
            "strategic: $deleteFromPrimitiveList of 300k",
            Who::Node,
            lease.clone(),
            STRATEGIC,
            format!("{{\"metadata\":{{\"$deleteFromPrimitiveList/finalizers\":[{}]}}}}", list(300_000)),
        )
        .expect(&[200, 400, 422]),
    );
    c.push(
        Case::patch(
            "strategic: $retainKeys of 300k",
            Who::Node,
            lease.clone(),
            STRATEGIC,
            format!("{{\"$retainKeys\":[{}],\"spec\":{{}}}}", list(300_000)),
        )
        .expect(&[200, 400, 422]),
    );
    let deletes =
        (0..50_000).map(|i| format!("{{\"$patch\":\"delete\",\"uid\":\"{i}\"}}")).collect::<Vec<_>>().join(",");
    c.push(
        Case::patch(
            "strategic: 50k $patch delete directives",
            Who::Node,
            lease.clone(),
            STRATEGIC,
            format!("{{\"metadata\":{{\"ownerReferences\":[{deletes}]}}}}"),
        )
        .expect(&[200, 400, 422]),
    );
    let replaces = (0..100_000).map(|i| format!("\"k{i}\":{{\"$patch\":\"replace\"}}")).collect::<Vec<_>>().join(",");
    c.push(
        Case::patch(
            "strategic: 100k $patch replace maps",
            Who::Node,
            lease.clone(),
            STRATEGIC,
            format!("{{\"spec\":{{{replaces}}}}}"),
        )
        .expect(&[200, 400, 422]),
    );
    // A node's own Node: conditions merge by type; addresses by address.
    let node = format!("/api/v1/nodes/{}/status", ctx.node);
    let order = (0..150_000).map(|i| format!("{{\"type\":\"T{i}\"}}")).collect::<Vec<_>>().join(",");
    c.push(
        Case::patch(
            "strategic: $setElementOrder of 150k conditions",
            Who::Node,
            node.clone(),
            STRATEGIC,
            format!("{{\"status\":{{\"$setElementOrder/conditions\":[{order}]}}}}"),
        )
        .expect(&[200, 400, 422]),
    );
    let conds =
        (0..30_000).map(|i| format!("{{\"type\":\"T{}\",\"status\":\"True\"}}", i % 100)).collect::<Vec<_>>().join(",");
    c.push(
        Case::patch(
            "strategic: 30k conditions, 100 distinct merge keys",
            Who::Node,
            node,
            STRATEGIC,
            format!("{{\"status\":{{\"conditions\":[{conds}]}}}}"),
        )
        .expect(&[200, 400, 422]),
    );
}

fn apply(c: &mut Vec<Case>, ctx: &Ctx) {
    let lease = lease_path(ctx);
    let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": ctx.node, "namespace": "kube-node-lease"}, "spec": {"holderIdentity": ctx.node}}).to_string();
    c.push(
        Case::patch(
            "apply: a 60 KB fieldManager",
            Who::Node,
            format!("{lease}?fieldManager={}", "m".repeat(60_000)),
            APPLY,
            body,
        )
        .expect(&[422]),
    );
    // A node may apply its own Node's status: conditions are a list keyed by type.
    let status = |conditions: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": ctx.node}, "status": {"conditions": conditions}}).to_string()
    };
    let node_status = format!("/api/v1/nodes/{}/status?fieldManager=kubelet", ctx.node);
    c.push(
        Case::patch(
            "apply: a node condition type of 1 MB (list key)",
            Who::Node,
            node_status.clone(),
            APPLY,
            status(json!([{"type": "x".repeat(1_000_000), "status": "True"}])),
        )
        .expect(&[200, 400, 413, 422])
        .area(Area::Managed),
    );
    let conditions: Vec<_> = (0..20_000)
        .map(|i| json!({"type": format!("T{i}"), "status": "True", "reason": "R", "message": "m"}))
        .collect();
    c.push(
        Case::patch(
            "apply: 20k node conditions",
            Who::Node,
            format!("{node_status}&dryRun=All"),
            APPLY,
            status(json!(conditions)),
        )
        .expect(&[200, 400, 413, 422])
        .area(Area::Managed),
    );
    // Pods: only an admin applies them.
    let pods = format!("/api/v1/namespaces/{}/pods", ctx.ns);
    let pod = mirror_pod(ctx, "ssa-bigkey", json!({}), json!([{"name": "x".repeat(1_000_000), "image": "i"}]));
    c.push(
        Case::patch(
            "apply: a pod with a 1 MB container name (list key)",
            Who::Admin,
            format!("{pods}/ssa-bigkey?fieldManager=m&dryRun=All"),
            APPLY,
            pod.to_string(),
        )
        .expect(&[201, 400, 422])
        .area(Area::Managed),
    );
    let many: Vec<_> = (0..20_000)
        .map(|i| json!({"name": format!("c{i}"), "image": "i", "env": [{"name": format!("e{i}"), "value": "v"}]}))
        .collect();
    let pod = mirror_pod(ctx, "ssa-many", json!({}), json!(many));
    c.push(
        Case::patch(
            "apply: a pod with 20k containers",
            Who::Admin,
            format!("{pods}/ssa-many?fieldManager=m&dryRun=All"),
            APPLY,
            pod.to_string(),
        )
        .expect(&[201, 400, 413, 422])
        .area(Area::Managed),
    );
    let labels: serde_json::Map<String, serde_json::Value> =
        (0..2).map(|i| (format!("{}{i}", "k".repeat(600_000)), json!("v"))).collect();
    let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": ctx.node, "namespace": "kube-node-lease", "labels": labels}});
    c.push(
        Case::patch(
            "apply: two 600 KB label keys (long field paths)",
            Who::Node,
            format!("{lease}?fieldManager=kubelet"),
            APPLY,
            body.to_string(),
        )
        .expect(&[400, 413, 422])
        .area(Area::Managed),
    );
    let many_labels: serde_json::Map<String, serde_json::Value> =
        (0..60_000).map(|i| (format!("l{i}"), json!("v"))).collect();
    let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": ctx.node, "namespace": "kube-node-lease", "labels": many_labels}});
    c.push(
        Case::patch(
            "apply: 60k labels",
            Who::Node,
            format!("{lease}?fieldManager=kubelet&dryRun=All"),
            APPLY,
            body.to_string(),
        )
        .expect(&[200, 400, 413, 422])
        .area(Area::Managed),
    );
    // An admin's custom resource, 120 levels deep, and 100k leaves.
    let mut deep = json!("leaf");
    for _ in 0..120 {
        deep = json!({"a": deep, "b": [{"k": 1}]});
    }
    let cr = |name: &str, spec: serde_json::Value| {
        json!({"apiVersion": format!("{CRD_GROUP}/v1"), "kind": "Thing", "metadata": {"name": name, "namespace": ctx.ns}, "spec": spec}).to_string()
    };
    let crs = format!("/apis/{CRD_GROUP}/v1/namespaces/{}/{}", ctx.ns, ctx.crd_plural);
    c.push(
        Case::patch(
            "apply: a custom resource 120 levels deep",
            Who::Admin,
            format!("{crs}/deep?fieldManager=m"),
            APPLY,
            cr("deep", deep),
        )
        .expect(&[200, 201, 400, 422])
        .area(Area::Managed),
    );
    let wide: serde_json::Map<String, serde_json::Value> = (0..100_000).map(|i| (format!("f{i}"), json!(i))).collect();
    c.push(
        Case::patch(
            "apply: a custom resource with 100k fields",
            Who::Admin,
            format!("{crs}/wide?fieldManager=m"),
            APPLY,
            cr("wide", json!(wide)),
        )
        .expect(&[200, 201, 400, 413, 422])
        .area(Area::Managed),
    );
    let lists: Vec<_> = (0..100_000).map(|i| json!([i])).collect();
    c.push(
        Case::patch(
            "apply: a custom resource with 100k nested lists",
            Who::Admin,
            format!("{crs}/lists?fieldManager=m"),
            APPLY,
            cr("lists", json!({"l": lists})),
        )
        .expect(&[200, 201, 400, 413, 422])
        .area(Area::Managed),
    );
}

fn managed_fields(c: &mut Vec<Case>, ctx: &Ctx) {
    let pods = format!("/api/v1/namespaces/{}/pods?dryRun=All", ctx.ns);
    let containers = json!([{"name": "c", "image": "i"}]);
    let entry = |manager: String, fields: serde_json::Value| json!({"manager": manager, "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields});
    let managers: Vec<_> = (0..10_000)
        .map(|i| entry(format!("m{i}"), json!({"f:metadata": {"f:labels": {format!("f:l{i}"): {}}}})))
        .collect();
    let pod = mirror_pod(ctx, "mf-many", json!({"managedFields": managers}), containers.clone());
    c.push(
        Case::post("managedFields: 10k managers", Who::Node, pods.clone(), JSON, pod.to_string())
            .expect(&[201, 400, 422])
            .area(Area::Managed),
    );
    let long = format!("f:{}", "k".repeat(1_200_000));
    let pod = mirror_pod(
        ctx,
        "mf-long",
        json!({"managedFields": [entry("m".into(), json!({"f:metadata": {long: {}}}))]}),
        containers.clone(),
    );
    c.push(
        Case::post("managedFields: a 1.2 MB field key", Who::Node, pods.clone(), JSON, pod.to_string())
            .expect(&[201, 400, 422])
            .area(Area::Managed),
    );
    let invalid: Vec<_> = (0..5_000)
        .map(|i| entry(format!("m{i}"), json!({"x": [1, 2, {"y": null}], "f:": "z", "k:{": {}, "v:[": {}})))
        .collect();
    let pod = mirror_pod(ctx, "mf-invalid", json!({"managedFields": invalid}), containers.clone());
    c.push(
        Case::post("managedFields: 5k invalid fieldsV1", Who::Node, pods.clone(), JSON, pod.to_string())
            .expect(&[201, 400, 422])
            .area(Area::Managed),
    );
    let mut deep = json!({});
    for i in 0..120 {
        deep = json!({format!("f:a{i}"): deep, ".": {}});
    }
    let deeps: Vec<_> = (0..2_000).map(|i| entry(format!("m{i}"), deep.clone())).collect();
    let pod = mirror_pod(ctx, "mf-deep", json!({"managedFields": deeps}), containers.clone());
    c.push(
        Case::post("managedFields: 2k fieldsV1 120 levels deep", Who::Node, pods.clone(), JSON, pod.to_string())
            .expect(&[201, 400, 413, 422])
            .area(Area::Managed),
    );
    let keys: serde_json::Map<String, serde_json::Value> =
        (0..30_000).map(|i| (format!("k:{{\"name\":\"c{i}\"}}"), json!({".": {}, "f:image": {}}))).collect();
    let pod = mirror_pod(
        ctx,
        "mf-keys",
        json!({"managedFields": [entry("m".into(), json!({"f:spec": {"f:containers": keys}}))]}),
        containers,
    );
    c.push(
        Case::post("managedFields: 30k list-key entries", Who::Node, pods, JSON, pod.to_string())
            .expect(&[201, 400, 422])
            .area(Area::Managed),
    );
}

fn fields(c: &mut Vec<Case>, ctx: &Ctx) {
    let lease = lease_path(ctx);
    let merge = |name: &str, patch: serde_json::Value, expect: &[u16]| {
        Case::patch(name, Who::Node, lease.clone(), MERGE, patch.to_string()).expect(expect)
    };
    let labels: serde_json::Map<String, serde_json::Value> =
        (0..100_000).map(|i| (format!("l{i}"), json!("v"))).collect();
    c.push(merge(
        "merge-patch: 100k labels on the node's Lease",
        json!({"metadata": {"labels": labels}}),
        &[200, 413, 422],
    ));
    c.push(merge(
        "merge-patch: a 2 MB label key",
        json!({"metadata": {"labels": {"k".repeat(2_000_000): "v"}}}),
        // Too big to store (413, before the field manager's work), or an invalid key (422).
        &[413, 422],
    ));
    let fins: Vec<_> = (0..100_000).map(|i| format!("example.com/f{i}")).collect();
    c.push(merge("merge-patch: 100k finalizers", json!({"metadata": {"finalizers": fins}}), &[200, 413, 422]));
    c.push(merge(
        "merge-patch: 2 MB of annotations",
        json!({"metadata": {"annotations": {"a": "x".repeat(2_000_000)}}}),
        &[413, 422],
    ));
    let pods = format!("/api/v1/namespaces/{}/pods", ctx.ns);
    let pod = mirror_pod(ctx, &"n".repeat(1_000_000), json!({}), json!([{"name": "c", "image": "i"}]));
    c.push(Case::post("create: a 1 MB pod name", Who::Node, pods, JSON, pod.to_string()).expect(&[400, 422]));
    let events = format!("/api/v1/namespaces/{}/events", ctx.ns);
    let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "e-"}, "involvedObject": {"kind": "Node", "name": ctx.node}, "reason": "R", "message": "m".repeat(2_000_000)});
    c.push(
        Case::post("create: an event with a 2 MB message", Who::Node, events, JSON, ev.to_string())
            .expect(&[201, 413, 422]),
    );
}

/// Work that grows faster than the object: defaults set in every item of a long list, and
/// duplicates looked for in long lists (each item against every earlier one, once).
fn validation_costs(c: &mut Vec<Case>, ctx: &Ctx) {
    let shapes = format!("/apis/{CRD_GROUP}/v1/namespaces/{}/{}?dryRun=All", ctx.ns, ctx.schemed_plural);
    let cr = |name: &str, spec: String| {
        format!(
            r#"{{"apiVersion":"{CRD_GROUP}/v1","kind":"Shape","metadata":{{"name":"{name}","namespace":"{}"}},"spec":{spec}}}"#,
            ctx.ns
        )
    };
    let budget = NEAR_LIMIT - 512;
    let empty_items = fill("{}", ",", budget);
    c.push(
        Case::post(
            "a custom resource: a million empty items, each given a default",
            Who::Admin,
            &shapes,
            JSON,
            cr("defaults", format!(r#"{{"d":[{empty_items}]}}"#)),
        )
        .expect(&[201, 400, 413, 422]),
    );
    let strings = (0..budget / 11).map(|i| format!(r#""s{i:07}""#)).collect::<Vec<_>>().join(",");
    c.push(
        Case::post(
            "a custom resource: a set of 270k distinct strings",
            Who::Admin,
            &shapes,
            JSON,
            cr("set", format!(r#"{{"s":[{strings}]}}"#)),
        )
        .expect(&[201, 400, 413, 422]),
    );
    let keyed = (0..budget / 20).map(|i| format!(r#"{{"k":"k{i:07}"}}"#)).collect::<Vec<_>>().join(",");
    c.push(
        Case::post(
            "a custom resource: a map list of 150k items",
            Who::Admin,
            &shapes,
            JSON,
            cr("map", format!(r#"{{"m":[{keyed}]}}"#)),
        )
        .expect(&[201, 400, 413, 422]),
    );
    let addresses = (0..budget / 48)
        .map(|i| format!(r#"{{"type":"InternalIP","address":"10.{}.{}.{}"}}"#, i >> 16, (i >> 8) & 255, i & 255))
        .collect::<Vec<_>>()
        .join(",");
    c.push(
        Case::patch(
            "node status: 65k addresses of its own",
            Who::Node,
            format!("/api/v1/nodes/{}/status?dryRun=All", ctx.node),
            MERGE,
            format!(r#"{{"status":{{"addresses":[{addresses}]}}}}"#),
        )
        .expect(&[200, 400, 413, 422]),
    );
    let keys = (0..budget / 11).map(|i| format!(r#""k{i:07}""#)).collect::<Vec<_>>().join(",");
    c.push(
        Case::post("its CSINode: 270k topology keys", Who::Node, "/apis/storage.k8s.io/v1/csinodes?dryRun=All", JSON,
            format!(r#"{{"apiVersion":"storage.k8s.io/v1","kind":"CSINode","metadata":{{"name":"{}"}},"spec":{{"drivers":[{{"name":"d.example.com","nodeID":"n","topologyKeys":[{keys}]}}]}}}}"#, ctx.node))
        .expect(&[201, 400, 413, 422]),
    );
}
