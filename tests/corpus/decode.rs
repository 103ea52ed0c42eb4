//! Request bodies: nesting, aliases, merge keys, duplicate keys, repeated fields and numbers
//! in JSON, YAML and protobuf. Most go to SelfSubjectReview (or SelfSubjectAccessReview),
//! which every authenticated caller may create: a service account without any role reaches
//! every decoder.

use super::wire::{envelope, field, int_field, nested, varint, yaml_laughs};
use super::*;

const SSR_HEAD_JSON: &str = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview""#;
const SSR_HEAD_YAML: &str = "apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\n";

fn ssr(name: &str, ct: &str, body: impl Into<Vec<u8>>) -> Case {
    Case::post(name, Who::ServiceAccount, SSR, ct, body)
}

/// A SelfSubjectReview with `extra` (`,"k":v...`) after its kind.
fn ssr_json(extra: &str) -> String {
    format!("{SSR_HEAD_JSON}{extra}}}")
}

pub fn cases(ctx: &Ctx) -> Vec<Case> {
    let mut c = Vec::new();
    json(&mut c);
    yaml(&mut c);
    protobuf(&mut c, ctx);
    repeated(&mut c, ctx);
    numbers(&mut c, ctx);
    c
}

fn json(c: &mut Vec<Case>) {
    let n = 100_000;
    c.push(ssr("json: 100k nested arrays", JSON, format!("{}{}", "[".repeat(n), "]".repeat(n))).expect(&[400]));
    c.push(ssr("json: 100k nested objects", JSON, format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n))).expect(&[400]));
    c.push(ssr("json: 3 MB of unclosed [", JSON, "[".repeat(NEAR_LIMIT)).expect(&[400]));
    c.push(
        ssr(
            "json: object nested 100k deep in metadata",
            JSON,
            ssr_json(&format!(",\"metadata\":{{\"labels\":{}1{}}}", "{\"a\":".repeat(n), "}".repeat(n))),
        )
        .expect(&[400]),
    );
    // 1 MB of one key repeated (the last one wins), and Strict duplicates under a long key.
    let dups = fill("\"k\":1", ",", 1_000_000);
    c.push(ssr("json: 1 MB of one duplicate key", JSON, ssr_json(&format!(",\"x\":{{{dups}}}"))).expect(&[201]));
    let long = "p".repeat(1_000_000);
    let pairs: Vec<String> = (0..60_000).map(|i| format!("\"c{i}\":1,\"c{i}\":2")).collect();
    let body = ssr_json(&format!(",\"{long}\":{{{}}}", pairs.join(",")));
    c.push(
        Case::post(
            "json: 60k duplicates under a 1 MB key, Strict",
            Who::ServiceAccount,
            format!("{SSR}?fieldValidation=Strict"),
            JSON,
            body.clone(),
        )
        .expect(&[400]),
    );
    c.push(
        Case::post(
            "json: 60k duplicates under a 1 MB key, Warn",
            Who::ServiceAccount,
            format!("{SSR}?fieldValidation=Warn"),
            JSON,
            body,
        )
        .expect(&[201]),
    );
    // Strings: 3 MB of escapes, invalid UTF-8, lone surrogates.
    c.push(
        ssr(
            "json: 3 MB of \\u escapes",
            JSON,
            ssr_json(&format!(",\"x\":\"{}\"", "\\u00e9".repeat(NEAR_LIMIT / 6 - 20))),
        )
        .expect(&[201, 400]),
    );
    let mut bad_utf8 = ssr_json(",\"x\":\"").into_bytes();
    bad_utf8.truncate(bad_utf8.len() - 1);
    bad_utf8.extend(vec![0xff; 1_000_000]);
    bad_utf8.extend(b"\"}");
    c.push(ssr("json: 1 MB of invalid UTF-8", JSON, bad_utf8).expect(&[400]));
    c.push(
        ssr("json: 500k lone surrogates", JSON, ssr_json(&format!(",\"x\":\"{}\"", "\\ud800".repeat(500_000))))
            .expect(&[400]),
    );
}

fn yaml(c: &mut Vec<Case>) {
    let y = |name: &str, body: String, expect: &[u16]| ssr(name, YAML, body).expect(expect).area(Area::Yaml);
    c.push(y("yaml: alias ladder 10x9 (1e9 leaves)", yaml_laughs(SSR_HEAD_YAML, 10, 10), &[400]));
    c.push(y("yaml: alias ladder 2x60 (2^60 leaves)", yaml_laughs(SSR_HEAD_YAML, 60, 2), &[400]));
    c.push(y(
        "yaml: alias ladder 10x9 under metadata",
        {
            let mut s =
                String::from("apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\nmetadata:\n  labels:\n");
            s.push_str("    l0: &a0 [\"lol\"]\n");
            for i in 1..10 {
                s.push_str(&format!("    l{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(",")));
            }
            s
        },
        &[400],
    ));
    // Flow collections: maps of aliases of maps.
    let mut flow = format!("{SSR_HEAD_YAML}m0: &m0 {{a: 1, b: 2}}\n");
    for i in 1..12 {
        let inner: Vec<String> = (0..8).map(|k| format!("k{k}: *m{}", i - 1)).collect();
        flow.push_str(&format!("m{i}: &m{i} {{{}}}\n", inner.join(", ")));
    }
    c.push(y("yaml: flow-map alias ladder 8x11", flow, &[400]));
    // Wide: one 1 MB scalar, aliased 2,000 times (2 GB once expanded).
    let mut wide = format!("{SSR_HEAD_YAML}big: &big \"{}\"\nrefs: [", "x".repeat(1_000_000));
    wide.push_str(&repeat_join("*big", ",", 2000));
    wide.push_str("]\n");
    c.push(y("yaml: 1 MB scalar aliased 2,000 times", wide, &[400]));
    // Merge keys: each map merges the previous one twice over.
    let mut merge = format!("{SSR_HEAD_YAML}b0: &b0 {{a: 1}}\n");
    for i in 1..40 {
        merge.push_str(&format!("b{i}: &b{i}\n  <<: [*b{p}, *b{p}]\n  k{i}: {i}\n", p = i - 1));
    }
    c.push(y("yaml: 40 chained merge keys", merge, &[201, 400]));
    let mut merge_wide = format!(
        "{SSR_HEAD_YAML}base: &base {{{}}}\nitems:\n",
        (0..200).map(|i| format!("k{i}: {i}")).collect::<Vec<_>>().join(", ")
    );
    merge_wide.push_str(&"- <<: *base\n".repeat(20_000));
    c.push(y("yaml: 20k merges of a 200-key map", merge_wide, &[201, 400]));
    // Nesting.
    let n = 100_000;
    c.push(y("yaml: 100k nested flow sequences", format!("{}{}", "[".repeat(n), "]".repeat(n)), &[400]));
    c.push(y("yaml: 100k nested block sequences", format!("{}a", "- ".repeat(n)), &[400]));
    let block: String = (0..1500).map(|i| format!("{}a:\n", "  ".repeat(i))).collect();
    c.push(y("yaml: 1,500 nested block maps", block, &[400]));
    // Duplicates: 1 MB of one key, Strict and Ignore.
    let dups = format!("{SSR_HEAD_YAML}x:\n{}", "  k: 1\n".repeat(1_000_000 / 7));
    c.push(
        Case::post(
            "yaml: 1 MB of one duplicate key, Strict",
            Who::ServiceAccount,
            format!("{SSR}?fieldValidation=Strict"),
            YAML,
            dups.clone(),
        )
        .expect(&[400])
        .area(Area::Yaml),
    );
    c.push(
        Case::post(
            "yaml: 1 MB of one duplicate key, Ignore",
            Who::ServiceAccount,
            format!("{SSR}?fieldValidation=Ignore"),
            YAML,
            dups,
        )
        .expect(&[201, 400])
        .area(Area::Yaml),
    );
    let long = "p".repeat(500_000);
    let mut dup_long = format!("{SSR_HEAD_YAML}{long}:\n");
    for i in 0..40_000 {
        dup_long.push_str(&format!("  c{i}: 1\n  c{i}: 2\n"));
    }
    c.push(y("yaml: 40k duplicates under a 500 KB key", dup_long, &[400]));
    // Many documents, tags, anchors without use.
    c.push(y("yaml: 300k documents", "---\na: 1\n".repeat(300_000), &[400]));
    c.push(y(
        "yaml: 100k unused anchors",
        format!("{SSR_HEAD_YAML}{}", (0..100_000).map(|i| format!("a{i}: &x{i} {i}\n")).collect::<String>()),
        &[201, 400],
    ));
    c.push(y(
        "yaml: 100k custom tags",
        format!("{SSR_HEAD_YAML}x: [{}]\n", repeat_join("!!binary aGk=", ",", 100_000)),
        &[201, 400],
    ));
}

fn protobuf(c: &mut Vec<Case>, ctx: &Ctx) {
    let pb = |name: &str, body: Vec<u8>, expect: &[u16]| ssr(name, PROTOBUF, body).expect(expect);
    let ssr_pb = |raw: &[u8]| envelope("authentication.k8s.io/v1", "SelfSubjectReview", raw);
    // An unknown field nested 200k deep: skipped, never recursed into.
    c.push(pb("protobuf: unknown field nested 200k deep", ssr_pb(&nested(99, 200_000, b"")), &[201, 400]));
    // metadata nested in metadata: the decoder must not recurse without a bound.
    c.push(pb("protobuf: known message nested 200k deep", ssr_pb(&nested(1, 200_000, b"")), &[400]));
    // Lengths that lie.
    let mut lie = b"k8s\x00".to_vec();
    lie.extend(varint(2 << 3 | 2));
    lie.extend(varint(1 << 63));
    lie.extend(b"xx");
    c.push(pb("protobuf: a length of 2^63", lie, &[400]));
    let mut lie = ssr_pb(b"");
    lie.extend(varint(1 << 3 | 2));
    lie.extend(varint(3_000_000));
    lie.extend(vec![0u8; 1000]);
    c.push(pb("protobuf: a length past the end", lie, &[400]));
    let mut long_varint = b"k8s\x00".to_vec();
    long_varint.extend(vec![0xffu8; 1_000_000]);
    c.push(pb("protobuf: a 1 MB varint", long_varint, &[400]));
    // A huge typeMeta kind and apiVersion.
    c.push(pb("protobuf: 1 MB kind name", envelope("authentication.k8s.io/v1", &"K".repeat(1_000_000), b""), &[400]));
    // The envelope names another kind than the URL.
    c.push(pb("protobuf: a Pod sent as a review", envelope("v1", "Pod", &field(1, &field(1, b"p"))), &[400]));
    // A content encoding in the envelope.
    let mut enc = ssr_pb(b"");
    enc.extend(field(3, b"gzip"));
    c.push(pb("protobuf: contentEncoding gzip", enc, &[400, 415]));
    // managedFields' fieldsV1 holding JSON nested 100k deep.
    let deep_json = format!("{}{}", "{\"f:a\":".repeat(100_000), "}".repeat(100_000));
    let entry = field(17, &field(7, &field(1, deep_json.as_bytes())));
    c.push(pb("protobuf: fieldsV1 JSON nested 100k deep", ssr_pb(&field(1, &entry)), &[400]).area(Area::Managed));
    // A custom resource has no protobuf form.
    c.push(
        Case::post(
            "protobuf: body for a custom resource",
            Who::Admin,
            format!("/apis/{CRD_GROUP}/v1/namespaces/{}/{}", ctx.ns, ctx.crd_plural),
            PROTOBUF,
            envelope(&format!("{CRD_GROUP}/v1"), "Thing", b""),
        )
        .expect(&[415]),
    );
    // A CRD schema nested 100k deep through `not` (an admin's only).
    let schema = nested(28, 100_000, b"");
    let version = [field(1, b"v1"), int_field(2, 1), int_field(3, 1), field(4, &field(1, &schema))].concat();
    let spec = [field(1, CRD_GROUP.as_bytes()), field(7, &version)].concat();
    let crd = [field(1, &field(1, format!("deep.{CRD_GROUP}").as_bytes())), field(2, &spec)].concat();
    c.push(
        Case::post(
            "protobuf: CRD schema nested 100k deep",
            Who::Admin,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            PROTOBUF,
            envelope("apiextensions.k8s.io/v1", "CustomResourceDefinition", &crd),
        )
        .expect(&[400]),
    );
}

/// Lists of empty elements: two or three bytes each on the wire, the size of a whole typed
/// struct each once decoded.
fn repeated(c: &mut Vec<Case>, ctx: &Ctx) {
    let ssr_pb = |raw: &[u8]| envelope("authentication.k8s.io/v1", "SelfSubjectReview", raw);
    // 1.5M empty ownerReferences (2 bytes each) in a review's metadata.
    let owner_refs = [0x6a_u8, 0x00].repeat(NEAR_LIMIT / 2 - 64);
    c.push(
        ssr("protobuf: 1.5M empty ownerReferences", PROTOBUF, ssr_pb(&field(1, &owner_refs))).expect(&[400, 413, 422]),
    );
    let empties = fill("{}", ",", NEAR_LIMIT - 200);
    c.push(
        ssr(
            "json: 1M empty ownerReferences",
            JSON,
            ssr_json(&format!(",\"metadata\":{{\"ownerReferences\":[{empties}]}}")),
        )
        .expect(&[400, 413, 422]),
    );
    c.push(
        ssr(
            "json: 1M empty managedFields",
            JSON,
            ssr_json(&format!(",\"metadata\":{{\"managedFields\":[{empties}]}}")),
        )
        .expect(&[400, 413, 422]),
    );
    let strings = fill("\"\"", ",", NEAR_LIMIT - 200);
    c.push(
        ssr("json: 1M empty finalizers", JSON, ssr_json(&format!(",\"metadata\":{{\"finalizers\":[{strings}]}}")))
            .expect(&[201, 400, 413, 422]),
    );
    let node = &ctx.node;
    // A node's mirror pod with 1M empty containers; its own Node with 1M empty images.
    let pod = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"m-{node}","namespace":"{ns}","annotations":{{"kubernetes.io/config.mirror":"x"}},"ownerReferences":[{owner}]}},"spec":{{"nodeName":"{node}","containers":[{empties}]}}}}"#,
        ns = ctx.ns,
        owner = ctx.node_owner(),
    );
    c.push(
        Case::post(
            "json: mirror pod with 1M empty containers",
            Who::Node,
            format!("/api/v1/namespaces/{}/pods", ctx.ns),
            JSON,
            pod,
        )
        .expect(&[400, 403, 413, 422]),
    );
    let pod_pb = {
        let containers = [0x12_u8, 0x00].repeat(NEAR_LIMIT / 2 - 200);
        let meta = [field(1, format!("m2-{node}").as_bytes()), field(3, ctx.ns.as_bytes())].concat();
        let spec = [containers, field(10, node.as_bytes())].concat();
        envelope("v1", "Pod", &[field(1, &meta), field(2, &spec)].concat())
    };
    c.push(
        Case::post(
            "protobuf: mirror pod with 1.5M empty containers",
            Who::Node,
            format!("/api/v1/namespaces/{}/pods", ctx.ns),
            PROTOBUF,
            pod_pb,
        )
        .expect(&[400, 403, 413, 422]),
    );
    let images = format!(r#"{{"status":{{"images":[{empties}]}}}}"#);
    c.push(
        Case::patch(
            "json: node status with 1M empty images",
            Who::Node,
            format!("/api/v1/nodes/{node}/status"),
            MERGE,
            images,
        )
        .expect(&[400, 413, 422]),
    );
    let conditions = format!(r#"{{"status":{{"conditions":[{empties}]}}}}"#);
    c.push(
        Case::patch(
            "json: node status with 1M empty conditions",
            Who::Node,
            format!("/api/v1/nodes/{node}/status"),
            STRATEGIC,
            conditions,
        )
        .expect(&[400, 413, 422]),
    );
    // A review whose spec holds 1M empty extra values.
    let extra = fill("[]", ",", NEAR_LIMIT - 300);
    c.push(
        Case::post(
            "json: access review with 1M empty lists",
            Who::ServiceAccount,
            SSAR,
            JSON,
            format!(r#"{{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{{"resourceAttributes":{{"verb":"get"}},"extra":{{"k":[]}},"x":[{extra}]}}}}"#),
        )
        .expect(&[201, 400, 413, 422]),
    );
}

fn numbers(c: &mut Vec<Case>, ctx: &Ctx) {
    let digits = "9".repeat(100_000);
    let tiny = format!("0.{}1", "0".repeat(100_000));
    let extremes: Vec<(&str, String)> = vec![
        ("1e400", "1e400".into()),
        ("-0", "-0".into()),
        ("2^64", "18446744073709551616".into()),
        ("1e-400", "1e-400".into()),
        ("100k digits", digits.clone()),
        ("-100k digits", format!("-{digits}")),
        ("100k-digit fraction", tiny.clone()),
        ("exponent 1e999999999999", "1e999999999999".into()),
    ];
    for (what, n) in &extremes {
        c.push(
            ssr(&format!("json: generation {what}"), JSON, ssr_json(&format!(",\"metadata\":{{\"generation\":{n}}}")))
                .expect(&[201, 400]),
        );
    }
    for (what, n) in [
        ("1e400", "1e400"),
        ("100k digits", digits.as_str()),
        (".inf", ".inf"),
        ("0x", "0xffffffffffffffffffffffffffffffff"),
        ("100k-digit fraction", tiny.as_str()),
    ] {
        c.push(
            ssr(&format!("yaml: generation {what}"), YAML, format!("{SSR_HEAD_YAML}metadata:\n  generation: {n}\n"))
                .expect(&[201, 400])
                .area(Area::Yaml),
        );
    }
    // Quantities in a node's status, an int-or-string in a mirror pod.
    let node = &ctx.node;
    for (what, q) in [
        ("100k digits", digits.clone()),
        ("exponent 1e999999999", "1e999999999".to_string()),
        ("exponent -1e999999999", "1e-999999999".to_string()),
        ("100k-digit fraction", tiny.clone()),
        ("2^64 Ei", "18446744073709551616Ei".to_string()),
        ("-0", "-0".to_string()),
    ] {
        let body =
            format!(r#"{{"status":{{"capacity":{{"cpu":"{q}","memory":"{q}"}},"allocatable":{{"x.io/y":"{q}"}}}}}}"#);
        c.push(
            Case::patch(
                format!("json: node capacity quantity {what}"),
                Who::Node,
                format!("/api/v1/nodes/{node}/status"),
                MERGE,
                body,
            )
            .expect(&[200, 400, 422]),
        );
    }
    for (what, port) in [
        ("a 100k-digit number", digits.clone()),
        ("1e400", "1e400".into()),
        ("a 100k-digit string", format!("\"{digits}\"")),
    ] {
        let pod = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"{ns}","annotations":{{"kubernetes.io/config.mirror":"x"}},"ownerReferences":[{owner}]}},"spec":{{"nodeName":"{node}","containers":[{{"name":"c","image":"i","livenessProbe":{{"httpGet":{{"port":{port}}}}}}}]}}}}"#,
            ns = ctx.ns,
            owner = ctx.node_owner(),
        );
        c.push(
            Case::post(
                format!("json: int-or-string port {what}"),
                Who::Node,
                format!("/api/v1/namespaces/{}/pods?dryRun=All", ctx.ns),
                JSON,
                pod,
            )
            .expect(&[201, 400, 422]),
        );
    }
    let pod = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"{ns}","annotations":{{"kubernetes.io/config.mirror":"x"}},"ownerReferences":[{owner}]}},"spec":{{"nodeName":"{node}","containers":[{{"name":"c","image":"i","resources":{{"limits":{{"cpu":"{digits}"}},"requests":{{"cpu":"1e999999999"}}}}}}]}}}}"#,
        ns = ctx.ns,
        owner = ctx.node_owner(),
    );
    c.push(
        Case::post(
            "json: pod resources with extreme quantities",
            Who::Node,
            format!("/api/v1/namespaces/{}/pods?dryRun=All", ctx.ns),
            JSON,
            pod,
        )
        .expect(&[201, 400, 422]),
    );
}
