//! Orders in the console: find one by its id, or a buyer's by user id, with each order's
//! status and the payment provider's words kept for it.

use super::{AdminSession, page};
use crate::domain::{Millis, Order, OrderId, UserId};
use crate::error::ApiError;
use crate::http::AppState;
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

/// `/admin/orders`.
pub fn router() -> Router<AppState> {
    Router::new().route("/admin/orders", get(orders_page))
}

/// The most orders one search shows.
const SHOWN: usize = 100;

/// The most payment records shown per order.
const PAYMENTS_SHOWN: i64 = 20;

/// What to look for: an order id, or a user id.
#[derive(Deserialize)]
struct Search {
    order: Option<String>,
    user: Option<String>,
}

/// One payment record of an order.
struct PaymentRow {
    provider: String,
    trade_no: String,
    amount: String,
    trade_status: String,
    paid: bool,
    received_at: String,
}

/// One order found.
struct OrderRow {
    id: String,
    user_id: i64,
    product: String,
    quantity: u32,
    total: String,
    status: &'static str,
    created_at: String,
    payments: Vec<PaymentRow>,
}

/// `GET /admin/orders`.
#[derive(Template)]
#[template(path = "admin/orders.html")]
struct OrdersPage {
    csrf: String,
    order: String,
    user: String,
    searched: bool,
    error: Option<&'static str>,
    orders: Vec<OrderRow>,
}

fn time(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

async fn row(state: &AppState, order: Order) -> Result<OrderRow, ApiError> {
    let payments = state
        .store
        .payments_of(order.id, PAYMENTS_SHOWN)
        .await?
        .into_iter()
        .map(|p| PaymentRow {
            provider: p.provider,
            trade_no: p.trade_no,
            amount: p.amount.to_string(),
            trade_status: p.trade_status,
            paid: p.paid,
            received_at: time(p.received_at),
        })
        .collect();
    Ok(OrderRow {
        id: order.id.to_string(),
        user_id: order.user_id.0,
        product: order.product_name,
        quantity: order.quantity.get(),
        total: order.total.to_string(),
        status: order.status.as_str(),
        created_at: time(order.created_at),
        payments,
    })
}

async fn orders_page(
    State(state): State<AppState>,
    session: AdminSession,
    Query(search): Query<Search>,
) -> Result<Response, ApiError> {
    let order = search.order.unwrap_or_default().trim().to_owned();
    let user = search.user.unwrap_or_default().trim().to_owned();
    let found = match (order.as_str(), user.as_str()) {
        ("", "") => Ok(Vec::new()),
        (id, "") => match id.parse() {
            Ok(id) => Ok(state.store.order(OrderId(id)).await?.into_iter().collect()),
            Err(_) => Err("An order id is a whole number."),
        },
        ("", id) => match id.parse() {
            Ok(id) => Ok(state.store.orders_of_user(UserId(id)).await?),
            Err(_) => Err("A user id is a whole number."),
        },
        _ => Err("Give an order id or a user id, not both."),
    };
    let (status, error, found) = match found {
        Ok(found) => (StatusCode::OK, None, found),
        Err(message) => (StatusCode::UNPROCESSABLE_ENTITY, Some(message), Vec::new()),
    };
    let mut orders = Vec::new();
    for order in found.into_iter().take(SHOWN) {
        orders.push(row(&state, order).await?);
    }
    page(
        status,
        &OrdersPage {
            csrf: session.csrf().to_owned(),
            searched: !(order.is_empty() && user.is_empty()),
            order,
            user,
            error,
            orders,
        },
    )
}
