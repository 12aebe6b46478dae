//! Transactions the database aborted for a conflict with a concurrent one, tried again. With
//! several servers and workers writing, two order batches can deadlock on the same products
//! (MySQL/InnoDB) or fail to serialize (PostgreSQL); such an abort rolled everything back, so
//! trying again is safe.

use crate::store::{StoreError, StoreResult};
use std::future::Future;
use std::time::Duration;

/// How often a transaction that lost a conflict is tried again.
const CONFLICT_RETRIES: usize = 5;

/// Runs `attempt`, and again after a growing pause each time the database aborted it for a
/// conflict, up to [`CONFLICT_RETRIES`] times.
pub(super) async fn retry_conflicts<T, F, Fut>(mut attempt: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = StoreResult<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(StoreError::Sql(e)) if tries < CONFLICT_RETRIES && is_conflict(&e) => {
                tries += 1;
                tracing::warn!(error = %e, tries, "transaction conflict: retrying");
                tokio::time::sleep(Duration::from_millis(5 << tries)).await;
            }
            other => return other,
        }
    }
}

/// SQLSTATE 40001 (MySQL deadlock, PostgreSQL serialization failure) and 40P01 (PostgreSQL
/// deadlock). And a key another writer stored first (PostgreSQL 23505, MySQL 23000): only an
/// order batch inserts without skipping existing keys, and it finds them stored when tried
/// again.
fn is_conflict(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    matches!(
        db.code().as_deref(),
        Some("40001" | "40P01" | "23505" | "23000")
    )
}
