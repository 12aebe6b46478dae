//! The audit log in the console: the latest changes made through the console or the admin API,
//! newest first.

use super::{AdminSession, page, utc_time};
use crate::error::ApiError;
use crate::http::AppState;
use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

/// One change in the log.
struct AuditRow {
    at: String,
    actor: String,
    action: String,
}

/// `GET /admin/audit`.
#[derive(Template)]
#[template(path = "admin/audit.html")]
struct AuditPage {
    csrf: String,
    entries: Vec<AuditRow>,
}

pub(crate) async fn audit_page(
    State(state): State<AppState>,
    session: AdminSession,
) -> Result<Response, ApiError> {
    let entries = state
        .sale
        .audit_log()
        .await?
        .into_iter()
        .map(|e| AuditRow {
            at: utc_time(e.at),
            actor: e.actor,
            action: e.action,
        })
        .collect();
    page(
        StatusCode::OK,
        &AuditPage {
            csrf: session.csrf().to_owned(),
            entries,
        },
    )
}
