//! The throttles of the HTTP routes, counted through a [`Limiter`]: in this process (embedded
//! mode) or shared by every server (cluster mode). Over a limit is 429 with `Retry-After`,
//! counted in `seckill_rate_limited_total` by limit. The address is the TCP peer (or the
//! configured proxy's word), never a client-supplied header, and never stands in for a user.

use crate::config::RateLimitConfig;
use crate::domain::{Product, UserId, Username};
use crate::error::ApiError;
use crate::http::AppState;
use crate::http::client_ip::ClientIp;
use crate::http::log_budget::LogBudget;
use crate::limits::{Hit, Id, Key, Limiter, Quota};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sign-in attempts at one account from one address in a row, and from everybody before
/// [`ACCOUNT_PACE`] slows them: a person mistyping a password a few times is never throttled.
const ACCOUNT_BURST: u32 = 5;

/// After the burst, one more attempt at one account from one address this often, and from
/// everybody before [`ACCOUNT_PACE`] slows them.
const ACCOUNT_PERIOD: Duration = Duration::from_secs(12);

/// How long a sign-in waits before its hash while its account has had more attempts, from
/// every address together, than the burst and the period allow: a guesser of one account
/// spread over many addresses is slowed, and the owner's right password still goes through,
/// this much later.
const ACCOUNT_PACE: Duration = Duration::from_secs(1);

const HOUR: Duration = Duration::from_secs(3600);

/// Payment callbacks that fail verification one address may send in a row before it is refused;
/// then one more a second. Only failures count: the provider's own words never do.
const CALLBACK_BURST: u32 = 20;

/// Log lines of failed payment callbacks a second, from all addresses together.
const CALLBACK_LINES_PER_SEC: u32 = 10;

/// One limit: whose requests it counts (its scope, also its `limit` label), how many, and the
/// refusal's code and message (`rate_limited` unless said otherwise).
#[derive(Debug, Clone, Copy)]
struct Limit {
    scope: &'static str,
    quota: Quota,
    refusal: Option<(&'static str, &'static str)>,
}

impl Limit {
    fn new(scope: &'static str, quota: Quota) -> Self {
        Self {
            scope,
            quota,
            refusal: None,
        }
    }

    /// The same limit, refusing with its own code and message.
    fn answering(self, code: &'static str, message: &'static str) -> Self {
        Self {
            refusal: Some((code, message)),
            ..self
        }
    }

    /// One request by `id` against this limit.
    fn hit(&self, id: impl Into<Id>) -> Hit {
        Hit {
            key: Key::new(self.scope, id),
            quota: self.quota,
        }
    }

    /// The answer to a request this limit refused, `retry_after` from now.
    fn refused(&self, retry_after: Duration) -> ApiError {
        metrics::counter!("seckill_rate_limited_total", "limit" => self.scope).increment(1);
        let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
        match self.refusal {
            None => ApiError::RateLimited {
                retry_after_secs: secs,
            },
            Some((code, message)) => {
                ApiError::client(StatusCode::TOO_MANY_REQUESTS, code, message).retry_after(secs)
            }
        }
    }
}

/// The throttles of the routes, with the configured quotas.
pub struct RateLimits {
    limiter: Arc<dyn Limiter>,
    /// Buy attempts per user.
    user: Limit,
    /// Requests per client address: buys, sign-ins, registrations.
    ip: Limit,
    /// Buys of one sale event, by everybody.
    event: Limit,
    /// Order reads, pay and cancel per user.
    orders: Limit,
    /// The operator's routes per address.
    admin: Limit,
    /// Sign-in attempts per username, known or not, and address: refused past it.
    account: Limit,
    /// Sign-in attempts per username from every address: slowed past it, never refused.
    account_pace: Limit,
    /// Registrations per address.
    registration_ip: Limit,
    /// Registrations from everywhere.
    registrations: Limit,
    /// Payment callbacks per address that failed verification.
    callback: Limit,
    /// The log lines of failed payment callbacks, so a flood from many addresses writes only
    /// a few lines a second.
    callback_lines: LogBudget,
}

impl RateLimits {
    /// Throttles with the configured quotas, counted by `limiter`.
    pub fn new(config: &RateLimitConfig, limiter: Arc<dyn Limiter>) -> Self {
        let per_ip = Quota::per_sec(config.per_ip_per_sec, config.per_ip_burst);
        Self {
            limiter,
            user: Limit::new(
                "user",
                Quota::per_sec(config.per_user_per_sec, config.per_user_burst),
            ),
            ip: Limit::new("ip", per_ip),
            event: Limit::new("event", Quota::per_sec(config.per_event_per_sec, 0)),
            orders: Limit::new(
                "orders",
                Quota::per_sec(config.orders_per_user_per_sec, config.orders_per_user_burst),
            ),
            admin: Limit::new("admin", per_ip),
            account: Limit::new(
                "account",
                Quota::per_window(ACCOUNT_BURST, ACCOUNT_PERIOD * ACCOUNT_BURST),
            )
            .answering(
                "too_many_sign_ins",
                "too many sign-in attempts for this account from this address: try again after \
                 the Retry-After seconds",
            ),
            account_pace: Limit::new(
                "account_pace",
                Quota::per_window(ACCOUNT_BURST, ACCOUNT_PERIOD * ACCOUNT_BURST),
            ),
            registration_ip: Limit::new(
                "registration_ip",
                Quota::per_window(config.registrations_per_ip_per_hour, HOUR),
            )
            .answering(
                "too_many_registrations",
                "too many accounts registered from this address: try again after the \
                 Retry-After seconds",
            ),
            registrations: Limit::new(
                "registrations",
                Quota::per_window(config.registrations_per_hour, HOUR),
            )
            .answering(
                "too_many_registrations",
                "too many accounts are being registered: try again after the Retry-After \
                 seconds",
            ),
            callback: Limit::new("callback", Quota::per_sec(1, CALLBACK_BURST)),
            callback_lines: LogBudget::new(CALLBACK_LINES_PER_SEC),
        }
    }

    /// Counts one request against `limits`, each with its hit, in order, for every server.
    fn check<const N: usize>(&self, counted: [(&Limit, Hit); N]) -> Result<(), ApiError> {
        let (limits, hits) = split(counted);
        let count = self.limiter.hit(&hits);
        count.map_err(|refused| limits[refused.hit].refused(refused.retry_after))
    }

    /// Counts one request as [`Self::check`] does, in this process only.
    fn check_here<const N: usize>(&self, counted: [(&Limit, Hit); N]) -> Result<(), ApiError> {
        let (limits, hits) = split(counted);
        let count = self.limiter.hit_here(&hits);
        count.map_err(|refused| limits[refused.hit].refused(refused.retry_after))
    }

    /// One buy attempt: from this address, by this user, and of the sale event of `bound`, the
    /// product the buy would take to the gate (a product without an event is a sale of its
    /// own). A buy this process answers by itself (`bound` is `None`: an unknown product, or
    /// one flagged sold out here) has no sale to protect and is counted here only, so after a
    /// sell-out the crowd's answers cost no round trip to Redis.
    pub fn check_buy(
        &self,
        ip: IpAddr,
        user: UserId,
        bound: Option<&Product>,
    ) -> Result<(), ApiError> {
        let (ip, user) = (
            (&self.ip, self.ip.hit(ip)),
            (&self.user, self.user.hit(user.0)),
        );
        match bound {
            Some(product) => {
                let sale = match product.event_id {
                    Some(event) => self.event.hit(event),
                    None => self.event.hit(Id::Product(product.id.0)),
                };
                self.check([ip, user, (&self.event, sale)])
            }
            None => self.check_here([ip, user]),
        }
    }

    /// One request from this address (sign-ins).
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.check([(&self.ip, self.ip.hit(ip))])
    }

    /// One sign-in attempt at this account from this address (an IPv6 address counts as its
    /// /64). Every attempt counts, not only the failed ones: counted before the hash, parallel
    /// guesses cannot all slip in before the first of them fails. An unknown name is counted
    /// the same way, so the answer says nothing about which names exist. Attempts from other
    /// addresses never count here, so nobody can lock an owner out of their account.
    pub fn check_sign_in(&self, username: &Username, ip: IpAddr) -> Result<(), ApiError> {
        let hit = self.account.hit((username.as_str(), ip));
        self.check([(&self.account, hit)])
    }

    /// One sign-in attempt at this account from anywhere: past its account's pace, it waits
    /// [`ACCOUNT_PACE`] and goes on. Known or not, every name is paced alike.
    pub async fn pace_sign_in(&self, username: &Username) {
        let hit = self.account_pace.hit(username.as_str());
        if self.limiter.hit(&[hit]).is_err() {
            metrics::counter!("seckill_sign_ins_paced_total").increment(1);
            tokio::time::sleep(ACCOUNT_PACE).await;
        }
    }

    /// One registration from this address: its request rate, its accounts this hour, and
    /// everybody's accounts this hour. Every attempt counts, as sign-ins do.
    pub fn check_registration(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.check([
            (&self.ip, self.ip.hit(ip)),
            (&self.registration_ip, self.registration_ip.hit(ip)),
            (&self.registrations, self.registrations.hit("all")),
        ])
    }

    /// One read, pay or cancel of this user's orders.
    pub fn check_orders(&self, user: UserId) -> Result<(), ApiError> {
        self.check([(&self.orders, self.orders.hit(user.0))])
    }

    /// One payment callback from this address that failed verification, counted after the
    /// verification and in this process only (a forged callback costs the other servers
    /// nothing). A verified callback is never counted, so a notification that pays an order is
    /// never refused for rate, whoever shares its address.
    pub fn check_unverified_callback(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.check_here([(&self.callback, self.callback.hit(ip))])
    }

    /// Whether a failed callback's log line may be written now: `Some` with the number of
    /// such lines left out since the last one written, `None` when it is left out (counted).
    pub fn callback_line(&self) -> Option<u64> {
        self.callback_lines.line(Instant::now())
    }

    /// Logs how many failed callbacks' lines were left out since the last one written, if
    /// any: the end of a flood is reported even when no failed callback follows it.
    pub fn report_left_out_lines(&self) {
        let left_out = self.callback_lines.take_left_out();
        if left_out > 0 {
            tracing::warn!(
                left_out,
                "payment callbacks that failed verification went unlogged"
            );
        }
    }

    /// Forgets keys idle long enough to be full again (this process's buckets).
    pub fn forget_idle(&self) {
        self.limiter.forget_idle();
    }
}

/// The limits and the hits of a request, apart.
fn split<const N: usize>(counted: [(&Limit, Hit); N]) -> ([&Limit; N], [Hit; N]) {
    let limits = counted.each_ref().map(|(limit, _)| *limit);
    (limits, counted.map(|(_, hit)| hit))
}

/// Throttles the operator's routes by address, before their token or session is looked at.
pub async fn throttle_admin(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let limits = &state.limits;
    limits.check([(&limits.admin, limits.admin.hit(ip))])?;
    Ok(next.run(request).await)
}
