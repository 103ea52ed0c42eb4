//! A single-member etcd of the benchmark's own: `etcd` from PATH (Debian's `etcd-server`;
//! BENCH_ETCD_BIN for another), listening on 127.0.0.1 on free client and peer ports, its data
//! in a directory the caller gives (a fresh one: etcd's write rate depends on its history);
//! killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Longest wait for a new etcd to answer /health.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// A running etcd; killed on drop.
pub struct Etcd {
    pub child: Child,
    /// The client URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Etcd {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Two distinct free ports on 127.0.0.1 (both held until both are known).
fn two_free_ports() -> Result<(u16, u16)> {
    let a = std::net::TcpListener::bind("127.0.0.1:0")?;
    let b = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

/// etcd's arguments for one member named `bench` with its data in `data`.
pub fn args(data: &Path, client_port: u16, peer_port: u16) -> Vec<String> {
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    [
        "--name",
        "bench",
        "--data-dir",
        &data.to_string_lossy(),
        "--listen-client-urls",
        &client,
        "--advertise-client-urls",
        &client,
        "--listen-peer-urls",
        &peer,
        "--initial-advertise-peer-urls",
        &peer,
        "--initial-cluster",
        &format!("bench={peer}"),
        "--initial-cluster-state",
        "new",
        "--logger",
        "zap",
        "--log-outputs",
        "stderr",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Whether a body of etcd's `/health` says healthy (`{"health":"true",...}`).
pub fn healthy(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| v["health"] == "true")
}

/// Start etcd with its data in `dir/etcd` and its log in `dir/etcd.log`, and wait (at most
/// [`READY_TIMEOUT`]) until it reports healthy. Fails when etcd is not installed, exits, or does
/// not become healthy in time (quoting the end of its log).
pub async fn start(dir: &Path) -> Result<Etcd> {
    let bin = std::env::var("BENCH_ETCD_BIN").unwrap_or_else(|_| "etcd".to_string());
    let (client_port, peer_port) = two_free_ports()?;
    let log = dir.join("etcd.log");
    let child = match Command::new(&bin)
        .args(args(&dir.join("etcd"), client_port, peer_port))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).context("creating etcd's log")?)
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("`{bin}` not found: the etcd benchmarks need etcd (Debian: apt-get install etcd-server)")
        }
        Err(e) => return Err(e).context(format!("spawning {bin}")),
    };
    let url = format!("http://127.0.0.1:{client_port}");
    let mut etcd = Etcd { child, url: url.clone() };
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
    let t0 = Instant::now();
    let tail = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    };
    while t0.elapsed() < READY_TIMEOUT {
        if let Some(status) = etcd.child.try_wait()? {
            bail!("etcd exited ({status}) before it was healthy:\n{}", tail());
        }
        if let Ok(r) = http.get(format!("{url}/health")).send().await {
            if r.status().is_success() && r.bytes().await.is_ok_and(|b| healthy(&b)) {
                return Ok(etcd);
            }
        }
        tokio::time::sleep(POLL).await;
    }
    bail!("etcd was not healthy within {READY_TIMEOUT:?}:\n{}", tail())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value given to `flag` in etcd's arguments for a member at `/tmp/x/etcd` on ports
    /// 2379 (client) and 2380 (peer).
    fn flag_value(flag: &str) -> Option<String> {
        let a = args(Path::new("/tmp/x/etcd"), 2379, 2380);
        a.iter().position(|s| s == flag).and_then(|i| a.get(i + 1)).cloned()
    }

    #[test]
    fn healthy_reads_etcds_health_answer() {
        let cases: &[(&str, &str, bool)] = &[
            ("etcd 3.4 healthy", r#"{"health":"true"}"#, true),
            ("with a reason", r#"{"health":"true","reason":""}"#, true),
            ("no leader yet", r#"{"health":"false","reason":"RAFT NO LEADER"}"#, false),
            ("a boolean is not etcd's answer", r#"{"health":true}"#, false),
            ("empty body", "", false),
            ("not JSON", "ok", false),
        ];
        for (name, body, want) in cases {
            assert_eq!(healthy(body.as_bytes()), *want, "{name}");
        }
    }

    #[test]
    fn args_name_one_member_on_the_given_ports() {
        let cases = [
            ("--data-dir", "/tmp/x/etcd"),
            ("--listen-client-urls", "http://127.0.0.1:2379"),
            ("--advertise-client-urls", "http://127.0.0.1:2379"),
            ("--listen-peer-urls", "http://127.0.0.1:2380"),
            ("--initial-advertise-peer-urls", "http://127.0.0.1:2380"),
            ("--initial-cluster", "bench=http://127.0.0.1:2380"),
            ("--initial-cluster-state", "new"),
        ];
        for (flag, want) in cases {
            assert_eq!(flag_value(flag).as_deref(), Some(want), "{flag}");
        }
    }

    /// The real etcd: starts, takes a write, and is gone after drop. Needs `etcd` on PATH
    /// (fails, naming it, when it is missing).
    #[tokio::test]
    async fn start_serves_writes_and_drop_kills_it() {
        let tmp = tempfile::tempdir().unwrap();
        let etcd = start(tmp.path()).await.unwrap();
        let mut client = etcd_client::Client::connect([etcd.url.as_str()], None).await.unwrap();
        client.put("/bench/k", "v", None).await.unwrap();
        let got = client.get("/bench/k", None).await.unwrap();
        assert_eq!(got.kvs().first().map(|kv| kv.value()), Some(&b"v"[..]), "the value read back");
        let pid = etcd.pid();
        drop(etcd);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "etcd {pid} still runs after drop");
    }
}
