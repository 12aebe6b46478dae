//! The operator's API: only with the admin token, and only valid changes.

use crate::support::{TestApp, code, rfc3339, status_and_json};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn the_admin_api_needs_the_admin_token() {
    let app = TestApp::spawn().await;
    let user = app.users(1).await.remove(0);
    let body = json!({ "starts_at": rfc3339(0), "ends_at": rfc3339(1000) });
    for token in [None, Some("wrong-token"), Some(user.as_str())] {
        let mut request = app.client.post(app.url("/api/v1/admin/events")).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let (status, answer) = status_and_json(request.send().await.unwrap()).await;
        assert_eq!(
            (status, code(&answer)),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
    }
    let (status, events) = app.get_json("/api/v1/events").await;
    assert_eq!((status, events), (StatusCode::OK, json!([])));
}

#[tokio::test]
async fn an_event_groups_products_that_sell_in_its_window() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let (status, event) = app
        .admin_post(
            "/api/v1/admin/events",
            json!({ "title": "10:00", "starts_at": rfc3339(now - 1000), "ends_at": rfc3339(now + 7_200_000) }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    assert_eq!(event["status"], "live");
    let (_, events) = app.get_json("/api/v1/events").await;
    assert_eq!(events, json!([event]));
    let (status, product) = app
        .admin_post(
            "/api/v1/admin/products",
            json!({ "event_id": event["id"], "name": "Tea", "original_price_cents": 3990,
                    "sale_price_cents": 990, "stock": 7, "image_url": "/static/img/tea.svg" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{product}");
    assert_eq!(product["starts_at"], event["starts_at"]);
    app.admin_post(
        "/api/v1/admin/products",
        json!({ "event_id": event["id"], "name": "Coffee", "original_price_cents": 3990,
                "sale_price_cents": 990, "stock": 3 }),
    )
    .await;
    app.live_product(5, 1).await; // in no event
    let url = app.url(&format!("/api/v1/events/{}", event["id"]));
    let (_, shown) = status_and_json(app.client.get(url).send().await.unwrap()).await;
    let names: Vec<_> = shown["products"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Tea", "Coffee"], "{shown}");
    assert_eq!(shown["products"][0]["remaining"], 7);
    let token = app.users(1).await.remove(0);
    assert_eq!(
        app.buy(&token, product["id"].as_i64().unwrap(), 1).await.0,
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn invalid_products_are_refused_with_the_reason() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let base = json!({
        "name": "Phone", "original_price_cents": 1000, "sale_price_cents": 500, "stock": 5,
        "starts_at": rfc3339(now), "ends_at": rfc3339(now + 1000),
    });
    let with = |key: &str, value: serde_json::Value| {
        let mut body = base.clone();
        body[key] = value;
        body
    };
    for (body, expected) in [
        (with("stock", json!(-1)), "invalid_stock"),
        (with("sale_price_cents", json!(-5)), "invalid_price"),
        (with("sale_price_cents", json!(2000)), "invalid_price"),
        (
            with("ends_at", json!(rfc3339(now - 1000))),
            "invalid_window",
        ),
        (with("name", json!("   ")), "invalid_text"),
        (with("per_user_limit", json!(0)), "invalid_limit"),
        (
            with("image_url", json!("javascript:alert(1)")),
            "invalid_image_url",
        ),
        (with("event_id", json!(424242)), "unknown_event"),
        (with("surprise", json!(1)), "invalid_body"),
    ] {
        let (status, answer) = app.admin_post("/api/v1/admin/products", body).await;
        assert_eq!(
            (status, code(&answer)),
            (StatusCode::UNPROCESSABLE_ENTITY, expected)
        );
    }
    let (_, products) = app.get_json("/api/v1/products/1").await;
    assert_eq!(code(&products), "unknown_product", "nothing was created");
}

#[tokio::test]
async fn a_patched_limit_and_window_apply_to_a_live_sale() {
    let app = TestApp::spawn().await;
    let product = app.live_product(10, 1).await;
    let token = app.users(1).await.remove(0);
    assert_eq!(app.buy(&token, product, 1).await.0, StatusCode::ACCEPTED);
    let (status, body) = app
        .admin_patch(
            &format!("/api/v1/admin/products/{product}"),
            json!({ "per_user_limit": 2, "name": "Renamed" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["name"].as_str(), body["remaining"].as_i64()),
        (Some("Renamed"), Some(9))
    );
    // Shoppers see the change at once (their view of a live product comes from memory).
    let shown = app.product(product).await;
    assert_eq!(
        (&shown["name"], &shown["per_user_limit"]),
        (&"Renamed".into(), &2.into())
    );
    assert_eq!(app.buy(&token, product, 1).await.0, StatusCode::ACCEPTED);

    let now = app.state.sale.now();
    let (status, _) = app
        .admin_patch(
            &format!("/api/v1/admin/products/{product}"),
            json!({ "ends_at": rfc3339(now - 1) }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = app.buy(&app.users(1).await[0], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "ended"));
}

#[tokio::test]
async fn a_patch_that_would_price_the_sale_above_the_original_is_refused() {
    let app = TestApp::spawn().await;
    let product = app.live_product(10, 1).await;
    let (status, body) = app
        .admin_patch(
            &format!("/api/v1/admin/products/{product}"),
            json!({ "original_price_cents": 100 }),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_price")
    );
    assert_eq!(app.product(product).await["original_price_cents"], 10_000);
}

#[tokio::test]
async fn hidden_characters_absurd_dates_and_products_outside_their_event_are_refused() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let (start, end) = (now + 3_600_000, now + 7_200_000);
    // Text that shows one thing and reads another: a right-to-left override, an isolate, a
    // zero-width space, a control character.
    for title in [
        "Sale\u{202E}gnp.exe",
        "A\u{2066}B",
        "Free\u{200B}bies",
        "Bell\u{7}",
    ] {
        let (status, body) = app
            .admin_post(
                "/api/v1/admin/events",
                json!({ "title": title, "starts_at": rfc3339(start), "ends_at": rfc3339(end) }),
            )
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_text"),
            "{title:?}"
        );
    }
    for (starts_at, ends_at) in [
        ("1970-01-01T00:00:00Z", "1970-01-02T00:00:00Z"),
        ("2026-01-01T00:00:00Z", "9999-12-31T00:00:00Z"),
    ] {
        let (status, body) = app
            .admin_post(
                "/api/v1/admin/events",
                json!({ "title": "Old", "starts_at": starts_at, "ends_at": ends_at }),
            )
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_window"),
            "{starts_at} {ends_at}"
        );
    }
    let (_, events) = app.get_json("/api/v1/events").await;
    assert_eq!(events.as_array().map(Vec::len), Some(0), "{events}");

    let (status, event) = app
        .admin_post(
            "/api/v1/admin/events",
            json!({ "title": "Noon", "starts_at": rfc3339(start), "ends_at": rfc3339(end) }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    let product = |name: &str, from: i64, to: i64| {
        json!({ "event_id": event["id"], "name": name, "original_price_cents": 100,
                "sale_price_cents": 50, "stock": 1,
                "starts_at": rfc3339(from), "ends_at": rfc3339(to) })
    };
    for (from, to) in [(start - 60_000, end), (start, end + 60_000)] {
        let (status, body) = app
            .admin_post("/api/v1/admin/products", product("Outside", from, to))
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNPROCESSABLE_ENTITY, "outside_event"),
            "{body}"
        );
    }
    let (status, inside) = app
        .admin_post(
            "/api/v1/admin/products",
            product("Inside", start + 60_000, end),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{inside}");
    let (status, body) = app
        .admin_patch(
            &format!("/api/v1/admin/products/{}", inside["id"]),
            json!({ "starts_at": rfc3339(start), "ends_at": rfc3339(end + 1_000) }),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "outside_event")
    );
}
