//! Signing in to the console with the admin token, and signing out.

use super::{AdminSession, ConsoleForm, SIGN_IN, ending_cookie, page, see_other, with_cookie};
use crate::error::ApiError;
use crate::http::AppState;
use crate::http::client_ip::ClientIp;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

/// The sign-in form.
#[derive(Template)]
#[template(path = "admin/login.html")]
struct SignInPage {
    error: Option<&'static str>,
}

/// The console's first page is the catalog; whoever is not signed in goes to the form.
pub(crate) async fn home(_: AdminSession) -> Response {
    see_other("/admin/products")
}

pub(crate) async fn sign_in_page() -> Result<Response, ApiError> {
    page(StatusCode::OK, &SignInPage { error: None })
}

/// Checks the admin token, under the same per-address throttle as every sign-in.
pub(crate) async fn sign_in(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    body: Bytes,
) -> Result<Response, ApiError> {
    state.limits.check_ip(ip)?;
    let token = form_urlencoded::parse(&body)
        .find(|(name, _)| name == "token")
        .map(|(_, value)| value.trim().to_owned())
        .unwrap_or_default();
    if token.is_empty() || !state.auth.admin_token.matches(&token) {
        return page(
            StatusCode::UNAUTHORIZED,
            &SignInPage {
                error: Some("That is not the admin token."),
            },
        );
    }
    with_cookie(see_other("/admin/products"), &AdminSession::start(&state))
}

/// Ends the session on every server, and the browser forgets its cookie.
pub(crate) async fn sign_out(
    State(state): State<AppState>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    form.session.end(&state).await?;
    with_cookie(see_other(SIGN_IN), &ending_cookie(&state))
}
