//! Every route in one place.

use super::{
    AppState, admin, api, assets, images, metrics, openapi, origin, pages, pay, rate_limit,
};
use crate::error::{ApiError, AppJson};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use std::any::Any;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};

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
        .merge(api::admin_users::router())
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
        // A 5xx's cause is logged where it arises (`error.rs`, throttled where a crowd repeats
        // it); the trace layer's own line per failed request would only repeat it.
        .layer(
            TraceLayer::new_for_http()
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
        )
        .layer(axum::middleware::from_fn(json_errors))
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

/// The longest error body of axum's own that is kept as the message; axum's rejections are one
/// sentence.
const MAX_REJECTION_TEXT: usize = 1024;

/// Every error is answered in the API's shape: an error without a body, or with axum's plain
/// text (an extractor's rejection, such as a body over the size limit or a malformed query, or a
/// route's 405 from a router of its own), becomes `{"error": {"code", "message"}}` with the same
/// status and headers, the code named after the status. Answers already in JSON, and the HTML
/// pages for people (the console's forms, the sandbox gateway), pass as they are.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE);
    let plain = content_type.is_none_or(|value| value.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_REJECTION_TEXT).await;
    let message = match text.as_deref().map(String::from_utf8_lossy) {
        Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => status
            .canonical_reason()
            .unwrap_or("the request was refused")
            .to_owned(),
    };
    let error = if status.is_server_error() {
        ApiError::Internal(anyhow::anyhow!("{status}: {message}"))
    } else {
        ApiError::client(status, code_of(status), message)
    };
    let mut answer = error.into_response();
    let own: Vec<HeaderName> = answer.headers().keys().cloned().collect();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH && !own.contains(name) {
            answer.headers_mut().append(name.clone(), value.clone());
        }
    }
    answer
}

/// The error code of a client error that carried no code of its own.
fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::LENGTH_REQUIRED => "length_required",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_input",
        StatusCode::TOO_MANY_REQUESTS => "rate_limited",
        _ => "bad_request",
    }
}

fn panic_to_500(_: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::Internal(anyhow::anyhow!("a request handler panicked")).into_response()
}
