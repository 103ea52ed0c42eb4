//! An etcd of its own for a test: `/usr/bin/etcd` (or `etcd` on PATH) on 127.0.0.1, on free
//! client and peer ports, with its data in a temporary directory. It can be killed and
//! started again on the same data and ports; it is killed on drop.
//!
//! A missing etcd binary fails the test with a clear message; it is never skipped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd may take to report itself healthy.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at a first start, each on fresh ports (another process may take a free port
/// between choosing it and etcd binding it).
const START_ATTEMPTS: usize = 3;

/// A running (or stopped) etcd member.
pub struct Etcd {
    tmp: tempfile::TempDir,
    child: Option<Child>,
    client_port: u16,
    peer_port: u16,
    /// Starts so far (names the log files).
    runs: u32,
    /// Serve clients over TLS, requiring client certificates from this CA.
    tls: Option<Tls>,
    /// Where `/health` is served over plain HTTP (the client port, or with TLS a port of its own).
    health_port: u16,
}

/// PEM files of an etcd that serves clients over TLS only.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The CA that signed `cert` and that client certificates must chain to.
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// The etcd binary: `/usr/bin/etcd`, else `etcd` on PATH; panics when there is none.
pub fn binary() -> PathBuf {
    let default = PathBuf::from("/usr/bin/etcd");
    if default.is_file() {
        return default;
    }
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|p| p.join("etcd")).find(|p| p.is_file()))
        .unwrap_or_default();
    found.unwrap_or_else(|| {
        panic!(
            "etcd is not installed (no /usr/bin/etcd, no etcd on PATH): the etcd tests need it; on Debian: \
             apt-get install etcd-server"
        )
    })
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0 to find a free port");
    l.local_addr().expect("local address").port()
}

impl Etcd {
    /// Start a fresh etcd and wait (bounded) until it is healthy.
    pub fn start() -> Etcd {
        Etcd::start_with(None)
    }

    /// Like [`Etcd::start`], serving clients over TLS only (client certificates required).
    pub fn start_tls(tls: Tls) -> Etcd {
        Etcd::start_with(Some(tls))
    }

    fn start_with(tls: Option<Tls>) -> Etcd {
        let tmp = tempfile::Builder::new().prefix("kustos-etcd-").tempdir().expect("creating a temporary directory");
        let mut etcd = Etcd { tmp, child: None, client_port: 0, peer_port: 0, runs: 0, tls, health_port: 0 };
        for attempt in 1..=START_ATTEMPTS {
            etcd.client_port = free_port();
            etcd.peer_port = free_port();
            etcd.health_port = if etcd.tls.is_some() { free_port() } else { etcd.client_port };
            if etcd.client_port == etcd.peer_port || (etcd.tls.is_some() && etcd.health_port == etcd.client_port) {
                continue;
            }
            match etcd.launch() {
                Ok(()) => return etcd,
                Err(why) if attempt < START_ATTEMPTS => {
                    eprintln!("etcd did not start ({why}); trying again on other ports");
                    // A half-initialised data dir would keep the old ports' cluster config.
                    let _ = std::fs::remove_dir_all(etcd.data_dir());
                }
                Err(why) => panic!("etcd did not start: {why}\nlog tail:\n{}", etcd.log_tail()),
            }
        }
        panic!("etcd did not start in {START_ATTEMPTS} attempts\nlog tail:\n{}", etcd.log_tail())
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS), for `--etcd-servers`.
    pub fn client_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The etcd process's id (for CPU and memory figures).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `--storage etcd --etcd-servers <client_url>`, for a kustos server on this etcd.
    pub fn server_args(&self) -> Vec<String> {
        vec!["--storage".into(), "etcd".into(), "--etcd-servers".into(), self.client_url()]
    }

    fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    fn log(&self, run: u32) -> PathBuf {
        self.tmp.path().join(format!("etcd-{run}.log"))
    }

    /// The end of the current run's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log(self.runs)).unwrap_or_default();
        let mut start = text.len().saturating_sub(4000);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text[start..].to_string()
    }

    /// SIGKILL etcd and reap it: no chance to flush or say goodbye.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same data dir and ports; waits (bounded) until it is healthy.
    pub fn start_again(&mut self) {
        self.stop();
        self.runs += 1;
        if let Err(why) = self.launch() {
            panic!("etcd did not start again: {why}\nlog tail:\n{}", self.log_tail());
        }
    }

    /// Spawn etcd on the current ports and data dir and wait until `/health` says true.
    fn launch(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.log(self.runs)).expect("creating the etcd log");
        let client = self.client_url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(binary());
        if let Some(tls) = &self.tls {
            cmd.arg(format!("--cert-file={}", tls.cert_file.display()))
                .arg(format!("--key-file={}", tls.key_file.display()))
                .arg(format!("--trusted-ca-file={}", tls.ca_file.display()))
                .arg("--client-cert-auth")
                .arg(format!("--listen-metrics-urls=http://127.0.0.1:{}", self.health_port));
        }
        let child = cmd
            .arg("--name=kustos-test")
            .arg(format!("--data-dir={}", self.data_dir().display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=kustos-test={peer}"))
            .arg("--initial-cluster-state=new")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("cloning the log file handle")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", binary().display()));
        self.child = Some(child);
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!("etcd exited with {status}"));
            }
            if healthy(self.health_port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!("etcd was not healthy within {HEALTHY_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `GET /health` on the client port answers `"health":"true"`.
fn healthy(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut conn) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else { return false };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if conn.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = conn.read_to_string(&mut reply);
    (reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200")) && reply.contains("\"health\":\"true\"")
}
