//! The pages render, are cacheable, and every asset comes from the binary.

use crate::support::TestDatabase;
use crate::support::{TestApp, code, rfc3339, status_and_json, test_config};
use reqwest::StatusCode;
use seckill::clock::{Clock, ManualClock, SystemClock};
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
    let app = TestApp::spawn_on(db, Arc::new(SystemClock), |c| c.demo = true).await;
    let html = app.page("/").await;
    assert!(html.contains("Phone X 128G"), "the live event is selected");
    assert!(app.page("/login").await.contains("alice-password"));
    assert!(html.contains("data-product-id"));

    let redirect = crate::support::client_builder()
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
    for next in [
        "//evil.example",
        "/%09/evil.example",
        "/%0a/evil.example",
        "/%5Cevil.example",
        "%2F%2Fevil.example",
        "https://evil.example",
    ] {
        let login = app.page(&format!("/login?next={next}")).await;
        assert!(
            !login.contains("evil.example") && login.contains(r#"data-next="/""#),
            "no open redirect after sign-in through {next}"
        );
    }
}

#[tokio::test]
async fn the_sign_in_page_shows_the_demo_logins_only_for_a_demo_sale() {
    let app = TestApp::spawn().await;
    let login = app.page("/login").await;
    assert!(login.contains("data-auth=\"login\""));
    assert!(!login.contains("alice-password") && !login.contains("data-demo-fill"));
}

#[tokio::test]
async fn the_sale_page_tells_a_buyer_who_reached_the_limit_instead_of_offering_the_button() {
    let app = TestApp::spawn().await;
    let (_, product) = live_event(&app, 5).await;
    let token = app.users(1).await.remove(0);
    let cookie = format!("seckill_session={token}");
    let page = |cookie: String| {
        let request = app.client.get(app.url("/")).header("cookie", cookie);
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    assert!(!page(cookie.clone()).await.contains("data-held"));
    app.buy(&token, product, 1).await;
    app.settle().await;
    let html = page(cookie).await;
    assert!(html.contains("data-held") && html.contains(">Bought<"));
}

#[tokio::test]
async fn the_sale_page_shows_a_paused_product_as_paused_in_either_language() {
    let app = TestApp::spawn().await;
    let (_, product) = live_event(&app, 5).await;
    let pause = |action: &str| {
        let request = app
            .client
            .post(app.url(&format!("/api/v1/admin/products/{product}/{action}")))
            .bearer_auth(crate::support::ADMIN_TOKEN);
        async move { assert_eq!(request.send().await.unwrap().status(), StatusCode::OK) }
    };
    pause("pause").await;
    for (language, label) in [("en", "Paused"), ("zh-CN", "暂停抢购")] {
        let html = get(&app, "/", Some(language), None)
            .await
            .text()
            .await
            .unwrap();
        assert!(
            html.contains("is-paused") && html.contains("data-paused"),
            "{html}"
        );
        assert!(
            html.contains(&format!("data-badge>{label}<")),
            "{language}: the badge"
        );
        assert!(
            html.contains(&format!("data-buy disabled>{label}<")),
            "{language}: the button"
        );
    }
    pause("resume").await;
    let html = get(&app, "/", Some("en"), None).await.text().await.unwrap();
    assert!(
        !html.contains("data-paused") && html.contains("data-buy>Buy now<"),
        "{html}"
    );
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

/// A sale event that started a second ago with one product "Kettle" of `stock` units:
/// `(event id, product id)`.
async fn live_event(app: &TestApp, stock: i64) -> (i64, i64) {
    let now = app.state.sale.now();
    let (status, event) = app
        .admin_post(
            "/api/v1/admin/events",
            serde_json::json!({
                "starts_at": rfc3339(now - 1000),
                "ends_at": rfc3339(now + 3_600_000),
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    let (status, product) = app
        .admin_post(
            "/api/v1/admin/products",
            serde_json::json!({ "event_id": event["id"], "name": "Kettle",
                "original_price_cents": 100, "sale_price_cents": 50, "stock": stock }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{product}");
    (
        event["id"].as_i64().unwrap(),
        product["id"].as_i64().unwrap(),
    )
}

/// GETs `path` with optional `Accept-Language` and `Cookie` headers.
async fn get(
    app: &TestApp,
    path: &str,
    accept_language: Option<&str>,
    cookie: Option<&str>,
) -> reqwest::Response {
    let mut request = app.client.get(app.url(path));
    if let Some(value) = accept_language {
        request = request.header("accept-language", value);
    }
    if let Some(value) = cookie {
        request = request.header("cookie", value);
    }
    request.send().await.unwrap()
}

fn has_cjk(text: &str) -> bool {
    text.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
}

/// The page's labels, without the product names and the switch to the other language.
fn labels(html: &str) -> String {
    html.replace("Kettle", "")
        .replace(">中文<", "><")
        .replace(">English<", "><")
}

#[tokio::test]
async fn each_page_is_in_one_language_chosen_by_accept_language_or_the_cookie() {
    let app = TestApp::spawn().await;
    live_event(&app, 5).await;
    let token = app.users(1).await.remove(0);
    let session = format!("seckill_session={token}");
    for path in ["/", "/login", "/orders"] {
        for (accept, lang_cookie, chinese) in [
            (Some("zh-CN,zh;q=0.9,en;q=0.8"), None, true),
            (Some("en-GB,en;q=0.9"), None, false),
            (None, None, false),
            (Some("fr, zh-TW;q=0.5"), None, true),
            (Some("zh-CN"), Some("seckill_lang=en"), false),
            (Some("en"), Some("seckill_lang=zh"), true),
        ] {
            let cookie = match lang_cookie {
                Some(lang) => format!("{session}; {lang}"),
                None => session.clone(),
            };
            let response = get(&app, path, accept, Some(&cookie)).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            let html = response.text().await.unwrap();
            let what = format!("{path} {accept:?} {lang_cookie:?}");
            let labels = labels(&html);
            if chinese {
                assert!(html.contains(r#"<html lang="zh-CN">"#), "{what}");
                assert!(html.contains(r#"href="/lang/en""#), "{what}: the switch");
                for english in ["Sign in", "Log out", "My orders", "Flash sale", "Sale<"] {
                    assert!(!labels.contains(english), "{what}: {english}");
                }
            } else {
                assert!(html.contains(r#"<html lang="en">"#), "{what}");
                assert!(html.contains(r#"href="/lang/zh""#), "{what}: the switch");
                assert!(!has_cjk(&labels), "{what}: a Chinese label");
            }
        }
    }
    let sale = get(&app, "/", Some("zh"), None).await.text().await.unwrap();
    assert!(sale.contains("限时秒杀") && sale.contains("立即抢购"));
    assert!(
        sale.contains("data-i18n=") && sale.contains("即将售罄"),
        "the script's strings are in the page"
    );
}

#[tokio::test]
async fn the_language_switch_keeps_the_choice_in_a_cookie_and_goes_back() {
    let app = TestApp::spawn().await;
    let client = crate::support::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client
        .get(app.url("/lang/zh"))
        .header("referer", app.url("/login?next=%2Forders"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()["location"], "/login?next=%2Forders");
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("seckill_lang=zh;"), "{cookie}");
    assert!(cookie.contains("SameSite=Lax") && cookie.contains("Path=/"));

    let elsewhere = client
        .get(app.url("/lang/en"))
        .header("referer", "https://evil.example//evil.example/x")
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.headers()["location"], "/", "no open redirect");
    let unknown = client.get(app.url("/lang/fr")).send().await.unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
}

/// A refresh storm: the page holds no clock reading, so the same view a second later is a 304;
/// what the page depends on is in `Vary`.
#[tokio::test]
async fn a_repeated_sale_page_view_that_changes_nothing_is_a_304() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let app = TestApp::spawn_with(clock.clone(), |_| {}).await;
    live_event(&app, 5).await;
    let first = get(&app, "/", Some("en"), None).await;
    assert_eq!(first.status(), StatusCode::OK);
    let vary = first.headers()["vary"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        vary.contains("cookie") && vary.contains("accept-language"),
        "{vary}"
    );
    let etag = first.headers()["etag"].clone();
    clock.advance(1500);
    let again = app
        .client
        .get(app.url("/"))
        .header("accept-language", "en")
        .header("if-none-match", etag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    let chinese = app
        .client
        .get(app.url("/"))
        .header("accept-language", "zh")
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(
        chinese.status(),
        StatusCode::OK,
        "another language, another page"
    );

    let (status, time) = app.get_json("/time").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        time["now_ms"].as_i64(),
        Some(clock.now_ms()),
        "the sale's clock"
    );
}

/// Unknown ids are answered from the in-memory catalog: with the tables out of reach, a query
/// would fail with a 500, and the answer is a 404.
#[tokio::test]
async fn unknown_product_and_event_ids_are_404_without_the_database() {
    let app = TestApp::spawn().await;
    let (event, product) = live_event(&app, 5).await;
    let pool = app.pool().await;
    for sql in [
        "ALTER TABLE products RENAME TO products_hidden",
        "ALTER TABLE sale_events RENAME TO sale_events_hidden",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    pool.close().await;
    for (path, expected) in [
        ("/api/v1/products/987654321".to_owned(), "unknown_product"),
        ("/api/v1/events/987654321".to_owned(), "unknown_event"),
        ("/?event=987654321".to_owned(), "unknown_event"),
        ("/?event=x".to_owned(), "unknown_event"),
    ] {
        let response = app.client.get(app.url(&path)).send().await.unwrap();
        let (status, body) = status_and_json(response).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(code(&body), expected, "{path}");
    }
    for path in [
        format!("/api/v1/products/{product}"),
        format!("/api/v1/events/{event}"),
    ] {
        let (status, body) = app.get_json(&path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    let page = get(&app, &format!("/?event={event}"), None, None).await;
    assert_eq!(page.status(), StatusCode::OK);
}
