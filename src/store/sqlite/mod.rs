//! The embedded [`Store`]: one SQLite file, which this process alone writes.
//!
//! Two drivers share the file. The orders' hot path (batches of new orders, payments, cancels,
//! reads of an order or of a user's orders) goes through SQLite's own API on the caller's
//! thread ([`orders`], [`reads`]): sqlx runs each SQLite connection on a thread of its own, and
//! handing every statement over to it and the answer back costs more than SQLite's work. The
//! rest (migrations, settings, accounts, sale events, products, the scans of orders) goes
//! through sqlx, with the statements the database servers run too ([`Tables`]).
//!
//! Every writer commits without syncing the log and then waits in [`WalFlush`] for a sync that
//! began after its commit: one fsync covers many commits, and none is made under the write
//! lock. Writers take turns at the file's one write lock by holding the sqlx writer's single
//! connection.

mod orders;
mod private_file;
mod reads;
mod status_batches;
mod wal_flush;

use orders::SqliteOrders;
use reads::SqliteReads;
use status_batches::{StatusBatches, StatusChange};
use wal_flush::WalFlush;

use super::sql::{self, Dialect, Tables};
use super::{
    AuditEntry, KeptPayment, NewProduct, OrderSearch, Overdue, PayAnswer, PaymentRecord, Persisted,
    ProductPatch, RevokedSession, Store, StoreResult, UserAccount, UserCutoff, UserRecord,
    UserSearch,
};
use crate::domain::{
    Guard, IdempotencyKey, Image, ImageId, Millis, Order, OrderId, Product, ProductId, SaleEvent,
    SaleWindow, UserId, Username,
};
use anyhow::Context;
use async_trait::async_trait;
use sqlx::Executor;
use sqlx::any::AnyPoolOptions;
use sqlx::sqlite::SqliteConnectOptions;
use std::str::FromStr;
use tokio::runtime::RuntimeFlavor;

/// Statements run on every new sqlx connection: WAL so readers never block the writer, and
/// `synchronous=FULL` so anything committed survives power loss, which is the promise behind
/// a `202`. (The writers sync on their own terms: see [`writer_options`].)
const SESSION_SETUP: &[&str] = &[
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    "PRAGMA busy_timeout = 10000",
];

/// sqlx connections for reads when the configuration names no number: the file has one
/// writer anyway.
const POOL_SIZE: u32 = 8;

/// The SQLite [`Store`].
pub struct SqliteStore {
    /// Everything but the orders' hot path, through sqlx. Its writer is one connection that is
    /// never shared: the file has a single writer anyway, and a connection that alone writes
    /// keeps its page cache and prepared statements warm, where writers taking turns on pooled
    /// connections would each re-read the pages the previous one changed. [`SqliteOrders`]
    /// holds that connection while it writes, so the two drivers take turns at the file's
    /// write lock.
    tables: Tables,
    /// The writers commit without syncing the log; every write waits here until the log is
    /// on disk.
    flush: WalFlush,
    /// Order batches, payments and cancels, through SQLite's own connection.
    orders: SqliteOrders,
    /// Payments and cancels waiting to be written together.
    changes: StatusBatches,
    /// Reads of orders, through SQLite's own connections.
    reads: SqliteReads,
}

impl SqliteStore {
    /// Opens the SQLite file `url` names (creating it if needed) with at most
    /// `max_connections` sqlx readers (a default when `None`), and brings the schema up to
    /// date. An in-memory database is refused: it could not keep accepted orders.
    pub async fn open(url: &str, max_connections: Option<u32>) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        anyhow::ensure!(
            !(url.contains(":memory:") || url.contains("mode=memory")),
            "an in-memory SQLite database cannot keep accepted orders; give a file"
        );
        let url = driver_url(url);
        let file = SqliteConnectOptions::from_str(&url)?
            .get_filename()
            .to_owned();
        private_file::make_private(&file)
            .with_context(|| format!("making {} private to its owner", file.display()))?;
        let pool = pool_options(max_connections.unwrap_or(POOL_SIZE), &[])
            .connect(&url)
            .await?;
        sql::migrate(&pool, Dialect::Sqlite).await?;
        let writer = writer_options().connect(&url).await?;
        Ok(Self {
            tables: Tables::new(pool, writer, Dialect::Sqlite),
            orders: SqliteOrders::open(&file)?,
            changes: StatusBatches::default(),
            reads: SqliteReads::new(&file),
            flush: WalFlush::new(file),
        })
    }

    /// Waits until what this caller committed is on disk: every write calls this before it
    /// reports success.
    async fn durable(&self) -> StoreResult<()> {
        self.flush
            .flushed()
            .await
            .map_err(|e| sqlx::Error::Io(e).into())
    }

    /// Runs a write through SQLite's own connection, in place, once the file's write lock is
    /// this process's turn: taken by holding the sqlx writer's one connection, not fought
    /// over, as SQLite's busy handler backs off for up to 100 ms at a time.
    async fn in_turn<T>(&self, write: impl FnOnce() -> rusqlite::Result<T>) -> StoreResult<T> {
        let _turn = self.tables.writer().acquire().await?;
        Ok(in_place(write)?)
    }

    /// A payment or a cancel, written in one transaction with every other one waiting (see
    /// [`StatusBatches`]). Whether it was applied; on disk once the log is synced.
    async fn settle(&self, change: StatusChange) -> StoreResult<bool> {
        let write = |changes: Vec<StatusChange>| self.in_turn(move || self.orders.settle(&changes));
        self.changes.settle(change, write).await
    }

    /// A cancel of order `id`: the order, once on disk, when this call cancelled it.
    async fn cancel(&self, id: OrderId, change: StatusChange) -> StoreResult<Option<Order>> {
        if !self.settle(change).await? {
            return Ok(None);
        }
        self.durable().await?;
        // Read back once committed: the batch says only which changes applied.
        self.order(id).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn setting_or_insert(&self, key: &str, proposed: &str) -> StoreResult<String> {
        self.tables.insert_setting(key, proposed).await?;
        self.durable().await?;
        self.tables.kept_setting(key).await
    }

    async fn setting(&self, key: &str) -> StoreResult<Option<String>> {
        self.tables.setting(key).await
    }

    async fn missing_migrations(&self) -> StoreResult<usize> {
        self.tables.missing_migrations().await
    }

    async fn create_user(
        &self,
        username: &Username,
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<UserId>> {
        let id = self
            .tables
            .create_user(username, password_hash, now)
            .await?;
        self.durable().await?;
        Ok(id)
    }

    async fn create_users(
        &self,
        usernames: &[Username],
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Vec<Option<UserId>>> {
        let ids = self
            .tables
            .create_users(usernames, password_hash, now)
            .await?;
        self.durable().await?;
        Ok(ids)
    }

    async fn user_by_name(&self, username: &str) -> StoreResult<Option<UserRecord>> {
        self.tables.user_by_name(username).await
    }

    async fn user(&self, id: UserId) -> StoreResult<Option<UserAccount>> {
        self.tables.user(id).await
    }

    async fn search_users(&self, search: &UserSearch<'_>) -> StoreResult<Vec<UserAccount>> {
        self.tables.search_users(search).await
    }

    async fn disable_user(&self, cutoff: &UserCutoff) -> StoreResult<Option<(UserAccount, bool)>> {
        let disabled = self.tables.disable_user(cutoff).await?;
        self.durable().await?;
        Ok(self
            .tables
            .user(cutoff.user)
            .await?
            .map(|user| (user, disabled)))
    }

    async fn enable_user(&self, id: UserId) -> StoreResult<Option<(UserAccount, bool)>> {
        let enabled = self.tables.enable_user(id).await?;
        self.durable().await?;
        Ok(self.tables.user(id).await?.map(|user| (user, enabled)))
    }

    async fn user_cutoffs(&self, after: i64, limit: i64) -> StoreResult<Vec<(i64, UserCutoff)>> {
        self.tables.user_cutoffs(after, limit).await
    }

    async fn create_event(
        &self,
        title: &str,
        window: SaleWindow,
        guard: Guard,
        now: Millis,
    ) -> StoreResult<SaleEvent> {
        let event = self.tables.create_event(title, window, guard, now).await?;
        self.durable().await?;
        Ok(event)
    }

    async fn events(&self) -> StoreResult<Vec<SaleEvent>> {
        self.tables.events().await
    }

    async fn event(&self, id: i64) -> StoreResult<Option<SaleEvent>> {
        self.tables.event(id).await
    }

    async fn end_event(&self, id: i64, now: Millis) -> StoreResult<Option<SaleEvent>> {
        self.tables.end_event(id, now).await?;
        self.durable().await?;
        self.tables.event(id).await
    }

    async fn set_event_guard(&self, id: i64, guard: Guard) -> StoreResult<Option<SaleEvent>> {
        self.tables.set_event_guard(id, guard).await?;
        self.durable().await?;
        self.tables.event(id).await
    }

    async fn create_product(&self, product: &NewProduct, now: Millis) -> StoreResult<Product> {
        let id = self.tables.insert_product(product, now).await?;
        self.durable().await?;
        self.tables.created_product(id).await
    }

    async fn update_product(
        &self,
        id: ProductId,
        patch: &ProductPatch,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        self.tables.update_product(id, patch, now).await?;
        self.durable().await?;
        self.tables.product(id).await
    }

    async fn add_stock(
        &self,
        id: ProductId,
        quantity: i64,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        self.tables.add_stock(id, quantity, now).await?;
        self.durable().await?;
        self.tables.product(id).await
    }

    async fn set_paused(
        &self,
        id: ProductId,
        paused: bool,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        self.tables.set_paused(id, paused, now).await?;
        self.durable().await?;
        self.tables.product(id).await
    }

    async fn mark_gate_loaded(&self, id: ProductId, now: Millis) -> StoreResult<()> {
        self.tables.mark_gate_loaded(id, now).await?;
        self.durable().await
    }

    async fn end_product(&self, id: ProductId, now: Millis) -> StoreResult<Option<Product>> {
        self.tables.end_product(id, now).await?;
        self.durable().await?;
        self.tables.product(id).await
    }

    async fn product(&self, id: ProductId) -> StoreResult<Option<Product>> {
        self.tables.product(id).await
    }

    async fn products(&self) -> StoreResult<Vec<Product>> {
        self.tables.products().await
    }

    async fn holdings(&self, product: ProductId) -> StoreResult<Vec<(UserId, u32)>> {
        self.tables.holdings(product).await
    }

    async fn insert_orders(&self, orders: &[Order]) -> StoreResult<Vec<Persisted>> {
        let outcomes = self.in_turn(|| self.orders.insert(orders)).await?;
        self.durable().await?;
        Ok(outcomes)
    }

    async fn order(&self, id: OrderId) -> StoreResult<Option<Order>> {
        Ok(self.reads.order(id)?)
    }

    async fn orders_of_user(&self, user: UserId) -> StoreResult<Vec<Order>> {
        Ok(self.reads.orders_of_user(user)?)
    }

    async fn search_orders(&self, search: &OrderSearch) -> StoreResult<Vec<Order>> {
        self.tables.search_orders(search).await
    }

    async fn mark_paid(&self, id: OrderId, now: Millis) -> StoreResult<bool> {
        let paid = self.settle(StatusChange::Pay { id, at: now }).await?;
        self.durable().await?;
        Ok(paid)
    }

    async fn cancel_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>> {
        self.cancel(id, StatusChange::Cancel { id, at: now }).await
    }

    async fn cancel_paid_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>> {
        self.cancel(id, StatusChange::CancelPaid { id, at: now })
            .await
    }

    async fn overdue_orders(&self, now: Millis, limit: i64) -> StoreResult<Vec<Overdue>> {
        self.tables.overdue_orders(now, limit).await
    }

    async fn mark_pay_started(&self, id: OrderId, now: Millis) -> StoreResult<()> {
        self.tables.mark_pay_started(id, now).await?;
        self.durable().await?;
        Ok(())
    }

    async fn record_payment(&self, record: &PaymentRecord<'_>) -> StoreResult<bool> {
        let new = self.tables.record_payment(record).await?;
        self.durable().await?;
        Ok(new)
    }

    async fn payments_of(&self, order: OrderId, limit: i64) -> StoreResult<Vec<KeptPayment>> {
        self.tables.payments_of(order, limit).await
    }

    async fn refunds_due(&self, after: OrderId, limit: i64) -> StoreResult<Vec<OrderId>> {
        self.tables.refunds_due(after, limit).await
    }

    async fn mark_refunded(&self, id: OrderId, now: Millis) -> StoreResult<bool> {
        let refunded = self.tables.mark_refunded(id, now).await?;
        self.durable().await?;
        Ok(refunded)
    }

    async fn cancelled_orders(&self, product: ProductId) -> StoreResult<Vec<OrderId>> {
        self.tables.cancelled_orders(product).await
    }

    async fn paid_units(&self, product: ProductId) -> StoreResult<i64> {
        self.tables.paid_units(product).await
    }

    async fn stored_among(&self, candidates: &[OrderId]) -> StoreResult<Vec<OrderId>> {
        self.tables.stored_among(candidates).await
    }

    async fn keyed_orders(&self, product: ProductId, since: Millis) -> StoreResult<Vec<Order>> {
        self.tables.keyed_orders(product, since).await
    }

    async fn pay_answer(
        &self,
        user: UserId,
        key: &IdempotencyKey,
    ) -> StoreResult<Option<PayAnswer>> {
        self.tables.pay_answer(user, key).await
    }

    async fn keep_pay_answer(&self, answer: &PayAnswer) -> StoreResult<()> {
        self.tables.keep_pay_answer(answer).await?;
        self.durable().await
    }

    async fn forget_pay_answers(&self, before: Millis) -> StoreResult<u64> {
        let forgotten = self.tables.forget_pay_answers(before).await?;
        self.durable().await?;
        Ok(forgotten)
    }

    async fn record_audit(&self, entry: &AuditEntry) -> StoreResult<()> {
        self.tables.record_audit(entry).await?;
        self.durable().await
    }

    async fn audit_log(&self, limit: i64) -> StoreResult<Vec<AuditEntry>> {
        self.tables.audit_log(limit).await
    }

    async fn revoke_session(&self, revoked: &RevokedSession, now: Millis) -> StoreResult<()> {
        self.tables.revoke_session(revoked, now).await?;
        self.durable().await
    }

    async fn revoked_sessions(
        &self,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<(i64, RevokedSession)>> {
        self.tables.revoked_sessions(after, limit).await
    }

    async fn forget_revoked_sessions(&self, now: Millis) -> StoreResult<u64> {
        let forgotten = self.tables.forget_revoked_sessions(now).await?;
        self.durable().await?;
        Ok(forgotten)
    }

    async fn put_image(&self, image: &Image, now: Millis) -> StoreResult<bool> {
        let new = self.tables.put_image(image, now).await?;
        self.durable().await?;
        Ok(new)
    }

    async fn image(&self, id: ImageId) -> StoreResult<Option<Image>> {
        self.tables.image(id).await
    }

    async fn image_ids(&self, limit: i64) -> StoreResult<Vec<ImageId>> {
        self.tables.image_ids(limit).await
    }
}

/// The URL as sqlx expects it: the file is created on first start unless the URL says
/// otherwise.
fn driver_url(url: &str) -> String {
    if url.contains("mode=") {
        return url.to_owned();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}mode=rwc")
}

/// A pool of `size` sqlx connections, each set up with [`SESSION_SETUP`] and then
/// `overrides`.
fn pool_options(size: u32, overrides: &'static [&'static str]) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(size)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                for statement in SESSION_SETUP.iter().chain(overrides) {
                    conn.execute(*statement).await?;
                }
                Ok(())
            })
        })
}

/// The sqlx writer: one connection, kept for the life of the process (so its page cache and
/// prepared statements stay warm, and the log it writes is never deleted under
/// [`WalFlush`]), that commits with `synchronous=NORMAL`: it writes the log but leaves syncing
/// it to [`WalFlush`], after the write lock is free.
fn writer_options() -> AnyPoolOptions {
    pool_options(1, &["PRAGMA synchronous = NORMAL"])
        .test_before_acquire(false)
        .idle_timeout(None)
        .max_lifetime(None)
}

/// Runs a blocking call from async code on the thread it is on, with no hop to another: in
/// place on a current-thread runtime (the order writer's own thread, which exists for this),
/// through `block_in_place` on a multi-threaded one, so the worker's other tasks move on.
fn in_place<T>(blocking: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|runtime| runtime.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(blocking),
        _ => blocking(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_created_on_first_start_unless_the_url_says_otherwise() {
        assert_eq!(driver_url("sqlite://a.db"), "sqlite://a.db?mode=rwc");
        assert_eq!(
            driver_url("sqlite://a.db?cache=shared"),
            "sqlite://a.db?cache=shared&mode=rwc"
        );
        assert_eq!(driver_url("sqlite://a.db?mode=ro"), "sqlite://a.db?mode=ro");
    }

    #[tokio::test]
    async fn an_in_memory_database_is_refused() {
        let refused = SqliteStore::open("sqlite::memory:", None).await;
        let reason = refused.err().expect("an in-memory database was accepted");
        assert!(reason.to_string().contains("in-memory"), "{reason}");
    }
}
