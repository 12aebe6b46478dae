//! The JSON API under `/api/v1`, one module per domain, each exposing its `router()`.

pub mod admin;
pub mod catalog;
pub mod orders;
pub mod sessions;

use crate::domain::{Millis, Order, Product, SaleEvent};
use serde::{Serialize, Serializer};

/// A time sent to clients as RFC 3339 with milliseconds, e.g. `2026-11-22T10:00:00.000Z`.
#[derive(Debug, Clone, Copy)]
pub struct Rfc3339(pub Millis);

impl Serialize for Rfc3339 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match chrono::DateTime::from_timestamp_millis(self.0) {
            Some(t) => s.serialize_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            None => s.serialize_none(),
        }
    }
}

/// A product as clients see it, with live stock.
#[derive(Debug, Serialize)]
pub struct ProductView {
    pub id: i64,
    pub event_id: Option<i64>,
    pub name: String,
    pub image_url: String,
    pub original_price_cents: i64,
    pub sale_price_cents: i64,
    pub stock_total: i64,
    pub remaining: i64,
    pub sold: i64,
    pub sold_percent: i64,
    pub per_user_limit: u32,
    pub status: &'static str,
    pub starts_at: Rfc3339,
    pub ends_at: Rfc3339,
    pub created_at: Rfc3339,
    pub updated_at: Rfc3339,
}

impl ProductView {
    /// The view of `p` with `remaining` units left at `now`.
    pub fn new(p: &Product, remaining: i64, now: Millis) -> Self {
        let sold = (p.stock_total - remaining).max(0);
        Self {
            id: p.id.0,
            event_id: p.event_id,
            name: p.name.clone(),
            image_url: p.image_url.clone(),
            original_price_cents: p.original_price.cents(),
            sale_price_cents: p.sale_price.cents(),
            stock_total: p.stock_total,
            remaining,
            sold,
            sold_percent: if p.stock_total > 0 {
                sold * 100 / p.stock_total
            } else {
                0
            },
            per_user_limit: p.per_user_limit,
            status: p.window.status(now).as_str(),
            starts_at: Rfc3339(p.window.start),
            ends_at: Rfc3339(p.window.end),
            created_at: Rfc3339(p.created_at),
            updated_at: Rfc3339(p.updated_at),
        }
    }
}

/// A sale event as clients see it.
#[derive(Debug, Serialize)]
pub struct EventView {
    pub id: i64,
    pub title: String,
    pub status: &'static str,
    pub starts_at: Rfc3339,
    pub ends_at: Rfc3339,
}

impl EventView {
    /// The view of `e` at `now`.
    pub fn new(e: &SaleEvent, now: Millis) -> Self {
        Self {
            id: e.id,
            title: e.title.clone(),
            status: e.window.status(now).as_str(),
            starts_at: Rfc3339(e.window.start),
            ends_at: Rfc3339(e.window.end),
        }
    }
}

/// An order as its buyer sees it.
#[derive(Debug, Serialize)]
pub struct OrderView {
    pub order_id: crate::domain::OrderId,
    pub status: crate::domain::OrderStatus,
    pub product_id: i64,
    pub product_name: String,
    pub quantity: u32,
    pub unit_price_cents: i64,
    pub total_cents: i64,
    pub created_at: Rfc3339,
    pub pay_before: Rfc3339,
    pub paid_at: Option<Rfc3339>,
    pub cancelled_at: Option<Rfc3339>,
}

impl From<&Order> for OrderView {
    fn from(o: &Order) -> Self {
        Self {
            order_id: o.id,
            status: o.status,
            product_id: o.product_id.0,
            product_name: o.product_name.clone(),
            quantity: o.quantity.get(),
            unit_price_cents: o.unit_price.cents(),
            total_cents: o.total.cents(),
            created_at: Rfc3339(o.created_at),
            pay_before: Rfc3339(o.pay_before),
            paid_at: o.paid_at.map(Rfc3339),
            cancelled_at: o.cancelled_at.map(Rfc3339),
        }
    }
}
