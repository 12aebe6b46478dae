//! Every route of the server in one table: its path, its method, its handler, and everything
//! that runs before the handler. Find an endpoint here, then read its handler.
//!
//! A request meets, outermost first:
//!
//! 1. every request, routed or not ([`router`]'s `ServiceBuilder`): the trace span, a panic
//!    caught as a 500, errors rewritten as JSON and the security headers ([`Answers`]), and the
//!    app-wide body limit (`max_body_bytes`; the image uploads set a larger one on their own
//!    routes);
//! 2. every route of the app (not the sandbox gateway's), put on per route by [`Table`]
//!    ([`Routed`]): the metrics of its route pattern, then the origin check of a
//!    cookie-authenticated change ([`origin`](super::origin));
//! 3. the operator's routes, the API's, the console's and `/metrics`: the per-address throttle
//!    ([`rate_limit::throttle_admin`]), before their token or session is looked at;
//! 4. the handler's own extractors, which each group's heading names: the shopper's session
//!    ([`CurrentUser`](super::extract::CurrentUser), required or optional), the admin token
//!    ([`AdminAuth`](super::extract::AdminAuth)), the console's session
//!    ([`AdminSession`](admin::AdminSession)) or session and CSRF token
//!    ([`ConsoleForm`](admin::ConsoleForm)). The other throttles (buys, orders, sign-ins,
//!    registrations) are counted by the handlers, with what they are counted by.
//!
//! An unknown path is `404 not_found`; a known path with a method it does not take is
//! `405 method_not_allowed`.

use super::middleware::{Answers, Routed, SECURITY_HEADERS};
use super::origin::Site;
use super::{
    AppState, admin, api, assets, images, metrics, openapi, pages, pay, rate_limit, readiness,
};
use crate::error::{ApiError, AppJson};
use crate::payment::sandbox::{self, Sandbox};
use crate::server::App;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, Route, delete, get, patch, post};
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use tower::{Layer, Service, ServiceBuilder};
use tower_http::trace::{DefaultOnFailure, TraceLayer};

/// The whole HTTP application, and the sandbox payment gateway's routes when this server
/// serves one.
pub fn router(state: AppState, max_body_bytes: usize, sandbox: Option<&Arc<Sandbox>>) -> impl App {
    metrics::install();
    let max_image_bytes = state.images.max_bytes();
    let operator = operator_api(max_image_bytes)
        .merge(console(max_image_bytes))
        // Prometheus's scrapes, with the admin token (`AdminAuth`): a few a minute, far below
        // the throttle, which stops a guesser of the token here as on the other routes.
        .route("/metrics", get(metrics::render))
        .route_layer(from_fn_with_state(
            state.clone(),
            rate_limit::throttle_admin,
        ));
    // The API's routes carry their full `/api/v1/...` paths rather than being nested: a
    // nested router rewrites every request's URI on the way in, on the buy path too.
    let app = Table::default()
        .merge(open())
        .merge(shopper())
        .merge(visitor())
        .merge(operator)
        .into_router(&state.site)
        .fallback(no_route)
        // Applies to the routes above only: add new routes before it.
        .method_not_allowed_fallback(wrong_method)
        .with_state(state);
    let routes = match sandbox {
        Some(sandbox) => app.merge(sandbox_gateway(sandbox)),
        None => app,
    };
    outermost(routes, max_body_bytes)
}

/// What `seckill worker --addr` serves: `/healthz`, `/readyz` and `/metrics` (the admin token,
/// throttled per address as on the server), under the same layers as the server's routes.
pub fn worker_router(state: AppState, max_body_bytes: usize) -> impl App {
    metrics::install();
    let app = Table::default()
        .route("/metrics", get(metrics::render))
        .route_layer(from_fn_with_state(
            state.clone(),
            rate_limit::throttle_admin,
        ))
        .merge(probes())
        .into_router(&state.site)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(state);
    outermost(app, max_body_bytes)
}

/// A group of the app's routes, each with its path: the layers before each handler are put
/// around each route by [`Table::into_router`], which knows its path, so nothing reads the
/// matched route from the request.
#[derive(Default)]
struct Table(Vec<(&'static str, MethodRouter<AppState>)>);

impl Table {
    /// The routes so far and `handler` at `path`.
    fn route(mut self, path: &'static str, handler: MethodRouter<AppState>) -> Self {
        self.0.push((path, handler));
        self
    }

    /// The routes so far and `other`'s.
    fn merge(mut self, other: Table) -> Self {
        self.0.extend(other.0);
        self
    }

    /// `layer` around the handler of each route so far, inside the app's own layers.
    fn route_layer<L>(self, layer: L) -> Self
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request, Error = Infallible> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        let routes = self.0.into_iter();
        Self(
            routes
                .map(|(path, handler)| (path, handler.route_layer(layer.clone())))
                .collect(),
        )
    }

    /// The router of these routes, each behind its [`Routed`] layer (its metrics, then the
    /// origin check of `site`).
    fn into_router(self, site: &Site) -> Router<AppState> {
        self.0
            .into_iter()
            .fold(Router::new(), |router, (path, handler)| {
                router.route(path, handler.route_layer(Routed::new(path, site.clone())))
            })
    }
}

/// The layers every request meets, routed or not, around `routes`: the service the server
/// serves.
fn outermost(routes: Router, max_body_bytes: usize) -> impl App {
    // The layers wrap the routes once, outermost first. (`Router::layer` would wrap each
    // route in each layer, boxed: a request would clone every box under every layer before
    // its handler ran.)
    ServiceBuilder::new()
        // A 5xx's cause is logged where it arises (`error.rs`, throttled where a crowd repeats
        // it); the trace layer's own line per failed request would only repeat it.
        .layer(
            TraceLayer::new_for_http()
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
        )
        .layer(Answers)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .service(routes)
}

/// The probes of every process: liveness (`/healthz`, answered while the process serves at
/// all) and readiness (`/readyz`, read from memory: see [`readiness`]).
fn probes() -> Table {
    Table::default()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readiness::readyz))
}

/// The answer to a request whose head is over `max_head_bytes`, which the connection server
/// writes without the router: `431 head_too_large` in the API's shape, with the security
/// headers.
pub fn head_too_large(max_head_bytes: usize) -> Response {
    let message = format!(
        "a request's line and headers may have at most {} KiB",
        max_head_bytes / 1024
    );
    let mut answer = ApiError::client(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "head_too_large",
        message,
    )
    .into_response();
    answer.headers_mut().extend(SECURITY_HEADERS);
    answer
}

/// Open to anybody: no session, no token.
fn open() -> Table {
    let docs = openapi::Docs::build();
    Table::default()
        .merge(probes())
        .route("/static/{*path}", get(assets::serve))
        .route("/images/{id}", get(images::serve))
        .route(
            "/api/openapi.json",
            get(openapi::json).with_state(docs.clone()),
        )
        .route("/api/docs", get(openapi::page).with_state(docs))
        // The catalog.
        .route("/api/v1/events", get(api::catalog::list_events))
        .route("/api/v1/events/{id}", get(api::catalog::show_event))
        .route("/api/v1/products/{id}", get(api::catalog::show_product))
        // Accounts: throttled in the handler per address, registrations in all too, sign-ins
        // per account too.
        .route("/api/v1/users", post(api::sessions::register))
        .route("/api/v1/sessions", post(api::sessions::sign_in))
        .route(
            "/api/v1/registration/challenge",
            get(api::guard::registration_challenge),
        )
        // Pages for anybody: the sign-in form, the language switch, the clock.
        .route("/login", get(pages::login_page))
        .route("/lang/{code}", get(pages::switch_language))
        .route("/time", get(pages::server_time))
        // The payment provider: a notification is believed only once its signature is
        // verified, in the handler; the return page only shows the order.
        .route("/pay/alipay/notify", post(pay::notify))
        .route("/pay/alipay/return", get(pay::returned))
}

/// A signed-in shopper (`CurrentUser`: the session token as a bearer header or the pages'
/// cookie; `401 unauthorized` without one). Throttled in the handler: buys, buy tokens and
/// puzzles per address, user and sale event, the rest per user.
fn shopper() -> Table {
    use api::{guard, orders};
    Table::default()
        // The buy, then the buyer's orders.
        .route("/api/v1/orders", post(orders::place_order))
        .route("/api/v1/orders", get(orders::my_orders))
        .route("/api/v1/orders/{id}", get(orders::my_order))
        .route("/api/v1/orders/{id}/pay", post(orders::pay))
        .route("/api/v1/orders/{id}/cancel", post(orders::cancel))
        // A guarded sale's puzzle, and the buy token a buy then carries.
        .route("/api/v1/products/{id}/challenge", get(guard::buy_challenge))
        .route("/api/v1/products/{id}/buy-token", post(guard::buy_token))
}

/// A shopper if one is signed in (`Option<CurrentUser>`): the pages render for visitors too,
/// and signing out without a session is no error.
fn visitor() -> Table {
    Table::default()
        .route("/", get(pages::sale_page))
        .route("/orders", get(pages::orders_page))
        .route("/logout", post(pages::logout))
        .route("/api/v1/sessions", delete(api::sessions::sign_out))
}

/// The operator's API: the admin token as a bearer header (`AdminAuth`; `401 unauthorized`
/// without it).
fn operator_api(max_image_bytes: usize) -> Table {
    use api::{admin, admin_orders, admin_users, images};
    Table::default()
        .route("/api/v1/admin/events", get(admin::list_events))
        .route("/api/v1/admin/events", post(admin::create_event))
        .route("/api/v1/admin/events/{id}", patch(admin::update_event))
        .route("/api/v1/admin/events/{id}/end", post(admin::end_event))
        .route("/api/v1/admin/products", get(admin::list_products))
        .route("/api/v1/admin/products", post(admin::create_product))
        .route("/api/v1/admin/products/{id}", patch(admin::update_product))
        .route("/api/v1/admin/products/{id}/stock", post(admin::add_stock))
        .route(
            "/api/v1/admin/products/{id}/pause",
            post(admin::pause_product),
        )
        .route(
            "/api/v1/admin/products/{id}/resume",
            post(admin::resume_product),
        )
        .route("/api/v1/admin/products/{id}/end", post(admin::end_product))
        .route("/api/v1/admin/audit", get(admin::audit_log))
        .route("/api/v1/admin/orders", get(admin_orders::search_orders))
        .route("/api/v1/admin/orders/{id}", get(admin_orders::show_order))
        .route(
            "/api/v1/admin/orders/{id}/refund",
            post(admin_orders::refund_order),
        )
        .route("/api/v1/admin/users", get(admin_users::search_users))
        .route(
            "/api/v1/admin/users/{id}/disable",
            post(admin_users::disable_user),
        )
        .route(
            "/api/v1/admin/users/{id}/enable",
            post(admin_users::enable_user),
        )
        // The image as the raw body, up to `max_image_bytes` instead of `max_body_bytes`.
        .route(
            "/api/v1/admin/images",
            post(images::upload).layer(DefaultBodyLimit::max(max_image_bytes)),
        )
}

/// The operator's console under `/admin`: HTML pages and forms.
fn console(max_image_bytes: usize) -> Table {
    use admin::{audit, catalog, dashboard, images, orders, session, users};
    let image_form_bytes = max_image_bytes + images::FORM_ROOM;
    Table::default()
        // Signing in: no session yet; throttled in the handler per address, as every sign-in.
        .route("/admin/login", get(session::sign_in_page))
        .route("/admin/login", post(session::sign_in))
        // Pages: a console session (`AdminSession`; without one, a redirect to the sign-in).
        .route("/admin", get(session::home))
        .route("/admin/products", get(catalog::catalog))
        .route("/admin/products/{id}", get(catalog::product))
        .route("/admin/orders", get(orders::orders_page))
        .route("/admin/users", get(users::users_page))
        .route("/admin/audit", get(audit::audit_page))
        .route("/admin/dashboard", get(dashboard::dashboard_page))
        .route("/admin/dashboard/stream", get(dashboard::dashboard_stream))
        // Forms: a console session and its CSRF token (`ConsoleForm`; `403 bad_csrf_token`
        // without the right one).
        .route("/admin/logout", post(session::sign_out))
        .route("/admin/events", post(catalog::create_event))
        .route("/admin/events/{id}/end", post(catalog::end_event))
        .route("/admin/events/{id}/guard", post(catalog::set_event_guard))
        .route("/admin/products", post(catalog::create_product))
        .route("/admin/products/{id}", post(catalog::update_product))
        .route("/admin/products/{id}/stock", post(catalog::add_stock))
        .route("/admin/products/{id}/pause", post(catalog::pause_product))
        .route("/admin/products/{id}/resume", post(catalog::resume_product))
        .route("/admin/products/{id}/end", post(catalog::end_product))
        .route("/admin/orders/{id}/refund", post(orders::refund))
        .route("/admin/users/{id}/disable", post(users::disable_user))
        .route("/admin/users/{id}/enable", post(users::enable_user))
        // The image form: a console session (`AdminSession`), its CSRF token read from the
        // multipart body by the handler; the image and the form around it may be larger than
        // `max_body_bytes`.
        .route(
            "/admin/products/{id}/image",
            post(images::upload).layer(DefaultBodyLimit::max(image_form_bytes)),
        )
}

/// The sandbox payment gateway (`payment.provider = "sandbox"`), a separate app with its own
/// state that stands in for Alipay: `/sandbox/alipay/gateway.do` and the checkout form's
/// `/sandbox/alipay/checkout/{out_trade_no}`. Only the outermost layers apply: its requests are
/// not measured nor origin-checked, and its pages answer for themselves (no session, no token).
fn sandbox_gateway(sandbox: &Arc<Sandbox>) -> Router {
    Router::new()
        // Pay pages (GET) and the synchronous API (POST), told apart by their `method`.
        .route(
            sandbox::GATEWAY_PATH,
            get(sandbox::gateway).post(sandbox::gateway),
        )
        .route(sandbox::CHECKOUT_PATH, post(sandbox::decide))
        .with_state(Arc::clone(sandbox))
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
