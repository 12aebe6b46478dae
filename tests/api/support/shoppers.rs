//! Shoppers who register and sign in through the API, and the time another server may take to
//! learn of a change to a session or an account.

use super::app::TestApp;
use super::http::status_and_json;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Registers `username` through the API, with the password `{username}-password`; its id.
pub async fn register(app: &TestApp, username: &str) -> i64 {
    let response = app
        .client
        .post(app.url("/api/v1/users"))
        .json(&credentials(username))
        .send()
        .await
        .unwrap();
    let (status, user) = status_and_json(response).await;
    assert_eq!(status, StatusCode::CREATED, "{user}");
    user["id"].as_i64().unwrap()
}

/// A sign-in of `username` with the password [`register`] gives it: the status and body.
pub async fn try_sign_in(app: &TestApp, username: &str) -> (StatusCode, Value) {
    let request = app.client.post(app.url("/api/v1/sessions"));
    status_and_json(request.json(&credentials(username)).send().await.unwrap()).await
}

/// Signs `username` in (see [`try_sign_in`]); the session token.
pub async fn sign_in(app: &TestApp, username: &str) -> String {
    let (status, session) = try_sign_in(app, username).await;
    assert_eq!(status, StatusCode::OK, "{session}");
    session["token"].as_str().unwrap().to_owned()
}

fn credentials(username: &str) -> Value {
    json!({ "username": username, "password": format!("{username}-password") })
}

/// How long another server may take to learn of a sign-out or a disabled account: its reading
/// period and slack.
pub const SPREAD: std::time::Duration = std::time::Duration::from_secs(3);

/// Polls `check` until it holds or [`SPREAD`] has passed; whether it held.
pub async fn within_spread(mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + SPREAD;
    loop {
        if check().await {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The status of `GET /api/v1/orders` with `token`: whether the token still works there.
pub async fn orders_status(app: &TestApp, token: &str) -> StatusCode {
    app.get_json_as(token, "/api/v1/orders").await.0
}
