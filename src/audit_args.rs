//! The `--audit-*` flags of `kustos server` and `kustos apiserver`, kube-apiserver's names and
//! defaults, mapped to `kustos_apiserver::audit::Config`.

use std::path::PathBuf;

use clap::Args;
use kustos_apiserver::audit;

#[derive(Args, Clone, Debug)]
pub struct AuditArgs {
    /// Path to the file that defines the audit policy configuration (audit.k8s.io/v1 Policy).
    #[arg(long = "audit-policy-file")]
    audit_policy_file: Option<PathBuf>,
    /// If set, all requests coming to the apiserver will be logged to this file. '-' means
    /// standard out.
    #[arg(long = "audit-log-path")]
    audit_log_path: Option<String>,
    /// The maximum number of days to retain old audit log files based on the timestamp
    /// encoded in their filename.
    #[arg(long = "audit-log-maxage", default_value_t = 0)]
    audit_log_maxage: u64,
    /// The maximum number of old audit log files to retain. Setting a value of 0 will mean
    /// there's no restriction on the number of files.
    #[arg(long = "audit-log-maxbackup", default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// The maximum size in megabytes of the audit log file before it gets rotated (0: 100).
    #[arg(long = "audit-log-maxsize", default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Format of saved audits: "legacy" (one line of text per event) or "json" (one JSON
    /// object per line).
    #[arg(long = "audit-log-format", default_value = "json", value_parser = ["json", "legacy"])]
    audit_log_format: String,
    /// Strategy for sending audit events: "blocking", "batch" or "blocking-strict" (see the
    /// README: events are queued without making requests wait).
    #[arg(long = "audit-log-mode", default_value = "blocking", value_parser = ["blocking", "batch", "blocking-strict"])]
    audit_log_mode: String,
    /// The size of the buffer to store events before they are written.
    #[arg(long = "audit-log-batch-buffer-size", default_value_t = audit::DEFAULT_BUFFER_SIZE)]
    audit_log_batch_buffer_size: usize,
}

impl AuditArgs {
    pub fn config(&self) -> anyhow::Result<audit::Config> {
        if self.audit_log_batch_buffer_size == 0 {
            anyhow::bail!("--audit-log-batch-buffer-size must be positive");
        }
        Ok(audit::Config {
            policy_file: self.audit_policy_file.clone(),
            log_path: self.audit_log_path.clone(),
            max_age_days: self.audit_log_maxage,
            max_backups: self.audit_log_maxbackup,
            max_size_mb: self.audit_log_maxsize,
            format: self.audit_log_format.parse().map_err(anyhow::Error::msg)?,
            mode: self.audit_log_mode.parse().map_err(anyhow::Error::msg)?,
            buffer_size: self.audit_log_batch_buffer_size,
        })
    }
}
