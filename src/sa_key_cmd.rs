//! `kustos sa-key rotate`, `kustos sa-key revoke KEY_ID` and `kustos sa-key status`: the
//! service-account signing key of a `kustos server`, rotated while it runs.
//!
//! `rotate` changes files in `DIR/pki` one durable step at a time
//! (`kustos_apiserver::pki::sa_keys`); the running server follows them: the apiserver signs
//! new tokens with the new key and keeps verifying the retired ones until their end (and then
//! drops them), and the serviceaccount-token controller ([`FollowingSigner`]) re-issues
//! legacy token Secrets signed by a retired key. `revoke` marks a retired key revoked in
//! `sa-keys.json`: the apiservers stop verifying it at their next pass. `status` reads the
//! keys from the files and counts legacy token Secrets per key through the API.
//!
//! `KUSTOS_SA_KEY_ROTATE_ABORT_AFTER_STEPS=N` makes `rotate` abort (no clean-up, as a
//! `kill -9`) right after its N-th durable step: how the tests check that a re-run resumes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::Api;
use kustos_apiserver::pki::sa_keys::{self, KeyState};
use kustos_apiserver::pki::service_account::LocalKeys;
use kustos_controllers::serviceaccount_token::{count_by_kid, SECRET_TYPE};

use crate::kubeconfig_cmd;

/// Test hook: abort after this many steps.
const ABORT_AFTER_ENV: &str = "KUSTOS_SA_KEY_ROTATE_ABORT_AFTER_STEPS";

#[derive(Args)]
pub struct SaKeyCommand {
    #[command(subcommand)]
    action: SaKeyAction,
}

#[derive(Subcommand)]
enum SaKeyAction {
    /// A new key signs service-account tokens from now on; the old one keeps verifying until
    /// the longest token it could have signed expires.
    Rotate(RotateArgs),
    /// Drop a retired key at once: tokens it signed are refused from the apiservers' next
    /// pass (the key that signs cannot be revoked: rotate first).
    Revoke(RevokeArgs),
    /// The keys: kid, role (current, next, retired, revoked), when each stops verifying, and
    /// how many legacy token Secrets each signed.
    Status(StatusArgs),
}

#[derive(Args)]
struct RevokeArgs {
    /// The kid of the retired key (as `kustos sa-key status` shows it). A kid is base64url
    /// and may begin with `-`: it is taken as the value, not as a flag.
    #[arg(allow_hyphen_values = true)]
    key_id: String,
    /// The server's data directory.
    #[arg(long, default_value = "./kustos-data")]
    data_dir: PathBuf,
}

#[derive(Args)]
struct RotateArgs {
    /// The server's data directory.
    #[arg(long, default_value = "./kustos-data")]
    data_dir: PathBuf,
    /// Import this private key (PEM: RSA, ECDSA P-256 or P-384) instead of generating one.
    #[arg(long)]
    key: Option<PathBuf>,
}

#[derive(Args)]
struct StatusArgs {
    /// The server's data directory.
    #[arg(long, default_value = "./kustos-data")]
    data_dir: PathBuf,
    /// A kubeconfig to count legacy token Secrets with (default: DIR/admin.kubeconfig).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

pub async fn run(cmd: SaKeyCommand) -> anyhow::Result<()> {
    match cmd.action {
        SaKeyAction::Rotate(a) => {
            rotate(&a)?;
            crate::pki_followers::wait(&a.data_dir).await
        }
        SaKeyAction::Revoke(a) => {
            revoke(&a)?;
            crate::pki_followers::wait(&a.data_dir).await
        }
        SaKeyAction::Status(a) => status(&a).await,
    }
}

fn revoke(a: &RevokeArgs) -> anyhow::Result<()> {
    let pki = a.data_dir.join("pki");
    let signing_path = pki.join(sa_keys::SIGNING_KEY);
    let signing_pem =
        std::fs::read_to_string(&signing_path).with_context(|| format!("reading {}", signing_path.display()))?;
    let signing = sa_keys::kid_of_private(&signing_pem).context("sa.key")?;
    let next = std::fs::read_to_string(pki.join(sa_keys::NEXT_KEY)).ok().and_then(|p| sa_keys::kid_of_private(&p).ok());
    let mut outcome = Ok(false);
    sa_keys::update_state(&pki, |state| {
        outcome = sa_keys::revoke(state, &a.key_id, &signing, next.as_deref(), Utc::now());
        outcome == Ok(true)
    })?;
    if outcome? {
        println!("revoked {}: the apiservers refuse the tokens it signed from their next pass", a.key_id);
    } else {
        println!("{} was revoked already", a.key_id);
    }
    Ok(())
}

fn rotate(a: &RotateArgs) -> anyhow::Result<()> {
    let pki = a.data_dir.join("pki");
    if !pki.join(sa_keys::SIGNING_KEY).exists() {
        anyhow::bail!("{} has no {}: start `kustos server` once first", pki.display(), sa_keys::SIGNING_KEY);
    }
    let import = match &a.key {
        Some(p) => Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let (kid, steps) = sa_keys::as_only_rotation(&pki, || {
        let (pem, kid) = sa_keys::target_key(&pki, import.as_deref())?;
        let abort_after: Option<usize> = std::env::var(ABORT_AFTER_ENV).ok().and_then(|v| v.parse().ok());
        let mut n = 0usize;
        let steps = sa_keys::run(&pki, &pem, &kid, Utc::now(), |step| {
            println!("{step}");
            n += 1;
            if abort_after == Some(n) {
                std::process::abort();
            }
        })
        .with_context(|| format!("rotating the service-account key in {}", pki.display()))?;
        Ok((kid, steps))
    })?;
    if steps.is_empty() {
        println!("nothing to do: the key {kid} signs already");
    } else {
        println!("signing key: {kid}");
        println!(
            "next: `kustos sa-key status` says until when each retired key verifies; it is dropped then on its own \
             (`kustos sa-key revoke KEY_ID` drops one at once)"
        );
    }
    Ok(())
}

async fn status(a: &StatusArgs) -> anyhow::Result<()> {
    let pki = a.data_dir.join("pki");
    let signing_pem = std::fs::read_to_string(pki.join(sa_keys::SIGNING_KEY))
        .with_context(|| format!("reading {}", pki.join(sa_keys::SIGNING_KEY).display()))?;
    let signing = sa_keys::kid_of_private(&signing_pem).context("sa.key")?;
    let state = sa_keys::read_state(&pki)?;
    let kubeconfig = a.kubeconfig.clone().unwrap_or_else(|| a.data_dir.join("admin.kubeconfig"));
    let legacy = legacy_counts(&kubeconfig).await;
    let next = std::fs::read_to_string(pki.join(sa_keys::NEXT_KEY)).ok().and_then(|p| sa_keys::kid_of_private(&p).ok());
    print!("{}", render(&signing, &state, legacy.as_ref().map_err(|e| format!("{e:#}")), next.as_deref(), Utc::now()));
    Ok(())
}

/// Legacy token Secrets per kid, through the API.
async fn legacy_counts(kubeconfig: &Path) -> anyhow::Result<BTreeMap<String, usize>> {
    let client = kubeconfig_cmd::client(kubeconfig).await?;
    let secrets: Api<Secret> = Api::all(client);
    let lp = ListParams::default().fields(&format!("type={SECRET_TYPE}"));
    let list = secrets.list(&lp).await.context("listing service-account token Secrets")?;
    Ok(count_by_kid(&list.items))
}

fn date(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The status report. `legacy`: Secrets per kid, or why they could not be counted.
fn render(
    signing: &str,
    state: &KeyState,
    legacy: Result<&BTreeMap<String, usize>, String>,
    next: Option<&str>,
    now: DateTime<Utc>,
) -> String {
    let count = |kid: &str| match &legacy {
        Ok(m) => m.get(kid).copied().unwrap_or(0).to_string(),
        Err(_) => "unknown".to_string(),
    };
    let mut out = String::from("KID\tROLE\tRETIRED\tVERIFIES UNTIL\tLEGACY SECRETS\n");
    out.push_str(&format!("{signing}\tcurrent\t-\t- (signs)\t{}\n", count(signing)));
    if let Some(n) = next.filter(|n| *n != signing) {
        out.push_str(&format!("{n}\tnext\t-\t- (signs once the rotation is done)\t{}\n", count(n)));
    }
    for k in state.retired.iter().filter(|k| k.kid != signing) {
        let (role, until) = match (k.revoked_at, k.tokens_expire_by) {
            (Some(at), _) => ("revoked", format!("{} (revoked)", date(at))),
            (None, None) => ("retired", "not recorded yet: the apiserver records it at its next pass".to_string()),
            (None, Some(t)) if t <= now => ("retired", format!("{} (passed: dropped at the next pass)", date(t))),
            (None, Some(t)) => ("retired", date(t)),
        };
        out.push_str(&format!("{}\t{role}\t{}\t{until}\t{}\n", k.kid, date(k.retired_at), count(&k.kid)));
    }
    if let Some(n) = next.filter(|n| *n != signing) {
        out.push_str(&format!("rotation: interrupted on its way to {n}: run `kustos sa-key rotate` again\n"));
    }
    if let Err(e) = legacy {
        out.push_str(&format!("legacy Secrets: not counted ({e})\n"));
    }
    out
}

/// Legacy tokens for the serviceaccount-token controller of `kustos server`: signed with the
/// key the apiserver signs with now (it follows `DIR/pki`), re-issued when signed by a key
/// `sa-keys.json` lists as retired (the apiserver drops retired keys at their end).
pub struct FollowingSigner {
    tokens: Arc<LocalKeys>,
    pki: PathBuf,
}

impl FollowingSigner {
    pub fn new(tokens: Arc<LocalKeys>, pki: PathBuf) -> Self {
        FollowingSigner { tokens, pki }
    }
}

impl kustos_controllers::TokenGenerator for FollowingSigner {
    fn legacy_token(
        &self,
        namespace: &str,
        sa_name: &str,
        sa_uid: &str,
        secret_name: &str,
        _: &str,
    ) -> anyhow::Result<String> {
        let claims = kustos_ca::jwt::LegacyClaims::new(namespace, sa_name, sa_uid, secret_name);
        Ok(self.tokens.signing_key().sign(&claims.to_json())?)
    }

    fn retired_key_ids(&self) -> BTreeSet<String> {
        let signing = self.tokens.signing_key().public_key().key_id().to_string();
        match sa_keys::read_state(&self.pki) {
            // The key that signs is never re-issued from, even while it is being retired.
            Ok(s) => s.retired_kids().into_iter().filter(|k| *k != signing).collect(),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "reading the retired service-account keys");
                BTreeSet::new()
            }
        }
    }

    fn key_state(&self) -> String {
        let retired = std::fs::read_to_string(self.pki.join(sa_keys::STATE_FILE)).unwrap_or_default();
        format!("{}\n{retired}", self.tokens.signing_key().public_key().key_id())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::Duration;
    use sa_keys::RetiredKey;

    #[test]
    fn a_kid_that_begins_with_a_hyphen_is_a_value() {
        use clap::Parser as _;
        for kid in
            ["-HbpVxUApcGxVmdoQPgEDJxNKSDtGQRjt6TG7Re0cFU", "--bpVxUApcGxVmdoQPgEDJxNKSDtGQRjt6TG7Re0cFU", "plain"]
        {
            let argv = ["kustos", "sa-key", "revoke", kid, "--data-dir", "d"];
            let cli = match crate::Cli::try_parse_from(argv) {
                Ok(cli) => cli,
                Err(e) => panic!("{kid}: {e}"),
            };
            let crate::Command::SaKey(SaKeyCommand { action: SaKeyAction::Revoke(args) }) = cli.command else {
                panic!("{kid}: not sa-key revoke");
            };
            assert_eq!((args.key_id.as_str(), args.data_dir.as_path()), (kid, Path::new("d")));
        }
    }

    #[test]
    fn status_report() {
        let now = Utc::now();
        let key = |kid: &str, until: Option<DateTime<Utc>>, revoked: Option<DateTime<Utc>>| RetiredKey {
            kid: kid.into(),
            public_key: String::new(),
            retired_at: now - Duration::hours(2),
            tokens_expire_by: until,
            revoked_at: revoked,
        };
        let state = KeyState {
            retired: vec![
                key("OLD", Some(now + Duration::hours(1)), None),
                key("PAST", Some(now - Duration::hours(1)), None),
                key("REV", Some(now + Duration::hours(1)), Some(now - Duration::minutes(1))),
                key("NEW", None, None),
                key("UNSEEN", None, None),
            ],
        };
        let legacy = BTreeMap::from([("NEW".to_string(), 3), ("OLD".to_string(), 2)]);
        let end = date(now + Duration::hours(1));
        type Case<'a> = (Result<&'a BTreeMap<String, usize>, String>, Option<&'a str>, Vec<String>, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            (
                Ok(&legacy),
                None,
                vec![
                    "KID\tROLE\tRETIRED\tVERIFIES UNTIL\tLEGACY SECRETS\n".into(),
                    "NEW\tcurrent\t-\t- (signs)\t3\n".into(),
                    format!("OLD\tretired\t{}\t{end}\t2\n", date(now - Duration::hours(2))),
                    "(passed: dropped at the next pass)\t0\n".into(),
                    format!(
                        "REV\trevoked\t{}\t{} (revoked)\t0\n",
                        date(now - Duration::hours(2)),
                        date(now - Duration::minutes(1))
                    ),
                    "UNSEEN\tretired\t".into(),
                    "not recorded yet".into(),
                ],
                vec!["NEW\tretired", "\tnext\t", "rotation:", "not counted"],
            ),
            (
                Err("cannot connect".into()),
                Some("NEXT"),
                vec![
                    "NEW\tcurrent\t-\t- (signs)\tunknown\n".into(),
                    "NEXT\tnext\t-\t".into(),
                    "interrupted on its way to NEXT".into(),
                    "not counted (cannot connect)".into(),
                ],
                vec![],
            ),
        ];
        for (legacy, next, want, not) in cases {
            let text = render("NEW", &state, legacy, next, now);
            for w in want {
                assert!(text.contains(&w), "{w:?} missing from:\n{text}");
            }
            for n in not {
                assert!(!text.contains(n), "{n:?} in:\n{text}");
            }
        }
    }
}
