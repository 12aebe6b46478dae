//! The live dashboard in the console: per product of the live and upcoming sales its sold,
//! remaining, in-flight and paid units, and this process's buys by outcome, on a page that
//! `static/admin.js` keeps current from a stream of server-sent events, one a second.

use super::{AdminSession, page};
use crate::error::ApiError;
use crate::http::AppState;
use crate::sale::BuyCounts;
use askama::Template;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::stream;
use serde::Serialize;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::MissedTickBehavior;

/// The most dashboard streams one process serves at once: each reads the store every second,
/// so a few operators' tabs are welcome and a flood is not.
pub const MAX_STREAMS: usize = 64;

/// The most products a dashboard shows, soonest sale first; a page of more is not read live.
const MAX_PRODUCTS: usize = 50;

/// How often the stream sends a snapshot.
const PERIOD: Duration = Duration::from_secs(1);

/// The open dashboard streams of this process.
static STREAMS: Semaphore = Semaphore::const_new(MAX_STREAMS);

/// `/admin/dashboard` and its stream.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/admin/dashboard", get(dashboard_page))
        .route("/admin/dashboard/stream", get(dashboard_stream))
}

/// One product's units, as the dashboard shows them.
#[derive(Debug, Serialize)]
struct ProductLine {
    id: i64,
    name: String,
    stock_total: i64,
    /// Units taken by live orders, stored or not: the total less what is left.
    sold: i64,
    /// Units left to sell, the gate's live count once preheated.
    remaining: i64,
    /// Units the gate sold whose orders are not in the database yet.
    in_flight: i64,
    /// Units in paid orders.
    paid: i64,
}

/// What the dashboard shows at one moment.
#[derive(Debug, Serialize)]
struct Snapshot {
    /// The server's time of the reading, so the page can turn counts into rates.
    at: i64,
    /// This process's buys by outcome since it started.
    buys: BuyCounts,
    products: Vec<ProductLine>,
}

/// Reads the products of the live and upcoming sales and the buy counts.
async fn snapshot(state: &AppState) -> anyhow::Result<Snapshot> {
    let now = state.sale.now();
    let mut products = Vec::new();
    for product in state
        .store
        .products()
        .await?
        .into_iter()
        .filter(|p| p.window.end > now)
        .take(MAX_PRODUCTS)
    {
        let remaining = state.sale.remaining(&product).await;
        products.push(ProductLine {
            id: product.id.0,
            sold: product.stock_total - remaining,
            remaining,
            in_flight: state.sale.units_in_flight_of(&product).await?,
            paid: state.store.paid_units(product.id).await?,
            stock_total: product.stock_total,
            name: product.name,
        });
    }
    Ok(Snapshot {
        at: now,
        buys: state.sale.buy_counts(),
        products,
    })
}

/// `GET /admin/dashboard`: the current snapshot, drawn by the server so the page reads without
/// its script, then kept current by it.
#[derive(Template)]
#[template(path = "admin/dashboard.html")]
struct DashboardPage {
    csrf: String,
    snapshot: Snapshot,
}

async fn dashboard_page(
    State(state): State<AppState>,
    session: AdminSession,
) -> Result<Response, ApiError> {
    page(
        StatusCode::OK,
        &DashboardPage {
            csrf: session.csrf().to_owned(),
            snapshot: snapshot(&state).await?,
        },
    )
}

/// A place among the open streams, or 503 when all [`MAX_STREAMS`] are taken. The place is
/// given back when the permit drops, that is when the client goes and the stream with it.
fn admit(slots: &'static Semaphore) -> Result<SemaphorePermit<'static>, ApiError> {
    slots.try_acquire().map_err(|_| {
        ApiError::client(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "too many dashboards are open on this server: close one and reload",
        )
    })
}

/// `GET /admin/dashboard/stream`: a [`Snapshot`] as JSON in an event every second, the first
/// at once. A reading the store fails is sent as a comment, and the next second tries again.
async fn dashboard_stream(
    State(state): State<AppState>,
    _session: AdminSession,
) -> Result<Response, ApiError> {
    let permit = admit(&STREAMS)?;
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let events = stream::unfold(
        (state, ticks, permit),
        |(state, mut ticks, permit)| async move {
            ticks.tick().await;
            let event = match snapshot(&state).await {
                Ok(snapshot) => Event::default()
                    .event("snapshot")
                    .json_data(&snapshot)
                    .unwrap_or_else(|_| Event::default().comment("unreadable")),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the dashboard");
                    Event::default().comment("unavailable")
                }
            };
            Some((Ok::<_, Infallible>(event), (state, ticks, permit)))
        },
    );
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    static SLOTS: Semaphore = Semaphore::const_new(2);

    #[test]
    fn streams_beyond_the_cap_are_refused_until_one_ends() {
        let first = admit(&SLOTS).expect("a free place");
        let _second = admit(&SLOTS).expect("a free place");
        let refused = admit(&SLOTS).map(drop).unwrap_err().into_response();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(first);
        assert!(admit(&SLOTS).is_ok());
    }
}
