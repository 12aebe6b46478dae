//! The [`Store`] for every SQL database: SQLite (embedded), PostgreSQL and MySQL/MariaDB,
//! through sqlx's `Any` driver (but SQLite's order batches, payments, cancels and order reads:
//! see [`SqliteOrders`] and [`SqliteReads`]). The
//! statements are written once; [`Dialect`] adapts the few spellings that differ. All values
//! cross as `i64` or text, which every driver supports.

mod dialect;
mod rows;
mod sqlite_orders;
mod sqlite_reads;
mod status_batches;
mod wal_flush;

pub use dialect::Dialect;
pub use sqlite_orders::SqliteOrders;
pub use sqlite_reads::SqliteReads;
use status_batches::StatusBatches;
pub use status_batches::StatusChange;
pub use wal_flush::WalFlush;

use super::{NewProduct, Persisted, ProductPatch, Store, StoreError, StoreResult, UserRecord};
use crate::domain::{
    Millis, Money, Order, OrderId, Product, ProductId, SaleEvent, SaleWindow, UserId, Username,
};
use async_trait::async_trait;
use rows::{order_columns, product_columns};
use sqlx::any::AnyArguments;
use sqlx::migrate::MigrateDatabase;
use sqlx::query::Query;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Any, AnyPool, AssertSqlSafe, Executor, Row};
use std::collections::{BTreeMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use tokio::runtime::RuntimeFlavor;

/// The SQL [`Store`].
pub struct SqlStore {
    /// Reads (but SQLite's of orders), and writes too on a database server.
    pool: AnyPool,
    /// Writes. On SQLite one connection that is never shared, for every write but orders,
    /// payments and cancels: the file has a single writer anyway, and a connection that alone
    /// writes keeps its page cache and prepared statements warm; writers taking turns on
    /// pooled connections made each one re-read the pages the previous one had changed.
    /// SQLite's own writing connection holds this one while it writes, so the two take turns
    /// at the file's write lock.
    writer: AnyPool,
    /// What SQLite needs beside sqlx. `None` on a database server.
    sqlite: Option<SqliteFile>,
    dialect: Dialect,
    sql: Statements,
}

/// What this process keeps for its SQLite file beside sqlx's connections.
struct SqliteFile {
    /// The writers commit without syncing the log; every write waits here until the log is
    /// on disk.
    flush: WalFlush,
    /// Order batches, payments and cancels, which bypass sqlx.
    orders: SqliteOrders,
    /// Payments and cancels waiting to be written together.
    changes: StatusBatches,
    /// Reads of orders, which bypass sqlx.
    reads: SqliteReads,
}

/// Every statement, in the connected database's dialect, prepared once at start-up.
struct Statements {
    insert_setting: Arc<str>,
    setting: Arc<str>,
    insert_user: Arc<str>,
    user_by_name: Arc<str>,
    insert_event: Arc<str>,
    events: Arc<str>,
    event: Arc<str>,
    insert_product: Arc<str>,
    update_product: Arc<str>,
    add_stock: Arc<str>,
    product: Arc<str>,
    products: Arc<str>,
    holdings: Arc<str>,
    take_stock: Arc<str>,
    order: Arc<str>,
    orders_of_user: Arc<str>,
    mark_paid: Arc<str>,
    cancel_order: Arc<str>,
    return_stock: Arc<str>,
    overdue_orders: Arc<str>,
    cancelled_orders: Arc<str>,
}

impl Statements {
    fn new(d: Dialect) -> Self {
        let sql = |text: &str| -> Arc<str> { d.placeholders(text).into() };
        Self {
            insert_setting: sql(&d.insert_new("settings (name, value) VALUES (?, ?)", "name")),
            setting: sql("SELECT value FROM settings WHERE name = ?"),
            insert_user: sql(&d.insert_with_id(&d.insert_new(
                "users (username, password_hash, created_at) VALUES (?, ?, ?)",
                "username",
            ))),
            user_by_name: sql("SELECT id, username, password_hash FROM users WHERE username = ?"),
            insert_event: sql(&d.insert_with_id(
                "INSERT INTO sale_events (title, starts_at, ends_at, created_at) \
                 VALUES (?, ?, ?, ?)",
            )),
            events: sql("SELECT id, title, starts_at, ends_at FROM sale_events \
                         ORDER BY starts_at, id"),
            event: sql("SELECT id, title, starts_at, ends_at FROM sale_events WHERE id = ?"),
            insert_product: sql(&d.insert_with_id(
                "INSERT INTO products (event_id, name, image_url, original_price_cents, \
                 sale_price_cents, stock_total, stock, per_user_limit, sale_starts_at, \
                 sale_ends_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )),
            update_product: sql("UPDATE products SET name = COALESCE(?, name), \
                 image_url = COALESCE(?, image_url), \
                 original_price_cents = COALESCE(?, original_price_cents), \
                 sale_price_cents = COALESCE(?, sale_price_cents), \
                 per_user_limit = COALESCE(?, per_user_limit), \
                 sale_starts_at = COALESCE(?, sale_starts_at), \
                 sale_ends_at = COALESCE(?, sale_ends_at), updated_at = ? WHERE id = ?"),
            add_stock: sql(
                "UPDATE products SET stock_total = stock_total + ?, stock = stock + ?, \
                 updated_at = ? WHERE id = ?",
            ),
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
            take_stock: sql(TAKE_STOCK),
            order: sql(ORDER),
            orders_of_user: sql(ORDERS_OF_USER),
            mark_paid: sql(MARK_PAID),
            cancel_order: sql(CANCEL_ORDER),
            return_stock: sql(RETURN_STOCK),
            overdue_orders: sql(
                "SELECT id FROM orders WHERE status = 'awaiting_payment' AND pay_before <= ? \
                 ORDER BY pay_before LIMIT ?",
            ),
            cancelled_orders: sql(
                "SELECT id FROM orders WHERE product_id = ? AND status = 'cancelled'",
            ),
        }
    }
}

type AnyQuery<'q> = Query<'q, Any, AnyArguments>;

// Statements SQLite's own connections run too ([`SqliteOrders`], [`SqliteReads`]), spelled once
// for both drivers.
const TAKE_STOCK: &str = "UPDATE products SET stock = stock - ? WHERE id = ? AND stock >= ?";
const MARK_PAID: &str = "UPDATE orders SET status = 'paid', paid_at = ? \
    WHERE id = ? AND status = 'awaiting_payment' AND pay_before > ?";
const CANCEL_ORDER: &str = "UPDATE orders SET status = 'cancelled', cancelled_at = ? \
    WHERE id = ? AND status = 'awaiting_payment'";
const RETURN_STOCK: &str = "UPDATE products SET stock = stock + ?, updated_at = ? WHERE id = ?";
const ORDER: &str = concat!("SELECT ", order_columns!(), " FROM orders WHERE id = ?");
const ORDERS_OF_USER: &str = concat!(
    "SELECT ",
    order_columns!(),
    " FROM orders WHERE user_id = ? ORDER BY created_at DESC, id DESC"
);

/// Rows per multi-row statement: 10 parameters each stays under every driver's limit.
const INSERT_ROWS: usize = 500;

/// Units of an order, as the database counts them.
pub(super) fn units_of(order: &Order) -> i64 {
    i64::from(order.quantity.get())
}

/// How often a transaction that lost a conflict with a concurrent one is tried again.
const CONFLICT_RETRIES: usize = 5;

/// Runs a transaction again when the database aborted it for a conflict with a concurrent one
/// (MySQL/InnoDB deadlocks between two servers' order batches, PostgreSQL serialization
/// failures, SQLite busy). Such an abort rolled everything back, so trying again is safe.
async fn retry_conflicts<T, F, Fut>(mut attempt: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(StoreError::Sql(e)) if tries < CONFLICT_RETRIES && is_conflict(&e) => {
                tries += 1;
                tracing::warn!(error = %e, tries, "transaction conflict: retrying");
                tokio::time::sleep(std::time::Duration::from_millis(5 << tries)).await;
            }
            other => return other,
        }
    }
}

fn is_conflict(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    // SQLSTATE 40001 (MySQL deadlock, PostgreSQL serialization failure), 40P01 (PostgreSQL
    // deadlock), SQLite's SQLITE_BUSY (5) and its extended codes. And a key another writer
    // stored first (PostgreSQL 23505, MySQL 23000, SQLite 1555/2067): only an order batch
    // inserts without skipping existing keys, and it finds them stored when tried again.
    matches!(
        db.code().as_deref(),
        Some("40001" | "40P01" | "5" | "261" | "517" | "23505" | "23000" | "1555" | "2067")
    )
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

fn query(sql: &Arc<str>) -> AnyQuery<'static> {
    // Every statement is assembled at start-up from literals in this module; no input reaches
    // the SQL text, only bound parameters.
    sqlx::query(AssertSqlSafe(sql.clone()))
}

impl SqlStore {
    /// Connects to `url` (creating a SQLite file if needed) with at most `max_connections`
    /// (a per-dialect default when `None`), and brings the schema up to date.
    pub async fn connect(url: &str, max_connections: Option<u32>) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::from_url(url)?;
        anyhow::ensure!(
            dialect != Dialect::Sqlite
                || !(url.contains(":memory:") || url.contains("mode=memory")),
            "an in-memory SQLite database cannot keep accepted orders; give a file"
        );
        // A database server without the named database: make it, so a first start needs no
        // manual step. (SQLite files are made by the driver.) Without the rights to, the
        // connection below fails with the server's own reason.
        if dialect != Dialect::Sqlite && matches!(Any::database_exists(url).await, Ok(false)) {
            Any::create_database(url).await?;
        }
        let driver_url = dialect.driver_url(url);
        let pool = dialect
            .pool_options(max_connections.unwrap_or(dialect.pool_size()))
            .connect(&driver_url)
            .await?;
        let applied: HashSet<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
            .fetch_all(&pool)
            .await
            .map_or_else(|_| HashSet::new(), HashSet::from_iter); // none yet: no table yet
        dialect.migrator().run(&pool).await?;
        for migration in dialect.migrator().iter() {
            if !applied.contains(&migration.version) {
                tracing::info!(
                    version = migration.version,
                    "applied migration: {}",
                    migration.description
                );
            }
        }
        let (writer, sqlite) = if dialect == Dialect::Sqlite {
            let file = SqliteConnectOptions::from_str(&driver_url)?
                .get_filename()
                .to_owned();
            let writer = Dialect::sqlite_writer_options()
                .connect(&driver_url)
                .await?;
            let sqlite = SqliteFile {
                orders: SqliteOrders::open(&file)?,
                changes: StatusBatches::default(),
                reads: SqliteReads::new(&file),
                flush: WalFlush::new(file),
            };
            (writer, Some(sqlite))
        } else {
            (pool.clone(), None)
        };
        Ok(Self {
            pool,
            writer,
            sqlite,
            dialect,
            sql: Statements::new(dialect),
        })
    }

    /// The database family this store speaks.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Waits until what this caller committed through the writer is on disk: every write
    /// calls this before it reports success.
    async fn durable(&self) -> StoreResult<()> {
        match &self.sqlite {
            Some(sqlite) => sqlite
                .flush
                .flushed()
                .await
                .map_err(|e| sqlx::Error::Io(e).into()),
            None => Ok(()),
        }
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

    /// One batch on a database server, where each statement is a round trip (SQLite's go
    /// through [`SqliteOrders`]), in one transaction, with a handful of statements whatever
    /// its size: which ids are stored already (redeliveries), one guarded stock update per
    /// product for all of its new orders (order by order only when a product cannot cover the
    /// whole batch), then multi-row inserts. A concurrent writer storing one of these ids
    /// first makes an insert fail on the key; the whole batch is then tried again and sees it
    /// as stored.
    async fn try_insert_orders(&self, orders: &[Order]) -> StoreResult<Vec<Persisted>> {
        let mut tx = self.writer.begin().await?;
        let ids: Vec<OrderId> = orders.iter().map(|o| o.id).collect();
        let mut seen: HashSet<OrderId> =
            self.stored_ids(&mut tx, &ids).await?.into_iter().collect();
        let mut outcomes = vec![Persisted::Duplicate; orders.len()];
        let mut by_product: BTreeMap<ProductId, Vec<usize>> = BTreeMap::new();
        for (i, order) in orders.iter().enumerate() {
            if seen.insert(order.id) {
                by_product.entry(order.product_id).or_default().push(i);
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
            let rows = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
            let sql: Arc<str> = self
                .dialect
                .placeholders(&format!(
                    "INSERT INTO orders (id, user_id, product_id, product_name, \
                     unit_price_cents, quantity, total_cents, status, created_at, pay_before) \
                     VALUES {rows}"
                ))
                .into();
            let mut insert = query(&sql);
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
                    .bind(o.pay_before);
                outcomes[i] = Persisted::Inserted;
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    /// Takes `units` from a product's stock if it has them. True when taken.
    async fn take_stock(
        &self,
        tx: &mut sqlx::Transaction<'_, Any>,
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

    /// Which of `ids` are stored, seen from `conn` (inside a transaction or not).
    async fn stored_ids(
        &self,
        conn: &mut sqlx::AnyConnection,
        ids: &[OrderId],
    ) -> StoreResult<Vec<OrderId>> {
        let mut stored = Vec::new();
        for chunk in ids.chunks(INSERT_ROWS) {
            let select = self.select_ids_among(chunk);
            stored.extend(ids_of(&select.fetch_all(&mut *conn).await?)?);
        }
        Ok(stored)
    }

    /// `SELECT id FROM orders WHERE id IN (…)` for `chunk`.
    fn select_ids_among(&self, chunk: &[OrderId]) -> AnyQuery<'static> {
        let marks = vec!["?"; chunk.len()].join(", ");
        let sql: Arc<str> = self
            .dialect
            .placeholders(&format!("SELECT id FROM orders WHERE id IN ({marks})"))
            .into();
        chunk
            .iter()
            .fold(query(&sql), |select, id| select.bind(id.0))
    }

    async fn try_cancel_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>> {
        let mut tx = self.writer.begin().await?;
        let cancelled = query(&self.sql.cancel_order)
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
            .bind(i64::from(order.quantity.get()))
            .bind(now)
            .bind(order.product_id.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(order))
    }

    /// Runs a write through SQLite's own connection, in place, once the file's write lock is
    /// this process's turn: taken by holding the sqlx writer's one connection, not fought
    /// over, as SQLite's busy handler backs off for up to 100 ms at a time. When payments and
    /// cancels still went through sqlx, one at a time, they took 95 ms at the median under
    /// `seckill bench --scenario mixed` (256 in flight) with the two connections fighting,
    /// 47 ms taking turns.
    async fn in_turn<T>(&self, write: impl FnOnce() -> rusqlite::Result<T>) -> StoreResult<T> {
        let _turn = self.writer.acquire().await?;
        Ok(in_place(write)?)
    }

    /// A payment or a cancel on SQLite, written in one transaction with every other one
    /// waiting (see [`StatusBatches`]). Whether it was applied; on disk once the log is synced.
    async fn settle(&self, sqlite: &SqliteFile, change: StatusChange) -> StoreResult<bool> {
        let write =
            |changes: Vec<StatusChange>| self.in_turn(move || sqlite.orders.settle(&changes));
        sqlite.changes.settle(change, write).await
    }

    async fn must_insert_id(&self, insert: AnyQuery<'_>) -> StoreResult<i64> {
        let id = self.insert_id(&self.writer, insert).await?;
        self.durable().await?;
        id.ok_or_else(|| sqlx::Error::Protocol("the insert returned no id".into()).into())
    }
}

#[async_trait]
impl Store for SqlStore {
    async fn setting_or_insert(&self, key: &str, proposed: &str) -> StoreResult<String> {
        query(&self.sql.insert_setting)
            .bind(key.to_owned())
            .bind(proposed.to_owned())
            .execute(&self.writer)
            .await?;
        self.durable().await?;
        let row = query(&self.sql.setting)
            .bind(key.to_owned())
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get(0)?)
    }

    async fn create_user(
        &self,
        username: &Username,
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<UserId>> {
        let insert = query(&self.sql.insert_user)
            .bind(username.as_str().to_owned())
            .bind(password_hash.to_owned())
            .bind(now);
        let id = self.insert_id(&self.writer, insert).await?;
        self.durable().await?;
        Ok(id.map(UserId))
    }

    async fn create_users(
        &self,
        usernames: &[Username],
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Vec<Option<UserId>>> {
        let mut tx = self.writer.begin().await?;
        let mut ids = Vec::with_capacity(usernames.len());
        for username in usernames {
            let insert = query(&self.sql.insert_user)
                .bind(username.as_str().to_owned())
                .bind(password_hash.to_owned())
                .bind(now);
            ids.push(self.insert_id(&mut *tx, insert).await?.map(UserId));
        }
        tx.commit().await?;
        self.durable().await?;
        Ok(ids)
    }

    async fn user_by_name(&self, username: &str) -> StoreResult<Option<UserRecord>> {
        let row = query(&self.sql.user_by_name)
            .bind(username.to_owned())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(rows::user).transpose()?)
    }

    async fn create_event(
        &self,
        title: &str,
        window: SaleWindow,
        now: Millis,
    ) -> StoreResult<SaleEvent> {
        let insert = query(&self.sql.insert_event)
            .bind(title.to_owned())
            .bind(window.start)
            .bind(window.end)
            .bind(now);
        let id = self.must_insert_id(insert).await?;
        Ok(SaleEvent {
            id,
            title: title.to_owned(),
            window,
        })
    }

    async fn events(&self) -> StoreResult<Vec<SaleEvent>> {
        let rows = query(&self.sql.events).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(rows::event).collect::<Result<_, _>>()?)
    }

    async fn event(&self, id: i64) -> StoreResult<Option<SaleEvent>> {
        let row = query(&self.sql.event)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(rows::event).transpose()?)
    }

    async fn create_product(&self, p: &NewProduct, now: Millis) -> StoreResult<Product> {
        let insert = query(&self.sql.insert_product)
            .bind(p.event_id)
            .bind(p.name.clone())
            .bind(p.image_url.clone())
            .bind(p.original_price.cents())
            .bind(p.sale_price.cents())
            .bind(p.stock)
            .bind(p.stock)
            .bind(i64::from(p.per_user_limit))
            .bind(p.window.start)
            .bind(p.window.end)
            .bind(now)
            .bind(now);
        let id = self.must_insert_id(insert).await?;
        self.product(ProductId(id))
            .await?
            .ok_or_else(|| sqlx::Error::RowNotFound.into())
    }

    async fn update_product(
        &self,
        id: ProductId,
        patch: &ProductPatch,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        query(&self.sql.update_product)
            .bind(patch.name.clone())
            .bind(patch.image_url.clone())
            .bind(patch.original_price.map(Money::cents))
            .bind(patch.sale_price.map(Money::cents))
            .bind(patch.per_user_limit.map(i64::from))
            .bind(patch.window.map(|w| w.start))
            .bind(patch.window.map(|w| w.end))
            .bind(now)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        self.durable().await?;
        self.product(id).await
    }

    async fn add_stock(
        &self,
        id: ProductId,
        quantity: i64,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        query(&self.sql.add_stock)
            .bind(quantity)
            .bind(quantity)
            .bind(now)
            .bind(id.0)
            .execute(&self.writer)
            .await?;
        self.durable().await?;
        self.product(id).await
    }

    async fn product(&self, id: ProductId) -> StoreResult<Option<Product>> {
        let row = query(&self.sql.product)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(rows::product).transpose()?)
    }

    async fn products(&self) -> StoreResult<Vec<Product>> {
        let rows = query(&self.sql.products).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(rows::product).collect::<Result<_, _>>()?)
    }

    async fn holdings(&self, product: ProductId) -> StoreResult<Vec<(UserId, u32)>> {
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

    async fn insert_orders(&self, orders: &[Order]) -> StoreResult<Vec<Persisted>> {
        let outcomes = match &self.sqlite {
            Some(sqlite) => self.in_turn(|| sqlite.orders.insert(orders)).await?,
            None => retry_conflicts(|| self.try_insert_orders(orders)).await?,
        };
        self.durable().await?;
        Ok(outcomes)
    }

    async fn order(&self, id: OrderId) -> StoreResult<Option<Order>> {
        if let Some(sqlite) = &self.sqlite {
            return Ok(sqlite.reads.order(id)?);
        }
        let row = query(&self.sql.order)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(rows::order).transpose()?)
    }

    async fn orders_of_user(&self, user: UserId) -> StoreResult<Vec<Order>> {
        if let Some(sqlite) = &self.sqlite {
            return Ok(sqlite.reads.orders_of_user(user)?);
        }
        let rows = query(&self.sql.orders_of_user)
            .bind(user.0)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(rows::order).collect::<Result<_, _>>()?)
    }

    async fn mark_paid(&self, id: OrderId, now: Millis) -> StoreResult<bool> {
        let paid = match &self.sqlite {
            Some(sqlite) => {
                let pay = StatusChange::Pay { id, at: now };
                self.settle(sqlite, pay).await?
            }
            None => {
                let paid = query(&self.sql.mark_paid)
                    .bind(now)
                    .bind(id.0)
                    .bind(now)
                    .execute(&self.writer)
                    .await?;
                paid.rows_affected() == 1
            }
        };
        self.durable().await?;
        Ok(paid)
    }

    async fn cancel_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>> {
        let Some(sqlite) = &self.sqlite else {
            // A database server: its commit is durable when it answers.
            return retry_conflicts(|| self.try_cancel_order(id, now)).await;
        };
        let cancel = StatusChange::Cancel { id, at: now };
        if !self.settle(sqlite, cancel).await? {
            return Ok(None);
        }
        self.durable().await?;
        // Read back once committed: the batch says only which changes applied.
        self.order(id).await
    }

    async fn overdue_orders(&self, now: Millis, limit: i64) -> StoreResult<Vec<OrderId>> {
        let rows = query(&self.sql.overdue_orders)
            .bind(now)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        ids_of(&rows)
    }

    async fn cancelled_orders(&self, product: ProductId) -> StoreResult<Vec<OrderId>> {
        let rows = query(&self.sql.cancelled_orders)
            .bind(product.0)
            .fetch_all(&self.pool)
            .await?;
        ids_of(&rows)
    }

    async fn stored_among(&self, candidates: &[OrderId]) -> StoreResult<Vec<OrderId>> {
        let mut conn = self.pool.acquire().await?;
        self.stored_ids(&mut conn, candidates).await
    }
}

/// The first column of each row, as order ids.
fn ids_of(rows: &[sqlx::any::AnyRow]) -> StoreResult<Vec<OrderId>> {
    rows.iter()
        .map(|row| Ok(OrderId(row.try_get(0)?)))
        .collect()
}
