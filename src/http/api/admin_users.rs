//! The operator's accounts under `/api/v1/admin/users`, behind the admin token: find accounts
//! by name, and disable an abusive one or enable it again. Disabling refuses the account's
//! sign-ins and ends every session it holds, on this server at once and on every other within
//! a second (`auth::revocation`); enabling lets its owner sign in again, while the tokens it
//! held before stay refused. The sale service makes each change and records it in the audit
//! log; [`disable`], which also cuts the account off on this server at once, is shared with
//! the console.

use super::admin::token_operator;
use super::{ErrorBody, Rfc3339};
use crate::domain::{NamePrefix, Operator, UserId};
use crate::error::{ApiError, AppJson, AppPath, AppQuery};
use crate::http::AppState;
use crate::http::extract::AdminAuth;
use crate::store::{UserAccount, UserCutoff};
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Accounts one search answers when it names no limit.
const DEFAULT_LIMIT: i64 = 50;

/// The most accounts one search answers.
const MAX_LIMIT: i64 = 200;

/// An account as the operator sees it.
#[derive(Serialize, ToSchema)]
pub(crate) struct AccountView {
    id: i64,
    username: String,
    #[schema(value_type = String, format = DateTime)]
    created_at: Rfc3339,
    /// Whether the account is disabled: it cannot sign in, and its sessions were ended.
    disabled: bool,
    /// When it was disabled; `null` while it is enabled.
    #[schema(value_type = Option<String>, format = DateTime)]
    disabled_at: Option<Rfc3339>,
}

impl From<UserAccount> for AccountView {
    fn from(user: UserAccount) -> Self {
        Self {
            id: user.id.0,
            username: user.username,
            created_at: Rfc3339(user.created_at),
            disabled: user.disabled_at.is_some(),
            disabled_at: user.disabled_at.map(Rfc3339),
        }
    }
}

/// The filters of a search; each is optional.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SearchQuery {
    /// Only accounts whose name begins with this (names are compared in lower case).
    name: Option<String>,
    /// How many accounts at most, 1 to 200 (50 when left out).
    limit: Option<i64>,
}

/// Disables an account for `by`: its sign-ins are refused, and every token it holds at once
/// here and within a second on every other server (which read the cut-off from the
/// database). A repeat changes nothing.
pub(in crate::http) async fn disable(
    state: &AppState,
    by: &Operator,
    id: UserId,
) -> Result<UserAccount, ApiError> {
    let now = state.sale.now();
    let cutoff = UserCutoff {
        user: id,
        cut_at: now,
        expires_at: now.saturating_add(state.auth.tokens.ttl_ms()),
    };
    let disabled = state.sale.disable_user(by, &cutoff).await?;
    if disabled.changed {
        state
            .auth
            .revoked
            .cut_off(id, cutoff.cut_at, cutoff.expires_at);
    }
    Ok(disabled.value)
}

#[utoipa::path(
    get,
    path = "/api/v1/admin/users",
    tag = "admin",
    summary = "Find accounts by the beginning of their name, newest first",
    params(SearchQuery),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The matching accounts, newest first", body = [AccountView]),
        (status = 422, description = "`invalid_query`: a parameter is unknown or malformed; `invalid_limit`: the limit is not 1 to 200; `invalid_name`: the name is longer than a username", body = ErrorBody),
    )
)]
pub(crate) async fn search_users(
    _: AdminAuth,
    State(state): State<AppState>,
    AppQuery(query): AppQuery<SearchQuery>,
) -> Result<AppJson<Vec<AccountView>>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "invalid_limit",
            format!("limit must be 1 to {MAX_LIMIT}"),
        ));
    }
    let name = NamePrefix::parse(query.name.as_deref().unwrap_or(""))?;
    let found = state.sale.users(&name, limit).await?;
    Ok(AppJson(found.into_iter().map(AccountView::from).collect()))
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/users/{id}/disable",
    tag = "admin",
    summary = "Disable an account: its sign-ins are refused and every session it holds ends",
    description = "The account's tokens stop working on this server at once and on every other \
        within a second; signing in answers `403 user_disabled`. Disabling a disabled account \
        changes nothing.",
    params(("id" = i64, Path, description = "The account's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The account, disabled", body = AccountView),
        (status = 404, description = "`unknown_user`: no such account; `not_found`: the id is not a number", body = ErrorBody),
    )
)]
pub(crate) async fn disable_user(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<AccountView>, ApiError> {
    let user = disable(&state, &token_operator(&state), UserId(id)).await?;
    Ok(AppJson(user.into()))
}

#[utoipa::path(
    post,
    path = "/api/v1/admin/users/{id}/enable",
    tag = "admin",
    summary = "Enable a disabled account: its owner may sign in again",
    description = "The tokens the account held when it was disabled stay refused: its owner \
        signs in again. Enabling an enabled account changes nothing.",
    params(("id" = i64, Path, description = "The account's id")),
    security(("admin_bearer" = [])),
    responses(
        (status = 200, description = "The account, enabled", body = AccountView),
        (status = 404, description = "`unknown_user`: no such account; `not_found`: the id is not a number", body = ErrorBody),
    )
)]
pub(crate) async fn enable_user(
    _: AdminAuth,
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
) -> Result<AppJson<AccountView>, ApiError> {
    let by = token_operator(&state);
    let enabled = state.sale.enable_user(&by, UserId(id)).await?;
    Ok(AppJson(enabled.value.into()))
}
