//! What an idle `kustos server` keeps doing: its loops poll the PKI files (the CA, the
//! serving certificate, the service-account keys) every second or two, and every one of those
//! reads runs on the one file-work thread (`kustos-files`, the `kustos-filework` crate), not on
//! tokio's blocking pool, whose threads the polls would otherwise keep alive
//! (docs/BENCHMARKS.md, "One thread for the file polls").

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::Server;

/// How long the polls are watched: several rounds of the one-second and two-second polls.
const WATCH: Duration = Duration::from_secs(5);

/// Older than this, a file's metadata tells its changes apart (`RACY` in
/// `controllers/src/ca_files.rs`, 2 s), with a second to spare.
const SETTLED: Duration = Duration::from_secs(3);

/// The latest change (modification or status change) of the files in `dir`.
fn newest_write(dir: &Path) -> std::time::SystemTime {
    use std::os::unix::fs::MetadataExt as _;
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    entries
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| {
            let at = |secs: i64, nsecs: i64| {
                std::time::UNIX_EPOCH
                    + Duration::from_secs(secs.max(0) as u64)
                    + Duration::from_nanos(nsecs.max(0) as u64)
            };
            at(m.mtime(), m.mtime_nsec()).max(at(m.ctime(), m.ctime_nsec()))
        })
        .max()
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// The threads of `pid`, by id, with their names.
fn threads(pid: u32) -> BTreeMap<String, String> {
    let tasks = std::path::PathBuf::from(format!("/proc/{pid}/task"));
    std::fs::read_dir(&tasks)
        .expect("reading the server's threads")
        .filter_map(|t| t.ok())
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.to_owned();
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            Some((tid, comm.trim().to_owned()))
        })
        .collect()
}

fn traced(pid: u32, tid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()
        .and_then(|st| st.lines().find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim() != "0")))
        .unwrap_or(false)
}

/// The thread ids of the `openat` calls in strace's output `text` that open a file under `dir`.
fn openers_under(text: &str, dir: &Path) -> Vec<String> {
    let quoted = format!("\"{}/", dir.display());
    text.lines()
        .filter(|l| l.contains("openat(") && l.contains(&quoted))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_reads_its_pki_files_on_the_one_file_thread() {
    let s = Server::start();
    let pid = s.pid();
    let pki = s.data_dir.join("pki");
    // A request of the in-process controllers reads the CA files again while they are newer
    // than 2 s (`controllers/src/ca_files.rs`, `RACY`): that is the request path, not a poll.
    // Watched once every file of the fresh data directory is older than that.
    for _ in 0..100 {
        if newest_write(&pki).elapsed().is_ok_and(|age| age > SETTLED) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let trace = s.work_dir().join("idle.strace");
    let mut strace = std::process::Command::new("strace")
        .args(["-qq", "-f", "-e", "trace=openat", "-o"])
        .arg(&trace)
        .args(["-p", &pid.to_string()])
        .spawn()
        .expect("running strace (scripts/test.sh installs it: apt-get install strace)");
    // strace attaches to the threads one by one: wait until it has them all.
    let all_traced = || threads(pid).keys().all(|tid| traced(pid, tid));
    for _ in 0..200 {
        if all_traced() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(all_traced(), "strace did not attach to every thread of {pid} within 10 s");
    tokio::time::sleep(WATCH).await;
    let names = threads(pid);
    let stopped = std::process::Command::new("kill").args(["-INT", &strace.id().to_string()]).status();
    assert!(stopped.is_ok_and(|st| st.success()), "stopping strace");
    let done = strace.wait().expect("waiting for strace");
    let text = std::fs::read_to_string(&trace).expect("reading strace's output");

    let openers = openers_under(&text, &pki);
    assert!(
        openers.len() >= 2,
        "the loops opened the PKI files {} times in {WATCH:?} ({done}):\n{text}",
        openers.len()
    );
    let named: Vec<(&str, &str)> =
        openers.iter().map(|tid| (tid.as_str(), names.get(tid).map_or("(ended)", String::as_str))).collect();
    assert!(
        named.iter().all(|(_, name)| *name == kustos_filework::THREAD_NAME),
        "every PKI file read on the file-work thread; read by (thread, name): {named:?}"
    );
}

#[test]
fn openers_are_read_from_strace_lines() {
    let dir = Path::new("/d/pki");
    let text = "\
101 openat(AT_FDCWD, \"/d/pki/ca.crt\", O_RDONLY|O_CLOEXEC) = 9
102 openat(AT_FDCWD, \"/d/other\", O_RDONLY|O_CLOEXEC) = 9
103 statx(AT_FDCWD, \"/d/pki/ca.crt\", AT_STATX_SYNC_AS_STAT, STATX_ALL, {}) = 0
104 openat(AT_FDCWD, \"/d/pki/sa-keys.json\", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
";
    assert_eq!(openers_under(text, dir), ["101", "104"]);
}
