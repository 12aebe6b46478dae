//! The JSON API under `/api/v1`, one module of handlers per domain; `http::router` routes them.

pub mod admin;
pub mod admin_orders;
pub mod admin_users;
pub mod catalog;
pub mod guard;
pub mod images;
pub mod orders;
pub mod sessions;

use crate::domain::{Millis, Order, Product, SaleEvent};
use crate::error::ApiError;
use axum::Json;
use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use utoipa::ToSchema;

/// A JSON body that may be left out: an empty (or blank) body is `T`'s default, so a client
/// with nothing to say need not send `{}` and a `Content-Type`.
pub(super) fn optional_json<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        Ok(Json::<T>::from_bytes(body)?.0)
    }
}

/// A time sent to clients as RFC 3339 with milliseconds, e.g. `2026-11-22T10:00:00.000Z`.
#[derive(Debug, Clone, Copy)]
pub struct Rfc3339(pub Millis);

impl Rfc3339 {
    /// The time's text, written digit by digit into a stack buffer: chrono's formatter builds a
    /// `String` through its general formatting machinery, and every accepted buy answers with
    /// two times. `None` for a year outside 0000-9999 (which RFC 3339 cannot spell) or a time
    /// out of chrono's range.
    fn digits(self) -> Option<[u8; 24]> {
        use chrono::{Datelike, Timelike};
        let utc = chrono::DateTime::from_timestamp_millis(self.0)?;
        // The naive time, read field by field: `DateTime`'s own getters apply the offset anew
        // for every field.
        let (date, time) = (utc.date_naive(), utc.time());
        let Ok(year @ 0..=9999) = u32::try_from(date.year()) else {
            return None;
        };
        let mut text = *b"0000-00-00T00:00:00.000Z";
        let fields = [
            (0, 4, year),
            (5, 2, date.month()),
            (8, 2, date.day()),
            (11, 2, time.hour()),
            (14, 2, time.minute()),
            (17, 2, time.second()),
            (20, 3, time.nanosecond() / 1_000_000),
        ];
        for (at, width, mut value) in fields {
            for digit in text[at..at + width].iter_mut().rev() {
                *digit = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        Some(text)
    }
}

/// Its [`digits`](Rfc3339::digits); a year outside 0000-9999 as chrono writes it, a time out of
/// chrono's range as `null`.
impl Serialize for Rfc3339 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Some(text) = self.digits() {
            return s.serialize_str(std::str::from_utf8(&text).expect("ASCII digits"));
        }
        match chrono::DateTime::from_timestamp_millis(self.0) {
            Some(utc) => s.serialize_str(&utc.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            None => s.serialize_none(),
        }
    }
}

/// A product as clients see it, with live stock.
#[derive(Debug, Serialize, ToSchema)]
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
    /// `upcoming`, `live` or `ended`.
    #[schema(value_type = String)]
    pub status: &'static str,
    /// An operator paused buying: every buy is refused (`sale_paused`) until they resume it.
    pub paused: bool,
    /// Its event's guard: `none`, `token` (buys carry a buy token) or `challenge` (and a buy
    /// token is handed out for a solved puzzle).
    #[schema(value_type = String)]
    pub guard: &'static str,
    #[schema(value_type = String, format = DateTime)]
    pub starts_at: Rfc3339,
    #[schema(value_type = String, format = DateTime)]
    pub ends_at: Rfc3339,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Rfc3339,
    #[schema(value_type = String, format = DateTime)]
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
            paused: p.is_paused(),
            guard: p.guard.as_str(),
            starts_at: Rfc3339(p.window.start),
            ends_at: Rfc3339(p.window.end),
            created_at: Rfc3339(p.created_at),
            updated_at: Rfc3339(p.updated_at),
        }
    }
}

/// A sale event as clients see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    pub id: i64,
    pub title: String,
    /// `upcoming`, `live` or `ended`.
    #[schema(value_type = String)]
    pub status: &'static str,
    /// What its products' buyers must show besides a session: `none`, `token` (a buy token)
    /// or `challenge` (a buy token handed out for a solved puzzle).
    #[schema(value_type = String)]
    pub guard: &'static str,
    #[schema(value_type = String, format = DateTime)]
    pub starts_at: Rfc3339,
    #[schema(value_type = String, format = DateTime)]
    pub ends_at: Rfc3339,
}

impl EventView {
    /// The view of `e` at `now`.
    pub fn new(e: &SaleEvent, now: Millis) -> Self {
        Self {
            id: e.id,
            title: e.title.clone(),
            status: e.window.status(now).as_str(),
            guard: e.guard.as_str(),
            starts_at: Rfc3339(e.window.start),
            ends_at: Rfc3339(e.window.end),
        }
    }
}

/// An order as its buyer sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrderView {
    /// A 64-bit id as a decimal string.
    #[schema(value_type = String)]
    pub order_id: crate::domain::OrderId,
    /// `awaiting_payment`, `paid`, `cancelled` or `refunded`.
    #[schema(value_type = String)]
    pub status: crate::domain::OrderStatus,
    pub product_id: i64,
    pub product_name: String,
    pub quantity: u32,
    pub unit_price_cents: i64,
    pub total_cents: i64,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Rfc3339,
    #[schema(value_type = String, format = DateTime)]
    pub pay_before: Rfc3339,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub paid_at: Option<Rfc3339>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub cancelled_at: Option<Rfc3339>,
}

/// Made from the order itself, not a reference: every answer is built from an order that is
/// dropped right after, and the name moves instead of being copied.
impl From<Order> for OrderView {
    fn from(o: Order) -> Self {
        Self {
            order_id: o.id,
            status: o.status,
            product_id: o.product_id.0,
            product_name: o.product_name,
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

impl OrderView {
    /// The view as JSON, byte for byte what `serde_json` writes for it (a test holds them
    /// equal), written directly: its field names, numbers and times never need escaping, which
    /// `serde_json` checks byte by byte, and every accepted buy answers with one.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(320);
        let mut number = itoa::Buffer::new();
        out.extend_from_slice(b"{\"order_id\":\"");
        out.extend_from_slice(number.format(self.order_id.0).as_bytes());
        out.extend_from_slice(b"\",\"status\":\"");
        out.extend_from_slice(self.status.as_str().as_bytes());
        out.extend_from_slice(b"\",\"product_id\":");
        out.extend_from_slice(number.format(self.product_id).as_bytes());
        out.extend_from_slice(b",\"product_name\":");
        write_json(&mut out, &self.product_name);
        let numbers = [
            (&b",\"quantity\":"[..], i64::from(self.quantity)),
            (b",\"unit_price_cents\":", self.unit_price_cents),
            (b",\"total_cents\":", self.total_cents),
        ];
        for (name, value) in numbers {
            out.extend_from_slice(name);
            out.extend_from_slice(number.format(value).as_bytes());
        }
        let times = [
            (&b",\"created_at\":"[..], Some(self.created_at)),
            (b",\"pay_before\":", Some(self.pay_before)),
            (b",\"paid_at\":", self.paid_at),
            (b",\"cancelled_at\":", self.cancelled_at),
        ];
        for (name, time) in times {
            out.extend_from_slice(name);
            let Some(time) = time else {
                out.extend_from_slice(b"null");
                continue;
            };
            match time.digits() {
                Some(text) => {
                    out.push(b'"');
                    out.extend_from_slice(&text);
                    out.push(b'"');
                }
                None => write_json(&mut out, &time),
            }
        }
        out.push(b'}');
        out
    }
}

/// `value` as `serde_json` writes it, appended to `out`.
fn write_json(out: &mut Vec<u8>, value: &impl Serialize) {
    serde_json::to_writer(out, value).expect("a string or a time always serializes");
}

/// The shape of every error answer, for the API's description: `ApiError` writes the
/// answers themselves.
#[derive(ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// A stable machine-readable code and an English message for people.
#[derive(ToSchema)]
pub struct ErrorDetail {
    /// Stable, snake_case; each operation lists the codes it can answer.
    pub code: String,
    /// English, for people; may change.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::{OrderView, Rfc3339};
    use crate::domain::{OrderId, OrderStatus};

    #[test]
    fn an_order_s_json_written_directly_is_serde_s_byte_for_byte() {
        let view = |name: &str, paid_at, cancelled_at| OrderView {
            order_id: OrderId(7_412_345_678_901_234_567),
            status: OrderStatus::AwaitingPayment,
            product_id: -3,
            product_name: name.to_owned(),
            quantity: 100,
            unit_price_cents: 4999,
            total_cents: i64::MIN,
            created_at: Rfc3339(1_800_000_000_123),
            pay_before: Rfc3339(-62_167_219_200_001),
            paid_at,
            cancelled_at,
        };
        let views = [
            view("Kettle", None, None),
            view(
                "\"Quoted\" \\ back\nline\u{1}\u{7f} 电热水壶 🫖",
                Some(Rfc3339(0)),
                None,
            ),
            view("", None, Some(Rfc3339(i64::MAX))),
            view("x", Some(Rfc3339(253_402_300_800_000)), Some(Rfc3339(-1))),
        ];
        for view in views {
            let serde = serde_json::to_vec(&view).unwrap();
            assert_eq!(
                String::from_utf8(view.to_json()).unwrap(),
                String::from_utf8(serde).unwrap()
            );
        }
    }

    #[test]
    fn times_read_as_chrono_writes_them() {
        let chrono = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        };
        let year_zero = -62_167_219_200_000;
        let year_ten_thousand = 253_402_300_800_000;
        let mut times = vec![0, 1, 999, 1_000, -1, year_zero, year_zero - 1];
        times.extend([year_ten_thousand - 1, year_ten_thousand, i64::MAX]);
        // About every 143 days across the four-digit years, each at another time of day.
        times.extend((year_zero..year_ten_thousand).step_by(12_345_678_911));
        for ms in times {
            let ours = serde_json::to_value(Rfc3339(ms)).unwrap();
            assert_eq!(ours.as_str().map(str::to_owned), chrono(ms), "{ms}");
        }
    }
}
