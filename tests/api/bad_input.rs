//! Bad input gets a clear 4xx JSON error and changes nothing.

use crate::helpers::{ADMIN_TOKEN, TestApp, code, status_and_json};
use reqwest::StatusCode;
use seckill::domain::{UserId, Username};

async fn raw_buy(
    app: &TestApp,
    token: Option<&str>,
    content_type: &str,
    body: String,
) -> (StatusCode, serde_json::Value) {
    let mut request = app
        .client
        .post(app.url("/api/v1/orders"))
        .header("content-type", content_type)
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    status_and_json(request.send().await.unwrap()).await
}

#[tokio::test]
async fn malformed_wrong_or_out_of_range_buys_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let product = app.live_product(10, 1).await;
    let token = app.users(1).await.remove(0);
    let json = "application/json";
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            json,
            "{\"product_id\": 1, \"quantity\":".into(),
            400,
            "malformed_json",
        ),
        (json, "not json at all".into(), 400, "malformed_json"),
        (json, String::new(), 400, "malformed_json"),
        (
            json,
            format!("{{\"product_id\": {product}, \"quantity\": 1}} and more"),
            400,
            "malformed_json",
        ),
        (
            json,
            format!("{{\"product_id\": \"{product}\", \"quantity\": 1}}"),
            422,
            "invalid_body",
        ),
        (
            json,
            format!("{{\"product_id\": {product}, \"quantity\": 1.5}}"),
            422,
            "invalid_body",
        ),
        (
            json,
            format!("{{\"product_id\": {product}}}"),
            422,
            "invalid_body",
        ),
        (json, "[]".into(), 422, "invalid_body"),
        (
            json,
            format!("{{\"product_id\": {product}, \"quantity\": 0}}"),
            422,
            "invalid_quantity",
        ),
        (
            json,
            format!("{{\"product_id\": {product}, \"quantity\": -1}}"),
            422,
            "invalid_quantity",
        ),
        (
            json,
            format!("{{\"product_id\": {product}, \"quantity\": 1000000000}}"),
            422,
            "invalid_quantity",
        ),
        (
            json,
            format!("{{\"product_id\": {product}, \"quantity\": 99999999999999999999999}}"),
            422,
            "invalid_body",
        ),
        (
            json,
            "{\"product_id\": 987654, \"quantity\": 1}".into(),
            404,
            "unknown_product",
        ),
        (
            json,
            "{\"product_id\": -1, \"quantity\": 1}".into(),
            404,
            "unknown_product",
        ),
        (
            "text/plain",
            format!("{{\"product_id\": {product}, \"quantity\": 1}}"),
            415,
            "unsupported_media_type",
        ),
        (
            json,
            format!(
                "{{\"product_id\": {product}, \"quantity\": 1, \"pad\": \"{}\"}}",
                "x".repeat(64 * 1024)
            ),
            413,
            "body_too_large",
        ),
    ];
    for (content_type, body, status, expected) in cases {
        let (got, answer) = raw_buy(&app, Some(&token), content_type, body.clone()).await;
        assert_eq!(got.as_u16(), status, "{body:.80} → {answer}");
        assert_eq!(code(&answer), expected, "{body:.80}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    assert_eq!(app.stored(product).await, (0, 0, 10));
    assert_eq!(app.product(product).await["remaining"], 10);
}

/// The buy path parses plain `application/json` bodies itself; other JSON content types and
/// the error messages still follow axum's `Json`, which names the field at fault.
#[tokio::test]
async fn json_bodies_are_read_whatever_their_json_content_type_and_errors_name_the_field() {
    let app = TestApp::spawn().await;
    let product = app.live_product(10, 5).await;
    let token = app.users(1).await.remove(0);
    let body = format!("{{\"product_id\": {product}, \"quantity\": 1}}");
    for content_type in ["application/json", "application/json; charset=utf-8"] {
        let (status, answer) = raw_buy(&app, Some(&token), content_type, body.clone()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{content_type}: {answer}");
    }
    let wrong_type = format!("{{\"product_id\": {product}, \"quantity\": \"one\"}}");
    let (status, answer) = raw_buy(&app, Some(&token), "application/json", wrong_type).await;
    assert_eq!((status.as_u16(), code(&answer)), (422, "invalid_body"));
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("quantity"), "{message}");
    assert_eq!(app.stored(product).await, (2, 2, 8));
}

#[tokio::test]
async fn buys_without_a_valid_session_are_unauthorized_and_change_nothing() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |c| c.session_ttl_secs = 60).await;
    let product = app.live_product(10, 1).await;
    let valid = app.users(1).await.remove(0);
    let now = app.state.sale.now();
    let expired = app
        .state
        .auth
        .tokens
        .issue(UserId(1), &Username::parse("user1").unwrap(), now - 61_000)
        .0;
    let (payload, signature) = valid.split_once('.').unwrap();
    let mut flipped = signature.to_owned().into_bytes();
    flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
    let forged_signature = format!("{payload}.{}", String::from_utf8(flipped).unwrap());
    let body = format!("{{\"product_id\": {product}, \"quantity\": 1}}");
    for token in [
        None,
        Some(""),
        Some("garbage"),
        Some(expired.as_str()),
        Some(forged_signature.as_str()),
        Some(ADMIN_TOKEN),
    ] {
        let (status, answer) = raw_buy(&app, token, "application/json", body.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(code(&answer), "unauthorized");
    }
    assert_eq!(app.stored(product).await, (0, 0, 10));
}

#[tokio::test]
async fn nobody_sees_or_touches_another_buyers_order() {
    let app = TestApp::spawn().await;
    let product = app.live_product(10, 1).await;
    let tokens = app.users(2).await;
    let (_, order) = app.buy(&tokens[0], product, 1).await;
    let id = order["order_id"].as_str().unwrap();
    app.settle().await;
    let response = app
        .client
        .get(app.url(&format!("/api/v1/orders/{id}")))
        .bearer_auth(&tokens[1])
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(response).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "order_not_found")
    );
    for action in ["pay", "cancel"] {
        let (status, _) = app.order_action(&tokens[1], id, action).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, _) = app.order_action(&tokens[1], "not-a-number", "pay").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(app.stored(product).await, (1, 1, 9));
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json_errors() {
    let app = TestApp::spawn().await;
    let (status, body) = app.get_json("/api/v1/nope").await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
    let (status, body) = status_and_json(
        app.client
            .delete(app.url("/api/v1/orders"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
}
