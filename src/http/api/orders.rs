//! The buy endpoint and the buyer's own orders. `POST /orders` is the hot path: throttles and
//! the token are checked in memory, the sale service does the rest, and the answer is `202`
//! once the order is durable.

use super::OrderView;
use crate::domain::{OrderId, ProductId, Quantity};
use crate::error::{ApiError, AppJson, AppPath};
use crate::http::AppState;
use crate::http::client_ip::ClientIp;
use crate::http::extract::CurrentUser;
use crate::payment::Channel;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

/// `/api/v1/orders`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/orders", post(place_order).get(my_orders))
        .route("/api/v1/orders/{id}", get(my_order))
        .route("/api/v1/orders/{id}/pay", post(pay))
        .route("/api/v1/orders/{id}/cancel", post(cancel))
}

#[derive(Deserialize)]
struct PlaceOrder {
    product_id: i64,
    quantity: i64,
}

async fn place_order(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    user: CurrentUser,
    AppJson(body): AppJson<PlaceOrder>,
) -> Result<(StatusCode, AppJson<OrderView>), ApiError> {
    state.limits.check_ip(ip)?;
    state.limits.check_user(user.id)?;
    let quantity = Quantity::parse(body.quantity)
        .map_err(|e| ApiError::invalid("invalid_quantity", e.to_string()))?;
    let order = state
        .sale
        .buy(user.id, ProductId(body.product_id), quantity)
        .await?;
    Ok((StatusCode::ACCEPTED, AppJson(OrderView::from(order))))
}

async fn my_orders(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<AppJson<Vec<OrderView>>, ApiError> {
    let orders = state.sale.orders_of(user.id).await?;
    Ok(AppJson(orders.into_iter().map(OrderView::from).collect()))
}

async fn my_order(
    State(state): State<AppState>,
    user: CurrentUser,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<OrderView>, ApiError> {
    let order = state.sale.order_of(user.id, OrderId(id)).await?;
    Ok(AppJson(OrderView::from(order)))
}

/// The optional body of `POST /api/v1/orders/{id}/pay`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PayBody {
    #[serde(default)]
    channel: Channel,
}

/// Where to pay an order.
#[derive(Serialize)]
struct PayView {
    order_id: OrderId,
    provider: &'static str,
    pay_url: String,
}

/// `200 {"order_id", "provider", "pay_url"}`: the signed URL at which the buyer pays. The order
/// is paid when the provider's notification arrives, not by this call.
async fn pay(
    State(state): State<AppState>,
    user: CurrentUser,
    AppPath(id): AppPath<i64>,
    body: Bytes,
) -> Result<AppJson<PayView>, ApiError> {
    let PayBody { channel } = if body.iter().all(u8::is_ascii_whitespace) {
        PayBody::default()
    } else {
        Json::<PayBody>::from_bytes(&body)?.0
    };
    let link = state.sale.pay(user.id, OrderId(id), channel).await?;
    Ok(AppJson(PayView {
        order_id: link.order_id,
        provider: link.provider,
        pay_url: link.pay_url,
    }))
}

async fn cancel(
    State(state): State<AppState>,
    user: CurrentUser,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<OrderView>, ApiError> {
    let order = state.sale.cancel(user.id, OrderId(id)).await?;
    Ok(AppJson(OrderView::from(order)))
}
