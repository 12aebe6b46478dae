//! Accounts in the console: the newest, or those whose name begins with a search, each with a
//! Disable or Enable button that makes the admin API's change (`api::admin_users::disable`,
//! the sale service's `enable_user`).

use super::{AdminSession, ConsoleForm, mistake, page, see_other, utc_time};
use crate::domain::{NamePrefix, Operator, UserId};
use crate::error::{ApiError, AppPath};
use crate::http::AppState;
use crate::http::api::admin_users::disable;
use crate::store::UserAccount;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

/// The most accounts one page shows.
const SHOWN: i64 = 100;

/// The beginning of the names to show; every account when empty.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Search {
    name: String,
}

/// One account shown.
struct UserRow {
    id: i64,
    username: String,
    created_at: String,
    /// When it was disabled, if it is.
    disabled_at: Option<String>,
}

impl From<UserAccount> for UserRow {
    fn from(user: UserAccount) -> Self {
        Self {
            id: user.id.0,
            username: user.username,
            created_at: utc_time(user.created_at),
            disabled_at: user.disabled_at.map(utc_time),
        }
    }
}

/// `GET /admin/users`.
#[derive(Template)]
#[template(path = "admin/users.html")]
struct UsersPage {
    csrf: String,
    name: String,
    error: Option<String>,
    users: Vec<UserRow>,
}

/// The page's address for a search by `name`.
fn url(name: &str) -> String {
    if name.is_empty() {
        return "/admin/users".to_owned();
    }
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("name", name)
        .finish();
    format!("/admin/users?{query}")
}

async fn show(
    state: &AppState,
    session: &AdminSession,
    name: &str,
    status: StatusCode,
    error: Option<String>,
) -> Result<Response, ApiError> {
    let found = match NamePrefix::parse(name) {
        Ok(prefix) => state
            .sale
            .users(&prefix, SHOWN)
            .await
            .map_err(ApiError::from),
        Err(refused) => Err(refused.into()),
    };
    let (status, error, users) = match found {
        Ok(users) => (status, error, users),
        Err(e) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(mistake(e)?),
            Vec::new(),
        ),
    };
    page(
        status,
        &UsersPage {
            csrf: session.csrf().to_owned(),
            name: name.trim().to_owned(),
            error,
            users: users.into_iter().map(UserRow::from).collect(),
        },
    )
}

pub(crate) async fn users_page(
    State(state): State<AppState>,
    session: AdminSession,
    Query(search): Query<Search>,
) -> Result<Response, ApiError> {
    show(&state, &session, &search.name, StatusCode::OK, None).await
}

/// `POST /admin/users/{id}/disable`: back to the search the form came from.
pub(crate) async fn disable_user(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let done = disable(&state, &Operator::Console, UserId(id)).await;
    back(&state, &form, done).await
}

/// `POST /admin/users/{id}/enable`: back to the search the form came from.
pub(crate) async fn enable_user(
    State(state): State<AppState>,
    AppPath(id): AppPath<i64>,
    form: ConsoleForm,
) -> Result<Response, ApiError> {
    let done = state
        .sale
        .enable_user(&Operator::Console, UserId(id))
        .await
        .map(|enabled| enabled.value)
        .map_err(ApiError::from);
    back(&state, &form, done).await
}

/// After a change, the search the form came from; a refusal (no such account) shown on it.
async fn back(
    state: &AppState,
    form: &ConsoleForm,
    done: Result<UserAccount, ApiError>,
) -> Result<Response, ApiError> {
    let name = form.field("name");
    match done {
        Ok(_) => Ok(see_other(&url(name))),
        Err(e) => {
            let message = mistake(e)?;
            show(
                state,
                &form.session,
                name,
                StatusCode::NOT_FOUND,
                Some(message),
            )
            .await
        }
    }
}
