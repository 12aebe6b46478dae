//! Keeps a server's ended sessions current: every second it reads the sessions other servers
//! ended, and the cut-offs of the accounts they disabled, since the last reading, and every
//! minute it forgets those whose tokens have expired anyway (in memory and in the database).

use crate::auth::revocation::{RevokedSessions, SessionId};
use crate::clock::SharedClock;
use crate::store::{Store, StoreResult};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How often a server reads the sessions ended elsewhere: the longest a signed-out token, or a
/// disabled account's, still works on another server.
const PERIOD: Duration = Duration::from_secs(1);

/// Readings between two clean-ups of expired entries.
const READINGS_PER_CLEAN_UP: u32 = 60;

/// The most rows one reading takes of each list; more wait for the next.
const BATCH: i64 = 10_000;

/// Positions of a list re-read every time. Two sign-outs (or disables) on different servers
/// can commit in the other order of their positions; a reader that had moved past the
/// later-committed one would never see it, so it reads a margin behind the highest position it
/// saw.
const MARGIN: i64 = 1_000;

/// Reads every session ended so far and every cut-off, not expired, then keeps reading the new
/// ones.
pub async fn spawn_sync(
    store: Arc<dyn Store>,
    revoked: Arc<RevokedSessions>,
    clock: SharedClock,
) -> anyhow::Result<JoinHandle<()>> {
    let mut seen = Seen::default();
    while seen.read(&*store, &revoked).await? {}
    Ok(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(PERIOD);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for reading in 1u32.. {
            ticks.tick().await;
            if let Err(e) = seen.read(&*store, &revoked).await {
                tracing::warn!(error = %e, "reading ended sessions");
            }
            if reading % READINGS_PER_CLEAN_UP == 0 {
                let now = clock.now_ms();
                revoked.forget_expired(now);
                if let Err(e) = store.forget_revoked_sessions(now).await {
                    tracing::warn!(error = %e, "forgetting expired ended sessions");
                }
            }
        }
    }))
}

/// The highest position read of each list.
#[derive(Default)]
struct Seen {
    sessions: i64,
    cutoffs: i64,
}

impl Seen {
    /// Takes in a batch of each list from a margin behind its position; whether either moved
    /// (a full batch may have left more to read).
    async fn read(&mut self, store: &dyn Store, revoked: &RevokedSessions) -> StoreResult<bool> {
        let ended = store.revoked_sessions(behind(self.sessions), BATCH).await?;
        let cutoffs = store.user_cutoffs(behind(self.cutoffs), BATCH).await?;
        let moved = advance(&mut self.sessions, &ended) | advance(&mut self.cutoffs, &cutoffs);
        for (_, ended) in ended {
            if let Some(id) = SessionId::parse(&ended.session_id) {
                revoked.insert(id, ended.expires_at);
            }
        }
        for (_, cutoff) in cutoffs {
            revoked.cut_off(cutoff.user, cutoff.cut_at, cutoff.expires_at);
        }
        Ok(moved)
    }
}

/// Where a reading of a list starts: a margin behind the highest position seen.
fn behind(seen: i64) -> i64 {
    (seen - MARGIN).max(0)
}

/// Moves `seen` to the highest position among `rows`, when that is past it; whether it moved.
fn advance<T>(seen: &mut i64, rows: &[(i64, T)]) -> bool {
    match rows.last().map(|(seq, _)| *seq) {
        Some(top) if top > *seen => {
            *seen = top;
            true
        }
        _ => false,
    }
}
