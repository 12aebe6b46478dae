//! The payment provider's routes: its asynchronous notifications, which are what pays an
//! order, and the page the buyer's browser is sent back to.

use super::AppState;
use super::client_ip::ClientIp;
use super::pages::render;
use super::pages::views::PayReturnPage;
use crate::error::ApiError;
use crate::sale::OrderError;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use std::net::IpAddr;

/// The form pairs of a body or query, decoded.
fn pairs(encoded: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(encoded).into_owned().collect()
}

/// Answers `success` once the notification is applied (or was already), which stops the
/// provider's retries, and `failure` otherwise: refused ones change nothing, and a failure on
/// our side is retried by the provider. An address over its limit of unverified ones is
/// answered 429 (`rate_limited`, with `Retry-After`): to the provider's protocol, where only
/// `success` is success, one more failure.
pub(crate) async fn notify(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    body: Bytes,
) -> Result<&'static str, ApiError> {
    match state.sale.notified(&pairs(&body)).await {
        Ok(settled) => {
            tracing::debug!(?settled, "payment notification applied");
            Ok("success")
        }
        Err(e) if e.is_unverified() => {
            unverified(&state, ip, &e, "notify")?;
            Ok("failure")
        }
        Err(e) => {
            tracing::warn!(error = %e, "payment notification not applied");
            Ok("failure")
        }
    }
}

/// Verifies what the provider sent the buyer back with, then shows the order as stored.
pub(crate) async fn returned(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    RawQuery(query): RawQuery,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let params = pairs(query.unwrap_or_default().as_bytes());
    let order = match state.sale.returned(&params).await {
        Ok(order) => order,
        Err(e) if e.is_unverified() => {
            unverified(&state, ip, &e, "return")?;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
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

/// A callback (`route`) that failed verification: counted against its address, and refused
/// unlogged over the limit; else logged, within the process's budget of such lines.
fn unverified(
    state: &AppState,
    ip: IpAddr,
    error: &OrderError,
    route: &'static str,
) -> Result<(), ApiError> {
    state.limits.check_unverified_callback(ip)?;
    if let Some(left_out) = state.limits.callback_line() {
        tracing::warn!(route, error = %error, left_out, "payment callback not verified");
    }
    Ok(())
}
