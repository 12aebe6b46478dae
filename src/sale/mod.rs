//! The sale service: the rules of buying, paying and cancelling, written once over the
//! [`Store`] and [`StockGate`] traits so they hold for every backend. The HTTP layer calls this
//! and nothing below it.

mod accepted;
mod accounts;
mod admin;
mod answered;
mod audit;
mod backoff;
mod buy;
mod cancels;
mod catalog;
mod controls;
mod durability;
mod fleet;
mod guard;
mod idempotency;
mod orders;
mod overview;
mod payments;
mod preheat;
mod reconcile;
mod refunds;

pub use admin::{AdminError, NewEventInput, NewProductInput, ProductChanges};
pub use answered::{HELD as ANSWERS_HELD, KEPT_FOR_MS as ANSWERS_KEPT_FOR_MS};
pub use buy::{BuyCounts, BuyError};
pub use controls::Controlled;
pub use durability::{Durability, PersistError};
pub use fleet::{
    Accepted, AcceptedShares, Answered, AnswersShared, AnswersToShare, Fleet, SharedBuys,
};
pub use orders::{OrderError, PaymentQueue, QueuedPayment};
pub use overview::{BuysFrom, Overview, ProductOverview, QueueDepth};
pub use payments::{PayLink, Settled};
pub use preheat::RebuildWaits;
pub use reconcile::ProductAudit;
pub use refunds::{OrderRecord, Refund};

use crate::clock::SharedClock;
use crate::domain::{Millis, Product, ProductId};
use crate::gate::{GateError, StockGate};
use crate::ids::Snowflake;
use crate::payment::PaymentProvider;
use crate::store::Store;
use catalog::Catalog;
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
    /// The database, the source of truth: products, orders, payments, the audit log.
    pub store: Arc<dyn Store>,
    /// Where a buy is decided in one atomic step: in this process, or in Redis for every server.
    pub gate: Arc<dyn StockGate>,
    /// How an order the gate accepted becomes durable before its buyer is answered: a group
    /// commit into the database, or nothing more once the gate's outbox holds it.
    pub durability: Arc<dyn Durability>,
    /// Where a payment for an order still on its way to the database waits, when the
    /// deployment has such a queue; without one such a payment is refused as pending.
    pub payments: Option<Arc<dyn PaymentQueue>>,
    /// Who takes the money; without one, paying is refused (`payments_not_configured`).
    pub provider: Option<Arc<dyn PaymentProvider>>,
    /// The cluster's other servers and its queues, for the dashboard and the accepted units a
    /// Redis that lost its data is checked against; none for a process alone.
    pub fleet: Option<Arc<dyn Fleet>>,
    /// Makes the order ids, unique across the processes that share a database.
    pub ids: Snowflake,
    /// The time every rule reads: a manual clock in tests.
    pub clock: SharedClock,
}

/// Buying, paying, cancelling and the operator's changes, for one process. Built by
/// [`SaleService::start`] (`preheat.rs`); its methods are spread over the files of `sale/` by
/// domain, each file calling only files it does not depend back on (`tests/sale_calls.rs`).
pub struct SaleService {
    /// See [`SaleParts::store`].
    store: Arc<dyn Store>,
    /// See [`SaleParts::gate`].
    gate: Arc<dyn StockGate>,
    /// See [`SaleParts::durability`].
    durability: Arc<dyn Durability>,
    /// See [`SaleParts::ids`].
    ids: Snowflake,
    /// See [`SaleParts::clock`].
    clock: SharedClock,
    /// Products this process knows, with their local sold-out flags: the filter that keeps
    /// unknown ids and sold-out products away from the gate.
    catalog: Catalog,
    /// The payment window, the preheat lead and the default per-user limit.
    settings: SaleSettings,
    /// Preheats one at a time, shared by the buys that find their product missing.
    preheats: preheat::Preheats,
    /// See [`SaleParts::payments`].
    payments: Option<Arc<dyn PaymentQueue>>,
    /// See [`SaleParts::provider`].
    provider: Option<Arc<dyn PaymentProvider>>,
    /// Buys by outcome since the process started, for the dashboard (which must not need a
    /// metrics recorder).
    tally: buy::BuyTally,
    /// Keyed buys on their way, which retries answered with their orders wait for.
    in_flight: idempotency::InFlight,
    /// See [`SaleParts::fleet`].
    fleet: Option<Arc<dyn Fleet>>,
    /// The dashboard's latest reading, shared by whoever asks within its second.
    readings: overview::Readings,
    /// Refunds the provider did not take, waiting before they are asked again.
    refund_backoff: backoff::Backoff,
    /// When this process started: every order it makes has an id made since, which is how its
    /// accepted units are told apart from an earlier run's under the same node id.
    started_at: Millis,
    /// Units of each product this process accepted, shared with the fleet: what a Redis that
    /// lost its data can be checked against. Only with a fleet (cluster mode): a process alone
    /// makes each order durable before it answers.
    accepted: Option<buy::AcceptedUnits>,
}

impl SaleService {
    /// The service over `parts`, knowing no product yet: [`SaleService::start`] (`preheat.rs`)
    /// reads the catalog and rebuilds the gate.
    fn new(parts: SaleParts, settings: SaleSettings) -> Self {
        let started_at = parts.clock.now_ms();
        let accepted = parts.fleet.as_ref().map(|_| buy::AcceptedUnits::default());
        Self {
            catalog: Catalog::default(),
            store: parts.store,
            gate: parts.gate,
            durability: parts.durability,
            ids: parts.ids,
            clock: parts.clock,
            settings,
            preheats: preheat::Preheats::default(),
            payments: parts.payments,
            provider: parts.provider,
            tally: buy::BuyTally::default(),
            in_flight: idempotency::InFlight::default(),
            fleet: parts.fleet,
            readings: overview::Readings::default(),
            refund_backoff: backoff::Backoff::default(),
            started_at,
            accepted,
        }
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

    /// Units of `product` left to sell right now: the gate's live count once preheated, the
    /// database's before.
    pub async fn remaining(&self, product: &Product) -> i64 {
        match self.gate.remaining(product.id).await {
            Ok(Some(units)) => units,
            _ => product.stock,
        }
    }
}

/// A preheat's outcome, where a product whose rebuild waits is no failure: it stays closed, and
/// a buy or the ticker's next second loads it.
fn unless_rebuild_waits(preheated: anyhow::Result<()>) -> anyhow::Result<()> {
    match preheated {
        Err(e) if e.is::<RebuildWaits>() => Ok(()),
        outcome => outcome,
    }
}

/// The outcome of a change to a product in the gate, which need not hold the product: one it
/// does not hold gets the change from the database when it is loaded.
fn unless_not_loaded(changed: Result<(), GateError>) -> anyhow::Result<()> {
    match changed {
        // A change the replicas did not acknowledge is made (and logged by the gate).
        Ok(()) | Err(GateError::Rejected(_) | GateError::Unconfirmed { .. }) => Ok(()),
        Err(GateError::Unavailable(e)) => Err(e),
    }
}
