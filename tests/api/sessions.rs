//! Accounts and sign-in over the API, with the cookie the pages use, and what holds sign-in
//! back under a flood: a bounded number of password hashes at once (`sign_in_fairness.rs` for
//! how they are shared, and the throttle of one account).

use crate::support::{TestApp, code, status_and_json};
use reqwest::StatusCode;
use serde_json::json;
use tokio::task::JoinSet;

async fn post(
    app: &TestApp,
    path: &str,
    body: serde_json::Value,
) -> (StatusCode, serde_json::Value, Option<String>) {
    let response = app
        .client
        .post(app.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let cookie = response
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_owned());
    let (status, body) = status_and_json(response).await;
    (status, body, cookie)
}

#[tokio::test]
async fn a_shopper_registers_signs_in_and_buys_with_the_session_cookie() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let creds = json!({ "username": "dora", "password": "dora-password" });
    let (status, user, _) = post(&app, "/api/v1/users", creds.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{user}");
    assert_eq!(user["username"], "dora");

    let (status, session, cookie) = post(&app, "/api/v1/sessions", creds).await;
    assert_eq!(status, StatusCode::OK, "{session}");
    let cookie = cookie.expect("the session cookie is set");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    assert_eq!(
        pair,
        format!("seckill_session={}", session["token"].as_str().unwrap())
    );

    let response = app
        .client
        .post(app.url("/api/v1/orders"))
        .header("cookie", &pair)
        .header("origin", &app.base)
        .json(&json!({ "product_id": product, "quantity": 1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    app.settle().await;
    let response = app
        .client
        .get(app.url("/api/v1/orders"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    let (status, orders) = status_and_json(response).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(orders.as_array().unwrap().len(), 1);
    assert_eq!(orders[0]["product_id"], product);
}

#[tokio::test]
async fn registration_refuses_taken_names_bad_names_and_weak_passwords() {
    let app = TestApp::spawn().await;
    let ok = json!({ "username": "erin", "password": "long-enough" });
    assert_eq!(
        post(&app, "/api/v1/users", ok.clone()).await.0,
        StatusCode::CREATED
    );
    for (body, status, expected) in [
        (ok, 409, "username_taken"),
        (
            json!({ "username": "e", "password": "long-enough" }),
            422,
            "invalid_username",
        ),
        (
            json!({ "username": "<script>", "password": "long-enough" }),
            422,
            "invalid_username",
        ),
        (
            json!({ "username": "frank", "password": "short" }),
            422,
            "weak_password",
        ),
        (json!({ "username": "frank" }), 422, "invalid_body"),
    ] {
        let (got, answer, _) = post(&app, "/api/v1/users", body).await;
        assert_eq!((got.as_u16(), code(&answer)), (status, expected));
    }
}

#[tokio::test]
async fn wrong_passwords_and_unknown_users_get_the_same_answer() {
    let app = TestApp::spawn().await;
    post(
        &app,
        "/api/v1/users",
        json!({ "username": "gina", "password": "gina-password" }),
    )
    .await;
    for creds in [
        json!({ "username": "gina", "password": "wrong-password" }),
        json!({ "username": "nobody", "password": "gina-password" }),
        json!({ "username": "", "password": "" }),
    ] {
        let (status, body, cookie) = post(&app, "/api/v1/sessions", creds).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNAUTHORIZED, "invalid_credentials")
        );
        assert!(cookie.is_none());
    }
}

#[tokio::test]
async fn a_flood_of_wrong_sign_ins_hashes_within_the_bound_and_the_right_password_still_works() {
    let app = TestApp::spawn().await;
    let creds = json!({ "username": "hana", "password": "hana-password" });
    assert_eq!(
        post(&app, "/api/v1/users", creds.clone()).await.0,
        StatusCode::CREATED
    );
    let turns = app.state.passwords.turns();
    // Far more at once than the turns and their queue hold, on any number of cores.
    let flood = 64.max(8 * turns);
    let mut busy = 0;
    for round in 0..3 {
        let mut attempts = JoinSet::new();
        for i in 0..flood {
            let (client, url) = (app.client.clone(), app.url("/api/v1/sessions"));
            // Made-up names, one attempt each: the per-account throttle stays out of the way
            // and every attempt that gets a turn hashes.
            let guess =
                json!({ "username": format!("flood-{round}-{i}"), "password": "guess-guess" });
            attempts.spawn(async move { client.post(url).json(&guess).send().await.unwrap() });
        }
        let (status, _) = app.get_json("/healthz").await;
        assert_eq!(status, StatusCode::OK, "/healthz answers during the flood");
        while let Some(response) = attempts.join_next().await {
            let response = response.unwrap();
            let retry_after = response.headers().get("retry-after").cloned();
            let (status, body) = status_and_json(response).await;
            match status {
                StatusCode::UNAUTHORIZED => assert_eq!(code(&body), "invalid_credentials"),
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert_eq!(code(&body), "busy");
                    assert!(retry_after.is_some(), "a busy answer says when to retry");
                    busy += 1;
                }
                other => panic!("a wrong sign-in answered {other}: {body}"),
            }
        }
    }
    assert!(
        busy > 0,
        "{flood} sign-ins at once were all let through to hash"
    );
    let peak = app.state.passwords.peak_running();
    assert!(
        (1..=turns).contains(&peak),
        "{peak} password hashes ran at once with {turns} turns"
    );

    let (status, session, _) = post(&app, "/api/v1/sessions", creds).await;
    assert_eq!(status, StatusCode::OK, "{session}");
}

#[tokio::test]
async fn a_username_is_taken_whatever_its_case_and_signs_in_in_any_case() {
    let app = TestApp::spawn().await;
    let (status, user, _) = post(
        &app,
        "/api/v1/users",
        json!({ "username": "Gina", "password": "gina-password" }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{user}");
    assert_eq!(user["username"], "gina");
    for twin in ["gina", "GINA", "gInA"] {
        let (status, body, _) = post(
            &app,
            "/api/v1/users",
            json!({ "username": twin, "password": "other-password" }),
        )
        .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::CONFLICT, "username_taken"),
            "{twin}"
        );
    }
    let (status, session, _) = post(
        &app,
        "/api/v1/sessions",
        json!({ "username": "GINA", "password": "gina-password" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{session}");
    assert_eq!(session["user"]["username"], "gina");
}
