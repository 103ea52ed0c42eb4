//! `kube-apiserver-serving-clustertrustbundle-publisher`: ClusterTrustBundles with the CA
//! certificates the cluster's signers issue from, followed through rotations.
//!
//! As upstream's publisher, a bundle for `kubernetes.io/kube-apiserver-serving` holding the
//! root CA bundle (`--root-ca-file`, kustos server's `ca.crt`), named
//! `kubernetes.io:kube-apiserver-serving:<hex of the first 12 bytes of its SHA-256>`; and
//! beyond upstream one bundle per signer kustos issues for (`kube-apiserver-client`,
//! `kube-apiserver-client-kubelet`, `kubelet-serving`) from that signer's certificate file,
//! named the same way. A bundle holds the file's unexpired CA certificates, deduplicated
//! (`kustos_ca::bundle::trust_bundle`); a new content is a new name, so a rotation creates
//! the new bundle, then deletes the old one. The bundles carry [`LABEL`]; only bundles with
//! the label are ever deleted, and a signer whose file does not read keeps its bundles.
//!
//! The API version is chosen once at start by discovery: `certificates.k8s.io/v1`, else
//! `v1beta1`, else `v1alpha1` (the bundles are written as dynamic objects, so one code path
//! serves every version); against an apiserver that serves none of them the controller logs
//! one line and does nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;

use crate::runtime::{changes, file_changes, tolerate_races, whole_world};

pub const NAME: &str = "kube-apiserver-serving-clustertrustbundle-publisher";
/// The signer of the apiserver's serving certificates (upstream's publisher's signer).
pub const KUBE_APISERVER_SERVING: &str = "kubernetes.io/kube-apiserver-serving";
/// Label of the bundles this controller owns (value [`NAME`]).
pub const LABEL: &str = "kustos.dev/published-by";
const GROUP: &str = "certificates.k8s.io";
/// API versions tried, in order.
pub const VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

/// Upstream's bundle name: the signer with `/` as `:`, then `:` and the hex of the first 12
/// bytes of the bundle's SHA-256.
pub fn bundle_name(signer: &str, bundle: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bundle.as_bytes());
    format!("{}:{}", signer.replace('/', ":"), kustos_ca::hex(&digest.as_ref()[..12]))
}

/// The bundle published for a CA file's contents: its unexpired CA certificates, PEM.
pub fn bundle_of(file: &str, now: chrono::DateTime<chrono::Utc>) -> Result<String, String> {
    let ders = kustos_ca::bundle::trust_bundle(file, now).map_err(|e| e.to_string())?;
    Ok(ders.iter().map(|d| kustos_ca::pem_encode("CERTIFICATE", d)).collect())
}

/// A stored bundle as the decision reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub name: String,
    pub signer: String,
    pub trust_bundle: String,
    pub ours: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Create {
        name: String,
        signer: String,
        trust_bundle: String,
    },
    /// Set the bundle (and the label) of an existing object.
    Update {
        name: String,
        trust_bundle: String,
    },
    Delete {
        name: String,
    },
}

/// What to write. `sources` are the signers and their bundles (`Err`: the file does not read
/// now; that signer's bundles are left as they are); `existing` every stored bundle.
pub fn decide(sources: &[(String, Result<String, String>)], existing: &[Existing]) -> Vec<Action> {
    let by_name: BTreeMap<&str, &Existing> = existing.iter().map(|e| (e.name.as_str(), e)).collect();
    let mut wanted = Vec::new();
    let mut out = Vec::new();
    for (signer, bundle) in sources {
        let Ok(bundle) = bundle else { continue };
        let name = bundle_name(signer, bundle);
        match by_name.get(name.as_str()) {
            None => {
                out.push(Action::Create { name: name.clone(), signer: signer.clone(), trust_bundle: bundle.clone() })
            }
            Some(e) if e.trust_bundle != *bundle || !e.ours => {
                out.push(Action::Update { name: name.clone(), trust_bundle: bundle.clone() })
            }
            Some(_) => {}
        }
        wanted.push(name);
    }
    let unreadable: Vec<&str> = sources.iter().filter(|(_, b)| b.is_err()).map(|(s, _)| s.as_str()).collect();
    for e in existing.iter().filter(|e| e.ours) {
        if !wanted.contains(&e.name) && !unreadable.contains(&e.signer.as_str()) {
            out.push(Action::Delete { name: e.name.clone() });
        }
    }
    out
}

/// What a sync should say about each signer's file, given what was last said
/// (`reported`: signer → the problem reported and not yet cleared). A problem is reported once
/// per distinct message and its end once, so a broken file is not a warning per sync (every
/// watch event and resync runs one). `reported` is brought up to date.
pub fn reports(
    sources: &[(String, Result<String, String>)],
    reported: &mut BTreeMap<String, String>,
) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for (signer, bundle) in sources {
        match bundle {
            Err(problem) if reported.get(signer) != Some(problem) => {
                reported.insert(signer.clone(), problem.clone());
                out.push((signer.clone(), Some(problem.clone())));
            }
            Ok(_) if reported.remove(signer).is_some() => out.push((signer.clone(), None)),
            _ => {}
        }
    }
    out
}

/// A stored bundle; `ours` when its [`LABEL`] names `owner` (the controller that publishes it).
pub fn existing_of(obj: &DynamicObject, owner: &str) -> Existing {
    let spec = obj.data.get("spec");
    let text = |k: &str| spec.and_then(|s| s.get(k)).and_then(|v| v.as_str()).unwrap_or_default().to_string();
    Existing {
        name: obj.metadata.name.clone().unwrap_or_default(),
        signer: text("signerName"),
        trust_bundle: text("trustBundle"),
        ours: obj.metadata.labels.as_ref().and_then(|l| l.get(LABEL)).is_some_and(|v| v == owner),
    }
}

/// The ClusterTrustBundle API the apiserver serves, if any (v1 first, then v1beta1, v1alpha1).
pub async fn served(client: &Client) -> Option<ApiResource> {
    for version in VERSIONS {
        let Ok(list) = client.list_api_group_resources(&format!("{GROUP}/{version}")).await else { continue };
        if list.resources.iter().any(|r| r.name == "clustertrustbundles") {
            let gvk = GroupVersionKind::gvk(GROUP, version, "ClusterTrustBundle");
            return Some(ApiResource::from_gvk_with_plural(&gvk, "clustertrustbundles"));
        }
    }
    None
}

/// The signers published and the file each follows.
pub fn sources(cfg: &crate::Config) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if let Some(ca) = &cfg.root_ca_file {
        out.push((KUBE_APISERVER_SERVING.to_string(), ca.clone()));
    }
    for (signer, cert, _key) in cfg.csr_signing.configured() {
        out.push((signer.name().to_string(), cert));
    }
    out
}

/// Write `actions`, labelling what is written with `owner` ([`LABEL`]).
pub async fn apply(
    api: &Api<DynamicObject>,
    ar: &ApiResource,
    actions: Vec<Action>,
    owner: &str,
) -> Result<(), kube::Error> {
    for action in actions {
        match action {
            Action::Create { name, signer, trust_bundle } => {
                let mut obj = DynamicObject::new(&name, ar)
                    .data(json!({"spec": {"signerName": signer, "trustBundle": trust_bundle}}));
                obj.metadata.labels = Some([(LABEL.to_string(), owner.to_string())].into());
                tolerate_races(api.create(&PostParams::default(), &obj).await)?;
                tracing::info!(bundle = %name, signer = %signer, "published a ClusterTrustBundle");
            }
            Action::Update { name, trust_bundle } => {
                let mut obj = api.get(&name).await?;
                obj.data["spec"]["trustBundle"] = json!(trust_bundle);
                obj.metadata.labels.get_or_insert_with(Default::default).insert(LABEL.into(), owner.into());
                tolerate_races(api.replace(&name, &PostParams::default(), &obj).await)?;
                tracing::info!(bundle = %name, "updated a ClusterTrustBundle");
            }
            Action::Delete { name } => {
                tolerate_races(api.delete(&name, &DeleteParams::default()).await)?;
                tracing::info!(bundle = %name, "deleted a stale ClusterTrustBundle");
            }
        }
    }
    Ok(())
}

pub async fn run(client: Client, cfg: crate::Config) -> anyhow::Result<()> {
    let Some(ar) = served(&client).await else {
        tracing::info!(
            controller = NAME,
            "the apiserver serves no ClusterTrustBundles (certificates.k8s.io/v1, v1beta1 or v1alpha1): not publishing"
        );
        return Ok(());
    };
    let files = sources(&cfg);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut triggers = vec![changes(api.clone(), watcher::Config::default())];
    for (_, path) in &files {
        triggers.push(file_changes(path.clone(), Duration::from_secs(2)));
    }
    let reported = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    whole_world(NAME, triggers, cfg.resync_period, cfg.metrics.clone(), || {
        let (api, ar, files, reported) = (api.clone(), ar.clone(), files.clone(), reported.clone());
        async move {
            let now = chrono::Utc::now();
            let mut srcs = Vec::new();
            for (signer, path) in &files {
                let bundle = match kustos_filework::read_to_string(path.clone()).await {
                    Ok(text) => bundle_of(&text, now),
                    Err(e) => Err(e.to_string()),
                };
                srcs.push((signer.clone(), bundle));
            }
            let news = reports(&srcs, &mut reported.lock().unwrap_or_else(|e| e.into_inner()));
            for (signer, problem) in news {
                let file =
                    files.iter().find(|(s, _)| *s == signer).map_or(String::new(), |(_, p)| p.display().to_string());
                match problem {
                    Some(problem) => {
                        tracing::warn!(signer = %signer, file = %file, problem = %problem, "no trust bundle to publish")
                    }
                    None => tracing::info!(signer = %signer, file = %file, "the trust bundle file reads again"),
                }
            }
            let existing: Vec<Existing> =
                api.list(&ListParams::default()).await?.items.iter().map(|o| existing_of(o, NAME)).collect();
            Ok(apply(&api, &ar, decide(&srcs, &existing), NAME).await?)
        }
    })
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests {
    use super::*;

    fn ex(name: &str, signer: &str, bundle: &str, ours: bool) -> Existing {
        Existing { name: name.into(), signer: signer.into(), trust_bundle: bundle.into(), ours }
    }

    #[test]
    fn names_as_upstream() {
        // sha256("A") = 559aead0 8264d579 5d3909718cdd05abd49572e84fe55590eef31a88a08fdffd
        assert_eq!(
            bundle_name(KUBE_APISERVER_SERVING, "A"),
            "kubernetes.io:kube-apiserver-serving:559aead08264d5795d390971"
        );
        assert_eq!(bundle_name("example.com/foo", "A"), "example.com:foo:559aead08264d5795d390971");
    }

    #[test]
    fn decisions() {
        let s = KUBE_APISERVER_SERVING;
        let c = "kubernetes.io/kubelet-serving";
        let (n1, n2) = (bundle_name(s, "ONE"), bundle_name(s, "TWO"));
        let nc = bundle_name(c, "ONE");
        let src = |v: &[(&str, Result<&str, &str>)]| -> Vec<(String, Result<String, String>)> {
            v.iter().map(|(s, b)| (s.to_string(), b.map(str::to_string).map_err(str::to_string))).collect()
        };
        let create = |name: &str, signer: &str, b: &str| Action::Create {
            name: name.into(),
            signer: signer.into(),
            trust_bundle: b.into(),
        };
        let del = |name: &str| Action::Delete { name: name.into() };
        let cases: Vec<(&str, Vec<(String, Result<String, String>)>, Vec<Existing>, Vec<Action>)> = vec![
            (
                "nothing yet",
                src(&[(s, Ok("ONE")), (c, Ok("ONE"))]),
                vec![],
                vec![create(&n1, s, "ONE"), create(&nc, c, "ONE")],
            ),
            ("up to date", src(&[(s, Ok("ONE"))]), vec![ex(&n1, s, "ONE", true)], vec![]),
            (
                "rotation: new bundle, old one deleted",
                src(&[(s, Ok("TWO"))]),
                vec![ex(&n1, s, "ONE", true)],
                vec![create(&n2, s, "TWO"), del(&n1)],
            ),
            (
                "edited content is put back",
                src(&[(s, Ok("ONE"))]),
                vec![ex(&n1, s, "EDITED", true)],
                vec![Action::Update { name: n1.clone(), trust_bundle: "ONE".into() }],
            ),
            (
                "same name without the label is adopted",
                src(&[(s, Ok("ONE"))]),
                vec![ex(&n1, s, "ONE", false)],
                vec![Action::Update { name: n1.clone(), trust_bundle: "ONE".into() }],
            ),
            (
                "others' bundles are left alone",
                src(&[(s, Ok("ONE"))]),
                vec![ex(&n1, s, "ONE", true), ex("x:y:z", "x/y", "Q", false), ex(&n2, s, "TWO", false)],
                vec![],
            ),
            ("unreadable file keeps its bundles", src(&[(s, Err("gone"))]), vec![ex(&n1, s, "ONE", true)], vec![]),
            (
                "a signer no longer published",
                src(&[(s, Ok("ONE"))]),
                vec![ex(&n1, s, "ONE", true), ex(&nc, c, "ONE", true)],
                vec![del(&nc)],
            ),
        ];
        for (what, sources, existing, want) in cases {
            assert_eq!(decide(&sources, &existing), want, "{what}");
        }
    }

    #[test]
    fn problems_are_reported_once_and_their_end_once() {
        let (a, b) = ("kubernetes.io/kube-apiserver-serving", "kubernetes.io/kubelet-serving");
        let src = |v: &[(&str, Result<&str, &str>)]| -> Vec<(String, Result<String, String>)> {
            v.iter().map(|(s, b)| (s.to_string(), b.map(str::to_string).map_err(str::to_string))).collect()
        };
        let say = |signer: &str, p: Option<&str>| (signer.to_string(), p.map(str::to_string));
        // Each sync in turn, on the same memory.
        let syncs: Vec<(&str, Vec<(String, Result<String, String>)>, Vec<(String, Option<String>)>)> = vec![
            ("all good: nothing to say", src(&[(a, Ok("X")), (b, Ok("X"))]), vec![]),
            ("a breaks", src(&[(a, Err("no PEM")), (b, Ok("X"))]), vec![say(a, Some("no PEM"))]),
            ("a still broken: said already", src(&[(a, Err("no PEM")), (b, Ok("X"))]), vec![]),
            ("a broken another way", src(&[(a, Err("gone")), (b, Ok("X"))]), vec![say(a, Some("gone"))]),
            ("b breaks too", src(&[(a, Err("gone")), (b, Err("gone"))]), vec![say(b, Some("gone"))]),
            ("both read again", src(&[(a, Ok("Y")), (b, Ok("Y"))]), vec![say(a, None), say(b, None)]),
            ("and stay good", src(&[(a, Ok("Y")), (b, Ok("Y"))]), vec![]),
        ];
        let mut reported = BTreeMap::new();
        for (what, sources, want) in syncs {
            assert_eq!(reports(&sources, &mut reported), want, "{what}");
        }
    }

    #[test]
    fn bundles_hold_unexpired_cas_once() {
        let now = chrono::Utc::now();
        let a = kustos_ca::Ca::generate("a", chrono::Duration::days(1), now).unwrap();
        let b = kustos_ca::Ca::generate("b", chrono::Duration::days(1), now).unwrap();
        let leaf = a.issue(kustos_ca::IssueParams::client("leaf", vec![], chrono::Duration::hours(1)), now).unwrap();
        let file = format!("{}{}{}{}", a.cert_pem(), leaf.cert_pem, b.cert_pem(), a.cert_pem());
        let got = bundle_of(&file, now).unwrap();
        let want = format!(
            "{}{}",
            kustos_ca::pem_encode("CERTIFICATE", a.cert_der()),
            kustos_ca::pem_encode("CERTIFICATE", b.cert_der())
        );
        assert_eq!(got, want);
        assert!(bundle_of("no PEM here", now).is_err());
        assert!(bundle_of(a.cert_pem(), now + chrono::Duration::days(2)).is_err(), "expired CA");
    }
}
