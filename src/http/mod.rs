//! The HTTP face of seckill: the JSON API under `/api/v1`, the pages, static assets, `/metrics`,
//! `/healthz` and `/readyz`. [`router`] lists every route and what runs before its handler; the modules
//! hold the handlers. This layer sees only the sale service and the store trait; it never knows
//! which backend runs (the router mounts the sandbox payment gateway's routes when the wiring
//! hands it one).

pub mod admin;
pub mod api;
pub mod assets;
pub mod client_ip;
pub mod extract;
pub mod images;
pub mod log_budget;
pub mod metrics;
mod middleware;
pub mod openapi;
pub mod origin;
pub mod pages;
pub mod pay;
mod process_metrics;
pub mod rate_limit;
pub mod readiness;
mod router;

pub use router::{head_too_large, router, worker_router};

use crate::auth::password::Hasher;
use crate::http::extract::AuthKeys;
use crate::sale::SaleService;
use crate::store::Store;
use axum::extract::FromRef;
use rate_limit::RateLimits;
use std::sync::Arc;

/// Everything a request handler may use. axum clones it for every request's extractors, so it
/// is one reference to the [`AppParts`]: one count taken and given back a request, not one per
/// part on a cache line both cores write.
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    /// The state made of `parts`.
    pub fn new(parts: AppParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// What [`AppState`] holds.
pub struct AppParts {
    /// Buying, paying, cancelling, and the operator's changes.
    pub sale: Arc<SaleService>,
    /// Accounts (sign-up and sign-in only; the buy path never touches it).
    pub store: Arc<dyn Store>,
    /// Token signer, admin token and clock for the auth extractors.
    pub auth: Arc<AuthKeys>,
    /// Where every password hash runs, a bounded number at a time (sign-up and sign-in).
    pub passwords: Arc<Hasher>,
    /// Product images: uploads, and the ones served, from memory when possible.
    pub images: Arc<images::Images>,
    /// The rate limits of the routes: per user, per address, per account, per sale event,
    /// registrations.
    pub limits: Arc<RateLimits>,
    /// Guarded sales' buy tokens and puzzles.
    pub guard: Arc<api::guard::Guards>,
    /// The console's open dashboard streams, capped per server.
    pub streams: admin::dashboard::Streams,
    /// Whether the session cookie is marked `Secure`.
    pub secure_cookies: bool,
    /// The header a trusted reverse proxy puts the client address in, if any.
    pub client_ip_header: Option<axum::http::HeaderName>,
    /// This site as its public URL names it, for the same-origin check of cookie requests.
    pub site: origin::Site,
    /// A demo sale (`serve --demo`): the sign-in page shows the demo shoppers' logins.
    pub demo: bool,
    /// What `/readyz` answers: the backends' latest checks, and whether the process drains.
    pub readiness: Arc<readiness::Readiness>,
}

impl FromRef<AppState> for Arc<AuthKeys> {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}
