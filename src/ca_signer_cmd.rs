//! `kustos ca status --signer NAME` and `kustos ca rotate begin|switch|finish --signer NAME`:
//! the CA of a [`Signer`] (`kustos.dev`), rotated through the API. Each step is one write of
//! the Signer's CA Secret with its resourceVersion
//! ([`kustos_controllers::signers::rotation`]); then the Signer is annotated so the
//! `signers` controller publishes the new bundle and signs from the right CA at once. A step
//! run again after it happened changes nothing, so a command killed at any point can be run
//! again. Works the same against `kustos server` and, with `kustos controller-manager`,
//! against any kube-apiserver.
//!
//! `switch` then waits (at most [`CONFIRM_WITHIN`]) until the Signer's `status.caFingerprint`
//! names the new CA: from then on every request is signed by it. `finish` is refused while
//! a certificate from the previous CA may be valid: the CSRs' certificates are counted; pod
//! certificates, which leave nothing to count, are waited for until the time `switch`
//! recorded ([`rotation::POD_CERTIFICATES_UNTIL`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use chrono::Utc;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use kustos_apiserver::pki::rotation::{self as cluster_rotation, IssuedCert};
use kustos_controllers::signers::rotation::{self, Phase, Step};
use kustos_controllers::signers::{self, NEXT_CERT, PREVIOUS_CERT};
use kustos_crds::Signer;

use crate::kubeconfig_cmd;

/// How long `switch` waits for the `signers` controller to sign from the new CA.
const CONFIRM_WITHIN: Duration = Duration::from_secs(30);

/// The kubeconfig of a `--signer` command: `--kubeconfig`, else `$KUBECONFIG`, else the
/// admin kubeconfig of `--data-dir`.
pub fn kubeconfig(flag: Option<PathBuf>, data_dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    match kubeconfig_cmd::resolve_path(flag, std::env::var_os("KUBECONFIG")) {
        Ok(p) => Ok(p),
        Err(e) => match data_dir {
            Some(dir) => Ok(dir.join("admin.kubeconfig")),
            None => Err(e),
        },
    }
}

struct Target {
    signer: Signer,
    secrets: Api<Secret>,
    secret: Secret,
    client: kube::Client,
}

async fn target(kubeconfig: &Path, name: &str) -> anyhow::Result<Target> {
    let client = kubeconfig_cmd::client(kubeconfig).await?;
    let signer = Api::<Signer>::all(client.clone())
        .get_opt(name)
        .await
        .with_context(|| format!("reading Signer {name}"))?
        .ok_or_else(|| anyhow::anyhow!("no Signer named {name:?} (kubectl get signers)"))?;
    let at = signers::ca_secret(&signer);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &at.namespace);
    let secret =
        secrets.get_opt(&at.name).await.with_context(|| format!("reading Secret {}/{}", at.namespace, at.name))?;
    let secret = secret.ok_or_else(|| {
        anyhow::anyhow!(
            "Secret {}/{} does not exist yet (the signers controller makes it; is it running?)",
            at.namespace,
            at.name
        )
    })?;
    Ok(Target { signer, secrets, secret, client })
}

fn data(secret: &Secret) -> BTreeMap<String, ByteString> {
    secret.data.clone().unwrap_or_default()
}

/// The certificates CSRs for `signer_name` were issued, through the API.
async fn issued(client: &kube::Client, signer_name: &str) -> anyhow::Result<Vec<IssuedCert>> {
    let list = Api::<CertificateSigningRequest>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing CertificateSigningRequests")?;
    Ok(list
        .items
        .iter()
        .filter(|c| c.spec.signer_name == signer_name)
        .filter_map(|c| {
            let pem = std::str::from_utf8(&c.status.as_ref()?.certificate.as_ref()?.0).ok()?;
            let der = kustos_ca::certificates_from_pem(pem).ok()?.into_iter().next()?;
            let info = kustos_ca::parse_certificate_der(&der).ok()?;
            Some(IssuedCert { der, not_after: info.not_after })
        })
        .collect())
}

/// A time in whole seconds, UTC (`2026-11-29T20:04:56Z`), rounded up.
fn rfc3339(t: chrono::DateTime<Utc>) -> String {
    let up = if t.timestamp_subsec_nanos() > 0 { t + chrono::Duration::seconds(1) } else { t };
    up.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Until when a pod certificate of the previous CA may be valid (`None`: none may be now).
fn pod_certificates_wait(t: &Target) -> anyhow::Result<Option<chrono::DateTime<Utc>>> {
    let annotation = t.secret.metadata.annotations.as_ref().and_then(|a| a.get(rotation::POD_CERTIFICATES_UNTIL));
    rotation::pod_certificates_wait(annotation.map(String::as_str), Utc::now())
        .map_err(|e| anyhow::anyhow!("Secret {}: {e}", t.secret.metadata.name.as_deref().unwrap_or_default()))
}

/// Wait until the Signer's status says the CA of `cert_pem` signs; whether it did in time.
async fn confirmed(t: &Target, name: &str, cert_pem: &str) -> bool {
    let Some(der) = kustos_ca::certificates_from_pem(cert_pem).ok().and_then(|v| v.into_iter().next()) else {
        return false;
    };
    let want = kustos_ca::fingerprint(&der);
    let api = Api::<Signer>::all(t.client.clone());
    let deadline = tokio::time::Instant::now() + CONFIRM_WITHIN;
    loop {
        if let Ok(s) = api.get(name).await {
            if s.status.and_then(|st| st.ca_fingerprint).as_deref() == Some(want.as_str()) {
                return true;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The still-valid certificates the previous CA issued, and the last expiry among them.
async fn previous_still_valid(t: &Target) -> anyhow::Result<(usize, Option<chrono::DateTime<Utc>>)> {
    let d = data(&t.secret);
    let Some(prev) = d.get(PREVIOUS_CERT) else { return Ok((0, None)) };
    let cas = kustos_ca::bundle::ca_certificates(&String::from_utf8_lossy(&prev.0)).context("previous.crt")?;
    let counts =
        cluster_rotation::count_issued(&cas, &issued(&t.client, &t.signer.spec.signer_name).await?, Utc::now());
    let valid = counts.iter().map(|c| c.valid_issued).sum();
    Ok((valid, counts.iter().filter_map(|c| c.latest_expiry).max()))
}

/// Run one rotation step on Signer `name`.
pub async fn rotate(
    kubeconfig: &Path,
    name: &str,
    step: Step,
    import: Option<(String, String)>,
    force: bool,
) -> anyhow::Result<()> {
    let t = target(kubeconfig, name).await?;
    if step == Step::Finish && rotation::phase(&data(&t.secret)) == Phase::Switched {
        let (valid, last) = previous_still_valid(&t).await?;
        if valid > 0 && !force {
            anyhow::bail!(
                "not finishing: {valid} certificate(s) issued by the previous CA of Signer {name} are still valid{}; \
                 wait, or pass --force (peers that trust only the published bundle then reject them)",
                last.map(|t| format!(", the last until {}", t.to_rfc3339())).unwrap_or_default()
            );
        }
        if valid > 0 {
            eprintln!("warning: --force: {valid} still-valid certificate(s) from the previous CA stop verifying");
        }
        if let Some(until) = pod_certificates_wait(&t)? {
            if !force {
                anyhow::bail!(
                    "not finishing: pod certificates issued by the previous CA of Signer {name} may be valid until {} \
                     (the switch, plus podCertificates.maxExpirationSeconds, plus a margin); wait, or pass --force \
                     (pods' certificates from it then stop verifying against the trust bundle)",
                    rfc3339(until)
                );
            }
            eprintln!(
                "warning: --force: pod certificates from the previous CA (valid until {} at the latest) stop verifying",
                rfc3339(until)
            );
        }
    }
    let import_ref = import.as_ref().map(|(c, k)| (c.as_str(), k.as_str()));
    let next = rotation::apply(&data(&t.secret), step, import_ref, &t.signer.spec.signer_name, Utc::now())
        .map_err(|e| anyhow::anyhow!("Signer {name}: {e}"))?;
    let Some(next) = next else {
        println!("nothing to do: already done");
        return Ok(());
    };
    let mut secret = t.secret.clone();
    let signing_pem = next.get(signers::CERT).map(|b| String::from_utf8_lossy(&b.0).into_owned()).unwrap_or_default();
    secret.data = Some(next);
    // The record of the previous CA's pod certificates goes in the same write as the step.
    let annotations = secret.metadata.annotations.get_or_insert_with(Default::default);
    match step {
        Step::Begin => {}
        Step::Switch => {
            if let Some(until) = rotation::pod_certificates_until(t.signer.spec.pod_certificates.as_ref(), Utc::now()) {
                annotations.insert(rotation::POD_CERTIFICATES_UNTIL.into(), rfc3339(until));
            }
        }
        Step::Finish => {
            annotations.remove(rotation::POD_CERTIFICATES_UNTIL);
        }
    }
    let secret_name = secret.metadata.name.clone().unwrap_or_default();
    t.secrets
        .replace(&secret_name, &PostParams::default(), &secret)
        .await
        .with_context(|| format!("writing Secret {secret_name} (changed meanwhile? run the command again)"))?;
    let step_name = match step {
        Step::Begin => "begun",
        Step::Switch => "switched",
        Step::Finish => "finished",
    };
    println!("{step_name}: Signer {name}'s CA Secret {secret_name}");
    // Wake the controller; harmless if it fails (it looks again within 30 s).
    let note = serde_json::json!({"metadata": {"annotations": {
        signers::ROTATION_ANNOTATION: format!("{step_name} {}", Utc::now().to_rfc3339())}}});
    if let Err(e) =
        Api::<Signer>::all(t.client.clone()).patch(name, &PatchParams::default(), &Patch::Merge(&note)).await
    {
        eprintln!("warning: could not annotate Signer {name} ({e}); the controller notices within 30 s");
    }
    match step {
        Step::Begin => {
            println!("next: both CAs are in the Signer's trust bundle; `kustos ca rotate switch --signer {name}`")
        }
        Step::Switch => {
            if confirmed(&t, name, &signing_pem).await {
                println!("the signers controller signs from the new CA (status.caFingerprint)");
            } else {
                eprintln!(
                    "warning: Signer {name}'s status does not name the new CA after {}s: is the signers controller \
                     running, and the Signer Ready? Until it does, the previous CA may sign",
                    CONFIRM_WITHIN.as_secs()
                );
            }
            println!("next: `kustos ca status --signer {name}` says when finishing is safe")
        }
        Step::Finish => println!("done: the previous CA is out of the Signer's trust bundle"),
    }
    Ok(())
}

/// `kustos ca status --signer NAME`.
pub async fn status(kubeconfig: &Path, name: &str) -> anyhow::Result<()> {
    let t = target(kubeconfig, name).await?;
    let d = data(&t.secret);
    let now = Utc::now();
    let issued = issued(&t.client, &t.signer.spec.signer_name).await?;
    println!("CA\tROLE\tNOT AFTER\tVALID ISSUED\tLATEST EXPIRY");
    for (key, role) in [(signers::CERT, "signs"), (NEXT_CERT, "next"), (PREVIOUS_CERT, "previous")] {
        let Some(pem) = d.get(key) else { continue };
        let cas =
            kustos_ca::bundle::ca_certificates(&String::from_utf8_lossy(&pem.0)).with_context(|| key.to_string())?;
        for count in cluster_rotation::count_issued(&cas, &issued, now) {
            println!(
                "{}\t{role}\t{}\t{}\t{}",
                // From the Signer's CA Secret: shown escaped (crate::logging::escape).
                crate::logging::escape(&count.common_name),
                count.not_after.to_rfc3339(),
                count.valid_issued,
                count.latest_expiry.map(|t| t.to_rfc3339()).unwrap_or_else(|| "-".into())
            );
        }
    }
    let verdict = match rotation::phase(&d) {
        Phase::None => "rotation: none in progress".to_string(),
        Phase::Begun => "rotation: begun (run `switch` next)".to_string(),
        Phase::Switched => match (previous_still_valid(&t).await?, pod_certificates_wait(&t)?) {
            ((0, _), None) => "rotation: switched; finish: safe".to_string(),
            ((0, _), Some(until)) => format!(
                "rotation: switched; finish: not safe: pod certificates from the previous CA may be valid until {}",
                rfc3339(until)
            ),
            ((n, last), pods) => format!(
                "rotation: switched; finish: not safe: {n} certificate(s) from the previous CA still valid{}{}",
                last.map(|t| format!(", the last until {}", t.to_rfc3339())).unwrap_or_default(),
                pods.map(|t| format!("; pod certificates from it may be valid until {}", rfc3339(t)))
                    .unwrap_or_default()
            ),
        },
    };
    println!("{verdict}");
    Ok(())
}
