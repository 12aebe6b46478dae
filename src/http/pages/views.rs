//! The data each page template sees. Prices arrive already formatted and times as Unix
//! milliseconds, so templates stay free of logic and the page script can count down against
//! the server's clock (`now_ms`) rather than the visitor's.

use askama::Template;

/// One sale event (场次) tab on the sale page.
pub struct EventTab {
    pub id: i64,
    /// Start time of day, e.g. "10:00".
    pub title: String,
    /// "upcoming", "live" or "ended".
    pub status: &'static str,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    pub selected: bool,
}

/// One product card of the selected event.
pub struct ProductCard {
    pub id: i64,
    pub name: String,
    pub image_url: String,
    /// Formatted as "199.00".
    pub original_price: String,
    pub sale_price: String,
    pub stock_total: i64,
    pub remaining: i64,
    /// 0..=100, share of `stock_total` already sold.
    pub sold_percent: i64,
    /// "upcoming", "live" or "ended".
    pub status: &'static str,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    /// The signed-in shopper already holds as many units as one buyer may: the button says
    /// so instead of inviting a click that can only be refused.
    pub held: bool,
}

/// `GET /` (and `GET /?event=ID`).
#[derive(Template)]
#[template(path = "sale.html")]
pub struct SalePage {
    /// The signed-in shopper's name, if any.
    pub username: Option<String>,
    pub events: Vec<EventTab>,
    /// Id of the selected event, if there is one.
    pub event_id: Option<i64>,
    pub products: Vec<ProductCard>,
    pub now_ms: i64,
}

/// `GET /login`: sign in and register on one page.
#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    /// Where to go after signing in; always a local path starting with '/'.
    pub next: String,
}

/// One row of the shopper's order list.
pub struct OrderRow {
    /// Snowflake id as a decimal string (it exceeds JavaScript's safe integers).
    pub id: String,
    pub product_name: String,
    pub quantity: i64,
    pub total: String,
    /// "awaiting_payment", "paid", "cancelled" or "refunded".
    pub status: &'static str,
    pub created_at_ms: i64,
    pub pay_before_ms: i64,
}

/// `GET /orders`: the signed-in shopper's orders, newest first.
#[derive(Template)]
#[template(path = "orders.html")]
pub struct OrdersPage {
    pub username: String,
    pub orders: Vec<OrderRow>,
    pub now_ms: i64,
    /// Payments go through the built-in sandbox gateway: no real money.
    pub sandbox: bool,
}

/// `GET /pay/alipay/return`: where the provider sends the buyer back. It shows the order as
/// stored, and reloads itself while the payment's notification has not arrived.
#[derive(Template)]
#[template(path = "pay_return.html")]
pub struct PayReturnPage {
    pub order_id: String,
    pub product_name: String,
    pub total: String,
    /// "awaiting_payment", "paid", "cancelled" or "refunded".
    pub status: &'static str,
    /// The payment went through the built-in sandbox gateway: no real money.
    pub sandbox: bool,
}
