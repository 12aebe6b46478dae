//! Signing out ends the session on every server, not just in the browser that signed out: a
//! copied token or console cookie stops working on the server that took the sign-out at once,
//! on a second server over the same database within its next reading, and on a server started
//! later from the first request.

use crate::helpers::{ADMIN_TOKEN, TestApp, client_builder, status_and_json};
use reqwest::StatusCode;
use reqwest::redirect::Policy;
use seckill::clock::SystemClock;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long another server may take to learn of a sign-out: its reading period and slack.
const SPREAD: Duration = Duration::from_secs(3);

async fn sign_in(app: &TestApp, username: &str) -> String {
    let creds = json!({ "username": username, "password": format!("{username}-password") });
    let response = app
        .client
        .post(app.url("/api/v1/sessions"))
        .json(&creds)
        .send()
        .await
        .unwrap();
    let (status, session) = status_and_json(response).await;
    assert_eq!(status, StatusCode::OK, "{session}");
    session["token"].as_str().unwrap().to_owned()
}

async fn orders_status(app: &TestApp, token: &str) -> StatusCode {
    app.get_json_as(token, "/api/v1/orders").await.0
}

/// Polls `check` until it holds or [`SPREAD`] has passed; whether it held.
async fn within_spread(mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + SPREAD;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_signed_out_token_stops_working_here_at_once_and_on_every_server_soon() {
    let first = TestApp::spawn().await;
    let second = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    let creds = json!({ "username": "fay", "password": "fay-password" });
    let response = first
        .client
        .post(first.url("/api/v1/users"))
        .json(&creds)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (phone, laptop) = (sign_in(&first, "fay").await, sign_in(&first, "fay").await);
    for app in [&first, &second] {
        assert_eq!(orders_status(app, &phone).await, StatusCode::OK);
    }

    let response = first
        .client
        .delete(first.url("/api/v1/sessions"))
        .bearer_auth(&phone)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        orders_status(&first, &phone).await,
        StatusCode::UNAUTHORIZED,
        "ended at once where it was signed out"
    );
    assert!(
        within_spread(async || orders_status(&second, &phone).await == StatusCode::UNAUTHORIZED)
            .await,
        "the other server still takes the ended session"
    );
    for app in [&first, &second] {
        assert_eq!(
            orders_status(app, &laptop).await,
            StatusCode::OK,
            "the other session of the same shopper goes on"
        );
    }

    // The page's sign-out, with the cookie, ends the session too.
    let response = first
        .client
        .post(first.url("/logout"))
        .header("cookie", format!("seckill_session={laptop}"))
        .header("origin", &first.base)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(
        orders_status(&first, &laptop).await,
        StatusCode::UNAUTHORIZED
    );

    // A server started after the sign-outs knows them from its first request.
    let third = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    for token in [&phone, &laptop] {
        assert_eq!(orders_status(&third, token).await, StatusCode::UNAUTHORIZED);
    }
    third.stop().await;
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn a_copied_console_cookie_stops_working_once_the_operator_signs_out() {
    let first = TestApp::spawn().await;
    let second = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    let client = client_builder().redirect(Policy::none()).build().unwrap();
    let signed_in = client
        .post(first.url("/admin/login"))
        .header("origin", &first.base)
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let console = async |app: &TestApp| {
        client
            .get(app.url("/admin/audit"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(console(&first).await, StatusCode::OK);
    assert_eq!(console(&second).await, StatusCode::OK);

    let page = client
        .get(first.url("/admin/audit"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let start = page.find(r#"name="csrf" value=""#).unwrap() + 19;
    let csrf = page[start..].split('"').next().unwrap();
    let signed_out = client
        .post(first.url("/admin/logout"))
        .header("cookie", &cookie)
        .header("origin", &first.base)
        .form(&[("csrf", csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        console(&first).await,
        StatusCode::SEE_OTHER,
        "sent to the sign-in form"
    );
    assert!(
        within_spread(async || console(&second).await == StatusCode::SEE_OTHER).await,
        "the other server still takes the ended console session"
    );
    second.stop().await;
    first.stop().await;
}
