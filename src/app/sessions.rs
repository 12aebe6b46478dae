//! Keeps a server's ended sessions current: every second it reads the sessions other servers
//! ended since the last reading, and every minute it forgets those whose tokens have expired
//! anyway (in memory and in the database).

use crate::auth::revocation::{RevokedSessions, SessionId};
use crate::clock::SharedClock;
use crate::store::{Store, StoreResult};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How often a server reads the sessions ended elsewhere: the longest a signed-out token still
/// works on another server.
const PERIOD: Duration = Duration::from_secs(1);

/// Readings between two clean-ups of expired entries.
const READINGS_PER_CLEAN_UP: u32 = 60;

/// The most rows one reading takes; more wait for the next.
const BATCH: i64 = 10_000;

/// Positions of the list re-read every time. Two sign-outs on different servers can commit in
/// the other order of their positions; a reader that had moved past the later-committed one
/// would never see it, so it reads a margin behind the highest position it saw.
const MARGIN: i64 = 1_000;

/// Reads every session ended so far and not expired, then keeps reading the new ones.
pub async fn spawn_sync(
    store: Arc<dyn Store>,
    revoked: Arc<RevokedSessions>,
    clock: SharedClock,
) -> anyhow::Result<JoinHandle<()>> {
    let mut seen = 0;
    while let Some(next) = read(&*store, &revoked, seen).await? {
        seen = next;
    }
    Ok(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(PERIOD);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for reading in 1u32.. {
            ticks.tick().await;
            match read(&*store, &revoked, seen).await {
                Ok(next) => seen = next.unwrap_or(seen),
                Err(e) => tracing::warn!(error = %e, "reading ended sessions"),
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

/// Takes in a batch of the sessions ended after position `seen - MARGIN`; the highest position
/// read, when it is past `seen`.
async fn read(store: &dyn Store, revoked: &RevokedSessions, seen: i64) -> StoreResult<Option<i64>> {
    let rows = store
        .revoked_sessions((seen - MARGIN).max(0), BATCH)
        .await?;
    let highest = rows.last().map(|(seq, _)| *seq).filter(|&top| top > seen);
    for (_, ended) in rows {
        if let Some(id) = SessionId::parse(&ended.session_id) {
            revoked.insert(id, ended.expires_at);
        }
    }
    Ok(highest)
}
