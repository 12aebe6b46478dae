//! The operator's console under `/admin`: server-rendered pages and plain HTML forms over the
//! same sale service and checks as the admin API, for an operator with the admin token: forms
//! are parsed into the same `domain` types, and the sale service records each change in the
//! audit log as made by [`crate::domain::Operator::Console`].
//!
//! Signing in with the admin token sets a session cookie (`HttpOnly`, `SameSite=Strict`,
//! `Path=/admin`) holding a random session id and its expiry, signed with an HMAC keyed by the
//! admin token, so rotating the token ends every session; signing out ends one, on every server
//! (`auth::revocation`), and the dashboard streams it holds open with it. Every form carries a
//! CSRF token, the HMAC of the session id, and every POST is refused with 403 without the
//! right one.

pub mod audit;
pub mod catalog;
pub mod dashboard;
pub mod images;
pub mod orders;
pub mod session;
pub mod users;

use crate::auth::revocation::SessionId;
use crate::domain::Millis;
use crate::error::ApiError;
use crate::http::AppState;
use crate::http::api::sessions::revoke;
use askama::Template;
use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// The name of the console's session cookie.
pub const ADMIN_COOKIE: &str = "seckill_admin";

/// How long a console session lasts: a working day, so a forgotten browser does not stay
/// signed in for long.
pub const SESSION_TTL_MS: i64 = 12 * 3_600_000;

/// Where the console sends whoever is not signed in.
const SIGN_IN: &str = "/admin/login";

/// The longest cookie value a console issues has a 32-digit id, a 20-digit time and a 32-byte
/// signature; anything much longer was not issued here.
const MAX_COOKIE_LEN: usize = 160;

/// The most fields a console form has, with room to spare; more are ignored.
const MAX_FORM_FIELDS: usize = 32;

/// The HMAC keyed by the admin token, for session cookies and CSRF tokens.
fn keyed(state: &AppState, purpose: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(state.auth.admin_token.expose().as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(purpose);
    mac
}

/// A signed-in operator's session, known by the CSRF token its forms carry.
pub struct AdminSession {
    id: SessionId,
    expires_at: Millis,
    csrf: String,
}

impl AdminSession {
    /// The session with this id, and the CSRF token its forms carry.
    fn new(state: &AppState, id: SessionId, expires_at: Millis) -> Self {
        let mut mac = keyed(state, b"csrf:");
        mac.update(id.to_string().as_bytes());
        Self {
            id,
            expires_at,
            csrf: B64.encode(mac.finalize().into_bytes()),
        }
    }

    /// The CSRF token every form of this session carries.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// A new session: the `Set-Cookie` value that starts it.
    fn start(state: &AppState) -> String {
        let expires_at = state.sale.now() + SESSION_TTL_MS;
        let payload = format!("{}:{expires_at}", SessionId::random());
        let mut mac = keyed(state, b"session:");
        mac.update(payload.as_bytes());
        let value = format!(
            "{}.{}",
            B64.encode(&payload),
            B64.encode(mac.finalize().into_bytes())
        );
        cookie(state, &value, SESSION_TTL_MS / 1000)
    }

    /// The session a cookie value proves: well formed, signed with the current admin token, not
    /// expired and not ended by signing out.
    fn verify(state: &AppState, value: &str) -> Option<Self> {
        if value.len() > MAX_COOKIE_LEN {
            return None;
        }
        let (payload, sig) = value.split_once('.')?;
        let payload = B64.decode(payload).ok()?;
        let mut mac = keyed(state, b"session:");
        mac.update(&payload);
        mac.verify_slice(&B64.decode(sig).ok()?).ok()?;
        let (id, expires_at) = std::str::from_utf8(&payload).ok()?.split_once(':')?;
        let id = SessionId::parse(id)?;
        let expires_at: Millis = expires_at.parse().ok()?;
        is_on(state, id, expires_at).then(|| Self::new(state, id, expires_at))
    }

    /// Whether the session is still on: not expired and not ended. What it holds open asks
    /// again while it lasts (no I/O: a clock reading and, once a session was ended, a lookup).
    fn is_on(&self, state: &AppState) -> bool {
        is_on(state, self.id, self.expires_at)
    }

    /// Ends this session on every server (see [`revoke`]).
    async fn end(&self, state: &AppState) -> Result<(), ApiError> {
        revoke(state, self.id, self.expires_at).await
    }

    /// Refuses a form whose CSRF token is not this session's (compared in constant time).
    fn check_csrf(&self, presented: &str) -> Result<(), ApiError> {
        if bool::from(self.csrf.as_bytes().ct_eq(presented.as_bytes())) {
            return Ok(());
        }
        Err(ApiError::client(
            StatusCode::FORBIDDEN,
            "bad_csrf_token",
            "the form's CSRF token is missing or wrong: reload the page and try again",
        ))
    }
}

/// Whether the session `id`, expiring at `expires_at`, is neither expired nor ended.
fn is_on(state: &AppState, id: SessionId, expires_at: Millis) -> bool {
    state.sale.now() < expires_at && !state.auth.revoked.contains(id)
}

/// The `Set-Cookie` value of the console's session cookie.
fn cookie(state: &AppState, value: &str, max_age_secs: i64) -> String {
    let secure = if state.secure_cookies { "; Secure" } else { "" };
    format!(
        "{ADMIN_COOKIE}={value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"
    )
}

/// The `Set-Cookie` value that ends the session in the browser.
fn ending_cookie(state: &AppState) -> String {
    cookie(state, "", 0)
}

fn session_cookie(parts: &Parts) -> Option<&str> {
    crate::http::extract::cookie(&parts.headers, ADMIN_COOKIE)
}

impl<S> FromRequestParts<S> for AdminSession
where
    S: Send + Sync,
    AppState: FromRef<S>,
{
    /// Whoever is not signed in is sent to the sign-in form.
    type Rejection = Redirect;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let state = AppState::from_ref(state);
        session_cookie(parts)
            .and_then(|value| Self::verify(&state, value))
            .ok_or_else(|| Redirect::to(SIGN_IN))
    }
}

/// A console form posted by a signed-in operator with the right CSRF token. Fields are kept as
/// text, so a missing or garbled field is the handler's to explain on the form, after the CSRF
/// check, never a rejection before it.
pub struct ConsoleForm {
    pub session: AdminSession,
    fields: HashMap<String, String>,
}

impl ConsoleForm {
    /// A field's value, trimmed; empty when the form did not send it.
    pub fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", |v| v.trim())
    }
}

impl FromRequest<AppState> for ConsoleForm {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let session = AdminSession::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields: HashMap<String, String> = form_urlencoded::parse(&body)
            .take(MAX_FORM_FIELDS)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let presented = fields.get("csrf").map_or("", String::as_str);
        session
            .check_csrf(presented)
            .map_err(IntoResponse::into_response)?;
        Ok(Self { session, fields })
    }
}

/// A console page: never cached, since it carries the session's CSRF token.
fn page(status: StatusCode, template: &impl Template) -> Result<Response, ApiError> {
    let html = template.render().map_err(anyhow::Error::from)?;
    Ok((
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response())
}

/// After a change, the page to look at it (post, redirect, get).
fn see_other(location: &str) -> Response {
    Redirect::to(location).into_response()
}

/// A response that also sets the console's session cookie.
fn with_cookie(mut response: Response, cookie: &str) -> Result<Response, ApiError> {
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(cookie).map_err(anyhow::Error::from)?,
    );
    Ok(response)
}

/// The message of an operator's mistake, to show on the form; a server failure stays an error.
fn mistake(error: ApiError) -> Result<String, ApiError> {
    match error {
        ApiError::Client { message, .. } => Ok(message.into_owned()),
        other => Err(other),
    }
}

/// A time as the console shows it, in UTC.
fn utc_time(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}
