//! The sale service: the rules of buying, paying and cancelling, written once over the
//! [`Store`] and [`StockGate`] traits so they hold for every backend. The HTTP layer calls this
//! and nothing below it.

mod admin;
mod buy;
mod catalog;
mod orders;
mod reconcile;

pub use admin::{AdminError, NewProductInput, ProductChanges};
pub use buy::BuyError;
pub use orders::OrderError;
pub use reconcile::ProductAudit;

use crate::clock::SharedClock;
use crate::domain::{Millis, Product, ProductId, SaleWindow};
use crate::gate::{GateProduct, StockGate};
use crate::ids::Snowflake;
use crate::pipeline::GroupCommit;
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

/// Buying, paying, cancelling and the operator's changes, for one process.
pub struct SaleService {
    store: Arc<dyn Store>,
    gate: Arc<dyn StockGate>,
    orders: GroupCommit,
    ids: Snowflake,
    clock: SharedClock,
    /// Products this process knows, with their local sold-out flags: the filter that keeps
    /// unknown ids and sold-out products away from the gate.
    catalog: Catalog,
    settings: SaleSettings,
    /// Serializes preheats, so a product is loaded into the gate once, never reloaded over
    /// buys already in flight.
    preheat_lock: tokio::sync::Mutex<()>,
}

impl SaleService {
    /// Builds the service and rebuilds the gate from the database: every product whose sale
    /// is due is loaded with the database's stock and holdings, the source of truth.
    pub async fn start(
        store: Arc<dyn Store>,
        gate: Arc<dyn StockGate>,
        orders: GroupCommit,
        ids: Snowflake,
        clock: SharedClock,
        settings: SaleSettings,
    ) -> anyhow::Result<Arc<Self>> {
        let service = Arc::new(Self {
            catalog: Catalog::default(),
            store,
            gate,
            orders,
            ids,
            clock,
            settings,
            preheat_lock: tokio::sync::Mutex::new(()),
        });
        service.refresh_catalog().await?;
        service.preheat_due().await?;
        Ok(service)
    }

    /// Reads the products again from the database, so products another process created or
    /// changed are sold here too. Run by the ticker.
    pub async fn refresh_catalog(&self) -> anyhow::Result<()> {
        for product in self.store.products().await? {
            self.catalog.put(&product);
        }
        Ok(())
    }

    /// Products that may have orders in the gate's outbox: every product whose preheat time
    /// has come.
    pub fn products_started(&self) -> Vec<ProductId> {
        self.catalog.started(self.now(), self.settings.preheat_ms)
    }

    /// Units the gate sold whose orders are not in the database yet: the database's stock
    /// minus the gate's units left, over every product in the gate. Zero once the pipeline has
    /// drained (and a cancel has returned its units to both).
    pub async fn units_in_flight(&self) -> anyhow::Result<i64> {
        let mut total = 0;
        for id in self.products_started() {
            if let (Some(left), Some(product)) = (
                self.gate.remaining(id).await?,
                self.store.product(id).await?,
            ) {
                total += product.stock - left;
            }
        }
        Ok(total)
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
        for id in self.catalog.due_for_preheat(now, self.settings.preheat_ms) {
            if let Some(product) = self.store.product(id).await? {
                self.preheat(&product).await?;
            }
        }
        Ok(())
    }

    async fn preheat(&self, product: &Product) -> anyhow::Result<()> {
        let holdings = self.store.holdings(product.id).await?;
        self.gate
            .load(GateProduct {
                id: product.id,
                window: product.window,
                remaining: product.stock,
                per_user_limit: product.per_user_limit,
                holdings,
            })
            .await?;
        self.catalog.mark_loaded(product.id, product.stock == 0);
        tracing::info!(product = product.id.0, stock = product.stock, "preheated");
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
