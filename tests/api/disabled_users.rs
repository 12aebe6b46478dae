//! An operator disables an abusive account: the tokens it holds stop working on the server that
//! took the change at once, on a second server over the same database within its next reading,
//! and on a server started later; it cannot sign in or buy; enabling it lets its owner sign in
//! again while the old tokens stay dead. Nobody but the operator can do it.

use crate::support::operator::{Operator, operator};
use crate::support::orders_status;
use crate::support::{
    ADMIN_TOKEN, TestApp, code, once_the_gate_reopens, register, sign_in, status_and_json,
    try_sign_in, within_spread,
};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

async fn change(app: &TestApp, id: i64, what: &str) -> (StatusCode, Value) {
    app.admin_post(&format!("/api/v1/admin/users/{id}/{what}"), json!({}))
        .await
}

/// The audit log's entries that mention `needle`.
async fn audited(app: &TestApp, needle: &str) -> usize {
    let request = app.client.get(app.url("/api/v1/admin/audit"));
    let (status, log) =
        status_and_json(request.bearer_auth(ADMIN_TOKEN).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{log}");
    log.as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["action"].as_str().unwrap_or("").contains(needle))
        .count()
}

#[tokio::test]
async fn a_disabled_users_tokens_die_on_every_server_and_stay_dead_after_enabling() {
    let first = TestApp::spawn().await;
    let second = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    let product = first.live_product(10, 1).await;
    let id = register(&first, "mallory").await;
    let token = sign_in(&first, "mallory").await;
    for app in [&first, &second] {
        assert_eq!(orders_status(app, &token).await, StatusCode::OK);
    }

    let (status, user) = change(&first, id, "disable").await;
    assert_eq!(status, StatusCode::OK, "{user}");
    assert_eq!(
        (user["id"].as_i64(), user["disabled"].as_bool()),
        (Some(id), Some(true))
    );
    assert_eq!(user["username"], "mallory");
    let disabled_at = user["disabled_at"].as_str().unwrap().to_owned();
    assert_eq!(
        orders_status(&first, &token).await,
        StatusCode::UNAUTHORIZED,
        "dead at once where it was disabled"
    );
    assert_eq!(
        first.buy(&token, product, 1).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert!(
        within_spread(async || orders_status(&second, &token).await == StatusCode::UNAUTHORIZED)
            .await,
        "the other server still takes the disabled account's token"
    );
    assert_eq!(
        second.buy(&token, product, 1).await.0,
        StatusCode::UNAUTHORIZED
    );
    for app in [&first, &second] {
        let (status, body) = try_sign_in(app, "mallory").await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "user_disabled")
        );
    }
    // Only whoever knows the password learns that the account is disabled.
    let wrong = json!({ "username": "mallory", "password": "not-her-password" });
    let request = first
        .client
        .post(first.url("/api/v1/sessions"))
        .json(&wrong);
    let (status, body) = status_and_json(request.send().await.unwrap()).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "invalid_credentials")
    );

    // A repeat changes nothing: the first time stays, the log has one entry.
    let (status, again) = change(&second, id, "disable").await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["disabled_at"], disabled_at.as_str());
    assert_eq!(audited(&first, &format!("disabled user {id} ")).await, 1);

    // Enabled again, the owner signs in anew; the old token stays dead everywhere.
    let cut = first.state.sale.now();
    while first.state.sale.now() <= cut {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (status, user) = change(&first, id, "enable").await;
    assert_eq!(status, StatusCode::OK, "{user}");
    assert_eq!(
        (user["disabled"].as_bool(), &user["disabled_at"]),
        (Some(false), &Value::Null)
    );
    assert_eq!(change(&first, id, "enable").await.0, StatusCode::OK);
    assert_eq!(audited(&first, &format!("enabled user {id} ")).await, 1);
    let fresh = sign_in(&second, "mallory").await;
    let third = TestApp::spawn_on(first.db.clone(), Arc::new(SystemClock), |_| {}).await;
    for app in [&first, &second, &third] {
        assert_eq!(orders_status(app, &token).await, StatusCode::UNAUTHORIZED);
        assert_eq!(orders_status(app, &fresh).await, StatusCode::OK);
    }
    // With the gate in Redis, the third server's is empty (a prefix of its own): it finds the
    // product lost, and reopens it once the servers' counts are collected.
    let (status, placed) = once_the_gate_reopens(|| third.buy(&fresh, product, 1)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{placed}");
    third.stop().await;
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn only_the_operator_disables_and_an_unknown_account_is_404() {
    let app = TestApp::spawn().await;
    let id = register(&app, "victim").await;
    let shopper = sign_in(&app, "victim").await;
    let (status, body) = change(&app, id + 1_000, "disable").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "unknown_user")
    );
    let (status, body) = change(&app, id + 1_000, "enable").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "unknown_user")
    );
    let (status, _) = change(&app, -1, "disable").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let path = app.url(&format!("/api/v1/admin/users/{id}/disable"));
    for bearer in [None, Some(shopper.as_str()), Some("not-the-admin-token")] {
        let mut request = app.client.post(&path);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        let (status, body) = status_and_json(request.send().await.unwrap()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bearer:?}: {body}");
    }
    let request = app
        .client
        .get(app.url("/api/v1/admin/users"))
        .bearer_auth(&shopper);
    assert_eq!(
        request.send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        orders_status(&app, &shopper).await,
        StatusCode::OK,
        "nothing changed"
    );
    assert_eq!(audited(&app, "disabled user").await, 0);
    app.stop().await;
}

#[tokio::test]
async fn the_operator_finds_accounts_by_name_and_a_disabled_name_stays_taken() {
    let app = TestApp::spawn().await;
    let older = register(&app, "spam_01").await;
    register(&app, "spam.02").await;
    let newest = register(&app, "spamx01").await;
    let find = async |query: &str| {
        let request = app
            .client
            .get(app.url(&format!("/api/v1/admin/users{query}")));
        status_and_json(request.bearer_auth(ADMIN_TOKEN).send().await.unwrap()).await
    };
    let (status, found) = find("?name=SPAM_").await;
    assert_eq!(status, StatusCode::OK, "{found}");
    let ids: Vec<i64> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [older], "`_` is a letter of the name, not a wildcard");
    let (_, found) = find("?name=spam").await;
    assert_eq!(found.as_array().unwrap().len(), 3);
    assert_eq!(found[0]["id"], newest, "newest first");
    let (_, found) = find("?limit=1").await;
    assert_eq!(found.as_array().unwrap().len(), 1);
    for bad in ["?limit=0", "?limit=201", "?name=", "?nme=x"] {
        let (status, body) = find(bad).await;
        if bad == "?name=" {
            assert_eq!(status, StatusCode::OK, "an empty name finds every account");
        } else {
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
        }
    }
    let (status, body) = find(&format!("?name={}", "a".repeat(33))).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_name")
    );

    // A disabled account's name is not free for a new account.
    assert_eq!(change(&app, older, "disable").await.0, StatusCode::OK);
    let creds = json!({ "username": "spam_01", "password": "another-password" });
    let request = app.client.post(app.url("/api/v1/users")).json(&creds);
    let (status, body) = status_and_json(request.send().await.unwrap()).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "username_taken")
    );
    app.stop().await;
}

#[tokio::test]
async fn the_console_disables_and_enables_an_account_under_csrf() {
    let app = TestApp::spawn().await;
    let id = register(&app, "troll").await;
    register(&app, "bystander").await;
    let token = sign_in(&app, "troll").await;
    let Operator { browser, csrf, .. } = operator(&app).await;
    let page = browser
        .get(app.url("/admin/users?name=tro"))
        .send()
        .await
        .unwrap();
    let page = page.text().await.unwrap();
    assert!(
        page.contains(&format!(r#"action="/admin/users/{id}/disable""#)),
        "{page}"
    );
    assert!(!page.contains("bystander"), "{page}");
    let press = |user: i64, what: &str, csrf: &str| {
        let url = app.url(&format!("/admin/users/{user}/{what}"));
        browser
            .post(url)
            .form(&[("csrf", csrf), ("name", "tro")])
            .send()
    };

    let forged = press(id, "disable", "forged").await.unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(orders_status(&app, &token).await, StatusCode::OK);

    let done = press(id, "disable", &csrf).await.unwrap();
    assert_eq!(
        (done.url().path(), done.url().query()),
        ("/admin/users", Some("name=tro"))
    );
    let page = done.text().await.unwrap();
    assert!(page.contains("disabled since"), "{page}");
    assert!(
        page.contains(&format!(r#"action="/admin/users/{id}/enable""#)),
        "{page}"
    );
    assert_eq!(orders_status(&app, &token).await, StatusCode::UNAUTHORIZED);
    assert_eq!(try_sign_in(&app, "troll").await.0, StatusCode::FORBIDDEN);
    assert_eq!(
        audited(&app, &format!("disabled user {id} \"troll\"")).await,
        1
    );

    let page = press(id, "enable", &csrf)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!(r#"action="/admin/users/{id}/disable""#)),
        "{page}"
    );
    assert_eq!(orders_status(&app, &token).await, StatusCode::UNAUTHORIZED);
    let fresh = sign_in(&app, "troll").await;
    assert_eq!(orders_status(&app, &fresh).await, StatusCode::OK);

    let unknown = press(id + 1_000, "disable", &csrf).await.unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert!(unknown.text().await.unwrap().contains("no such user"));
    app.stop().await;
}
