//! Reading rows back into domain types. Every column is read as `i64` or text, the types all
//! three databases share; values that break a domain rule are reported as decode errors.

use crate::domain::{
    Guard, IdempotencyKey, Money, Order, OrderId, OrderStatus, Product, ProductId, Quantity,
    SaleEvent, SaleWindow, StockBuckets, UserId,
};
use crate::store::{KeptPayment, UserAccount, UserRecord};
use sqlx::any::AnyRow;
use sqlx::{Column, Row};

/// Column lists as macros, so each statement can be spelled out once with `concat!`.
macro_rules! product_columns {
    () => {
        "id, event_id, name, image_url, original_price_cents, sale_price_cents, stock_total, \
         stock, per_user_limit, buckets, sale_starts_at, sale_ends_at, paused_at, \
         gate_loaded_at, created_at, updated_at, \
         COALESCE((SELECT sale_events.guard FROM sale_events \
         WHERE sale_events.id = products.event_id), 'none') AS guard"
    };
}
macro_rules! order_columns {
    () => {
        "id, user_id, product_id, product_name, unit_price_cents, quantity, total_cents, status, \
         created_at, pay_before, paid_at, cancelled_at, pay_started_at, refunded_at, \
         idempotency_key"
    };
}
/// The columns an order is stored with; the rest are set by later changes.
macro_rules! new_order_columns {
    () => {
        "id, user_id, product_id, product_name, unit_price_cents, quantity, total_cents, status, \
         created_at, pay_before, idempotency_key"
    };
}
/// The columns [`account`] reads, in its order.
macro_rules! account_columns {
    () => {
        "id, username, created_at, disabled_at"
    };
}
pub(in crate::store) use {account_columns, new_order_columns, order_columns, product_columns};

/// A row of either driver, read by position: sqlx's for every database, SQLite's own for the
/// SQLite store's reads of orders. One decoder per domain type serves both.
pub trait Columns {
    /// The driver's error.
    type Error;
    /// An integer column.
    fn int(&self, at: usize) -> Result<i64, Self::Error>;
    /// An integer column that may be `NULL`.
    fn maybe_int(&self, at: usize) -> Result<Option<i64>, Self::Error>;
    /// A text column.
    fn text(&self, at: usize) -> Result<String, Self::Error>;
    /// A text column that may be `NULL`.
    fn maybe_text(&self, at: usize) -> Result<Option<String>, Self::Error>;
    /// The column's name, as the statement gives it.
    fn name(&self, at: usize) -> &str;
    /// A value that breaks a domain rule.
    fn invalid(&self, at: usize) -> Self::Error;
}

impl Columns for AnyRow {
    type Error = sqlx::Error;
    fn int(&self, at: usize) -> Result<i64, sqlx::Error> {
        self.try_get(at)
    }
    fn maybe_int(&self, at: usize) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(at)
    }
    fn text(&self, at: usize) -> Result<String, sqlx::Error> {
        self.try_get(at)
    }
    fn maybe_text(&self, at: usize) -> Result<Option<String>, sqlx::Error> {
        self.try_get(at)
    }
    fn name(&self, at: usize) -> &str {
        self.columns().get(at).map_or("", |column| column.name())
    }
    fn invalid(&self, at: usize) -> sqlx::Error {
        sqlx::Error::Decode(format!("invalid {} in database", self.name(at)).into())
    }
}

/// Reads a row's columns one after another, in the order its statement lists them. Each read
/// names the column it expects, which debug builds check. By position, because a lookup by
/// name searches through the columns, on SQLite's own rows with a call into SQLite for each.
struct Cursor<'r, R> {
    row: &'r R,
    next: usize,
}

impl<'r, R: Columns> Cursor<'r, R> {
    fn new(row: &'r R) -> Self {
        Self { row, next: 0 }
    }

    fn at(&mut self, column: &str) -> usize {
        let at = self.next;
        self.next += 1;
        debug_assert_eq!(self.row.name(at), column, "column {at} read as {column}");
        at
    }

    fn int(&mut self, column: &str) -> Result<i64, R::Error> {
        let at = self.at(column);
        self.row.int(at)
    }

    fn maybe_int(&mut self, column: &str) -> Result<Option<i64>, R::Error> {
        let at = self.at(column);
        self.row.maybe_int(at)
    }

    fn text(&mut self, column: &str) -> Result<String, R::Error> {
        let at = self.at(column);
        self.row.text(at)
    }

    /// A value checked by a domain rule: `rule` refuses it.
    fn checked<T, E>(
        &mut self,
        column: &str,
        rule: impl FnOnce(i64) -> Result<T, E>,
    ) -> Result<T, R::Error> {
        let at = self.at(column);
        rule(self.row.int(at)?).map_err(|_| self.row.invalid(at))
    }

    fn money(&mut self, column: &str) -> Result<Money, R::Error> {
        self.checked(column, Money::from_cents)
    }

    fn quantity(&mut self, column: &str) -> Result<Quantity, R::Error> {
        self.checked(column, Quantity::parse)
    }

    fn guard(&mut self, column: &str) -> Result<Guard, R::Error> {
        let at = self.at(column);
        Guard::parse(&self.row.text(at)?).map_err(|_| self.row.invalid(at))
    }

    fn window(&mut self, start: &str, end: &str) -> Result<SaleWindow, R::Error> {
        let starts = self.int(start)?;
        let at = self.at(end);
        let ends = self.row.int(at)?;
        SaleWindow::new(starts, ends).map_err(|_| self.row.invalid(at))
    }
}

/// A product, from a row of the columns its statements list.
pub fn product<R: Columns>(row: &R) -> Result<Product, R::Error> {
    let mut c = Cursor::new(row);
    Ok(Product {
        id: ProductId(c.int("id")?),
        event_id: c.maybe_int("event_id")?,
        name: c.text("name")?,
        image_url: c.text("image_url")?,
        original_price: c.money("original_price_cents")?,
        sale_price: c.money("sale_price_cents")?,
        stock_total: c.int("stock_total")?,
        stock: c.int("stock")?,
        per_user_limit: c.quantity("per_user_limit")?.get(),
        buckets: c.checked("buckets", StockBuckets::parse)?,
        window: c.window("sale_starts_at", "sale_ends_at")?,
        paused_at: c.maybe_int("paused_at")?,
        gate_loaded_at: c.maybe_int("gate_loaded_at")?,
        created_at: c.int("created_at")?,
        updated_at: c.int("updated_at")?,
        guard: c.guard("guard")?,
    })
}

/// An order, from a row of the columns its statements list.
pub fn order<R: Columns>(row: &R) -> Result<Order, R::Error> {
    let mut c = Cursor::new(row);
    let order = Order {
        id: OrderId(c.int("id")?),
        user_id: UserId(c.int("user_id")?),
        product_id: ProductId(c.int("product_id")?),
        product_name: c.text("product_name")?,
        unit_price: c.money("unit_price_cents")?,
        quantity: c.quantity("quantity")?,
        total: c.money("total_cents")?,
        status: {
            let at = c.at("status");
            let status = row.text(at)?;
            OrderStatus::parse(&status).ok_or_else(|| row.invalid(at))?
        },
        created_at: c.int("created_at")?,
        pay_before: c.int("pay_before")?,
        paid_at: c.maybe_int("paid_at")?,
        cancelled_at: c.maybe_int("cancelled_at")?,
        pay_started_at: c.maybe_int("pay_started_at")?,
        idempotency_key: None,
    };
    let refunded = c.maybe_int("refunded_at")?.is_some();
    let key = c.at("idempotency_key");
    let idempotency_key = row
        .maybe_text(key)?
        .map(|text| IdempotencyKey::parse(&text).map_err(|_| row.invalid(key)))
        .transpose()?;
    let order = Order {
        idempotency_key,
        ..order
    };
    Ok(if refunded && order.status == OrderStatus::Cancelled {
        Order {
            status: OrderStatus::Refunded,
            ..order
        }
    } else {
        order
    })
}

/// A provider's kept word, from a row of the columns its statement lists.
pub fn payment<R: Columns>(row: &R) -> Result<KeptPayment, R::Error> {
    let mut c = Cursor::new(row);
    Ok(KeptPayment {
        provider: c.text("provider")?,
        trade_no: c.text("trade_no")?,
        amount: c.money("amount_cents")?,
        trade_status: c.text("trade_status")?,
        paid: c.int("paid")? == 1,
        received_at: c.int("received_at")?,
    })
}

/// A sale event, from a row of the columns its statements list.
pub fn event<R: Columns>(row: &R) -> Result<SaleEvent, R::Error> {
    let mut c = Cursor::new(row);
    Ok(SaleEvent {
        id: c.int("id")?,
        title: c.text("title")?,
        window: c.window("starts_at", "ends_at")?,
        guard: c.guard("guard")?,
    })
}

/// An account, from a row of the columns its statements list.
pub fn user<R: Columns>(row: &R) -> Result<UserRecord, R::Error> {
    let mut c = Cursor::new(row);
    Ok(UserRecord {
        id: UserId(c.int("id")?),
        username: c.text("username")?,
        password_hash: c.text("password_hash")?,
        disabled_at: c.maybe_int("disabled_at")?,
    })
}

/// An account as the operator sees it, from [`account_columns`].
pub fn account<R: Columns>(row: &R) -> Result<UserAccount, R::Error> {
    let mut c = Cursor::new(row);
    Ok(UserAccount {
        id: UserId(c.int("id")?),
        username: c.text("username")?,
        created_at: c.int("created_at")?,
        disabled_at: c.maybe_int("disabled_at")?,
    })
}
