//! Work counters: how many storage operations, watch events, object decodes and encodes and
//! signature checks this process did, for `/metrics` (the bootstrap storm divides them by
//! the nodes it certified; docs/BENCHMARKS.md).
//!
//! What enters: one call at each place the work is done ([`storage_write`],
//! [`storage_read`], [`decoded`], [`encoded`], [`signature_checked`], a [`WatchEvents`]
//! counter per watch). What leaves: [`encode`], their OpenMetrics text. The counts are the
//! process's (every server a process runs adds to the same counts; `kustos server` runs
//! one). Each count costs one relaxed atomic add, but a storage write, which first finds
//! its resource's counters under a read lock (the write itself is a transaction).
//! Label values are fixed sets, or a resource named by a storage key (bounded by
//! [`MAX_RESOURCES`]), never a string a client sends.
//!
//! | metric | labels | counted |
//! | --- | --- | --- |
//! | `apiserver_watch_events_total` (upstream's) | `group`, `version`, `resource` | once per event per watcher, where the event is encoded into its watch response (JSON line or protobuf frame: ADDED, MODIFIED, DELETED, BOOKMARK, ERROR), for HTTP and in-process watchers alike |
//! | `kustos_storage_writes_total` | `operation` (`create`, `update`, `delete`), `resource` (`<resource>.<group>`, the resource alone for core; `other` for keys outside `/registry/<group>/<resource>/`) | each call of the backend's create, update (a compare-and-swap: every attempt of a guaranteed update, a conflict too) and delete, SQLite and etcd alike |
//! | `kustos_storage_reads_total` | `operation` (`get`, `get_at`, `get_recent`, `list`, `count`, `watch`, `watch_key`) | each call of the backend's reads; `get_recent` only where the backend serves it apart from `get` (etcd's cache), `watch` and `watch_key` once per watch started |
//! | `kustos_object_decodes_total` | `format` (`json`, `yaml`, `protobuf`, `typed`), `site` | bytes (or a `serde_json::Value`, for `typed`) read into an object |
//! | `kustos_object_encodes_total` | `format`, `site` | an object written as bytes (or into a `serde_json::Value`, for `typed`) |
//! | `kustos_signature_checks_total` | `what` | public-key signature verifications |
//! | `kustos_sqlite_commits_total` | `waited` (`false`, `true`) | write transactions the embedded SQLite store committed (one `fsync` each when durable); `true`: the batch first waited for more writes to join it (`storage/sqlite/writer.rs`) |
//!
//! Sites of decodes and encodes:
//! - `request`: a request body decoded for the generic REST handlers and the kinds' own
//!   handlers (`registry::body::decode_body`; patch documents are not counted).
//! - `storage`: a stored value decoded (`meta::decode_at`, `meta::from_stored`, and the
//!   metadata-only read of `meta::write_with_rv`, once per item of a plain JSON list), or an
//!   object encoded to be stored (`meta::to_stored*`). Stored values read directly with
//!   serde by the authenticators, RBAC, flow control and the PKI are not counted.
//! - `watch`: a storage event's values decoded for a watcher (the new value, and the old
//!   one under a selector), and each watch event encoded (the event's object included).
//! - `response`: a response body encoded (`api::rest::render`, each item of a plain JSON
//!   list, an error `Status`) or an error body re-read to answer it in protobuf.
//! - `roundtrip`: an object through its kind's typed model (`registry::typed_roundtrip`):
//!   one `typed` decode and one `typed` encode.
//! - `validation`: an object decoded into its typed form to be validated
//!   (`registry::decode`, `decode_update`: one per object, the stored one too).
//!
//! Not counted: the in-process controllers' own decodes and encodes (kube-rs, in
//! `kustos server` the client side of their requests), discovery and OpenAPI documents,
//! `/metrics`, audit events.
//!
//! Signature checks (`what`):
//! - `tls_certificate_verify`: a TLS handshake's CertificateVerify (the client proving it
//!   holds its certificate's key; TLS 1.2 and 1.3).
//! - `client_certificate_chain`: a client certificate chain verified for authentication (a
//!   cache miss of the x509 authenticator; each chain verification checks one signature per
//!   certificate up to the trusted CA).
//! - `issued_certificate`: the CA's check that a certificate it just issued (or
//!   cross-signed) verifies against its key (`kustos_ca::signed_by`, every caller).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

/// The most distinct `resource` labels of storage writes; later ones count as `other`.
pub const MAX_RESOURCES: usize = 512;

/// How an object was read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
    Protobuf,
    /// A `serde_json::Value` converted into a typed (k8s-openapi) object, or back.
    Typed,
}

impl Format {
    const ALL: [Format; 4] = [Format::Json, Format::Yaml, Format::Protobuf, Format::Typed];

    fn label(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Yaml => "yaml",
            Format::Protobuf => "protobuf",
            Format::Typed => "typed",
        }
    }
}

/// Where an object was decoded or encoded (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    Request,
    Storage,
    Watch,
    Response,
    Roundtrip,
    Validation,
}

impl Site {
    const ALL: [Site; 6] =
        [Site::Request, Site::Storage, Site::Watch, Site::Response, Site::Roundtrip, Site::Validation];

    fn label(self) -> &'static str {
        match self {
            Site::Request => "request",
            Site::Storage => "storage",
            Site::Watch => "watch",
            Site::Response => "response",
            Site::Roundtrip => "roundtrip",
            Site::Validation => "validation",
        }
    }
}

/// A storage write, as the backend is asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Create,
    Update,
    Delete,
}

impl Write {
    const ALL: [Write; 3] = [Write::Create, Write::Update, Write::Delete];

    fn label(self) -> &'static str {
        match self {
            Write::Create => "create",
            Write::Update => "update",
            Write::Delete => "delete",
        }
    }
}

/// A storage read, as the backend is asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    Get,
    GetAt,
    GetRecent,
    List,
    Count,
    Watch,
    WatchKey,
}

impl Read {
    const ALL: [Read; 7] =
        [Read::Get, Read::GetAt, Read::GetRecent, Read::List, Read::Count, Read::Watch, Read::WatchKey];

    fn label(self) -> &'static str {
        match self {
            Read::Get => "get",
            Read::GetAt => "get_at",
            Read::GetRecent => "get_recent",
            Read::List => "list",
            Read::Count => "count",
            Read::Watch => "watch",
            Read::WatchKey => "watch_key",
        }
    }
}

/// A signature verification (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    TlsCertificateVerify,
    ClientCertificateChain,
}

impl Signature {
    const ALL: [Signature; 2] = [Signature::TlsCertificateVerify, Signature::ClientCertificateChain];

    fn label(self) -> &'static str {
        match self {
            Signature::TlsCertificateVerify => "tls_certificate_verify",
            Signature::ClientCertificateChain => "client_certificate_chain",
        }
    }
}

const FORMATS: usize = Format::ALL.len();
const SITES: usize = Site::ALL.len();

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO_ROW: [AtomicU64; FORMATS] = [ZERO; FORMATS];

static DECODES: [[AtomicU64; FORMATS]; SITES] = [ZERO_ROW; SITES];
static ENCODES: [[AtomicU64; FORMATS]; SITES] = [ZERO_ROW; SITES];
static READS: [AtomicU64; Read::ALL.len()] = [ZERO; Read::ALL.len()];
static SIGNATURES: [AtomicU64; Signature::ALL.len()] = [ZERO; Signature::ALL.len()];
/// SQLite commits: [at once, after waiting for more writes].
static SQLITE_COMMITS: [AtomicU64; 2] = [ZERO; 2];

/// Writes per resource label, each with a count per [`Write`].
type WriteCounts = Arc<[AtomicU64; Write::ALL.len()]>;
static WRITES: LazyLock<RwLock<HashMap<String, WriteCounts>>> = LazyLock::new(Default::default);

/// A kind's (group, version, resource).
type Gvr = (String, String, String);
/// Watch events per kind.
static WATCH_EVENTS: LazyLock<Mutex<HashMap<Gvr, Arc<AtomicU64>>>> = LazyLock::new(Default::default);

/// Count an object decoded.
pub fn decoded(format: Format, site: Site) {
    DECODES[site as usize][format as usize].fetch_add(1, Relaxed);
}

/// Count an object encoded.
pub fn encoded(format: Format, site: Site) {
    ENCODES[site as usize][format as usize].fetch_add(1, Relaxed);
}

/// Count a read the storage backend is asked for.
pub fn storage_read(op: Read) {
    READS[op as usize].fetch_add(1, Relaxed);
}

/// Count a signature verification.
pub fn signature_checked(what: Signature) {
    SIGNATURES[what as usize].fetch_add(1, Relaxed);
}

/// Count a write transaction the SQLite store committed; `waited`: its batch first waited
/// for more writes.
pub fn sqlite_commit(waited: bool) {
    SQLITE_COMMITS[usize::from(waited)].fetch_add(1, Relaxed);
}

/// The part of a storage key naming its kind: `/registry/<group>/<resource>/...` →
/// `<group>/<resource>`, `other` for any other key.
pub fn kind_path(key: &str) -> &str {
    let Some(rest) = key.strip_prefix("/registry/") else { return "other" };
    let mut slashes = rest.match_indices('/').map(|(i, _)| i);
    match (slashes.next(), slashes.next()) {
        (Some(g), Some(r)) if g > 0 && r > g + 1 => &rest[..r],
        _ => "other",
    }
}

/// The `resource` label of a [`kind_path`]: `<resource>.<group>`, the resource alone for
/// `core`.
fn resource_label(path: &str) -> String {
    match path.split_once('/') {
        Some(("core", r)) => r.to_string(),
        Some((g, r)) => format!("{r}.{g}"),
        None => path.to_string(),
    }
}

/// Count a write the storage backend is asked for, on `key`.
pub fn storage_write(op: Write, key: &str) {
    if let Some(counts) = counts_of(&WRITES, kind_path(key), MAX_RESOURCES) {
        counts[op as usize].fetch_add(1, Relaxed);
    }
}

/// The counts of `name` in `map`, added when new; `other`'s once `map` holds `max` names.
fn counts_of(map: &RwLock<HashMap<String, WriteCounts>>, name: &str, max: usize) -> Option<WriteCounts> {
    if let Some(c) = map.read().ok()?.get(name) {
        return Some(c.clone());
    }
    let mut m = map.write().ok()?;
    let key = if m.len() >= max && !m.contains_key(name) { "other" } else { name };
    Some(m.entry(key.to_string()).or_default().clone())
}
/// The watch-event counter of one watch, resolved once when it starts.
#[derive(Debug, Clone)]
pub struct WatchEvents(Arc<AtomicU64>);

impl WatchEvents {
    /// The counter of watches of this kind (its group, version and resource come from the
    /// served kinds, so the set is bounded by them).
    pub fn of(group: &str, version: &str, resource: &str) -> WatchEvents {
        let key = (group.to_string(), version.to_string(), resource.to_string());
        let mut m = WATCH_EVENTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        WatchEvents(m.entry(key).or_default().clone())
    }

    /// Count one event sent.
    pub fn sent(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    /// The events counted so far for this kind.
    pub fn count(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn header(text: &mut String, name: &str, help: &str) {
    let _ = write!(text, "# HELP {name} {help}\n# TYPE {name} counter\n");
}

/// The OpenMetrics text of the counters (no `# EOF`), with `issued_certificate` checks
/// (counted by the CA crate) given by the caller. Counters never used are left out but
/// for the decode and encode tables, which are printed whole.
pub fn encode(issued_certificate_checks: u64) -> String {
    let mut text = String::new();
    header(&mut text, "apiserver_watch_events", "Number of events sent in watch clients");
    let mut watch: Vec<((String, String, String), u64)> =
        WATCH_EVENTS.lock().map(|m| m.iter().map(|(k, v)| (k.clone(), v.load(Relaxed))).collect()).unwrap_or_default();
    watch.sort();
    for ((g, v, r), n) in watch {
        let _ = writeln!(
            text,
            "apiserver_watch_events_total{{group=\"{}\",version=\"{}\",resource=\"{}\"}} {n}",
            escape(&g),
            escape(&v),
            escape(&r)
        );
    }
    header(&mut text, "kustos_storage_writes", "Writes (create, update, delete) the storage backend was asked for.");
    let mut writes: Vec<(String, [u64; Write::ALL.len()])> = WRITES
        .read()
        .map(|m| m.iter().map(|(k, v)| (resource_label(k), std::array::from_fn(|i| v[i].load(Relaxed)))).collect())
        .unwrap_or_default();
    writes.sort();
    for (resource, counts) in writes {
        for op in Write::ALL {
            let _ = writeln!(
                text,
                "kustos_storage_writes_total{{operation=\"{}\",resource=\"{}\"}} {}",
                op.label(),
                escape(&resource),
                counts[op as usize]
            );
        }
    }
    header(&mut text, "kustos_storage_reads", "Reads the storage backend was asked for.");
    for op in Read::ALL {
        let _ = writeln!(
            text,
            "kustos_storage_reads_total{{operation=\"{}\"}} {}",
            op.label(),
            READS[op as usize].load(Relaxed)
        );
    }
    for (name, help, table) in [
        ("kustos_object_decodes", "Objects decoded, by format and where.", &DECODES),
        ("kustos_object_encodes", "Objects encoded, by format and where.", &ENCODES),
    ] {
        header(&mut text, name, help);
        for site in Site::ALL {
            for format in Format::ALL {
                let n = table[site as usize][format as usize].load(Relaxed);
                if n > 0 {
                    let _ =
                        writeln!(text, "{name}_total{{format=\"{}\",site=\"{}\"}} {n}", format.label(), site.label());
                }
            }
        }
    }
    header(&mut text, "kustos_signature_checks", "Public-key signature verifications, by what was checked.");
    for what in Signature::ALL {
        let _ = writeln!(
            text,
            "kustos_signature_checks_total{{what=\"{}\"}} {}",
            what.label(),
            SIGNATURES[what as usize].load(Relaxed)
        );
    }
    let _ = writeln!(text, "kustos_signature_checks_total{{what=\"issued_certificate\"}} {issued_certificate_checks}");
    header(
        &mut text,
        "kustos_sqlite_commits",
        "Write transactions the SQLite store committed, by whether the batch first waited for more writes.",
    );
    for (waited, label) in [(false, "false"), (true, "true")] {
        let n = SQLITE_COMMITS[usize::from(waited)].load(Relaxed);
        let _ = writeln!(text, "kustos_sqlite_commits_total{{waited=\"{label}\"}} {n}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `line_start` (a metric name and its labels) in `text`.
    fn value(text: &str, line_start: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{line_start} in\n{text}"))
    }

    #[test]
    fn storage_keys_name_their_resource() {
        let cases = [
            ("/registry/core/secrets/kube-system/a", "core/secrets", "secrets"),
            (
                "/registry/certificates.k8s.io/certificatesigningrequests/csr-1",
                "certificates.k8s.io/certificatesigningrequests",
                "certificatesigningrequests.certificates.k8s.io",
            ),
            ("/registry/coordination.k8s.io/leases/ns/x", "coordination.k8s.io/leases", "leases.coordination.k8s.io"),
            ("/registry/core/namespaces", "other", "other"),
            ("/elsewhere/x/y/z", "other", "other"),
            ("", "other", "other"),
            ("/registry//x/y", "other", "other"),
            ("/registry/g//y", "other", "other"),
        ];
        for (key, path, label) in cases {
            assert_eq!(kind_path(key), path, "{key}");
            assert_eq!(resource_label(kind_path(key)), label, "{key}");
        }
    }

    // The counters are the process's: other tests of this crate add to them at the same
    // time, so these tests use labels no other test of the crate counts, or compare deltas
    // of their own adds within a label set nothing else here writes.
    #[test]
    fn counts_appear_in_the_text() {
        let w = WatchEvents::of("work.test.kustos.dev", "v9", "gadgets");
        for _ in 0..3 {
            w.sent();
        }
        WatchEvents::of("work.test.kustos.dev", "v9", "gadgets").sent();
        for _ in 0..2 {
            storage_write(Write::Update, "/registry/work.test.kustos.dev/gadgets/ns/a");
        }
        storage_write(Write::Delete, "/registry/work.test.kustos.dev/gadgets/b");
        let text = encode(7);
        assert_eq!(
            value(
                &text,
                "apiserver_watch_events_total{group=\"work.test.kustos.dev\",version=\"v9\",resource=\"gadgets\"}"
            ),
            4
        );
        let writes = |op: &str| {
            value(
                &text,
                &format!("kustos_storage_writes_total{{operation=\"{op}\",resource=\"gadgets.work.test.kustos.dev\"}}"),
            )
        };
        assert_eq!((writes("create"), writes("update"), writes("delete")), (0, 2, 1));
        assert_eq!(value(&text, "kustos_signature_checks_total{what=\"issued_certificate\"}"), 7);
        assert!(text.contains("# TYPE kustos_object_decodes counter\n"), "{text}");
        assert!(!text.contains("# EOF"), "the caller closes the exposition");
    }

    #[test]
    fn fixed_counters_add_one_per_call() {
        let read = |t: &str| value(t, "kustos_storage_reads_total{operation=\"count\"}");
        let sig = |t: &str| value(t, "kustos_signature_checks_total{what=\"tls_certificate_verify\"}");
        let before = encode(0);
        storage_read(Read::Count);
        signature_checked(Signature::TlsCertificateVerify);
        sqlite_commit(true);
        decoded(Format::Yaml, Site::Roundtrip);
        encoded(Format::Protobuf, Site::Validation);
        let after = encode(0);
        assert!(read(&after) > read(&before), "a count read is counted");
        assert!(sig(&after) > sig(&before), "a handshake signature is counted");
        let waited = |t: &str| value(t, "kustos_sqlite_commits_total{waited=\"true\"}");
        assert!(waited(&after) > waited(&before), "a commit after a wait is counted");
        // No code path of the crate decodes YAML in a roundtrip nor encodes protobuf in
        // validation: these samples are this test's alone.
        assert_eq!(value(&after, "kustos_object_decodes_total{format=\"yaml\",site=\"roundtrip\"}"), 1);
        assert_eq!(value(&after, "kustos_object_encodes_total{format=\"protobuf\",site=\"validation\"}"), 1);
    }

    #[test]
    fn resource_labels_are_bounded() {
        let map = RwLock::new(HashMap::new());
        for i in 0..8 {
            let c = counts_of(&map, &format!("r{i}"), 4).expect("counts");
            c[0].fetch_add(1, Relaxed);
        }
        let m = map.read().expect("not poisoned");
        let mut names: Vec<&str> = m.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(names, ["other", "r0", "r1", "r2", "r3"]);
        assert_eq!(m["other"][0].load(Relaxed), 4, "the names past the bound count as other");
        assert_eq!(m["r1"][0].load(Relaxed), 1);
    }
}
