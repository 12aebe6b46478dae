//! Loading products into the gate: each one from the database and the outbox shortly before its
//! sale starts (the ticker's preheat), and again when the gate lost it (Redis restarted without
//! its data). Preheats run one at a time, so a product is loaded once, never over buys already
//! in flight; the buys that find their product missing share one rebuild rather than queue for
//! one each.

use super::{SaleParts, SaleService, SaleSettings, unless_not_loaded, unless_rebuild_waits};
use crate::domain::{
    IdempotencyKey, Millis, Order, OrderId, Product, ProductId, SaleWindow, StockBuckets, UserId,
};
use crate::gate::GateProduct;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A product the gate lost is not loaded again yet: the live servers have not all shared the
/// units they accepted since Redis lost its data (see `accepted.rs`). Not a failure: the
/// product stays closed and the next try (a buy, or the ticker's next second) loads it.
#[derive(Debug, thiserror::Error)]
#[error("the gate is being rebuilt: waiting until every server has shared what it accepted")]
pub struct RebuildWaits;

/// The one preheat at a time, and the rebuilds buys started.
#[derive(Default)]
pub(super) struct Preheats {
    turn: tokio::sync::Mutex<()>,
    /// Rebuilds started because a buy found its product missing from the gate.
    after_miss: AtomicU64,
}

impl Preheats {
    /// Waits for this caller's turn to preheat.
    pub(super) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }
}

impl SaleService {
    /// Builds the service and rebuilds the gate from the database: every product whose sale
    /// is due is loaded with the database's stock and holdings, the source of truth. (Here,
    /// beside the preheat it runs, so the files of `sale/` call each other in one direction.)
    pub async fn start(parts: SaleParts, settings: SaleSettings) -> anyhow::Result<Arc<Self>> {
        let service = Arc::new(Self::new(parts, settings));
        service.refresh_catalog().await?;
        unless_rebuild_waits(service.preheat_due().await)?;
        Ok(service)
    }

    /// Loads into the gate every known product whose sale starts within the preheat lead and
    /// has not ended. Run at start-up and by the ticker every second.
    pub async fn preheat_due(&self) -> anyhow::Result<()> {
        let _turn = self.preheats.turn().await;
        self.preheat_due_in_turn().await
    }

    /// [`preheat_due`](Self::preheat_due) for a caller whose turn it is.
    async fn preheat_due_in_turn(&self) -> anyhow::Result<()> {
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

    /// Spreads again the buckets of every selling product of several that a resharding left
    /// uneven on the Redis Cluster's masters: each is taken off sale for a moment and loaded
    /// again from the database (the gate first waits for the worker to store what its outboxes
    /// held). Run by the scheduler leader every few seconds. The number spread again.
    pub async fn respread_uneven(&self) -> anyhow::Result<usize> {
        let mut respread = 0;
        let now = self.now();
        for id in self.catalog.loaded() {
            let selling = |p: &Product| p.buckets != StockBuckets::ONE && now < p.window.end;
            if !self.catalog.row(id).is_some_and(|p| selling(&p)) {
                continue;
            }
            let _turn = self.preheats.turn().await;
            if self.gate.respread(id).await? {
                tracing::info!(product = id.0, "spreading a product's buckets again");
                metrics::counter!("seckill_gate_respreads_total").increment(1);
                self.catalog.mark_unloaded(id);
                self.load(id, false).await?;
                respread += 1;
            }
        }
        Ok(respread)
    }

    /// Loads a product into the gate (unless another process was first), as lost when it was
    /// loaded once (by any server: the mark is written before the load) and is not there now,
    /// so a server started after Redis lost its data knows the product was lost too.
    async fn preheat(&self, id: ProductId) -> anyhow::Result<()> {
        let Some(marked) = self.store.product(id).await? else {
            return Ok(());
        };
        if marked.gate_loaded_at.is_none() {
            self.store.mark_gate_loaded(id, self.now()).await?;
            return self.load(id, false).await;
        }
        let lost = self.gate.remaining(id).await?.is_none();
        if lost {
            self.catalog.mark_lost(id);
        }
        self.load(id, lost).await
    }

    /// Loads a product into the gate (unless another process was first) from the database and
    /// the orders still in the outbox, less, when the gate `lost` it, the units the live
    /// servers accepted that neither holds. The order of the reads matters: every race it
    /// leaves open can only make the gate sell less, never more.
    pub(super) async fn load(&self, id: ProductId, lost: bool) -> anyhow::Result<()> {
        // 1. Sold by the gate, maybe not stored yet. Nothing is added while the product is not
        //    in the gate; entries only leave, once stored.
        let outbox = self.gate.outbox(id).await?;
        // 2. Which of those are stored: one stored after this read is subtracted twice below.
        let ids: Vec<OrderId> = outbox.iter().map(|order| order.id).collect();
        let stored: HashSet<OrderId> = self.store.stored_among(&ids).await?.into_iter().collect();
        // 3. After the gate lost the product, the units the live servers accepted that are
        //    neither stored nor in the outbox: on their way through a queue, or lost with
        //    Redis. Read before the stock: one stored in between is subtracted twice.
        let unaccounted = if lost {
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
                buckets: product.buckets,
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

    /// After a buy found `id` missing from the gate during its sale (Redis lost it, or the
    /// scheduler has not preheated it yet): loads every due product, unless, by the time it is
    /// this buy's turn, a rebuild started by another buy after this one's miss has run (its
    /// outcome stands), or the product is back in the gate. Either way the buy asks the gate
    /// again. So a crowd that finds a product missing waits for one rebuild, not for one each.
    pub(super) async fn preheat_after_miss(&self, id: ProductId) -> anyhow::Result<()> {
        let seen = self.preheats.after_miss.load(Ordering::SeqCst);
        let _turn = self.preheats.turn().await;
        if self.preheats.after_miss.load(Ordering::SeqCst) != seen
            || self.gate.remaining(id).await?.is_some()
        {
            return Ok(());
        }
        self.preheats.after_miss.fetch_add(1, Ordering::SeqCst);
        metrics::counter!("seckill_gate_misses_total").increment(1);
        tracing::warn!(
            product = id.0,
            "the gate does not hold a product on sale: loading it"
        );
        self.catalog.mark_unloaded(id);
        self.preheat_due_in_turn().await
    }

    /// How many times this process loaded its due products because a buy found one missing
    /// from the gate (`seckill_gate_misses_total`): once per product Redis lost, however many
    /// buys found it missing.
    pub fn gate_misses(&self) -> u64 {
        self.preheats.after_miss.load(Ordering::SeqCst)
    }

    /// Whether `window` is due for preheat at `now`.
    pub(super) fn is_due(window: &SaleWindow, now: Millis, preheat_ms: i64) -> bool {
        window.start - preheat_ms <= now && now < window.end
    }
}
