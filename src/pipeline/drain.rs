//! The outbox drain (cluster mode): takes accepted orders from the gate's outbox streams in
//! batches and hands each batch to a [`Sink`] — the database itself when there is no RabbitMQ,
//! or the relay that publishes to RabbitMQ. An entry is acknowledged only once its sink says it
//! is safe, so a worker killed at any point loses nothing: its unfinished entries stay pending
//! and another reader claims them. The sink must be idempotent, since a claimed entry may have
//! reached it already.

use crate::domain::{Order, ProductId};
use crate::gate::outbox::{OutboxEntry, OutboxReader};
use crate::sale::SaleService;
use crate::store::{Persisted, Store};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What became of one order handed to a sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Safe downstream (stored, or confirmed by the broker): the entry may go.
    Safe,
    /// Can never be made safe, for this reason: set aside for an operator.
    Dead(String),
}

/// Where drained orders go.
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    /// Makes each order of a batch safe, or says why it never can be. An error leaves the whole
    /// batch pending, to be tried again.
    async fn put(&self, orders: &[Order]) -> anyhow::Result<Vec<Fate>>;
}

/// Stores orders straight into the database (no RabbitMQ): idempotent inserts with guarded
/// stock decrements, one transaction per batch.
pub struct StoreSink(pub Arc<dyn Store>);

#[async_trait]
impl Sink for StoreSink {
    async fn put(&self, orders: &[Order]) -> anyhow::Result<Vec<Fate>> {
        let outcomes = self.0.insert_orders(orders).await?;
        Ok(outcomes.into_iter().map(fate_of_insert).collect())
    }
}

/// An insert outcome as a fate: a duplicate is a redelivery of an order already stored.
pub fn fate_of_insert(outcome: Persisted) -> Fate {
    match outcome {
        Persisted::Inserted | Persisted::Duplicate => Fate::Safe,
        Persisted::OutOfStock => Fate::Dead("the database has no stock left for it".into()),
    }
}

/// How often stalled entries (pending under a reader for longer than the claim time) are
/// looked for.
const CLAIM_EVERY: Duration = Duration::from_secs(1);
/// Pause after a round that found nothing, doubling up to [`IDLE_MAX`] while the outbox stays
/// empty, so an idle worker costs Redis little and a busy one never waits.
const IDLE_MIN: Duration = Duration::from_millis(2);
const IDLE_MAX: Duration = Duration::from_millis(100);

/// The drain loop of one worker process.
pub struct Drain {
    pub reader: OutboxReader,
    /// Knows which products may have outboxes.
    pub sale: Arc<SaleService>,
    pub sink: Arc<dyn Sink>,
    pub max_batch: usize,
}

impl Drain {
    /// Drains until `stop` turns true; the batch in hand is finished first.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut idle = IDLE_MIN;
        let mut last_claim: Option<Instant> = None;
        while !*stop.borrow() {
            let claim = last_claim.is_none_or(|at| at.elapsed() >= CLAIM_EVERY);
            if claim {
                last_claim = Some(Instant::now());
            }
            let pause = match self.round(claim).await {
                Ok(0) => {
                    idle = (idle * 2).min(IDLE_MAX);
                    idle
                }
                Ok(_) => {
                    idle = IDLE_MIN;
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = ?e, "draining the outbox");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One pass over every product's outbox. Returns the entries handled.
    async fn round(&self, claim: bool) -> anyhow::Result<usize> {
        let mut handled = 0;
        for product in self.sale.products_started() {
            let mut entries = Vec::new();
            if claim {
                entries = self.reader.claim_stalled(product, self.max_batch).await?;
            }
            if entries.is_empty() {
                entries = self.reader.take(product, self.max_batch).await?;
            }
            handled += entries.len();
            self.deliver(product, entries).await?;
        }
        Ok(handled)
    }

    async fn deliver(&self, product: ProductId, entries: Vec<OutboxEntry>) -> anyhow::Result<()> {
        let mut readable = Vec::with_capacity(entries.len());
        for entry in entries {
            match &entry.order {
                Ok(_) => readable.push(entry),
                Err(e) => {
                    tracing::error!(entry = entry.id, error = %e, "unreadable outbox entry");
                    self.reader.bury(product, &entry, &e.to_string()).await?;
                }
            }
        }
        if readable.is_empty() {
            return Ok(());
        }
        let orders: Vec<Order> = readable
            .iter()
            .filter_map(|entry| entry.order.as_ref().ok().cloned())
            .collect();
        let fates = self.sink.put(&orders).await?;
        let mut safe = Vec::with_capacity(readable.len());
        for (entry, fate) in readable.iter().zip(fates) {
            match fate {
                Fate::Safe => safe.push(entry.id.as_str()),
                Fate::Dead(reason) => {
                    tracing::error!(
                        entry = entry.id,
                        reason,
                        "an accepted order cannot be stored"
                    );
                    self.reader.bury(product, entry, &reason).await?;
                }
            }
        }
        self.reader.finish(product, &safe).await
    }
}
