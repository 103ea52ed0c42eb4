//! `kustos storage migrate`: copy the cluster state between the SQLite store of a data dir
//! and etcd (either way), with `kustos_apiserver::storage::migrate::copy_all`.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use kustos_apiserver::storage::etcd::EtcdStorage;
use kustos_apiserver::storage::migrate::{self, MigrateError};
use kustos_apiserver::storage::sqlite::SqliteStorage;
use kustos_apiserver::storage::Storage;

#[derive(Args)]
pub struct StorageCommand {
    #[command(subcommand)]
    command: StorageSub,
}

#[derive(Subcommand)]
enum StorageSub {
    /// Copy every object from one store into another (SQLite → etcd or etcd → SQLite).
    #[command(long_about = MIGRATE_ABOUT)]
    Migrate(MigrateArgs),
}

const MIGRATE_ABOUT: &str = "\
Copy every object from one store into another: SQLite → etcd, or etcd → SQLite.

Stop every server using the source first: the source is read at one revision, and writes made
to it after that are not copied. A SQLite store that a server holds open is refused.

Objects are copied byte for byte: uids, creationTimestamps and all contents are kept. Their
resourceVersions become the target's revisions, so clients relist after the move (watches
and continue tokens do not carry over).

A target that already holds objects is refused unless --force: then objects in both are
replaced with the source's, and objects only in the target are kept.

The data dir's pki/ (CA, service-account keys) does not move: start the new server on the
same --data-dir, e.g.
  kustos storage migrate --from sqlite:./kustos-data --to etcd:http://127.0.0.1:2379
  kustos server --data-dir ./kustos-data --storage etcd --etcd-servers http://127.0.0.1:2379";

#[derive(Args)]
struct MigrateArgs {
    /// Where the objects are: sqlite:DATA_DIR (DATA_DIR/kustos.db, as `--data-dir` of the
    /// server) or etcd:URL[,URL...].
    #[arg(long, value_name = "SPEC")]
    from: String,
    /// Where they go: sqlite:DATA_DIR (DATA_DIR/kustos.db is created if absent) or
    /// etcd:URL[,URL...].
    #[arg(long, value_name = "SPEC")]
    to: String,
    /// Write into a target that already holds objects.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    etcd: crate::EtcdArgs,
}

/// A store named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Spec {
    /// A data dir; the store is `DIR/kustos.db`.
    Sqlite(PathBuf),
    /// etcd endpoints.
    Etcd(Vec<String>),
}

/// `--from`/`--to`: `sqlite:DATA_DIR` or `etcd:URL[,URL...]` (http:// or https://).
fn parse_spec(flag: &str, text: &str) -> anyhow::Result<Spec> {
    let bad = || anyhow::anyhow!("{flag} must be sqlite:DATA_DIR or etcd:URL[,URL...], not {text:?}");
    if let Some(dir) = text.strip_prefix("sqlite:") {
        if dir.is_empty() {
            return Err(bad());
        }
        return Ok(Spec::Sqlite(PathBuf::from(dir)));
    }
    let urls = text.strip_prefix("etcd:").ok_or_else(bad)?;
    let servers: Vec<String> = urls.split(',').map(|u| u.trim().to_string()).collect();
    if servers.iter().any(String::is_empty) {
        return Err(bad());
    }
    // The URL checks `--etcd-servers` gets.
    kustos_apiserver::storage::etcd::EtcdConfig::new(servers.clone())
        .validate()
        .map_err(|e| anyhow::anyhow!("{flag} must be sqlite:DATA_DIR or etcd:URL[,URL...]: {e}"))?;
    Ok(Spec::Etcd(servers))
}

/// A spec as the messages name it: `sqlite:DIR`, `etcd:URL,URL (prefix /registry)`.
struct Named<'a>(&'a Spec, &'a str);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Spec::Sqlite(dir) => write!(f, "sqlite:{}", dir.display()),
            Spec::Etcd(servers) => write!(f, "etcd:{} (prefix {})", servers.join(","), self.1),
        }
    }
}

pub async fn run(cmd: StorageCommand) -> anyhow::Result<()> {
    match cmd.command {
        StorageSub::Migrate(a) => run_migrate(a).await,
    }
}

async fn run_migrate(a: MigrateArgs) -> anyhow::Result<()> {
    let from = parse_spec("--from", &a.from)?;
    let to = parse_spec("--to", &a.to)?;
    let prefix = a.etcd.etcd_prefix.as_str();
    match (&from, &to) {
        (Spec::Sqlite(_), Spec::Etcd(_)) | (Spec::Etcd(_), Spec::Sqlite(_)) => {}
        (Spec::Sqlite(_), Spec::Sqlite(_)) => {
            anyhow::bail!("--from and --to are both sqlite: one of them must be etcd")
        }
        (Spec::Etcd(_), Spec::Etcd(_)) => anyhow::bail!("--from and --to are both etcd: one of them must be sqlite"),
    }
    let (from_name, to_name) = (Named(&from, prefix), Named(&to, prefix));
    let source = open(&from, &a.etcd, true).await.with_context(|| format!("opening {from_name}"))?;
    // A source without objects is a wrong path or prefix, never a cluster: stop before the
    // target is touched (or, for sqlite, created).
    let objects = source.count(migrate::ROOT).await.with_context(|| format!("reading {from_name}"))?;
    if objects == 0 {
        anyhow::bail!("{from_name} holds no objects under {}: nothing to migrate", migrate::ROOT);
    }
    let target = open(&to, &a.etcd, false).await.with_context(|| format!("opening {to_name}"))?;
    match migrate::copy_all(source.as_ref(), target.as_ref(), a.force).await {
        Ok(c) => {
            let replaced = match c.replaced {
                0 => String::new(),
                n => format!("; {n} of them replaced objects {to_name} held"),
            };
            println!("copied {} objects from {from_name} to {to_name}{replaced}", c.objects);
            Ok(())
        }
        Err(MigrateError::TargetNotEmpty { objects }) => anyhow::bail!(
            "{to_name} already holds {objects} objects under {}; --force writes into it anyway",
            migrate::ROOT
        ),
        Err(MigrateError::Source(e)) => anyhow::bail!("reading {from_name}: {e}"),
        Err(MigrateError::Target(e)) => anyhow::bail!("reading {to_name}: {e}"),
        Err(e @ MigrateError::Write { .. }) => {
            anyhow::bail!("{e} ({to_name}); it is partly written: fix the cause and run again with --force")
        }
    }
}

/// Open one side. A source data dir must hold a store already; a target data dir must exist
/// (its store is created if absent).
async fn open(spec: &Spec, etcd: &crate::EtcdArgs, source: bool) -> anyhow::Result<Box<dyn Storage>> {
    match spec {
        Spec::Sqlite(dir) => {
            let db = dir.join("kustos.db");
            if source && !db.is_file() {
                anyhow::bail!("{} does not exist (is {} a kustos data dir?)", db.display(), dir.display());
            }
            if !source && !dir.is_dir() {
                anyhow::bail!("{} is not a directory", dir.display());
            }
            Ok(Box::new(SqliteStorage::open(Path::new(&db))?))
        }
        Spec::Etcd(servers) => {
            let cfg = etcd.config(servers.clone())?;
            Ok(Box::new(EtcdStorage::connect(&cfg).await?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_a_data_dir_or_etcd_endpoints() {
        let etcd = |urls: &[&str]| Ok(Spec::Etcd(urls.iter().map(|u| u.to_string()).collect()));
        let cases: &[(&str, &str, Result<Spec, &str>)] = &[
            ("a data dir", "sqlite:./kustos-data", Ok(Spec::Sqlite("./kustos-data".into()))),
            ("an absolute data dir", "sqlite:/var/lib/kustos", Ok(Spec::Sqlite("/var/lib/kustos".into()))),
            ("one endpoint", "etcd:http://127.0.0.1:2379", etcd(&["http://127.0.0.1:2379"])),
            (
                "several endpoints, spaces trimmed",
                "etcd:https://a:2379, https://b:2379",
                etcd(&["https://a:2379", "https://b:2379"]),
            ),
            ("no scheme", "/var/lib/kustos", Err("--from must be sqlite:DATA_DIR or etcd:URL[,URL...]")),
            ("an unknown scheme", "postgres:db", Err("--from must be sqlite:DATA_DIR or etcd:URL[,URL...]")),
            ("an empty data dir", "sqlite:", Err("--from must be sqlite:DATA_DIR or etcd:URL[,URL...]")),
            ("no endpoint", "etcd:", Err("--from must be sqlite:DATA_DIR or etcd:URL[,URL...]")),
            ("an empty endpoint", "etcd:http://a:1,", Err("--from must be sqlite:DATA_DIR or etcd:URL[,URL...]")),
            ("an endpoint without scheme", "etcd:127.0.0.1:2379", Err("is not http://HOST:PORT")),
            ("an endpoint with a path", "etcd:http://127.0.0.1:2379/x", Err("is not http://HOST:PORT")),
            ("http and https mixed", "etcd:http://a:1,https://b:2", Err("use https for every server or for none")),
        ];
        for (name, text, want) in cases {
            match (parse_spec("--from", text), want) {
                (Ok(got), Ok(want)) => assert_eq!(&got, want, "{name}"),
                (Err(e), Err(want)) => {
                    let msg = e.to_string();
                    assert!(msg.contains(want), "{name}: {msg:?} does not say {want:?}");
                    assert!(msg.starts_with("--from must be"), "{name}: {msg:?} names the flag");
                    assert!(!msg.contains('\n'), "{name}: one line: {msg:?}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn stores_are_named_with_the_prefix_for_etcd() {
        let cases = [
            ("sqlite", Spec::Sqlite("./d".into()), "sqlite:./d"),
            (
                "etcd",
                Spec::Etcd(vec!["http://a:1".into(), "http://b:2".into()]),
                "etcd:http://a:1,http://b:2 (prefix /registry)",
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(Named(&spec, "/registry").to_string(), want, "{name}");
        }
    }
}
