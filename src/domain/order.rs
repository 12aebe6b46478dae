//! Orders and their one-way state machine: awaiting payment → paid, or awaiting payment →
//! cancelled. Nothing leaves paid or cancelled, which is what lets every change be a
//! conditional update on the current status.

use super::{Millis, Money, ProductId, Quantity, UserId};
use serde::{Serialize, Serializer};
use std::fmt;

/// A Snowflake order id. Serialized as a decimal string because 64-bit ids exceed the
/// integers JavaScript can represent exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrderId(pub i64);

impl fmt::Display for OrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for OrderId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Where an order stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    AwaitingPayment,
    Paid,
    Cancelled,
}

impl OrderStatus {
    /// The spelling used in the database, the API and the pages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingPayment => "awaiting_payment",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
        }
    }

    /// Reads the database spelling back.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "awaiting_payment" => Some(Self::AwaitingPayment),
            "paid" => Some(Self::Paid),
            "cancelled" => Some(Self::Cancelled),
            _ => None,
        }
    }
}

/// An order, with the product's name and price copied in when it was placed so later price
/// changes never alter what the buyer agreed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub id: OrderId,
    pub user_id: UserId,
    pub product_id: ProductId,
    pub product_name: String,
    pub unit_price: Money,
    pub quantity: Quantity,
    pub total: Money,
    pub status: OrderStatus,
    pub created_at: Millis,
    /// Unpaid at this instant, the order is cancelled and its stock goes back on sale.
    pub pay_before: Millis,
    pub paid_at: Option<Millis>,
    pub cancelled_at: Option<Millis>,
}

impl Order {
    /// Whether the payment window has closed at `now`.
    pub fn is_overdue(&self, now: Millis) -> bool {
        self.status == OrderStatus::AwaitingPayment && now >= self.pay_before
    }
}
