//! The [`Store`] on a database server, PostgreSQL or MySQL/MariaDB, every statement through
//! sqlx's `Any` driver in the server's [`Dialect`]. Each statement is a round trip, so an order
//! batch is a handful of statements whatever its size; a commit is durable once the server
//! answers it. Several servers and workers write at once, so a transaction the database aborts
//! for a conflict is tried again ([`retry`]).

mod retry;

use super::sql::rows::{self, new_order_columns};
use super::sql::{
    self, AnyQuery, CANCEL_ORDER, CANCEL_PAID_ORDER, Dialect, FREE_KEY, INSERT_ROWS, MARK_PAID,
    ORDER, ORDERS_OF_USER, RETURN_STOCK, TAKE_STOCK, Tables, query, settle_keys, units_of,
};
use super::{
    AuditEntry, DatabaseUrl, KeptPayment, NewProduct, OrderSearch, Overdue, PayAnswer,
    PaymentRecord, Persisted, ProductPatch, RevokedSession, Store, StoreResult, UserAccount,
    UserCutoff, UserRecord, UserSearch,
};
use crate::domain::{
    Guard, IdempotencyKey, Image, ImageId, Millis, Order, OrderId, Product, ProductId, SaleEvent,
    SaleWindow, UserId, Username,
};
use async_trait::async_trait;
use retry::retry_conflicts;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::MigrateDatabase;
use sqlx::{Any, Transaction};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Connections when the configuration names no number.
const POOL_SIZE: u32 = 16;

/// The database server's [`Store`].
pub struct ServerStore {
    /// Everything but the orders' writes and reads by key; its writer is its read pool.
    tables: Tables,
    sql: OrderStatements,
}

/// The statements of orders only this store runs through sqlx, in its dialect.
struct OrderStatements {
    take_stock: Arc<str>,
    order: Arc<str>,
    orders_of_user: Arc<str>,
    mark_paid: Arc<str>,
    cancel_order: Arc<str>,
    cancel_paid_order: Arc<str>,
    return_stock: Arc<str>,
    free_key: Arc<str>,
}

impl OrderStatements {
    fn new(d: Dialect) -> Self {
        let sql = |text: &str| -> Arc<str> { d.placeholders(text).into() };
        Self {
            take_stock: sql(TAKE_STOCK),
            order: sql(ORDER),
            orders_of_user: sql(ORDERS_OF_USER),
            mark_paid: sql(MARK_PAID),
            cancel_order: sql(CANCEL_ORDER),
            cancel_paid_order: sql(CANCEL_PAID_ORDER),
            return_stock: sql(RETURN_STOCK),
            free_key: sql(FREE_KEY),
        }
    }
}

impl ServerStore {
    /// Connects to the PostgreSQL or MySQL/MariaDB database `url` names (creating it if the
    /// server lacks it) with at most `max_connections` (a default when `None`), and brings the
    /// schema up to date.
    pub async fn connect(url: &DatabaseUrl, max_connections: Option<u32>) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let dialect = url.dialect();
        let url = url.as_str();
        anyhow::ensure!(
            dialect != Dialect::Sqlite,
            "a SQLite URL names no database server"
        );
        // A server without the named database: make it, so a first start needs no manual
        // step. Without the rights to, the connection below fails with the server's own
        // reason.
        if matches!(Any::database_exists(url).await, Ok(false)) {
            Any::create_database(url).await?;
        }
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections.unwrap_or(POOL_SIZE))
            .connect(&driver_url(url))
            .await?;
        sql::migrate(&pool, dialect).await?;
        Ok(Self {
            tables: Tables::new(pool.clone(), pool, dialect),
            sql: OrderStatements::new(dialect),
        })
    }

    /// One batch in one transaction, with a handful of statements whatever its size: which
    /// ids are stored already (redeliveries), one guarded stock update per product for all of
    /// its new orders (order by order only when a product cannot cover the whole batch), then
    /// multi-row inserts. A concurrent writer storing one of these ids (or idempotency keys)
    /// first makes an insert fail on the key; the whole batch is then tried again and sees it
    /// as stored.
    async fn try_insert_orders(&self, orders: &[Order]) -> StoreResult<Vec<Persisted>> {
        let mut tx = self.tables.writer().begin().await?;
        let ids: Vec<OrderId> = orders.iter().map(|o| o.id).collect();
        let stored = self.tables.stored_ids(&mut tx, &ids).await?;
        let mut seen: HashSet<OrderId> = stored.into_iter().collect();
        let mut outcomes = vec![Persisted::Duplicate; orders.len()];
        let mut fresh = Vec::with_capacity(orders.len());
        for (i, order) in orders.iter().enumerate() {
            if seen.insert(order.id) {
                fresh.push(i);
            }
        }
        for i in self.settle_keys(&mut tx, orders, &fresh).await? {
            outcomes[fresh[i]] = Persisted::KeyTaken;
        }
        let mut by_product: BTreeMap<ProductId, Vec<usize>> = BTreeMap::new();
        for &i in &fresh {
            if outcomes[i] != Persisted::KeyTaken {
                by_product.entry(orders[i].product_id).or_default().push(i);
            }
        }
        let mut new = Vec::with_capacity(orders.len());
        // Products in id order: concurrent batches lock their rows in the same order.
        for (product, batch) in by_product {
            let units: i64 = batch.iter().map(|&i| units_of(&orders[i])).sum();
            if self.take_stock(&mut tx, product, units).await? {
                new.extend(&batch);
                continue;
            }
            for i in batch {
                if self
                    .take_stock(&mut tx, product, units_of(&orders[i]))
                    .await?
                {
                    new.push(i);
                } else {
                    outcomes[i] = Persisted::OutOfStock;
                }
            }
        }
        for chunk in new.chunks(INSERT_ROWS) {
            let mut insert = self.insert_orders_statement(chunk.len());
            for &i in chunk {
                let o = &orders[i];
                insert = insert
                    .bind(o.id.0)
                    .bind(o.user_id.0)
                    .bind(o.product_id.0)
                    .bind(o.product_name.clone())
                    .bind(o.unit_price.cents())
                    .bind(units_of(o))
                    .bind(o.total.cents())
                    .bind(o.status.as_str())
                    .bind(o.created_at)
                    .bind(o.pay_before)
                    .bind(
                        o.idempotency_key
                            .as_ref()
                            .map(|key| key.as_str().to_owned()),
                    );
                outcomes[i] = Persisted::Inserted;
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    /// Sees to the idempotency keys of the new orders `orders[fresh[..]]` (see
    /// [`settle_keys`]): which of them (indexes into `fresh`) find their key held by another
    /// order. A batch without keys reads nothing.
    async fn settle_keys(
        &self,
        tx: &mut Transaction<'_, Any>,
        orders: &[Order],
        fresh: &[usize],
    ) -> StoreResult<Vec<usize>> {
        let new: Vec<&Order> = fresh.iter().map(|&i| &orders[i]).collect();
        if new.iter().all(|o| o.idempotency_key.is_none()) {
            return Ok(Vec::new());
        }
        let holders = self.tables.key_holders(tx, &new).await?;
        let (taken, expired) = settle_keys(new, holders);
        for id in expired {
            query(&self.sql.free_key)
                .bind(id.0)
                .execute(&mut **tx)
                .await?;
        }
        Ok(taken)
    }

    /// An insert of `rows` new orders in one statement.
    fn insert_orders_statement(&self, rows: usize) -> AnyQuery<'static> {
        let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"; rows].join(", ");
        let text = format!(
            concat!("INSERT INTO orders (", new_order_columns!(), ") VALUES {}"),
            values
        );
        query(&self.tables.dialect().placeholders(&text).into())
    }

    /// Takes `units` from a product's stock if it has them. True when taken.
    async fn take_stock(
        &self,
        tx: &mut Transaction<'_, Any>,
        product: ProductId,
        units: i64,
    ) -> StoreResult<bool> {
        let taken = query(&self.sql.take_stock)
            .bind(units)
            .bind(product.0)
            .bind(units)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        Ok(taken == 1)
    }

    /// Cancels an order with the conditional update `cancel_order` and, if it applied, puts
    /// the order's units back on the product's stock in the same transaction.
    async fn try_cancel(
        &self,
        cancel_order: &Arc<str>,
        id: OrderId,
        now: Millis,
    ) -> StoreResult<Option<Order>> {
        let mut tx = self.tables.writer().begin().await?;
        let cancelled = query(cancel_order)
            .bind(now)
            .bind(id.0)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if cancelled == 0 {
            return Ok(None);
        }
        let row = query(&self.sql.order)
            .bind(id.0)
            .fetch_one(&mut *tx)
            .await?;
        let order = rows::order(&row)?;
        query(&self.sql.return_stock)
            .bind(units_of(&order))
            .bind(now)
            .bind(order.product_id.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(order))
    }
}

#[async_trait]
impl Store for ServerStore {
    async fn setting_or_insert(&self, key: &str, proposed: &str) -> StoreResult<String> {
        self.tables.insert_setting(key, proposed).await?;
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
        self.tables.create_user(username, password_hash, now).await
    }

    async fn create_users(
        &self,
        usernames: &[Username],
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Vec<Option<UserId>>> {
        self.tables
            .create_users(usernames, password_hash, now)
            .await
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
        let disabled = retry_conflicts(|| self.tables.disable_user(cutoff)).await?;
        Ok(self
            .tables
            .user(cutoff.user)
            .await?
            .map(|user| (user, disabled)))
    }

    async fn enable_user(&self, id: UserId) -> StoreResult<Option<(UserAccount, bool)>> {
        let enabled = self.tables.enable_user(id).await?;
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
        self.tables.create_event(title, window, guard, now).await
    }

    async fn events(&self) -> StoreResult<Vec<SaleEvent>> {
        self.tables.events().await
    }

    async fn event(&self, id: i64) -> StoreResult<Option<SaleEvent>> {
        self.tables.event(id).await
    }

    async fn end_event(&self, id: i64, now: Millis) -> StoreResult<Option<SaleEvent>> {
        // Its products' rows are also written by order batches, in another order.
        retry_conflicts(|| self.tables.end_event(id, now)).await?;
        self.tables.event(id).await
    }

    async fn set_event_guard(&self, id: i64, guard: Guard) -> StoreResult<Option<SaleEvent>> {
        self.tables.set_event_guard(id, guard).await?;
        self.tables.event(id).await
    }

    async fn create_product(&self, product: &NewProduct, now: Millis) -> StoreResult<Product> {
        let id = self.tables.insert_product(product, now).await?;
        self.tables.created_product(id).await
    }

    async fn update_product(
        &self,
        id: ProductId,
        patch: &ProductPatch,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        self.tables.update_product(id, patch, now).await?;
        self.tables.product(id).await
    }

    async fn add_stock(
        &self,
        id: ProductId,
        quantity: i64,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        self.tables.add_stock(id, quantity, now).await?;
        self.tables.product(id).await
    }

    async fn set_paused(
        &self,
        id: ProductId,
        paused: bool,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        self.tables.set_paused(id, paused, now).await?;
        self.tables.product(id).await
    }

    async fn mark_gate_loaded(&self, id: ProductId, now: Millis) -> StoreResult<()> {
        self.tables.mark_gate_loaded(id, now).await
    }

    async fn end_product(&self, id: ProductId, now: Millis) -> StoreResult<Option<Product>> {
        self.tables.end_product(id, now).await?;
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
        retry_conflicts(|| self.try_insert_orders(orders)).await
    }

    async fn order(&self, id: OrderId) -> StoreResult<Option<Order>> {
        let row = query(&self.sql.order)
            .bind(id.0)
            .fetch_optional(self.tables.pool())
            .await?;
        Ok(row.as_ref().map(rows::order).transpose()?)
    }

    async fn orders_of_user(&self, user: UserId) -> StoreResult<Vec<Order>> {
        let rows = query(&self.sql.orders_of_user)
            .bind(user.0)
            .fetch_all(self.tables.pool())
            .await?;
        Ok(rows.iter().map(rows::order).collect::<Result<_, _>>()?)
    }

    async fn search_orders(&self, search: &OrderSearch) -> StoreResult<Vec<Order>> {
        self.tables.search_orders(search).await
    }

    async fn mark_paid(&self, id: OrderId, now: Millis) -> StoreResult<bool> {
        let paid = query(&self.sql.mark_paid)
            .bind(now)
            .bind(id.0)
            .bind(now)
            .execute(self.tables.writer())
            .await?;
        Ok(paid.rows_affected() == 1)
    }

    async fn cancel_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>> {
        retry_conflicts(|| self.try_cancel(&self.sql.cancel_order, id, now)).await
    }

    async fn cancel_paid_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>> {
        retry_conflicts(|| self.try_cancel(&self.sql.cancel_paid_order, id, now)).await
    }

    async fn overdue_orders(&self, now: Millis, limit: i64) -> StoreResult<Vec<Overdue>> {
        self.tables.overdue_orders(now, limit).await
    }

    async fn mark_pay_started(&self, id: OrderId, now: Millis) -> StoreResult<()> {
        self.tables.mark_pay_started(id, now).await
    }

    async fn record_payment(&self, record: &PaymentRecord<'_>) -> StoreResult<bool> {
        self.tables.record_payment(record).await
    }

    async fn payments_of(&self, order: OrderId, limit: i64) -> StoreResult<Vec<KeptPayment>> {
        self.tables.payments_of(order, limit).await
    }

    async fn refunds_due(&self, after: OrderId, limit: i64) -> StoreResult<Vec<OrderId>> {
        self.tables.refunds_due(after, limit).await
    }

    async fn mark_refunded(&self, id: OrderId, now: Millis) -> StoreResult<bool> {
        self.tables.mark_refunded(id, now).await
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
        self.tables.keep_pay_answer(answer).await
    }

    async fn forget_pay_answers(&self, before: Millis) -> StoreResult<u64> {
        self.tables.forget_pay_answers(before).await
    }

    async fn record_audit(&self, entry: &AuditEntry) -> StoreResult<()> {
        self.tables.record_audit(entry).await
    }

    async fn audit_log(&self, limit: i64) -> StoreResult<Vec<AuditEntry>> {
        self.tables.audit_log(limit).await
    }

    async fn revoke_session(&self, revoked: &RevokedSession, now: Millis) -> StoreResult<()> {
        self.tables.revoke_session(revoked, now).await
    }

    async fn revoked_sessions(
        &self,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<(i64, RevokedSession)>> {
        self.tables.revoked_sessions(after, limit).await
    }

    async fn forget_revoked_sessions(&self, now: Millis) -> StoreResult<u64> {
        self.tables.forget_revoked_sessions(now).await
    }

    async fn put_image(&self, image: &Image, now: Millis) -> StoreResult<bool> {
        self.tables.put_image(image, now).await
    }

    async fn image(&self, id: ImageId) -> StoreResult<Option<Image>> {
        self.tables.image(id).await
    }

    async fn image_ids(&self, limit: i64) -> StoreResult<Vec<ImageId>> {
        self.tables.image_ids(limit).await
    }
}

/// The URL as sqlx expects it: `mariadb://` is MySQL's protocol.
fn driver_url(url: &str) -> String {
    match url.strip_prefix("mariadb:") {
        Some(rest) => format!("mysql:{rest}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_urls_speak_mysql() {
        assert_eq!(driver_url("mariadb://h/db"), "mysql://h/db");
        assert_eq!(
            driver_url("mysql://mariadb:pw@h/db"),
            "mysql://mariadb:pw@h/db"
        );
    }
}
