//! The operator's API under `/admin`, behind `Authorization: Bearer <admin token>`: create
//! sale events and products, change products, add stock to a live sale, pause and resume
//! buying, end a product's or an event's sale early, and read back every event, every product
//! and the audit log. The operator's input is parsed into `domain` types, as the console
//! parses its forms, and the sale service records each change in the audit log.

use super::{ErrorBody, EventView, ProductView, Rfc3339};
use crate::domain::{
    AddedStock, EventTitle, Guard, ImageUrl, Millis, Money, Operator, PerUserLimit, Product,
    ProductId, ProductName, Refusal, SaleWindow, Stock, StockBuckets,
};
use crate::error::{ApiError, AppJson, AppPath};
use crate::http::AppState;
use crate::http::extract::AdminAuth;
use crate::sale::{Controlled, NewEventInput, NewProductInput, ProductChanges};
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The operator behind an admin API request: the holder of the admin token, named in the
/// audit log by its fingerprint.
pub(in crate::http) fn token_operator(state: &AppState) -> Operator {
    Operator::with_token(state.auth.admin_token.expose())
}

/// A sale window from the API's times.
fn window(starts_at: DateTime<Utc>, ends_at: DateTime<Utc>) -> Result<SaleWindow, Refusal> {
    SaleWindow::parse(starts_at.timestamp_millis(), ends_at.timestamp_millis())
}

/// A product as the operator sees it: as shoppers see it, and the settings only the operator
/// uses.
#[derive(Serialize, ToSchema)]
pub(crate) struct AdminProductView {
    #[serde(flatten)]
    product: ProductView,
    /// How many buckets its stock is split into in a shared gate, each on its own Redis
    /// shard: 1 to 64. Fixed once the product is preheated.
    #[schema(minimum = 1, maximum = 64)]
    buckets: u8,
}

impl AdminProductView {
    /// The view of `p` with `remaining` units left at `now`.
    fn new(p: &Product, remaining: i64, now: Millis) -> Self {
        Self {
            product: ProductView::new(p, remaining, now),
            buckets: p.buckets.get(),
        }
    }
}

/// A guard from the API's spelling.
fn guard(value: &str) -> Result<Guard, Refusal> {
    Ok(Guard::parse(value)?)
}

#[utoipa::path(
    get,
    path = "/api/v1/admin/events",
    tag = "admin",
    summary = "List every sale event, from the database",
    security(("admin_bearer" = [])),
    responses((status = 200, description = "Every sale event, by start time", body = [EventView]))
)]
pub(crate) async fn list_events(
    _: AdminAuth,
    State(state): State<AppState>,
) -> Result<AppJson<Vec<EventView>>, ApiError> {
    let now = state.sale.now();
    let events = state.store.events().await?;
    Ok(AppJson(
        events.iter().map(|e| EventView::new(e, now)).collect(),
    ))
}

#[utoipa::path(
    get,
    path = "/api/v1/admin/products",
    tag = "admin",
    summary = "List every product, from the database, with live stock",
    security(("admin_bearer" = [])),
    responses((status = 200, description = "Every product, by sale start then id", body = [AdminProductView]))
)]
pub(crate) async fn list_products(
    _: AdminAuth,
    State(state): State<AppState>,
) -> Result<AppJson<Vec<AdminProductView>>, ApiError> {
    let now = state.sale.now();
    let mut views = Vec::new();
    for product in state.store.products().await? {
        let remaining = state.sale.remaining(&product).await;
        views.push(AdminProductView::new(&product, remaining, now));
    }
    Ok(AppJson(views))
}

/// One operator's change in the audit log.
#[derive(Serialize, ToSchema)]
pub(crate) struct AuditView {
    /// `admin` through the console, `token` and the admin token's fingerprint through this API.
    actor: String,
    /// What changed, naming the ids.
    action: String,
    #[schema(value_type = String, format = DateTime)]
    at: Rfc3339,
}

#[utoipa::path(
    get,
    path = "/api/v1/admin/audit",
    tag = "admin",
    summary = "The latest changes through the console or this API, newest first",
    security(("admin_bearer" = [])),
    responses((status = 200, description = "The latest 200 changes, newest first", body = [AuditView]))
)]
pub(crate) async fn audit_log(
    _: AdminAuth,
    State(state): State<AppState>,
) -> Result<AppJson<Vec<AuditView>>, ApiError> {
    let entries = state.sale.audit_log().await?;
    Ok(AppJson(
        entries
            .into_iter()
            .map(|e| AuditView {
                actor: e.actor,
                action: e.action,
                at: Rfc3339(e.at),
            })
            .collect(),
    ))
}

/// A sale event to create; without a title it is named after its start time.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewEvent {
    title: Option<String>,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    /// `none` (the default), `token` or `challenge`: what its products' buyers must show
    /// besides a session (see `POST /api/v1/products/{id}/buy-token`).
    guard: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/events",
    tag = "admin",
    summary = "Create a sale event",
    request_body = NewEvent,
    security(("admin_bearer" = [])),
    responses(
        (status = 201, description = "The event", body = EventView),
        (status = 422, description = "`invalid_window`: the sale window is wrong; `invalid_text`: a text is empty or too long; `invalid_guard`: the guard is not `none`, `token` or `challenge`", body = ErrorBody),
    )
)]
pub(crate) async fn create_event(
    _: AdminAuth,
    State(state): State<AppState>,
    AppJson(body): AppJson<NewEvent>,
) -> Result<(StatusCode, AppJson<EventView>), ApiError> {
    let input = NewEventInput {
        window: window(body.starts_at, body.ends_at)?,
        title: body.title.as_deref().map(EventTitle::parse).transpose()?,
        guard: body
            .guard
            .as_deref()
            .map(guard)
            .transpose()?
            .unwrap_or_default(),
    };
    let event = state
        .sale
        .create_event(&token_operator(&state), input)
        .await?;
    Ok((
        StatusCode::CREATED,
        AppJson(EventView::new(&event, state.sale.now())),
    ))
}

/// Changes to a sale event; a field left out keeps its value.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventUpdate {
    /// `none`, `token` or `challenge`: what its products' buyers must show besides a session.
    guard: Option<String>,
}

#[utoipa::path(
    patch,
    path = "/api/v1/admin/events/{id}",
    tag = "admin",
    summary = "Change a sale event's guard, also while it is live: every server checks buys the new way within a second",
    params(("id" = i64, Path, description = "The event's id")),
    request_body = EventUpdate,
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The event, changed (setting the guard it has changes nothing)", body = EventView),
        (status = 404, description = "`unknown_event`: no such sale event", body = ErrorBody),
        (status = 422, description = "`invalid_guard`: the guard is not `none`, `token` or `challenge`", body = ErrorBody),
    )
)]
pub(crate) async fn update_event(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    AppJson(body): AppJson<EventUpdate>,
) -> Result<AppJson<EventView>, ApiError> {
    let event = match body.guard.as_deref().map(guard).transpose()? {
        Some(guard) => {
            let by = token_operator(&state);
            state.sale.set_event_guard(&by, id, guard).await?.value
        }
        None => state
            .sale
            .event(id)
            .await?
            .ok_or_else(|| ApiError::not_found("unknown_event", "no such sale event"))?,
    };
    Ok(AppJson(EventView::new(&event, state.sale.now())))
}

/// A product to put on sale; without its own window it sells during its event's.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewProduct {
    event_id: Option<i64>,
    name: String,
    image_url: Option<String>,
    original_price_cents: i64,
    sale_price_cents: i64,
    stock: i64,
    per_user_limit: Option<i64>,
    /// How many buckets its stock is split into in a shared gate, each on its own Redis shard,
    /// to spread a hot product's buys over a Redis Cluster's masters; an in-process gate
    /// ignores it. 1 (the default) keeps the whole stock in one place.
    #[schema(minimum = 1, maximum = 64, default = 1)]
    buckets: Option<i64>,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/products",
    tag = "admin",
    summary = "Create a product",
    request_body = NewProduct,
    security(("admin_bearer" = [])),
    responses(
        (status = 201, description = "The product", body = AdminProductView),
        (status = 422, description = "`invalid_stock`: the stock is out of range; `unknown_event`: `event_id` names no sale event; `invalid_window`: the sale window is wrong; `invalid_text`: a text is empty or too long; `invalid_image_url`: the image URL is not a path or an http(s) URL; `invalid_price`: a price is out of range or the sale price exceeds the original; `invalid_limit`: the per-user limit is not 1 to 100; `invalid_buckets`: the buckets are not 1 to 64", body = ErrorBody),
    )
)]
pub(crate) async fn create_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppJson(body): AppJson<NewProduct>,
) -> Result<(StatusCode, AppJson<AdminProductView>), ApiError> {
    let stock = Stock::parse(body.stock)?;
    let window = match (body.starts_at, body.ends_at) {
        (Some(start), Some(end)) => Some(window(start, end)?),
        (None, None) => None,
        _ => {
            return Err(ApiError::invalid(
                "invalid_window",
                "give both starts_at and ends_at, or neither",
            ));
        }
    };
    let input = NewProductInput {
        event_id: body.event_id,
        name: ProductName::parse(&body.name)?,
        image_url: body.image_url.as_deref().map(ImageUrl::parse).transpose()?,
        original_price: Money::price(body.original_price_cents)?,
        sale_price: Money::price(body.sale_price_cents)?,
        stock,
        per_user_limit: body.per_user_limit.map(PerUserLimit::parse).transpose()?,
        buckets: body.buckets.map(StockBuckets::parse).transpose()?,
        window,
    };
    let product = state
        .sale
        .create_product(&token_operator(&state), input)
        .await?;
    let view = AdminProductView::new(&product, product.stock, state.sale.now());
    Ok((StatusCode::CREATED, AppJson(view)))
}

/// Changes to a product; a field left out keeps its value.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProductUpdate {
    name: Option<String>,
    image_url: Option<String>,
    original_price_cents: Option<i64>,
    sale_price_cents: Option<i64>,
    per_user_limit: Option<i64>,
    /// How many buckets its stock is split into in a shared gate (see `NewProduct`): only
    /// until the product is preheated (`409 product_loaded` after, unless it is the count the
    /// product has).
    #[schema(minimum = 1, maximum = 64)]
    buckets: Option<i64>,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
}

#[utoipa::path(
    patch,
    path = "/api/v1/admin/products/{id}",
    tag = "admin",
    summary = "Change a product",
    params(("id" = i64, Path, description = "The product's id")),
    request_body = ProductUpdate,
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The product, changed", body = AdminProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
        (status = 409, description = "`product_loaded`: the product is preheated already, and its stock buckets can be changed only before (nothing was changed)", body = ErrorBody),
        (status = 422, description = "`invalid_window`: the sale window is wrong; `invalid_text`: a text is empty or too long; `invalid_image_url`: the image URL is not a path or an http(s) URL; `invalid_price`: a price is out of range or the sale price exceeds the original; `invalid_limit`: the per-user limit is not 1 to 100; `invalid_buckets`: the buckets are not 1 to 64", body = ErrorBody),
    )
)]
pub(crate) async fn update_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    AppJson(body): AppJson<ProductUpdate>,
) -> Result<AppJson<AdminProductView>, ApiError> {
    let id = ProductId(id);
    let current = state
        .sale
        .product(id)
        .await?
        .ok_or_else(ApiError::unknown_product)?;
    let window = match (body.starts_at, body.ends_at) {
        (None, None) => None,
        (start, end) => Some(window(
            start.unwrap_or_else(|| datetime(current.window.start)),
            end.unwrap_or_else(|| datetime(current.window.end)),
        )?),
    };
    let changes = ProductChanges {
        name: body.name.as_deref().map(ProductName::parse).transpose()?,
        image_url: body.image_url.as_deref().map(ImageUrl::parse).transpose()?,
        original_price: body.original_price_cents.map(Money::price).transpose()?,
        sale_price: body.sale_price_cents.map(Money::price).transpose()?,
        per_user_limit: body.per_user_limit.map(PerUserLimit::parse).transpose()?,
        buckets: body.buckets.map(StockBuckets::parse).transpose()?,
        window,
    };
    let product = state
        .sale
        .update_product(&token_operator(&state), id, changes)
        .await?;
    let remaining = state.sale.remaining(&product).await;
    Ok(AppJson(AdminProductView::new(
        &product,
        remaining,
        state.sale.now(),
    )))
}

fn datetime(ms: Millis) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// Units to add to a product's stock.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StockIncrease {
    quantity: i64,
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/products/{id}/stock",
    tag = "admin",
    summary = "Add stock to a product, live sales too",
    params(("id" = i64, Path, description = "The product's id")),
    request_body = StockIncrease,
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The product, with its new stock", body = AdminProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
        (status = 422, description = "`invalid_quantity`: the quantity is out of range", body = ErrorBody),
    )
)]
pub(crate) async fn add_stock(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    AppJson(body): AppJson<StockIncrease>,
) -> Result<AppJson<AdminProductView>, ApiError> {
    let units = AddedStock::parse(body.quantity)?;
    let product = state
        .sale
        .add_stock(&token_operator(&state), ProductId(id), units)
        .await?;
    let remaining = state.sale.remaining(&product).await;
    Ok(AppJson(AdminProductView::new(
        &product,
        remaining,
        state.sale.now(),
    )))
}

/// A product control's answer: the product as it is now.
async fn controlled_product(
    state: &AppState,
    controlled: Controlled<Product>,
) -> AppJson<AdminProductView> {
    let product = &controlled.value;
    let remaining = state.sale.remaining(product).await;
    AppJson(AdminProductView::new(product, remaining, state.sale.now()))
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/products/{id}/pause",
    tag = "admin",
    summary = "Pause buying of a product: every buy is refused (`sale_paused`) on every server until it is resumed",
    params(("id" = i64, Path, description = "The product's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The product, paused (a paused product answers the same and changes nothing)", body = AdminProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
    )
)]
pub(crate) async fn pause_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<AdminProductView>, ApiError> {
    let by = token_operator(&state);
    let controlled = state.sale.set_paused(&by, ProductId(id), true).await?;
    Ok(controlled_product(&state, controlled).await)
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/products/{id}/resume",
    tag = "admin",
    summary = "Resume buying of a paused product",
    params(("id" = i64, Path, description = "The product's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The product, not paused (one that was not paused answers the same and changes nothing)", body = AdminProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
    )
)]
pub(crate) async fn resume_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<AdminProductView>, ApiError> {
    let by = token_operator(&state);
    let controlled = state.sale.set_paused(&by, ProductId(id), false).await?;
    Ok(controlled_product(&state, controlled).await)
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/products/{id}/end",
    tag = "admin",
    summary = "End a product's sale now: every later buy is refused (`ended`); orders already taken stay",
    description = "The sale's end becomes now. A sale that has not started ends too: its start moves to just before now, so it never opens.",
    params(("id" = i64, Path, description = "The product's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The product, ended (one that has ended answers the same and changes nothing)", body = AdminProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
    )
)]
pub(crate) async fn end_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<AdminProductView>, ApiError> {
    let by = token_operator(&state);
    let controlled = state.sale.end_product(&by, ProductId(id)).await?;
    Ok(controlled_product(&state, controlled).await)
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/events/{id}/end",
    tag = "admin",
    summary = "End a sale event now, with each of its products still on sale or to come; orders already taken stay",
    description = "The event's end and each of its products' ends become now, as `POST /api/v1/admin/products/{id}/end` does for one product.",
    params(("id" = i64, Path, description = "The event's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The event, ended (one that has ended with all its products answers the same and changes nothing)", body = EventView),
        (status = 404, description = "`unknown_event`: no such sale event", body = ErrorBody),
    )
)]
pub(crate) async fn end_event(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<EventView>, ApiError> {
    let controlled = state.sale.end_event(&token_operator(&state), id).await?;
    Ok(AppJson(EventView::new(&controlled.value, state.sale.now())))
}
