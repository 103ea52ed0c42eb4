#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::json;

/// What the decoder built before it returned: nodes and bytes charged.
fn run(input: &str) -> (Result<Value, Error>, usize, usize) {
    let mut state = State::new(input.as_bytes());
    let got = decode_one(&mut state);
    (got, state.nodes, state.bytes)
}

/// A ladder: `a0` a list of `width` copies of `leaf`, each next rung `width` aliases of the
/// one before.
fn ladder(rungs: usize, width: usize, leaf: &str) -> String {
    let mut s = format!("a0: &a0 [{}]\n", vec![leaf; width].join(","));
    for i in 1..rungs {
        s.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); width].join(",")));
    }
    s
}

#[test]
fn plain_documents_read_as_before() {
    // What serde_yaml read these as, and upstream too.
    let docs = [
        "",
        "~",
        "a: 1\nb: -2\nc: 1.5\nd: true\ne: null\nf: ~\ng:\nh: \"q\"\ni: 'x'\n",
        "block: |\n  line one\n  line two\nfolded: >\n  a\n  b\nkeep: |+\n  x\n\n",
        "esc: \"tab\\there \\u00e9 \\L \\x41\"\n",
        "tags: [!!str 1, !!int '2', !!float '3', !!bool 'true', !!null ~]\n",
        "base: &b {x: 1, w: [1, 2]}\nuse1: *b\nuse2: *b\nlist: [*b, *b]\n",
        "a: 1\na: 2\n",
        "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"data\": {\"k\": \"v\"}}",
        "- a\n- - b\n  - c\n- {d: e}\n",
        "a: b\r\nc: d\r\n",
        "über: straße\n",
        "? complex\n: value\n",
        "--- \na: 1\n...\n",
    ];
    for doc in docs {
        let want: Value = serde_yaml::from_str(doc).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
        let got = from_slice(doc.as_bytes()).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
        assert_eq!(got.value, want, "{doc:?}");
    }
}

/// Plain scalars resolve as upstream's YAML 1.1 reading (go-yaml v2 under sigs.k8s.io/yaml).
#[test]
fn scalars_resolve_as_upstream_resolves_them() {
    let cases = [
        (
            "i: [0x1F, 0o17, 0b101, +5, -0, 12345678901234567890, -9223372036854775808]",
            json!({"i": [31, 15, 5, 5, 0, 12345678901234567890u64, i64::MIN]}),
        ),
        ("f: [1e3, 1.5, -0.25]", json!({"f": [1000.0, 1.5, -0.25]})),
        ("o: [0777, 010, 1_000]", json!({"o": [511, 8, 1000]})),
        (
            "b: [yes, no, on, off, y, n, Yes, NO, On, OFF, True, FALSE]",
            json!({"b": [true, false, true, false, true, false, true, false, true, false, true, false]}),
        ),
        ("z: [~, null, Null, NULL, ]", json!({"z": [null, null, null, null]})),
        (
            "s: [2001-12-14, '1', \"2\", 'yes', \"~\", 0x, 1.2.3]",
            json!({"s": ["2001-12-14", "1", "2", "yes", "~", "0x", "1.2.3"]}),
        ),
        (
            "1: a\ntrue: b\n0x10: d\n1.5: e\nno: f\n",
            json!({"1": "a", "true": "b", "16": "d", "1.5": "e", "false": "f"}),
        ),
        // YAML 1.1 booleans as keys too, as upstream reads them: `y` is `true`.
        ("x: 1\ny: 2\n", json!({"x": 1, "true": 2})),
    ];
    for (doc, want) in cases {
        let got = from_slice(doc.as_bytes()).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
        assert_eq!(got.value, want, "{doc:?}");
    }
    // JSON holds no infinity nor NaN: upstream's conversion to JSON fails on them.
    for doc in ["a: .inf", "a: -.Inf", "a: .nan", "a: [1, .NaN]"] {
        let got = from_slice(doc.as_bytes()).expect_err(doc);
        assert!(matches!(&got, Error::Invalid(m) if m.contains("non-finite")), "{doc:?}: {got:?}");
    }
}

#[test]
fn what_is_not_yaml_json_can_hold_is_refused() {
    let cases = [
        ("a: [1", "unclosed bracket"),
        ("a: b: c", "yaml: "),
        ("[a]: 1", "yaml: "),
        ("{a: 1}: 2", "yaml: "),
        ("~: 1", "yaml: "),
        ("a: *nowhere", "yaml: "),
        ("a: 1\n---\nb: 2\n", "yaml: "),
        ("m: {<<: 1}", "yaml: "),
        ("m: {<<: [1]}", "yaml: "),
    ];
    for (doc, want) in cases {
        let got = from_slice(doc.as_bytes()).expect_err(doc);
        assert!(matches!(&got, Error::Invalid(m) if m.starts_with("yaml: ") && m.contains(want)), "{doc:?}: {got:?}");
    }
    assert!(matches!(from_slice(b"a: \xff"), Err(Error::Invalid(_))));
}

#[test]
fn merge_keys_merge_as_upstream_merges_them() {
    let cases = [
        ("m: {<<: {a: 1, b: 2}, b: 3}", json!({"m": {"a": 1, "b": 3}})),
        // Keys of the mapping itself win wherever they stand.
        ("m: {b: 3, <<: {a: 1, b: 2}}", json!({"m": {"a": 1, "b": 3}})),
        // Of a list of mappings, the earlier wins.
        ("m: {<<: [{a: 1}, {a: 2, c: 3}]}", json!({"m": {"a": 1, "c": 3}})),
        ("x: &x {a: 1}\nm:\n  <<: *x\n  b: 2\n", json!({"x": {"a": 1}, "m": {"a": 1, "b": 2}})),
        (
            "x: &x {a: {b: 1}}\nv: &v {<<: *x, c: 2}\nm: {<<: [*v, {d: 3}]}",
            json!({"x": {"a": {"b": 1}}, "v": {"a": {"b": 1}, "c": 2}, "m": {"a": {"b": 1}, "c": 2, "d": 3}}),
        ),
        // A quoted `<<` is an ordinary key.
        ("m: {'<<': {a: 1}}", json!({"m": {"<<": {"a": 1}}})),
    ];
    for (doc, want) in cases {
        let got = from_slice(doc.as_bytes()).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
        assert_eq!(got.value, want, "{doc:?}");
        assert!(got.duplicates.is_empty(), "{doc:?}: {:?}", got.duplicates);
    }
}

#[test]
fn merges_count_against_the_limits() {
    // 20,000 merges of a 200-key mapping: 4,000,000 entries from ~330 KB.
    let mut doc = format!("m: &m {{{}}}\nl:\n", (0..200).map(|i| format!("k{i}: {i}")).collect::<Vec<_>>().join(", "));
    for _ in 0..20_000 {
        doc.push_str("- {<<: *m}\n");
    }
    let limits = Limits::for_len(doc.len());
    let (got, nodes, _) = run(&doc);
    assert_eq!(got, Err(Error::ExcessiveAliasing));
    assert!(nodes <= limits.nodes + 1, "{nodes} nodes built, limit {}", limits.nodes);
    // A few merges of the same mapping are fine.
    let few = doc.lines().take(12).collect::<Vec<_>>().join("\n");
    let got = from_slice(few.as_bytes()).unwrap();
    assert_eq!(got.value["l"].as_array().map(Vec::len), Some(10));
    assert_eq!(got.value["l"][9]["k199"], json!(199));
}

#[test]
fn aliases_cannot_expand_past_the_limits() {
    let big = "x".repeat(2000);
    let refs = |name: &str, n: usize| vec![format!("*{name}"); n].join(",");
    let cases: Vec<(&str, String)> = vec![
        ("one anchor referenced thousands of times", format!("a: &a [{}]\nb: [{}]\n", refs_leaf(100), refs("a", 4000))),
        ("billion laughs", ladder(10, 10, "\"lol\"")),
        ("a ladder in block style", {
            let mut s = String::from("a0: &a0\n  - lol\n  - lol\n");
            for i in 1..30 {
                s.push_str(&format!("a{i}: &a{i}\n  - *a{}\n  - *a{}\n", i - 1, i - 1));
            }
            s
        }),
        (
            "aliases inside flow collections",
            format!("a: &a {{k: [{}]}}\nb: [{}]\n", refs_leaf(100), vec!["[*a, *a]"; 2000].join(",")),
        ),
        ("aliases as mapping values", {
            let mut s = format!("a: &a [{}]\nb:\n", vec!["1"; 200].join(","));
            for i in 0..3000 {
                s.push_str(&format!("  k{i}: *a\n"));
            }
            s
        }),
        (
            "a merge key naming one alias",
            format!("a: &a {{k: [{}]}}\nb: [{}]\n", refs_leaf(200), vec!["{<<: *a}"; 2000].join(",")),
        ),
        ("a merge key naming a list of aliases, nested", {
            let mut s = String::from("m0: &m0 {k: [v, v, v, v, v, v, v, v, v, v]}\n");
            for i in 1..12 {
                s.push_str(&format!(
                    "m{i}: &m{i} {{<<: [*m{p}, *m{p}, *m{p}], n: [*m{p}, *m{p}, *m{p}]}}\n",
                    p = i - 1
                ));
            }
            s
        }),
        ("a long string referenced many times", format!("a: &a \"{big}\"\nb: [{}]\n", refs("a", 2000))),
        ("long string keys through aliases", format!("k: &k \"{big}\"\nm: [{}]\n", vec!["{*k : 1}"; 2000].join(","))),
    ];
    for (name, doc) in cases {
        let limits = Limits::for_len(doc.len());
        let (got, nodes, bytes) = run(&doc);
        assert!(matches!(got, Err(Error::ExcessiveAliasing)), "{name}: {:?}", got.as_ref().err());
        // The work stopped at the limit: at most one more node, one more string.
        assert!(nodes <= limits.nodes + 1, "{name}: {nodes} nodes built, limit {}", limits.nodes);
        assert!(bytes <= limits.bytes + 2000, "{name}: {bytes} bytes built, limit {}", limits.bytes);
        assert_eq!(from_slice(doc.as_bytes()).unwrap_err().to_string(), "yaml: document contains excessive aliasing");
    }
}

fn refs_leaf(n: usize) -> String {
    vec!["leaf"; n].join(",")
}

#[test]
fn anchors_used_a_few_times_still_work() {
    let doc = "defaults: &d\n  image: nginx\n  env: [{name: A, value: '1'}, {name: B, value: '2'}]\n\
               a: *d\nb: *d\nc: [*d, *d]\nm:\n  <<: *d\n  image: other\n";
    let got = from_slice(doc.as_bytes()).unwrap();
    let d = json!({"image": "nginx", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]});
    assert_eq!(got.value["a"], d);
    assert_eq!(got.value["c"], json!([d, d]));
    // `<<` merges, the mapping's own key winning.
    assert_eq!(got.value["m"], json!({"env": d["env"], "image": "other"}));
    assert!(got.duplicates.is_empty());
}

#[test]
fn the_allowance_scales_with_the_size_of_the_document() {
    // An anchor of 100 short strings used `n` times: ~101 nodes per use.
    let doc = |n: usize, padding: usize| {
        format!(
            "pad: \"{}\"\na: &a [{}]\nb: [{}]\n",
            "p".repeat(padding),
            vec!["s"; 100].join(","),
            vec!["*a"; n].join(",")
        )
    };
    // 300 uses: ~30,000 nodes from ~1.2 KB: over the floor, refused.
    let small = doc(300, 0);
    assert!(matches!(run(&small).0, Err(Error::ExcessiveAliasing)));
    // The same with 20 KB of padding (text, one node): allowed.
    let padded = doc(300, 20_000);
    let want: Value = serde_yaml::from_str(&padded).unwrap();
    assert!(run(&padded).0 == Ok(want), "padded");
    // And the cap holds however large the document: 10,000 uses need ~1,000,000 nodes, over
    // the ~530,000 of a 530 KB document and the 400,000 aliases may add.
    let capped = doc(10_000, 500_000);
    assert!(matches!(run(&capped).0, Err(Error::ExcessiveAliasing)));

    let cases = [
        (0, Limits { nodes: 10_011, bytes: 65_548 }),
        (1000, Limits { nodes: 1001 + 20_010, bytes: 2002 + 75_546 }),
        (3 << 20, Limits { nodes: (3 << 20) + 1 + ALIAS_NODES_CAP, bytes: 12 * ((3 << 20) + 1) + ALIAS_BYTES_FLOOR }),
        (4 << 20, Limits { nodes: (4 << 20) + 1 + ALIAS_NODES_CAP, bytes: 2 * ((4 << 20) + 1) + ALIAS_BYTES_CAP }),
        (usize::MAX, Limits { nodes: usize::MAX, bytes: usize::MAX }),
    ];
    for (len, want) in cases {
        assert_eq!(Limits::for_len(len), want, "{len} bytes");
    }
}

/// Dense documents without aliases: however they are written, they stay within the limits
/// (so that refusing for the limits names aliasing truthfully).
#[test]
fn documents_without_aliases_never_reach_the_limits() {
    let n = 50_000;
    let docs = [
        ("flow list of one-letter scalars", format!("[{}]", vec!["a"; n].join(","))),
        ("flow mapping of keys without values", format!("{{{}}}", vec!["a"; n].join(","))),
        ("block list of empty entries", "-\n".repeat(n)),
        ("keys with empty values", (0..n).map(|i| format!("{i}:\n")).collect()),
        ("empty flow collections", format!("[{}]", vec!["[]"; n].join(","))),
        ("expanding escapes", format!("\"{}\"", "\\L".repeat(n))),
        ("nested at the limit", format!("{}{}", "[".repeat(127), "]".repeat(127))),
    ];
    for (name, doc) in docs {
        let (got, nodes, bytes) = run(&doc);
        let limits = Limits::for_len(doc.len());
        assert!(nodes <= doc.len() + 1, "{name}: {nodes} nodes from {} bytes", doc.len());
        assert!(bytes <= 2 * (doc.len() + 1), "{name}: {bytes} bytes from {} bytes", doc.len());
        assert!(nodes <= limits.nodes && bytes <= limits.bytes, "{name}");
        let want: Result<Value, _> = serde_yaml::from_str(&doc);
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
            (Err(Error::Invalid(got)), Err(_)) => assert!(got.starts_with("yaml: "), "{name}: {got}"),
            (got, want) => panic!("{name}: {got:?} where serde_yaml gives {want:?}"),
        }
    }
}

#[test]
fn nesting_is_bounded_as_for_json() {
    let depth = crate::meta::MAX_OBJECT_DEPTH;
    let flow = |d: usize| format!("{}1{}", "[".repeat(d), "]".repeat(d));
    let block = |d: usize| {
        let mut s = String::new();
        for i in 0..d {
            s.push_str(&" ".repeat(i));
            s.push_str("a:\n");
        }
        s
    };
    let cases: Vec<(&str, String, Result<usize, Error>)> = vec![
        ("flow at the limit", flow(depth), Ok(depth)),
        ("flow one over", flow(depth + 1), Err(Error::TooDeep)),
        ("flow 100,000 deep", flow(100_000), Err(Error::TooDeep)),
        (
            "flow mappings 100,000 deep",
            format!("{}1{}", "{a: ".repeat(100_000), "}".repeat(100_000)),
            Err(Error::TooDeep),
        ),
        ("block mappings at the limit", block(depth), Ok(depth)),
        ("block mappings one over", block(depth + 1), Err(Error::TooDeep)),
        // Block nesting costs its indentation: 300 levels are 45 KB.
        ("block mappings 300 deep", block(300), Err(Error::TooDeep)),
    ];
    for (name, doc, want) in cases {
        let got = from_slice(doc.as_bytes()).map(|d| crate::meta::nesting_depth(&d.value));
        assert_eq!(got, want, "{name}");
    }
    assert_eq!(Error::TooDeep.to_string(), "yaml: the document nests more than 127 levels deep");
}

#[test]
fn duplicate_keys_are_listed_as_upstream_lists_them() {
    // Upstream's field validation test body: lines 10, 12 and 26 repeat a key.
    let body = [
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata:",
        "  name: x",
        "  labels:",
        "    app: nginx",
        "spec:",
        "  unknown1: val1",
        "  unknownDupe: valDupe",
        "  unknownDupe: valDupe2",
        "  paused: true",
        "  paused: false",
        "  selector:",
        "    matchLabels:",
        "      app: nginx",
        "  template:",
        "    metadata:",
        "      labels:",
        "        app: nginx",
        "    spec:",
        "      containers:",
        "      - name: nginx",
        "        image: nginx:latest",
        "        unknownNested: val1",
        "        imagePullPolicy: Always",
        "        imagePullPolicy: Never",
    ]
    .join("\n");
    let got = from_slice(body.as_bytes()).unwrap();
    assert_eq!(
        got.duplicates,
        vec![
            "line 10: key \"unknownDupe\" already set in map",
            "line 12: key \"paused\" already set in map",
            "line 26: key \"imagePullPolicy\" already set in map",
        ]
    );
    // The last value is kept, as upstream's (non-strict) decode keeps it.
    assert_eq!(got.value["spec"]["paused"], json!(false));
    assert_eq!(got.value["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], json!("Never"));

    let cases: &[(&str, &[&str])] = &[
        ("a: 1\nb: 2\n", &[]),
        ("a: 1\na: 2\na: 3\n", &["line 2: key \"a\" already set in map", "line 3: key \"a\" already set in map"]),
        // The line of the value, where it starts on a line of its own.
        ("a: 1\na:\n\n  b: 2\n", &["line 4: key \"a\" already set in map"]),
        ("a: 1\na:\n  - x\n", &["line 3: key \"a\" already set in map"]),
        // A value from an alias, or without text of its own: the key's line.
        ("x: &x [v]\na: 1\na: *x\n", &["line 3: key \"a\" already set in map"]),
        (
            "a: 1\na: 2\r\na: 3\ra: 4\n",
            &[
                "line 2: key \"a\" already set in map",
                "line 3: key \"a\" already set in map",
                "line 4: key \"a\" already set in map",
            ],
        ),
        ("{a: 1, \"a\": 2}", &["line 1: key \"a\" already set in map"]),
        // A key merged in and given again is no duplicate.
        ("m: {<<: {a: 1}, a: 2}\n", &[]),
        ("\"q\\\"t\": 1\n'q\"t': 2\n", &["line 2: key \"q\\\"t\" already set in map"]),
        ("\"\\ta\": 1\n\"\\ta\": 2\n", &["key \"\\ta\" already set in map"]),
    ];
    for (doc, want) in cases {
        let got = from_slice(doc.as_bytes()).unwrap();
        assert_eq!(got.duplicates, *want, "{doc:?}");
    }
}

#[test]
fn many_duplicate_keys_cost_what_their_text_does() {
    // ~1.2 MB of one key repeated, and of distinct keys each given twice.
    let same = "a: 1\n".repeat(250_000);
    let pairs: String = (0..60_000).map(|i| format!("k{i}: 1\nk{i}: 2\n")).collect();
    for doc in [same, pairs] {
        let (got, nodes, _) = run(&doc);
        assert!(got.is_ok());
        assert!(nodes <= doc.len() + 1);
        let decoded = from_slice(doc.as_bytes()).unwrap();
        assert_eq!(decoded.duplicates.len(), MAX_DUPLICATES);
    }
}

#[test]
fn a_stream_is_read_document_by_document_within_one_budget() {
    assert_eq!(documents(b"a: 1\n---\nb: 2\n").unwrap(), vec![json!({"a": 1}), json!({"b": 2})]);
    // Empty and null documents are left out.
    assert_eq!(documents(b"").unwrap(), Vec::<Value>::new());
    assert_eq!(documents(b"a: 1\n---\n---\n~\n---\nb: 2\n").unwrap(), vec![json!({"a": 1}), json!({"b": 2})]);
    assert!(matches!(documents(b"a: [1"), Err(Error::Invalid(m)) if m.contains("unclosed bracket")));
    // Each document alone is within the limits of the whole; together they are not.
    let one = format!("a: &a [{}]\nb: [{}]\n", vec!["s"; 100].join(","), vec!["*a"; 120].join(","));
    assert!(documents(one.as_bytes()).is_ok());
    let many = vec![one.as_str(); 40].join("---\n");
    assert_eq!(documents(many.as_bytes()).unwrap_err(), Error::ExcessiveAliasing);
}

#[test]
fn line_starts_follow_libyaml_breaks() {
    let cases: &[(&str, &[usize])] =
        &[("", &[0]), ("a\nb", &[0, 2]), ("a\r\nb\rc\n", &[0, 3, 5, 7]), ("a\u{85}b\u{2028}c\u{2029}", &[0, 3, 7, 11])];
    for (text, want) in cases {
        assert_eq!(line_starts(text.as_bytes()), *want, "{text:?}");
    }
}

#[test]
fn keys_are_quoted_as_go_quotes_them() {
    let cases = [
        ("a", "\"a\""),
        ("q\"b\\", "\"q\\\"b\\\\\""),
        ("\t\n\r", "\"\\t\\n\\r\""),
        ("\u{1}\u{7f}", "\"\\x01\\x7f\""),
        ("\u{85}", "\"\\u0085\""),
        ("é☃", "\"é☃\""),
    ];
    for (key, want) in cases {
        assert_eq!(go_quote(key), want, "{key:?}");
    }
}

#[test]
fn what_the_parser_keeps_for_anchors_is_bounded() {
    // A list of 10,000 under an anchor (20 KB): kept once, within N/8 + 10,000 events.
    let list = vec!["1"; 10_000].join(",");
    let doc = format!("a: &a [{list}]\nb: 1\n");
    assert_eq!(from_slice(doc.as_bytes()).unwrap().value["a"].as_array().map(Vec::len), Some(10_000));
    // The same list under 20 nested anchors is kept 20 times: refused, though never used.
    let nested = format!("a: {}[{list}]{}\n", (0..20).map(|i| format!("&a{i} [")).collect::<String>(), "]".repeat(20));
    assert_eq!(from_slice(nested.as_bytes()).unwrap_err(), Error::ExcessiveAliasing);
    assert_eq!(anchored_events(0), ALIAS_NODES_FLOOR);
    assert_eq!(anchored_events(3 << 20), (3 << 17) + ALIAS_NODES_FLOOR);
}
