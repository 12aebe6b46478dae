//! Browsing: sale events and products, with live stock. Read-only and open to everybody.

use super::{ErrorBody, EventView, ProductView};
use crate::domain::ProductId;
use crate::error::{ApiError, AppJson, AppPath};
use crate::http::AppState;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

#[utoipa::path(
    get,
    path = "/api/v1/events",
    tag = "catalog",
    summary = "List the sale events",
    responses(
        (status = 200, description = "Every sale event", body = Vec<EventView>),
    )
)]
pub(crate) async fn list_events(
    State(state): State<AppState>,
) -> Result<AppJson<Vec<EventView>>, ApiError> {
    let now = state.sale.now();
    let events = state.sale.events();
    Ok(AppJson(
        events.iter().map(|e| EventView::new(e, now)).collect(),
    ))
}

/// A sale event with its products, in sale order.
#[derive(Serialize, ToSchema)]
pub(crate) struct EventWithProducts {
    #[serde(flatten)]
    event: EventView,
    products: Vec<ProductView>,
}

#[utoipa::path(
    get,
    path = "/api/v1/events/{id}",
    tag = "catalog",
    summary = "Show a sale event and its products",
    params(("id" = i64, Path, description = "The event's id")),
    responses(
        (status = 200, description = "The event and its products, with live stock", body = EventWithProducts),
        (status = 404, description = "`unknown_event`: no such sale event", body = ErrorBody),
    )
)]
pub(crate) async fn show_event(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<EventWithProducts>, ApiError> {
    let event = state
        .sale
        .shown_event(id)
        .ok_or_else(|| ApiError::not_found("unknown_event", "no such sale event"))?;
    let now = state.sale.now();
    let products = product_views_of_event(&state, id).await;
    Ok(AppJson(EventWithProducts {
        event: EventView::new(&event, now),
        products,
    }))
}

/// Views of the products of one event, with live stock, in sale order.
pub async fn product_views_of_event(state: &AppState, event_id: i64) -> Vec<ProductView> {
    let now = state.sale.now();
    let mut views = Vec::new();
    for p in state.sale.shown_products_of_event(event_id) {
        views.push(ProductView::new(&p, state.sale.remaining(&p).await, now));
    }
    views
}

#[utoipa::path(
    get,
    path = "/api/v1/products/{id}",
    tag = "catalog",
    summary = "Show a product with live stock",
    params(("id" = i64, Path, description = "The product's id")),
    responses(
        (status = 200, description = "The product", body = ProductView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
    )
)]
pub(crate) async fn show_product(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<ProductView>, ApiError> {
    let product = state
        .sale
        .shown_product(ProductId(id))
        .ok_or_else(ApiError::unknown_product)?;
    let remaining = state.sale.remaining(&product).await;
    Ok(AppJson(ProductView::new(
        &product,
        remaining,
        state.sale.now(),
    )))
}
