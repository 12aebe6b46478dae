//! The outbox drain (cluster mode): takes accepted orders from the gate's outbox streams in
//! batches and hands each batch to a [`Sink`] — the database itself when there is no RabbitMQ,
//! or the relay that publishes to RabbitMQ. An entry is acknowledged only once its sink says it
//! is safe, so a worker killed at any point loses nothing: its unfinished entries stay pending
//! and another reader claims them. The sink must be idempotent, since a claimed entry may have
//! reached it already.

use crate::domain::{Order, ProductId};
use crate::gate::redis::{Outbox, OutboxEntry};
use crate::sale::SaleService;
use crate::store::{Persisted, Store};
use anyhow::ensure;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What became of one order handed to a sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Handed on safely (stored, or confirmed by the broker).
    Safe,
    /// Can never be stored, for this reason: set aside for an operator.
    Dead(String),
}

/// Where drained orders go.
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    /// Hands on a batch of one product's orders, each with its outbox entry id (`entries[i]`
    /// holds `orders[i]`), and says what became of each, in order. An error leaves the whole
    /// batch pending, to be tried again.
    async fn put(&self, entries: &[String], orders: &[Order]) -> anyhow::Result<Vec<Fate>>;

    /// Acknowledges the entries whose orders [`put`](Self::put) made safe. A sink that stores
    /// them lets their entries go; one that only hands them on leaves them in the outbox,
    /// counted as in flight, until the worker that stores them deletes them.
    async fn acknowledge(
        &self,
        outbox: &Outbox,
        product: ProductId,
        safe: &[&str],
    ) -> anyhow::Result<()>;
}

/// Stores orders straight into the database (no RabbitMQ).
pub struct StoreSink(pub Arc<dyn Store>);

#[async_trait]
impl Sink for StoreSink {
    async fn put(&self, _entries: &[String], orders: &[Order]) -> anyhow::Result<Vec<Fate>> {
        store_batch(&*self.0, orders).await
    }

    async fn acknowledge(
        &self,
        outbox: &Outbox,
        product: ProductId,
        safe: &[&str],
    ) -> anyhow::Result<()> {
        outbox.finish(product, safe).await
    }
}

/// Stores a batch in one transaction (idempotent inserts, guarded stock decrements) and says
/// what became of each order. An order already stored is a redelivery, unless the stored one is
/// a different order under the same id (two processes shared a Snowflake node id): that one can
/// never be stored and is set aside, loudly. An order whose idempotency key another order holds
/// (one the gate could not see: another product's, after Redis lost its claims) was accepted
/// all the same, so it is stored without the key.
pub async fn store_batch(store: &dyn Store, orders: &[Order]) -> anyhow::Result<Vec<Fate>> {
    let mut outcomes = stored(store, orders).await?;
    metrics::histogram!("seckill_order_batch_size", "writer" => "worker")
        .record(orders.len() as f64);
    let taken: Vec<usize> = (0..orders.len())
        .filter(|&i| outcomes[i] == Persisted::KeyTaken)
        .collect();
    if !taken.is_empty() {
        tracing::warn!(
            orders = taken.len(),
            "accepted orders whose idempotency keys other orders hold: stored without them"
        );
        let keyless: Vec<Order> = taken
            .iter()
            .map(|&i| Order {
                idempotency_key: None,
                ..orders[i].clone()
            })
            .collect();
        for (i, outcome) in taken.into_iter().zip(stored(store, &keyless).await?) {
            outcomes[i] = outcome;
        }
    }
    let mut fates = Vec::with_capacity(orders.len());
    for (order, outcome) in orders.iter().zip(outcomes) {
        fates.push(match outcome {
            Persisted::Inserted => Fate::Safe,
            Persisted::Duplicate => match store.order(order.id).await? {
                Some(stored)
                    if stored.user_id == order.user_id
                        && stored.product_id == order.product_id
                        && stored.quantity == order.quantity =>
                {
                    Fate::Safe
                }
                _ => {
                    tracing::error!(order = order.id.0, "order id collision: check node ids");
                    Fate::Dead("another order holds this id: two processes share a node id".into())
                }
            },
            Persisted::OutOfStock => Fate::Dead("the database has no stock left for it".into()),
            Persisted::KeyTaken => Fate::Dead("another order holds its idempotency key".into()),
        });
    }
    Ok(fates)
}

/// [`Store::insert_orders`], checked to say what became of every order.
async fn stored(store: &dyn Store, orders: &[Order]) -> anyhow::Result<Vec<Persisted>> {
    let outcomes = store.insert_orders(orders).await?;
    ensure!(
        outcomes.len() == orders.len(),
        "the store answered {} outcomes for {} orders",
        outcomes.len(),
        orders.len()
    );
    Ok(outcomes)
}

/// How often stalled entries (pending under a reader for longer than the claim time) are
/// looked for.
const CLAIM_EVERY: Duration = Duration::from_secs(1);
/// Pause after a round that found nothing, doubling up to [`IDLE_MAX`] while the outbox stays
/// empty, so an idle worker costs Redis little and a busy one never waits.
const IDLE_MIN: Duration = Duration::from_millis(2);
const IDLE_MAX: Duration = Duration::from_millis(100);

/// One drain loop. A worker runs several (see [`Drain::LOOPS`]) over the same outbox.
#[derive(Clone)]
pub struct Drain {
    pub outbox: Outbox,
    /// Knows which products may have outboxes.
    pub sale: Arc<SaleService>,
    pub sink: Arc<dyn Sink>,
    pub max_batch: usize,
}

impl Drain {
    /// Drain loops per worker process. A single loop leaves the database idle while it reads
    /// the next batch from Redis and acknowledges the last one, and Redis idle while the
    /// database commits; with two, one batch is read while the other is stored. The loops read
    /// new entries under the same consumer name, and a consumer group hands each new entry to
    /// one read only, so they never share an entry.
    pub const LOOPS: usize = 2;

    /// Drains until `stop` turns true (or its sender is gone); the batch in hand is finished
    /// first.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut idle = IDLE_MIN;
        let mut last_claim: Option<Instant> = None;
        while !*stop.borrow() {
            let claim = last_claim.is_none_or(|at| at.elapsed() >= CLAIM_EVERY);
            if claim {
                last_claim = Some(Instant::now());
            }
            if self.round(claim).await > 0 {
                idle = IDLE_MIN;
                continue;
            }
            idle = (idle * 2).min(IDLE_MAX);
            tokio::select! {
                () = tokio::time::sleep(idle) => {}
                changed = stop.changed() => if changed.is_err() { return },
            }
        }
    }

    /// One pass over every product's outbox. Returns the entries handled. A product that fails
    /// is logged and retried next round; the others go on.
    async fn round(&self, claim: bool) -> usize {
        let mut handled = 0;
        for product in self.sale.product_ids() {
            match self.drain_product(product, claim).await {
                Ok(n) => handled += n,
                Err(e) => tracing::error!(product = product.0, error = ?e, "draining the outbox"),
            }
        }
        handled
    }

    async fn drain_product(&self, product: ProductId, claim: bool) -> anyhow::Result<usize> {
        let mut entries = Vec::new();
        if claim {
            entries = self.outbox.claim_stalled(product, self.max_batch).await?;
        }
        if entries.is_empty() {
            entries = self.outbox.take(product, self.max_batch).await?;
        }
        let handled = entries.len();
        if handled > 0 {
            self.deliver(product, entries).await?;
        }
        Ok(handled)
    }

    async fn deliver(&self, product: ProductId, entries: Vec<OutboxEntry>) -> anyhow::Result<()> {
        // The readable entries, split into columns: the sink takes the orders as one slice.
        let mut ids = Vec::with_capacity(entries.len());
        let mut raws = Vec::with_capacity(entries.len());
        let mut orders = Vec::with_capacity(entries.len());
        for entry in entries {
            match entry.order {
                Ok(order) => {
                    ids.push(entry.id);
                    raws.push(entry.raw);
                    orders.push(order);
                }
                Err(e) => {
                    tracing::error!(entry = entry.id, error = %e, "unreadable outbox entry");
                    let reason = e.to_string();
                    self.outbox
                        .bury(product, &entry.id, &entry.raw, &reason)
                        .await?;
                }
            }
        }
        if orders.is_empty() {
            return Ok(());
        }
        let fates = self.sink.put(&ids, &orders).await?;
        ensure!(
            fates.len() == orders.len(),
            "the sink lost track of its batch"
        );
        let mut safe = Vec::with_capacity(orders.len());
        for ((id, raw), fate) in ids.iter().zip(&raws).zip(fates) {
            match fate {
                Fate::Safe => safe.push(id.as_str()),
                Fate::Dead(reason) => {
                    tracing::error!(entry = id, reason, "an accepted order cannot be stored");
                    self.outbox.bury(product, id, raw, &reason).await?;
                }
            }
        }
        self.sink.acknowledge(&self.outbox, product, &safe).await
    }
}
