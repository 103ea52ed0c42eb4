//! What a write's own `managedFields` may do, and what field ownership costs: entries that
//! do not decode are reset as upstream resets them; field sets built from hostile input
//! (many fields below one long list key) cost work linear in its size, counted in path
//! bytes ([`fieldset::counter`]); the tree's set operations agree with a plain set of paths.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::fieldset::{self, counter};
use super::*;

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";

fn pod_schema() -> Schema {
    let reg = crate::registry::Registry::builtin();
    let doc: Value = serde_json::from_slice(crate::openapi::OpenApi::new(&reg).v2()).unwrap();
    Schema::from_definitions(doc["definitions"].as_object().unwrap(), "io.k8s.api.core.v1.Pod").unwrap()
}

fn writer<'a>(manager: &'a str, time: &'a str, reset: &'a FieldSet) -> Writer<'a> {
    Writer { manager, api_version: "v1", subresource: "", time, reset_fields: reset }
}

/// `(manager, operation)` of each entry.
type Owners = Vec<(String, String)>;

/// `(manager, operation)` of each entry of `obj`.
fn owners(obj: &Value) -> Owners {
    decode_managed_fields(obj)
        .unwrap()
        .into_iter()
        .map(|e| (e.manager.clone(), e.operation.as_str().to_string()))
        .collect()
}

fn entry(manager: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": "Update", "apiVersion": "v1", "time": T0,
           "fieldsType": "FieldsV1", "fieldsV1": fields})
}

/// Upstream's `DecodeManagedFields`: every entry must have an operation of `Apply` or
/// `Update`, an `apiVersion`, `fieldsType: FieldsV1` and a readable `fieldsV1`; entries of
/// the same manager collapse into the last one.
#[test]
fn managed_fields_decode_as_upstream() {
    let ok = entry("m", json!({"f:data": {}}));
    let with = |k: &str, v: Value| {
        let mut e = ok.clone();
        e[k] = v;
        e
    };
    let without = |k: &str| {
        let mut e = ok.clone();
        e.as_object_mut().unwrap().remove(k);
        e
    };
    let cases: Vec<(&str, Value, Result<usize, &str>)> = vec![
        ("one entry", json!([ok.clone()]), Ok(1)),
        ("no fieldsV1: owns nothing", json!([without("fieldsV1")]), Ok(1)),
        ("operation missing", json!([without("operation")]), Err("invalid operation \"\"")),
        ("operation unknown", json!([with("operation", json!("Patch"))]), Err("invalid operation \"Patch\"")),
        ("apiVersion missing", json!([without("apiVersion")]), Err("apiVersion must not be empty")),
        ("fieldsType missing", json!([without("fieldsType")]), Err("missing fieldsType")),
        ("fieldsType unknown", json!([with("fieldsType", json!("FieldsV2"))]), Err("invalid fieldsType \"FieldsV2\"")),
        ("fieldsV1 not an object", json!([with("fieldsV1", json!("x"))]), Err("expected an object, got a string")),
        ("fieldsV1 key without a kind", json!([with("fieldsV1", json!({"data": {}}))]), Err("has no type prefix")),
        ("fieldsV1 key not JSON", json!([with("fieldsV1", json!({"k:{": {}}))]), Err("parsing key")),
        ("a bad entry after a good one", json!([ok.clone(), without("operation")]), Err("managedFields[1]")),
        ("the same manager twice: one entry", json!([ok.clone(), ok.clone()]), Ok(1)),
        ("same name, other operation: two", json!([ok.clone(), with("operation", json!("Apply"))]), Ok(2)),
        ("same name, other version: two", json!([ok.clone(), with("apiVersion", json!("v2"))]), Ok(2)),
        ("not a list", json!({"a": 1}), Err("must be a list")),
    ];
    for (what, list, want) in cases {
        let obj = json!({"metadata": {"managedFields": list}});
        match (decode_managed_fields(&obj), want) {
            (Ok(entries), Ok(n)) => assert_eq!(entries.len(), n, "{what}"),
            (Err(e), Err(msg)) => assert!(e.to_string().contains(msg), "{what}: {e}"),
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
    // The last of one manager's entries wins, fields and time alike.
    let later = json!({"manager": "m", "operation": "Update", "apiVersion": "v1", "time": T1,
                       "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}});
    let entries = decode_managed_fields(&json!({"metadata": {"managedFields": [ok, later]}})).unwrap();
    assert_eq!(entries[0].time.as_deref(), Some(T1));
    assert_eq!(entries[0].fields.to_fields_v1_string(), r#"{"f:spec":{}}"#);
}

/// Where an Update's entries come from, as upstream's `decodeLiveOrNew` and
/// `skipNonAppliedManager` decide: the written object's when they all decode, else the
/// live object's; `[]` and `[{}]` reset them, and an existing object left with none is no
/// longer tracked; a create tracks from whatever it starts with.
#[test]
fn an_updates_entries_come_from_upstreams_sources() {
    let s = pod_schema();
    let none = FieldSet::new();
    let pod = |image: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": image}]}})
    };
    let live = update(&s, None, pod("a"), &writer("creator", T0, &none)).object;
    assert_eq!(owners(&live), [("creator".to_string(), "Update".to_string())]);
    // A field neither pod sets: whoever is given it keeps it.
    let hostname_of = |m: &str| entry(m, json!({"f:spec": {"f:hostname": {}}}));
    let bad = json!({"manager": "forger", "operation": "Steal", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {}});
    let owners_of = |names: &[&str]| names.iter().map(|m| (m.to_string(), "Update".to_string())).collect::<Vec<_>>();
    let cases: Vec<(&str, Option<Value>, Option<&Value>, Owners)> = vec![
        ("no entries given: the live object's", None, Some(&live), owners_of(&["creator", "editor"])),
        ("entries given: taken", Some(json!([hostname_of("other")])), Some(&live), owners_of(&["editor", "other"])),
        (
            "an entry that does not decode: the live object's",
            Some(json!([hostname_of("x"), bad])),
            Some(&live),
            owners_of(&["creator", "editor"]),
        ),
        (
            "`[{}, {}]` does not decode: the live object's",
            Some(json!([{}, {}])),
            Some(&live),
            owners_of(&["creator", "editor"]),
        ),
        ("`[]` resets: no longer tracked", Some(json!([])), Some(&live), vec![]),
        ("`[{}]` resets: no longer tracked", Some(json!([{}])), Some(&live), vec![]),
        ("`[{\"manager\": \"\"}]` is empty too", Some(json!([{"manager": ""}])), Some(&live), vec![]),
        (
            "a create with entries that do not decode: the writer alone",
            Some(json!([bad])),
            None,
            owners_of(&["editor"]),
        ),
        (
            "a create with entries given: taken",
            Some(json!([hostname_of("other")])),
            None,
            owners_of(&["editor", "other"]),
        ),
    ];
    for (what, given, live, want) in cases {
        let mut new = pod("b");
        if let Some(list) = given {
            new["metadata"]["managedFields"] = list;
        }
        let out = update(&s, live, new, &writer("editor", T1, &none));
        let mut got = match out.object["metadata"].get("managedFields") {
            Some(_) => owners(&out.object),
            None => vec![],
        };
        got.sort();
        assert_eq!(got, want, "{what}");
    }
    // An existing object no manager owns anything of stays untracked by Updates ...
    let mut untracked = live.clone();
    untracked["metadata"].as_object_mut().unwrap().remove("managedFields");
    let out = update(&s, Some(&untracked), pod("c"), &writer("editor", T1, &none));
    assert_eq!(out.object["metadata"].get("managedFields"), None);
    // ... and its first apply finds what it held owned by `before-first-apply`.
    let config = pod("d");
    let err = apply(&s, Some(&untracked), &config, &writer("kubectl", T1, &none), false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .spec.containers[name=\"c\"].image"
    );
    let out = apply(&s, Some(&untracked), &config, &writer("kubectl", T1, &none), true).unwrap();
    let mut got = owners(&out.object);
    got.sort();
    assert_eq!(got, [("before-first-apply".into(), "Update".into()), ("kubectl".into(), "Apply".into())]);
}

/// Upstream's `ValidateManagedFields`, part of metadata validation: names and lengths of
/// the entries a write leaves.
#[test]
fn managed_fields_validation() {
    let ok = || entry("m", json!({}));
    let with = |k: &str, v: Value| {
        let mut e = ok();
        e[k] = v;
        e
    };
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("valid", ok(), vec![]),
        ("no fieldsType is allowed here", with("fieldsType", json!("")), vec![]),
        (
            "operation",
            with("operation", json!("Patch")),
            vec!["m[0].operation: Invalid value: \"Patch\": must be `Apply` or `Update`"],
        ),
        (
            "fieldsType",
            with("fieldsType", json!("X")),
            vec!["m[0].fieldsType: Invalid value: \"X\": must be `FieldsV1`"],
        ),
        (
            "long manager",
            with("manager", json!("m".repeat(129))),
            vec!["m[0].manager: Too long: may not be more than 128 bytes"],
        ),
        (
            "unprintable manager",
            with("manager", json!("a\u{7}b\u{8}")),
            vec!["m[0].manager: Invalid value: \"a\\u{7}b\\u{8}\": invalid character U+0007 (at position 1)"],
        ),
        (
            "long subresource",
            with("subresource", json!("s".repeat(257))),
            vec!["m[0].subresource: Too long: may not be more than 256 bytes"],
        ),
        ("subresource of 256 bytes", with("subresource", json!("s".repeat(256))), vec![]),
    ];
    for (what, e, want) in cases {
        let errs: Vec<String> =
            crate::validation::validate_managed_fields(Some(&json!([e])), "m").iter().map(|e| e.render()).collect();
        assert_eq!(errs, want, "{what}");
    }
}

/// A Pod whose one container is named by `key_len` bytes and has `envs` variables, and
/// `managers` forged Update entries each owning every variable's fields.
fn forged_pod(key_len: usize, envs: usize, managers: usize) -> Value {
    let name = "c".repeat(key_len);
    let env: Vec<Value> = (0..envs).map(|i| json!({"name": format!("e{i}"), "value": "v"})).collect();
    let mut owned = serde_json::Map::new();
    for i in 0..envs {
        owned.insert(format!("k:{{\"name\":\"e{i}\"}}"), json!({".": {}, "f:name": {}, "f:value": {}}));
    }
    let key = format!("k:{}", json!({ "name": name }));
    // `hostname` is not in the pod: the entries keep it, and so stay.
    let fields = json!({"f:spec": {"f:hostname": {}, "f:containers": {key: {"f:env": owned}}}});
    let entries: Vec<Value> = (0..managers).map(|m| entry(&format!("m{m}"), fields.clone())).collect();
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "default", "managedFields": entries},
           "spec": {"containers": [{"name": name, "image": "i", "env": env}]}})
}

/// Path bytes counted while `f` runs.
fn counted<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = counter::bytes();
    let out = f();
    (out, counter::bytes() - before)
}

/// A create carrying forged entries that own 10,000 fields below a 100 KB list key, and an
/// apply of the same object: the path bytes made or copied stay a small multiple of the
/// body (copying the key per field would be 10,000 × 100 KB = 1 GB), and so do the bytes
/// of a conflict report over all those fields.
#[test]
fn field_ownership_is_linear_in_the_object() {
    let s = pod_schema();
    let none = FieldSet::new();
    let body = forged_pod(100_000, 10_000, 3);
    let size = body.to_string().len();

    let (out, bytes) = counted(|| update(&s, None, body.clone(), &writer("kubelet", T0, &none)));
    assert!(bytes < 4 * size, "create: {bytes} path bytes for a {size}-byte body");
    let mut got = owners(&out.object);
    got.sort();
    assert_eq!(got.len(), 4, "three forged entries and the writer: {got:?}");
    let kept = decode_managed_fields(&out.object).unwrap();
    assert!(
        kept.iter()
            .filter(|e| e.manager != "kubelet")
            .all(|e| e.fields.to_fields_v1_string() == r#"{"f:spec":{"f:hostname":{}}}"#),
        "the create took every field of the pod from the forged entries"
    );

    let mut config = body.clone();
    config["metadata"].as_object_mut().unwrap().remove("managedFields");
    let (applied, bytes) = counted(|| apply(&s, None, &config, &writer("kubectl", T0, &none), false));
    let applied = applied.unwrap();
    assert!(bytes < 4 * size, "apply: {bytes} path bytes for a {size}-byte body");

    // Another manager changes every variable: 10,000 fields × 1 owner conflict.
    let mut changed = config.clone();
    for e in changed["spec"]["containers"][0]["env"].as_array_mut().unwrap() {
        e["value"] = json!("w");
    }
    let (err, bytes) = counted(|| apply(&s, Some(&applied.object), &changed, &writer("other", T1, &none), false));
    assert!(bytes < 4 * size, "conflicts: {bytes} path bytes for a {size}-byte body");
    let Err(ApplyError::Conflicts(listed, unlisted)) = err else { panic!("no conflict: {err:?}") };
    assert_eq!(listed.len() + unlisted, 10_000, "every variable's value conflicts");
    // Each listed field names the 100 KB key: the report stops after the budget.
    assert!(listed.len() <= 3, "{} listed", listed.len());
    let message = conflict_report(&listed, unlisted);
    assert!(
        message.starts_with("Apply failed with 10000 conflicts: conflicts with \"kubectl\":"),
        "{}",
        &message[..80]
    );
    assert!(message.ends_with(&format!("... and {unlisted} more")), "{}", &message[message.len() - 80..]);
    assert!(message.len() < managed::MAX_CONFLICT_REPORT + 2 * 100_100, "{} bytes", message.len());
}

/// Growing the key and the number of fields tenfold each grows the work tenfold, not a
/// hundredfold.
#[test]
fn field_ownership_work_grows_with_the_body() {
    let s = pod_schema();
    let none = FieldSet::new();
    let work = |key_len: usize, envs: usize| {
        let body = forged_pod(key_len, envs, 2);
        counted(|| update(&s, None, body.clone(), &writer("kubelet", T0, &none))).1
    };
    let small = work(10_000, 1_000);
    let large = work(100_000, 10_000);
    assert!(large < 15 * small, "{small} path bytes, then {large} for ten times the body");
}

/// Paths from a small alphabet of every element kind, nested up to three deep.
fn path_pool() -> Vec<Path> {
    let elems = || {
        vec![
            PathElement::field("a"),
            PathElement::field("b"),
            PathElement::key(vec![("name".into(), json!("x"))]),
            PathElement::key(vec![("port".into(), json!(80)), ("protocol".into(), json!("TCP"))]),
            PathElement::value(json!("v")),
            PathElement::value(json!(1)),
            PathElement::Index(0),
        ]
    };
    let mut pool = Vec::new();
    for a in elems() {
        pool.push(Path(vec![a.clone()]));
        for b in elems().into_iter().take(4) {
            pool.push(Path(vec![a.clone(), b.clone()]));
            for c in elems().into_iter().skip(3) {
                pool.push(Path(vec![a.clone(), b.clone(), c]));
            }
        }
    }
    pool
}

/// The tree's set operations give what the same operations on plain sets of paths give,
/// for pseudo-random subsets of [`path_pool`].
#[test]
fn set_operations_agree_with_sets_of_paths() {
    let pool = path_pool();
    let mut seed = 0x2545_f491_u64;
    let mut subset = || {
        let mut out = BTreeSet::new();
        for p in &pool {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            if (seed >> 33).is_multiple_of(3) {
                out.insert(p.clone());
            }
        }
        out
    };
    let tree = |paths: &BTreeSet<Path>| {
        let mut set = FieldSet::new();
        for p in paths {
            set.insert(p);
        }
        set
    };
    let listed = |set: &FieldSet| set.paths().into_iter().collect::<BTreeSet<Path>>();
    for round in 0..50 {
        let (a, b) = (subset(), subset());
        let (ta, tb) = (tree(&a), tree(&b));
        assert_eq!(ta.paths(), a.iter().cloned().collect::<Vec<_>>(), "round {round}: order");
        assert_eq!(listed(&ta.union(&tb)), &a | &b, "round {round}: union");
        assert_eq!(listed(&ta.intersection(&tb)), &a & &b, "round {round}: intersection");
        assert_eq!(listed(&ta.difference(&tb)), &a - &b, "round {round}: difference");
        let below_b = |p: &Path| (1..=p.0.len()).any(|n| b.contains(&Path(p.0[..n].to_vec())));
        let want: BTreeSet<Path> = a.iter().filter(|p| !below_b(p)).cloned().collect();
        assert_eq!(listed(&ta.recursive_difference(&tb)), want, "round {round}: recursive difference");
        let mut grown = ta.clone();
        grown.union_with(&tb);
        assert_eq!(grown, ta.union(&tb), "round {round}: union in place");
        assert_eq!(ta.len(), a.len(), "round {round}: len");
        for p in &pool {
            assert_eq!(ta.has(p), a.contains(p), "round {round}: has {p}");
            let prefix = a.iter().any(|q| q.0.len() >= p.0.len() && q.0[..p.0.len()] == p.0[..]);
            assert_eq!(ta.has_prefix(p), prefix, "round {round}: has_prefix {p}");
        }
        let text = ta.to_fields_v1_string();
        let back = FieldSet::from_fields_v1(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, ta, "round {round}: {text}");
    }
}

/// A conflict report past its budget counts what it leaves out.
#[test]
fn conflict_reports_count_what_they_leave_out() {
    let c = |m: &str, f: &str| Conflict { manager: m.into(), path: Path::fields(&["data", f]) };
    let cases = [
        (vec![c("\"a\"", "x")], 0, "Apply failed with 1 conflict: conflict with \"a\": .data.x"),
        (vec![c("\"a\"", "x")], 2, "Apply failed with 3 conflicts: conflicts with \"a\":\n- .data.x\n... and 2 more"),
        (
            vec![c("\"a\"", "x"), c("\"b\"", "y")],
            0,
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .data.x\nconflicts with \"b\":\n- .data.y",
        ),
    ];
    for (listed, unlisted, want) in cases {
        assert_eq!(conflict_report(&listed, unlisted), want);
        assert_eq!(ApplyError::Conflicts(listed, unlisted).to_string(), want);
    }
    // Cloning a path shares its elements: no bytes are copied however long they are.
    let long = Path(vec![PathElement::field(&"x".repeat(1_000_000))]);
    let before = fieldset::counter::bytes();
    let copy = long.clone();
    assert_eq!(copy, long);
    assert_eq!(fieldset::counter::bytes() - before, 1_000_000, "counted at full weight");
    let (PathElement::Field(a), PathElement::Field(b)) = (&copy.0[0], &long.0[0]) else { unreachable!() };
    assert!(std::sync::Arc::ptr_eq(a, b), "shared, not copied");
}
