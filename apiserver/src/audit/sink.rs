//! The log backend: what enters is events from the request path, handed over without
//! waiting; what leaves is their lines in the log (a file or stdout) and the audit metrics.
//!
//! Events go through a bounded queue (`--audit-log-batch-buffer-size`, upstream's 10000) to
//! one writer thread, which finishes them (bodies to objects), formats and writes them, and
//! flushes whenever the queue is empty. A full queue never makes a request wait: the event is
//! dropped and counted in `apiserver_audit_error_total{plugin="buffered"}`, as upstream's
//! buffered backend counts what it cannot queue. Bodies waiting in the queue are bounded too
//! ([`MAX_QUEUED_BODY_BYTES`]): past it, new events lose their bodies and are marked
//! truncated. A failed write is counted in `apiserver_audit_error_total{plugin="log"}`.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use super::event::{self, Pending};
use super::policy::Level;
use super::rotate::RotatingFile;

/// Body bytes held by queued events at most.
pub const MAX_QUEUED_BODY_BYTES: usize = 64 << 20;

/// Where lines go.
#[derive(Debug)]
pub enum Output {
    Stdout,
    File(RotatingFile),
}

/// `--audit-log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Json,
    Legacy,
}

/// The audit counters, upstream's names.
#[derive(Debug, Default)]
pub struct Metrics {
    events: AtomicU64,
    errors_log: AtomicU64,
    errors_buffered: AtomicU64,
    levels: [AtomicU64; 4],
}

impl Metrics {
    pub fn observe_level(&self, level: Level) {
        self.levels[level as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.errors_buffered.load(Ordering::Relaxed)
    }

    /// The OpenMetrics text of the counters.
    pub fn encode(&self) -> String {
        use std::fmt::Write as _;
        let mut t = String::new();
        let _ = write!(
            t,
            "# HELP apiserver_audit_event Counter of audit events generated and sent to the audit backend.\n\
             # TYPE apiserver_audit_event counter\napiserver_audit_event_total {}\n\
             # HELP apiserver_audit_error Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.\n\
             # TYPE apiserver_audit_error counter\n\
             apiserver_audit_error_total{{plugin=\"buffered\"}} {}\napiserver_audit_error_total{{plugin=\"log\"}} {}\n\
             # HELP apiserver_audit_level Counter of policy levels for audit events (1 per request).\n\
             # TYPE apiserver_audit_level counter\n",
            self.events.load(Ordering::Relaxed),
            self.errors_buffered.load(Ordering::Relaxed),
            self.errors_log.load(Ordering::Relaxed),
        );
        for level in [Level::None, Level::Metadata, Level::Request, Level::RequestResponse] {
            let n = self.levels[level as usize].load(Ordering::Relaxed);
            let _ = writeln!(t, "apiserver_audit_level_total{{level=\"{}\"}} {n}", level.as_str());
        }
        t
    }
}

/// The request path's end of the queue.
#[derive(Debug)]
pub struct Sink {
    tx: SyncSender<Pending>,
    pub metrics: Arc<Metrics>,
    queued_body_bytes: Arc<AtomicUsize>,
}

fn body_len(p: &Pending) -> usize {
    p.request_body.as_ref().map_or(0, |b| b.len())
        + p.status_body.as_ref().map_or(0, |b| b.len())
        + p.response_object.as_ref().map_or(0, |_| p.response_bytes)
}

impl Sink {
    /// Start the writer thread over `output`.
    pub fn start(output: Output, format: Format, buffer_size: usize) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(buffer_size.max(1));
        let metrics = Arc::new(Metrics::default());
        let queued_body_bytes = Arc::new(AtomicUsize::new(0));
        let (m, q) = (metrics.clone(), queued_body_bytes.clone());
        std::thread::Builder::new().name("audit-log".into()).spawn(move || write_loop(rx, output, format, &m, &q))?;
        Ok(Sink { tx, metrics, queued_body_bytes })
    }

    /// Queue one event without waiting; false when it was dropped.
    pub fn send(&self, mut p: Pending) -> bool {
        let mut n = body_len(&p);
        if self.queued_body_bytes.fetch_add(n, Ordering::Relaxed) + n > MAX_QUEUED_BODY_BYTES {
            self.queued_body_bytes.fetch_sub(n, Ordering::Relaxed);
            p.request_body = None;
            p.response_object = None;
            p.event.annotations.insert("audit.k8s.io/truncated".into(), "true".into());
            n = body_len(&p);
            self.queued_body_bytes.fetch_add(n, Ordering::Relaxed);
        }
        match self.tx.try_send(p) {
            Ok(()) => {
                self.metrics.events.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued_body_bytes.fetch_sub(n, Ordering::Relaxed);
                self.metrics.errors_buffered.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }
}

fn write_loop(rx: Receiver<Pending>, mut output: Output, format: Format, metrics: &Metrics, queued: &AtomicUsize) {
    let mut stdout = std::io::BufWriter::new(std::io::stdout());
    let mut failures = 0u64;
    loop {
        let p = match rx.try_recv() {
            Ok(p) => p,
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                let _ = match &mut output {
                    Output::Stdout => stdout.flush(),
                    Output::File(f) => f.flush(),
                };
                match rx.recv() {
                    Ok(p) => p,
                    Err(_) => return,
                }
            }
            Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
        };
        queued.fetch_sub(body_len(&p), Ordering::Relaxed);
        let ev = p.finish();
        let mut line = match format {
            Format::Json => event::json_line(ev),
            Format::Legacy => event::legacy_line(&ev),
        };
        line.push('\n');
        let written = match &mut output {
            Output::Stdout => stdout.write_all(line.as_bytes()),
            Output::File(f) => f.write_at(line.as_bytes(), chrono::Utc::now()),
        };
        if let Err(e) = written {
            metrics.errors_log.fetch_add(1, Ordering::Relaxed);
            if failures.is_power_of_two() || failures == 0 {
                tracing::error!(error = %e, failures = failures + 1, "writing the audit log failed");
            }
            failures += 1;
        }
    }
    let _ = match &mut output {
        Output::Stdout => stdout.flush(),
        Output::File(f) => f.flush(),
    };
}
