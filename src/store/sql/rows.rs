//! Reading rows back into domain types. Every column is read as `i64` or text, the types all
//! three databases share; values that break a domain rule are reported as decode errors.

use crate::domain::{
    Money, Order, OrderId, OrderStatus, Product, ProductId, Quantity, SaleEvent, SaleWindow, UserId,
};
use crate::store::UserRecord;
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

fn decode_error(what: &str) -> sqlx::Error {
    sqlx::Error::Decode(format!("invalid {what} in database").into())
}

fn money(row: &AnyRow, column: &str) -> Result<Money, sqlx::Error> {
    Money::from_cents(row.try_get(column)?).map_err(|_| decode_error(column))
}

fn window(row: &AnyRow, start: &str, end: &str) -> Result<SaleWindow, sqlx::Error> {
    SaleWindow::new(row.try_get(start)?, row.try_get(end)?).map_err(|_| decode_error(start))
}

fn quantity(row: &AnyRow, column: &str) -> Result<Quantity, sqlx::Error> {
    Quantity::parse(row.try_get(column)?).map_err(|_| decode_error(column))
}

pub fn product(row: &AnyRow) -> Result<Product, sqlx::Error> {
    Ok(Product {
        id: ProductId(row.try_get("id")?),
        event_id: row.try_get("event_id")?,
        name: row.try_get("name")?,
        image_url: row.try_get("image_url")?,
        original_price: money(row, "original_price_cents")?,
        sale_price: money(row, "sale_price_cents")?,
        stock_total: row.try_get("stock_total")?,
        stock: row.try_get("stock")?,
        per_user_limit: quantity(row, "per_user_limit")?.get(),
        window: window(row, "sale_starts_at", "sale_ends_at")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub fn order(row: &AnyRow) -> Result<Order, sqlx::Error> {
    let status: String = row.try_get("status")?;
    Ok(Order {
        id: OrderId(row.try_get("id")?),
        user_id: UserId(row.try_get("user_id")?),
        product_id: ProductId(row.try_get("product_id")?),
        product_name: row.try_get("product_name")?,
        unit_price: money(row, "unit_price_cents")?,
        quantity: quantity(row, "quantity")?,
        total: money(row, "total_cents")?,
        status: OrderStatus::parse(&status).ok_or_else(|| decode_error("status"))?,
        created_at: row.try_get("created_at")?,
        pay_before: row.try_get("pay_before")?,
        paid_at: row.try_get("paid_at")?,
        cancelled_at: row.try_get("cancelled_at")?,
    })
}

pub fn event(row: &AnyRow) -> Result<SaleEvent, sqlx::Error> {
    Ok(SaleEvent {
        id: row.try_get("id")?,
        title: row.try_get("title")?,
        window: window(row, "starts_at", "ends_at")?,
    })
}

pub fn user(row: &AnyRow) -> Result<UserRecord, sqlx::Error> {
    Ok(UserRecord {
        id: UserId(row.try_get("id")?),
        username: row.try_get("username")?,
        password_hash: row.try_get("password_hash")?,
    })
}
