//! `kustos ca status --signer NAME` and `kustos ca rotate begin|switch|finish --signer NAME`:
//! the CA of a [`Signer`] (`kustos.dev`), rotated through the API. Each step is one write of
//! the Signer's CA Secret with its resourceVersion
//! ([`kustos_controllers::signers::rotation`]); then the Signer is annotated so the
//! `signers` controller publishes the new bundle and signs from the right CA at once. A step
//! run again after it happened changes nothing, so a command killed at any point can be run
//! again. Works the same against `kustos server` and, with `kustos controller-manager`,
//! against any kube-apiserver.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    }
    let import_ref = import.as_ref().map(|(c, k)| (c.as_str(), k.as_str()));
    let next = rotation::apply(&data(&t.secret), step, import_ref, &t.signer.spec.signer_name, Utc::now())
        .map_err(|e| anyhow::anyhow!("Signer {name}: {e}"))?;
    let Some(next) = next else {
        println!("nothing to do: already done");
        return Ok(());
    };
    let mut secret = t.secret.clone();
    secret.data = Some(next);
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
            println!("next: the new CA signs; `kustos ca status --signer {name}` says when finishing is safe")
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
                count.common_name,
                count.not_after.to_rfc3339(),
                count.valid_issued,
                count.latest_expiry.map(|t| t.to_rfc3339()).unwrap_or_else(|| "-".into())
            );
        }
    }
    let verdict = match rotation::phase(&d) {
        Phase::None => "rotation: none in progress".to_string(),
        Phase::Begun => "rotation: begun (run `switch` next)".to_string(),
        Phase::Switched => match previous_still_valid(&t).await? {
            (0, _) => "rotation: switched; finish: safe".to_string(),
            (n, last) => format!(
                "rotation: switched; finish: not safe: {n} certificate(s) from the previous CA still valid{}",
                last.map(|t| format!(", the last until {}", t.to_rfc3339())).unwrap_or_default()
            ),
        },
    };
    println!("{verdict}");
    Ok(())
}
