//! The operator's API under `/admin`, behind `Authorization: Bearer <admin token>`: create
//! sale events and products, change products, add stock to a live sale, pause and resume
//! buying, end a product's or an event's sale early, and read back every event, every product
//! and the audit log. Every change is written to the audit log. The checks of the operator's
//! input live here once, for the console too.

use super::{ErrorBody, EventView, ProductView, Rfc3339};
use crate::domain::{Guard, Millis, Money, Product, ProductId, Quantity, SaleEvent, SaleWindow};
use crate::error::{ApiError, AppJson, AppPath};
use crate::http::AppState;
use crate::http::extract::AdminAuth;
use crate::sale::{Controlled, NewProductInput, ProductChanges};
use crate::store::AuditEntry;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// The most units one product may hold: far above any flash sale, far below overflow.
pub(in crate::http) const MAX_STOCK: i64 = 100_000_000;

/// The earliest and latest times a sale may name (2000-01-01 and 2100-01-01 UTC): far outside
/// any real sale, and a typo of a year is refused instead of making a sale that never opens.
const SANE_TIMES: std::ops::Range<i64> = 946_684_800_000..4_102_444_800_000;

pub(in crate::http) fn window(
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
) -> Result<SaleWindow, ApiError> {
    let (start, end) = (starts_at.timestamp_millis(), ends_at.timestamp_millis());
    if !SANE_TIMES.contains(&start) || !SANE_TIMES.contains(&end) {
        return Err(ApiError::invalid(
            "invalid_window",
            "starts_at and ends_at must lie between 2000 and 2100",
        ));
    }
    SaleWindow::new(start, end).map_err(|e| ApiError::invalid("invalid_window", e.to_string()))
}

pub(in crate::http) fn price(cents: i64) -> Result<Money, ApiError> {
    Money::from_cents(cents).map_err(|e| ApiError::invalid("invalid_price", e.to_string()))
}

pub(in crate::http) fn text(
    value: String,
    field: &'static str,
    max: usize,
) -> Result<String, ApiError> {
    let trimmed = value.trim();
    if trimmed.is_empty() || trimmed.chars().count() > max {
        return Err(ApiError::invalid(
            "invalid_text",
            format!("{field} must have 1 to {max} characters"),
        ));
    }
    if trimmed.chars().any(hidden) {
        return Err(ApiError::invalid(
            "invalid_text",
            format!(
                "{field} may not hold control characters or invisible direction and joining \
                 marks (they can make a shopper read another text than the one shown)"
            ),
        ));
    }
    Ok(trimmed.to_owned())
}

/// A character that shows nothing yet changes what is shown: control characters, and the
/// Unicode marks that reorder text (bidi overrides and isolates, as in "Trojan Source") or
/// hide between letters.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

pub(in crate::http) fn image_url(value: String) -> Result<String, ApiError> {
    let ok_scheme = ["/", "https://", "http://"]
        .iter()
        .any(|p| value.starts_with(p))
        && !value.starts_with("//");
    if !ok_scheme || value.len() > 500 || value.chars().any(|c| c.is_whitespace() || hidden(c)) {
        return Err(ApiError::invalid(
            "invalid_image_url",
            "image_url must be a path starting with / or an http(s) URL",
        ));
    }
    Ok(value)
}

pub(in crate::http) fn guard(value: &str) -> Result<Guard, ApiError> {
    Guard::parse(value).map_err(|e| ApiError::invalid("invalid_guard", e.to_string()))
}

/// The audit log's words for a new event: its id, title and guard, if any.
pub(in crate::http) fn created_event_action(event: &SaleEvent) -> String {
    let action = format!("created event {} \"{}\"", event.id, event.title);
    match event.guard {
        Guard::None => action,
        guard => format!("{action} guarded by {}", guard.as_str()),
    }
}

pub(in crate::http) fn per_user_limit(value: i64) -> Result<u32, ApiError> {
    Quantity::parse(value)
        .map(Quantity::get)
        .map_err(|_| ApiError::invalid("invalid_limit", "per_user_limit must be 1 to 100"))
}

/// Who changed something through the admin API: the admin token's fingerprint (the first
/// hex digits of its SHA-256), which tells tokens apart across a rotation without revealing one.
pub(in crate::http) fn api_actor(state: &AppState) -> String {
    let digest = Sha256::digest(state.auth.admin_token.expose().as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("token {hex}")
}

/// Writes an operator's change to the audit log. The change is already made, so a log that
/// cannot be written is reported in the server's log instead of failing the request.
pub(in crate::http) async fn record_audit(state: &AppState, actor: &str, action: String) {
    let entry = AuditEntry {
        actor: actor.to_owned(),
        action,
        at: state.sale.now(),
    };
    if let Err(e) = state.store.record_audit(&entry).await {
        tracing::error!(error = %e, action = %entry.action, "could not write the audit log");
    }
}

/// How many of the latest audit log entries `GET /api/v1/admin/audit` answers.
pub(in crate::http) const AUDIT_SHOWN: i64 = 200;

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
    responses((status = 200, description = "Every product, by sale start then id", body = [ProductView]))
)]
pub(crate) async fn list_products(
    _: AdminAuth,
    State(state): State<AppState>,
) -> Result<AppJson<Vec<ProductView>>, ApiError> {
    let now = state.sale.now();
    let mut views = Vec::new();
    for product in state.store.products().await? {
        let remaining = state.sale.remaining(&product).await;
        views.push(ProductView::new(&product, remaining, now));
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
    let entries = state.store.audit_log(AUDIT_SHOWN).await?;
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
    let window = window(body.starts_at, body.ends_at)?;
    let title = match body.title {
        Some(title) => text(title, "title", 100)?,
        None => crate::clock::local_time_of_day(window.start),
    };
    let guard = body.guard.as_deref().map(guard).transpose()?;
    let event = state
        .sale
        .create_event(&title, window, guard.unwrap_or_default())
        .await?;
    record_audit(&state, &api_actor(&state), created_event_action(&event)).await;
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
            let controlled = state.sale.set_event_guard(id, guard).await?;
            if let Some(action) = guard_action(&controlled) {
                record_audit(&state, &api_actor(&state), action).await;
            }
            controlled.value
        }
        None => state
            .sale
            .event(id)
            .await?
            .ok_or_else(|| ApiError::not_found("unknown_event", "no such sale event"))?,
    };
    Ok(AppJson(EventView::new(&event, state.sale.now())))
}

/// The audit log's words for a change of an event's guard, or `None` for a repeat.
pub(in crate::http) fn guard_action(controlled: &Controlled<SaleEvent>) -> Option<String> {
    let event = &controlled.value;
    controlled.changed.then(|| {
        format!(
            "set the guard of event {} to {}",
            event.id,
            event.guard.as_str()
        )
    })
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
        (status = 201, description = "The product", body = ProductView),
        (status = 422, description = "`invalid_stock`: the stock is out of range; `unknown_event`: `event_id` names no sale event; `invalid_window`: the sale window is wrong; `invalid_text`: a text is empty or too long; `invalid_image_url`: the image URL is not a path or an http(s) URL; `invalid_price`: a price is out of range or the sale price exceeds the original; `invalid_limit`: the per-user limit is not 1 to 100", body = ErrorBody),
    )
)]
pub(crate) async fn create_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppJson(body): AppJson<NewProduct>,
) -> Result<(StatusCode, AppJson<ProductView>), ApiError> {
    if !(0..=MAX_STOCK).contains(&body.stock) {
        return Err(ApiError::invalid(
            "invalid_stock",
            format!("stock must be 0 to {MAX_STOCK}"),
        ));
    }
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
        name: text(body.name, "name", 200)?,
        image_url: image_url(
            body.image_url
                .unwrap_or_else(|| "/static/img/gift.svg".into()),
        )?,
        original_price: price(body.original_price_cents)?,
        sale_price: price(body.sale_price_cents)?,
        stock: body.stock,
        per_user_limit: body.per_user_limit.map(per_user_limit).transpose()?,
        window,
    };
    let product = state.sale.create_product(input).await?;
    let action = format!("created product {} \"{}\"", product.id.0, product.name);
    record_audit(&state, &api_actor(&state), action).await;
    let view = ProductView::new(&product, product.stock, state.sale.now());
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
        (status = 200, description = "The product, changed", body = ProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
        (status = 422, description = "`invalid_window`: the sale window is wrong; `invalid_text`: a text is empty or too long; `invalid_image_url`: the image URL is not a path or an http(s) URL; `invalid_price`: a price is out of range or the sale price exceeds the original; `invalid_limit`: the per-user limit is not 1 to 100", body = ErrorBody),
    )
)]
pub(crate) async fn update_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    AppJson(body): AppJson<ProductUpdate>,
) -> Result<AppJson<ProductView>, ApiError> {
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
        name: body.name.map(|n| text(n, "name", 200)).transpose()?,
        image_url: body.image_url.map(image_url).transpose()?,
        original_price: body.original_price_cents.map(price).transpose()?,
        sale_price: body.sale_price_cents.map(price).transpose()?,
        per_user_limit: body.per_user_limit.map(per_user_limit).transpose()?,
        window,
    };
    let product = state.sale.update_product(id, changes).await?;
    let action = format!("changed product {}", id.0);
    record_audit(&state, &api_actor(&state), action).await;
    let remaining = state.sale.remaining(&product).await;
    Ok(AppJson(ProductView::new(
        &product,
        remaining,
        state.sale.now(),
    )))
}

pub(in crate::http) fn datetime(ms: Millis) -> DateTime<Utc> {
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
        (status = 200, description = "The product, with its new stock", body = ProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
        (status = 422, description = "`invalid_quantity`: the quantity is out of range", body = ErrorBody),
    )
)]
pub(crate) async fn add_stock(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    AppJson(body): AppJson<StockIncrease>,
) -> Result<AppJson<ProductView>, ApiError> {
    if !(1..=MAX_STOCK).contains(&body.quantity) {
        return Err(ApiError::invalid(
            "invalid_quantity",
            format!("quantity must be 1 to {MAX_STOCK}"),
        ));
    }
    let product = state.sale.add_stock(ProductId(id), body.quantity).await?;
    let action = format!("added {} units to product {id}", body.quantity);
    record_audit(&state, &api_actor(&state), action).await;
    let remaining = state.sale.remaining(&product).await;
    Ok(AppJson(ProductView::new(
        &product,
        remaining,
        state.sale.now(),
    )))
}

/// The audit log's words for a control, `{verb} {what} {id}` (e.g. `paused product 7`), or
/// `None` for a repeat that changed nothing, which is not logged.
pub(in crate::http) fn control_action<T>(
    controlled: &Controlled<T>,
    verb: &str,
    what: &str,
    id: i64,
) -> Option<String> {
    controlled.changed.then(|| format!("{verb} {what} {id}"))
}

/// A product control's answer: the product as it is now, written to the audit log if it
/// changed.
async fn controlled_product(
    state: &AppState,
    controlled: Controlled<Product>,
    verb: &str,
) -> AppJson<ProductView> {
    let product = &controlled.value;
    if let Some(action) = control_action(&controlled, verb, "product", product.id.0) {
        record_audit(state, &api_actor(state), action).await;
    }
    let remaining = state.sale.remaining(product).await;
    AppJson(ProductView::new(product, remaining, state.sale.now()))
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/products/{id}/pause",
    tag = "admin",
    summary = "Pause buying of a product: every buy is refused (`sale_paused`) on every server until it is resumed",
    params(("id" = i64, Path, description = "The product's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The product, paused (a paused product answers the same and changes nothing)", body = ProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
    )
)]
pub(crate) async fn pause_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<ProductView>, ApiError> {
    let controlled = state.sale.set_paused(ProductId(id), true).await?;
    Ok(controlled_product(&state, controlled, "paused").await)
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/products/{id}/resume",
    tag = "admin",
    summary = "Resume buying of a paused product",
    params(("id" = i64, Path, description = "The product's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The product, not paused (one that was not paused answers the same and changes nothing)", body = ProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
    )
)]
pub(crate) async fn resume_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<ProductView>, ApiError> {
    let controlled = state.sale.set_paused(ProductId(id), false).await?;
    Ok(controlled_product(&state, controlled, "resumed").await)
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
        (status = 200, description = "The product, ended (one that has ended answers the same and changes nothing)", body = ProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
    )
)]
pub(crate) async fn end_product(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<ProductView>, ApiError> {
    let controlled = state.sale.end_product(ProductId(id)).await?;
    Ok(controlled_product(&state, controlled, "ended").await)
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
    let controlled = state.sale.end_event(id).await?;
    if let Some(action) = control_action(&controlled, "ended", "event", id) {
        record_audit(&state, &api_actor(&state), action).await;
    }
    Ok(AppJson(EventView::new(&controlled.value, state.sale.now())))
}
