//! Request extractors: [`CurrentUser`] from a session token (cookie or bearer header) and
//! [`AdminAuth`] from the admin token, both checked in memory with no I/O; [`SessionToken`], a
//! session token to check later; [`IdempotencyKeyHeader`].

use crate::auth::TokenSigner;
use crate::auth::revocation::{RevokedSessions, SessionId};
use crate::clock::SharedClock;
use crate::config::Secret;
use crate::domain::{IdempotencyKey, InvalidIdempotencyKey, Millis, UserId};
use crate::error::ApiError;
use axum::extract::{FromRef, FromRequestParts, OptionalFromRequestParts};
use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use std::sync::Arc;

/// The name of the cookie that carries the session token for pages and the page script.
pub const SESSION_COOKIE: &str = "seckill_session";

/// What the extractors need: the token signer, the admin token, the clock and the sessions
/// ended before their time.
pub struct AuthKeys {
    pub tokens: TokenSigner,
    pub admin_token: Secret,
    pub clock: SharedClock,
    /// Shoppers' and operators' sessions ended by signing out, and disabled accounts'
    /// cut-offs, kept current from the database by the server's revocation task.
    pub revoked: Arc<RevokedSessions>,
}

/// The signed-in shopper making this request.
#[derive(Debug, Clone)]
pub struct CurrentUser {
    pub id: UserId,
    pub username: String,
    /// The session of the token, to end it on sign-out.
    pub session: SessionId,
    /// When the token expires, after which ending its session is moot.
    pub expires_at: Millis,
}

impl<S> FromRequestParts<S> for CurrentUser
where
    S: Send + Sync,
    Arc<AuthKeys>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let token = bearer_token(parts).or_else(|| session_cookie(parts));
        CurrentUser::of(token, &Arc::<AuthKeys>::from_ref(state))
    }
}

impl CurrentUser {
    /// The shopper whose session `token` is: signed by us, not expired, its session not ended.
    fn of(token: Option<&str>, keys: &AuthKeys) -> Result<Self, ApiError> {
        let claims = keys
            .tokens
            .verify(
                token.ok_or_else(ApiError::unauthorized)?,
                keys.clock.now_ms(),
            )
            .filter(|c| !keys.revoked.refuses(c.session, c.user_id, c.issued_at))
            .ok_or_else(ApiError::unauthorized)?;
        Ok(CurrentUser {
            id: claims.user_id,
            username: claims.username,
            session: claims.session,
            expires_at: claims.expires_at,
        })
    }
}

/// The session token a request carries (as [`CurrentUser`] finds it), not checked yet: for a
/// handler that may answer before it needs to know the buyer (a buy of a product flagged sold
/// out), then checks it with [`SessionToken::user`].
pub struct SessionToken(Sent);

/// Where a request's session token was found.
enum Sent {
    /// The `Authorization` header, whose value is shared with the request, not copied.
    Bearer(HeaderValue),
    /// The session cookie.
    Cookie(String),
    /// Neither.
    Nothing,
}

impl<S: Send + Sync> FromRequestParts<S> for SessionToken {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let sent = match (bearer_token(parts), parts.headers.get(AUTHORIZATION)) {
            (Some(_), Some(header)) => Sent::Bearer(header.clone()),
            _ => session_cookie(parts).map_or(Sent::Nothing, |token| Sent::Cookie(token.into())),
        };
        Ok(Self(sent))
    }
}

impl SessionToken {
    /// The signed-in shopper, checked as [`CurrentUser`] is (`401 unauthorized` without one).
    pub fn user(&self, keys: &AuthKeys) -> Result<CurrentUser, ApiError> {
        let token = match &self.0 {
            Sent::Bearer(header) => bearer_value(header),
            Sent::Cookie(token) => Some(token.as_str()),
            Sent::Nothing => None,
        };
        CurrentUser::of(token, keys)
    }
}

/// Pages render for visitors too: a missing or invalid token just means "not signed in".
impl<S> OptionalFromRequestParts<S> for CurrentUser
where
    S: Send + Sync,
    Arc<AuthKeys>: FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(
            <Self as FromRequestParts<S>>::from_request_parts(parts, state)
                .await
                .ok(),
        )
    }
}

/// Proof that the request carries the admin token.
pub struct AdminAuth;

impl<S> FromRequestParts<S> for AdminAuth
where
    S: Send + Sync,
    Arc<AuthKeys>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let keys = Arc::<AuthKeys>::from_ref(state);
        match bearer_token(parts) {
            Some(token) if keys.admin_token.matches(token) => Ok(AdminAuth),
            _ => Err(ApiError::unauthorized()),
        }
    }
}

fn bearer_token(parts: &Parts) -> Option<&str> {
    bearer_value(parts.headers.get(AUTHORIZATION)?)
}

fn bearer_value(header: &HeaderValue) -> Option<&str> {
    header.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

fn session_cookie(parts: &Parts) -> Option<&str> {
    cookie(&parts.headers, SESSION_COOKIE)
}

/// The value of the cookie `name` that a request carries, if any: the shopper's session, the
/// operator's, the chosen language.
pub fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

/// The header a client names a retryable request with (a buy, a pay call).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The `Idempotency-Key` of a request: `None` when the client sent none. A malformed one, or
/// two, is refused (`400 invalid_idempotency_key`) before anything else is done.
pub struct IdempotencyKeyHeader(pub Option<IdempotencyKey>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKeyHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let mut sent = parts.headers.get_all(IDEMPOTENCY_KEY).iter();
        let Some(value) = sent.next() else {
            return Ok(Self(None));
        };
        if sent.next().is_some() {
            return Err(InvalidIdempotencyKey.into());
        }
        let text = value.to_str().map_err(|_| InvalidIdempotencyKey)?;
        Ok(Self(Some(IdempotencyKey::parse(text)?)))
    }
}
