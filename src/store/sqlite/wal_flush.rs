//! Group fsync of SQLite's write-ahead log, outside the write lock.
//!
//! With `synchronous = FULL`, SQLite syncs the log inside `COMMIT`, while it holds the file's
//! only write lock, so no other write could begin until the disk had answered. The writer
//! connections therefore commit with `synchronous = NORMAL` (the log is written, not synced),
//! and every write then waits here until a sync that began after its commit has finished. One
//! sync covers every commit before it, from both connections. A commit is answered only once
//! its log frames are on disk, so a `202` survives power loss.
//!
//! The sync runs on the caller's thread. For order batches that is the order writer's own
//! thread, so the buys that arrive during a sync make the next batch. Handing each sync to a
//! thread of the blocking pool would let the writer store the next batch meanwhile, but the
//! thread switches cost more than that wins.
//!
//! Checkpoints need nothing from here: with `NORMAL`, SQLite syncs the log before copying it
//! into the database file and the database file after. That is also why a missing log file is
//! fine: SQLite deletes it only after a complete checkpoint (and an in-memory database has
//! none).

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Syncs one database's write-ahead log on behalf of every writer waiting for it.
pub struct WalFlush {
    log: PathBuf,
    /// Commits that asked for a sync: each takes the next number after it committed.
    requested: AtomicU64,
    /// Every commit numbered up to this is on disk.
    synced: AtomicU64,
    /// One sync at a time; the commits that arrive meanwhile share the next one.
    turn: tokio::sync::Mutex<()>,
    /// A failed sync may have dropped the log's unsynced pages (Linux marks them clean), so a
    /// later sync that succeeds proves nothing about them: once one failed, nothing written
    /// through this database is confirmed again until the process restarts and recovers.
    failed: AtomicBool,
}

impl WalFlush {
    /// Flushes the log of the SQLite database file at `database`.
    pub fn new(database: PathBuf) -> Self {
        let mut log = database.into_os_string();
        log.push("-wal");
        Self {
            log: log.into(),
            requested: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            turn: tokio::sync::Mutex::new(()),
            failed: AtomicBool::new(false),
        }
    }

    /// Returns once everything this caller committed before calling is on disk.
    pub async fn flushed(&self) -> io::Result<()> {
        let ticket = self.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let _turn = self.turn.lock().await;
        self.check_healthy()?;
        if self.synced.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        // Every ticket up to here was taken after its commit, so this sync covers them all.
        let covered = self.requested.load(Ordering::SeqCst);
        let synced = super::in_place(|| sync_file(&self.log));
        if let Err(e) = synced {
            self.failed.store(true, Ordering::SeqCst);
            tracing::error!(error = %e, log = %self.log.display(),
                "syncing the SQLite log failed: no write is confirmed until a restart");
            return Err(e);
        }
        self.synced.store(covered, Ordering::SeqCst);
        Ok(())
    }

    fn check_healthy(&self) -> io::Result<()> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(io::Error::other(
                "an earlier sync of the SQLite log failed; restart to recover",
            ));
        }
        Ok(())
    }
}

/// `fdatasync` of the file at `path` (any descriptor will do: the kernel syncs the file, not
/// the descriptor). Opened afresh each time, so a log SQLite deleted and made anew is never
/// mistaken for the old one.
fn sync_file(path: &std::path::Path) -> io::Result<()> {
    match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(file) => file.sync_data(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn concurrent_writers_share_syncs_and_each_waits_for_one_after_its_ticket() {
        let dir = std::env::temp_dir().join(format!("seckill-wal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let database = dir.join("shop.db");
        std::fs::write(dir.join("shop.db-wal"), b"frames").unwrap();
        let flush = Arc::new(WalFlush::new(database));
        let writers: Vec<_> = (0..200)
            .map(|_| {
                let flush = Arc::clone(&flush);
                tokio::spawn(async move { flush.flushed().await })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap().unwrap();
        }
        assert_eq!(flush.requested.load(Ordering::SeqCst), 200);
        assert_eq!(flush.synced.load(Ordering::SeqCst), 200);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn no_log_file_means_nothing_to_sync() {
        let flush = WalFlush::new(std::env::temp_dir().join("seckill-no-such-database.db"));
        flush.flushed().await.unwrap();
    }

    #[tokio::test]
    async fn after_a_failed_sync_nothing_is_confirmed_again() {
        // A directory cannot be opened for writing: the sync fails.
        let dir = std::env::temp_dir().join(format!("seckill-wal-dir-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("shop.db-wal")).unwrap();
        let flush = WalFlush::new(dir.join("shop.db"));
        assert!(flush.flushed().await.is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(flush.flushed().await.is_err(), "the failure sticks");
    }
}
