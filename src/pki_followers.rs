//! After a rotation step on a directory whose apiserver shares its PKI through etcd
//! (`pki/sync.json` exists): wait until every running apiserver follows the change.
//!
//! First this directory's apiserver puts the change into the shared record (its `sync.json`
//! then agrees with the files, at the record's revision N); then every apiserver's identity
//! Lease (`kube-system`, label `apiserver.kubernetes.io/identity=kube-apiserver`) must report
//! N or later in `kustos.dev/shared-pki-revision`. Apiservers that stopped renewing their
//! Lease are not waited for. The step itself is durable before the wait begins: a wait that
//! times out says who lags, and running the command again waits again.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use kustos_apiserver::identity;
use kustos_apiserver::pki::sync;

/// How long a command waits for the other apiservers.
const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(250);

pub async fn wait(data_dir: &Path) -> anyhow::Result<()> {
    let pki = data_dir.join("pki");
    if sync::read_base(&pki)?.is_none() {
        return Ok(()); // not on etcd: one apiserver, which follows its files
    }
    let deadline = Instant::now() + WAIT;
    let revision = loop {
        let local = sync::hashes(&sync::read_local(&pki)?);
        match sync::read_base(&pki)? {
            Some(base) if base.files == local && base.revision > 0 => break base.revision,
            _ => {}
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the apiserver of {} has not shared the change through etcd within {}s: is it running? \
                 (the step is done; run the command again to wait again)",
                data_dir.display(),
                WAIT.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    };
    let kubeconfig = data_dir.join("admin.kubeconfig");
    let leases: Api<Lease> = Api::namespaced(crate::kubeconfig_cmd::client(&kubeconfig).await?, identity::NAMESPACE);
    let selector = format!("{}={}", identity::IDENTITY_LABEL, identity::IDENTITY_VALUE);
    // Said once, when the others take longer than they usually do (a second or two).
    let (mut told, asked) = (false, Instant::now());
    loop {
        let outcome = match leases.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => {
                let values = list
                    .items
                    .iter()
                    .map(serde_json::to_value)
                    .collect::<Result<Vec<_>, _>>()
                    .context("reading the identity Leases")?;
                let (following, lagging) = identity::followers(&values, revision, chrono::Utc::now());
                if lagging.is_empty() && !following.is_empty() {
                    println!("every apiserver follows the shared PKI ({} of {})", following.len(), following.len());
                    return Ok(());
                }
                if !told && !lagging.is_empty() && asked.elapsed() > Duration::from_secs(5) {
                    println!(
                        "waiting for {} to follow the shared PKI (an apiserver that stopped drops out {}s after its last renewal)",
                        lagging.join(", "),
                        identity::LIVE_WITHIN.num_seconds()
                    );
                    told = true;
                }
                format!(
                    "not yet following: {}",
                    if lagging.is_empty() { "none live".into() } else { lagging.join(", ") }
                )
            }
            Err(e) => format!("listing the identity Leases with {}: {e}", kubeconfig.display()),
        };
        if Instant::now() > deadline {
            anyhow::bail!(
                "the apiservers did not all follow the shared PKI (revision {revision}) within {}s: {outcome}; \
                 see their logs (the step is done; run the command again to wait again)",
                WAIT.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
