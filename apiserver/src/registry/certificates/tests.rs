use super::*;
use base64::Engine as _;

const CSR_PEM: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHvMIGWAgEAMDQxFTATBgNVBAoMDHN5c3RlbTpub2RlczEbMBkGA1UEAwwSc3lz
dGVtOm5vZGU6bm9kZS0xMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEW9g/3BZn
qQq89W8OdvxQn2gQm4pNFYUONw1s+aV85g+5uaaym4bpiSymI5VZHpe8cQdrPRqV
G52KcgW+OfOqZKAAMAoGCCqGSM49BAMCA0gAMEUCIDBFTQJB6qa28AZSVCFmOoDk
PRLJEzRcnmAxHPak8K9RAiEAmpHPNQJo6I+M3cOtjbc3KW01pfAcHKAljUSvSnLA
TdQ=
-----END CERTIFICATE REQUEST-----
";

const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBdDCCARugAwIBAgIUeGtH3VW9ZsP44TItBiMZ4mKtwXIwCgYIKoZIzj0EAwIw
DzENMAsGA1UEAwwEdGVzdDAgFw0yNjExMjIwODQyMjBaGA8yMTI2MTAyOTA4NDIy
MFowDzENMAsGA1UEAwwEdGVzdDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFvY
P9wWZ6kKvPVvDnb8UJ9oEJuKTRWFDjcNbPmlfOYPubmmspuG6YkspiOVWR6XvHEH
az0alRudinIFvjnzqmSjUzBRMB0GA1UdDgQWBBRQyn/nWO6eWGGd4MIc7zyNvdQn
uDAfBgNVHSMEGDAWgBRQyn/nWO6eWGGd4MIc7zyNvdQnuDAPBgNVHRMBAf8EBTAD
AQH/MAoGCCqGSM49BAMCA0cAMEQCIFwOdReYcJ5BjsT3BxmU6LidE5DNMu6kKZIc
Nv7T97xKAiAdoe2KOBbBdBqO5fFSg5nf6URzRLr0EL/xcOkBPCRHug==
-----END CERTIFICATE-----
";

/// Two CNs: Go reads `intern-bob`, a first-CN reader `cluster-root-alice`.
const TWO_CNS_PEM: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHtMIGUAgEAMDIxGzAZBgNVBAMMEmNsdXN0ZXItcm9vdC1hbGljZTETMBEGA1UE
AwwKaW50ZXJuLWJvYjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFO/SjQ3xLC6
xtyzpz86WQscll35xr5aFMijOzOurYn+3/+Vezo53LfUHLHKTZbzt9/GOWWP/pqF
0eKbrJk8esugADAKBggqhkjOPQQDAgNIADBFAiEAnsPKNb6BzmF3A4D64MQLXoVY
bTrnLFCqxekwMs5EH4oCICtwk92lwiZPcwSwWue3S5g9fSeeWbDuO0MlAGNO0KdY
-----END CERTIFICATE REQUEST-----
";

/// `O=system:nodes` (UTF8String), `O=system:masters` (T61String), `CN=system:node:n1`.
const T61_MASTERS_PEM: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIIBAzCBqwIBADBJMRUwEwYDVQQKDAxzeXN0ZW06bm9kZXMxFzAVBgNVBAoUDnN5
c3RlbTptYXN0ZXJzMRcwFQYDVQQDDA5zeXN0ZW06bm9kZTpuMTBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABDh7E6SoJt/6elvdTTmnxqdH5HkSzoY2e9mnKWBvR4aI
5x8pqN/3q8zpHxbojLYUyA7cgdZ2/Eaj1JJmVdN2NSygADAKBggqhkjOPQQDAgNH
ADBEAiA4RR6vbImm6K/krHYppIlrxKOC/BvUNZAC4tCDNlOO8wIgJPj2iLTPw9XX
vrh0cqZHJ6X+92hXoC62t7V8c47fhDA=
-----END CERTIFICATE REQUEST-----
";

const NOW: &str = "2024-05-01T12:00:00Z";
const EARLIER: &str = "2024-05-01T11:00:00Z";

type Mutate = Box<dyn Fn(&mut Value)>;
type Conds = Vec<Value>;
/// name, stored conditions, stored certificate, sent conditions, sent certificate, errors.
type StatusCase = (&'static str, Conds, Option<&'static str>, Conds, Option<String>, Vec<&'static str>);
/// name, conditions, issued, expirationSeconds, Condition cell, RequestedDuration cell.
type TableCase = (&'static str, Conds, bool, Option<i64>, &'static str, &'static str);

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn base() -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": "node-csr-1", "creationTimestamp": "2024-05-01T11:50:00Z"},
               "spec": {"request": b64(CSR_PEM), "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["digital signature", "client auth"], "username": "system:bootstrap:abcdef",
                        "groups": ["system:bootstrappers"]},
               "status": {}})
}

fn cond(t: &str, s: &str) -> Value {
    json!({"type": t, "status": s, "reason": "r", "message": "m"})
}

fn stamped(t: &str, s: &str, at: &str) -> Value {
    json!({"type": t, "status": s, "reason": "r", "message": "m", "lastUpdateTime": at, "lastTransitionTime": at})
}

fn with_conditions(mut obj: Value, conds: Vec<Value>) -> Value {
    obj["status"]["conditions"] = Value::Array(conds);
    obj
}

fn rendered(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(FieldError::render).collect()
}

/// The fixture's CSR with the last signature byte flipped.
fn tampered_csr() -> String {
    let (block, _) = kustos_ca::pem::decode(CSR_PEM.as_bytes()).unwrap();
    let mut der = block.bytes;
    let last = der.len() - 1;
    der[last] ^= 0x01;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    format!("-----BEGIN CERTIFICATE REQUEST-----\n{body}\n-----END CERTIFICATE REQUEST-----\n")
}

const NOT_ALONE: &str =
    "the request must be exactly one CERTIFICATE REQUEST PEM block with nothing but whitespace around it";

/// A block whose END line names another type (Go skips it), then the good request.
fn mangled_then_clean() -> String {
    let mangled = TWO_CNS_PEM.replace("-----END CERTIFICATE REQUEST-----", "-----END CERTIFICATE-----");
    format!("{mangled}{CSR_PEM}")
}

#[test]
fn create_validation() {
    let usages_list = sorted(VALID_USAGES).iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(", ");
    let label_msg = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    let cases: Vec<(&str, Mutate, Vec<String>)> = vec![
            ("valid", Box::new(|_| {}), vec![]),
            ("request not PEM", Box::new(|o| o["spec"]["request"] = json!(b64("hi"))), vec![
                "spec.request: Invalid value: []byte{0x68, 0x69}: PEM block type must be CERTIFICATE REQUEST".into(),
            ]),
            ("request missing", Box::new(|o| { o["spec"].as_object_mut().unwrap().remove("request"); }), vec![
                "spec.request: Invalid value: []byte(nil): PEM block type must be CERTIFICATE REQUEST".into(),
            ]),
            ("request is a certificate", Box::new(|o| o["spec"]["request"] = json!(b64(CERT_PEM))), vec![
                format!("spec.request: Invalid value: {}: PEM block type must be CERTIFICATE REQUEST", go_bytes(Some(CERT_PEM.as_bytes()))),
            ]),
            ("bad signature", Box::new(|o| o["spec"]["request"] = json!(b64(&tampered_csr()))), vec![
                format!("spec.request: Invalid value: {}: x509: ECDSA verification failure", go_bytes(Some(tampered_csr().as_bytes()))),
            ]),
            ("garbage DER", Box::new(|o| o["spec"]["request"] = json!(b64("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))), vec![
                format!("spec.request: Invalid value: {}: x509: malformed certificate request",
                        go_bytes(Some(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))),
            ]),
            ("text before the block", Box::new(|o| o["spec"]["request"] = json!(b64(&format!("junk\n{CSR_PEM}")))), vec![
                format!("spec.request: Invalid value: {}: {NOT_ALONE}", go_bytes(Some(format!("junk\n{CSR_PEM}").as_bytes()))),
            ]),
            ("a mangled block, then a clean one", Box::new(|o| o["spec"]["request"] = json!(b64(&mangled_then_clean()))), vec![
                format!("spec.request: Invalid value: {}: {NOT_ALONE}", go_bytes(Some(mangled_then_clean().as_bytes()))),
            ]),
            ("two CNs", Box::new(|o| o["spec"]["request"] = json!(b64(TWO_CNS_PEM))), vec![
                format!("spec.request: Invalid value: {}: subject has 2 common names [\"cluster-root-alice\", \"intern-bob\"]; a request may have at most one (Go reads the last)",
                        go_bytes(Some(TWO_CNS_PEM.as_bytes()))),
            ]),
            ("O as T61String", Box::new(|o| o["spec"]["request"] = json!(b64(T61_MASTERS_PEM))), vec![
                format!("spec.request: Invalid value: {}: subject O \"system:masters\" is a T61String; only UTF8String, PrintableString and IA5String are allowed",
                        go_bytes(Some(T61_MASTERS_PEM.as_bytes()))),
            ]),
            ("no usages", Box::new(|o| o["spec"]["usages"] = json!([])), vec!["spec.usages: Required value".into()]),
            ("unknown and duplicate usages", Box::new(|o| o["spec"]["usages"] = json!(["client auth", "bogus", "client auth"])), vec![
                format!("spec.usages[1]: Unsupported value: \"bogus\": supported values: {usages_list}"),
                "spec.usages[2]: Duplicate value: \"client auth\"".into(),
            ]),
            ("no signer", Box::new(|o| o["spec"]["signerName"] = json!("")), vec!["spec.signerName: Required value".into()]),
            ("legacy signer", Box::new(|o| o["spec"]["signerName"] = json!("kubernetes.io/legacy-unknown")), vec![
                "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version".into(),
            ]),
            ("signer without path", Box::new(|o| o["spec"]["signerName"] = json!("example.com")), vec![
                "spec.signerName: Invalid value: \"example.com\": must be a fully qualified domain and path of the form 'example.com/signer-name'".into(),
            ]),
            ("signer single-label domain", Box::new(|o| o["spec"]["signerName"] = json!("example/signer")), vec![
                "spec.signerName: Invalid value: \"example\": should be a domain with at least two segments separated by dots".into(),
            ]),
            ("signer bad label", Box::new(|o| o["spec"]["signerName"] = json!("Example.com/signer")), vec![
                format!("spec.signerName: Invalid value: \"Example.com\": validating label \"Example\": {label_msg}"),
            ]),
            ("short expiration", Box::new(|o| o["spec"]["expirationSeconds"] = json!(599)), vec![
                "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)".into(),
            ]),
            ("expiration at minimum", Box::new(|o| o["spec"]["expirationSeconds"] = json!(600)), vec![]),
        ];
    for (name, mutate, want) in cases {
        let mut obj = base();
        mutate(&mut obj);
        assert_eq!(rendered(&CertificateSigningRequestStrategy.validate(&obj)), want, "{name}");
    }
}

#[test]
fn updates_trust_the_stored_request_and_check_everything_else() {
    let s = CertificateSigningRequestStrategy;
    let not_pem = |o: &mut Value| o["spec"]["request"] = json!(b64("hi"));
    let bad_request = "spec.request: Invalid value: []byte{0x68, 0x69}: PEM block type must be CERTIFICATE REQUEST";
    let mut stored_bad = base();
    not_pem(&mut stored_bad);
    type Case = (&'static str, Value, Box<dyn Fn(&mut Value)>, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        ("same valid request", base(), Box::new(|_| {}), vec![]),
        // The stored request was checked when it was created; it is not checked again.
        ("same request as stored", stored_bad.clone(), Box::new(|_| {}), vec![]),
        ("a request that differs from the stored one is checked", base(), Box::new(not_pem), vec![bad_request]),
        (
            "other rules still apply",
            base(),
            Box::new(|o| o["spec"]["usages"] = json!([])),
            vec!["spec.usages: Required value"],
        ),
    ];
    for (name, old, mutate, want) in cases {
        let mut new = old.clone();
        mutate(&mut new);
        assert!(s.validate_on_update(&new, &old).is_empty(), "{name}: checked by the next call");
        assert_eq!(rendered(&s.validate_update(&new, &old)), want, "{name}");
        for sub in ["status", "approval"] {
            assert_eq!(rendered(&s.validate_subresource(sub, &new, &old)), want, "{name} (/{sub})");
        }
    }
    assert_eq!(rendered(&s.validate(&stored_bad)), vec![bad_request], "a create checks it");
}

#[test]
fn condition_rules() {
    let cases: Vec<(&str, Vec<Value>, Vec<&str>)> = vec![
            ("approved", vec![cond("Approved", "True")], vec![]),
            ("approved false", vec![cond("Approved", "False")], vec![
                "status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\"",
            ]),
            ("failed unknown", vec![cond("Failed", "Unknown")], vec![
                "status.conditions[0].status: Unsupported value: \"Unknown\": supported values: \"True\"",
            ]),
            ("custom type any status", vec![cond("Custom", "False")], vec![]),
            ("custom type bad status", vec![cond("Custom", "Maybe")], vec![
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"",
            ]),
            ("empty type and status", vec![cond("", "")], vec![
                "status.conditions[0].type: Required value", "status.conditions[0].status: Required value",
            ]),
            ("approved and denied", vec![cond("Approved", "True"), cond("Denied", "True")], vec![
                "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
            ]),
            ("duplicate type", vec![cond("Approved", "True"), cond("Approved", "True")], vec![
                "status.conditions[1].type: Duplicate value: \"Approved\"",
            ]),
        ];
    for (name, conds, want) in cases {
        let obj = with_conditions(base(), conds);
        assert_eq!(rendered(&CertificateSigningRequestStrategy.validate(&obj)), want, "{name}");
    }
}

#[test]
fn create_and_update_preparation() {
    let mut obj = with_conditions(base(), vec![cond("Approved", "True")]);
    obj["status"]["certificate"] = json!(b64(CERT_PEM));
    CertificateSigningRequestStrategy.prepare_for_create(&mut obj);
    assert_eq!(obj["status"], json!({}), "create clears status");
    assert!(obj["spec"].get("username").is_none(), "create clears the claimed requester");
    assert!(obj["spec"].get("groups").is_none(), "create clears the claimed groups");

    let old = with_conditions(base(), vec![stamped("Approved", "True", EARLIER)]);
    let mut new = base();
    new["spec"]["signerName"] = json!("example.com/other");
    new["metadata"]["labels"] = json!({"a": "b"});
    CertificateSigningRequestStrategy.prepare_for_update(&mut new, &old);
    assert_eq!(new["spec"], old["spec"], "update keeps spec");
    assert_eq!(new["status"], old["status"], "update keeps status");
    assert_eq!(new["metadata"]["labels"], json!({"a": "b"}), "update changes metadata");
    assert!(CertificateSigningRequestStrategy.validate_update(&new, &old).is_empty(), "nothing left to reject");
}

#[test]
fn timestamp_defaulting() {
    struct Case {
        name: &'static str,
        old: Vec<Value>,
        new: Vec<Value>,
        want: Vec<(&'static str, &'static str)>,
    }
    let cases = vec![
        Case {
            name: "new condition gets now twice",
            old: vec![],
            new: vec![cond("Approved", "True")],
            want: vec![(NOW, NOW)],
        },
        Case {
            name: "same type and status keeps transition",
            old: vec![stamped("Custom", "True", EARLIER)],
            new: vec![cond("Custom", "True")],
            want: vec![(NOW, EARLIER)],
        },
        Case {
            name: "changed status transitions now",
            old: vec![stamped("Custom", "False", EARLIER)],
            new: vec![cond("Custom", "True")],
            want: vec![(NOW, NOW)],
        },
        Case {
            name: "set timestamps are kept",
            old: vec![],
            new: vec![stamped("Custom", "True", EARLIER)],
            want: vec![(EARLIER, EARLIER)],
        },
        Case {
            name: "zero time counts as unset",
            old: vec![],
            new: vec![json!({"type": "Custom", "status": "True", "lastUpdateTime": "0001-01-01T00:00:00Z"})],
            want: vec![(NOW, NOW)],
        },
    ];
    for c in cases {
        let mut new = c.new.clone();
        populate_condition_timestamps(&mut new, &c.old, NOW);
        let got: Vec<(&str, &str)> =
            new.iter().map(|x| (cond_str(x, "lastUpdateTime"), cond_str(x, "lastTransitionTime"))).collect();
        assert_eq!(got, c.want, "{}", c.name);
    }
}

#[test]
fn approval_subresource() {
    let s = CertificateSigningRequestStrategy;
    // Preparation: only conditions change, timestamps defaulted.
    let mut old = base();
    old["status"]["certificate"] = json!(b64(CERT_PEM));
    let mut new = with_conditions(base(), vec![cond("Approved", "True")]);
    new["spec"]["usages"] = json!(["server auth"]);
    new["status"]["certificate"] = json!(b64("junk"));
    prepare_approval(&mut new, &old, NOW);
    assert_eq!(new["spec"], old["spec"], "approval keeps spec");
    assert_eq!(new["status"]["certificate"], old["status"]["certificate"], "approval keeps certificate");
    assert_eq!(new["status"]["conditions"], json!([stamped("Approved", "True", NOW)]), "approval sets conditions");

    let cases: Vec<(&str, Conds, Conds, Vec<&str>)> = vec![
            ("approve", vec![], vec![cond("Approved", "True")], vec![]),
            ("deny", vec![], vec![cond("Denied", "True")], vec![]),
            ("approve a denied request", vec![stamped("Denied", "True", EARLIER)],
             vec![stamped("Denied", "True", EARLIER), cond("Approved", "True")],
             vec!["status.conditions[1].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive"]),
            ("remove approval", vec![stamped("Approved", "True", EARLIER)], vec![],
             vec!["status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""]),
            ("remove failed", vec![stamped("Failed", "True", EARLIER)], vec![cond("Approved", "True")],
             vec!["status.conditions: Forbidden: updates may not remove a condition of type \"Failed\""]),
            ("approved false", vec![], vec![cond("Approved", "False")],
             vec!["status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\""]),
        ];
    for (name, old_c, new_c, want) in cases {
        let old = with_conditions(base(), old_c);
        let mut new = with_conditions(base(), new_c);
        prepare_approval(&mut new, &old, NOW);
        assert_eq!(rendered(&s.validate_subresource("approval", &new, &old)), want, "{name}");
    }
}

#[test]
fn status_subresource() {
    let s = CertificateSigningRequestStrategy;
    let approved = vec![stamped("Approved", "True", EARLIER)];
    let cases: Vec<StatusCase> = vec![
            ("issue", approved.clone(), None, approved.clone(), Some(b64(CERT_PEM)), vec![]),
            ("fail", approved.clone(), None, vec![approved[0].clone(), cond("Failed", "True")], None, vec![]),
            ("reissue", approved.clone(), Some(CERT_PEM), approved.clone(), Some(b64(&format!("{CERT_PEM}{CERT_PEM}"))),
             vec!["status.certificate: Forbidden: updates may not modify existing certificate content"]),
            ("same certificate again", approved.clone(), Some(CERT_PEM), approved.clone(), Some(b64(CERT_PEM)), vec![]),
            ("not PEM", approved.clone(), None, approved.clone(), Some(b64("nope")),
             vec!["status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block"]),
            ("wrong block", approved.clone(), None, approved.clone(), Some(b64(CSR_PEM)),
             vec!["status.certificate: Invalid value: \"<certificate data>\": only CERTIFICATE PEM blocks are allowed, found \"CERTIFICATE REQUEST\""]),
            ("approve via status", vec![], None, vec![cond("Approved", "True")], None,
             vec!["status.conditions: Forbidden: updates may not add a condition of type \"Approved\""]),
            ("failed false", approved.clone(), None, vec![approved[0].clone(), cond("Failed", "False")], None,
             vec!["status.conditions[1].status: Unsupported value: \"False\": supported values: \"True\""]),
        ];
    for (name, old_c, old_cert, new_c, new_cert, want) in cases {
        let mut old = with_conditions(base(), old_c);
        if let Some(c) = old_cert {
            old["status"]["certificate"] = json!(b64(c));
        }
        let mut new = with_conditions(base(), new_c);
        if let Some(c) = new_cert {
            new["status"]["certificate"] = json!(c);
        }
        prepare_status(&mut new, &old, NOW);
        assert_eq!(rendered(&s.validate_subresource("status", &new, &old)), want, "{name}");
    }
    // Approved/Denied instances are preserved as stored; other conditions get timestamps.
    let old = with_conditions(base(), approved.clone());
    let mut new = with_conditions(base(), vec![cond("Approved", "True"), cond("Failed", "True")]);
    new["spec"]["signerName"] = json!("example.com/x");
    prepare_status(&mut new, &old, NOW);
    assert_eq!(new["status"]["conditions"], json!([approved[0].clone(), stamped("Failed", "True", NOW)]), "preserved");
    assert_eq!(new["spec"], old["spec"], "status keeps spec");
}

#[test]
fn table_and_fields() {
    let names: Vec<&str> = CertificateSigningRequestStrategy.columns().iter().map(|c| c.name).collect();
    assert_eq!(names, ["Age", "SignerName", "Requestor", "RequestedDuration", "Condition"], "csr columns");
    let now = chrono::DateTime::parse_from_rfc3339(NOW).unwrap().with_timezone(&chrono::Utc);
    let cases: Vec<TableCase> = vec![
        ("pending", vec![], false, None, "Pending", "<none>"),
        ("approved issued", vec![cond("Approved", "True")], true, Some(3600), "Approved,Issued", "60m"),
        ("denied", vec![cond("Denied", "True")], false, Some(86400), "Denied", "24h"),
        (
            "approved failed",
            vec![cond("Approved", "True"), cond("Failed", "True")],
            false,
            None,
            "Approved,Failed",
            "<none>",
        ),
        ("pending failed", vec![cond("Failed", "True")], false, None, "Pending,Failed", "<none>"),
    ];
    for (name, conds, issued, secs, want, want_dur) in cases {
        let mut obj = with_conditions(base(), conds);
        if issued {
            obj["status"]["certificate"] = json!(b64(CERT_PEM));
        }
        if let Some(s) = secs {
            obj["spec"]["expirationSeconds"] = json!(s);
        }
        let cells = CertificateSigningRequestStrategy.cells(&obj, now);
        assert_eq!(
            cells,
            vec![
                json!("10m"),
                json!("kubernetes.io/kube-apiserver-client-kubelet"),
                json!("system:bootstrap:abcdef"),
                json!(want_dur),
                json!(want),
            ],
            "{name}"
        );
    }
    let mut bare = base();
    bare["spec"]["signerName"] = json!("");
    assert_eq!(CertificateSigningRequestStrategy.cells(&bare, now)[1], json!("<none>"), "no signer");
    let s = CertificateSigningRequestStrategy;
    assert_eq!(
        s.field(&base(), "spec.signerName").as_deref(),
        Some("kubernetes.io/kube-apiserver-client-kubelet"),
        "signerName selectable"
    );
    assert_eq!(s.field(&json!({}), "spec.signerName").as_deref(), Some(""), "supported on probe");
    assert_eq!(s.field(&base(), "spec.username"), None, "username not selectable");
}

#[test]
fn no_panics_on_odd_json() {
    let s = CertificateSigningRequestStrategy;
    let odd =
        [json!(null), json!([]), json!({"spec": 1, "status": []}), json!({"status": {"conditions": [1, "x", null]}})];
    for o in &odd {
        let mut a = o.clone();
        s.prepare_for_create(&mut a);
        s.prepare_for_update(&mut a, o);
        s.prepare_for_subresource("status", &mut a, o);
        s.prepare_for_subresource("approval", &mut a, o);
        let _ = s.validate(o);
        let _ = s.validate_update(o, o);
        let _ = s.validate_subresource("approval", o, o);
        let _ = s.cells(o, chrono::Utc::now());
    }
}
