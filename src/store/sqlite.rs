//! The embedded store: one SQLite file in WAL mode. Writes serialize in SQLite anyway, so the
//! order pipeline batches them (group commit) and each batch pays for one fsync.

use super::{NewProduct, Persisted, ProductPatch, Store, StoreResult, UserRecord};
use crate::domain::{
    Millis, Money, Order, OrderId, OrderStatus, Product, ProductId, Quantity, SaleEvent,
    SaleWindow, UserId, Username,
};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use std::str::FromStr;
use std::time::Duration;

/// The SQLite-backed [`Store`].
pub struct SqliteStore {
    pool: SqlitePool,
}

// Column lists as macros, so every query stays a compile-time literal (`concat!`): sqlx only
// takes dynamic SQL strings with an explicit audit, and these need none.
macro_rules! product_columns {
    () => {
        "id, event_id, name, image_url, original_price_cents, sale_price_cents, stock_total, \
         stock, per_user_limit, sale_starts_at, sale_ends_at, created_at, updated_at"
    };
}
macro_rules! order_columns {
    () => {
        "id, user_id, product_id, product_name, unit_price_cents, quantity, total_cents, status, \
         created_at, pay_before, paid_at, cancelled_at"
    };
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `url` and brings its schema up to date.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a committed batch survives power loss, which is the promise behind a 202.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        sqlx::migrate!("migrations/sqlite").run(&pool).await?;
        Ok(Self { pool })
    }
}

fn decode_error(what: &str) -> sqlx::Error {
    sqlx::Error::Decode(format!("invalid {what} in database").into())
}

fn money(row: &SqliteRow, column: &str) -> Result<Money, sqlx::Error> {
    Money::from_cents(row.try_get(column)?).map_err(|_| decode_error(column))
}

fn window(row: &SqliteRow, start: &str, end: &str) -> Result<SaleWindow, sqlx::Error> {
    SaleWindow::new(row.try_get(start)?, row.try_get(end)?).map_err(|_| decode_error(start))
}

fn product_from_row(row: &SqliteRow) -> Result<Product, sqlx::Error> {
    Ok(Product {
        id: ProductId(row.try_get("id")?),
        event_id: row.try_get("event_id")?,
        name: row.try_get("name")?,
        image_url: row.try_get("image_url")?,
        original_price: money(row, "original_price_cents")?,
        sale_price: money(row, "sale_price_cents")?,
        stock_total: row.try_get("stock_total")?,
        stock: row.try_get("stock")?,
        per_user_limit: row.try_get("per_user_limit")?,
        window: window(row, "sale_starts_at", "sale_ends_at")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

fn order_from_row(row: &SqliteRow) -> Result<Order, sqlx::Error> {
    let status: String = row.try_get("status")?;
    let quantity: i64 = row.try_get("quantity")?;
    Ok(Order {
        id: OrderId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        product_id: ProductId(row.try_get("product_id")?),
        product_name: row.try_get("product_name")?,
        unit_price: money(row, "unit_price_cents")?,
        quantity: Quantity::parse(quantity).map_err(|_| decode_error("quantity"))?,
        total: money(row, "total_cents")?,
        status: OrderStatus::parse(&status).ok_or_else(|| decode_error("status"))?,
        created_at: row.try_get("created_at")?,
        pay_before: row.try_get("pay_before")?,
        paid_at: row.try_get("paid_at")?,
        cancelled_at: row.try_get("cancelled_at")?,
    })
}

fn event_from_row(row: &SqliteRow) -> Result<SaleEvent, sqlx::Error> {
    Ok(SaleEvent {
        id: row.try_get("id")?,
        title: row.try_get("title")?,
        window: window(row, "starts_at", "ends_at")?,
    })
}

#[async_trait]
impl Store for SqliteStore {
    async fn setting_or_insert(&self, key: &str, proposed: &str) -> StoreResult<String> {
        sqlx::query("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING")
            .bind(key)
            .bind(proposed)
            .execute(&self.pool)
            .await?;
        Ok(
            sqlx::query_scalar("SELECT value FROM settings WHERE key = ?")
                .bind(key)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn create_user(
        &self,
        username: &Username,
        password_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<UserId>> {
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO users (username, password_hash, created_at) VALUES (?, ?, ?) \
             ON CONFLICT(username) DO NOTHING RETURNING id",
        )
        .bind(username.as_str())
        .bind(password_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(id.map(UserId))
    }

    async fn user_by_name(&self, username: &str) -> StoreResult<Option<UserRecord>> {
        let row = sqlx::query("SELECT id, username, password_hash FROM users WHERE username = ?")
            .bind(username)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row
            .map(|r| -> Result<_, sqlx::Error> {
                Ok(UserRecord {
                    id: UserId(r.try_get("id")?),
                    username: r.try_get("username")?,
                    password_hash: r.try_get("password_hash")?,
                })
            })
            .transpose()?)
    }

    async fn create_event(
        &self,
        title: &str,
        window: SaleWindow,
        now: Millis,
    ) -> StoreResult<SaleEvent> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO sale_events (title, starts_at, ends_at, created_at) VALUES (?, ?, ?, ?) \
             RETURNING id",
        )
        .bind(title)
        .bind(window.start)
        .bind(window.end)
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        Ok(SaleEvent {
            id,
            title: title.to_owned(),
            window,
        })
    }

    async fn events(&self) -> StoreResult<Vec<SaleEvent>> {
        let rows = sqlx::query(
            "SELECT id, title, starts_at, ends_at FROM sale_events ORDER BY starts_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(event_from_row).collect::<Result<_, _>>()?)
    }

    async fn event(&self, id: i64) -> StoreResult<Option<SaleEvent>> {
        let row = sqlx::query("SELECT id, title, starts_at, ends_at FROM sale_events WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(event_from_row).transpose()?)
    }

    async fn create_product(&self, p: &NewProduct, now: Millis) -> StoreResult<Product> {
        let sql = concat!(
            "INSERT INTO products (event_id, name, image_url, original_price_cents, \
             sale_price_cents, stock_total, stock, per_user_limit, sale_starts_at, sale_ends_at, \
             created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             RETURNING ",
            product_columns!()
        );
        let row = sqlx::query(sql)
            .bind(p.event_id)
            .bind(&p.name)
            .bind(&p.image_url)
            .bind(p.original_price.cents())
            .bind(p.sale_price.cents())
            .bind(p.stock)
            .bind(p.stock)
            .bind(p.per_user_limit)
            .bind(p.window.start)
            .bind(p.window.end)
            .bind(now)
            .bind(now)
            .fetch_one(&self.pool)
            .await?;
        Ok(product_from_row(&row)?)
    }

    async fn update_product(
        &self,
        id: ProductId,
        patch: &ProductPatch,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        let sql = concat!(
            "UPDATE products SET name = COALESCE(?, name), image_url = COALESCE(?, image_url), \
             original_price_cents = COALESCE(?, original_price_cents), \
             sale_price_cents = COALESCE(?, sale_price_cents), \
             per_user_limit = COALESCE(?, per_user_limit), \
             sale_starts_at = COALESCE(?, sale_starts_at), \
             sale_ends_at = COALESCE(?, sale_ends_at), updated_at = ? \
             WHERE id = ? RETURNING ",
            product_columns!()
        );
        let row = sqlx::query(sql)
            .bind(&patch.name)
            .bind(&patch.image_url)
            .bind(patch.original_price.map(Money::cents))
            .bind(patch.sale_price.map(Money::cents))
            .bind(patch.per_user_limit)
            .bind(patch.window.map(|w| w.start))
            .bind(patch.window.map(|w| w.end))
            .bind(now)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(product_from_row).transpose()?)
    }

    async fn add_stock(
        &self,
        id: ProductId,
        quantity: i64,
        now: Millis,
    ) -> StoreResult<Option<Product>> {
        let sql = concat!(
            "UPDATE products SET stock_total = stock_total + ?, stock = stock + ?, updated_at = ? \
             WHERE id = ? RETURNING ",
            product_columns!()
        );
        let row = sqlx::query(sql)
            .bind(quantity)
            .bind(quantity)
            .bind(now)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(product_from_row).transpose()?)
    }

    async fn product(&self, id: ProductId) -> StoreResult<Option<Product>> {
        let sql = concat!("SELECT ", product_columns!(), " FROM products WHERE id = ?");
        let row = sqlx::query(sql)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(product_from_row).transpose()?)
    }

    async fn products(&self) -> StoreResult<Vec<Product>> {
        let sql = concat!(
            "SELECT ",
            product_columns!(),
            " FROM products ORDER BY sale_starts_at, id"
        );
        let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
        Ok(rows
            .iter()
            .map(product_from_row)
            .collect::<Result<_, _>>()?)
    }

    async fn holdings(&self, product: ProductId) -> StoreResult<Vec<(UserId, u32)>> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT user_id, SUM(quantity) FROM orders \
             WHERE product_id = ? AND status <> 'cancelled' GROUP BY user_id",
        )
        .bind(product.0)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(user, units)| (UserId(user), u32::try_from(units).unwrap_or(u32::MAX)))
            .collect())
    }

    async fn insert_orders(&self, orders: &[Order]) -> StoreResult<Vec<Persisted>> {
        let mut tx = self.pool.begin().await?;
        let mut outcomes = Vec::with_capacity(orders.len());
        for o in orders {
            let inserted = sqlx::query(
                "INSERT INTO orders (id, user_id, product_id, product_name, unit_price_cents, \
                 quantity, total_cents, status, created_at, pay_before) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING",
            )
            .bind(o.id.0)
            .bind(o.user_id.0)
            .bind(o.product_id.0)
            .bind(&o.product_name)
            .bind(o.unit_price.cents())
            .bind(o.quantity.get())
            .bind(o.total.cents())
            .bind(o.status.as_str())
            .bind(o.created_at)
            .bind(o.pay_before)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 0 {
                outcomes.push(Persisted::Duplicate);
                continue;
            }
            let taken =
                sqlx::query("UPDATE products SET stock = stock - ?1 WHERE id = ?2 AND stock >= ?1")
                    .bind(o.quantity.get())
                    .bind(o.product_id.0)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            if taken == 1 {
                outcomes.push(Persisted::Inserted);
            } else {
                sqlx::query("DELETE FROM orders WHERE id = ?")
                    .bind(o.id.0)
                    .execute(&mut *tx)
                    .await?;
                outcomes.push(Persisted::OutOfStock);
            }
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    async fn order(&self, id: OrderId) -> StoreResult<Option<Order>> {
        let sql = concat!("SELECT ", order_columns!(), " FROM orders WHERE id = ?");
        let row = sqlx::query(sql)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(order_from_row).transpose()?)
    }

    async fn orders_of_user(&self, user: UserId) -> StoreResult<Vec<Order>> {
        let sql = concat!(
            "SELECT ",
            order_columns!(),
            " FROM orders WHERE user_id = ? ORDER BY created_at DESC, id DESC"
        );
        let rows = sqlx::query(sql).bind(user.0).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(order_from_row).collect::<Result<_, _>>()?)
    }

    async fn mark_paid(&self, id: OrderId, now: Millis) -> StoreResult<bool> {
        let paid = sqlx::query(
            "UPDATE orders SET status = 'paid', paid_at = ?1 \
             WHERE id = ?2 AND status = 'awaiting_payment' AND pay_before > ?1",
        )
        .bind(now)
        .bind(id.0)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(paid == 1)
    }

    async fn cancel_order(&self, id: OrderId, now: Millis) -> StoreResult<Option<Order>> {
        let mut tx = self.pool.begin().await?;
        let sql = concat!(
            "UPDATE orders SET status = 'cancelled', cancelled_at = ? \
             WHERE id = ? AND status = 'awaiting_payment' RETURNING ",
            order_columns!()
        );
        let row = sqlx::query(sql)
            .bind(now)
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(order) = row.as_ref().map(order_from_row).transpose()? else {
            return Ok(None);
        };
        sqlx::query("UPDATE products SET stock = stock + ?, updated_at = ? WHERE id = ?")
            .bind(order.quantity.get())
            .bind(now)
            .bind(order.product_id.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(order))
    }

    async fn overdue_orders(&self, now: Millis, limit: i64) -> StoreResult<Vec<OrderId>> {
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM orders WHERE status = 'awaiting_payment' AND pay_before <= ? \
             ORDER BY pay_before LIMIT ?",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(ids.into_iter().map(OrderId).collect())
    }
}
