//! Durable state: users, sale events, products and orders. [`Store`] is the one interface the
//! rest of the system sees, and [`open`] the one place that picks its implementation:
//!
//! - [`sqlite`]: the embedded file, with the orders' hot path through SQLite's own API and
//!   group fsync of the log;
//! - [`server`]: PostgreSQL or MySQL/MariaDB through sqlx;
//! - [`sql`]: what both share (statement text, dialect spellings, row decoding, migrations),
//!   knowing neither. Neither store imports the other.
//!
//! Every change that can race is a single conditional statement (`… WHERE status =
//! 'awaiting_payment'`, `… AND stock >= ?`) whose affected-row count decides who won, never a
//! read followed by a write.

pub mod server;
pub mod sql;
pub mod sqlite;
mod url;

use crate::domain::{
    Guard, IdempotencyKey, Image, ImageId, Millis, Money, Order, OrderId, OrderStatus, Product,
    ProductId, SaleEvent, SaleWindow, StockBuckets, UserId, Username,
};
use async_trait::async_trait;
use sql::Dialect;
use std::sync::Arc;
pub use url::DatabaseUrl;

/// Opens the database `url` names, SQLite file or database server, with at most
/// `max_connections` (a per-backend default when `None`), and brings its schema up to date.
pub async fn open(
    url: &DatabaseUrl,
    max_connections: Option<u32>,
) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match url.dialect() {
        Dialect::Sqlite => {
            Arc::new(sqlite::SqliteStore::open(url.as_str(), max_connections).await?)
        }
        Dialect::Postgres | Dialect::MySql => {
            Arc::new(server::ServerStore::connect(url, max_connections).await?)
        }
    })
}

/// A database failure. Always the server's problem, never the client's.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Through sqlx: every statement on a database server; on SQLite, all but the orders'.
    #[error("database: {0}")]
    Sql(#[from] sqlx::Error),
    /// Through SQLite's own API: order batches, payments, cancels and reads of orders (see
    /// [`sqlite`]).
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A failure shared by every change of one batch (SQLite's payments and cancels).
    #[error(transparent)]
    Shared(std::sync::Arc<StoreError>),
}

/// Shorthand for store results.
pub type StoreResult<T> = Result<T, StoreError>;

/// A stored account, as needed to check a sign-in.
#[derive(Debug, Clone)]
pub struct UserRecord {
    pub id: UserId,
    pub username: String,
    pub password_hash: String,
    /// When an operator disabled the account; `None` while it is enabled.
    pub disabled_at: Option<Millis>,
}

/// An account as the operator sees it: no password hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAccount {
    pub id: UserId,
    pub username: String,
    pub created_at: Millis,
    /// When an operator disabled the account; `None` while it is enabled.
    pub disabled_at: Option<Millis>,
}

/// The accounts an operator looks for: newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserSearch<'a> {
    /// Only names that begin with this (names are lower case); every account when `None`.
    pub name_prefix: Option<&'a str>,
    /// At most this many.
    pub limit: i64,
}

/// An account's tokens issued at or before `cut_at` are refused: the account was disabled
/// then. Every server holds the cut-offs in memory, as it holds the ended sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserCutoff {
    pub user: UserId,
    pub cut_at: Millis,
    /// When the last token issued by `cut_at` expires: after that the cut-off is of no use.
    pub expires_at: Millis,
}

/// A product to create.
#[derive(Debug, Clone)]
pub struct NewProduct {
    pub event_id: Option<i64>,
    pub name: String,
    pub image_url: String,
    pub original_price: Money,
    pub sale_price: Money,
    pub stock: i64,
    pub per_user_limit: u32,
    pub buckets: StockBuckets,
    pub window: SaleWindow,
}

/// Changes to a product; `None` keeps the current value. Stock changes go through
/// [`Store::add_stock`] so they can never race with sales.
#[derive(Debug, Clone, Default)]
pub struct ProductPatch {
    pub name: Option<String>,
    pub image_url: Option<String>,
    pub original_price: Option<Money>,
    pub sale_price: Option<Money>,
    pub per_user_limit: Option<u32>,
    /// Applied only while the product is not in the gate (`gate_loaded_at` unset), or when it
    /// is the count the product has: otherwise nothing of the patch is.
    pub buckets: Option<StockBuckets>,
    pub window: Option<SaleWindow>,
}

/// What happened to one order of a committed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persisted {
    /// Written now, and the product's stock decremented.
    Inserted,
    /// Already written earlier (a redelivery): nothing changed.
    Duplicate,
    /// The database has no stock left for it: not written. Means the gate and the database
    /// disagree, which the gate's rebuild-from-database rule prevents.
    OutOfStock,
    /// Placed with an idempotency key that another of its buyer's orders holds within the key's
    /// lifetime: not written. The gate could not see that order (it was for another product,
    /// or the gate lost its state); the caller refuses the order if its buyer has not been
    /// answered yet, or stores it without the key.
    KeyTaken,
}

/// An order awaiting payment whose window has closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overdue {
    pub id: OrderId,
    /// A pay URL was made for it: the buyer may have paid, so the provider is asked before the
    /// order is cancelled.
    pub pay_started: bool,
}

/// The orders an operator looks for: every filter is optional. Newest first by id, which a
/// Snowflake id allows: it begins with the millisecond the order was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderSearch {
    pub user: Option<UserId>,
    pub product: Option<ProductId>,
    pub status: Option<OrderStatus>,
    /// Only orders with a smaller id: the next page after one that ended with this order.
    pub before: Option<OrderId>,
    /// At most this many.
    pub limit: i64,
}

/// A payment provider's word that was accepted (verified, and matching its order), kept for
/// audit. A paid one for an order that ends up cancelled is also a refund still to make.
#[derive(Debug, Clone, Copy)]
pub struct PaymentRecord<'a> {
    /// Unique per word: a notification's `notify_id` (the same on each of its retries), or
    /// `query:` and the trade number for a trade found paid by asking.
    pub key: &'a str,
    pub order: OrderId,
    pub provider: &'a str,
    pub trade_no: &'a str,
    pub amount: Money,
    pub trade_status: &'a str,
    /// Whether the trade's status means the money arrived.
    pub paid: bool,
    pub received_at: Millis,
}

/// A provider's accepted word about an order, as kept (see [`PaymentRecord`]), read back for
/// the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptPayment {
    pub provider: String,
    pub trade_no: String,
    pub amount: Money,
    pub trade_status: String,
    /// Whether the trade's status means the money arrived.
    pub paid: bool,
    pub received_at: Millis,
}

/// One operator's change, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Who: "admin", or the admin token's fingerprint.
    pub actor: String,
    /// What: a short description naming the ids changed.
    pub action: String,
    /// When.
    pub at: Millis,
}

/// The answer of a pay call made with an idempotency key, kept so a retry gets the same pay URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayAnswer {
    pub user: UserId,
    pub key: IdempotencyKey,
    /// What was asked: this order, through this channel (`page` or `wap`).
    pub order: OrderId,
    pub channel: String,
    pub pay_url: String,
    pub created_at: Millis,
}

/// A session ended before its token expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedSession {
    /// The session's id, as its token carries it.
    pub session_id: String,
    /// When the token would have expired anyway: after that the entry is of no use.
    pub expires_at: Millis,
}

/// Durable storage for every backend.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// How many of this binary's migrations the database lacks, in one round trip: the
    /// readiness check's question, reachable and up to date (0).
    async fn missing_migrations(&self) -> StoreResult<usize>;
    /// A generated value kept across restarts: stores `proposed` under `key` unless a value is
    /// already there, and returns the value that is.
    async fn setting_or_insert(&self, key: &str, proposed: &str) -> StoreResult<String>;
    /// The value kept under `key`, if any: for values too costly to propose on every start
    /// (a generated key pair).
    async fn setting(&self, key: &str) -> StoreResult<Option<String>>;

    /// Creates an account; `None` when the username is taken.
    async fn create_user(
        &self,
        username: &Username,
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<UserId>>;
    /// Creates many accounts sharing one password hash in one transaction (bulk imports, the
    /// load generator's crowd); `None` for each name that is taken.
    async fn create_users(
        &self,
        usernames: &[Username],
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Vec<Option<UserId>>>;
    /// The account with this name.
    async fn user_by_name(&self, username: &str) -> StoreResult<Option<UserRecord>>;
    /// The account with this id.
    async fn user(&self, id: UserId) -> StoreResult<Option<UserAccount>>;
    /// The accounts an operator looks for, newest first.
    async fn search_users(&self, search: &UserSearch<'_>) -> StoreResult<Vec<UserAccount>>;
    /// Disables an account at `cutoff.cut_at` and, in the same transaction, records the cut-off
    /// of its tokens (`cutoff.user` is the account). An account disabled already keeps its
    /// time and gets no new cut-off. The account as it is now and whether this call disabled
    /// it; `None` when there is no such account.
    async fn disable_user(&self, cutoff: &UserCutoff) -> StoreResult<Option<(UserAccount, bool)>>;
    /// Enables an account again; its tokens cut off stay refused. The account as it is now
    /// and whether this call enabled it; `None` when there is no such account.
    async fn enable_user(&self, id: UserId) -> StoreResult<Option<(UserAccount, bool)>>;

    /// Creates a sale event.
    async fn create_event(
        &self,
        title: &str,
        window: SaleWindow,
        guard: Guard,
        now: Millis,
    ) -> StoreResult<SaleEvent>;
    /// All sale events, by start time.
    async fn events(&self) -> StoreResult<Vec<SaleEvent>>;
    /// One sale event.
    async fn event(&self, id: i64) -> StoreResult<Option<SaleEvent>>;
    /// Ends a sale event at `now` (see [`Store::end_product`]) and, in the same transaction,
    /// each of its products whose sale has not ended; `None` when there is no such event.
    async fn end_event(&self, id: i64, now: Millis) -> StoreResult<Option<SaleEvent>>;
    /// Sets a sale event's guard; the event as it is now, `None` when there is no such event.
    async fn set_event_guard(&self, id: i64, guard: Guard) -> StoreResult<Option<SaleEvent>>;

    /// Creates a product.
    async fn create_product(&self, product: &NewProduct, now: Millis) -> StoreResult<Product>;
    /// Applies a patch, unless it would change the buckets of a product in the gate (see
    /// [`ProductPatch::buckets`]); the product as it is now, `None` when there is no such
    /// product.
    async fn update_product(
        &self,
        id: ProductId,
        patch: &ProductPatch,
        now: Millis,
    ) -> StoreResult<Option<Product>>;
    /// Puts `quantity` more units on sale; `None` when there is no such product.
    async fn add_stock(
        &self,
        id: ProductId,
        quantity: i64,
        now: Millis,
    ) -> StoreResult<Option<Product>>;
    /// Pauses buying of a product (a repeat keeps the first pause's time) or resumes it; `None`
    /// when there is no such product.
    async fn set_paused(
        &self,
        id: ProductId,
        paused: bool,
        now: Millis,
    ) -> StoreResult<Option<Product>>;
    /// Records that a product is being loaded into the stock gate for the first time (a later
    /// call keeps the first time); done before the load, so a gate without a product marked so
    /// has lost it.
    async fn mark_gate_loaded(&self, id: ProductId, now: Millis) -> StoreResult<()>;
    /// Ends a product's sale at `now` unless it has ended already: its window ends at `now`, and
    /// a start not reached yet moves to just before `now`. `None` when there is no such product.
    async fn end_product(&self, id: ProductId, now: Millis) -> StoreResult<Option<Product>>;
    /// One product.
    async fn product(&self, id: ProductId) -> StoreResult<Option<Product>>;
    /// All products, by sale start then id.
    async fn products(&self) -> StoreResult<Vec<Product>>;
    /// Units each buyer holds in orders that are not cancelled, to rebuild the gate's
    /// per-user counts.
    async fn holdings(&self, product: ProductId) -> StoreResult<Vec<(UserId, u32)>>;

    /// Writes a batch of new orders in one transaction: each is inserted idempotently and takes
    /// its quantity from the product's stock with a guarded decrement.
    async fn insert_orders(&self, orders: &[Order]) -> StoreResult<Vec<Persisted>>;
    /// One order.
    async fn order(&self, id: OrderId) -> StoreResult<Option<Order>>;
    /// A user's orders, newest first.
    async fn orders_of_user(&self, user: UserId) -> StoreResult<Vec<Order>>;
    /// The orders an operator looks for, newest first.
    async fn search_orders(&self, search: &OrderSearch) -> StoreResult<Vec<Order>>;
    /// awaiting_payment → paid, if the order awaits payment and its window is open at `now`.
    /// True when this call paid it.
    async fn mark_paid(&self, id: OrderId, now: Millis) -> StoreResult<bool>;
    /// awaiting_payment → cancelled, returning the stock to the product in the same
    /// transaction. The order when this call cancelled it, `None` otherwise.
    async fn cancel_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>>;
    /// paid → cancelled, for an operator's refund, returning the stock to the product in the
    /// same transaction; the money is then due back (see [`Store::refunds_due`]). The order
    /// when this call cancelled it, `None` otherwise.
    async fn cancel_paid_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>>;
    /// Orders awaiting payment whose window closed before `now`, oldest deadline first.
    async fn overdue_orders(&self, now: Millis, limit: i64) -> StoreResult<Vec<Overdue>>;
    /// Notes that a pay URL was made for an order awaiting payment (the first time counts).
    async fn mark_pay_started(&self, id: OrderId, now: Millis) -> StoreResult<()>;
    /// Keeps a provider's accepted word; false when a word with its key is already kept.
    async fn record_payment(&self, record: &PaymentRecord<'_>) -> StoreResult<bool>;
    /// The provider's words kept for an order, oldest first, at most `limit`.
    async fn payments_of(&self, order: OrderId, limit: i64) -> StoreResult<Vec<KeptPayment>>;
    /// Cancelled orders for which the provider's word says money arrived, not yet refunded:
    /// at most `limit` of those with ids above `after`, lowest id first, so a caller pages
    /// through them all.
    async fn refunds_due(&self, after: OrderId, limit: i64) -> StoreResult<Vec<OrderId>>;
    /// cancelled → refunded. True when this call recorded the refund.
    async fn mark_refunded(&self, id: OrderId, now: Millis) -> StoreResult<bool>;
    /// A product's cancelled orders: a rebuilt gate must not take their stock back again.
    async fn cancelled_orders(&self, product: ProductId) -> StoreResult<Vec<OrderId>>;
    /// Units of `product` in orders that are paid (not cancelled since), for the console's
    /// dashboard.
    async fn paid_units(&self, product: ProductId) -> StoreResult<i64>;
    /// Which of `candidates` are stored.
    async fn stored_among(&self, candidates: &[OrderId]) -> StoreResult<Vec<OrderId>>;
    /// A product's orders placed with an idempotency key after `since`: a gate rebuilt from
    /// the database answers their retries too.
    async fn keyed_orders(&self, product: ProductId, since: Millis) -> StoreResult<Vec<Order>>;

    /// The kept answer of `user`'s pay call with `key`, if any.
    async fn pay_answer(
        &self,
        user: UserId,
        key: &IdempotencyKey,
    ) -> StoreResult<Option<PayAnswer>>;
    /// Keeps a pay call's answer unless one is kept for its user and key already (a retry that
    /// ran alongside): read it back to answer with the one kept.
    async fn keep_pay_answer(&self, answer: &PayAnswer) -> StoreResult<()>;
    /// Drops the pay answers made before `before`, whose keys' lifetime has passed; how many.
    async fn forget_pay_answers(&self, before: Millis) -> StoreResult<u64>;

    /// Keeps an operator's change in the audit log.
    async fn record_audit(&self, entry: &AuditEntry) -> StoreResult<()>;
    /// The latest `limit` entries of the audit log, newest first.
    async fn audit_log(&self, limit: i64) -> StoreResult<Vec<AuditEntry>>;

    /// Ends a session before its token expires, for every server (once per session id).
    async fn revoke_session(&self, revoked: &RevokedSession, now: Millis) -> StoreResult<()>;
    /// Up to `limit` sessions ended after position `after` of the list, each with its
    /// position, in order: a server reads from the last position it saw.
    async fn revoked_sessions(
        &self,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<(i64, RevokedSession)>>;
    /// Drops ended sessions and cut-offs whose tokens have expired by `now` anyway; how many.
    async fn forget_revoked_sessions(&self, now: Millis) -> StoreResult<u64>;
    /// Up to `limit` cut-offs recorded after position `after` of their list, each with its
    /// position, in order: read as [`Store::revoked_sessions`] is.
    async fn user_cutoffs(&self, after: i64, limit: i64) -> StoreResult<Vec<(i64, UserCutoff)>>;
    /// Keeps an uploaded image under its id. False when an image with that id (so the same
    /// bytes) is kept already: nothing changes.
    async fn put_image(&self, image: &Image, now: Millis) -> StoreResult<bool>;
    /// The image kept under `id`.
    async fn image(&self, id: ImageId) -> StoreResult<Option<Image>>;
    /// The ids of kept images, at most `limit`: how a server learns which images exist, so it
    /// can turn unknown ids away without asking the database for each.
    async fn image_ids(&self, limit: i64) -> StoreResult<Vec<ImageId>>;
}
