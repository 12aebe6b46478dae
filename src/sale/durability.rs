//! How an order the gate accepted becomes durable before its buyer is answered. The deployment
//! mode decides: embedded mode commits it to the database, many buys to a transaction; cluster
//! mode's gate appended it to its outbox in the same atomic step that took the stock, and a
//! worker stores it later.

use crate::domain::Order;
use crate::store::Persisted;
use async_trait::async_trait;

/// Makes accepted orders durable.
#[async_trait]
pub trait Durability: Send + Sync + 'static {
    /// Makes `order` durable and says what the database made of it. An order that reaches the
    /// database only later (through an outbox) is [`Persisted::Inserted`] as far as the buyer is
    /// concerned: it can no longer be lost.
    async fn persist(&self, order: &Order) -> Result<Persisted, PersistError>;

    /// How long after its id was made a durable order may still be missing from the database.
    /// An order not found that is younger than this is reported as pending, not as unknown.
    fn in_flight_for_ms(&self) -> i64;
}

/// Why an order accepted by the gate did not become durable. Either way nothing was promised:
/// the buy gives its units back and is refused.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// Too many orders already wait to be written: the database is behind. Refused at once
    /// rather than queued without end.
    #[error("too many orders are waiting to be written")]
    Full,
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}
