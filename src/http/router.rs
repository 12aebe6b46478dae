//! Every route in one place.

use super::{
    AppState, admin, api, assets, images, metrics, openapi, origin, pages, pay, rate_limit,
};
use crate::error::{ApiError, AppJson};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use std::any::Any;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

/// The whole HTTP application, with `extra` routes that bring their own state (the sandbox
/// payment gateway, when it is served).
pub fn router(state: AppState, max_body_bytes: usize, extra: Router) -> Router {
    // Image uploads take larger bodies than `max_body_bytes`, through a limit of their own on
    // their routes, which overrides the app-wide one below.
    let max_image_bytes = state.images.max_bytes();
    // The API's routes carry their full `/api/v1/...` paths rather than being nested: a
    // nested router rewrites every request's URI on the way in, on the buy path too.
    // The operator's routes (the API's and the console's), throttled per address before their
    // token or session is looked at.
    let operator = api::admin::router()
        .merge(api::images::router(max_image_bytes))
        .merge(api::admin_orders::router())
        .merge(admin::router(max_image_bytes))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rate_limit::throttle_admin,
        ));
    let routes = Router::new()
        .merge(api::sessions::router())
        .merge(api::catalog::router())
        .merge(api::orders::router())
        .merge(api::guard::router())
        .merge(operator)
        .merge(images::router())
        .merge(pages::router())
        .merge(pay::router())
        .merge(openapi::router())
        .merge(metrics::router())
        .route("/static/{*path}", get(assets::serve))
        .route("/healthz", get(healthz))
        .route_layer(axum::middleware::from_fn_with_state(
            state.site.clone(),
            origin::same_origin,
        ))
        // Inside the routes, where the matched route is known: measures the routes above.
        .route_layer(axum::middleware::from_fn(metrics::track))
        .fallback(no_route)
        // Applies to the routes above only: add new routes before it.
        .method_not_allowed_fallback(wrong_method)
        .with_state(state)
        .merge(extra);
    // The layers wrap the routes once, outermost first. (`Router::layer` would wrap each
    // route in each layer, boxed: a request would clone every box under every layer before
    // its handler ran.)
    let layered = ServiceBuilder::new()
        .layer(CatchPanicLayer::custom(panic_to_500))
        .layer(TraceLayer::new_for_http())
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'self'; img-src 'self' data: https:; frame-ancestors 'none'; \
                 form-action 'self'; base-uri 'none'; object-src 'none'",
            ),
        ))
        // Links to other sites (the payment provider) learn nothing of the page's path.
        .layer(SetResponseHeaderLayer::if_not_present(
            header::REFERRER_POLICY,
            HeaderValue::from_static("strict-origin-when-cross-origin"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            HeaderName::from_static("permissions-policy"),
            HeaderValue::from_static(
                "camera=(), microphone=(), geolocation=(), payment=(), usb=(), interest-cohort=()",
            ),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .service(routes);
    Router::new().fallback_service(layered)
}

async fn healthz() -> AppJson<serde_json::Value> {
    AppJson(json!({ "status": "ok" }))
}

async fn no_route() -> ApiError {
    ApiError::not_found("not_found", "no such route")
}

async fn wrong_method() -> ApiError {
    ApiError::client(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
    )
}

fn panic_to_500(_: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::Internal(anyhow::anyhow!("a request handler panicked")).into_response()
}
