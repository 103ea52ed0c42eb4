//! `kustos kubeconfig bootstrap`, and reading the kubeconfig every client command is given.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use base64::Engine as _;
use clap::{Args, Subcommand};
use kube::config::Kubeconfig;
use kustos_ca::bootstrap_token::Token;

/// The user name kubeadm gives the token in the bootstrap kubeconfigs it writes.
pub const BOOTSTRAP_USER: &str = "tls-bootstrap-token-user";

#[derive(Args)]
pub struct KubeconfigCommand {
    #[command(subcommand)]
    action: KubeconfigAction,
}

#[derive(Subcommand)]
enum KubeconfigAction {
    /// Print a kubeconfig a kubelet can use as --bootstrap-kubeconfig: the server URL and CA of
    /// the current context's cluster in --kubeconfig, and a user with the bootstrap token.
    Bootstrap(BootstrapArgs),
}

#[derive(Args)]
struct BootstrapArgs {
    /// The kubeconfig to take the cluster from (default: $KUBECONFIG).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}), e.g. from `kustos token create`.
    #[arg(long)]
    token: Option<String>,
}

pub fn run(cmd: KubeconfigCommand) -> anyhow::Result<()> {
    match cmd.action {
        KubeconfigAction::Bootstrap(args) => {
            let token = args.token.ok_or_else(|| anyhow::anyhow!("--token is required"))?;
            let token = Token::parse(&token)?;
            let path = resolve_path(args.kubeconfig, std::env::var_os("KUBECONFIG"))?;
            let kc = read(&path)?;
            let cluster = current_cluster(&kc).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let ca_pem = match cluster.ca {
                CaSource::Data(pem) => pem,
                CaSource::File(file) => std::fs::read_to_string(&file)
                    .with_context(|| format!("reading the certificate authority {file} named in {}", path.display()))?,
            };
            print!(
                "{}",
                kustos_apiserver::pki::kubeconfig_yaml(
                    &cluster.server,
                    &ca_pem,
                    BOOTSTRAP_USER,
                    kustos_apiserver::pki::KubeconfigAuth::Token(token.expose()),
                )
            );
            Ok(())
        }
    }
}

/// `--kubeconfig`, else the first file of `$KUBECONFIG` (as kubeadm picks it).
pub fn resolve_path(flag: Option<PathBuf>, env: Option<OsString>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag.filter(|p| !p.as_os_str().is_empty()) {
        return Ok(p);
    }
    env.as_ref()
        .and_then(|v| std::env::split_paths(v).find(|p| !p.as_os_str().is_empty()))
        .ok_or_else(|| anyhow::anyhow!("no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG"))
}

/// Read a kubeconfig file (relative file references made absolute). Its YAML is read as
/// the apiserver reads bodies ([`kustos_apiserver::wire::yaml`]: aliases cannot make it cost
/// more than a bounded multiple of its size), each document into kube's `Kubeconfig` as
/// JSON, as client-go reads kubeconfigs; documents merge as kube merges them.
pub fn read(path: &Path) -> anyhow::Result<Kubeconfig> {
    if !path.is_file() {
        anyhow::bail!("kubeconfig {} does not exist or is not a file", path.display());
    }
    let fail = |e: &dyn std::fmt::Display| anyhow::anyhow!("reading kubeconfig {}: {e}", path.display());
    let text = std::fs::read(path).map_err(|e| fail(&e))?;
    let mut kc = parse(&text).map_err(|e| fail(&e))?;
    if let Some(dir) = path.parent() {
        make_paths_absolute(&mut kc, dir);
    }
    Ok(kc)
}

/// A kubeconfig's documents (empty ones skipped), merged.
fn parse(text: &[u8]) -> anyhow::Result<Kubeconfig> {
    let mut merged = Kubeconfig::default();
    for doc in kustos_apiserver::wire::yaml::documents(text)? {
        if doc.is_null() {
            continue;
        }
        let kc: Kubeconfig = serde_json::from_value(doc)?;
        merged = merged.merge(kc)?;
    }
    Ok(merged)
}

/// Files a kubeconfig names relative to itself, made absolute against `dir` (what kube's
/// `Kubeconfig::read_from` and client-go do): the CA, client certificate and key, token
/// file, and an exec command given as a path.
fn make_paths_absolute(kc: &mut Kubeconfig, dir: &Path) {
    let absolute = |file: &mut Option<String>| {
        if let Some(f) = file.as_deref().filter(|f| Path::new(f).is_relative()) {
            if let Some(abs) = dir.join(f).to_str() {
                *file = Some(abs.to_string());
            }
        }
    };
    for cluster in kc.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        absolute(&mut cluster.certificate_authority);
    }
    for user in kc.auth_infos.iter_mut().filter_map(|u| u.auth_info.as_mut()) {
        absolute(&mut user.client_certificate);
        absolute(&mut user.client_key);
        absolute(&mut user.token_file);
        if let Some(exec) = user.exec.as_mut() {
            if exec.command.as_deref().is_some_and(|c| c.contains(std::path::MAIN_SEPARATOR)) {
                absolute(&mut exec.command);
            }
        }
    }
}

/// A client for the current context of the kubeconfig at `path`.
pub async fn client(path: &Path) -> anyhow::Result<kube::Client> {
    let config = config(path).await?;
    kube::Client::try_from(config).map_err(|e| anyhow::anyhow!("building a client from {}: {e}", path.display()))
}

/// The client configuration a kubeconfig file gives.
pub async fn config(path: &Path) -> anyhow::Result<kube::Config> {
    let kc = read(path)?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| anyhow::anyhow!("loading kubeconfig {}: {e}", path.display()))
}

/// The client configuration from `--kubeconfig` or `$KUBECONFIG`, or, with neither, from the
/// Pod's service account (in-cluster config), as a CronJob runs.
pub async fn config_or_in_cluster(flag: Option<PathBuf>, env: Option<OsString>) -> anyhow::Result<kube::Config> {
    match resolve_path(flag, env) {
        Ok(path) => config(&path).await,
        Err(no_kubeconfig) => {
            kube::Config::incluster().map_err(|e| anyhow::anyhow!("{no_kubeconfig}, and not in a Pod ({e})"))
        }
    }
}

/// A client from [`config_or_in_cluster`].
pub async fn client_or_in_cluster(flag: Option<PathBuf>, env: Option<OsString>) -> anyhow::Result<kube::Client> {
    let config = config_or_in_cluster(flag, env).await?;
    kube::Client::try_from(config).map_err(|e| anyhow::anyhow!("building a client: {e}"))
}

/// Where a cluster's CA bundle is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// PEM from `certificate-authority-data`.
    Data(String),
    /// The `certificate-authority` file (absolute once read with [`read`]).
    File(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    pub server: String,
    pub ca: CaSource,
}

/// The cluster of the current context: its server URL and CA.
pub fn current_cluster(kc: &Kubeconfig) -> Result<ClusterInfo, String> {
    let current = kc.current_context.as_deref().filter(|c| !c.is_empty()).ok_or("no current-context is set")?;
    let context = kc
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| format!("the current context {current:?} is not defined"))?;
    let name = context.cluster.as_str();
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| format!("the cluster {name:?} of context {current:?} is not defined"))?;
    let server =
        cluster.server.clone().filter(|s| !s.is_empty()).ok_or_else(|| format!("cluster {name:?} has no server"))?;
    let ca = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
        (Some(data), _) if !data.trim().is_empty() => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|_| format!("cluster {name:?}: certificate-authority-data is not base64"))?;
            CaSource::Data(
                String::from_utf8(bytes)
                    .map_err(|_| format!("cluster {name:?}: certificate-authority-data is not PEM"))?,
            )
        }
        (_, Some(file)) if !file.is_empty() => CaSource::File(file.clone()),
        _ => {
            return Err(format!("cluster {name:?} has no certificate authority (a kubelet could not trust the server)"))
        }
    };
    Ok(ClusterInfo { server, ca })
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;

    fn kubeconfig(clusters: &str, contexts: &str, current: &str) -> Kubeconfig {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n{clusters}\ncontexts:\n{contexts}\ncurrent-context: {current}\n"
        );
        parse(yaml.as_bytes()).unwrap_or_else(|e| panic!("{e}: {yaml}"))
    }

    #[test]
    fn the_current_contexts_cluster_is_used() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let data = base64::engine::general_purpose::STANDARD.encode(pem);
        let two = format!(
            "- name: a\n  cluster:\n    server: https://a:6443\n    certificate-authority-data: {data}\n\
             - name: b\n  cluster:\n    server: https://b:6443\n    certificate-authority: /etc/b-ca.crt"
        );
        let ctx =
            "- name: ca\n  context:\n    cluster: a\n    user: u\n- name: cb\n  context:\n    cluster: b\n    user: u";
        let cases: Vec<(&str, Kubeconfig, Result<ClusterInfo, &str>)> = vec![
            (
                "inline CA",
                kubeconfig(&two, ctx, "ca"),
                Ok(ClusterInfo { server: "https://a:6443".into(), ca: CaSource::Data(pem.into()) }),
            ),
            (
                "CA file",
                kubeconfig(&two, ctx, "cb"),
                Ok(ClusterInfo { server: "https://b:6443".into(), ca: CaSource::File("/etc/b-ca.crt".into()) }),
            ),
            ("no current context", kubeconfig(&two, ctx, "\"\""), Err("no current-context is set")),
            ("unknown context", kubeconfig(&two, ctx, "zz"), Err("the current context \"zz\" is not defined")),
            (
                "context names a missing cluster",
                kubeconfig(&two, "- name: cx\n  context:\n    cluster: x\n    user: u", "cx"),
                Err("the cluster \"x\" of context \"cx\" is not defined"),
            ),
            (
                "no CA",
                kubeconfig("- name: a\n  cluster:\n    server: https://a:6443", ctx, "ca"),
                Err("cluster \"a\" has no certificate authority (a kubelet could not trust the server)"),
            ),
            (
                "no server",
                kubeconfig(&format!("- name: a\n  cluster:\n    certificate-authority-data: {data}"), ctx, "ca"),
                Err("cluster \"a\" has no server"),
            ),
            (
                "CA data not base64",
                kubeconfig(
                    "- name: a\n  cluster:\n    server: https://a\n    certificate-authority-data: '!!'",
                    ctx,
                    "ca",
                ),
                Err("cluster \"a\": certificate-authority-data is not base64"),
            ),
        ];
        for (name, kc, want) in cases {
            assert_eq!(current_cluster(&kc), want.map_err(str::to_string), "{name}");
        }
    }

    #[test]
    fn the_kubeconfig_path_comes_from_the_flag_then_the_environment() {
        let list = std::env::join_paths(["/first", "/second"]).unwrap_or_default();
        let cases: Vec<(&str, Option<&str>, Option<OsString>, Option<&str>)> = vec![
            ("flag wins", Some("/flag"), Some("/env".into()), Some("/flag")),
            ("environment", None, Some("/env".into()), Some("/env")),
            ("first of a list", None, Some(list), Some("/first")),
            ("empty flag falls back", Some(""), Some("/env".into()), Some("/env")),
            ("neither", None, None, None),
            ("empty environment", None, Some("".into()), None),
        ];
        for (name, flag, env, want) in cases {
            let got = resolve_path(flag.map(PathBuf::from), env);
            match want {
                Some(p) => assert_eq!(got.ok(), Some(PathBuf::from(p)), "{name}"),
                None => assert_eq!(
                    got.err().map(|e| e.to_string()).as_deref(),
                    Some("no kubeconfig: pass --kubeconfig FILE or set KUBECONFIG"),
                    "{name}"
                ),
            }
        }
    }

    #[test]
    fn kubeconfigs_are_read_with_bounded_yaml() {
        let one =
            "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster: {server: https://a}\ncurrent-context: c\n";
        let two = format!("{one}---\n\n---\nclusters:\n- name: a\n  cluster: {{server: https://other}}\n- name: b\n  cluster: {{server: https://b}}\n");
        let kc = parse(two.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let servers: Vec<_> =
            kc.clusters.iter().map(|c| c.cluster.as_ref().and_then(|c| c.server.clone()).unwrap_or_default()).collect();
        assert_eq!(servers, ["https://a", "https://b"], "the first document to name a cluster wins");
        assert_eq!(kc.current_context.as_deref(), Some("c"));
        assert!(parse(b"").is_ok_and(|kc| kc.clusters.is_empty()), "an empty file is an empty kubeconfig");

        let mut bomb =
            String::from("apiVersion: v1\nkind: Config\nx0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..12 {
            bomb.push_str(&format!("x{i}: &x{i} [{}]\n", vec![format!("*x{}", i - 1); 10].join(",")));
        }
        let cases = [
            (bomb.as_str(), "yaml: document contains excessive aliasing"),
            ("clusters: [[[", "yaml: unclosed bracket"),
            ("clusters: 3", "invalid type"),
        ];
        for (text, want) in cases {
            let got = parse(text.as_bytes()).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(got.contains(want) && !got.contains('\n'), "{text:?}: {got:?}");
        }
    }

    #[test]
    fn relative_files_are_made_absolute_against_the_kubeconfig() {
        let text = "clusters:\n- name: a\n  cluster: {server: https://a, certificate-authority: ca.crt}\n\
                    - name: b\n  cluster: {server: https://b, certificate-authority: /etc/ca.crt}\n\
                    users:\n- name: u\n  user:\n    client-certificate: sub/u.crt\n    client-key: /abs/u.key\n\
                    \x20   tokenFile: t\n    exec: {command: ./plugin, apiVersion: client.authentication.k8s.io/v1}\n\
                    - name: w\n  user:\n    exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}\n";
        let mut kc = parse(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        make_paths_absolute(&mut kc, Path::new("/home/k"));
        let ca: Vec<_> =
            kc.clusters.iter().map(|c| c.cluster.as_ref().and_then(|c| c.certificate_authority.clone())).collect();
        assert_eq!(ca, [Some("/home/k/ca.crt".to_string()), Some("/etc/ca.crt".to_string())]);
        let u = kc.auth_infos[0].auth_info.clone().unwrap_or_default();
        assert_eq!(u.client_certificate.as_deref(), Some("/home/k/sub/u.crt"));
        assert_eq!(u.client_key.as_deref(), Some("/abs/u.key"));
        assert_eq!(u.token_file.as_deref(), Some("/home/k/t"));
        assert_eq!(u.exec.and_then(|e| e.command).as_deref(), Some("/home/k/./plugin"));
        let w = kc.auth_infos[1].auth_info.clone().unwrap_or_default();
        assert_eq!(w.exec.and_then(|e| e.command).as_deref(), Some("aws"), "a bare command is looked up on PATH");
    }
}
