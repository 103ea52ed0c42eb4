//! `kustos ca status` and `kustos ca rotate begin|switch|finish`: the cluster CA of a
//! `kustos server`, rotated while it runs.
//!
//! The rotation commands change files in `DIR/pki` (and `DIR/admin.kubeconfig`), one durable
//! step at a time (`kustos_apiserver::pki::rotation`); the running server follows the files.
//! They need no connection to the server, except `finish`, which counts the old CA's
//! still-valid certificates through the API before it drops the CA (as `status` does), unless
//! `--force`. `status` reads CSRs through the API (the admin kubeconfig of `--data-dir`, or
//! `--kubeconfig`), so it works while the server runs.
//!
//! With `--signer NAME` every command works on that Signer's CA instead, through the API
//! ([`crate::ca_signer_cmd`]).
//!
//! `KUSTOS_CA_ROTATE_ABORT_AFTER_STEPS=N` makes a rotation command abort (no clean-up, as a
//! `kill -9`) right after its N-th durable step: how the tests check that a re-run resumes.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::Api;
use kustos_apiserver::pki::rotation::{self, CaCount, FinishSafety, Goal, IssuedCert, NewCa, Paths, RotationState};
use kustos_apiserver::pki::sync::generation::{self, Seen};
use kustos_ca::bundle::{ca_certificates, BundleCert};

use kustos_controllers::signers::rotation::Step;

use crate::kubeconfig_cmd;

/// Test hook: abort after this many steps.
const ABORT_AFTER_ENV: &str = "KUSTOS_CA_ROTATE_ABORT_AFTER_STEPS";

#[derive(Args)]
pub struct CaCommand {
    #[command(subcommand)]
    action: CaAction,
}

#[derive(Subcommand)]
enum CaAction {
    /// The CAs of the trust bundle, which one signs, how many still-valid certificates each
    /// issued (from CSRs), and whether finishing a rotation is safe.
    Status(StatusArgs),
    /// Rotate the cluster CA without a restart: begin, switch, finish.
    Rotate(RotateCommand),
}

#[derive(Args)]
struct StatusArgs {
    /// The server's data directory: its pki/ and admin.kubeconfig.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A cluster admin's kubeconfig (default with --data-dir: DIR/admin.kubeconfig). Without
    /// --data-dir, the trust bundle is read from kube-system/kube-root-ca.crt.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The CA of this Signer (kustos.dev) instead of the cluster CA.
    #[arg(long)]
    signer: Option<String>,
}

/// `--signer` and the kubeconfig it works through.
#[derive(Args)]
struct SignerArgs {
    /// Rotate the CA of this Signer (kustos.dev), through the API, instead of the cluster CA.
    #[arg(long)]
    signer: Option<String>,
    /// With --signer: a cluster admin's kubeconfig (default: $KUBECONFIG, else
    /// DIR/admin.kubeconfig).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[derive(Args)]
struct RotateCommand {
    #[command(subcommand)]
    step: RotateStep,
}

#[derive(Subcommand)]
enum RotateStep {
    /// Make a new CA (or import one), cross-signed by the current one, and trust both.
    /// Nothing is re-issued yet.
    Begin(BeginArgs),
    /// The signers issue from the new CA; the serving certificate and the admin kubeconfig
    /// are re-issued from it.
    Switch(SwitchArgs),
    /// Drop the old CA from the trust bundle (refused while certificates it issued are
    /// still valid, unless --force).
    Finish(FinishArgs),
}

#[derive(Args)]
struct DataDir {
    /// The server's data directory.
    #[arg(long, default_value = "./kustos-data")]
    data_dir: PathBuf,
}

#[derive(Args)]
struct BeginArgs {
    #[command(flatten)]
    dir: DataDir,
    /// Import this CA certificate (PEM) instead of generating one.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// The private key of --cert (PEM).
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    #[command(flatten)]
    signer: SignerArgs,
}

#[derive(Args)]
struct SwitchArgs {
    #[command(flatten)]
    dir: DataDir,
    /// Until `finish`, the CSR signer issues certificates lasting at most this long (e.g.
    /// 24h), so that clients renewing at 70-90 % of their lifetime renew within it.
    #[arg(long, value_parser = crate::parse_duration)]
    force_renewal_before: Option<std::time::Duration>,
    #[command(flatten)]
    signer: SignerArgs,
}

#[derive(Args)]
struct FinishArgs {
    #[command(flatten)]
    dir: DataDir,
    /// Drop the old CA even while certificates it issued are still valid (they stop working).
    #[arg(long)]
    force: bool,
    /// The admin kubeconfig used to count certificates (default: DIR/admin.kubeconfig).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Finish the rotation of this Signer's CA (kustos.dev), through the API, instead of the
    /// cluster CA's.
    #[arg(long)]
    signer: Option<String>,
}

pub async fn run(cmd: CaCommand) -> anyhow::Result<()> {
    match cmd.action {
        CaAction::Status(args) => match &args.signer {
            Some(name) => {
                let kc = crate::ca_signer_cmd::kubeconfig(args.kubeconfig.clone(), args.data_dir.as_deref())?;
                crate::ca_signer_cmd::status(&kc, name).await
            }
            None => status(args).await,
        },
        CaAction::Rotate(r) => match r.step {
            RotateStep::Begin(a) => {
                let import = match (&a.cert, &a.key) {
                    (Some(c), Some(k)) => Some((read_text(c)?, read_text(k)?)),
                    _ => None,
                };
                if let Some(name) = &a.signer.signer {
                    let kc = crate::ca_signer_cmd::kubeconfig(a.signer.kubeconfig.clone(), Some(&a.dir.data_dir))?;
                    return crate::ca_signer_cmd::rotate(&kc, name, Step::Begin, import, false).await;
                }
                let new_ca = NewCa { import };
                let fp = new_ca.imported()?.map(|ca| kustos_ca::fingerprint(ca.cert_der()));
                rotate(&a.dir.data_dir, &Goal::Begin { import: fp }, &new_ca).await?;
                println!("next: the new CA is trusted everywhere; run `kustos ca rotate switch` to issue from it");
                Ok(())
            }
            RotateStep::Switch(a) => {
                if let Some(name) = &a.signer.signer {
                    if a.force_renewal_before.is_some() {
                        anyhow::bail!("--force-renewal-before applies to the cluster CA's signers, not to --signer");
                    }
                    let kc = crate::ca_signer_cmd::kubeconfig(a.signer.kubeconfig.clone(), Some(&a.dir.data_dir))?;
                    return crate::ca_signer_cmd::rotate(&kc, name, Step::Switch, None, false).await;
                }
                let cap = a
                    .force_renewal_before
                    .map(|d| i64::try_from(d.as_secs()).context("--force-renewal-before is too long"))
                    .transpose()?;
                if cap == Some(0) {
                    anyhow::bail!("--force-renewal-before must be positive");
                }
                rotate(&a.dir.data_dir, &Goal::Switch { signer_max_duration_seconds: cap }, &NewCa::default()).await?;
                println!(
                    "next: clients move to the new CA as they renew; `kustos ca status` says when finishing is safe"
                );
                Ok(())
            }
            RotateStep::Finish(a) => finish(a).await,
        },
    }
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Run `goal` on the files of `data_dir`, printing each step.
async fn rotate(data_dir: &Path, goal: &Goal, new_ca: &NewCa) -> anyhow::Result<()> {
    let paths = Paths::new(data_dir);
    let abort_after: Option<usize> = std::env::var(ABORT_AFTER_ENV).ok().and_then(|v| v.parse().ok());
    let mut n = 0usize;
    let steps = rotation::run(&paths, goal, new_ca, Utc::now(), |step| {
        println!("{step}");
        n += 1;
        if abort_after == Some(n) {
            std::process::abort();
        }
    })
    .with_context(|| format!("rotating the CA in {}", paths.pki.display()))?;
    if steps.is_empty() {
        println!("nothing to do: already done");
    }
    crate::pki_followers::wait(data_dir).await
}

async fn finish(a: FinishArgs) -> anyhow::Result<()> {
    if let Some(name) = &a.signer {
        let kc = crate::ca_signer_cmd::kubeconfig(a.kubeconfig.clone(), Some(&a.dir.data_dir))?;
        return crate::ca_signer_cmd::rotate(&kc, name, Step::Finish, None, a.force).await;
    }
    let paths = Paths::new(&a.dir.data_dir);
    let state = rotation::read_state(&paths.pki)?;
    let bundle = rotation::load_bundle(&paths)?;
    let old_in_bundle = state
        .as_ref()
        .is_some_and(|s| bundle.ca_certificates().iter().any(|c| kustos_ca::fingerprint(&c.der) == s.old));
    let mut allowed = a.force || !old_in_bundle;
    if !allowed {
        let kubeconfig = a.kubeconfig.clone().unwrap_or_else(|| paths.admin_kubeconfig());
        let counted = match issued_certificates(&kubeconfig).await {
            Ok(issued) => {
                let counts = rotation::count_issued(bundle.ca_certificates(), &issued, Utc::now());
                Ok(rotation::finish_safety(state.as_ref(), &counts))
            }
            Err(e) => Err(e),
        };
        match counted {
            Ok(FinishSafety::Unsafe { valid, latest_expiry }) => anyhow::bail!(
                "not finishing: {valid} certificate(s) issued by the old CA are still valid{}; wait, or pass --force \
                 (their holders then fail to authenticate)",
                latest_expiry.map(|t| format!(", the last until {}", t.to_rfc3339())).unwrap_or_default()
            ),
            Ok(_) => allowed = true,
            Err(e) => anyhow::bail!(
                "not finishing: cannot count the old CA's certificates through the API ({e:#}); \
                 is the server running? --force drops the old CA without counting"
            ),
        }
    }
    if a.force && old_in_bundle {
        eprintln!(
            "warning: --force: client certificates issued by the old CA stop authenticating, and clients that trust \
             only the old CA (kubeconfigs, kubelets' CA files) no longer verify the serving certificate"
        );
    }
    rotate(&a.dir.data_dir, &Goal::Finish { allowed }, &NewCa::default()).await
}

/// The leaf certificates of every CSR's `status.certificate`, through the API.
async fn issued_certificates(kubeconfig: &Path) -> anyhow::Result<Vec<IssuedCert>> {
    let client = kubeconfig_cmd::client(kubeconfig).await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let list = csrs.list(&ListParams::default()).await.context("listing CertificateSigningRequests")?;
    Ok(list.items.iter().filter_map(issued_of).collect())
}

fn issued_of(csr: &CertificateSigningRequest) -> Option<IssuedCert> {
    let pem = std::str::from_utf8(&csr.status.as_ref()?.certificate.as_ref()?.0).ok()?;
    let der = kustos_ca::certificates_from_pem(pem).ok()?.into_iter().next()?;
    let info = kustos_ca::parse_certificate_der(&der).ok()?;
    Some(IssuedCert { der, not_after: info.not_after })
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let now = Utc::now();
    let mut shared = None;
    let (cas, signer, state, kubeconfig) = match &args.data_dir {
        Some(dir) => {
            let paths = Paths::new(dir);
            let bundle = rotation::load_bundle(&paths)?;
            let signer = kustos_ca::fingerprint(bundle.signer().cert_der());
            let state = rotation::read_state(&paths.pki)?;
            shared = generation::read(&paths.pki)?;
            let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| paths.admin_kubeconfig());
            (bundle.ca_certificates().to_vec(), Some(signer), Some(state), kubeconfig)
        }
        None => {
            let kubeconfig = kubeconfig_cmd::resolve_path(args.kubeconfig.clone(), std::env::var_os("KUBECONFIG"))?;
            let client = kubeconfig_cmd::client(&kubeconfig).await?;
            let cm = Api::<ConfigMap>::namespaced(client, "kube-system")
                .get("kube-root-ca.crt")
                .await
                .context("reading kube-system/kube-root-ca.crt")?;
            let pem = cm.data.and_then(|d| d.get("ca.crt").cloned()).unwrap_or_default();
            let cas = ca_certificates(&pem).context("kube-system/kube-root-ca.crt holds no CA certificate")?;
            (cas, None, None, kubeconfig)
        }
    };
    let issued = issued_certificates(&kubeconfig).await?;
    let counts = rotation::count_issued(&cas, &issued, now);
    print!("{}", render(&cas, &counts, signer.as_deref(), state.as_ref(), now));
    print!("{}", render_shared(shared.as_ref()));
    Ok(())
}

fn date(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The status report. `signer`/`state`: `None` when unknown (no data directory given).
fn render(
    cas: &[BundleCert],
    counts: &[CaCount],
    signer: Option<&str>,
    state: Option<&Option<RotationState>>,
    now: DateTime<Utc>,
) -> String {
    let mut out = String::from("CA\tFINGERPRINT\tNOT AFTER\tSIGNS\tVALID ISSUED\tLATEST EXPIRY\n");
    for (ca, count) in cas.iter().zip(counts) {
        let signs = match signer {
            Some(s) if s == count.fingerprint => "yes",
            Some(_) => "no",
            None => "unknown",
        };
        let expired = if ca.unexpired_at(now) { "" } else { " (expired)" };
        out.push_str(&format!(
            "{}\t{}\t{}{expired}\t{signs}\t{}\t{}\n",
            count.common_name,
            rotation::short(&count.fingerprint),
            date(count.not_after),
            count.valid_issued,
            count.latest_expiry.map(date).unwrap_or_else(|| "-".into()),
        ));
    }
    let Some(state) = state else {
        out.push_str("rotation: unknown (the rotation state is in the data directory: pass --data-dir)\n");
        return out;
    };
    match state {
        None => out.push_str("rotation: none in progress\n"),
        Some(s) => {
            out.push_str(&format!(
                "rotation: {:?} (old {}, new {})\n",
                s.phase,
                rotation::short(&s.old),
                rotation::short(&s.new)
            ));
            if let Some(cap) = s.signer_max_duration_seconds {
                out.push_str(&format!("signer: issues for at most {cap}s until finish\n"));
            }
        }
    }
    let verdict = match rotation::finish_safety(state.as_ref(), counts) {
        FinishSafety::NoRotation => "finish: nothing to finish".to_string(),
        FinishSafety::NotSwitched => "finish: not yet (run `kustos ca rotate switch` first)".to_string(),
        FinishSafety::OldGone => "finish: safe (the old CA is out of the bundle already)".to_string(),
        FinishSafety::Safe => "finish: safe (no still-valid certificate from the old CA is known)".to_string(),
        FinishSafety::Unsafe { valid, latest_expiry } => format!(
            "finish: not safe: {valid} certificate(s) from the old CA still valid{}",
            latest_expiry.map(|t| format!(", the last until {}", date(t))).unwrap_or_default()
        ),
    };
    out.push_str(&verdict);
    out.push('\n');
    out
}

/// The shared PKI record as this directory's apiserver saw it (on etcd), and the last record
/// it refused.
fn render_shared(seen: Option<&Seen>) -> String {
    let Some(seen) = seen else { return String::new() };
    let mut out = format!("shared PKI: generation {} in etcd\n", seen.generation);
    if let Some(r) = &seen.refused {
        out.push_str(&format!("shared PKI: REFUSED: {r}\n"));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::Duration;
    use kustos_apiserver::pki::rotation::Phase;

    #[test]
    fn status_report() {
        let now = Utc::now();
        let old = kustos_ca::Ca::generate("kustos-ca", Duration::days(365), now).unwrap();
        let new = kustos_ca::Ca::generate("kustos-ca-2", Duration::days(3650), now).unwrap();
        let cas = ca_certificates(&format!("{}{}", old.cert_pem(), new.cert_pem())).unwrap();
        let leaf = old.issue(kustos_ca::IssueParams::client("n", vec![], Duration::days(2)), now).unwrap();
        let issued = vec![IssuedCert { der: leaf.cert_der, not_after: leaf.not_after }];
        let counts = rotation::count_issued(&cas, &issued, now);
        let (ofp, nfp) = (kustos_ca::fingerprint(old.cert_der()), kustos_ca::fingerprint(new.cert_der()));
        let st = |phase| {
            Some(RotationState { phase, old: ofp.clone(), new: nfp.clone(), signer_max_duration_seconds: Some(60) })
        };
        type Case<'a> = (Option<&'a str>, Option<Option<RotationState>>, &'a [&'a str]);
        let cases: Vec<Case> = vec![
            (
                Some(&nfp),
                Some(st(Phase::Switched)),
                &[
                    "kustos-ca\t",
                    "\tno\t1\t",
                    "kustos-ca-2\t",
                    "\tyes\t0\t-",
                    "rotation: Switched",
                    "at most 60s",
                    "finish: not safe: 1 certificate(s)",
                ],
            ),
            (Some(&ofp), Some(st(Phase::Begun)), &["\tyes\t1\t", "finish: not yet"]),
            (Some(&ofp), Some(None), &["rotation: none in progress", "finish: nothing to finish"]),
            (None, None, &["\tunknown\t", "rotation: unknown"]),
        ];
        for (signer, state, want) in cases {
            let text = render(&cas, &counts, signer, state.as_ref(), now);
            for w in want {
                assert!(text.contains(w), "{w:?} missing from:\n{text}");
            }
        }
        let refused = generation::Refusal {
            generation: 2,
            highest: 5,
            fork: false,
            unopened: false,
            at: now,
            resealed_as: Some(6),
        };
        let seen = Seen { generation: 6, digest: "d".into(), refused: Some(refused) };
        let text = render_shared(Some(&seen));
        assert!(text.starts_with("shared PKI: generation 6 in etcd\n"), "{text}");
        assert!(text.contains("REFUSED: refused a record of generation 2, older than generation 5"), "{text}");
        assert!(render_shared(Some(&Seen { refused: None, ..seen })).lines().count() == 1);
        assert_eq!(render_shared(None), "", "on SQLite: nothing");
        let none = rotation::count_issued(&cas, &[], now);
        let text = render(&cas, &none, Some(&nfp), Some(&st(Phase::Switched)), now);
        assert!(text.contains("finish: safe (no still-valid"), "{text}");
    }
}
