//! `kustos token create|list|delete` (and `rotate`, in `token_rotate`): bootstrap tokens as kubeadm manages them (the same
//! flags, defaults, validation, Secret layout and output).

use std::path::PathBuf;

use chrono::{DateTime, Duration, Utc};
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;
use kustos_ca::bootstrap_token::{
    self as bt, Token, TokenInfo, TokenSpec, NAMESPACE, SECRET_TYPE, TOKEN_ID_PATTERN, TOKEN_PATTERN,
};
use kustos_controllers::bootstrap_tokens as token_secrets;

use crate::kubeconfig_cmd;
use crate::logging::escape;

#[derive(Args)]
pub struct TokenCommand {
    /// The kubeconfig of a cluster admin (default: $KUBECONFIG).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    action: TokenAction,
}

#[derive(Subcommand)]
enum TokenAction {
    /// Create a bootstrap token on the server and print it (only it) on stdout.
    Create(CreateArgs),
    /// List the bootstrap tokens on the server.
    List,
    /// Delete bootstrap tokens, given as full tokens or token ids.
    Delete(DeleteArgs),
    /// Create a fresh token, expire all but the newest `--keep` rotated tokens, and
    /// optionally publish the newest in a Secret (safe to run concurrently, e.g. as a CronJob).
    Rotate(crate::token_rotate::RotateArgs),
}

#[derive(Args)]
struct CreateArgs {
    /// The token to write, [a-z0-9]{6}.[a-z0-9]{16}; a random one when absent.
    token: Option<String>,
    /// The duration before the token is automatically deleted (e.g. 1s, 2m, 3h). If set to
    /// '0', the token will never expire.
    #[arg(long, default_value = "24h", allow_hyphen_values = true)]
    ttl: String,
    /// Describes the ways in which this token can be used. Comma-separated or repeated.
    /// Valid options: [signing,authentication].
    #[arg(long, value_delimiter = ',', default_value = "signing,authentication")]
    usages: Vec<String>,
    /// Extra groups that this token will authenticate as when used for authentication.
    /// Must match "\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z".
    #[arg(long, value_delimiter = ',', default_value = kustos_ca::bootstrap_token::KUBEADM_NODE_TOKEN_GROUP)]
    groups: Vec<String>,
    /// A human friendly description of how this token is used.
    #[arg(long, default_value = "")]
    description: String,
}

#[derive(Args)]
struct DeleteArgs {
    /// Full tokens ([a-z0-9]{6}.[a-z0-9]{16}) or token ids ([a-z0-9]{6}).
    #[arg(value_name = "TOKEN_OR_ID")]
    tokens: Vec<String>,
}

pub async fn run(cmd: TokenCommand) -> anyhow::Result<()> {
    let kubeconfig = cmd.kubeconfig;
    match cmd.action {
        TokenAction::Create(args) => {
            // Every argument is checked before the kubeconfig is read.
            let spec = create_spec(args)?;
            let client = kubeconfig_cmd::client(&kubeconfig_cmd::resolve_path(kubeconfig, kubeconfig_env())?).await?;
            create(client, &spec).await?;
            println!("{}", spec.token.expose());
            Ok(())
        }
        TokenAction::List => {
            let client = kubeconfig_cmd::client(&kubeconfig_cmd::resolve_path(kubeconfig, kubeconfig_env())?).await?;
            list(client).await
        }
        TokenAction::Delete(args) => {
            if args.tokens.is_empty() {
                anyhow::bail!(
                    "missing argument; 'token delete' is missing token of form {TOKEN_PATTERN:?} or {TOKEN_ID_PATTERN:?}"
                );
            }
            let ids = args.tokens.iter().map(|t| token_id(t)).collect::<anyhow::Result<Vec<_>>>()?;
            let client = kubeconfig_cmd::client(&kubeconfig_cmd::resolve_path(kubeconfig, kubeconfig_env())?).await?;
            delete(client, &ids).await
        }
        TokenAction::Rotate(args) => {
            let plan = crate::token_rotate::plan(args)?;
            let client = kubeconfig_cmd::client_or_in_cluster(kubeconfig, kubeconfig_env()).await?;
            crate::token_rotate::run(client, plan).await
        }
    }
}

fn kubeconfig_env() -> Option<std::ffi::OsString> {
    std::env::var_os("KUBECONFIG")
}

/// The checked arguments of `token create`.
fn create_spec(args: CreateArgs) -> anyhow::Result<TokenSpec> {
    let token = match args.token {
        Some(t) => Token::parse(&t)?,
        None => Token::generate()?,
    };
    let ttl = parse_ttl(&args.ttl)?;
    // `--groups ""` (or `--usages ""`) means none, as kubeadm's string-slice flags read it.
    let nonempty = |v: Vec<String>| -> Vec<String> {
        v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
    };
    let (usages, groups) = (nonempty(args.usages), nonempty(args.groups));
    bt::validate(&usages, &groups).map_err(|errs| anyhow::anyhow!(errs.join("; ")))?;
    Ok(TokenSpec { token, ttl, usages, groups, description: args.description })
}

/// `--ttl`: a Go duration (`24h`, `1h30m`, `90s`, `0`), not negative.
fn parse_ttl(s: &str) -> anyhow::Result<Duration> {
    let d = parse_go_duration(s).map_err(|e| anyhow::anyhow!("invalid argument {s:?} for \"--ttl\" flag: {e}"))?;
    if d < Duration::zero() {
        anyhow::bail!("invalid argument {s:?} for \"--ttl\" flag: must not be negative (0 means never expires)");
    }
    Ok(d)
}

/// A duration as Go's `time.ParseDuration` reads it ([`kustos_ca::duration::parse`]).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    kustos_ca::duration::parse(s).map(Duration::nanoseconds)
}

/// `<id>` from a token id or a full token, or kubeadm's error.
fn token_id(arg: &str) -> anyhow::Result<String> {
    if bt::is_valid_id(arg) {
        return Ok(arg.to_string());
    }
    Token::parse(arg)
        .map(|t| t.id().to_string())
        .map_err(|_| anyhow::anyhow!("given token didn't match pattern {TOKEN_PATTERN:?} or {TOKEN_ID_PATTERN:?}"))
}

/// The message of an API error (as kubeadm shows client-go's), or the error itself.
fn api_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => status.message,
        other => other.to_string(),
    }
}

async fn create(client: kube::Client, spec: &TokenSpec) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client, NAMESPACE);
    let name = spec.token.secret_name();
    let exists = || anyhow::anyhow!("a token with id {:?} already exists", spec.token.id());
    if secrets
        .get_opt(&name)
        .await
        .map_err(|e| anyhow::anyhow!("failed to create bootstrap token: {}", api_message(e)))?
        .is_some()
    {
        return Err(exists());
    }
    match secrets.create(&PostParams::default(), &token_secrets::to_secret(spec, Utc::now())).await {
        Ok(_) => Ok(()),
        Err(e) if kustos_controllers::runtime::is_status(&e, 409) => Err(exists()),
        Err(e) => Err(anyhow::anyhow!("failed to create bootstrap token with name {name}: {}", api_message(e))),
    }
}

async fn list(client: kube::Client) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client, NAMESPACE);
    let only_tokens = format!("type={SECRET_TYPE}");
    let items = secrets
        .list(&ListParams::default().fields(&only_tokens))
        .await
        .map_err(|e| anyhow::anyhow!("failed to list bootstrap tokens: {}", api_message(e)))?
        .items;
    let now = Utc::now();
    let mut out = String::new();
    let mut header = true;
    for secret in &items {
        match token_secrets::from_secret(secret) {
            Ok(info) => {
                let mut lines = Vec::new();
                if std::mem::take(&mut header) {
                    lines.push(COLUMNS.iter().map(|c| c.to_string()).collect());
                }
                lines.push(row(&info, now));
                out.push_str(&tabwrite(&lines));
            }
            Err(e) => eprintln!("{e}"),
        }
    }
    print!("{out}");
    Ok(())
}

async fn delete(client: kube::Client, ids: &[String]) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client, NAMESPACE);
    for id in ids {
        secrets
            .delete(&bt::secret_name(id), &DeleteParams::default())
            .await
            .map_err(|e| anyhow::anyhow!("failed to delete bootstrap token {id:?}: {}", api_message(e)))?;
        println!("bootstrap token {id:?} deleted");
    }
    Ok(())
}

const COLUMNS: &[&str] = &["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA GROUPS"];

/// One line of `token list`, with kubeadm's fixed widths for TTL, USAGES and DESCRIPTION.
fn row(info: &TokenInfo, now: DateTime<Utc>) -> Vec<String> {
    let (ttl, expires) = match &info.expires {
        Some(at) => (short_human_duration(at.with_timezone(&Utc) - now), kustos_ca::rfc3339::format(at)),
        None => ("<forever>".to_string(), "<never>".to_string()),
    };
    let or_none = |s: String| if s.is_empty() { "<none>".to_string() } else { s };
    vec![
        info.token.expose(),
        format!("{ttl:<9}"),
        expires,
        format!("{:<22}", or_none(info.usages.join(","))),
        // Whoever may write Secrets in kube-system wrote these: shown escaped, so that no
        // terminal escape or line break in them reaches the terminal (crate::logging::escape).
        format!("{:<56}", or_none(escape(&info.description).into_owned())),
        or_none(escape(&info.groups.join(",")).into_owned()),
    ]
}

/// A duration the way kubectl and kubeadm print ages: `<invalid>` below -1 s, then seconds,
/// minutes, hours, days, years, truncated.
fn short_human_duration(d: Duration) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        "<invalid>".into()
    } else if seconds < 0 {
        "0s".into()
    } else if seconds < 60 {
        format!("{seconds}s")
    } else if d.num_minutes() < 60 {
        format!("{}m", d.num_minutes())
    } else if d.num_hours() < 24 {
        format!("{}h", d.num_hours())
    } else if d.num_hours() < 24 * 365 {
        format!("{}d", d.num_hours() / 24)
    } else {
        format!("{}y", d.num_hours() / 24 / 365)
    }
}

/// Lay lines of cells out as Go's `text/tabwriter` does with minwidth 10, padding 3 and
/// spaces: every cell but a line's last is padded to its column's width.
fn tabwrite(lines: &[Vec<String>]) -> String {
    let columns = lines.iter().map(|l| l.len().saturating_sub(1)).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|j| {
            lines.iter().filter(|l| l.len() > j + 1).map(|l| (l[j].chars().count() + 3).max(10)).max().unwrap_or(10)
        })
        .collect();
    let mut out = String::new();
    for line in lines {
        for (j, cell) in line.iter().enumerate() {
            if j + 1 < line.len() {
                out.push_str(cell);
                out.extend(std::iter::repeat_n(' ', widths[j].saturating_sub(cell.chars().count())));
            } else {
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        token: TokenAction,
    }

    #[test]
    fn create_defaults_are_kubeadms() {
        use clap::Parser as _;
        let Ok(Cli { token: TokenAction::Create(args) }) = Cli::try_parse_from(["t", "create"]) else {
            panic!("parsing `create`")
        };
        assert_eq!(args.usages, bt::DEFAULT_USAGES, "usages");
        assert_eq!(args.groups, bt::DEFAULT_GROUPS, "groups");
        assert_eq!(parse_ttl(&args.ttl).ok(), Some(bt::DEFAULT_TTL), "ttl");
        let Ok(Cli { token: TokenAction::Create(args) }) =
            Cli::try_parse_from(["t", "create", "--usages", "signing", "--usages", "authentication", "--groups", ""])
        else {
            panic!("parsing `create` with flags")
        };
        let spec = create_spec(args).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.usages, ["signing", "authentication"], "repeated --usages");
        assert!(spec.groups.is_empty(), "--groups \"\" is no groups");
    }

    #[test]
    fn go_durations() {
        let cases: &[(&str, Result<i64, &str>)] = &[
            ("0", Ok(0)),
            ("-0", Ok(0)),
            ("24h", Ok(24 * 3_600_000_000_000)),
            ("1h30m", Ok(5_400_000_000_000)),
            ("90s", Ok(90_000_000_000)),
            ("1.5s", Ok(1_500_000_000)),
            (".5m", Ok(30_000_000_000)),
            ("300ms", Ok(300_000_000)),
            ("2us", Ok(2_000)),
            ("2\u{b5}s", Ok(2_000)),
            ("7ns", Ok(7)),
            ("-1h", Ok(-3_600_000_000_000)),
            ("+5s", Ok(5_000_000_000)),
            ("0s", Ok(0)),
            ("1", Err("time: missing unit in duration \"1\"")),
            ("1d", Err("time: unknown unit \"d\" in duration \"1d\"")),
            ("", Err("time: invalid duration \"\"")),
            ("h", Err("time: invalid duration \"h\"")),
            ("1h-", Err("time: unknown unit \"h-\" in duration \"1h-\"")),
            (".s", Err("time: invalid duration \".s\"")),
            ("9999999999999h", Err("time: invalid duration \"9999999999999h\"")),
        ];
        for (input, want) in cases {
            let got = parse_go_duration(input).map(|d| d.num_nanoseconds().unwrap_or(i64::MIN));
            assert_eq!(got, want.map_err(str::to_string), "{input:?}");
        }
    }

    #[test]
    fn ttl_flag() {
        let cases: &[(&str, Result<i64, &str>)] = &[
            ("24h", Ok(86_400)),
            ("0", Ok(0)),
            ("3s", Ok(3)),
            ("-1s", Err("invalid argument \"-1s\" for \"--ttl\" flag: must not be negative (0 means never expires)")),
            ("soon", Err("invalid argument \"soon\" for \"--ttl\" flag: time: invalid duration \"soon\"")),
        ];
        for (input, want) in cases {
            let got = parse_ttl(input).map(|d| d.num_seconds()).map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_string), "{input:?}");
        }
    }

    #[test]
    fn human_durations() {
        let cases: &[(&str, i64, &str)] = &[
            ("well past", -3, "<invalid>"),
            ("just past", -1, "0s"),
            ("now", 0, "0s"),
            ("seconds", 59, "59s"),
            ("a minute", 60, "1m"),
            ("minutes truncate", 3599, "59m"),
            ("a fresh 24h token", 24 * 3600 - 1, "23h"),
            ("a day", 24 * 3600, "1d"),
            ("days", 364 * 24 * 3600 + 3600, "364d"),
            ("a year", 365 * 24 * 3600, "1y"),
            ("years", 3 * 365 * 24 * 3600 + 5, "3y"),
        ];
        for (name, secs, want) in cases {
            assert_eq!(short_human_duration(Duration::seconds(*secs)), *want, "{name}");
        }
    }

    #[test]
    fn token_ids_for_delete() {
        let cases: &[(&str, Result<&str, ()>)] = &[
            ("abcdef", Ok("abcdef")),
            ("abcdef.0123456789abcdef", Ok("abcdef")),
            ("ABCDEF", Err(())),
            ("abcdef.", Err(())),
            ("abc", Err(())),
        ];
        for (input, want) in cases {
            let got = token_id(input);
            match want {
                Ok(id) => assert_eq!(got.ok().as_deref(), Some(*id), "{input}"),
                Err(()) => assert_eq!(
                    got.err().map(|e| e.to_string()).as_deref(),
                    Some(
                        r#"given token didn't match pattern "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z" or "\\A([a-z0-9]{6})\\z""#
                    ),
                    "{input}"
                ),
            }
        }
    }

    #[test]
    fn list_lines_are_laid_out_as_kubeadms() {
        let now =
            DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").map(|t| t.with_timezone(&Utc)).unwrap_or_default();
        let token = Token::parse("abcdef.0123456789abcdef").unwrap_or_else(|e| panic!("{e}"));
        let info = TokenInfo {
            token: token.clone(),
            description: String::new(),
            expires: kustos_ca::rfc3339::parse("2026-01-01T23:59:59Z"),
            usages: vec!["authentication".into(), "signing".into()],
            groups: vec!["system:bootstrappers:kubeadm:default-node-token".into()],
        };
        let forever = TokenInfo {
            token: token.clone(),
            description: "rack 7".into(),
            expires: None,
            usages: vec![],
            groups: vec![],
        };
        let header: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
        let first = tabwrite(&[header, row(&info, now)]);
        let want_first = format!(
            "{:<26}{:<12}{:<23}{:<25}{:<59}{}\n{:<26}{:<12}{:<23}{:<25}{:<59}{}\n",
            "TOKEN",
            "TTL",
            "EXPIRES",
            "USAGES",
            "DESCRIPTION",
            "EXTRA GROUPS",
            "abcdef.0123456789abcdef",
            "23h",
            "2026-01-01T23:59:59Z",
            "authentication,signing",
            "<none>",
            "system:bootstrappers:kubeadm:default-node-token"
        );
        assert_eq!(first, want_first, "header and first token");
        let second = tabwrite(&[row(&forever, now)]);
        let want_second = format!(
            "{:<26}{:<12}{:<10}{:<25}{:<59}{}\n",
            "abcdef.0123456789abcdef", "<forever>", "<never>", "<none>", "rack 7", "<none>"
        );
        assert_eq!(second, want_second, "a later token, laid out on its own");
        let forged = TokenInfo {
            token,
            description: "rack 7\x1b[2J\r\nabcdef.x \u{202e}".into(),
            expires: None,
            usages: vec![],
            groups: vec!["system:bootstrappers:a\u{9b}31m".into()],
        };
        let line = tabwrite(&[row(&forged, now)]);
        assert_eq!(line.lines().count(), 1, "{line:?}");
        assert!(!line.trim_end_matches('\n').chars().any(crate::logging::needs_escape), "{line:?}");
        assert!(line.contains("rack 7\\x1b[2J\\r\\nabcdef.x \\u{202e}"), "{line:?}");
        assert!(line.trim_end().ends_with("system:bootstrappers:a\\u{9b}31m"), "{line:?}");
    }
}
