//! The operator's orders under `/api/v1/admin/orders`, behind the admin token: find orders by
//! buyer, product and status, read one with the payment provider's words kept for it, and
//! refund a paid one through the provider, which the sale service records in the audit log.

use super::admin::token_operator;
use super::{ErrorBody, OrderView, Rfc3339};
use crate::domain::{Order, OrderId, OrderStatus, ProductId, UserId};
use crate::error::{ApiError, AppJson, AppPath, AppQuery};
use crate::http::AppState;
use crate::http::extract::AdminAuth;
use crate::sale::OrderRecord;
use crate::store::{KeptPayment, OrderSearch};
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Orders one search answers when it names no limit.
const DEFAULT_LIMIT: i64 = 50;

/// The most orders one search answers.
const MAX_LIMIT: i64 = 200;

/// An order as the operator sees it: the buyer's view and who the buyer is.
#[derive(Serialize, ToSchema)]
struct AdminOrderView {
    #[serde(flatten)]
    order: OrderView,
    user_id: i64,
}

/// One order with the payment provider's words kept for it.
#[derive(Serialize, ToSchema)]
pub(crate) struct OrderDetail {
    #[serde(flatten)]
    order: AdminOrderView,
    /// Money arrived for the order and has not gone back yet (its status is `cancelled`): the
    /// refund is due and is retried every second until the provider takes it.
    refund_pending: bool,
    /// Oldest first.
    payments: Vec<PaymentView>,
}

/// One word of the payment provider's about an order, as kept.
#[derive(Serialize, ToSchema)]
struct PaymentView {
    /// `sandbox` or `alipay`.
    provider: String,
    /// The provider's trade number.
    trade_no: String,
    amount_cents: i64,
    /// The provider's spelling, e.g. `TRADE_SUCCESS`.
    trade_status: String,
    /// Whether the status means the money arrived.
    paid: bool,
    #[schema(value_type = String, format = DateTime)]
    received_at: Rfc3339,
}

/// A page of a search, newest first.
#[derive(Serialize, ToSchema)]
pub(crate) struct OrderPage {
    orders: Vec<AdminOrderView>,
    /// The `before` of the next page, when this page is full (the next may be empty); `null`
    /// on the last page.
    #[schema(value_type = Option<String>)]
    next_before: Option<OrderId>,
}

/// The filters of a search; each is optional.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SearchQuery {
    /// Only this buyer's orders.
    user_id: Option<i64>,
    /// Only orders of this product.
    product_id: Option<i64>,
    /// Only orders in this status: `awaiting_payment`, `paid`, `cancelled` or `refunded`.
    status: Option<String>,
    /// How many orders at most, 1 to 200 (50 when left out).
    limit: Option<i64>,
    /// Only orders older than this order id: the `next_before` of the previous page.
    before: Option<i64>,
}

impl AdminOrderView {
    fn new(order: Order) -> Self {
        Self {
            user_id: order.user_id.0,
            order: OrderView::from(order),
        }
    }
}

impl OrderDetail {
    fn new(record: OrderRecord) -> Self {
        Self {
            refund_pending: record.refund_due(),
            payments: record.payments.iter().map(PaymentView::new).collect(),
            order: AdminOrderView::new(record.order),
        }
    }
}

impl PaymentView {
    fn new(kept: &KeptPayment) -> Self {
        Self {
            provider: kept.provider.clone(),
            trade_no: kept.trade_no.clone(),
            amount_cents: kept.amount.cents(),
            trade_status: kept.trade_status.clone(),
            paid: kept.paid,
            received_at: Rfc3339(kept.received_at),
        }
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/admin/orders",
    tag = "admin",
    summary = "Find orders by buyer, product and status, newest first",
    params(SearchQuery),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The matching orders, newest first", body = OrderPage),
        (status = 422, description = "`invalid_query`: a parameter is unknown or not a whole number; `invalid_status`: the status is not one of the four; `invalid_limit`: the limit is not 1 to 200", body = ErrorBody),
    )
)]
pub(crate) async fn search_orders(
    _: AdminAuth,
    State(state): State<AppState>,
    AppQuery(query): AppQuery<SearchQuery>,
) -> Result<AppJson<OrderPage>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "invalid_limit",
            format!("limit must be 1 to {MAX_LIMIT}"),
        ));
    }
    let search = OrderSearch {
        user: query.user_id.map(UserId),
        product: query.product_id.map(ProductId),
        status: query
            .status
            .as_deref()
            .map(OrderStatus::named)
            .transpose()?,
        before: query.before.map(OrderId),
        limit,
    };
    let orders = state.store.search_orders(&search).await?;
    let full = orders.len() as i64 == limit;
    Ok(AppJson(OrderPage {
        next_before: orders.last().filter(|_| full).map(|order| order.id),
        orders: orders.into_iter().map(AdminOrderView::new).collect(),
    }))
}

#[utoipa::path(
    get,
    path = "/api/v1/admin/orders/{id}",
    tag = "admin",
    summary = "One order, with the payment provider's words kept for it",
    params(("id" = i64, Path, description = "The order's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The order", body = OrderDetail),
        (status = 404, description = "`order_not_found`: no such order; `not_found`: the id is not a number", body = ErrorBody),
        (status = 409, description = "`order_pending`: the order is still on its way to the database (cluster mode); retry after `Retry-After`", body = ErrorBody),
    )
)]
pub(crate) async fn show_order(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<OrderDetail>, ApiError> {
    let record = state.sale.order_record(OrderId(id)).await?;
    Ok(AppJson(OrderDetail::new(record)))
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/orders/{id}/refund",
    tag = "admin",
    summary = "Refund a paid order: cancelled, its stock back on sale once, its money sent back through the payment provider",
    description = "Refunding an order whose refund is pending asks the provider again at once. \
        Any number of refunds of one order return its stock once and refund it once.",
    params(("id" = i64, Path, description = "The order's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "Refunded: the money went back (status `refunded`)", body = OrderDetail),
        (status = 202, description = "Cancelled and its stock back on sale, but the provider did not take the refund now (`refund_pending`: true, status `cancelled`): it is retried every second", body = OrderDetail),
        (status = 404, description = "`order_not_found`: no such order; `not_found`: the id is not a number", body = ErrorBody),
        (status = 409, description = "`not_paid`: no money arrived for the order (awaiting payment, or cancelled unpaid); `already_refunded`: the money went back already; `order_pending`: the order is still on its way to the database (cluster mode)", body = ErrorBody),
        (status = 503, description = "`payments_not_configured`: this server has no payment provider", body = ErrorBody),
    )
)]
pub(crate) async fn refund_order(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<(StatusCode, AppJson<OrderDetail>), ApiError> {
    let id = OrderId(id);
    state.sale.refund_paid(&token_operator(&state), id).await?;
    // Read again: the ticker may have made a pending refund meanwhile.
    let record = state.sale.order_record(id).await?;
    let status = if record.refund_due() {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, AppJson(OrderDetail::new(record))))
}
