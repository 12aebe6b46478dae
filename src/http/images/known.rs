//! Which images exist, as this process knows without asking: so a flood of made-up image ids
//! costs no query each (cache penetration). Ids are learnt from this process's uploads and
//! from the database's list of ids, read again when an id is missing, at most once a
//! [`REREAD_AFTER`]. Images are never deleted, so ids are only ever added.

use crate::domain::ImageId;
use crate::store::{Store, StoreResult};
use std::collections::HashSet;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::time::{Duration, Instant};

/// How stale the list may be: an image another server took is found here at most this long
/// after its upload, and made-up ids cost at most one read of the list this often.
pub const REREAD_AFTER: Duration = Duration::from_secs(1);

/// Most ids kept, a few MiB: far more images than a shop shows. Past it, ids not kept are
/// looked up one by one, correct but unprotected.
const MAX_KNOWN: usize = 100_000;

/// What the known ids say about one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Known {
    /// The image exists.
    Yes,
    /// No such image, as of the last read.
    No,
    /// The database holds more images than [`MAX_KNOWN`]: ask it.
    Maybe,
}

/// The ids of images known to exist.
#[derive(Default)]
pub(super) struct KnownIds {
    ids: RwLock<HashSet<ImageId>>,
    /// When the database's list was last asked for, `None` before the first time. Held while
    /// it is read, so the misses of a flood wait for one read instead of making their own.
    read_at: tokio::sync::Mutex<Option<Instant>>,
    /// More ids exist than are kept.
    partial: AtomicBool,
}

impl KnownIds {
    /// Notes an image that exists.
    pub fn add(&self, id: ImageId) {
        let mut ids = self.ids.write().unwrap_or_else(|e| e.into_inner());
        if ids.len() < MAX_KNOWN {
            ids.insert(id);
        } else if !ids.contains(&id) {
            self.overflowed();
        }
    }

    /// Notes that more images exist than are kept, saying so once in the log.
    fn overflowed(&self) {
        if !self.partial.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                kept = MAX_KNOWN,
                "more images exist than this process keeps ids of: \
                 unknown image ids are now looked up in the database"
            );
        }
    }

    fn contains(&self, id: ImageId) -> bool {
        let ids = self.ids.read().unwrap_or_else(|e| e.into_inner());
        ids.contains(&id)
    }

    /// Whether the image `id` exists, reading the database's list of ids first when `id` is
    /// not known and the list was last read over [`REREAD_AFTER`] ago.
    pub async fn check(&self, id: ImageId, store: &dyn Store) -> StoreResult<Known> {
        if self.contains(id) {
            return Ok(Known::Yes);
        }
        {
            let mut read_at = self.read_at.lock().await;
            if read_at.is_none_or(|at| at.elapsed() >= REREAD_AFTER) {
                // Noted before reading: a failing database is asked no more often than a
                // working one.
                *read_at = Some(Instant::now());
                let listed = store.image_ids(MAX_KNOWN as i64).await?;
                if listed.len() >= MAX_KNOWN {
                    self.overflowed();
                }
                listed.into_iter().for_each(|id| self.add(id));
            }
        }
        Ok(if self.contains(id) {
            Known::Yes
        } else if self.partial.load(Ordering::Relaxed) {
            Known::Maybe
        } else {
            Known::No
        })
    }
}
