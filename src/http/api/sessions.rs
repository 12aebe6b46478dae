//! Accounts and sign-in: `POST /users` registers, `POST /sessions` signs in and hands out a
//! session token (also set as an HttpOnly cookie for the pages), `DELETE /sessions` signs out,
//! ending the session on every server.
//! Both hash a password, so both wait for a turn at the
//! [`Hasher`](crate::auth::password::Hasher), shared fairly between addresses, and are refused
//! with 503 `busy` when every place is taken and this address holds its share of them; a
//! refused request changes nothing.

use super::ErrorBody;
use crate::auth::revocation::SessionId;
use crate::domain::Millis;
use crate::domain::{Password, Username};
use crate::error::{ApiError, AppJson};
use crate::http::AppState;
use crate::http::client_ip::ClientIp;
use crate::http::extract::{CurrentUser, SESSION_COOKIE};
use crate::store::RevokedSession;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A username and password, to register or to sign in.
#[derive(Deserialize, ToSchema)]
pub(crate) struct Credentials {
    /// 3 to 32 ASCII letters, digits, `_`, `.` or `-`, whatever their case.
    #[schema(min_length = 3, max_length = 32, pattern = "^[A-Za-z0-9_.-]+$")]
    username: String,
    /// 8 to 128 characters.
    #[schema(min_length = 8, max_length = 128)]
    password: String,
    /// Registering, with `guard.registration_challenge` set: a challenge of
    /// `GET /api/v1/registration/challenge` for this username (signing in ignores it).
    challenge: Option<String>,
    /// The nonce that solves `challenge`.
    nonce: Option<String>,
}

/// An account as its owner sees it.
#[derive(Serialize, ToSchema)]
pub(crate) struct UserView {
    id: i64,
    username: String,
}

#[utoipa::path(
    post,
    path = "/api/v1/users",
    tag = "sessions",
    summary = "Register an account",
    request_body = Credentials,
    responses(
        (status = 201, description = "The account was created", body = UserView),
        (status = 403, description = "`challenge_required`: registering asks for the answer to a registration challenge (`guard.registration_challenge`); `invalid_challenge_answer`: the nonce does not solve the challenge, or the challenge is for another username or has expired", body = ErrorBody),
        (status = 409, description = "`username_taken`: that username is taken", body = ErrorBody),
        (status = 422, description = "`invalid_username`: the username breaks the rules; `weak_password`: the password is too weak", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many requests from this address; `too_many_registrations`: too many accounts registered from this address, or by everybody, this hour; retry after the `Retry-After` seconds", body = ErrorBody),
        (status = 503, description = "`busy`: too many passwords are being hashed; nothing changed, retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn register(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    AppJson(body): AppJson<Credentials>,
) -> Result<(StatusCode, AppJson<UserView>), ApiError> {
    state.limits.check_registration(ip)?;
    let username = Username::parse(&body.username)
        .map_err(|e| ApiError::invalid("invalid_username", e.to_string()))?;
    let password = Password::parse(&body.password)
        .map_err(|e| ApiError::invalid("weak_password", e.to_string()))?;
    let (challenge, nonce) = (body.challenge.as_deref(), body.nonce.as_deref());
    super::guard::check_registration(&state, &username, challenge, nonce)?;
    let hash = state.passwords.turn(ip).await?.hash(password).await?;
    let id = state
        .store
        .create_user(&username, &hash, state.sale.now())
        .await?
        .ok_or_else(|| ApiError::conflict("username_taken", "that username is taken"))?;
    Ok((
        StatusCode::CREATED,
        AppJson(UserView {
            id: id.0,
            username: username.to_string(),
        }),
    ))
}

/// A session token, for `Authorization: Bearer`, and whose it is.
#[derive(Serialize, ToSchema)]
pub(crate) struct SessionView {
    token: String,
    #[schema(value_type = String, format = DateTime)]
    expires_at: super::Rfc3339,
    user: UserView,
}

#[utoipa::path(
    post,
    path = "/api/v1/sessions",
    tag = "sessions",
    summary = "Sign in",
    request_body = Credentials,
    responses(
        (status = 200, description = "Signed in; the token is also set as the `seckill_session` cookie", body = SessionView, headers(("set-cookie" = String, description = "`seckill_session`, HttpOnly"))),
        (status = 401, description = "`invalid_credentials`: wrong username or password", body = ErrorBody),
        (status = 403, description = "`user_disabled`: the username and password are right, but an operator has disabled the account", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many requests from this address; `too_many_sign_ins`: too many sign-ins to this account from this address; retry after the `Retry-After` seconds", body = ErrorBody),
        (status = 503, description = "`busy`: too many passwords are being hashed; nothing changed, retry after the `Retry-After` seconds", body = ErrorBody),
    )
)]
pub(crate) async fn sign_in(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    AppJson(body): AppJson<Credentials>,
) -> Result<(HeaderMap, AppJson<SessionView>), ApiError> {
    state.limits.check_ip(ip)?;
    let invalid = || {
        ApiError::client(
            StatusCode::UNAUTHORIZED,
            "invalid_credentials",
            "wrong username or password",
        )
    };
    let username = Username::parse(&body.username).map_err(|_| invalid())?;
    // Slowed before the turn, so the wait holds no turn; never refused there.
    state.limits.pace_sign_in(&username).await;
    // The turn first, then the count of this account from this address: a sign-in refused as
    // busy costs it nothing, and only sign-ins about to hash can add to the throttle.
    let turn = state.passwords.turn(ip).await?;
    state.limits.check_sign_in(&username, ip)?;
    // The token is issued as of before the account is read: an operator who disables the
    // account after this reading cuts the token off too (`auth::revocation`).
    let now = state.sale.now();
    let record = state.store.user_by_name(username.as_str()).await?;
    let stored_hash = record.as_ref().map(|r| r.password_hash.clone());
    if !turn.verify(body.password, stored_hash).await? {
        return Err(invalid());
    }
    let record = record.ok_or_else(invalid)?;
    // Told only to whoever knows the password, so nobody learns which accounts are disabled.
    if record.disabled_at.is_some() {
        return Err(ApiError::client(
            StatusCode::FORBIDDEN,
            "user_disabled",
            "this account has been disabled by the operator",
        ));
    }
    let (token, expires_at) = state.auth.tokens.issue(record.id, &username, now);
    let max_age = (expires_at - now) / 1000;
    let headers = session_cookie(&state, &token, max_age)?;
    Ok((
        headers,
        AppJson(SessionView {
            token,
            expires_at: super::Rfc3339(expires_at),
            user: UserView {
                id: record.id.0,
                username: record.username,
            },
        }),
    ))
}

#[utoipa::path(
    delete,
    path = "/api/v1/sessions",
    tag = "sessions",
    summary = "Sign out: end the session on every server and delete the session cookie",
    description = "The token (bearer or cookie) stops working on this server at once and on every other within a second. Without a valid token there is no session to end, and only the cookie is deleted.",
    responses(
        (status = 204, description = "The session is ended and the cookie deleted", headers(("set-cookie" = String, description = "`seckill_session`, expired"))),
        (status = 500, description = "`internal`: the database could not record the sign-out; the session may still work on other servers, retry", body = ErrorBody),
    )
)]
pub(crate) async fn sign_out(
    State(state): State<AppState>,
    user: Option<CurrentUser>,
) -> Result<(StatusCode, HeaderMap), ApiError> {
    if let Some(user) = user {
        revoke(&state, user.session, user.expires_at).await?;
    }
    Ok((StatusCode::NO_CONTENT, session_cookie(&state, "", 0)?))
}

/// Ends a session, a shopper's or an operator's, until its token would have expired: at once
/// on this server, and on every other once it reads the database (within a second).
pub async fn revoke(
    state: &AppState,
    session: SessionId,
    expires_at: Millis,
) -> Result<(), ApiError> {
    state.auth.revoked.insert(session, expires_at);
    let revoked = RevokedSession {
        session_id: session.to_string(),
        expires_at,
    };
    state
        .store
        .revoke_session(&revoked, state.sale.now())
        .await?;
    Ok(())
}

/// The `Set-Cookie` header that stores (or, with `max_age` 0, deletes) the session token.
pub fn session_cookie(state: &AppState, token: &str, max_age: i64) -> Result<HeaderMap, ApiError> {
    let secure = if state.secure_cookies { "; Secure" } else { "" };
    let cookie = format!(
        "{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(anyhow::Error::from)?,
    );
    Ok(headers)
}
