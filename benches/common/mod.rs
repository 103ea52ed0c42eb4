//! What the benchmarks share: starting the real binary on a free port, the admin client,
//! process figures from /proc, percentiles and Markdown tables.
#![allow(dead_code)]

pub mod apf;
// The tests' etcd fixture: one etcd on free loopback ports, killed on drop.
#[path = "../../tests/common/etcd.rs"]
pub mod etcd;
pub mod lease;
pub mod load;
pub mod scrape;
pub mod storm;
pub mod work;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub fn env_u64(k: &str, d: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

/// A running `kustos` child process; killed on drop.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Start `kustos <subcommand> --data-dir DIR --secure-port P <extra>` and return it with the
/// time until `/readyz` answered 200. The server's stderr goes to `DIR/../<subcommand>.log`.
pub async fn start(subcommand: &str, dir: &Path, extra: &[&str]) -> Result<(Server, Duration)> {
    let port = free_port()?;
    let log = dir.with_file_name(format!("{subcommand}.log"));
    let t0 = Instant::now();
    // BENCH_KUSTOS_BIN runs another build (e.g. one with frame pointers, for profiling).
    let bin = std::env::var("BENCH_KUSTOS_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kustos").to_string());
    let child = Command::new(bin)
        .args([subcommand, "--data-dir"])
        .arg(dir)
        .args(["--secure-port", &port.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).context("creating the server log")?)
        .spawn()
        .context("spawning kustos")?;
    let url = format!("https://127.0.0.1:{port}");
    let mut server = Server { child, url: url.clone(), dir: dir.to_path_buf() };
    let anon = reqwest::Client::builder().danger_accept_invalid_certs(true).build()?;
    for _ in 0..20_000 {
        if let Some(status) = server.child.try_wait()? {
            // The log is in the caller's temporary directory, gone once it returns: quote it.
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
            bail!("kustos {subcommand} exited ({status}) before it was ready:\n{}", tail.join("\n"));
        }
        if let Ok(r) = anon.get(format!("{url}/readyz")).send().await {
            if r.status().is_success() {
                return Ok((server, t0.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    bail!("server did not become ready")
}

/// The server's CA certificate (PEM) from the admin kubeconfig in `dir`.
pub fn ca_pem(dir: &Path) -> Result<Vec<u8>> {
    let kc = kubeconfig(dir)?;
    b64(&kc["clusters"][0]["cluster"]["certificate-authority-data"])
}

fn kubeconfig(dir: &Path) -> Result<serde_json::Value> {
    Ok(serde_yaml::from_slice(&std::fs::read(dir.join("admin.kubeconfig"))?)?)
}

fn b64(v: &serde_json::Value) -> Result<Vec<u8>> {
    use base64::Engine;
    Ok(base64::engine::general_purpose::STANDARD.decode(v.as_str().context("kubeconfig field")?)?)
}

/// An HTTPS client with the admin's client certificate (system:masters).
pub fn admin_client(dir: &Path) -> Result<reqwest::Client> {
    let kc = kubeconfig(dir)?;
    let user = &kc["users"][0]["user"];
    let mut pem = b64(&user["client-certificate-data"])?;
    pem.extend(b64(&user["client-key-data"])?);
    Ok(reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem(dir)?)?)
        .identity(reqwest::Identity::from_pem(&pem)?)
        .pool_max_idle_per_host(256)
        .build()?)
}

/// An HTTPS client with a client certificate for `name` in `groups`, issued from the cluster
/// CA in `dir/pki` (the bench runs on the server's machine, as a controller's kubeconfig would
/// be made there).
pub fn user_client(dir: &Path, name: &str, groups: &[&str]) -> Result<reqwest::Client> {
    let pki = dir.join("pki");
    let ca_crt = std::fs::read_to_string(pki.join("ca.crt")).context("reading pki/ca.crt")?;
    let ca_key = std::fs::read_to_string(pki.join("ca.key")).context("reading pki/ca.key")?;
    let ca = kustos_ca::Ca::from_pem(&ca_crt, &ca_key)?;
    let params = kustos_ca::IssueParams::client(
        name,
        groups.iter().map(|g| g.to_string()).collect(),
        chrono::Duration::hours(2),
    );
    let issued = ca.issue(params, chrono::Utc::now())?;
    let mut pem = issued.key_pem.context("the issued certificate has no generated key")?.into_bytes();
    pem.push(b'\n');
    pem.extend_from_slice(issued.cert_pem.as_bytes());
    Ok(reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_crt.as_bytes())?)
        .identity(reqwest::Identity::from_pem(&pem)?)
        .build()?)
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

/// Resident set size now.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// Peak resident set size.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// User + system CPU time the process has used.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // The kernel reports clock ticks; USER_HZ is 100 on Linux.
    Some(Duration::from_millis(ticks * 10))
}

pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// True if the response has the wanted status; the body is always read to the end (dropping
/// unread responses makes the client reset HTTP/2 streams, which servers rightly limit).
pub async fn read_ok(r: reqwest::Result<reqwest::Response>, want: u16) -> bool {
    match r {
        Ok(r) => {
            let ok = r.status().as_u16() == want;
            r.bytes().await.is_ok() && ok
        }
        Err(_) => false,
    }
}

/// A Markdown table: the header, a separator, then one line per row (a row shorter than the
/// header is padded with empty cells); `|` in a cell is escaped.
pub fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    let mut out = line(header.iter().map(|h| h.replace('|', "\\|")).collect());
    out.push_str(&line(header.iter().map(|_| "---".to_string()).collect()));
    for row in rows {
        let cells = (0..header.len()).map(|i| row.get(i).map(|c| c.replace('|', "\\|")).unwrap_or_default());
        out.push_str(&line(cells.collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn markdown_table_pads_and_escapes() {
        use super::markdown_table;
        let cases: &[(&str, Vec<Vec<String>>, &str)] = &[
            ("no rows", vec![], "| a | b |\n| --- | --- |\n"),
            ("full rows", vec![row(&["1", "2"]), row(&["3", "4"])], "| a | b |\n| --- | --- |\n| 1 | 2 |\n| 3 | 4 |\n"),
            ("a short row is padded", vec![row(&["**section**"])], "| a | b |\n| --- | --- |\n| **section** |  |\n"),
            ("a pipe is escaped", vec![row(&["x|y", "z"])], "| a | b |\n| --- | --- |\n| x\\|y | z |\n"),
            ("extra cells are dropped", vec![row(&["1", "2", "3"])], "| a | b |\n| --- | --- |\n| 1 | 2 |\n"),
        ];
        for (name, rows, want) in cases {
            assert_eq!(markdown_table(&["a", "b"], rows), *want, "{name}");
        }
    }
}
