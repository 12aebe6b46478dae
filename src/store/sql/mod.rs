//! What the two SQL stores share: the statements' text, written once for every database with
//! [`Dialect`] adapting the few spellings that differ, the decoding of rows ([`rows`]), the
//! migrations, and [`Tables`], the work both stores do through sqlx's `Any` driver (settings,
//! accounts, sale events, products, and the reads of orders that scan). All values cross as
//! `i64` or text, which every driver supports.
//!
//! This module knows neither store: `sqlite` and `server` import it, never the reverse.

mod dialect;
pub(super) mod rows;

pub use dialect::Dialect;

use super::{
    AuditEntry, KeptPayment, NewProduct, OrderSearch, Overdue, PayAnswer, PaymentRecord,
    ProductPatch, RevokedSession, StoreResult, UserAccount, UserCutoff, UserRecord, UserSearch,
};
use crate::domain::{
    Guard, IdempotencyKey, Image, ImageFormat, ImageId, Millis, Money, Order, OrderId, OrderStatus,
    Product, ProductId, SaleEvent, SaleWindow, UserId, Username,
};
use rows::{account_columns, order_columns, product_columns};
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, AnyPool, AssertSqlSafe, Executor, Row};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

// Statements of orders that SQLite's own connections run as they are and the database
// servers through sqlx (with [`Dialect::placeholders`]), spelled once for both drivers.
/// Takes units from a product's stock only if it has them all.
pub(super) const TAKE_STOCK: &str =
    "UPDATE products SET stock = stock - ? WHERE id = ? AND stock >= ?";
/// awaiting_payment → paid, while the payment window is open.
pub(super) const MARK_PAID: &str = "UPDATE orders SET status = 'paid', paid_at = ? \
    WHERE id = ? AND status = 'awaiting_payment' AND pay_before > ?";
/// awaiting_payment → cancelled.
pub(super) const CANCEL_ORDER: &str = "UPDATE orders SET status = 'cancelled', \
    cancelled_at = ? WHERE id = ? AND status = 'awaiting_payment'";
/// paid → cancelled, for an operator's refund.
pub(super) const CANCEL_PAID_ORDER: &str = "UPDATE orders SET status = 'cancelled', \
    cancelled_at = ? WHERE id = ? AND status = 'paid'";
/// A cancelled order's units back on sale.
pub(super) const RETURN_STOCK: &str =
    "UPDATE products SET stock = stock + ?, updated_at = ? WHERE id = ?";
/// One order.
pub(super) const ORDER: &str = concat!("SELECT ", order_columns!(), " FROM orders WHERE id = ?");
/// A user's orders, newest first.
pub(super) const ORDERS_OF_USER: &str = concat!(
    "SELECT ",
    order_columns!(),
    " FROM orders WHERE user_id = ? ORDER BY created_at DESC, id DESC"
);
/// Rows per multi-row statement: 11 parameters each stays under every driver's limit.
pub(super) const INSERT_ROWS: usize = 500;
/// The order holding a buyer's idempotency key, and when it was made.
pub(super) const KEY_HOLDER: &str =
    "SELECT id, created_at FROM orders WHERE user_id = ? AND idempotency_key = ?";
/// Takes an idempotency key whose lifetime has passed from the order that held it.
pub(super) const FREE_KEY: &str = "UPDATE orders SET idempotency_key = NULL WHERE id = ?";

/// The order holding each (buyer, idempotency key), and when it was made.
pub(super) type KeyHolders = HashMap<(UserId, String), (OrderId, Millis)>;

/// What a batch of new orders does with their idempotency keys, given who holds them before
/// the batch: the orders (by index) whose key another order holds within its lifetime, not to
/// be written, and the orders whose keys' lifetime has passed, to lose them to the new ones
/// first. Orders of the batch count as holders for those after them; an order holding its own
/// key is stored already (a redelivery).
pub(super) fn settle_keys<'a>(
    orders: impl IntoIterator<Item = &'a Order>,
    mut holders: KeyHolders,
) -> (Vec<usize>, Vec<OrderId>) {
    let (mut taken, mut expired) = (Vec::new(), Vec::new());
    for (i, order) in orders.into_iter().enumerate() {
        let Some(key) = &order.idempotency_key else {
            continue;
        };
        let mine = (order.id, order.created_at);
        match holders.entry((order.user_id, key.as_str().to_owned())) {
            Entry::Vacant(free) => {
                free.insert(mine);
            }
            Entry::Occupied(mut held) => {
                let (holder, made_at) = *held.get();
                if holder == order.id {
                    continue;
                }
                if IdempotencyKey::is_live(made_at, order.created_at) {
                    taken.push(i);
                } else {
                    expired.push(holder);
                    held.insert(mine);
                }
            }
        }
    }
    (taken, expired)
}

/// Units of an order, as the database counts them.
pub(super) fn units_of(order: &Order) -> i64 {
    i64::from(order.quantity.get())
}

/// The condition that picks orders in `status`: the database stores a refunded order as
/// cancelled with a refund time.
fn status_condition(status: OrderStatus) -> &'static str {
    match status {
        OrderStatus::AwaitingPayment => "status = 'awaiting_payment'",
        OrderStatus::Paid => "status = 'paid'",
        OrderStatus::Cancelled => "status = 'cancelled' AND refunded_at IS NULL",
        OrderStatus::Refunded => "status = 'cancelled' AND refunded_at IS NOT NULL",
    }
}

/// A statement through sqlx's `Any` driver.
pub(super) type AnyQuery<'q> = Query<'q, Any, AnyArguments>;

/// A statement assembled at start-up from literals of the store's modules; no input reaches
/// the SQL text, only bound parameters.
pub(super) fn query(sql: &Arc<str>) -> AnyQuery<'static> {
    sqlx::query(AssertSqlSafe(sql.clone()))
}

/// The first column of each row, as order ids.
pub(super) fn ids_of(rows: &[AnyRow]) -> StoreResult<Vec<OrderId>> {
    rows.iter()
        .map(|row| Ok(OrderId(row.try_get(0)?)))
        .collect()
}

/// Brings the schema of `pool`'s database up to date, logging each migration it applies, so
/// `seckill migrate` and a first start say what they did.
pub(super) async fn migrate(pool: &AnyPool, dialect: Dialect) -> anyhow::Result<()> {
    let applied: HashSet<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
        .fetch_all(pool)
        .await
        .map_or_else(|_| HashSet::new(), HashSet::from_iter); // none yet: no table yet
    dialect.migrator().run(pool).await?;
    for migration in dialect.migrator().iter() {
        if !applied.contains(&migration.version) {
            tracing::info!(
                version = migration.version,
                "applied migration: {}",
                migration.description
            );
        }
    }
    Ok(())
}

/// Every statement [`Tables`] runs, in the connected database's dialect, prepared once at
/// start-up.
struct Statements {
    insert_setting: Arc<str>,
    setting: Arc<str>,
    insert_user: Arc<str>,
    user_by_name: Arc<str>,
    user: Arc<str>,
    newest_users: Arc<str>,
    users_named: Arc<str>,
    disable_user: Arc<str>,
    enable_user: Arc<str>,
    insert_cutoff: Arc<str>,
    user_cutoffs: Arc<str>,
    forget_user_cutoffs: Arc<str>,
    insert_event: Arc<str>,
    events: Arc<str>,
    event: Arc<str>,
    set_event_guard: Arc<str>,
    insert_product: Arc<str>,
    update_product: Arc<str>,
    add_stock: Arc<str>,
    pause_product: Arc<str>,
    resume_product: Arc<str>,
    mark_gate_loaded: Arc<str>,
    end_product: Arc<str>,
    end_event: Arc<str>,
    end_products_of_event: Arc<str>,
    product: Arc<str>,
    products: Arc<str>,
    holdings: Arc<str>,
    overdue_orders: Arc<str>,
    cancelled_orders: Arc<str>,
    paid_units: Arc<str>,
    mark_pay_started: Arc<str>,
    insert_payment_record: Arc<str>,
    refunds_due: Arc<str>,
    mark_refunded: Arc<str>,
    insert_audit: Arc<str>,
    audit_log: Arc<str>,
    payments_of: Arc<str>,
    revoke_session: Arc<str>,
    revoked_sessions: Arc<str>,
    forget_revoked_sessions: Arc<str>,
    insert_image: Arc<str>,
    image: Arc<str>,
    image_ids: Arc<str>,
    keyed_orders: Arc<str>,
    pay_answer: Arc<str>,
    insert_pay_answer: Arc<str>,
    forget_pay_answers: Arc<str>,
}

impl Statements {
    fn new(d: Dialect) -> Self {
        let sql = |text: &str| -> Arc<str> { d.placeholders(text).into() };
        // A window ended at the first `?` (now): its end moves there, and a start not reached
        // yet to the second (just before it), since a window must end after it starts.
        let ended = |start: &str, end: &str| {
            format!("{start} = CASE WHEN {start} < ? THEN {start} ELSE ? END, {end} = ?")
        };
        let end_product = |which: &str| {
            sql(&format!(
                "UPDATE products SET {}, updated_at = ? WHERE {which} = ? AND sale_ends_at > ?",
                ended("sale_starts_at", "sale_ends_at")
            ))
        };
        Self {
            insert_setting: sql(&d.insert_new("settings (name, value) VALUES (?, ?)", "name")),
            setting: sql("SELECT value FROM settings WHERE name = ?"),
            insert_user: sql(&d.insert_with_id(&d.insert_new(
                "users (username, password_hash, created_at) VALUES (?, ?, ?)",
                "username",
            ))),
            user_by_name: sql(
                "SELECT id, username, password_hash, disabled_at FROM users WHERE username = ?",
            ),
            user: sql(concat!(
                "SELECT ",
                account_columns!(),
                " FROM users WHERE id = ?"
            )),
            newest_users: sql(concat!(
                "SELECT ",
                account_columns!(),
                " FROM users ORDER BY id DESC LIMIT ?"
            )),
            // `!` escapes `_` in the pattern: a username holds no `!` and no `%`.
            users_named: sql(concat!(
                "SELECT ",
                account_columns!(),
                " FROM users WHERE username LIKE ? ESCAPE '!' ORDER BY id DESC LIMIT ?"
            )),
            // A repeated disable keeps the time of the first, and records no second cut-off.
            disable_user: sql(
                "UPDATE users SET disabled_at = ? WHERE id = ? AND disabled_at IS NULL",
            ),
            enable_user: sql(
                "UPDATE users SET disabled_at = NULL WHERE id = ? AND disabled_at IS NOT NULL",
            ),
            insert_cutoff: sql(
                "INSERT INTO user_cutoffs (user_id, cut_at, expires_at) VALUES (?, ?, ?)",
            ),
            user_cutoffs: sql("SELECT seq, user_id, cut_at, expires_at FROM user_cutoffs \
                 WHERE seq > ? ORDER BY seq LIMIT ?"),
            forget_user_cutoffs: sql("DELETE FROM user_cutoffs WHERE expires_at <= ?"),
            insert_event: sql(&d.insert_with_id(
                "INSERT INTO sale_events (title, starts_at, ends_at, guard, created_at) \
                 VALUES (?, ?, ?, ?, ?)",
            )),
            events: sql(
                "SELECT id, title, starts_at, ends_at, guard FROM sale_events \
                         ORDER BY starts_at, id",
            ),
            event: sql("SELECT id, title, starts_at, ends_at, guard FROM sale_events WHERE id = ?"),
            set_event_guard: sql("UPDATE sale_events SET guard = ? WHERE id = ?"),
            insert_product: sql(&d.insert_with_id(
                "INSERT INTO products (event_id, name, image_url, original_price_cents, \
                 sale_price_cents, stock_total, stock, per_user_limit, buckets, sale_starts_at, \
                 sale_ends_at, created_at, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )),
            // The buckets change only while the product is not in the gate, whose buckets
            // hold its stock and buyers: in one statement with the mark of the first load, so
            // a preheat that marked the product in between makes the whole patch change nothing.
            update_product: sql("UPDATE products SET name = COALESCE(?, name), \
                 image_url = COALESCE(?, image_url), \
                 original_price_cents = COALESCE(?, original_price_cents), \
                 sale_price_cents = COALESCE(?, sale_price_cents), \
                 per_user_limit = COALESCE(?, per_user_limit), \
                 buckets = COALESCE(?, buckets), \
                 sale_starts_at = COALESCE(?, sale_starts_at), \
                 sale_ends_at = COALESCE(?, sale_ends_at), updated_at = ? \
                 WHERE id = ? AND (gate_loaded_at IS NULL OR buckets = COALESCE(?, buckets))"),
            add_stock: sql(
                "UPDATE products SET stock_total = stock_total + ?, stock = stock + ?, \
                 updated_at = ? WHERE id = ?",
            ),
            // A repeated pause keeps the time of the first.
            pause_product: sql("UPDATE products SET paused_at = COALESCE(paused_at, ?), \
                 updated_at = ? WHERE id = ?"),
            resume_product: sql("UPDATE products SET paused_at = NULL, updated_at = ? \
                 WHERE id = ?"),
            mark_gate_loaded: sql("UPDATE products SET gate_loaded_at = ? \
                 WHERE id = ? AND gate_loaded_at IS NULL"),
            end_product: end_product("id"),
            end_event: sql(&format!(
                "UPDATE sale_events SET {} WHERE id = ? AND ends_at > ?",
                ended("starts_at", "ends_at")
            )),
            end_products_of_event: end_product("event_id"),
            product: sql(concat!(
                "SELECT ",
                product_columns!(),
                " FROM products WHERE id = ?"
            )),
            products: sql(concat!(
                "SELECT ",
                product_columns!(),
                " FROM products ORDER BY sale_starts_at, id"
            )),
            holdings: sql(&format!(
                "SELECT user_id, {} AS units FROM orders \
                 WHERE product_id = ? AND status <> 'cancelled' GROUP BY user_id",
                d.sum("quantity")
            )),
            overdue_orders: sql("SELECT id, pay_started_at FROM orders \
                 WHERE status = 'awaiting_payment' AND pay_before <= ? \
                 ORDER BY pay_before LIMIT ?"),
            mark_pay_started: sql("UPDATE orders SET pay_started_at = ? \
                 WHERE id = ? AND status = 'awaiting_payment' AND pay_started_at IS NULL"),
            insert_payment_record: sql(&d.insert_new(
                "payment_records (record_key, order_id, provider, trade_no, amount_cents, \
                 trade_status, paid, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                "record_key",
            )),
            refunds_due: sql("SELECT DISTINCT orders.id FROM payment_records \
                 JOIN orders ON orders.id = payment_records.order_id \
                 WHERE payment_records.paid = 1 AND orders.status = 'cancelled' \
                 AND orders.refunded_at IS NULL AND orders.id > ? ORDER BY orders.id LIMIT ?"),
            mark_refunded: sql("UPDATE orders SET refunded_at = ? \
                 WHERE id = ? AND status = 'cancelled' AND refunded_at IS NULL"),
            cancelled_orders: sql(
                "SELECT id FROM orders WHERE product_id = ? AND status = 'cancelled'",
            ),
            paid_units: sql(&format!(
                "SELECT COALESCE({}, 0) AS units FROM orders \
                 WHERE product_id = ? AND status = 'paid'",
                d.sum("quantity")
            )),
            payments_of: sql(
                "SELECT provider, trade_no, amount_cents, trade_status, paid, \
                 received_at FROM payment_records WHERE order_id = ? \
                 ORDER BY received_at, record_key LIMIT ?",
            ),
            insert_audit: sql(
                "INSERT INTO audit_log (actor, action, recorded_at) VALUES (?, ?, ?)",
            ),
            audit_log: sql("SELECT actor, action, recorded_at FROM audit_log \
                 ORDER BY id DESC LIMIT ?"),
            revoke_session: sql(&d.insert_new(
                "revoked_sessions (session_id, expires_at, revoked_at) VALUES (?, ?, ?)",
                "session_id",
            )),
            revoked_sessions: sql("SELECT seq, session_id, expires_at FROM revoked_sessions \
                 WHERE seq > ? ORDER BY seq LIMIT ?"),
            forget_revoked_sessions: sql("DELETE FROM revoked_sessions WHERE expires_at <= ?"),
            insert_image: sql(&d.insert_new(
                "images (id, content_type, content, size_bytes, created_at) VALUES (?, ?, ?, ?, ?)",
                "id",
            )),
            image: sql("SELECT content_type, content FROM images WHERE id = ?"),
            image_ids: sql("SELECT id FROM images LIMIT ?"),
            keyed_orders: sql(concat!(
                "SELECT ",
                order_columns!(),
                " FROM orders WHERE product_id = ? AND idempotency_key IS NOT NULL \
                 AND created_at > ?"
            )),
            pay_answer: sql(
                "SELECT order_id, channel, pay_url, created_at FROM pay_answers \
                 WHERE user_id = ? AND idempotency_key = ?",
            ),
            insert_pay_answer: sql(&d.insert_new(
                "pay_answers (user_id, idempotency_key, order_id, channel, pay_url, created_at) \
                 VALUES (?, ?, ?, ?, ?, ?)",
                "user_id, idempotency_key",
            )),
            forget_pay_answers: sql("DELETE FROM pay_answers WHERE created_at < ?"),
        }
    }
}

/// The statements both stores run through sqlx, on a pool for reads and one for writes. A
/// write here returns once committed; a store that commits without syncing (SQLite's) waits
/// for its log after each one.
pub struct Tables {
    /// Reads.
    pool: AnyPool,
    /// Writes: the read pool itself on a database server, a connection of its own on SQLite.
    writer: AnyPool,
    dialect: Dialect,
    sql: Statements,
}

impl Tables {
    /// Statements in `dialect`, reading through `pool` and writing through `writer`.
    pub fn new(pool: AnyPool, writer: AnyPool, dialect: Dialect) -> Self {
        Self {
            pool,
            writer,
            dialect,
            sql: Statements::new(dialect),
        }
    }

    /// The pool reads go through.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The pool writes go through.
    pub fn writer(&self) -> &AnyPool {
        &self.writer
    }

    /// The database family the statements are spelled for.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Stores `proposed` under `key` unless a value is there already.
    pub async fn insert_setting(&self, key: &str, proposed: &str) -> StoreResult<()> {
        query(&self.sql.insert_setting)
            .bind(key.to_owned())
            .bind(proposed.to_owned())
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// The value stored under `key`.
    pub async fn kept_setting(&self, key: &str) -> StoreResult<String> {
        self.setting(key)
            .await?
            .ok_or_else(|| sqlx::Error::RowNotFound.into())
    }

    /// See [`crate::store::Store::missing_migrations`].
    pub async fn missing_migrations(&self) -> StoreResult<usize> {
        let applied: HashSet<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .collect();
        let known = self.dialect.migrator().iter();
        Ok(known.filter(|m| !applied.contains(&m.version)).count())
    }

    /// See [`crate::store::Store::setting`].
    pub async fn setting(&self, key: &str) -> StoreResult<Option<String>> {
        let row = query(&self.sql.setting)
            .bind(key.to_owned())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    /// See [`crate::store::Store::create_user`].
    pub async fn create_user(
        &self,
        username: &Username,
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<UserId>> {
        let insert = self.insert_user(username, password_hash, now);
        Ok(self.insert_id(&self.writer, insert).await?.map(UserId))
    }

    /// See [`crate::store::Store::create_users`].
    pub async fn create_users(
        &self,
        usernames: &[Username],
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Vec<Option<UserId>>> {
        let mut tx = self.writer.begin().await?;
        let mut ids = Vec::with_capacity(usernames.len());
        for username in usernames {
            let insert = self.insert_user(username, password_hash, now);
            ids.push(self.insert_id(&mut *tx, insert).await?.map(UserId));
        }
        tx.commit().await?;
        Ok(ids)
    }

    fn insert_user(&self, username: &Username, password_hash: &str, now: Millis) -> AnyQuery<'_> {
        query(&self.sql.insert_user)
            .bind(username.as_str().to_owned())
            .bind(password_hash.to_owned())
            .bind(now)
    }

    /// See [`crate::store::Store::user_by_name`].
    pub async fn user_by_name(&self, username: &str) -> StoreResult<Option<UserRecord>> {
        let row = query(&self.sql.user_by_name)
            .bind(username.to_owned())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(rows::user).transpose()?)
    }

    /// See [`crate::store::Store::user`].
    pub async fn user(&self, id: UserId) -> StoreResult<Option<UserAccount>> {
        let row = query(&self.sql.user)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(rows::account).transpose()?)
    }

    /// See [`crate::store::Store::search_users`].
    pub async fn search_users(&self, search: &UserSearch<'_>) -> StoreResult<Vec<UserAccount>> {
        let found = match search.name_prefix {
            Some(prefix) => query(&self.sql.users_named).bind(format!(
                "{}%",
                prefix
                    .replace('!', "!!")
                    .replace('_', "!_")
                    .replace('%', "!%")
            )),
            None => query(&self.sql.newest_users),
        };
        let rows = found.bind(search.limit).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(rows::account).collect::<Result<_, _>>()?)
    }

    /// Disables an account and records the cut-off of its tokens, in one transaction; whether
    /// this call disabled it (false: disabled already, or no such account).
    pub async fn disable_user(&self, cutoff: &UserCutoff) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        let done = query(&self.sql.disable_user)
            .bind(cutoff.cut_at)
            .bind(cutoff.user.0)
            .execute(&mut *tx)
            .await?;
        let disabled = done.rows_affected() == 1;
        if disabled {
            query(&self.sql.insert_cutoff)
                .bind(cutoff.user.0)
                .bind(cutoff.cut_at)
                .bind(cutoff.expires_at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(disabled)
    }

    /// Enables an account; whether this call enabled it.
    pub async fn enable_user(&self, id: UserId) -> StoreResult<bool> {
        let done = query(&self.sql.enable_user)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// See [`crate::store::Store::user_cutoffs`].
    pub async fn user_cutoffs(
        &self,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<(i64, UserCutoff)>> {
        self.rows_after(&self.sql.user_cutoffs, after, limit, |row| {
            Ok(UserCutoff {
                user: UserId(row.try_get(1)?),
                cut_at: row.try_get(2)?,
                expires_at: row.try_get(3)?,
            })
        })
        .await
    }

    /// The rows of `sql` past the position `after`, at most `limit`, each with its position
    /// (column 0), the rest read by `decode`: how every server follows a table that only
    /// grows, such as the ended sessions and the accounts' cut-offs.
    async fn rows_after<T>(
        &self,
        sql: &Arc<str>,
        after: i64,
        limit: i64,
        decode: impl Fn(&AnyRow) -> Result<T, sqlx::Error>,
    ) -> StoreResult<Vec<(i64, T)>> {
        let rows = query(sql)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, decode(row)?)))
            .collect()
    }

    /// See [`crate::store::Store::create_event`].
    pub async fn create_event(
        &self,
        title: &str,
        window: SaleWindow,
        guard: Guard,
        now: Millis,
    ) -> StoreResult<SaleEvent> {
        let insert = query(&self.sql.insert_event)
            .bind(title.to_owned())
            .bind(window.start)
            .bind(window.end)
            .bind(guard.as_str())
            .bind(now);
        let id = self.must_insert_id(insert).await?;
        Ok(SaleEvent {
            id,
            title: title.to_owned(),
            window,
            guard,
        })
    }

    /// Sets a sale event's guard, if there is such an event.
    pub async fn set_event_guard(&self, id: i64, guard: Guard) -> StoreResult<()> {
        query(&self.sql.set_event_guard)
            .bind(guard.as_str())
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// See [`crate::store::Store::events`].
    pub async fn events(&self) -> StoreResult<Vec<SaleEvent>> {
        let rows = query(&self.sql.events).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(rows::event).collect::<Result<_, _>>()?)
    }

    /// See [`crate::store::Store::event`].
    pub async fn event(&self, id: i64) -> StoreResult<Option<SaleEvent>> {
        let row = query(&self.sql.event)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(rows::event).transpose()?)
    }

    /// Creates a product; its id.
    pub async fn insert_product(&self, p: &NewProduct, now: Millis) -> StoreResult<ProductId> {
        let insert = query(&self.sql.insert_product)
            .bind(p.event_id)
            .bind(p.name.clone())
            .bind(p.image_url.clone())
            .bind(p.original_price.cents())
            .bind(p.sale_price.cents())
            .bind(p.stock)
            .bind(p.stock)
            .bind(i64::from(p.per_user_limit))
            .bind(i64::from(p.buckets.get()))
            .bind(p.window.start)
            .bind(p.window.end)
            .bind(now)
            .bind(now);
        Ok(ProductId(self.must_insert_id(insert).await?))
    }

    /// Applies a patch to a product, if there is one and the patch may change its buckets.
    pub async fn update_product(
        &self,
        id: ProductId,
        patch: &ProductPatch,
        now: Millis,
    ) -> StoreResult<()> {
        let buckets = patch.buckets.map(|b| i64::from(b.get()));
        query(&self.sql.update_product)
            .bind(patch.name.clone())
            .bind(patch.image_url.clone())
            .bind(patch.original_price.map(Money::cents))
            .bind(patch.sale_price.map(Money::cents))
            .bind(patch.per_user_limit.map(i64::from))
            .bind(buckets)
            .bind(patch.window.map(|w| w.start))
            .bind(patch.window.map(|w| w.end))
            .bind(now)
            .bind(id.0)
            .bind(buckets)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Puts `quantity` more units of a product on sale, if there is one.
    pub async fn add_stock(&self, id: ProductId, quantity: i64, now: Millis) -> StoreResult<()> {
        query(&self.sql.add_stock)
            .bind(quantity)
            .bind(quantity)
            .bind(now)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Pauses or resumes buying of a product, if there is one.
    pub async fn set_paused(&self, id: ProductId, paused: bool, now: Millis) -> StoreResult<()> {
        let change = if paused {
            query(&self.sql.pause_product).bind(now)
        } else {
            query(&self.sql.resume_product)
        };
        change.bind(now).bind(id.0).execute(&self.writer).await?;
        Ok(())
    }

    /// Records a product's first load into the gate (see
    /// [`crate::store::Store::mark_gate_loaded`]).
    pub async fn mark_gate_loaded(&self, id: ProductId, now: Millis) -> StoreResult<()> {
        query(&self.sql.mark_gate_loaded)
            .bind(now)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Ends a product's sale at `now`, unless it has ended already.
    pub async fn end_product(&self, id: ProductId, now: Millis) -> StoreResult<()> {
        Self::ending(&self.sql.end_product, id.0, now)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Ends a sale event at `now` and each of its products whose sale has not ended, in one
    /// transaction, so no product is left selling after its event has ended.
    pub async fn end_event(&self, id: i64, now: Millis) -> StoreResult<()> {
        let mut tx = self.writer.begin().await?;
        query(&self.sql.end_event)
            .bind(now)
            .bind(now - 1)
            .bind(now)
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        Self::ending(&self.sql.end_products_of_event, id, now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A statement of [`Statements::new`]'s `end_product`, ending at `now` the products whose
    /// `id` or `event_id` (as the statement says) is `key`.
    fn ending(statement: &Arc<str>, key: i64, now: Millis) -> AnyQuery<'static> {
        query(statement)
            .bind(now)
            .bind(now - 1)
            .bind(now)
            .bind(now)
            .bind(key)
            .bind(now)
    }

    /// See [`crate::store::Store::product`].
    pub async fn product(&self, id: ProductId) -> StoreResult<Option<Product>> {
        let row = query(&self.sql.product)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(rows::product).transpose()?)
    }

    /// A product just created: it must be there.
    pub async fn created_product(&self, id: ProductId) -> StoreResult<Product> {
        self.product(id)
            .await?
            .ok_or_else(|| sqlx::Error::RowNotFound.into())
    }

    /// See [`crate::store::Store::products`].
    pub async fn products(&self) -> StoreResult<Vec<Product>> {
        let rows = query(&self.sql.products).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(rows::product).collect::<Result<_, _>>()?)
    }

    /// See [`crate::store::Store::holdings`].
    pub async fn holdings(&self, product: ProductId) -> StoreResult<Vec<(UserId, u32)>> {
        let rows = query(&self.sql.holdings)
            .bind(product.0)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let units: i64 = row.try_get("units")?;
                Ok((
                    UserId(row.try_get("user_id")?),
                    u32::try_from(units).unwrap_or(u32::MAX),
                ))
            })
            .collect()
    }

    /// See [`crate::store::Store::overdue_orders`].
    pub async fn overdue_orders(&self, now: Millis, limit: i64) -> StoreResult<Vec<Overdue>> {
        let rows = query(&self.sql.overdue_orders)
            .bind(now)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Overdue {
                    id: OrderId(row.try_get(0)?),
                    pay_started: row.try_get::<Option<i64>, _>(1)?.is_some(),
                })
            })
            .collect()
    }

    /// See [`crate::store::Store::mark_pay_started`].
    pub async fn mark_pay_started(&self, id: OrderId, now: Millis) -> StoreResult<()> {
        query(&self.sql.mark_pay_started)
            .bind(now)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// See [`crate::store::Store::record_payment`].
    pub async fn record_payment(&self, record: &PaymentRecord<'_>) -> StoreResult<bool> {
        let done = query(&self.sql.insert_payment_record)
            .bind(record.key.to_owned())
            .bind(record.order.0)
            .bind(record.provider.to_owned())
            .bind(record.trade_no.to_owned())
            .bind(record.amount.cents())
            .bind(record.trade_status.to_owned())
            .bind(i64::from(record.paid))
            .bind(record.received_at)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// See [`crate::store::Store::record_audit`].
    pub async fn record_audit(&self, entry: &AuditEntry) -> StoreResult<()> {
        query(&self.sql.insert_audit)
            .bind(entry.actor.clone())
            .bind(entry.action.clone())
            .bind(entry.at)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// See [`crate::store::Store::audit_log`].
    pub async fn audit_log(&self, limit: i64) -> StoreResult<Vec<AuditEntry>> {
        let rows = query(&self.sql.audit_log)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(AuditEntry {
                    actor: row.try_get(0)?,
                    action: row.try_get(1)?,
                    at: row.try_get(2)?,
                })
            })
            .collect()
    }

    /// See [`crate::store::Store::revoke_session`].
    pub async fn revoke_session(&self, revoked: &RevokedSession, now: Millis) -> StoreResult<()> {
        query(&self.sql.revoke_session)
            .bind(revoked.session_id.clone())
            .bind(revoked.expires_at)
            .bind(now)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// See [`crate::store::Store::revoked_sessions`].
    pub async fn revoked_sessions(
        &self,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<(i64, RevokedSession)>> {
        self.rows_after(&self.sql.revoked_sessions, after, limit, |row| {
            Ok(RevokedSession {
                session_id: row.try_get(1)?,
                expires_at: row.try_get(2)?,
            })
        })
        .await
    }

    /// See [`crate::store::Store::forget_revoked_sessions`].
    pub async fn forget_revoked_sessions(&self, now: Millis) -> StoreResult<u64> {
        let mut forgotten = 0;
        for statement in [
            &self.sql.forget_revoked_sessions,
            &self.sql.forget_user_cutoffs,
        ] {
            let done = query(statement).bind(now).execute(&self.writer).await?;
            forgotten += done.rows_affected();
        }
        Ok(forgotten)
    }

    /// See [`crate::store::Store::payments_of`].
    pub async fn payments_of(&self, order: OrderId, limit: i64) -> StoreResult<Vec<KeptPayment>> {
        let rows = query(&self.sql.payments_of)
            .bind(order.0)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(rows::payment).collect::<Result<_, _>>()?)
    }

    /// See [`crate::store::Store::refunds_due`].
    pub async fn refunds_due(&self, after: OrderId, limit: i64) -> StoreResult<Vec<OrderId>> {
        let rows = query(&self.sql.refunds_due)
            .bind(after.0)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        ids_of(&rows)
    }

    /// See [`crate::store::Store::mark_refunded`].
    pub async fn mark_refunded(&self, id: OrderId, now: Millis) -> StoreResult<bool> {
        let done = query(&self.sql.mark_refunded)
            .bind(now)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// See [`crate::store::Store::cancelled_orders`].
    pub async fn cancelled_orders(&self, product: ProductId) -> StoreResult<Vec<OrderId>> {
        let rows = query(&self.sql.cancelled_orders)
            .bind(product.0)
            .fetch_all(&self.pool)
            .await?;
        ids_of(&rows)
    }

    /// See [`crate::store::Store::paid_units`].
    pub async fn paid_units(&self, product: ProductId) -> StoreResult<i64> {
        let row = query(&self.sql.paid_units)
            .bind(product.0)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("units")?)
    }

    /// See [`crate::store::Store::search_orders`]. The statement has one condition per filter
    /// given, each a literal of this function; only values are bound. A search by product and
    /// status reads its page off the index that ends with the id, newest first; the others
    /// sort what they find: a buyer's orders, a product's, or (the costliest, for an operator's
    /// occasional look) every order in one status.
    pub async fn search_orders(&self, search: &OrderSearch) -> StoreResult<Vec<Order>> {
        let mut conditions = Vec::new();
        let mut values = Vec::new();
        if let Some(user) = search.user {
            conditions.push("user_id = ?");
            values.push(user.0);
        }
        if let Some(product) = search.product {
            conditions.push("product_id = ?");
            values.push(product.0);
        }
        if let Some(status) = search.status {
            conditions.push(status_condition(status));
        }
        if let Some(before) = search.before {
            conditions.push("id < ?");
            values.push(before.0);
        }
        values.push(search.limit);
        let filter = if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        };
        let text = format!(
            concat!(
                "SELECT ",
                order_columns!(),
                " FROM orders{} ORDER BY id DESC LIMIT ?"
            ),
            filter
        );
        let sql: Arc<str> = self.dialect.placeholders(&text).into();
        let rows = values
            .into_iter()
            .fold(query(&sql), |select, value| select.bind(value))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(rows::order).collect::<Result<_, _>>()?)
    }

    /// See [`crate::store::Store::stored_among`].
    pub async fn stored_among(&self, candidates: &[OrderId]) -> StoreResult<Vec<OrderId>> {
        let mut conn = self.pool.acquire().await?;
        self.stored_ids(&mut conn, candidates).await
    }

    /// Which of `ids` are stored, seen from `conn` (inside a transaction or not).
    pub async fn stored_ids(
        &self,
        conn: &mut AnyConnection,
        ids: &[OrderId],
    ) -> StoreResult<Vec<OrderId>> {
        let mut stored = Vec::new();
        for chunk in ids.chunks(INSERT_ROWS) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql: Arc<str> = self
                .dialect
                .placeholders(&format!("SELECT id FROM orders WHERE id IN ({marks})"))
                .into();
            let select = chunk
                .iter()
                .fold(query(&sql), |select, id| select.bind(id.0));
            stored.extend(ids_of(&select.fetch_all(&mut *conn).await?)?);
        }
        Ok(stored)
    }

    /// Who holds the idempotency keys of `orders` (those without a key are left out), seen
    /// from `conn`, inside the transaction that stores them.
    pub async fn key_holders(
        &self,
        conn: &mut AnyConnection,
        orders: &[&Order],
    ) -> StoreResult<KeyHolders> {
        let mut holders = KeyHolders::new();
        let keyed: Vec<(UserId, &str)> = orders
            .iter()
            .filter_map(|o| Some((o.user_id, o.idempotency_key.as_ref()?.as_str())))
            .collect();
        // Buyers and keys each in a list: the pairs' index on (user_id, idempotency_key) finds
        // the rows, and the pairs no order asked for are dropped here.
        let wanted: HashSet<(UserId, &str)> = keyed.iter().copied().collect();
        for chunk in keyed.chunks(INSERT_ROWS) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql: Arc<str> = self
                .dialect
                .placeholders(&format!(
                    "SELECT id, created_at, user_id, idempotency_key FROM orders \
                     WHERE user_id IN ({marks}) AND idempotency_key IN ({marks})"
                ))
                .into();
            let select = chunk
                .iter()
                .fold(query(&sql), |select, (user, _)| select.bind(user.0));
            let select = chunk
                .iter()
                .fold(select, |select, (_, key)| select.bind((*key).to_owned()));
            for row in select.fetch_all(&mut *conn).await? {
                let user = UserId(row.try_get(2)?);
                let key: String = row.try_get(3)?;
                if wanted.contains(&(user, key.as_str())) {
                    let holder = (OrderId(row.try_get(0)?), row.try_get(1)?);
                    holders.insert((user, key), holder);
                }
            }
        }
        Ok(holders)
    }

    /// See [`crate::store::Store::keyed_orders`].
    pub async fn keyed_orders(&self, product: ProductId, since: Millis) -> StoreResult<Vec<Order>> {
        let rows = query(&self.sql.keyed_orders)
            .bind(product.0)
            .bind(since)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(rows::order).collect::<Result<_, _>>()?)
    }

    /// See [`crate::store::Store::pay_answer`].
    pub async fn pay_answer(
        &self,
        user: UserId,
        key: &IdempotencyKey,
    ) -> StoreResult<Option<PayAnswer>> {
        let row = query(&self.sql.pay_answer)
            .bind(user.0)
            .bind(key.as_str().to_owned())
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(PayAnswer {
            user,
            key: key.clone(),
            order: OrderId(row.try_get(0)?),
            channel: row.try_get(1)?,
            pay_url: row.try_get(2)?,
            created_at: row.try_get(3)?,
        }))
    }

    /// See [`crate::store::Store::keep_pay_answer`].
    pub async fn keep_pay_answer(&self, answer: &PayAnswer) -> StoreResult<()> {
        query(&self.sql.insert_pay_answer)
            .bind(answer.user.0)
            .bind(answer.key.as_str().to_owned())
            .bind(answer.order.0)
            .bind(answer.channel.clone())
            .bind(answer.pay_url.clone())
            .bind(answer.created_at)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// See [`crate::store::Store::forget_pay_answers`].
    pub async fn forget_pay_answers(&self, before: Millis) -> StoreResult<u64> {
        let done = query(&self.sql.forget_pay_answers)
            .bind(before)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }

    /// See [`crate::store::Store::put_image`].
    pub async fn put_image(&self, image: &Image, now: Millis) -> StoreResult<bool> {
        let done = query(&self.sql.insert_image)
            .bind(image.id.to_string())
            .bind(image.format.content_type())
            .bind(image.bytes.to_vec())
            .bind(image.len() as i64)
            .bind(now)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// See [`crate::store::Store::image`].
    pub async fn image(&self, id: ImageId) -> StoreResult<Option<Image>> {
        let row = query(&self.sql.image)
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let content_type: String = row.try_get(0)?;
        let format = ImageFormat::from_content_type(&content_type)
            .ok_or_else(|| sqlx::Error::Decode("invalid content_type in database".into()))?;
        let bytes: Vec<u8> = row.try_get(1)?;
        Ok(Some(Image {
            id,
            format,
            bytes: bytes.into(),
        }))
    }

    /// See [`crate::store::Store::image_ids`].
    pub async fn image_ids(&self, limit: i64) -> StoreResult<Vec<ImageId>> {
        let rows = query(&self.sql.image_ids)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let text: String = row.try_get(0)?;
                ImageId::parse(&text).ok_or_else(|| {
                    sqlx::Error::Decode("invalid image id in database".into()).into()
                })
            })
            .collect()
    }

    /// Runs an insert made with [`Dialect::insert_with_id`]: the new id, or `None` when the
    /// insert skipped an existing row.
    async fn insert_id<'c, E>(&self, executor: E, insert: AnyQuery<'_>) -> StoreResult<Option<i64>>
    where
        E: Executor<'c, Database = Any>,
    {
        if self.dialect.returns_ids() {
            let row = insert.fetch_optional(executor).await?;
            Ok(row.map(|r| r.try_get::<i64, _>(0)).transpose()?)
        } else {
            let done = insert.execute(executor).await?;
            Ok(if done.rows_affected() == 0 {
                None
            } else {
                done.last_insert_id()
            })
        }
    }

    /// An insert that skips nothing, so it must yield an id.
    async fn must_insert_id(&self, insert: AnyQuery<'_>) -> StoreResult<i64> {
        let id = self.insert_id(&self.writer, insert).await?;
        id.ok_or_else(|| sqlx::Error::Protocol("the insert returned no id".into()).into())
    }
}
