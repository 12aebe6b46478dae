//! The payment provider's routes: its asynchronous notifications, which are what pays an
//! order, and the page the buyer's browser is sent back to.

use super::AppState;
use super::pages::render;
use super::pages::views::PayReturnPage;
use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

/// The form pairs of a body or query, decoded.
fn pairs(encoded: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(encoded).into_owned().collect()
}

/// Answers `success` once the notification is applied (or was already), which stops the
/// provider's retries, and `failure` otherwise: refused ones change nothing, and a failure on
/// our side is retried by the provider.
pub(crate) async fn notify(State(state): State<AppState>, body: Bytes) -> &'static str {
    match state.sale.notified(&pairs(&body)).await {
        Ok(settled) => {
            tracing::debug!(?settled, "payment notification applied");
            "success"
        }
        Err(e) => {
            tracing::warn!(error = %e, "payment notification not applied");
            "failure"
        }
    }
}

/// Verifies what the provider sent the buyer back with, then shows the order as stored.
pub(crate) async fn returned(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let params = pairs(query.unwrap_or_default().as_bytes());
    let order = state.sale.returned(&params).await?;
    render(
        &request,
        &PayReturnPage {
            order_id: order.id.to_string(),
            product_name: order.product_name,
            total: order.total.to_string(),
            status: order.status.as_str(),
            sandbox: state.sale.provider_name() == Some("sandbox"),
        },
    )
}
