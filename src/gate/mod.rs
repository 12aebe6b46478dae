//! The stock gate: the one place that decides, atomically, whether a buy may proceed. It holds
//! each preheated product's remaining units, sale window, whether an operator paused it,
//! per-user limit, who holds how many units, and the orders placed with an idempotency key, so
//! a retry is answered with its order in the same atomic step that would otherwise sell again.
//! It is a fast cache of the database, never the source of truth: at start-up (and after any
//! sign of loss) it is rebuilt from the database.

pub mod memory;
pub mod redis;

use crate::domain::{Millis, Order, OrderId, ProductId, SaleWindow, StockBuckets, UserId};
use async_trait::async_trait;

/// Everything the gate needs to sell a product.
#[derive(Debug, Clone)]
pub struct GateProduct {
    pub id: ProductId,
    pub window: SaleWindow,
    /// An operator paused buying: every buy is refused until they resume it.
    pub paused: bool,
    /// Units left to sell.
    pub remaining: i64,
    pub per_user_limit: u32,
    /// How many parts a shared gate splits the stock into, each on its own shard; an
    /// in-process gate decides the whole stock in one place and ignores it.
    pub buckets: StockBuckets,
    /// Units each buyer already holds in orders that are not cancelled.
    pub holdings: Vec<(UserId, u32)>,
    /// Cancelled orders, whose stock is in `remaining` already: releasing one of them again
    /// (a cancel that raced the load) must change nothing.
    pub released: Vec<OrderId>,
    /// Orders placed with an idempotency key whose lifetime has not passed: their retries are
    /// answered with them.
    pub kept: Vec<Order>,
}

/// What the gate made of a buy it did not refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// The units are taken and the order recorded; this many are left.
    Taken { remaining: i64 },
    /// A retry: the buyer sent this buy's idempotency key before, for the same product and
    /// quantity, within the key's lifetime. Nothing was taken; this is the order the first buy
    /// made, as the gate keeps it.
    Replayed(Order),
}

/// A product as the gate sees it. `remaining + in_flight_units` must equal the database's
/// stock: the units the gate sold whose orders the database does not have yet are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateAudit {
    pub remaining: i64,
    /// Units of the orders in the outbox: sold, not in the database yet.
    pub in_flight_units: i64,
    /// Orders in the outbox, the outbox's depth.
    pub in_flight_orders: u64,
    /// Outbox entries no worker could store, set aside for an operator.
    pub dead: u64,
}

impl GateAudit {
    /// The database's stock minus what the gate accounts for. Positive: the gate lost units
    /// and undersells. Negative: the gate would sell units the database does not have.
    pub fn drift(&self, database_stock: i64) -> i64 {
        database_stock - self.remaining - self.in_flight_units
    }
}

/// Why the gate turned a buy away. Each maps to one API error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The product is not in the gate yet: it is not preheated, so its sale has not started.
    #[error("the product is not on sale yet")]
    NotLoaded,
    #[error("the sale has not started")]
    NotStarted,
    #[error("the sale has ended")]
    Ended,
    /// An operator paused buying of the product.
    #[error("buying is paused")]
    Paused,
    #[error("the buyer already holds the most units allowed")]
    LimitReached,
    /// Fewer units left than asked for; `remaining == 0` means sold out for everybody.
    #[error("not enough stock left")]
    SoldOut { remaining: i64 },
    /// The buyer's idempotency key named another buy (another product or quantity) within its
    /// lifetime.
    #[error("the idempotency key was used for another buy")]
    KeyReused,
    /// Too many accepted orders wait to be stored (the product's outbox, or the group commit's
    /// queue, is at its bound) or too many buys wait for the gate: the database or the worker is
    /// behind. Nothing was taken; the buyer may try again shortly.
    #[error("too many orders are waiting to be stored")]
    BacklogFull,
    /// The buyer's bucket of the product's stock ran dry and units are on their way to it from
    /// the others (or were taken by other buyers as they came): not sold out, try again shortly.
    #[error("the stock is being moved to where the buyers are")]
    Refilling,
}

/// The gate's answer to a buy or a failure to reach the gate at all.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(transparent)]
    Rejected(#[from] Rejection),
    #[error("stock gate unavailable: {0}")]
    Unavailable(#[from] anyhow::Error),
    /// The gate took the buy (or found the order a retry asks for) on the Redis master, but
    /// not enough replicas acknowledged it in time (`redis_wait_replicas`): the order may or may
    /// not survive a failover. Never answered as bought.
    #[error("the Redis replicas did not acknowledge the order in time")]
    Unconfirmed {
        /// This call took the units (a new order that may stand), rather than finding the
        /// order of an earlier buy with the same idempotency key.
        taken: bool,
    },
}

/// The atomic check-and-take at the heart of the buy path.
#[async_trait]
pub trait StockGate: Send + Sync + 'static {
    /// Loads a product unless it is loaded already (another process may have preheated it,
    /// and buys may be running against it). True when this call loaded it.
    async fn load(&self, product: GateProduct) -> Result<bool, GateError>;

    /// Changes a loaded product's window and limit without touching its stock or buyers.
    async fn configure(
        &self,
        id: ProductId,
        window: SaleWindow,
        per_user_limit: u32,
    ) -> Result<(), GateError>;

    /// Pauses (`paused`) or resumes buying of a loaded product. A buy decided after this
    /// returns sees it: the pause is in the same atomic state as the stock.
    async fn set_paused(&self, id: ProductId, paused: bool) -> Result<(), GateError>;

    /// One atomic step: sale open at `now`? not paused? buyer under the limit? enough stock? Then take the
    /// units, record the buyer and (for a gate with an outbox, see [`outbox`](Self::outbox))
    /// append the order. An order with an idempotency key is first looked up by its buyer and
    /// key: a live one kept for them is replayed (or refused as [`Rejection::KeyReused`] when
    /// it was for another quantity), whatever the window and the stock say now; else the key
    /// is kept with the order when the units are taken.
    async fn reserve(&self, order: &Order, now: Millis) -> Result<Reserved, GateError>;

    /// The live order kept for `order`'s buyer and idempotency key, deciding nothing: how a
    /// retry is answered where the buy itself is not decided (the product is flagged sold out
    /// in this process) and how a replay checks the first buy still stands.
    async fn kept(&self, order: &Order) -> Result<Option<Order>, GateError>;

    /// Forgets the idempotency key `order` was placed with, after its units were given back
    /// because it never became durable: a retry is then decided afresh.
    async fn drop_key(&self, order: &Order) -> Result<(), GateError>;

    /// Gives an order's units back (it was cancelled, or the database refused it) and lowers
    /// its buyer's count, so they may buy again. Callers release an order once; a gate shared
    /// by processes also ignores repeats.
    async fn release(&self, order: &Order) -> Result<(), GateError>;

    /// Puts more units on sale.
    async fn add_stock(&self, id: ProductId, units: i64) -> Result<(), GateError>;

    /// What the gate holds for a product, to reconcile it with the database; `None` when the
    /// product is not loaded. A gate without an outbox has nothing in flight and nothing set
    /// aside: its units left are all there is.
    async fn audit(&self, id: ProductId) -> Result<Option<GateAudit>, GateError> {
        Ok(self.remaining(id).await?.map(|remaining| GateAudit {
            remaining,
            in_flight_units: 0,
            in_flight_orders: 0,
            dead: 0,
        }))
    }

    /// The orders in a product's outbox: sold by the gate, not stored yet. No order is added
    /// while the product is not loaded, so a load reads this first.
    async fn outbox(&self, _id: ProductId) -> Result<Vec<Order>, GateError> {
        Ok(Vec::new())
    }

    /// Drops a product from the gate, so the next load rebuilds it from the database.
    async fn forget(&self, id: ProductId) -> Result<(), GateError>;

    /// Takes a product whose stock buckets no longer sit evenly on the shards that serve them (a
    /// resharding moved their slots) off sale for a moment, so that the caller loads it again at
    /// once, its buckets spread anew. True when it did; false when the product is spread as it
    /// should be, or another process is loading it. A gate without shards never does.
    async fn respread(&self, _id: ProductId) -> Result<bool, GateError> {
        Ok(false)
    }

    /// Units left, or `None` when the product is not loaded.
    async fn remaining(&self, id: ProductId) -> Result<Option<i64>, GateError>;
}
