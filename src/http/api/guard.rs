//! Guarded sales: the buy tokens a guarded product's buys must carry, the proof-of-work puzzle
//! a `challenge` event asks for before handing one out, and the same puzzle for registration.
//! Everything here is checked in memory (see [`crate::auth::guard`]): any server checks what any
//! other issued.
//!
//! A shopper's page asks `POST /api/v1/products/{id}/buy-token` during the countdown (from
//! `guard.token_lead_secs` before the start), answering `GET /api/v1/products/{id}/challenge`
//! first for a `challenge` event, and sends the token with its buy. A script that skips the
//! page is refused before the gate: `403 buy_token_required` or `invalid_buy_token`.

use super::{ErrorBody, Rfc3339, optional_json};
use crate::auth::guard::{CHALLENGE_TTL_MS, GuardSigner, Scope};
use crate::config::GuardConfig;
use crate::domain::{Guard, ProductId, UserId, Username};
use crate::error::{ApiError, AppJson, AppPath};
use crate::http::AppState;
use crate::http::client_ip::ClientIp;
use crate::http::extract::CurrentUser;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use utoipa::ToSchema;

/// What the guard checks need: the signer, keyed from the server secret, and the settings.
pub struct Guards {
    pub signer: GuardSigner,
    pub settings: GuardConfig,
}

fn forbidden(code: &'static str, message: impl Into<Cow<'static, str>>) -> ApiError {
    ApiError::client(StatusCode::FORBIDDEN, code, message)
}

/// The guard check of a buy, before the gate: a guarded product's buy must carry a valid buy
/// token of this buyer for this product. One lookup in memory for an unguarded product; an
/// unknown one passes, for the buy to answer `unknown_product`.
pub(super) fn check_buy(
    state: &AppState,
    user: UserId,
    product: ProductId,
    token: Option<&str>,
) -> Result<(), ApiError> {
    let Some((guard, _)) = state.sale.guard_of(product) else {
        return Ok(());
    };
    if !guard.needs_token() {
        return Ok(());
    }
    // Counted under one literal key per reason (`seckill_buy_guard_refusals_total`).
    let Some(token) = token else {
        metrics::counter!("seckill_buy_guard_refusals_total", "reason" => "buy_token_required")
            .increment(1);
        return Err(forbidden(
            "buy_token_required",
            "this sale is guarded: buy through the sale page, which fetches a buy token first",
        ));
    };
    let now = state.sale.now();
    if !state
        .guard
        .signer
        .check_buy_token(token, user, product, now)
    {
        metrics::counter!("seckill_buy_guard_refusals_total", "reason" => "invalid_buy_token")
            .increment(1);
        return Err(forbidden(
            "invalid_buy_token",
            "the buy token is not valid for you and this product, or has expired: fetch another",
        ));
    }
    Ok(())
}

/// The registration check: with `guard.registration_challenge` set, registering `username`
/// needs the answer to a registration challenge for that name.
pub(super) fn check_registration(
    state: &AppState,
    username: &Username,
    challenge: Option<&str>,
    nonce: Option<&str>,
) -> Result<(), ApiError> {
    if !state.guard.settings.registration_challenge {
        return Ok(());
    }
    let scope = Scope::Registration(username.as_str());
    check_answer(state, scope, challenge, nonce)
}

/// A challenge answer for `scope`: both parts given, and right.
fn check_answer(
    state: &AppState,
    scope: Scope<'_>,
    challenge: Option<&str>,
    nonce: Option<&str>,
) -> Result<(), ApiError> {
    let (Some(challenge), Some(nonce)) = (challenge, nonce) else {
        return Err(forbidden(
            "challenge_required",
            "answer a challenge first: send its `challenge` and your `nonce`",
        ));
    };
    if !state
        .guard
        .signer
        .check_answer(challenge, nonce, scope, state.sale.now())
    {
        return Err(forbidden(
            "invalid_challenge_answer",
            "the answer does not solve the challenge, or the challenge is not yours or has expired",
        ));
    }
    Ok(())
}

/// A proof-of-work puzzle: find a `nonce` (a string of at most 64 bytes, e.g. a decimal
/// number) such that SHA-256 of the UTF-8 bytes of `challenge` followed by those of `nonce`
/// starts with `difficulty` zero bits.
#[derive(Serialize, ToSchema)]
pub(crate) struct ChallengeView {
    /// Opaque and signed: send it back as it is.
    challenge: String,
    /// Leading zero bits the hash must have.
    difficulty: u8,
    /// The answer must arrive before this.
    #[schema(value_type = String, format = DateTime)]
    expires_at: Rfc3339,
}

impl ChallengeView {
    fn new(state: &AppState, scope: Scope<'_>) -> Self {
        let difficulty = state.guard.settings.challenge_difficulty;
        let expires_at = state.sale.now() + CHALLENGE_TTL_MS;
        Self {
            challenge: state.guard.signer.challenge(scope, difficulty, expires_at),
            difficulty,
            expires_at: Rfc3339(expires_at),
        }
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/products/{id}/challenge",
    tag = "orders",
    summary = "Get a puzzle to answer before fetching a buy token of a `challenge` sale",
    params(("id" = i64, Path, description = "The product's id")),
    security(("session_bearer" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "A puzzle for you and this product, answerable for two minutes (and more than once)", body = ChallengeView),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many requests from this address or this buyer; retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn buy_challenge(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    user: CurrentUser,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<ChallengeView>, ApiError> {
    state.limits.check_buy(ip, user.id, None)?;
    let product = ProductId(id);
    state
        .sale
        .guard_of(product)
        .ok_or_else(ApiError::unknown_product)?;
    let scope = Scope::Buy {
        user: user.id,
        product,
    };
    Ok(AppJson(ChallengeView::new(&state, scope)))
}

/// The answer to a product's challenge; a `token` sale needs none, and takes an empty body.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
struct BuyTokenRequest {
    /// The `challenge` of `GET /api/v1/products/{id}/challenge`, as it came.
    challenge: Option<String>,
    /// The nonce that solves it.
    nonce: Option<String>,
}

/// A buy token: send it as `buy_token` with `POST /api/v1/orders`.
#[derive(Serialize, ToSchema)]
pub(crate) struct BuyTokenView {
    /// Opaque and signed; good for your buys of this product only.
    token: String,
    #[schema(value_type = String, format = DateTime)]
    expires_at: Rfc3339,
}

#[utoipa::path(
    post,
    path = "/api/v1/products/{id}/buy-token",
    tag = "orders",
    summary = "Get the buy token a guarded sale's buys must carry",
    description = "Handed out from `guard.token_lead_secs` before the sale's start; valid for \
        `guard.token_ttl_secs` after the start, or after it is handed out once the sale runs. A \
        `challenge` sale needs the answer to `GET /api/v1/products/{id}/challenge` in the body; \
        any other sale takes an empty body (an unguarded sale's buys need no token).",
    params(("id" = i64, Path, description = "The product's id")),
    request_body = Option<BuyTokenRequest>,
    security(("session_bearer" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "A buy token for you and this product", body = BuyTokenView),
        (status = 400, description = "`malformed_json`: the body is not JSON", body = ErrorBody),
        (status = 403, description = "`too_early`: buy tokens are handed out from a little before the start, retry after the `Retry-After` seconds; `ended`: the sale has ended; `challenge_required`: this sale asks for the answer to its challenge; `invalid_challenge_answer`: the nonce does not solve the challenge, or the challenge is another buyer's or product's, or has expired", body = ErrorBody),
        (status = 404, description = "`unknown_product`: no such product", body = ErrorBody),
        (status = 422, description = "`invalid_body`: an unknown field", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many requests from this address or this buyer; retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn buy_token(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    user: CurrentUser,
    AppPath(id): AppPath<i64>,
    body: Bytes,
) -> Result<AppJson<BuyTokenView>, ApiError> {
    state.limits.check_buy(ip, user.id, None)?;
    let answer: BuyTokenRequest = optional_json(&body)?;
    let product = ProductId(id);
    let (guard, window) = state
        .sale
        .guard_of(product)
        .ok_or_else(ApiError::unknown_product)?;
    let now = state.sale.now();
    let settings = &state.guard.settings;
    if now >= window.end {
        return Err(forbidden("ended", "the sale has ended"));
    }
    let opens = window.start - (settings.token_lead_secs * 1000) as i64;
    if now < opens {
        let wait_secs = (opens - now + 999) / 1000;
        return Err(forbidden(
            "too_early",
            format!("buy tokens are handed out from {wait_secs} s from now on"),
        )
        .retry_after(wait_secs as u64));
    }
    if guard == Guard::Challenge {
        let scope = Scope::Buy {
            user: user.id,
            product,
        };
        let (challenge, nonce) = (answer.challenge.as_deref(), answer.nonce.as_deref());
        check_answer(&state, scope, challenge, nonce)?;
    }
    let expires_at = now.max(window.start) + (settings.token_ttl_secs * 1000) as i64;
    Ok(AppJson(BuyTokenView {
        token: state.guard.signer.buy_token(user.id, product, expires_at),
        expires_at: Rfc3339(expires_at),
    }))
}

/// Who the registration challenge is for.
#[derive(Deserialize)]
pub(crate) struct RegistrationQuery {
    username: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/registration/challenge",
    tag = "sessions",
    summary = "Get a puzzle to answer when registering a username",
    description = "With `guard.registration_challenge` set, `POST /api/v1/users` needs the \
        answer to a challenge for the name it registers, as `challenge` and `nonce`.",
    params(("username" = String, Query, description = "The username to register")),
    responses(
        (status = 200, description = "A puzzle for this username, answerable for two minutes", body = ChallengeView),
        (status = 422, description = "`invalid_username`: the username breaks the rules", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many requests from this address; retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn registration_challenge(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    query: Result<Query<RegistrationQuery>, QueryRejection>,
) -> Result<AppJson<ChallengeView>, ApiError> {
    state.limits.check_ip(ip)?;
    let name = query
        .ok()
        .and_then(|Query(q)| q.username)
        .unwrap_or_default();
    let username =
        Username::parse(&name).map_err(|e| ApiError::invalid("invalid_username", e.to_string()))?;
    let scope = Scope::Registration(username.as_str());
    Ok(AppJson(ChallengeView::new(&state, scope)))
}
