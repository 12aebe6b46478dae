//! Orders and their one-way state machine: awaiting payment → paid, or awaiting payment →
//! cancelled; cancelled → refunded when money arrives for a cancelled order; and paid →
//! cancelled → refunded when an operator gives the money back. Nothing leaves refunded, and
//! nothing returns to awaiting payment or paid, which is what lets every change be a
//! conditional update on the current status.

use super::{IdempotencyKey, Millis, Money, ProductId, Quantity, Refusal, UserId};
use serde::{Serialize, Serializer};
use std::borrow::Cow;
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
    /// Cancelled and the money sent back: paid after its cancel, or paid and then refunded by
    /// an operator. The stock went back on sale at the cancel, once. Stored as `cancelled`
    /// with a refund time, so every rule that counts cancelled orders counts these too.
    Refunded,
}

impl OrderStatus {
    /// Every status, in the order of an order's life.
    pub const ALL: [Self; 4] = [
        Self::AwaitingPayment,
        Self::Paid,
        Self::Cancelled,
        Self::Refunded,
    ];

    /// The status an operator names (its [`as_str`](Self::as_str) spelling), refused as
    /// `invalid_status`.
    pub fn named(name: &str) -> Result<Self, Refusal> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == name)
            .ok_or_else(|| {
                Refusal::new(
                    "invalid_status",
                    "status must be awaiting_payment, paid, cancelled or refunded",
                )
            })
    }

    /// The spelling used in the database, the API and the pages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingPayment => "awaiting_payment",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Refunded => "refunded",
        }
    }

    /// Reads the database spelling back (the database has no `refunded`: see
    /// [`OrderStatus::Refunded`]).
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
    /// When a pay URL was first made for it: from then on the buyer may have paid, so the
    /// provider is asked before the order is cancelled.
    pub pay_started_at: Option<Millis>,
    /// The buyer's name for the request that placed it, so a retry is answered with this
    /// order; kept for [`IdempotencyKey::LIFETIME_MS`] after the order was made.
    pub idempotency_key: Option<IdempotencyKey>,
}

impl Order {
    /// Whether the payment window has closed at `now`.
    pub fn is_overdue(&self, now: Millis) -> bool {
        self.status == OrderStatus::AwaitingPayment && now >= self.pay_before
    }
}

/// How a new order travels from the gate's outbox through the queues to the workers: JSON,
/// readable with `redis-cli` or the RabbitMQ console, and checked again on the way in because
/// anything may sit in a queue. Written by [`Order::encode`], byte for byte as `serde_json`
/// would write this (a test holds them equal).
#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct WireOrder<'a> {
    id: i64,
    user: i64,
    product: i64,
    /// Borrowed from the order on the way out (every buy encodes one), and from the message on
    /// the way in unless it holds escapes.
    #[serde(borrow)]
    name: Cow<'a, str>,
    price: i64,
    qty: i64,
    at: Millis,
    due: Millis,
    /// Only for an order placed with an idempotency key: the message of any other order is
    /// what it always was.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    key: Option<Cow<'a, str>>,
}

/// `text` as a JSON string, appended to `out`.
fn write_string(out: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(out, text).expect("a string always serializes");
}

/// Why a queued order could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("malformed queued order: {0}")]
pub struct MalformedOrder(String);

impl Order {
    /// The order as a queue message, on one line. Written directly: its field names and
    /// numbers never need escaping, which `serde_json` checks byte by byte, and every buy
    /// encodes one.
    pub fn encode(&self) -> String {
        let mut out = Vec::with_capacity(160 + self.product_name.len());
        let mut number = itoa::Buffer::new();
        let mut field = |out: &mut Vec<u8>, name: &[u8], value: i64| {
            out.extend_from_slice(name);
            out.extend_from_slice(number.format(value).as_bytes());
        };
        field(&mut out, b"{\"id\":", self.id.0);
        field(&mut out, b",\"user\":", self.user_id.0);
        field(&mut out, b",\"product\":", self.product_id.0);
        out.extend_from_slice(b",\"name\":");
        write_string(&mut out, &self.product_name);
        field(&mut out, b",\"price\":", self.unit_price.cents());
        field(&mut out, b",\"qty\":", i64::from(self.quantity.get()));
        field(&mut out, b",\"at\":", self.created_at);
        field(&mut out, b",\"due\":", self.pay_before);
        if let Some(key) = &self.idempotency_key {
            out.extend_from_slice(b",\"key\":");
            write_string(&mut out, key.as_str());
        }
        out.push(b'}');
        String::from_utf8(out).expect("JSON of UTF-8 strings")
    }

    /// Reads a queue message back into a new order awaiting payment.
    pub fn decode(message: &[u8]) -> Result<Self, MalformedOrder> {
        let wire: WireOrder =
            serde_json::from_slice(message).map_err(|e| MalformedOrder(e.to_string()))?;
        let unit_price =
            Money::from_cents(wire.price).map_err(|e| MalformedOrder(e.to_string()))?;
        let quantity = Quantity::parse(wire.qty).map_err(|e| MalformedOrder(e.to_string()))?;
        let idempotency_key = wire
            .key
            .map(|key| IdempotencyKey::parse(&key))
            .transpose()
            .map_err(|e| MalformedOrder(e.to_string()))?;
        Ok(Self {
            id: OrderId(wire.id),
            user_id: UserId(wire.user),
            product_id: ProductId(wire.product),
            product_name: wire.name.into_owned(),
            unit_price,
            quantity,
            total: unit_price.times(quantity.get()),
            status: OrderStatus::AwaitingPayment,
            created_at: wire.at,
            pay_before: wire.due,
            paid_at: None,
            cancelled_at: None,
            pay_started_at: None,
            idempotency_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> Order {
        let unit_price = Money::from_cents(4_999).unwrap();
        Order {
            id: OrderId(7_000_000_000_001),
            user_id: UserId(42),
            product_id: ProductId(3),
            product_name: "手机 \"Pro\"".into(),
            unit_price,
            quantity: Quantity::parse(2).unwrap(),
            total: unit_price.times(2),
            status: OrderStatus::AwaitingPayment,
            created_at: 1_000,
            pay_before: 901_000,
            paid_at: None,
            cancelled_at: None,
            pay_started_at: None,
            idempotency_key: None,
        }
    }

    #[test]
    fn an_order_survives_the_queue() {
        let order = order();
        assert_eq!(Order::decode(order.encode().as_bytes()).unwrap(), order);
    }

    #[test]
    fn an_order_is_written_as_serde_writes_its_wire_shape() {
        let keyed = Order {
            product_name: "\"x\" \\ \n\u{1} 🫖".into(),
            idempotency_key: Some(IdempotencyKey::parse("retry-\"7\"").unwrap()),
            ..order()
        };
        for order in [order(), keyed] {
            let wire = WireOrder {
                id: order.id.0,
                user: order.user_id.0,
                product: order.product_id.0,
                name: Cow::Borrowed(&order.product_name),
                price: order.unit_price.cents(),
                qty: i64::from(order.quantity.get()),
                at: order.created_at,
                due: order.pay_before,
                key: order
                    .idempotency_key
                    .as_ref()
                    .map(|k| Cow::Borrowed(k.as_str())),
            };
            assert_eq!(order.encode(), serde_json::to_string(&wire).unwrap());
        }
    }

    #[test]
    fn an_order_keeps_its_idempotency_key_through_the_queue_and_others_carry_none() {
        assert!(!order().encode().contains("key"));
        let keyed = Order {
            idempotency_key: Some(IdempotencyKey::parse("retry-\"7\"").unwrap()),
            ..order()
        };
        assert_eq!(Order::decode(keyed.encode().as_bytes()).unwrap(), keyed);
    }

    #[test]
    fn every_status_is_named_by_its_spelling_but_the_database_never_spells_refunded() {
        for status in OrderStatus::ALL {
            assert_eq!(OrderStatus::named(status.as_str()), Ok(status));
        }
        for bad in ["Paid", "", "unpaid"] {
            assert_eq!(OrderStatus::named(bad).unwrap_err().code, "invalid_status");
        }
        assert_eq!(OrderStatus::parse("refunded"), None);
    }

    #[test]
    fn a_bad_message_is_refused_not_trusted() {
        let good = order().encode();
        for bad in [
            "",
            "{}",
            &good.replace("\"qty\":2", "\"qty\":0"),
            &good.replace("\"price\":4999", "\"price\":-1"),
            &good.replace('}', ",\"key\":\"a b\"}"),
        ] {
            assert!(Order::decode(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
