//! kustos-filework: one thread for the background loops' file work.
//!
//! In: a closure that reads or writes local files: the CA, serving and key files that loops
//! poll every second or two, the shared PKI's state files. Out: its result, to the task that
//! awaits it.
//!
//! Why not `tokio::task::spawn_blocking` (or `tokio::fs`, which uses it): tokio's blocking
//! pool starts a thread whenever none is idle, and wakes its idle threads in turn. Once a
//! burst (start-up, a storm of storage reads) has grown the pool, the loops' polls (about ten a
//! second at idle) keep every one of those threads awake, each with its stack and its own
//! allocator pages, for as long as the process runs; tokio ends a thread only after 10 s
//! without work. Here the polls share one thread, started on first use and kept for the
//! process's life, and the blocking pool empties 10 s after the last storage read that used
//! it (docs/BENCHMARKS.md, "One thread for the file polls").
//!
//! Jobs run one at a time, in the order sent. A job that never returns (a file on a hung
//! network mount) holds up the jobs behind it, which read the same directories. A job that
//! panics is caught: its caller gets [`Gone`], and the thread goes on with the next. Should
//! the thread fail to start, jobs go to tokio's blocking pool as before.
//!
//! Used by the apiserver's file followers (`authn/client_ca.rs`, `pki/`), the controllers'
//! file triggers and reads (`runtime::file_changes`, the CA publishers, the token
//! controller) and `kustos sa-signer`.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::OnceLock;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The job did not run to its end: it panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a file job did not finish (it panicked)")]
pub struct Gone;

/// The thread's queue, `None` when the thread could not be started.
static QUEUE: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

/// The name of the thread, as `/proc/PID/task/TID/comm` shows it.
pub const THREAD_NAME: &str = "kustos-files";

fn queue() -> Option<&'static mpsc::Sender<Job>> {
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let started = std::thread::Builder::new().name(THREAD_NAME.into()).spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
            match started {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "starting the file-work thread; file work goes to tokio's blocking pool");
                    None
                }
            }
        })
        .as_ref()
}

/// Run `f` on the file-work thread and wait for its result.
pub async fn run<T, F>(f: F) -> Result<T, Gone>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let Some(queue) = queue() else {
        return tokio::task::spawn_blocking(f).await.map_err(|_| Gone);
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        // A panic drops `tx` unsent, and the caller sees `Gone`; a caller that stopped
        // waiting drops `rx`, and the result is dropped here.
        if let Ok(out) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
            let _ = tx.send(out);
        }
    });
    // The receiving end lives as long as the thread, which never returns.
    queue.send(job).map_err(|_| Gone)?;
    rx.await.map_err(|_| Gone)
}

/// `std::fs::read` of `path`, on the file-work thread.
pub async fn read(path: impl Into<PathBuf>) -> std::io::Result<Vec<u8>> {
    let path = path.into();
    run(move || std::fs::read(path)).await.map_err(std::io::Error::other)?
}

/// `std::fs::read_to_string` of `path`, on the file-work thread.
pub async fn read_to_string(path: impl Into<PathBuf>) -> std::io::Result<String> {
    let path = path.into();
    run(move || std::fs::read_to_string(path)).await.map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_sent_together_run_one_at_a_time_on_one_named_thread() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let running = std::sync::Arc::new(AtomicUsize::new(0));
        let most = std::sync::Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (running, most) = (running.clone(), most.clone());
            tasks.spawn(run(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(2));
                running.fetch_sub(1, Ordering::SeqCst);
                let t = std::thread::current();
                (t.id(), t.name().map(str::to_owned))
            }));
        }
        let mut seen = Vec::new();
        while let Some(done) = tasks.join_next().await {
            seen.push(done.expect("the task ended").expect("the job ran"));
        }
        assert_eq!(seen.len(), 16);
        assert_eq!(seen[0].1.as_deref(), Some(THREAD_NAME));
        assert!(seen.iter().all(|s| *s == seen[0]), "every job on the same thread: {seen:?}");
        assert_eq!(most.load(Ordering::SeqCst), 1, "one job at a time");
    }

    #[tokio::test]
    async fn a_panicking_job_answers_gone_and_the_thread_goes_on() {
        let r: Result<(), Gone> = run(|| panic!("a job that panics")).await;
        assert_eq!(r, Err(Gone));
        assert_eq!(run(|| 7).await, Ok(7));
    }

    #[tokio::test]
    async fn reads_keep_the_file_error_kind_and_the_contents() {
        let dir = std::env::temp_dir().join(format!("kustos-filework-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating a temporary directory");
        let path = dir.join("f");
        std::fs::write(&path, b"contents\n").expect("writing the file");
        // (file, the text both reads give, or the kind of error both give)
        let cases = [("f", Ok("contents\n")), ("missing", Err(std::io::ErrorKind::NotFound))];
        for (name, want) in cases {
            let as_text = read_to_string(dir.join(name)).await;
            let as_bytes = read(dir.join(name)).await.map(|b| String::from_utf8_lossy(&b).into_owned());
            for (how, got) in [("read_to_string", as_text), ("read", as_bytes)] {
                match (&got, want) {
                    (Ok(text), Ok(w)) => assert_eq!(text, w, "{how} {name}"),
                    (Err(e), Err(kind)) => assert_eq!(e.kind(), kind, "{how} {name}"),
                    _ => panic!("{how} {name}: {got:?}, want {want:?}"),
                }
            }
        }
        let not_utf8 = dir.join("binary");
        std::fs::write(&not_utf8, [0xff, 0xfe]).expect("writing the file");
        let e = read_to_string(&not_utf8).await.expect_err("not UTF-8");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
