//! Reading rows back into domain types. Every column is read as `i64` or text, the types all
//! three databases share; values that break a domain rule are reported as decode errors.

use crate::domain::{
    Money, Order, OrderId, OrderStatus, Product, ProductId, Quantity, SaleEvent, SaleWindow, UserId,
};
use crate::store::UserRecord;
use rusqlite::types::Type;
use sqlx::Row;
use sqlx::any::AnyRow;

/// Column lists as macros, so each statement can be spelled out once with `concat!`.
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
pub(super) use {order_columns, product_columns};

/// A row of either driver, read column by column: sqlx's for every database, SQLite's own for
/// its point reads (see `SqliteReads`). One decoder per domain type serves both.
pub trait Columns {
    type Error;
    fn int(&self, column: &str) -> Result<i64, Self::Error>;
    fn maybe_int(&self, column: &str) -> Result<Option<i64>, Self::Error>;
    fn text(&self, column: &str) -> Result<String, Self::Error>;
    /// A value that breaks a domain rule.
    fn invalid(&self, column: &str) -> Self::Error;
}

impl Columns for AnyRow {
    type Error = sqlx::Error;
    fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
        self.try_get(column)
    }
    fn maybe_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(column)
    }
    fn text(&self, column: &str) -> Result<String, sqlx::Error> {
        self.try_get(column)
    }
    fn invalid(&self, column: &str) -> sqlx::Error {
        sqlx::Error::Decode(format!("invalid {column} in database").into())
    }
}

impl Columns for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn int(&self, column: &str) -> rusqlite::Result<i64> {
        self.get(column)
    }
    fn maybe_int(&self, column: &str) -> rusqlite::Result<Option<i64>> {
        self.get(column)
    }
    fn text(&self, column: &str) -> rusqlite::Result<String> {
        self.get(column)
    }
    fn invalid(&self, column: &str) -> rusqlite::Error {
        let index = self.as_ref().column_index(column).unwrap_or_default();
        let reason = format!("invalid {column} in database");
        rusqlite::Error::FromSqlConversionFailure(index, Type::Integer, reason.into())
    }
}

fn money<R: Columns>(row: &R, column: &str) -> Result<Money, R::Error> {
    Money::from_cents(row.int(column)?).map_err(|_| row.invalid(column))
}

fn window<R: Columns>(row: &R, start: &str, end: &str) -> Result<SaleWindow, R::Error> {
    SaleWindow::new(row.int(start)?, row.int(end)?).map_err(|_| row.invalid(start))
}

fn quantity<R: Columns>(row: &R, column: &str) -> Result<Quantity, R::Error> {
    Quantity::parse(row.int(column)?).map_err(|_| row.invalid(column))
}

pub fn product<R: Columns>(row: &R) -> Result<Product, R::Error> {
    Ok(Product {
        id: ProductId(row.int("id")?),
        event_id: row.maybe_int("event_id")?,
        name: row.text("name")?,
        image_url: row.text("image_url")?,
        original_price: money(row, "original_price_cents")?,
        sale_price: money(row, "sale_price_cents")?,
        stock_total: row.int("stock_total")?,
        stock: row.int("stock")?,
        per_user_limit: quantity(row, "per_user_limit")?.get(),
        window: window(row, "sale_starts_at", "sale_ends_at")?,
        created_at: row.int("created_at")?,
        updated_at: row.int("updated_at")?,
    })
}

pub fn order<R: Columns>(row: &R) -> Result<Order, R::Error> {
    let status = row.text("status")?;
    Ok(Order {
        id: OrderId(row.int("id")?),
        user_id: UserId(row.int("user_id")?),
        product_id: ProductId(row.int("product_id")?),
        product_name: row.text("product_name")?,
        unit_price: money(row, "unit_price_cents")?,
        quantity: quantity(row, "quantity")?,
        total: money(row, "total_cents")?,
        status: OrderStatus::parse(&status).ok_or_else(|| row.invalid("status"))?,
        created_at: row.int("created_at")?,
        pay_before: row.int("pay_before")?,
        paid_at: row.maybe_int("paid_at")?,
        cancelled_at: row.maybe_int("cancelled_at")?,
    })
}

pub fn event<R: Columns>(row: &R) -> Result<SaleEvent, R::Error> {
    Ok(SaleEvent {
        id: row.int("id")?,
        title: row.text("title")?,
        window: window(row, "starts_at", "ends_at")?,
    })
}

pub fn user<R: Columns>(row: &R) -> Result<UserRecord, R::Error> {
    Ok(UserRecord {
        id: UserId(row.int("id")?),
        username: row.text("username")?,
        password_hash: row.text("password_hash")?,
    })
}
