//! `kustos token rotate`: hands-off bootstrap-token rotation, meant to run as a CronJob.
//!
//! One run: create a fresh token (labelled as managed by rotation), then expire every
//! managed token beyond the `--keep` newest valid ones (the tokencleaner deletes expired
//! token Secrets), then optionally publish the newest valid token into a Secret for
//! provisioning systems.
//!
//! Safe to run concurrently: tokens are ordered by (creationTimestamp, name), the same
//! order in every run, and a run expires a token only when at least `--keep` valid tokens
//! newer than it exist in what that run read. The newest token overall has nothing newer,
//! so no run ever expires it: two runs can never leave zero valid tokens. Every write is
//! conditional on the resourceVersion read (a conflict re-reads and decides again), and
//! re-running after a failure converges to the same shape: `--keep` valid managed tokens,
//! the newest one published.
//!
//! The token itself is never printed (CronJob logs are widely readable): only token ids.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use clap::Args;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{ListParams, PostParams};
use kube::Api;
use kustos_ca::bootstrap_token::{self as bt, Expiration, Token, TokenSpec, NAMESPACE, SECRET_TYPE};
use kustos_controllers::bootstrap_tokens as token_secrets;
use kustos_controllers::runtime::is_status;

/// The label that marks the token Secrets rotation manages; tokens made by hand (`token
/// create`, kubeadm) are never touched.
pub const MANAGED_LABEL: &str = "kustos.dev/rotated-by";
pub const MANAGED_VALUE: &str = "token-rotate";
/// When the run created the token, to the nanosecond (creationTimestamp has whole seconds,
/// and runs a second apart must still be ordered by age).
pub const CREATED_AT_ANNOTATION: &str = "kustos.dev/created-at";
/// Keys of the published Secret.
pub const PUBLISHED_TOKEN_KEY: &str = "token";
pub const PUBLISHED_ID_KEY: &str = "token-id";
pub const PUBLISHED_EXPIRATION_KEY: &str = "expiration";

/// Rounds of read-decide-write before giving up on a contended object.
const ATTEMPTS: usize = 10;

#[derive(Args)]
pub struct RotateArgs {
    /// Lifetime of the new token (e.g. 24h, 90m); must be positive.
    #[arg(long, default_value = "24h", allow_hyphen_values = true)]
    ttl: String,
    /// The number of valid rotated tokens to keep (the newest); older ones are expired.
    #[arg(long, default_value_t = 2, allow_hyphen_values = true)]
    keep: i64,
    /// Write the newest valid token into this Secret (`namespace/name`, key `token`).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    publish_secret: Option<String>,
    /// Usages of the new token. Valid options: [signing,authentication].
    #[arg(long, value_delimiter = ',', default_value = "signing,authentication")]
    usages: Vec<String>,
    /// Extra groups the new token authenticates as.
    #[arg(long, value_delimiter = ',', default_value = kustos_ca::bootstrap_token::KUBEADM_NODE_TOKEN_GROUP)]
    groups: Vec<String>,
    /// Description of the new token.
    #[arg(long, default_value = "bootstrap token rotated by kustos token rotate")]
    description: String,
}

/// The checked arguments of one run.
#[derive(Debug)]
pub struct RotatePlan {
    pub spec: TokenSpec,
    pub keep: usize,
    pub publish: Option<(String, String)>,
}

/// Check every argument before anything is read or written.
pub fn plan(args: RotateArgs) -> anyhow::Result<RotatePlan> {
    let ttl = kustos_ca::duration::parse(&args.ttl)
        .map(Duration::nanoseconds)
        .map_err(|e| anyhow::anyhow!("invalid argument {:?} for \"--ttl\" flag: {e}", args.ttl))?;
    if ttl <= Duration::zero() {
        anyhow::bail!(
            "invalid argument {:?} for \"--ttl\" flag: rotated tokens must expire (use a positive duration)",
            args.ttl
        );
    }
    let keep = usize::try_from(args.keep)
        .ok()
        .filter(|k| *k >= 1)
        .ok_or_else(|| anyhow::anyhow!("invalid argument \"{}\" for \"--keep\" flag: must be at least 1", args.keep))?;
    let publish = args.publish_secret.as_deref().map(parse_secret_ref).transpose()?;
    let nonempty = |v: Vec<String>| -> Vec<String> {
        v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
    };
    let (usages, groups) = (nonempty(args.usages), nonempty(args.groups));
    bt::validate(&usages, &groups).map_err(|errs| anyhow::anyhow!(errs.join("; ")))?;
    let token = Token::generate()?;
    Ok(RotatePlan { spec: TokenSpec { token, ttl, usages, groups, description: args.description }, keep, publish })
}

/// `namespace/name`, both DNS-1123 labels/subdomains as Kubernetes requires.
fn parse_secret_ref(s: &str) -> anyhow::Result<(String, String)> {
    let bad = || anyhow::anyhow!("invalid argument {s:?} for \"--publish-secret\" flag: expected NAMESPACE/NAME");
    let (ns, name) = s.split_once('/').ok_or_else(bad)?;
    let label = |v: &str| {
        !v.is_empty()
            && v.len() <= 63
            && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !v.starts_with('-')
            && !v.ends_with('-')
    };
    let subdomain = |v: &str| v.len() <= 253 && v.split('.').all(label);
    if !label(ns) || !subdomain(name) {
        return Err(bad());
    }
    Ok((ns.to_string(), name.to_string()))
}

/// What rotation needs to know of one managed token Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Managed {
    pub id: String,
    pub created: Option<DateTime<Utc>>,
    pub valid: bool,
}

impl Managed {
    fn of(secret: &Secret, now: DateTime<Utc>) -> Option<Managed> {
        let id = bt::id_from_secret_name(secret.metadata.name.as_deref()?)?.to_string();
        let valid = token_secrets::data(secret, bt::KEY_TOKEN_ID) == id
            && token_secrets::expiration(secret, now) != Expiration::Expired;
        let annotated = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CREATED_AT_ANNOTATION))
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc));
        let created = annotated
            .or_else(|| secret.metadata.creation_timestamp.as_ref().and_then(kustos_controllers::csr::to_chrono));
        Some(Managed { id, created, valid })
    }
}

/// Newest first: by creation time (the annotation, else creationTimestamp), then by id
/// (the same order for every run).
fn newest_first(tokens: &mut [Managed]) {
    tokens.sort_by(|a, b| (b.created, &b.id).cmp(&(a.created, &a.id)));
}

/// Ids of the valid tokens to expire so that at most `keep` valid ones remain: every valid
/// token with at least `keep` valid tokens newer than it.
pub fn to_expire(tokens: &[Managed], keep: usize) -> Vec<String> {
    let mut valid: Vec<Managed> = tokens.iter().filter(|t| t.valid).cloned().collect();
    newest_first(&mut valid);
    valid.into_iter().skip(keep).map(|t| t.id).collect()
}

/// The token to publish: the newest valid one.
pub fn newest_valid(tokens: &[Managed]) -> Option<Managed> {
    let mut valid: Vec<Managed> = tokens.iter().filter(|t| t.valid).cloned().collect();
    newest_first(&mut valid);
    valid.into_iter().next()
}

/// Whether a published token `current` should stay rather than be replaced by `candidate`:
/// it is still valid and not older than the candidate.
pub fn keep_published(current: Option<&Managed>, candidate: &Managed) -> bool {
    match current {
        Some(c) if c.valid => (c.created, &c.id) >= (candidate.created, &candidate.id),
        _ => false,
    }
}

pub async fn run(client: kube::Client, plan: RotatePlan) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    create(&secrets, plan.spec).await?;
    expire_old(&secrets, plan.keep).await?;
    if let Some((ns, name)) = &plan.publish {
        publish(&secrets, &Api::namespaced(client, ns), ns, name).await?;
    }
    Ok(())
}

fn api_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => status.message,
        other => other.to_string(),
    }
}

/// Create the new token, with a fresh id should the random one be taken.
async fn create(secrets: &Api<Secret>, mut spec: TokenSpec) -> anyhow::Result<()> {
    for _ in 0..ATTEMPTS {
        let now = Utc::now();
        let mut secret = token_secrets::to_secret(&spec, now);
        secret.metadata.labels = Some(BTreeMap::from([(MANAGED_LABEL.to_string(), MANAGED_VALUE.to_string())]));
        secret.metadata.annotations = Some(BTreeMap::from([(
            CREATED_AT_ANNOTATION.to_string(),
            now.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        )]));
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                println!("created bootstrap token {:?}", spec.token.id());
                return Ok(());
            }
            Err(e) if is_status(&e, 409) => spec.token = Token::generate()?,
            Err(e) => anyhow::bail!("failed to create bootstrap token: {}", api_message(e)),
        }
    }
    anyhow::bail!("failed to create bootstrap token: every generated id was taken")
}

async fn managed(secrets: &Api<Secret>) -> anyhow::Result<Vec<Secret>> {
    let params = ListParams::default()
        .labels(&format!("{MANAGED_LABEL}={MANAGED_VALUE}"))
        .fields(&format!("type={SECRET_TYPE}"));
    Ok(secrets
        .list(&params)
        .await
        .map_err(|e| anyhow::anyhow!("failed to list bootstrap tokens: {}", api_message(e)))?
        .items)
}

/// Expire the managed tokens beyond the `keep` newest valid ones.
async fn expire_old(secrets: &Api<Secret>, keep: usize) -> anyhow::Result<()> {
    let now = Utc::now();
    let items = managed(secrets).await?;
    let tokens: Vec<Managed> = items.iter().filter_map(|s| Managed::of(s, now)).collect();
    for id in to_expire(&tokens, keep) {
        expire(secrets, &id).await?;
    }
    Ok(())
}

/// Set one token's expiration to now, conditional on what was read; a token another run
/// expired or the cleaner deleted meanwhile is done.
async fn expire(secrets: &Api<Secret>, id: &str) -> anyhow::Result<()> {
    let name = bt::secret_name(id);
    for _ in 0..ATTEMPTS {
        let now = Utc::now();
        let Some(mut secret) =
            secrets.get_opt(&name).await.map_err(|e| anyhow::anyhow!("failed to read {name}: {}", api_message(e)))?
        else {
            return Ok(());
        };
        if token_secrets::expiration(&secret, now) == Expiration::Expired {
            return Ok(());
        }
        secret
            .data
            .get_or_insert_with(BTreeMap::new)
            .insert(bt::KEY_EXPIRATION.into(), ByteString(kustos_ca::rfc3339::format_utc(now).into_bytes()));
        match secrets.replace(&name, &PostParams::default(), &secret).await {
            Ok(_) => {
                println!("expired bootstrap token {id:?}");
                return Ok(());
            }
            Err(e) if is_status(&e, 409) => continue,
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => anyhow::bail!("failed to expire bootstrap token {id:?}: {}", api_message(e)),
        }
    }
    anyhow::bail!("failed to expire bootstrap token {id:?}: it kept changing")
}

/// Write the newest valid token into `ns/name`, unless it already holds a token that is
/// valid and at least as new (another run got there first).
async fn publish(tokens: &Api<Secret>, target: &Api<Secret>, ns: &str, name: &str) -> anyhow::Result<()> {
    for _ in 0..ATTEMPTS {
        let now = Utc::now();
        let items = managed(tokens).await?;
        let all: Vec<Managed> = items.iter().filter_map(|s| Managed::of(s, now)).collect();
        let Some(candidate) = newest_valid(&all) else {
            anyhow::bail!("no valid rotated token to publish");
        };
        // The candidate was read from `items`, so its Secret is there.
        let secret_name = bt::secret_name(&candidate.id);
        let token_secret = items
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(secret_name.as_str()))
            .ok_or_else(|| anyhow::anyhow!("bootstrap token {:?} vanished from the list", candidate.id))?;
        let token = Token::from_parts(&candidate.id, token_secrets::data(token_secret, bt::KEY_TOKEN_SECRET))
            .map_err(|_| anyhow::anyhow!("bootstrap token {:?} has a malformed secret", candidate.id))?;
        let existing = target
            .get_opt(name)
            .await
            .map_err(|e| anyhow::anyhow!("failed to read Secret {ns}/{name}: {}", api_message(e)))?;
        let current = existing.as_ref().map(|s| token_secrets::data(s, PUBLISHED_ID_KEY).to_string());
        let current = current.and_then(|id| all.iter().find(|m| m.id == id).cloned());
        if keep_published(current.as_ref(), &candidate) {
            return Ok(());
        }
        let expiration = token_secrets::data(token_secret, bt::KEY_EXPIRATION).to_string();
        let data = BTreeMap::from([
            (PUBLISHED_TOKEN_KEY.to_string(), ByteString(token.expose().into_bytes())),
            (PUBLISHED_ID_KEY.to_string(), ByteString(candidate.id.clone().into_bytes())),
            (PUBLISHED_EXPIRATION_KEY.to_string(), ByteString(expiration.into_bytes())),
        ]);
        let result = match existing {
            Some(mut s) => {
                s.data = Some(data);
                target.replace(name, &PostParams::default(), &s).await.map(|_| ())
            }
            None => {
                let s = Secret {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(ns.to_string()),
                        labels: Some(BTreeMap::from([(MANAGED_LABEL.to_string(), MANAGED_VALUE.to_string())])),
                        ..Default::default()
                    },
                    type_: Some("Opaque".into()),
                    data: Some(data),
                    ..Default::default()
                };
                target.create(&PostParams::default(), &s).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => {
                println!("published bootstrap token {:?} in Secret {ns}/{name}", candidate.id);
                return Ok(());
            }
            Err(e) if is_status(&e, 409) => continue,
            Err(e) => anyhow::bail!("failed to publish the token in Secret {ns}/{name}: {}", api_message(e)),
        }
    }
    anyhow::bail!("failed to publish the token in Secret {ns}/{name}: it kept changing")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u32) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp(1_800_000_000 + i64::from(s), 0)
    }

    fn m(id: &str, created: u32, valid: bool) -> Managed {
        Managed { id: id.into(), created: at(created), valid }
    }

    #[test]
    fn which_tokens_are_expired() {
        let cases: Vec<(&str, Vec<Managed>, usize, Vec<&str>)> = vec![
            ("nothing yet", vec![], 2, vec![]),
            ("fewer than keep", vec![m("aaaaaa", 1, true)], 2, vec![]),
            ("exactly keep", vec![m("aaaaaa", 1, true), m("bbbbbb", 2, true)], 2, vec![]),
            (
                "the oldest valid beyond keep",
                vec![m("aaaaaa", 1, true), m("bbbbbb", 2, true), m("cccccc", 3, true)],
                2,
                vec!["aaaaaa"],
            ),
            (
                "already expired ones do not count and are left to the cleaner",
                vec![m("aaaaaa", 1, false), m("bbbbbb", 2, true), m("cccccc", 3, true)],
                2,
                vec![],
            ),
            (
                "keep one",
                vec![m("aaaaaa", 1, true), m("bbbbbb", 2, true), m("cccccc", 3, true)],
                1,
                vec!["bbbbbb", "aaaaaa"],
            ),
            ("ties in time are ordered by id", vec![m("zzzzzz", 5, true), m("aaaaaa", 5, true)], 1, vec!["aaaaaa"]),
        ];
        for (name, tokens, keep, want) in cases {
            assert_eq!(to_expire(&tokens, keep), want, "{name}");
        }
    }

    /// Two runs that each read a different view never expire the newest token between them.
    #[test]
    fn concurrent_runs_never_expire_every_token() {
        let old = m("oooooo", 1, true);
        let a = m("aaaaaa", 10, true);
        let b = m("bbbbbb", 10, true);
        // Every view a run can have: it sees its own token, maybe the other's.
        let views = [vec![old.clone(), a.clone()], vec![old.clone(), b.clone()], vec![old, a, b]];
        for keep in 1..=3 {
            let expired: std::collections::BTreeSet<String> = views.iter().flat_map(|v| to_expire(v, keep)).collect();
            assert!(!expired.contains("bbbbbb"), "keep {keep}: the newest token was expired");
        }
    }

    #[test]
    fn age_comes_from_the_annotation_to_the_nanosecond() {
        let secret = |annotation: Option<&str>, expiration: &str| {
            let spec = TokenSpec {
                token: Token::parse("abcdef.0123456789abcdef").unwrap_or_else(|e| panic!("{e}")),
                ttl: Duration::hours(1),
                usages: vec!["authentication".into()],
                groups: vec![],
                description: String::new(),
            };
            let mut s = token_secrets::to_secret(&spec, at(0).unwrap_or_default());
            s.metadata.creation_timestamp = at(7).map(kustos_controllers::csr::to_time);
            s.metadata.annotations =
                annotation.map(|a| BTreeMap::from([(CREATED_AT_ANNOTATION.to_string(), a.to_string())]));
            s.data.get_or_insert_with(BTreeMap::new).insert(bt::KEY_EXPIRATION.into(), ByteString(expiration.into()));
            s
        };
        let nanos = DateTime::parse_from_rfc3339("2027-01-15T08:00:05.000000123Z").map(|t| t.with_timezone(&Utc)).ok();
        let now = at(10).unwrap_or_default();
        let cases: Vec<(&str, Secret, Option<DateTime<Utc>>, bool)> = vec![
            ("annotated", secret(Some("2027-01-15T08:00:05.000000123Z"), "2099-01-01T00:00:00Z"), nanos, true),
            ("no annotation: creationTimestamp", secret(None, "2099-01-01T00:00:00Z"), at(7), true),
            ("a broken annotation: creationTimestamp", secret(Some("yesterday"), "2099-01-01T00:00:00Z"), at(7), true),
            ("expired", secret(None, "2020-01-01T00:00:00Z"), at(7), false),
        ];
        for (name, s, created, valid) in cases {
            let got = Managed::of(&s, now);
            assert_eq!(got, Some(Managed { id: "abcdef".into(), created, valid }), "{name}");
        }
    }

    #[test]
    fn what_is_published() {
        let cases: Vec<(&str, Option<Managed>, Managed, bool)> = vec![
            ("nothing published", None, m("bbbbbb", 2, true), false),
            ("an older token is replaced", Some(m("aaaaaa", 1, true)), m("bbbbbb", 2, true), false),
            ("an expired token is replaced", Some(m("cccccc", 3, false)), m("bbbbbb", 2, true), false),
            ("a newer valid token stays", Some(m("cccccc", 3, true)), m("bbbbbb", 2, true), true),
            ("the same token stays", Some(m("bbbbbb", 2, true)), m("bbbbbb", 2, true), true),
        ];
        for (name, current, candidate, want) in cases {
            assert_eq!(keep_published(current.as_ref(), &candidate), want, "{name}");
        }
        let all = vec![m("aaaaaa", 1, true), m("cccccc", 3, false), m("bbbbbb", 2, true)];
        assert_eq!(newest_valid(&all).map(|t| t.id), Some("bbbbbb".to_string()), "newest valid");
    }

    #[test]
    fn arguments_are_checked_first() {
        let args = |ttl: &str, keep: i64, publish: Option<&str>| RotateArgs {
            ttl: ttl.into(),
            keep,
            publish_secret: publish.map(str::to_string),
            usages: vec!["signing".into(), "authentication".into()],
            groups: vec!["system:bootstrappers:kubeadm:default-node-token".into()],
            description: String::new(),
        };
        let cases: Vec<(&str, RotateArgs, Result<(), &str>)> = vec![
            ("defaults", args("24h", 2, None), Ok(())),
            ("publish", args("1h", 1, Some("provisioning/join-token")), Ok(())),
            ("zero ttl", args("0", 2, None), Err("rotated tokens must expire")),
            ("negative ttl", args("-1h", 2, None), Err("rotated tokens must expire")),
            ("bad ttl", args("soon", 2, None), Err("time: invalid duration")),
            ("keep zero", args("24h", 0, None), Err("must be at least 1")),
            ("keep negative", args("24h", -1, None), Err("must be at least 1")),
            ("publish without namespace", args("24h", 2, Some("join-token")), Err("expected NAMESPACE/NAME")),
            ("publish with a bad name", args("24h", 2, Some("ns/Join_Token")), Err("expected NAMESPACE/NAME")),
            ("publish with an empty name", args("24h", 2, Some("ns/")), Err("expected NAMESPACE/NAME")),
        ];
        for (name, a, want) in cases {
            match (plan(a), want) {
                (Ok(p), Ok(())) => assert!(p.spec.ttl > Duration::zero(), "{name}"),
                (Err(e), Err(part)) => assert!(e.to_string().contains(part), "{name}: {e}"),
                (got, want) => panic!("{name}: got {:?}, want {want:?}", got.map(|p| p.keep)),
            }
        }
    }
}
