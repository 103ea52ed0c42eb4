//! `kustos pki sync-key rotate`: a new `pki/sync.key` for the shared PKI record in etcd, on
//! every apiserver, while they run.
//!
//! The command changes the key files of one data directory, one durable step at a time
//! (`kustos_apiserver::pki::sync::keys`), and before each step waits until every running
//! apiserver follows the record as the step before left it ([`crate::pki_followers`]): no
//! apiserver is ever handed a record sealed under a key it does not hold. Killed at any point,
//! it is run again and goes on from the files.
//!
//! `KUSTOS_PKI_SYNC_KEY_ROTATE_ABORT_AFTER_STEPS=N` makes it abort (no clean-up, as a
//! `kill -9`) right after its N-th durable step: how the tests check that a re-run resumes.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use kustos_apiserver::pki::sync::{self, keys};

/// Test hook: abort after this many steps.
const ABORT_AFTER_ENV: &str = "KUSTOS_PKI_SYNC_KEY_ROTATE_ABORT_AFTER_STEPS";

#[derive(Args)]
pub struct PkiCommand {
    #[command(subcommand)]
    action: PkiAction,
}

#[derive(Subcommand)]
enum PkiAction {
    /// The key that seals the shared PKI record in etcd (`pki/sync.key`).
    SyncKey(SyncKeyCommand),
}

#[derive(Args)]
struct SyncKeyCommand {
    #[command(subcommand)]
    action: SyncKeyAction,
}

#[derive(Subcommand)]
enum SyncKeyAction {
    /// Re-seal the shared PKI record under a new `pki/sync.key` on every apiserver (an
    /// interrupted rotation is finished instead).
    Rotate(RotateArgs),
}

#[derive(Args)]
struct RotateArgs {
    /// The data directory of one of the cluster's apiservers (it must be running).
    #[arg(long, default_value = "./kustos-data")]
    data_dir: PathBuf,
}

pub async fn run(cmd: PkiCommand) -> anyhow::Result<()> {
    match cmd.action {
        PkiAction::SyncKey(SyncKeyCommand { action: SyncKeyAction::Rotate(a) }) => rotate(&a.data_dir).await,
    }
}

async fn rotate(data_dir: &Path) -> anyhow::Result<()> {
    let pki = data_dir.join("pki");
    if !pki.join(sync::SEAL_KEY_FILE).exists() || sync::read_base(&pki)?.is_none() {
        anyhow::bail!(
            "{} does not share its PKI through etcd (no {} or {}): only apiservers on --storage etcd have a sync.key",
            pki.display(),
            sync::SEAL_KEY_FILE,
            sync::BASE_FILE
        );
    }
    let abort_after: Option<usize> = std::env::var(ABORT_AFTER_ENV).ok().and_then(|v| v.parse().ok());
    let mut done = 0usize;
    let mut apply = |step: &keys::Step| -> anyhow::Result<()> {
        keys::apply(&pki, step)?;
        println!("{step}");
        done += 1;
        if abort_after == Some(done) {
            std::process::abort();
        }
        Ok(())
    };
    // Every apiserver follows the record as it is before anything changes.
    crate::pki_followers::wait(data_dir).await?;
    if !keys::observe(&pki)?.under_way() {
        apply(&keys::Step::WriteNext)?;
    } else {
        println!("going on with the rotation under way");
    }
    for _ in 0..keys::MAX_STEPS {
        crate::pki_followers::wait(data_dir).await?;
        let Some(step) = keys::next_step(&keys::observe(&pki)?).map_err(anyhow::Error::msg)? else {
            println!("the shared PKI record is sealed under the new {} on every apiserver", sync::SEAL_KEY_FILE);
            return Ok(());
        };
        apply(&step)?;
    }
    anyhow::bail!("the rotation did not settle within {} steps", keys::MAX_STEPS)
}
