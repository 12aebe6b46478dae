//! The sale service: the rules of buying, paying and cancelling, written once over the
//! [`Store`] and [`StockGate`] traits so they hold for every backend. The HTTP layer calls this
//! and nothing below it.

mod accepted;
mod admin;
mod backoff;
mod buy;
mod catalog;
mod controls;
mod durability;
mod fleet;
mod guard;
mod idempotency;
mod orders;
mod overview;
mod payments;
mod reconcile;
mod refunds;

pub use admin::{AdminError, NewProductInput, ProductChanges};
pub use buy::{BuyCounts, BuyError};
pub use controls::Controlled;
pub use durability::{Durability, PersistError};
pub use fleet::{Accepted, AcceptedShares, Fleet, SharedBuys};
pub use orders::{OrderError, PaymentQueue, QueuedPayment};
pub use overview::{BuysFrom, Overview, ProductOverview, QueueDepth};
pub use payments::{PayLink, Settled};
pub use reconcile::ProductAudit;
pub use refunds::{OrderRecord, Refund};

use crate::clock::SharedClock;
use crate::domain::{
    IdempotencyKey, Millis, Order, OrderId, Product, ProductId, SaleWindow, UserId,
};
use crate::gate::{GateError, GateProduct, StockGate};
use crate::ids::Snowflake;
use crate::payment::PaymentProvider;
use crate::store::Store;
use catalog::Catalog;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Settings the sale rules depend on.
#[derive(Debug, Clone)]
pub struct SaleSettings {
    /// How long a buyer has to pay.
    pub payment_window_ms: i64,
    /// How long before its start a product is loaded into the gate.
    pub preheat_ms: i64,
    /// Units per user, for products that do not set their own limit.
    pub default_per_user_limit: u32,
}

/// What the sale rules work through; the deployment mode chooses each part.
pub struct SaleParts {
    pub store: Arc<dyn Store>,
    pub gate: Arc<dyn StockGate>,
    pub durability: Arc<dyn Durability>,
    /// Where a payment for an order still on its way to the database waits, when the
    /// deployment has such a queue; without one such a payment is refused as pending.
    pub payments: Option<Arc<dyn PaymentQueue>>,
    /// Who takes the money; without one, paying is refused (`payments_not_configured`).
    pub provider: Option<Arc<dyn PaymentProvider>>,
    /// The cluster's other servers and its queues, for the dashboard; none for a process alone.
    pub fleet: Option<Arc<dyn Fleet>>,
    pub ids: Snowflake,
    pub clock: SharedClock,
}

/// A product the gate lost is not loaded again yet: the live servers have not all shared the
/// units they accepted since Redis lost its data (see `accepted.rs`). Not a failure: the
/// product stays closed and the next try (a buy, or the ticker's next second) loads it.
#[derive(Debug, thiserror::Error)]
#[error("the gate is being rebuilt: waiting until every server has shared what it accepted")]
pub struct RebuildWaits;

/// Buying, paying, cancelling and the operator's changes, for one process.
pub struct SaleService {
    store: Arc<dyn Store>,
    gate: Arc<dyn StockGate>,
    durability: Arc<dyn Durability>,
    ids: Snowflake,
    clock: SharedClock,
    /// Products this process knows, with their local sold-out flags: the filter that keeps
    /// unknown ids and sold-out products away from the gate.
    catalog: Catalog,
    settings: SaleSettings,
    /// Serializes preheats, so a product is loaded into the gate once, never reloaded over
    /// buys already in flight.
    preheat_lock: tokio::sync::Mutex<()>,
    payments: Option<Arc<dyn PaymentQueue>>,
    provider: Option<Arc<dyn PaymentProvider>>,
    /// Buys by outcome since the process started.
    tally: buy::BuyTally,
    /// Keyed buys on their way, which retries answered with their orders wait for.
    in_flight: idempotency::InFlight,
    fleet: Option<Arc<dyn Fleet>>,
    /// The dashboard's latest reading.
    readings: overview::Readings,
    /// Refunds the provider did not take, waiting before they are asked again.
    refund_backoff: backoff::Backoff,
    /// When this process started: every order it makes has an id made since.
    started_at: Millis,
    /// Units of each product this process accepted, shared with the fleet: what a Redis that
    /// lost its data can be checked against.
    accepted: accepted::AcceptedUnits,
}

impl SaleService {
    /// Builds the service and rebuilds the gate from the database: every product whose sale
    /// is due is loaded with the database's stock and holdings, the source of truth.
    pub async fn start(parts: SaleParts, settings: SaleSettings) -> anyhow::Result<Arc<Self>> {
        let started_at = parts.clock.now_ms();
        let service = Arc::new(Self {
            catalog: Catalog::default(),
            store: parts.store,
            gate: parts.gate,
            durability: parts.durability,
            ids: parts.ids,
            clock: parts.clock,
            settings,
            preheat_lock: tokio::sync::Mutex::new(()),
            payments: parts.payments,
            provider: parts.provider,
            tally: buy::BuyTally::default(),
            in_flight: idempotency::InFlight::default(),
            fleet: parts.fleet,
            readings: overview::Readings::default(),
            refund_backoff: backoff::Backoff::default(),
            started_at,
            accepted: accepted::AcceptedUnits::default(),
        });
        service.refresh_catalog().await?;
        service.preheat_due().await?;
        Ok(service)
    }

    /// Reads the sale events and products again from the database, so those another process
    /// created or changed are sold and shown here too. Run by the ticker.
    pub async fn refresh_catalog(&self) -> anyhow::Result<()> {
        for event in self.store.events().await? {
            self.catalog.put_event(event);
        }
        for product in self.store.products().await? {
            self.catalog.put(&product);
        }
        Ok(())
    }

    /// Lifts the local sold-out flag of products that have units again in the gate: a cancel
    /// in another process (the scheduler's sweep, a worker's deadline) returned them.
    pub async fn refresh_sold_out(&self) {
        for id in self.catalog.flagged_sold_out() {
            self.lift_sold_out_if_stocked(id).await;
        }
    }

    /// Every product this process knows.
    pub fn product_ids(&self) -> Vec<ProductId> {
        self.catalog.ids()
    }

    /// Units the gate sold whose orders are not in the database yet: the database's stock
    /// minus the gate's units left, over every product in the gate. Zero once the pipeline has
    /// drained (and a cancel has returned its units to both).
    pub async fn units_in_flight(&self) -> anyhow::Result<i64> {
        let mut total = 0;
        for id in self.product_ids() {
            if let Some(product) = self.store.product(id).await? {
                total += self.units_in_flight_of(&product).await?;
            }
        }
        Ok(total)
    }

    /// [`units_in_flight`](Self::units_in_flight) for one product as the database last showed
    /// it: zero when the gate does not hold it.
    async fn units_in_flight_of(&self, product: &Product) -> anyhow::Result<i64> {
        Ok(match self.gate.remaining(product.id).await? {
            Some(left) => product.stock - left,
            None => 0,
        })
    }

    /// The current time, as the service sees it.
    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// Loads into the gate every known product whose sale starts within the preheat lead and
    /// has not ended. Run at start-up and by the ticker every second.
    pub async fn preheat_due(&self) -> anyhow::Result<()> {
        let _serialized = self.preheat_lock.lock().await;
        let now = self.now();
        // A product whose rebuild waits holds up none of the others; the wait is reported after.
        let mut waiting = None;
        for id in self.catalog.due_for_preheat(now, self.settings.preheat_ms) {
            match self.preheat(id).await {
                Err(e) if e.is::<RebuildWaits>() => waiting = Some(e),
                done => done?,
            }
        }
        waiting.map_or(Ok(()), Err)
    }

    /// Loads a product into the gate (unless another process was first) from the database and
    /// the orders still in the outbox. The order of the reads matters: every race it leaves
    /// open can only make the gate sell less, never more.
    async fn preheat(&self, id: ProductId) -> anyhow::Result<()> {
        // 1. Sold by the gate, maybe not stored yet. Nothing is added while the product is not
        //    in the gate; entries only leave, once stored.
        let outbox = self.gate.outbox(id).await?;
        // 2. Which of those are stored: one stored after this read is subtracted twice below.
        let ids: Vec<OrderId> = outbox.iter().map(|order| order.id).collect();
        let stored: HashSet<OrderId> = self.store.stored_among(&ids).await?.into_iter().collect();
        // 3. After the gate lost the product, the units the live servers accepted that are
        //    neither stored nor in the outbox: on their way through a queue, or lost with
        //    Redis. Read before the stock: one stored in between is subtracted twice.
        let unaccounted = if self.catalog.is_lost(id) {
            let unstored: Vec<Order> = outbox
                .iter()
                .filter(|order| !stored.contains(&order.id))
                .cloned()
                .collect();
            let Some(units) = self.unaccounted(id, &unstored).await? else {
                return Err(RebuildWaits.into());
            };
            if units > 0 {
                tracing::warn!(
                    product = id.0,
                    units,
                    "the gate lost its data: units accepted but neither stored nor in the \
                     outbox are kept off sale"
                );
            }
            units
        } else {
            0
        };
        // 4. Stock and holdings.
        let Some(product) = self.store.product(id).await? else {
            return Ok(());
        };
        let mut holdings: HashMap<UserId, u32> =
            self.store.holdings(id).await?.into_iter().collect();
        // 5. Cancelled orders, after the stock: a cancel in between counts as not returned
        //    yet, and its release is then ignored.
        let released = self.store.cancelled_orders(id).await?;
        // 6. Orders whose idempotency keys are live, so their retries are answered with them.
        let since = self.now() - IdempotencyKey::LIFETIME_MS;
        let mut kept = self.store.keyed_orders(id, since).await?;
        let mut remaining = product.stock - unaccounted;
        for order in outbox
            .into_iter()
            .filter(|order| !stored.contains(&order.id))
        {
            remaining -= i64::from(order.quantity.get());
            *holdings.entry(order.user_id).or_default() += order.quantity.get();
            if order.idempotency_key.is_some() && order.created_at > since {
                kept.push(order);
            }
        }
        let remaining = remaining.max(0);
        let loaded_now = self
            .gate
            .load(GateProduct {
                id,
                window: product.window,
                paused: product.is_paused(),
                remaining,
                per_user_limit: product.per_user_limit,
                holdings: holdings.into_iter().collect(),
                released,
                kept,
            })
            .await?;
        // Loaded by another process first: its count is the live one, sold out or not.
        let sold_out = if loaded_now {
            tracing::info!(product = id.0, remaining, "preheated");
            self.catch_up(&product).await?;
            remaining == 0
        } else {
            matches!(self.gate.remaining(id).await, Ok(Some(0)))
        };
        self.catalog.mark_loaded(id, sold_out);
        Ok(())
    }

    /// Gives a product just loaded into the gate what an operator changed since `loaded` was
    /// read: that change found the product not in the gate yet and reached only the database.
    /// (A change after the load reaches the gate itself.)
    async fn catch_up(&self, loaded: &Product) -> anyhow::Result<()> {
        let Some(product) = self.store.product(loaded.id).await? else {
            return Ok(());
        };
        if (product.window, product.per_user_limit) != (loaded.window, loaded.per_user_limit) {
            let configured = self
                .gate
                .configure(product.id, product.window, product.per_user_limit)
                .await;
            unless_not_loaded(configured)?;
        }
        if product.is_paused() != loaded.is_paused() {
            unless_not_loaded(self.gate.set_paused(product.id, product.is_paused()).await)?;
        }
        self.catalog.put(&product);
        Ok(())
    }

    /// Units of `product` left to sell right now: the gate's live count once preheated, the
    /// database's before.
    pub async fn remaining(&self, product: &Product) -> i64 {
        match self.gate.remaining(product.id).await {
            Ok(Some(units)) => units,
            _ => product.stock,
        }
    }

    /// Whether `window` is due for preheat at `now`.
    fn is_due(window: &SaleWindow, now: Millis, preheat_ms: i64) -> bool {
        window.start - preheat_ms <= now && now < window.end
    }
}

/// The outcome of a change to a product in the gate, which need not hold the product: one it
/// does not hold gets the change from the database when it is loaded.
fn unless_not_loaded(changed: Result<(), GateError>) -> anyhow::Result<()> {
    match changed {
        Ok(()) | Err(GateError::Rejected(_)) => Ok(()),
        Err(GateError::Unavailable(e)) => Err(e),
    }
}
