//! The data each page shows. Prices arrive already formatted and times as Unix milliseconds,
//! so templates stay free of logic. A page holds no clock reading: the script asks `GET /time`
//! for the server's, so a page that changes nothing keeps its ETag.
//! Each page renders in a language through [`Page`]: its template sees the page as `page` and
//! the language's strings as `t`.

use super::i18n::Strings;
use askama::Template;

/// A page that renders in any language.
pub trait Page {
    /// The page's HTML with the strings `t`.
    fn render_in(&self, t: &'static Strings) -> askama::Result<String>;
}

/// Implements [`Page`] for a page struct with the template at `$path`.
macro_rules! page {
    ($data:ident, $path:tt) => {
        impl Page for $data {
            fn render_in(&self, t: &'static Strings) -> askama::Result<String> {
                #[derive(Template)]
                #[template(path = $path)]
                struct Html<'a> {
                    page: &'a $data,
                    t: &'static Strings,
                }
                Html { page: self, t }.render()
            }
        }
    };
}

page!(SalePage, "sale.html");
page!(LoginPage, "login.html");
page!(OrdersPage, "orders.html");
page!(PayReturnPage, "pay_return.html");

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
    /// An operator paused buying: the card says so and its button stays off until the page's
    /// poll sees the product resumed.
    pub paused: bool,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    /// Stock is left, but at most a tenth of it: the card says "almost gone".
    pub almost_gone: bool,
    /// The signed-in shopper already holds as many units as one buyer may: the button says
    /// so instead of inviting a click that can only be refused.
    pub held: bool,
    /// Its event's guard, "none", "token" or "challenge": the script fetches a buy token for a
    /// guarded product (solving the puzzle first for "challenge").
    pub guard: &'static str,
    /// When buy tokens start being handed out: the script fetches one after this, during the
    /// countdown.
    pub token_from_ms: i64,
}

/// `GET /` (and `GET /?event=ID`).
pub struct SalePage {
    /// The sign-out form's token (see `TokenSigner::form_token`); empty for a visitor.
    pub csrf: String,
    /// The signed-in shopper's name, if any.
    pub username: Option<String>,
    pub events: Vec<EventTab>,
    /// Id of the selected event, if there is one.
    pub event_id: Option<i64>,
    pub products: Vec<ProductCard>,
}

/// `GET /login`: sign in and register on one page.
pub struct LoginPage {
    /// Where to go after signing in; always a local path starting with '/'.
    pub next: String,
    /// Whether to show the demo shoppers' logins (a demo sale only).
    pub demo: bool,
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
pub struct OrdersPage {
    /// The sign-out form's token (see `TokenSigner::form_token`).
    pub csrf: String,
    pub username: String,
    pub orders: Vec<OrderRow>,
    /// Payments go through the built-in sandbox gateway: no real money.
    pub sandbox: bool,
}

/// `GET /pay/alipay/return`: where the provider sends the buyer back. It shows the order as
/// stored, and reloads itself while the payment's notification has not arrived.
pub struct PayReturnPage {
    pub order_id: String,
    pub product_name: String,
    pub total: String,
    /// "awaiting_payment", "paid", "cancelled" or "refunded".
    pub status: &'static str,
    /// The payment went through the built-in sandbox gateway: no real money.
    pub sandbox: bool,
}
