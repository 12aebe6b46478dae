//! The pages render, are cacheable, and every asset comes from the binary.

use crate::backend::TestDatabase;
use crate::helpers::{TestApp, test_config};
use reqwest::StatusCode;
use seckill::clock::{Clock, SystemClock};
use std::sync::Arc;

#[tokio::test]
async fn the_sale_page_shows_the_live_products_and_answers_304_when_unchanged() {
    let app = TestApp::spawn().await;
    app.live_product(5, 1).await;
    let response = app
        .client
        .get(app.url("/static/app.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("max-age")
    );
    let etag = response.headers()["etag"].clone();
    let again = app
        .client
        .get(app.url("/static/app.css"))
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);

    let page = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.headers().contains_key("etag"));
    let html = page.text().await.unwrap();
    assert!(
        html.contains("/static/app.js"),
        "the page loads its script from the binary"
    );
    for asset in [
        "/static/app.js",
        "/static/img/phone.svg",
        "/static/img/gift.svg",
    ] {
        let response = app.client.get(app.url(asset)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{asset}");
    }
    let missing = app
        .client
        .get(app.url("/static/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_demo_sale_renders_with_its_products_and_the_orders_page_needs_a_session() {
    let db = Arc::new(TestDatabase::fresh().await);
    let store = seckill::app::open_store(&test_config(&db)).await.unwrap();
    seckill::demo::seed(&store, SystemClock.now_ms())
        .await
        .unwrap();
    let app = TestApp::spawn_on(db, Arc::new(SystemClock), |_| {}).await;
    let html = app.page("/").await;
    assert!(html.contains("Phone X 128G"), "the live event is selected");
    assert!(html.contains("data-product-id"));

    let redirect = crate::helpers::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(app.url("/orders"))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), StatusCode::SEE_OTHER);
    assert_eq!(redirect.headers()["location"], "/login?next=%2Forders");

    let token = app.users(1).await.remove(0);
    let orders = app
        .client
        .get(app.url("/orders"))
        .header("cookie", format!("seckill_session={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(orders.status(), StatusCode::OK);
    let login = app.page("/login?next=//evil.example").await;
    assert!(
        !login.contains("evil.example"),
        "no open redirect after sign-in"
    );
}

#[tokio::test]
async fn the_sale_page_tells_a_buyer_who_reached_the_limit_instead_of_offering_the_button() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let (_, event) = app
        .admin_post(
            "/api/v1/admin/events",
            serde_json::json!({
                "starts_at": crate::helpers::rfc3339(now - 1000),
                "ends_at": crate::helpers::rfc3339(now + 3_600_000),
            }),
        )
        .await;
    let (_, product) = app
        .admin_post(
            "/api/v1/admin/products",
            serde_json::json!({ "event_id": event["id"], "name": "Kettle",
                "original_price_cents": 100, "sale_price_cents": 50, "stock": 5 }),
        )
        .await;
    let token = app.users(1).await.remove(0);
    let cookie = format!("seckill_session={token}");
    let page = |cookie: String| {
        let request = app.client.get(app.url("/")).header("cookie", cookie);
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    assert!(!page(cookie.clone()).await.contains("data-held"));
    app.buy(&token, product["id"].as_i64().unwrap(), 1).await;
    app.settle().await;
    let html = page(cookie).await;
    assert!(html.contains("data-held") && html.contains("已购买"));
}

/// Every answer, of a page, the API, an asset or no route at all, tells browsers not to guess
/// content types and where a page may load from.
#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let app = TestApp::spawn().await;
    for (method, path, status) in [
        ("GET", "/", StatusCode::OK),
        ("GET", "/healthz", StatusCode::OK),
        ("GET", "/static/app.css", StatusCode::OK),
        ("POST", "/api/v1/orders", StatusCode::UNAUTHORIZED),
        ("GET", "/no/such/route", StatusCode::NOT_FOUND),
        ("DELETE", "/healthz", StatusCode::METHOD_NOT_ALLOWED),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = app
            .client
            .request(method.clone(), app.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
        let headers = response.headers();
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert!(
            headers["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'"),
            "{method} {path}"
        );
    }
}
