//! The buy path. Every request that cannot buy is turned away as early and cheaply as possible:
//! unknown product → local sold-out flag → the gate's atomic step → made durable. Rate limits
//! and the session check happen before this, in the HTTP layer. A buy with an idempotency key
//! takes the same path, with what a retry needs on the way (see `idempotency.rs`).

use super::answered::RecentAnswers;
use super::catalog::Entry;
use super::{Answered, AnswersToShare, PersistError, RebuildWaits, SaleService};
use crate::domain::{
    IdempotencyKey, Millis, Order, OrderId, OrderStatus, Product, ProductId, Quantity, UserId,
};
use crate::gate::{GateError, Rejection, Reserved};
use crate::store::Persisted;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Why a buy did not produce an order.
#[derive(Debug, thiserror::Error)]
pub enum BuyError {
    #[error("no such product")]
    UnknownProduct,
    #[error(transparent)]
    Rejected(#[from] Rejection),
    #[error("the order could not be made durable: {0}")]
    Unavailable(#[source] anyhow::Error),
    /// The gate took the units (or found the order a retry asks for), but the Redis replicas
    /// did not acknowledge it in time: the order may or may not survive a failover, so the buy
    /// is not answered as bought. A retry with the same idempotency key tells which.
    #[error("the order was taken but the Redis replicas did not acknowledge it in time")]
    Unconfirmed,
}

impl From<GateError> for BuyError {
    fn from(e: GateError) -> Self {
        match e {
            GateError::Rejected(rejection) => Self::Rejected(rejection),
            GateError::Unavailable(e) => Self::Unavailable(e),
            GateError::Unconfirmed { .. } => Self::Unconfirmed,
        }
    }
}

/// What a buy gave its buyer.
#[derive(Debug)]
pub(super) enum Bought {
    /// A new order.
    New(Order),
    /// A retry of a buy made with the same idempotency key: that buy's order, as it is now.
    Replayed(Order),
}

impl SaleService {
    /// The product a buy of `id` would take to the stock gate: `None` when this process
    /// answers such a buy by itself, the product being unknown here or flagged sold out (see
    /// [`Self::buy`]). Only buys that reach the gate cost the other servers anything.
    pub fn gate_bound(&self, id: ProductId) -> Option<Arc<Product>> {
        let entry = self.catalog.get(id)?;
        if entry.sold_out.load(Ordering::SeqCst) {
            return None;
        }
        self.catalog.row(id)
    }

    /// Refuses at once, as sold out, an unkeyed buy of `id` when this process has flagged the
    /// product sold out, whoever buys (the sale page shows it to anybody), and counts it as
    /// [`Self::buy`] counts its refusals. `Ok` when the buy must go on.
    pub fn refuse_sold_out(&self, id: ProductId) -> Result<(), BuyError> {
        let flagged = self.catalog.get(id);
        if !flagged.is_some_and(|entry| entry.sold_out.load(Ordering::SeqCst)) {
            return Ok(());
        }
        self.tally.count(Outcome::SoldOut);
        Err(Rejection::SoldOut { remaining: 0 }.into())
    }

    /// Buys `quantity` units of `product_id` for `user`. Returns the order once it is durable
    /// (see [`Durability`](super::Durability)), so an answered buy survives a crash. With
    /// `key`, a retry (the same key, product and quantity, within the key's lifetime) returns
    /// the first buy's order as it is now, and the key sent for another buy is refused
    /// ([`Rejection::KeyReused`]).
    pub async fn buy(
        self: &Arc<Self>,
        user: UserId,
        product_id: ProductId,
        quantity: Quantity,
        key: Option<IdempotencyKey>,
    ) -> Result<Order, BuyError> {
        let bought = self.buy_once(user, product_id, quantity, key).await;
        if let (Ok(Bought::New(order)), Some(accepted)) = (&bought, &self.accepted) {
            accepted.add(order);
        }
        self.tally.count(Outcome::of(&bought));
        bought.map(|(Bought::New(order) | Bought::Replayed(order))| order)
    }

    /// The buy itself, uncounted.
    async fn buy_once(
        self: &Arc<Self>,
        user: UserId,
        product_id: ProductId,
        quantity: Quantity,
        key: Option<IdempotencyKey>,
    ) -> Result<Bought, BuyError> {
        let entry = self
            .catalog
            .get(product_id)
            .ok_or(BuyError::UnknownProduct)?;
        let sold_out = entry.sold_out.load(Ordering::SeqCst);
        if sold_out && key.is_none() {
            return Err(Rejection::SoldOut { remaining: 0 }.into());
        }
        let now = self.now();
        let order = Order {
            id: OrderId(self.ids.next_id()),
            user_id: user,
            product_id,
            product_name: String::from(&*entry.name),
            unit_price: entry.sale_price,
            quantity,
            total: entry.sale_price.times(quantity.get()),
            status: OrderStatus::AwaitingPayment,
            created_at: now,
            pay_before: now + self.settings.payment_window_ms,
            paid_at: None,
            cancelled_at: None,
            pay_started_at: None,
            idempotency_key: key,
        };
        if sold_out {
            return self.kept_or_sold_out(&order).await;
        }
        if order.idempotency_key.is_some() {
            return self.decide_keyed(order, entry, now).await;
        }
        self.decide(order, &entry, now).await
    }

    /// Decides a buy with an idempotency key in a task of its own, so it runs to its end (the
    /// order durable, or the gate's units and key given back) even when its buyer leaves: the
    /// buyer's retry is answered from it (see `idempotency.rs`).
    async fn decide_keyed(
        self: &Arc<Self>,
        order: Order,
        entry: Arc<Entry>,
        now: Millis,
    ) -> Result<Bought, BuyError> {
        let service = Arc::clone(self);
        let decided = tokio::spawn(async move {
            let _deciding = service.in_flight.start(order.id);
            service.decide(order, &entry, now).await
        });
        decided
            .await
            .map_err(|e| BuyError::Unavailable(anyhow::Error::new(e).context("a keyed buy")))?
    }

    /// The gate's step, then the order made durable: everything of a buy that changes state.
    async fn decide(&self, order: Order, entry: &Entry, now: Millis) -> Result<Bought, BuyError> {
        if let Reserved::Replayed(first) = self.reserve(&order, entry, now).await? {
            return self.replayed(first).await.map(Bought::Replayed);
        }
        match self.durability.persist(&order).await {
            Ok(Persisted::Inserted) => Ok(Bought::New(order)),
            Ok(Persisted::Duplicate) => {
                // A fresh id already stored: two processes share a Snowflake node id.
                tracing::error!(order = order.id.0, "order id collision: check node ids");
                self.undo(&order).await;
                Err(BuyError::Unavailable(anyhow::anyhow!("order id collision")))
            }
            Ok(Persisted::OutOfStock) => {
                tracing::error!(
                    product = order.product_id.0,
                    "gate sold what the database does not have"
                );
                self.undo(&order).await;
                Err(Rejection::SoldOut { remaining: 0 }.into())
            }
            Ok(Persisted::KeyTaken) => {
                // The key is another order's (another product's): the database said so before
                // the buyer was answered.
                self.undo(&order).await;
                Err(Rejection::KeyReused.into())
            }
            Err(PersistError::Full) => {
                self.undo(&order).await;
                Err(Rejection::BacklogFull.into())
            }
            Err(PersistError::Failed(e)) => {
                self.undo(&order).await;
                Err(BuyError::Unavailable(e))
            }
        }
    }

    /// Takes back what the gate gave an order that did not become durable: its units, and the
    /// idempotency key it was kept under, so a retry is decided afresh.
    async fn undo(&self, order: &Order) {
        self.give_back(order).await;
        if order.idempotency_key.is_some()
            && let Err(e) = self.gate.drop_key(order).await
        {
            tracing::error!(order = order.id.0, error = %e, "dropping an idempotency key");
        }
    }

    /// The gate's atomic step, mapped to buy errors. A product whose sale is due but which
    /// the gate does not know was lost by the gate (Redis restarted without its data), or not
    /// preheated yet by the scheduler: it is loaded from the database, the source of truth
    /// (unless another process was first; the buys that find it missing together share one
    /// load), and the buy tried once more. A product the gate lost stays closed (the buy is
    /// unavailable) until the orders that were on their way to the database are accounted for
    /// (see `accepted.rs`).
    async fn reserve(
        &self,
        order: &Order,
        entry: &Entry,
        now: Millis,
    ) -> Result<Reserved, BuyError> {
        let mut result = self.gate.reserve(order, now).await;
        if matches!(result, Err(GateError::Rejected(Rejection::NotLoaded)))
            && Self::is_due(&entry.window, now, self.settings.preheat_ms)
        {
            self.preheat_after_miss(order.product_id)
                .await
                .map_err(BuyError::Unavailable)?;
            result = self.gate.reserve(order, now).await;
        }
        match result {
            Ok(reserved) => Ok(reserved),
            Err(GateError::Rejected(Rejection::NotLoaded))
                if self.catalog.is_lost(order.product_id) =>
            {
                Err(BuyError::Unavailable(RebuildWaits.into()))
            }
            // Still missing: a sale not open yet, or over, says so; a live one is being loaded
            // by a rebuild this buy shared (which may have failed, and is tried again by the
            // next buy or the ticker), so the buyer is told to retry.
            Err(GateError::Rejected(Rejection::NotLoaded)) => Err(if now >= entry.window.end {
                Rejection::Ended.into()
            } else if now < entry.window.start {
                Rejection::NotStarted.into()
            } else {
                BuyError::Unavailable(RebuildWaits.into())
            }),
            Err(GateError::Unconfirmed { taken: true }) => {
                // Its order may stand and reach the database: counted as accepted, so a gate
                // rebuilt after Redis lost its data never sells its units again.
                if let Some(accepted) = &self.accepted {
                    accepted.add_unconfirmed(order);
                }
                Err(BuyError::Unconfirmed)
            }
            Err(GateError::Rejected(rejection)) => {
                if rejection == (Rejection::SoldOut { remaining: 0 }) {
                    self.flag_sold_out(order.product_id).await;
                }
                Err(rejection.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Sets the local sold-out flag, then looks at the gate once more: a cancel that returned
    /// stock between the gate's answer and the flag clears it here, so a product is never
    /// left flagged while it has stock.
    async fn flag_sold_out(&self, product_id: ProductId) {
        let Some(entry) = self.catalog.get(product_id) else {
            return;
        };
        entry.sold_out.store(true, Ordering::SeqCst);
        self.lift_sold_out_if_stocked(product_id).await;
    }

    /// Lifts the local sold-out flag of products that have units again in the gate: a cancel
    /// in another process (the scheduler's sweep, a worker's deadline) returned them.
    pub async fn refresh_sold_out(&self) {
        for id in self.catalog.flagged_sold_out() {
            self.lift_sold_out_if_stocked(id).await;
        }
    }

    /// Clears a product's sold-out flag when the gate holds units of it again.
    pub(super) async fn lift_sold_out_if_stocked(&self, product_id: ProductId) {
        if let Ok(Some(units)) = self.gate.remaining(product_id).await
            && units > 0
        {
            self.catalog.restock(product_id);
        }
    }

    /// Returns an order's units to the gate and lifts the sold-out flag.
    pub(super) async fn give_back(&self, order: &Order) {
        let released = self.gate.release(order).await;
        match released {
            Ok(()) | Err(GateError::Rejected(Rejection::NotLoaded)) => {}
            Err(e) => {
                tracing::error!(order = order.id.0, error = %e, "returning stock to the gate")
            }
        }
        self.catalog.restock(order.product_id);
    }
}

/// How a buy ended, one per `outcome` label of `seckill_buys_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Accepted,
    UnknownProduct,
    SoldOut,
    LimitReached,
    NotStarted,
    Ended,
    Paused,
    Unavailable,
    /// A retry, answered with the order its idempotency key made.
    Replayed,
    /// An idempotency key sent again for another buy.
    KeyReused,
    /// Refused because too many accepted orders wait to be stored.
    BacklogFull,
    /// Taken, but not acknowledged by the Redis replicas in time.
    Unconfirmed,
    /// The buyer's bucket ran dry while units moved to it.
    Refilling,
}

impl Outcome {
    /// Every outcome, in the order of the tally's slots.
    const ALL: [Self; 13] = [
        Self::Accepted,
        Self::UnknownProduct,
        Self::SoldOut,
        Self::LimitReached,
        Self::NotStarted,
        Self::Ended,
        Self::Paused,
        Self::Unavailable,
        Self::Replayed,
        Self::KeyReused,
        Self::BacklogFull,
        Self::Unconfirmed,
        Self::Refilling,
    ];

    fn of(bought: &Result<Bought, BuyError>) -> Self {
        match bought {
            Ok(Bought::New(_)) => Self::Accepted,
            Ok(Bought::Replayed(_)) => Self::Replayed,
            Err(BuyError::UnknownProduct) => Self::UnknownProduct,
            Err(BuyError::Rejected(Rejection::SoldOut { .. })) => Self::SoldOut,
            Err(BuyError::Rejected(Rejection::LimitReached)) => Self::LimitReached,
            Err(BuyError::Rejected(Rejection::NotLoaded | Rejection::NotStarted)) => {
                Self::NotStarted
            }
            Err(BuyError::Rejected(Rejection::Ended)) => Self::Ended,
            Err(BuyError::Rejected(Rejection::Paused)) => Self::Paused,
            Err(BuyError::Rejected(Rejection::KeyReused)) => Self::KeyReused,
            Err(BuyError::Rejected(Rejection::BacklogFull)) => Self::BacklogFull,
            Err(BuyError::Rejected(Rejection::Refilling)) => Self::Refilling,
            Err(BuyError::Unavailable(_)) => Self::Unavailable,
            Err(BuyError::Unconfirmed) => Self::Unconfirmed,
        }
    }

    /// The label value, as `/metrics` and the dashboard name it.
    fn label(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::UnknownProduct => "unknown_product",
            Self::SoldOut => "sold_out",
            Self::LimitReached => "limit_reached",
            Self::NotStarted => "not_started",
            Self::Ended => "ended",
            Self::Paused => "paused",
            Self::Unavailable => "unavailable",
            Self::Replayed => "replayed",
            Self::KeyReused => "key_reused",
            Self::BacklogFull => "backlog_full",
            Self::Unconfirmed => "unconfirmed",
            Self::Refilling => "refilling",
        }
    }

    /// Its counter of `seckill_buys_total` in the installed recorder. One literal key per
    /// outcome: the recorder finds it without building a label.
    fn counter(self) -> metrics::Counter {
        match self {
            Self::Accepted => metrics::counter!("seckill_buys_total", "outcome" => "accepted"),
            Self::UnknownProduct => {
                metrics::counter!("seckill_buys_total", "outcome" => "unknown_product")
            }
            Self::SoldOut => metrics::counter!("seckill_buys_total", "outcome" => "sold_out"),
            Self::LimitReached => {
                metrics::counter!("seckill_buys_total", "outcome" => "limit_reached")
            }
            Self::NotStarted => metrics::counter!("seckill_buys_total", "outcome" => "not_started"),
            Self::Ended => metrics::counter!("seckill_buys_total", "outcome" => "ended"),
            Self::Paused => metrics::counter!("seckill_buys_total", "outcome" => "paused"),
            Self::Unavailable => {
                metrics::counter!("seckill_buys_total", "outcome" => "unavailable")
            }
            Self::Replayed => metrics::counter!("seckill_buys_total", "outcome" => "replayed"),
            Self::KeyReused => {
                metrics::counter!("seckill_buys_total", "outcome" => "key_reused")
            }
            Self::BacklogFull => {
                metrics::counter!("seckill_buys_total", "outcome" => "backlog_full")
            }
            Self::Unconfirmed => {
                metrics::counter!("seckill_buys_total", "outcome" => "unconfirmed")
            }
            Self::Refilling => metrics::counter!("seckill_buys_total", "outcome" => "refilling"),
        }
    }
}

/// This process's buys by outcome since it started, for the console's dashboard, which needs
/// them without a metrics recorder installed.
#[derive(Debug, Default)]
pub(super) struct BuyTally {
    /// This process's buys, by outcome.
    counts: [AtomicU64; Outcome::ALL.len()],
    /// The counters of `seckill_buys_total`, by outcome, found in the recorder at the first buy
    /// (the recorder is installed before any request is served) and kept: the buy path does
    /// not look them up.
    counters: OnceLock<[metrics::Counter; Outcome::ALL.len()]>,
}

impl BuyTally {
    /// Counts a buy under its outcome, here and in `seckill_buys_total`.
    fn count(&self, outcome: Outcome) {
        self.counts[outcome as usize].fetch_add(1, Ordering::Relaxed);
        let counters = self
            .counters
            .get_or_init(|| Outcome::ALL.map(Outcome::counter));
        counters[outcome as usize].increment(1);
    }
}

/// Buys by outcome since the process started: `(outcome, count)`, accepted first.
pub type BuyCounts = Vec<(&'static str, u64)>;

impl SaleService {
    /// This process's buys by outcome since it started (the `outcome` labels of
    /// `seckill_buys_total`), so the dashboard can show buys per second and refusals by reason.
    pub fn buy_counts(&self) -> BuyCounts {
        Outcome::ALL
            .iter()
            .map(|&o| {
                (
                    o.label(),
                    self.tally.counts[o as usize].load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

/// Units this process accepted, by product, since it started, and the orders it answered `202`
/// lately (see `answered.rs`), under one lock.
#[derive(Debug, Default)]
pub(super) struct AcceptedUnits(std::sync::Mutex<Accepts>);

/// What [`AcceptedUnits`] holds.
#[derive(Debug, Default)]
struct Accepts {
    /// Units, by product.
    units: HashMap<ProductId, i64>,
    /// The latest orders answered `202`.
    answered: RecentAnswers,
}

impl Accepts {
    /// Counts `order`'s units.
    fn count(&mut self, order: &Order) {
        *self.units.entry(order.product_id).or_default() += i64::from(order.quantity.get());
    }
}

impl AcceptedUnits {
    /// Counts an order the gate accepted and its buyer is answered `202` for, and records it.
    pub fn add(&self, order: &Order) {
        let mut accepts = self.0.lock().expect("accepted units lock poisoned");
        accepts.count(order);
        accepts.answered.record(Answered::of(order));
    }

    /// Counts an order the gate took whose buyer was not told it stands (`503 unconfirmed`):
    /// it may still reach the database, so its units count, but it is no answered order.
    pub fn add_unconfirmed(&self, order: &Order) {
        self.0
            .lock()
            .expect("accepted units lock poisoned")
            .count(order);
    }

    /// The units counted so far, by product, to share.
    pub(super) fn snapshot(&self) -> Vec<(ProductId, i64)> {
        let accepts = self.0.lock().expect("accepted units lock poisoned");
        accepts
            .units
            .iter()
            .map(|(id, units)| (*id, *units))
            .collect()
    }

    /// At most `most` orders answered `202` the fleet does not have yet, as of `now` (see
    /// [`RecentAnswers::unshared`]).
    pub(super) fn answers_to_share(&self, now: Millis, most: usize) -> AnswersToShare {
        let mut accepts = self.0.lock().expect("accepted units lock poisoned");
        accepts.answered.unshared(now, most)
    }

    /// What became of a share of answers up to `to` (see [`RecentAnswers::shared`]).
    pub(super) fn answers_shared(&self, to: u64, followed: bool) {
        let mut accepts = self.0.lock().expect("accepted units lock poisoned");
        accepts.answered.shared(to, followed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_outcome_has_its_own_slot_in_order() {
        for (slot, outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*outcome as usize, slot);
        }
        let labels: HashSet<_> = Outcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels.len(), Outcome::ALL.len());
    }

    /// `counter` writes each label as a literal (see its comment): each outcome must count
    /// under the label `label` gives it, which the dashboard and `/metrics` share, and the
    /// tally's kept counters must be those of the recorder.
    #[test]
    fn every_outcome_counts_under_its_own_label() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let tally = BuyTally::default();
        for (times, outcome) in (1..).zip(Outcome::ALL) {
            metrics::with_local_recorder(&recorder, || {
                for _ in 0..times {
                    tally.count(outcome);
                }
            });
        }
        let text = handle.render();
        for (times, outcome) in (1..).zip(Outcome::ALL) {
            let line = format!(
                "seckill_buys_total{{outcome=\"{}\"}} {times}",
                outcome.label()
            );
            assert!(
                text.lines().any(|l| l == line),
                "{outcome:?} not counted as {line:?} in:\n{text}"
            );
        }
    }
}
