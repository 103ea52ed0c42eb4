//! The audit log, as kube-apiserver's: `--audit-policy-file` says which requests are recorded
//! and how much of them (`policy`), `--audit-log-path` where (a file rotated as upstream's,
//! `rotate`; `-` for stdout), and the filter (`filter`) writes an `audit.k8s.io/v1` `Event`
//! at each stage of each request the policy records (`event`) through a bounded queue that
//! never makes a request wait (`sink`).
//!
//! What enters: the settings (at start), then every request once authenticated (its user,
//! its `RequestInfo`, the body the handler read, the handler's response object, the
//! authorizer's decision). What leaves: the `Audit-Id` header on every response, whether or
//! not the log is on, and the log's lines and metrics.
//!
//! Logging is on only when both the policy file and the log path are given, as upstream.

pub mod event;
pub mod filter;
pub mod policy;
pub mod rotate;
pub mod sink;

use std::path::PathBuf;
use std::sync::Arc;

pub use filter::{filter, impersonated, init, Capture};
pub use sink::Format;

/// `--audit-log-mode`. Every mode queues events without waiting (see `sink`); `blocking-strict`
/// also refuses a request whose `RequestReceived` event cannot be queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Blocking,
    Batch,
    BlockingStrict,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "blocking" => Ok(Mode::Blocking),
            "batch" => Ok(Mode::Batch),
            "blocking-strict" => Ok(Mode::BlockingStrict),
            _ => Err(format!(
                "invalid audit log mode {s:?}, allowed modes are \"batch\", \"blocking\", \"blocking-strict\""
            )),
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(Format::Json),
            "legacy" => Ok(Format::Legacy),
            _ => Err(format!("invalid audit log format {s:?}, allowed formats are \"json\", \"legacy\"")),
        }
    }
}

/// The `--audit-*` settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub policy_file: Option<PathBuf>,
    /// `-`: standard output.
    pub log_path: Option<String>,
    pub max_age_days: u64,
    pub max_backups: usize,
    pub max_size_mb: u64,
    pub format: Format,
    pub mode: Mode,
    pub buffer_size: usize,
}

/// Upstream's `--audit-log-batch-buffer-size`.
pub const DEFAULT_BUFFER_SIZE: usize = 10_000;

impl Default for Config {
    fn default() -> Self {
        Config {
            policy_file: None,
            log_path: None,
            max_age_days: 0,
            max_backups: 0,
            max_size_mb: 0,
            format: Format::Json,
            mode: Mode::Blocking,
            buffer_size: DEFAULT_BUFFER_SIZE,
        }
    }
}

/// The policy and the backend of a server that audits.
#[derive(Debug)]
pub struct Auditor {
    pub policy: policy::Policy,
    pub sink: sink::Sink,
    pub mode: Mode,
}

impl Auditor {
    /// The auditor the settings ask for: None when the policy file or the log path is
    /// missing; an error (one line) for a bad policy file or a log that cannot be opened.
    pub fn start(cfg: &Config) -> Result<Option<Arc<Auditor>>, String> {
        let policy = match &cfg.policy_file {
            Some(path) => policy::load(path)?,
            None => return Ok(None),
        };
        let Some(path) = cfg.log_path.as_deref().filter(|p| !p.is_empty()) else {
            tracing::warn!("--audit-policy-file without --audit-log-path: no audit log is written");
            return Ok(None);
        };
        let output = if path == "-" {
            sink::Output::Stdout
        } else {
            let limits = rotate::Limits {
                max_size_mb: cfg.max_size_mb,
                max_backups: cfg.max_backups,
                max_age_days: cfg.max_age_days,
            };
            let file = rotate::RotatingFile::open(std::path::Path::new(path), limits)
                .map_err(|e| format!("opening the audit log {path}: {e}"))?;
            sink::Output::File(file)
        };
        let sink = sink::Sink::start(output, cfg.format, cfg.buffer_size)
            .map_err(|e| format!("starting the audit log writer: {e}"))?;
        Ok(Some(Arc::new(Auditor { policy, sink, mode: cfg.mode })))
    }

    /// The metrics for `/metrics`.
    pub fn encode_metrics(&self) -> String {
        self.sink.metrics.encode()
    }
}

#[cfg(test)]
mod tests;
