//! Rotating the cluster CA without a restart: `kustos ca rotate begin|switch|finish`.
//!
//! A rotation is a sequence of durable states in `DIR/pki/`. Each command observes the files
//! ([`observe`]), [`next_step`] says the one step that brings them closer to the command's
//! goal, [`apply`] makes it (every file written whole: temporary file, fsync, rename; keys
//! created 0600), and the loop observes again until nothing is left to do. A command killed
//! between two steps leaves files a running server works with, and running it again resumes
//! where it stopped: no step is taken from memory, only from what is on disk.
//!
//! | file | what |
//! | --- | --- |
//! | `rotation.json` | `{"phase": "begun"/"switched", "old": FP, "new": FP, "signerMaxDurationSeconds": N}` (FP: SHA-256 of the CA certificate) |
//! | `ca-next.crt`, `ca-next.key` | the new CA, until `finish` |
//! | `ca-cross.crt` | the new CA certified by the old one (sent after the serving certificate between `switch` and `finish`) |
//!
//! - `begin`: `ca-next.*` (generated, or imported), `ca-cross.crt`, the new CA appended to
//!   `ca.crt` (trust bundle old + new), the admin kubeconfig's CA data = the bundle, then
//!   `rotation.json` (phase `begun`). `ca.key` still signs with the old CA.
//! - `switch`: `ca.key` ← the new key (the signers follow it), the serving certificate
//!   re-issued from the new CA with the cross-signed certificate as chain (clients that trust
//!   only the old CA still verify it), a new admin client certificate, then phase `switched`.
//!   `--force-renewal-before` records `signerMaxDurationSeconds` first: the CSR signer caps
//!   what it issues while the rotation lasts.
//! - `finish`: the chain is taken off the serving certificate, the old CA dropped from
//!   `ca.crt`, the admin kubeconfig's CA data follows, the rotation files are removed,
//!   `rotation.json` last. Whether it is safe is the caller's question (it counts, through
//!   the API, the still-valid certificates the old CA issued).
//!
//! The running apiserver follows `ca.crt` (client trust, TLS hints, `kube-public/cluster-info`)
//! and `apiserver.crt`/`apiserver.key` (serving); the controllers follow `ca.crt`/`ca.key`
//! (signers, `kube-root-ca.crt`) and `rotation.json` (the signer's cap).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use chrono::{DateTime, Utc};
use kustos_ca::bundle::{ca_certificates, BundleCert};
use kustos_ca::{fingerprint, pem_encode, signed_by, Ca, IssueParams, KeyPair, SignerBundle};
use serde::{Deserialize, Serialize};

use super::{
    read_admin_kubeconfig, read_optional, write_private, write_public, KubeconfigAuth, ADMIN_USER, CA_COMMON_NAME,
    CA_VALIDITY, CERT_VALIDITY, SERVING_COMMON_NAME,
};

/// The rotation's state file in `DIR/pki/`.
pub const STATE_FILE: &str = "rotation.json";
pub const NEXT_CERT: &str = "ca-next.crt";
pub const NEXT_KEY: &str = "ca-next.key";
pub const CROSS_CERT: &str = "ca-cross.crt";
/// The field of [`STATE_FILE`] the CSR signer reads.
pub const SIGNER_MAX_DURATION_FIELD: &str = "signerMaxDurationSeconds";
/// Steps one command takes at most (a rotation needs fewer than ten).
const MAX_STEPS: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Both CAs trusted, the old one signs.
    Begun,
    /// Both CAs trusted, the new one signs.
    Switched,
}

/// `rotation.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RotationState {
    pub phase: Phase,
    /// Fingerprint of the CA being replaced.
    pub old: String,
    /// Fingerprint of the new CA.
    pub new: String,
    /// The longest lifetime the CSR signer issues until `finish` (`--force-renewal-before`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer_max_duration_seconds: Option<i64>,
}

/// What the admin kubeconfig holds, as fingerprints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminView {
    /// The CA of the bundle that issued the client certificate (`None`: none of them).
    pub issuer: Option<String>,
    /// The CA certificates of its `certificate-authority-data`.
    pub ca: Vec<String>,
}

/// The durable state, as fingerprints: what [`next_step`] decides from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    pub state: Option<RotationState>,
    /// The CA certificates of `ca.crt`, in order.
    pub bundle: Vec<String>,
    /// Those not expired: the trust bundle.
    pub trust: Vec<String>,
    /// The CA of `ca.crt` matching `ca.key`.
    pub signer: String,
    /// `ca-next.crt` when it and `ca-next.key` load as a CA.
    pub next: Option<String>,
    /// `ca-cross.crt` certifies `ca-next`'s key and is signed by the old CA (the one in
    /// `rotation.json`, or the signer before there is one).
    pub cross_ok: bool,
    /// Any of `ca-next.crt`, `ca-next.key`, `ca-cross.crt` exists.
    pub rotation_files: bool,
    /// The CA of the bundle that issued `apiserver.crt`'s leaf.
    pub serving_issuer: Option<String>,
    /// `apiserver.crt` holds more than the leaf.
    pub serving_chained: bool,
    /// `None` when there is no readable admin kubeconfig.
    pub admin: Option<AdminView>,
}

/// What a command wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Goal {
    /// `begin`; `import`: the fingerprint of a CA given with `--cert/--key`.
    Begin { import: Option<String> },
    /// `switch`; the signer's cap in seconds, when given.
    Switch { signer_max_duration_seconds: Option<i64> },
    /// `finish`; `allowed`: the caller found it safe or was told `--force`.
    Finish { allowed: bool },
    /// This directory's own files follow the shared ones another apiserver changed
    /// ([`super::sync`]): the serving certificate issued by the signing CA and chained while
    /// a switched rotation lasts, the admin certificate issued by the signing CA, the admin
    /// CA data the trust bundle. Never changes a shared file.
    Follow,
}

/// One durable change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write `ca-next.key` then `ca-next.crt` (generated or imported).
    WriteNext,
    /// Write `ca-cross.crt`: the new CA certified by the signing (old) CA.
    WriteCross,
    /// Append `ca-next.crt` to `ca.crt`.
    AddNextToBundle,
    /// Write `rotation.json`.
    WriteState(RotationState),
    /// Rewrite the admin kubeconfig's CA data as the trust bundle.
    AdminCaData,
    /// `ca.key` ← `ca-next.key`.
    InstallNextKey,
    /// Issue a serving certificate from the signing CA (same names), chained with
    /// `ca-cross.crt`.
    IssueServing,
    /// Keep only the leaf of `apiserver.crt`.
    UnchainServing,
    /// Issue a new admin client certificate from the signing CA.
    IssueAdmin,
    /// Rewrite `ca.crt` without this CA.
    DropOld(String),
    /// Remove `ca-next.*` and `ca-cross.crt`.
    RemoveRotationFiles,
    /// Remove `rotation.json`.
    RemoveState,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::WriteNext => write!(f, "wrote the new CA ({NEXT_CERT}, {NEXT_KEY})"),
            Step::WriteCross => write!(f, "cross-signed the new CA with the current one ({CROSS_CERT})"),
            Step::AddNextToBundle => write!(f, "added the new CA to the trust bundle (ca.crt)"),
            Step::WriteState(s) => write!(f, "recorded the rotation as {:?} ({STATE_FILE})", s.phase),
            Step::AdminCaData => write!(f, "set the admin kubeconfig's CA data to the trust bundle"),
            Step::InstallNextKey => write!(f, "the signers issue from the new CA (ca.key)"),
            Step::IssueServing => write!(f, "issued the serving certificate from the signing CA (apiserver.crt)"),
            Step::UnchainServing => write!(f, "took the cross-signed certificate off the serving chain"),
            Step::IssueAdmin => write!(f, "issued the admin client certificate from the signing CA"),
            Step::DropOld(fp) => write!(f, "dropped the old CA {} from the trust bundle (ca.crt)", short(fp)),
            Step::RemoveRotationFiles => write!(f, "removed {NEXT_CERT}, {NEXT_KEY} and {CROSS_CERT}"),
            Step::RemoveState => write!(f, "the rotation is finished"),
        }
    }
}

/// The first 16 hex digits of a fingerprint, for messages.
pub fn short(fp: &str) -> &str {
    fp.get(..16).unwrap_or(fp)
}

/// Why a command cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no CA rotation is in progress: run `kustos ca rotate begin` first")]
    NotBegun,
    #[error("the rotation has switched already: run `kustos ca rotate finish`")]
    AlreadySwitched,
    #[error("a rotation to another CA ({}) is in progress: finish it first", short(.0))]
    OtherRotation(String),
    #[error("the rotation has not switched yet: run `kustos ca rotate switch` first")]
    NotSwitched,
    #[error("the new CA is the one that signs already")]
    SameCa,
    #[error("{NEXT_CERT}/{NEXT_KEY} are missing or are not the new CA {} of {STATE_FILE}", short(.0))]
    NextMissing(String),
    #[error("finishing is not safe (see `kustos ca status`); --force drops the old CA anyway")]
    Unsafe,
}

/// The one step that brings `obs` closer to `goal`; `Ok(None)`: the goal is reached.
pub fn next_step(goal: &Goal, obs: &Observed) -> Result<Option<Step>, Refusal> {
    let admin_ca_stale = obs.admin.as_ref().is_some_and(|a| a.ca != obs.trust);
    match goal {
        Goal::Begin { import } => match &obs.state {
            Some(s) if s.phase == Phase::Begun => match import {
                Some(fp) if *fp != s.new => Err(Refusal::OtherRotation(s.new.clone())),
                _ => Ok(None),
            },
            Some(_) => Err(Refusal::AlreadySwitched),
            None => {
                let next = match (import, &obs.next) {
                    (Some(fp), Some(n)) if fp == n => n,
                    (None, Some(n)) => n,
                    _ => return Ok(Some(Step::WriteNext)),
                };
                if *next == obs.signer {
                    return Err(Refusal::SameCa);
                }
                if !obs.cross_ok {
                    return Ok(Some(Step::WriteCross));
                }
                if !obs.bundle.contains(next) {
                    return Ok(Some(Step::AddNextToBundle));
                }
                if admin_ca_stale {
                    return Ok(Some(Step::AdminCaData));
                }
                Ok(Some(Step::WriteState(RotationState {
                    phase: Phase::Begun,
                    old: obs.signer.clone(),
                    new: next.clone(),
                    signer_max_duration_seconds: None,
                })))
            }
        },
        Goal::Switch { signer_max_duration_seconds } => {
            let Some(s) = &obs.state else { return Err(Refusal::NotBegun) };
            if signer_max_duration_seconds.is_some() && s.signer_max_duration_seconds != *signer_max_duration_seconds {
                let mut s = s.clone();
                s.signer_max_duration_seconds = *signer_max_duration_seconds;
                return Ok(Some(Step::WriteState(s)));
            }
            if obs.signer != s.new {
                if obs.next.as_ref() != Some(&s.new) || !obs.bundle.contains(&s.new) {
                    return Err(Refusal::NextMissing(s.new.clone()));
                }
                return Ok(Some(Step::InstallNextKey));
            }
            if obs.serving_issuer.as_ref() != Some(&s.new) || !obs.serving_chained {
                return Ok(Some(Step::IssueServing));
            }
            if obs.admin.as_ref().is_some_and(|a| a.issuer.as_ref() != Some(&s.new)) {
                return Ok(Some(Step::IssueAdmin));
            }
            if admin_ca_stale {
                return Ok(Some(Step::AdminCaData));
            }
            if s.phase != Phase::Switched {
                return Ok(Some(Step::WriteState(RotationState { phase: Phase::Switched, ..s.clone() })));
            }
            Ok(None)
        }
        Goal::Follow => {
            let chained = serving_chained_wanted(obs.state.as_ref(), &obs.signer);
            if obs.serving_issuer.as_ref() != Some(&obs.signer) {
                return Ok(Some(Step::IssueServing));
            }
            if obs.serving_chained != chained {
                return Ok(Some(if chained { Step::IssueServing } else { Step::UnchainServing }));
            }
            if obs.admin.as_ref().is_some_and(|a| a.issuer.as_ref() != Some(&obs.signer)) {
                return Ok(Some(Step::IssueAdmin));
            }
            if admin_ca_stale {
                return Ok(Some(Step::AdminCaData));
            }
            Ok(None)
        }
        Goal::Finish { allowed } => {
            let Some(s) = &obs.state else { return Ok(None) };
            if s.phase != Phase::Switched {
                return Err(Refusal::NotSwitched);
            }
            if obs.bundle.contains(&s.old) {
                if !allowed {
                    return Err(Refusal::Unsafe);
                }
                if obs.serving_chained {
                    return Ok(Some(Step::UnchainServing));
                }
                return Ok(Some(Step::DropOld(s.old.clone())));
            }
            if obs.serving_chained {
                return Ok(Some(Step::UnchainServing));
            }
            if admin_ca_stale {
                return Ok(Some(Step::AdminCaData));
            }
            if obs.rotation_files {
                return Ok(Some(Step::RemoveRotationFiles));
            }
            Ok(Some(Step::RemoveState))
        }
    }
}

/// Whether the serving certificate carries the cross-signed CA: while a rotation has the new
/// CA signing (clients that trust only the old CA still verify the chain).
pub fn serving_chained_wanted(state: Option<&RotationState>, signer: &str) -> bool {
    state.is_some_and(|s| s.new == signer)
}

/// Where the files are: `DIR` and `DIR/pki`.
#[derive(Debug, Clone)]
pub struct Paths {
    pub data_dir: PathBuf,
    pub pki: PathBuf,
}

impl Paths {
    pub fn new(data_dir: &Path) -> Paths {
        Paths { data_dir: data_dir.to_path_buf(), pki: data_dir.join("pki") }
    }
    fn at(&self, name: &str) -> PathBuf {
        self.pki.join(name)
    }
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.data_dir.join("admin.kubeconfig")
    }
}

/// `rotation.json`, or `None` when there is none.
pub fn read_state(pki_dir: &Path) -> anyhow::Result<Option<RotationState>> {
    let path = pki_dir.join(STATE_FILE);
    match read_optional(&path)? {
        None => Ok(None),
        Some(text) => {
            serde_json::from_str(&text).map(Some).with_context(|| format!("{} does not parse", path.display()))
        }
    }
}

fn fps(cas: &[BundleCert]) -> Vec<String> {
    cas.iter().map(|c| fingerprint(&c.der)).collect()
}

/// The signing bundle of `ca.crt` and `ca.key`.
pub fn load_bundle(paths: &Paths) -> anyhow::Result<SignerBundle> {
    let (cert, key) = (paths.at("ca.crt"), paths.at("ca.key"));
    let cert_pem = fs::read_to_string(&cert).with_context(|| format!("reading {}", cert.display()))?;
    let key_pem = fs::read_to_string(&key).with_context(|| format!("reading {}", key.display()))?;
    SignerBundle::from_pem(&cert_pem, &key_pem)
        .with_context(|| format!("loading the cluster CA from {} and {}", cert.display(), key.display()))
}

fn load_next(paths: &Paths) -> Option<Ca> {
    let cert = read_optional(&paths.at(NEXT_CERT)).ok()??;
    let key = read_optional(&paths.at(NEXT_KEY)).ok()??;
    Ca::from_pem(&cert, &key).ok()
}

/// Read the durable state (see [`Observed`]).
pub fn observe(paths: &Paths, now: DateTime<Utc>) -> anyhow::Result<Observed> {
    let state = read_state(&paths.pki)?;
    let bundle = load_bundle(paths)?;
    let cas = bundle.ca_certificates();
    let signer = fingerprint(bundle.signer().cert_der());
    let next_ca = load_next(paths);
    let issuer_of = |der: &[u8]| cas.iter().find(|c| signed_by(der, &c.der)).map(|c| fingerprint(&c.der));
    let cross_ok = match (&next_ca, read_optional(&paths.at(CROSS_CERT))?) {
        (Some(next), Some(pem)) => {
            let old = state.as_ref().map_or(signer.clone(), |s| s.old.clone());
            let old_der = cas.iter().find(|c| fingerprint(&c.der) == old).map(|c| c.der.clone());
            kustos_ca::certificates_from_pem(&pem).ok().and_then(|c| c.into_iter().next()).is_some_and(|der| {
                kustos_ca::parse_certificate_der(&der).is_ok_and(|i| i.public_key_der == next.info().public_key_der)
                    && old_der.is_some_and(|o| signed_by(&der, &o))
            })
        }
        _ => false,
    };
    let rotation_files = [NEXT_CERT, NEXT_KEY, CROSS_CERT].iter().any(|n| paths.at(n).exists());
    let serving = read_optional(&paths.at("apiserver.crt"))?
        .and_then(|pem| kustos_ca::certificates_from_pem(&pem).ok())
        .unwrap_or_default();
    let serving_issuer = serving.first().and_then(|d| issuer_of(d));
    let admin = read_optional(&paths.admin_kubeconfig())?.as_deref().and_then(read_admin_kubeconfig).map(|k| {
        let issuer = kustos_ca::certificates_from_pem(&k.cert_pem)
            .ok()
            .and_then(|c| c.into_iter().next())
            .and_then(|d| issuer_of(&d));
        let ca = kustos_ca::certificates_from_pem(&k.ca_pem).map(|c| c.iter().map(|d| fingerprint(d)).collect());
        AdminView { issuer, ca: ca.unwrap_or_default() }
    });
    Ok(Observed {
        state,
        bundle: fps(cas),
        trust: bundle.trust_bundle_der(now).iter().map(|d| fingerprint(d)).collect(),
        signer,
        next: next_ca.map(|c| fingerprint(c.cert_der())),
        cross_ok,
        rotation_files,
        serving_issuer,
        serving_chained: serving.len() > 1,
        admin,
    })
}

/// What [`Step::WriteNext`] writes: a CA given with `--cert/--key` (PEM), or a new one.
#[derive(Clone, Default)]
pub struct NewCa {
    pub import: Option<(String, String)>,
}

impl std::fmt::Debug for NewCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewCa").field("import", &self.import.is_some()).finish()
    }
}

impl NewCa {
    /// The CA to import, checked; `None` when a new one is generated.
    pub fn imported(&self) -> anyhow::Result<Option<Ca>> {
        let Some((cert, key)) = &self.import else { return Ok(None) };
        let ca = Ca::from_pem(cert, key).context("the CA given with --cert/--key does not load")?;
        Ok(Some(ca))
    }
}

/// Make `step` (one durable change).
pub fn apply(paths: &Paths, step: &Step, new_ca: &NewCa, now: DateTime<Utc>) -> anyhow::Result<()> {
    match step {
        Step::WriteNext => {
            let ca = match new_ca.imported()? {
                Some(ca) => ca,
                None => {
                    let cn = format!("{CA_COMMON_NAME}-{}", now.format("%Y%m%d%H%M%S"));
                    Ca::generate(&cn, CA_VALIDITY, now).context("generating the new CA")?
                }
            };
            // The key first: a certificate without its key is never taken for the new CA.
            write_private(&paths.at(NEXT_KEY), &ca.key_pem())?;
            write_public(&paths.at(NEXT_CERT), ca.cert_pem())?;
        }
        Step::WriteCross => {
            let next = load_next(paths).context("the new CA does not load")?;
            let bundle = load_bundle(paths)?;
            let cross = bundle.signer().cross_sign(next.cert_der(), now).context("cross-signing the new CA")?;
            write_public(&paths.at(CROSS_CERT), &cross.cert_pem)?;
        }
        Step::AddNextToBundle => {
            let next = load_next(paths).context("the new CA does not load")?;
            let current = fs::read_to_string(paths.at("ca.crt")).context("reading ca.crt")?;
            let mut text = current.clone();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(next.cert_pem());
            write_public(&paths.at("ca.crt"), &text)?;
        }
        Step::WriteState(s) => {
            let text = serde_json::to_string_pretty(s).context("encoding the rotation state")?;
            write_public(&paths.at(STATE_FILE), &(text + "\n"))?;
        }
        Step::AdminCaData => {
            let bundle = load_bundle(paths)?;
            rewrite_admin(paths, &bundle.trust_bundle_pem(now), None)?;
        }
        Step::InstallNextKey => {
            let next = load_next(paths).context("the new CA does not load")?;
            write_private(&paths.at("ca.key"), &next.key_pem())?;
        }
        Step::IssueServing => {
            let bundle = load_bundle(paths)?;
            let current = read_optional(&paths.at("apiserver.crt"))?.context("apiserver.crt is missing")?;
            let leaf = kustos_ca::parse_certificate_pem(&current).context("apiserver.crt does not parse")?;
            let issued = bundle
                .signer()
                .issue(IssueParams::server(SERVING_COMMON_NAME, leaf.dns_names, leaf.ip_addresses, CERT_VALIDITY), now)
                .context("issuing the serving certificate")?;
            let mut chain = issued.cert_pem.clone();
            let signer = fingerprint(bundle.signer().cert_der());
            if serving_chained_wanted(read_state(&paths.pki)?.as_ref(), &signer) {
                if let Some(cross) = read_optional(&paths.at(CROSS_CERT))? {
                    chain.push_str(&cross);
                }
            }
            write_private(&paths.at("apiserver.key"), &issued.key_pem.unwrap_or_default())?;
            write_public(&paths.at("apiserver.crt"), &chain)?;
        }
        Step::UnchainServing => {
            let current = read_optional(&paths.at("apiserver.crt"))?.context("apiserver.crt is missing")?;
            let certs = kustos_ca::certificates_from_pem(&current).context("apiserver.crt does not parse")?;
            let leaf = certs.first().context("apiserver.crt holds no certificate")?;
            write_public(&paths.at("apiserver.crt"), &pem_encode("CERTIFICATE", leaf))?;
        }
        Step::IssueAdmin => {
            let bundle = load_bundle(paths)?;
            let issued = bundle
                .signer()
                .issue(
                    IssueParams::client(ADMIN_USER, vec![crate::authn::user::MASTERS_GROUP.to_string()], CERT_VALIDITY),
                    now,
                )
                .context("issuing the admin client certificate")?;
            let auth =
                KubeconfigAuth::ClientCert { cert_pem: issued.cert_pem, key_pem: issued.key_pem.unwrap_or_default() };
            rewrite_admin(paths, &bundle.trust_bundle_pem(now), Some(auth))?;
        }
        Step::DropOld(fp) => {
            let text = fs::read_to_string(paths.at("ca.crt")).context("reading ca.crt")?;
            let kept: Vec<BundleCert> =
                ca_certificates(&text)?.into_iter().filter(|c| fingerprint(&c.der) != *fp).collect();
            if kept.is_empty() {
                bail!("dropping the old CA would leave ca.crt empty");
            }
            let pem: String = kept.iter().map(|c| pem_encode("CERTIFICATE", &c.der)).collect();
            // What remains must still hold the signing CA.
            let key = fs::read_to_string(paths.at("ca.key")).context("reading ca.key")?;
            SignerBundle::from_pem(&pem, &key).context("ca.key would no longer match ca.crt")?;
            write_public(&paths.at("ca.crt"), &pem)?;
        }
        Step::RemoveRotationFiles => {
            for name in [CROSS_CERT, NEXT_CERT, NEXT_KEY] {
                remove_optional(&paths.at(name))?;
            }
        }
        Step::RemoveState => remove_optional(&paths.at(STATE_FILE))?,
    }
    sync_dir(&paths.pki);
    Ok(())
}

fn remove_optional(path: &Path) -> anyhow::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

fn sync_dir(dir: &Path) {
    // Makes renames and removals durable; not every filesystem allows it.
    let _ = fs::File::open(dir).and_then(|d| d.sync_all());
}

/// Rewrite the admin kubeconfig with `ca_pem` as CA data and, if given, a new identity.
fn rewrite_admin(paths: &Paths, ca_pem: &str, auth: Option<KubeconfigAuth>) -> anyhow::Result<()> {
    let path = paths.admin_kubeconfig();
    let text = read_optional(&path)?.with_context(|| format!("{} is missing", path.display()))?;
    let existing = read_admin_kubeconfig(&text).with_context(|| format!("{} does not parse", path.display()))?;
    let auth = auth.unwrap_or(KubeconfigAuth::ClientCert { cert_pem: existing.cert_pem, key_pem: existing.key_pem });
    write_private(&path, &super::kubeconfig_yaml(&existing.server, ca_pem, ADMIN_USER, auth))
}

/// Run `goal` to its end: observe, decide, apply, until nothing is left. `on_step` is told
/// of each step after it is durable (and may end the process: the next run resumes).
pub fn run(
    paths: &Paths,
    goal: &Goal,
    new_ca: &NewCa,
    now: DateTime<Utc>,
    mut on_step: impl FnMut(&Step),
) -> anyhow::Result<Vec<Step>> {
    if let Goal::Begin { import: Some(_) } = goal {
        new_ca.imported()?;
    }
    let mut done = Vec::new();
    for _ in 0..MAX_STEPS {
        let obs = observe(paths, now)?;
        let Some(step) = next_step(goal, &obs)? else { return Ok(done) };
        if done.last() == Some(&step) {
            bail!("the step \"{step}\" did not take effect; the files in {} need a look", paths.pki.display());
        }
        apply(paths, &step, new_ca, now)?;
        on_step(&step);
        done.push(step);
    }
    bail!("the rotation did not settle within {MAX_STEPS} steps")
}

/// Of a certificate a CSR holds: its DER and NotAfter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCert {
    pub der: Vec<u8>,
    pub not_after: DateTime<Utc>,
}

/// Per CA of the bundle: how many still-valid certificates it issued that kustos knows of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaCount {
    pub fingerprint: String,
    pub common_name: String,
    pub not_after: DateTime<Utc>,
    pub valid_issued: usize,
    pub latest_expiry: Option<DateTime<Utc>>,
}

/// Count `issued` (leaf certificates from CSRs) per CA of `cas` that signed them; expired
/// certificates are not counted.
pub fn count_issued(cas: &[BundleCert], issued: &[IssuedCert], now: DateTime<Utc>) -> Vec<CaCount> {
    cas.iter()
        .map(|ca| {
            let mine: Vec<&IssuedCert> =
                issued.iter().filter(|c| c.not_after > now && signed_by(&c.der, &ca.der)).collect();
            CaCount {
                fingerprint: fingerprint(&ca.der),
                common_name: ca.info.common_name.clone(),
                not_after: ca.info.not_after,
                valid_issued: mine.len(),
                latest_expiry: mine.iter().map(|c| c.not_after).max(),
            }
        })
        .collect()
}

/// Whether `finish` may drop the old CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishSafety {
    /// No rotation in progress.
    NoRotation,
    /// `switch` has not run yet.
    NotSwitched,
    /// The old CA is out of the bundle already (a finish was interrupted): nothing to check.
    OldGone,
    /// No still-valid certificate from the old CA is known.
    Safe,
    /// This many still-valid certificates from the old CA, the last expiring then.
    Unsafe { valid: usize, latest_expiry: Option<DateTime<Utc>> },
}

pub fn finish_safety(state: Option<&RotationState>, counts: &[CaCount]) -> FinishSafety {
    let Some(s) = state else { return FinishSafety::NoRotation };
    if s.phase != Phase::Switched {
        return FinishSafety::NotSwitched;
    }
    match counts.iter().find(|c| c.fingerprint == s.old) {
        None => FinishSafety::OldGone,
        Some(c) if c.valid_issued == 0 => FinishSafety::Safe,
        Some(c) => FinishSafety::Unsafe { valid: c.valid_issued, latest_expiry: c.latest_expiry },
    }
}

/// Whether the private key `key_pem` belongs to the first certificate of `cert_pem`.
pub fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    let (Ok(info), Ok(key)) = (kustos_ca::parse_certificate_pem(cert_pem), KeyPair::from_pem(key_pem)) else {
        return false;
    };
    info.public_key_der == key.public_key_der()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
