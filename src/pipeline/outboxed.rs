//! Cluster mode's [`Durability`]: the gate's own script appended the order to its outbox in the
//! step that took the stock, so the order is durable once the gate accepted it, and nothing is
//! left to do before the answer. A worker's drain (`drain.rs`) stores it later. The embedded
//! counterpart, which does its work here, is [`GroupCommit`](super::GroupCommit).

use crate::domain::Order;
use crate::sale::{Durability, PersistError};
use crate::store::Persisted;
use async_trait::async_trait;

/// Orders the gate appended to its outbox: durable already, in the database once a worker has
/// drained them.
pub struct Outboxed;

#[async_trait]
impl Durability for Outboxed {
    async fn persist(&self, _order: &Order) -> Result<Persisted, PersistError> {
        Ok(Persisted::Inserted)
    }

    /// A minute: far longer than a working drain takes, short enough that an id nobody sold
    /// soon reads as unknown.
    fn in_flight_for_ms(&self) -> i64 {
        60_000
    }
}
