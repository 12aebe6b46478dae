//! The buy endpoint and the buyer's own orders. `POST /orders` is the hot path: a product
//! flagged sold out here is refused at once, then throttles, the session token and a guarded
//! sale's buy token are checked in memory, the sale service does the rest, and the answer is
//! `202` once the order is durable.

use super::{ErrorBody, OrderView, guard};
use crate::domain::{OrderId, ProductId, Quantity};
use crate::error::{ApiError, AppJson, AppPath, JsonBody};
use crate::http::AppState;
use crate::http::client_ip::ClientIp;
use crate::http::extract::{CurrentUser, IdempotencyKeyHeader, SessionToken};
use crate::payment::Channel;
use crate::server::Ends;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What to buy and how many.
#[derive(Deserialize, ToSchema)]
pub(crate) struct PlaceOrder {
    product_id: i64,
    /// 1 to 100 (`Quantity::MAX`).
    #[schema(minimum = 1, maximum = 100)]
    quantity: i64,
    /// The token of `POST /api/v1/products/{id}/buy-token`: a guarded sale's buys need one.
    buy_token: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/v1/orders",
    tag = "orders",
    summary = "Buy: place an order",
    description = "A buy without an `Idempotency-Key` of a product this server has seen sell out is answered `409 sold_out` before its session is checked, with or without one: the sale page shows any visitor that the product is sold out. Every other buy needs a valid session first (`401 unauthorized`).",
    params(("Idempotency-Key" = Option<String>, Header, description = "Your name for this buy (1-64 printable ASCII characters without spaces, e.g. a UUID), so it can be retried safely: for a day, the same key from you gets the order the first buy made, as it is now, and no second order")),
    request_body = PlaceOrder,
    security(("session_bearer" = []), ("session_cookie" = [])),
    responses(
        (status = 202, description = "The order is taken and durable; pay it before `pay_before`. A retry with the same `Idempotency-Key` gets the same order, as it is now", body = OrderView),
        (status = 400, description = "`invalid_idempotency_key`: the `Idempotency-Key` header is malformed (or sent twice)", body = ErrorBody),
        (status = 403, description = "`not_started`: the sale has not started yet; `ended`: the sale has ended (or an operator ended it early); `sale_paused`: an operator paused buying of the product, try again later; `buy_token_required`: the sale is guarded and the buy carries no `buy_token`; `invalid_buy_token`: the buy token is not this buyer's for this product, is forged or has expired", body = ErrorBody),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
        (status = 409, description = "`limit_reached`: you already bought as many as one buyer may; `sold_out`: sold out, or fewer left than asked for (for a product this server has seen sell out, answered before the session is checked); `idempotency_key_reused`: this `Idempotency-Key` was used for another buy (another product or quantity)", body = ErrorBody),
        (status = 422, description = "`invalid_quantity`: the quantity is out of range", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many requests from this address or this buyer, or too many buys of this sale event by everybody; retry after the `Retry-After` seconds", body = ErrorBody),
        (status = 503, description = "`unavailable`: the order could not be taken; nothing was bought, try again; `backlog_full`: too many orders are waiting to be stored; nothing was bought, retry after the `Retry-After` seconds; `unconfirmed`: the order was taken but the Redis replicas did not acknowledge it in time (`redis_wait_replicas`), so it may or may not survive a Redis failover: retry with the same `Idempotency-Key` after the `Retry-After` seconds (you get the order if it stands), or look at your orders; `refilling`: the product's stock is split into buckets and the units left are on their way to the one this buy is decided in: nothing was bought, retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn place_order(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    session: SessionToken,
    key: Result<IdempotencyKeyHeader, ApiError>,
    body: Result<AppJson<PlaceOrder>, ApiError>,
) -> Result<(StatusCode, JsonBody), ApiError> {
    // Sold out here: answered before the session is checked, since the sale page tells anybody.
    // A keyed buy goes on, as its retry may be answered with its order.
    if let (Ok(IdempotencyKeyHeader(None)), Ok(AppJson(body))) = (&key, &body) {
        state.sale.refuse_sold_out(ProductId(body.product_id))?;
    }
    let user = session.user(&state.auth)?;
    let IdempotencyKeyHeader(key) = key?;
    let AppJson(body) = body?;
    let product = ProductId(body.product_id);
    let bound = state.sale.gate_bound(product);
    state.limits.check_buy(ip, user.id, bound.as_deref())?;
    let quantity = Quantity::parse(body.quantity)
        .map_err(|e| ApiError::invalid("invalid_quantity", e.to_string()))?;
    let token = body.buy_token.as_deref();
    guard::check_buy(&state, user.id, product, token)?;
    let order = state.sale.buy(user.id, product, quantity, key).await?;
    Ok((
        StatusCode::ACCEPTED,
        JsonBody(OrderView::from(order).to_json()),
    ))
}

#[utoipa::path(
    get,
    path = "/api/v1/orders",
    tag = "orders",
    summary = "List your orders, newest first",
    security(("session_bearer" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Your orders", body = Vec<OrderView>),
        (status = 429, description = "`rate_limited`: too many order requests from this buyer; retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn my_orders(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<AppJson<Vec<OrderView>>, ApiError> {
    state.limits.check_orders(user.id)?;
    let orders = state.sale.orders_of(user.id).await?;
    Ok(AppJson(orders.into_iter().map(OrderView::from).collect()))
}

#[utoipa::path(
    get,
    path = "/api/v1/orders/{id}",
    tag = "orders",
    summary = "Show one of your orders",
    params(("id" = i64, Path, description = "The order's id")),
    security(("session_bearer" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "The order", body = OrderView),
        (status = 404, description = "`order_not_found`: no such order of yours", body = ErrorBody),
        (status = 409, description = "`order_pending`: the order is still being recorded; retry after the `Retry-After` seconds", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many order requests from this buyer; retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn my_order(
    State(state): State<AppState>,
    user: CurrentUser,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<OrderView>, ApiError> {
    state.limits.check_orders(user.id)?;
    let order = state.sale.order_of(user.id, OrderId(id)).await?;
    Ok(AppJson(OrderView::from(order)))
}

/// The optional body of `POST /api/v1/orders/{id}/pay`.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
struct PayBody {
    /// `page` (the provider's desktop page, the default) or `wap` (its mobile-web flow).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    channel: Channel,
}

/// Where to pay an order.
#[derive(Serialize, ToSchema)]
pub(crate) struct PayView {
    /// A 64-bit id as a decimal string.
    #[schema(value_type = String)]
    order_id: OrderId,
    #[schema(value_type = String)]
    provider: &'static str,
    pay_url: String,
}

/// `200 {"order_id", "provider", "pay_url"}`: the signed URL at which the buyer pays. The order
/// is paid when the provider's notification arrives, not by this call.
#[utoipa::path(
    post,
    path = "/api/v1/orders/{id}/pay",
    tag = "orders",
    summary = "Get the signed URL at which to pay an order",
    params(
        ("id" = i64, Path, description = "The order's id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Your name for this call (1-64 printable ASCII characters without spaces), so it can be retried safely: for a day, the same key from you gets the first call's answer, the same pay URL"),
    ),
    request_body = Option<PayBody>,
    security(("session_bearer" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Where to pay; the order is paid when the provider's notification arrives. A retry with the same `Idempotency-Key` gets the same answer", body = PayView),
        (status = 400, description = "`malformed_json`: the body is not JSON; `invalid_idempotency_key`: the `Idempotency-Key` header is malformed (or sent twice)", body = ErrorBody),
        (status = 404, description = "`order_not_found`: no such order of yours", body = ErrorBody),
        (status = 409, description = "`order_pending`: the order is still being recorded, retry after the `Retry-After` seconds; `already_paid`: the order is already paid; `order_cancelled`: the order was cancelled; `payment_window_closed`: the payment window has closed; `idempotency_key_reused`: this `Idempotency-Key` was used for another order or channel", body = ErrorBody),
        (status = 422, description = "`invalid_body`: an unknown field or channel", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many order requests from this buyer; retry after the `Retry-After` seconds", body = ErrorBody),
        (status = 503, description = "`payments_not_configured`: this server takes no payments; `payments_unavailable`: the provider cannot be reached, retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn pay(
    State(state): State<AppState>,
    user: CurrentUser,
    AppPath(id): AppPath<i64>,
    IdempotencyKeyHeader(key): IdempotencyKeyHeader,
    reached: Option<Extension<Ends>>,
    body: Bytes,
) -> Result<AppJson<PayView>, ApiError> {
    state.limits.check_orders(user.id)?;
    let PayBody { channel } = if body.iter().all(u8::is_ascii_whitespace) {
        PayBody::default()
    } else {
        Json::<PayBody>::from_bytes(&body)?.0
    };
    let link = state
        .sale
        .pay_with_key(
            user.id,
            OrderId(id),
            channel,
            reached.map(|Extension(ends)| ends.local),
            key,
        )
        .await?;
    Ok(AppJson(PayView {
        order_id: link.order_id,
        provider: link.provider,
        pay_url: link.pay_url,
    }))
}

#[utoipa::path(
    post,
    path = "/api/v1/orders/{id}/cancel",
    tag = "orders",
    summary = "Cancel an unpaid order; the stock goes back on sale",
    params(("id" = i64, Path, description = "The order's id")),
    security(("session_bearer" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "The order, cancelled (cancelling it again changes nothing)", body = OrderView),
        (status = 404, description = "`order_not_found`: no such order of yours", body = ErrorBody),
        (status = 409, description = "`order_pending`: the order is still being recorded, retry after the `Retry-After` seconds; `already_paid`: the order is already paid", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many order requests from this buyer; retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    user: CurrentUser,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<OrderView>, ApiError> {
    state.limits.check_orders(user.id)?;
    let order = state.sale.cancel(user.id, OrderId(id)).await?;
    Ok(AppJson(OrderView::from(order)))
}
