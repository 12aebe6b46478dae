//! Product images: uploaded through the admin API and the console, kept in the database,
//! served by the binary at `/images/{id}` with their type, forever cacheable, and never as
//! anything that could run.

use crate::support::TestDatabase;
use crate::support::operator::{Operator, operator};
use crate::support::{ADMIN_TOKEN, TestApp, TextOfAnswer, code, rfc3339, status_and_json};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use reqwest::multipart::{Form, Part};
use seckill::clock::SystemClock;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A file of `len` bytes (at least the magic number's) that starts as `format`'s files do.
fn file(format: &str, len: usize) -> Vec<u8> {
    let magic: &[u8] = match format {
        "image/png" => b"\x89PNG\r\n\x1a\n",
        "image/jpeg" => b"\xff\xd8\xff\xe0",
        "image/gif" => b"GIF89a",
        "image/webp" => b"RIFF\x24\0\0\0WEBP",
        other => panic!("no sample of {other}"),
    };
    let mut bytes = magic.to_vec();
    bytes.extend((0..len.saturating_sub(magic.len())).map(|i| (i % 251) as u8));
    bytes
}

/// The id the server must give these bytes: their SHA-256 in lowercase hex.
fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An upload through the admin API with `token`, the body declared as `content_type`.
async fn upload_as(
    app: &TestApp,
    token: Option<&str>,
    content_type: &str,
    bytes: Vec<u8>,
) -> (StatusCode, Value) {
    let mut request = app
        .client
        .post(app.url("/api/v1/admin/images"))
        .header(CONTENT_TYPE, content_type)
        .body(bytes);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    status_and_json(request.send().await.unwrap()).await
}

async fn upload(app: &TestApp, content_type: &str, bytes: Vec<u8>) -> (StatusCode, Value) {
    upload_as(app, Some(ADMIN_TOKEN), content_type, bytes).await
}

/// A GET with these request headers: status, headers and body.
async fn fetch(
    app: &TestApp,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut request = app.client.get(app.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    (status, headers, response.bytes().await.unwrap().to_vec())
}

/// Images kept in the database, read straight from it.
async fn stored_images(app: &TestApp) -> i64 {
    let pool = app.pool().await;
    let count = sqlx::query_scalar("SELECT COUNT(*) FROM images")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    count
}

/// The audit log's actions, newest first.
async fn audited(app: &TestApp) -> Vec<String> {
    let request = app
        .client
        .get(app.url("/api/v1/admin/audit"))
        .bearer_auth(ADMIN_TOKEN);
    let (status, log) = status_and_json(request.send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    log.as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn each_accepted_type_comes_back_as_uploaded_and_the_same_bytes_are_one_image() {
    let app = TestApp::spawn().await;
    for format in ["image/png", "image/jpeg", "image/gif", "image/webp"] {
        let bytes = file(format, 300);
        let (status, body) = upload(&app, format, bytes.clone()).await;
        assert_eq!(status, StatusCode::CREATED, "{format}: {body}");
        let id = sha256(&bytes);
        assert_eq!(body["id"], id.as_str());
        assert_eq!(body["url"], format!("/images/{id}"));
        assert_eq!(body["content_type"], format);
        assert_eq!(body["bytes"], 300);

        let (status, headers, served) = fetch(&app, &format!("/images/{id}"), &[]).await;
        assert_eq!(status, StatusCode::OK, "{format}");
        assert_eq!(served, bytes, "{format}");
        assert_eq!(headers["content-type"], format);
        assert_eq!(
            headers["cache-control"],
            "public, max-age=31536000, immutable"
        );
        assert_eq!(headers["etag"], format!("\"{id}\"").as_str());
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.starts_with("default-src 'none'"), "{policy}");
    }
    assert_eq!(stored_images(&app).await, 4);

    let png = file("image/png", 300);
    let (status, again) = upload(&app, "image/png; charset=binary", png.clone()).await;
    assert_eq!(status, StatusCode::OK, "the same bytes again: {again}");
    assert_eq!(again["id"], sha256(&png).as_str());
    assert_eq!(stored_images(&app).await, 4, "one row per image");
    let log = audited(&app).await;
    let uploads = log
        .iter()
        .filter(|a| a.starts_with("uploaded image "))
        .count();
    assert_eq!(
        uploads, 4,
        "an upload that changes nothing is not a change: {log:?}"
    );
    assert!(log.contains(&format!("uploaded image {}", sha256(&png))));
}

#[tokio::test]
async fn uploads_that_are_not_an_accepted_image_are_refused_and_store_nothing() {
    let app = TestApp::spawn_with(Arc::new(SystemClock), |c| c.max_image_bytes = 1024).await;
    let png = file("image/png", 200);
    let svg = b"<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>".to_vec();
    let html = b"<!doctype html><script>alert(document.cookie)</script>".to_vec();
    let refusals = [
        (
            "a PNG declared as JPEG",
            "image/jpeg",
            png.clone(),
            415,
            "unsupported_image",
        ),
        (
            "an SVG",
            "image/svg+xml",
            svg.clone(),
            415,
            "unsupported_image",
        ),
        (
            "an SVG declared as PNG",
            "image/png",
            svg,
            415,
            "unsupported_image",
        ),
        (
            "HTML renamed .png",
            "image/png",
            html.clone(),
            415,
            "unsupported_image",
        ),
        ("HTML as HTML", "text/html", html, 415, "unsupported_image"),
        ("an empty body", "image/png", Vec::new(), 400, "empty_image"),
        (
            "one byte over",
            "image/png",
            file("image/png", 1025),
            413,
            "body_too_large",
        ),
    ];
    for (what, content_type, bytes, status, expected) in refusals {
        let (got, body) = upload(&app, content_type, bytes).await;
        assert_eq!(
            (got.as_u16(), code(&body)),
            (status, expected),
            "{what}: {body}"
        );
    }
    let (status, body) = upload_as(&app, None, "image/png", png.clone()).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let (status, body) = upload_as(&app, Some("not-the-admin-token"), "image/png", png).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(
        stored_images(&app).await,
        0,
        "a refused upload stores nothing"
    );
    assert!(audited(&app).await.is_empty());

    let at_the_limit = file("image/png", 1024);
    let (status, body) = upload(&app, "image/png", at_the_limit.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "exactly the limit: {body}");
    assert_eq!(stored_images(&app).await, 1);
}

#[tokio::test]
async fn the_upload_route_alone_takes_bodies_past_the_app_wide_limit() {
    let app = TestApp::spawn().await;
    // The default limits: 16 KiB for every body, 2 MiB for an image.
    let largest = file("image/jpeg", 2 * 1024 * 1024);
    let (status, body) = upload(&app, "image/jpeg", largest.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let url = body["url"].as_str().unwrap().to_owned();
    let (status, _, served) = fetch(&app, &url, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(served == largest, "the 2 MiB image comes back whole");
    let (status, body) = upload(&app, "image/jpeg", file("image/jpeg", 2 * 1024 * 1024 + 1)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );

    // Every other route keeps the app-wide limit.
    let name = "x".repeat(20 * 1024);
    let (status, body) = app
        .admin_post("/api/v1/admin/events", json!({ "title": name }))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );
}

#[tokio::test]
async fn a_held_image_is_not_sent_again_and_unknown_or_malformed_ids_are_404() {
    let app = TestApp::spawn().await;
    let gif = file("image/gif", 100);
    let (_, body) = upload(&app, "image/gif", gif).await;
    let url = body["url"].as_str().unwrap().to_owned();
    let (_, headers, _) = fetch(&app, &url, &[]).await;
    let etag = headers["etag"].to_str().unwrap().to_owned();
    for held in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"other\", {etag}"),
    ] {
        let (status, headers, body) = fetch(&app, &url, &[("if-none-match", &held)]).await;
        assert_eq!(status, StatusCode::NOT_MODIFIED, "{held}");
        assert!(body.is_empty());
        assert_eq!(headers["etag"], etag.as_str());
        assert_eq!(
            headers["cache-control"],
            "public, max-age=31536000, immutable"
        );
    }
    let (status, _, _) = fetch(&app, &url, &[("if-none-match", "\"other\"")]).await;
    assert_eq!(status, StatusCode::OK);

    let unknown = sha256(b"never uploaded");
    let malformed = [
        unknown[..63].to_owned(),
        format!("{unknown}0"),
        unknown.to_uppercase(),
        "not-an-id".to_owned(),
        "..%2F..%2Fetc%2Fpasswd".to_owned(),
    ];
    for id in std::iter::once(unknown.clone()).chain(malformed) {
        let response = app
            .client
            .get(app.url(&format!("/images/{id}")))
            .send()
            .await;
        let (status, body) = status_and_json(response.unwrap()).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "unknown_image"),
            "{id}"
        );
    }
}

#[tokio::test]
async fn another_server_serves_an_upload_and_made_up_ids_are_answered_from_memory() {
    let db = Arc::new(TestDatabase::fresh().await);
    let first = TestApp::spawn_on(db.clone(), Arc::new(SystemClock), |_| {}).await;
    let second = TestApp::spawn_on(db.clone(), Arc::new(SystemClock), |_| {}).await;
    let webp = file("image/webp", 500);
    let (status, body) = upload(&first, "image/webp", webp.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let url = body["url"].as_str().unwrap().to_owned();
    // A crowd's first views on the second server, all at once.
    let views = (0..32).map(|_| fetch(&second, &url, &[]));
    for (status, headers, served) in futures_util::future::join_all(views).await {
        assert_eq!((status, &served), (StatusCode::OK, &webp));
        assert_eq!(headers["content-type"], "image/webp");
    }

    // A made-up id has the second server read the list of ids (it was read over a second
    // ago, or never)...
    let made_up = file("image/png", 64);
    let id = sha256(&made_up);
    let asked = Instant::now();
    let (status, _, _) = fetch(&second, &format!("/images/{}", sha256(b"made up")), &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // ...so an image that appears in the database right after is not seen at once: the
    // made-up ids that follow are answered from memory, not looked up one by one.
    let pool = first.pool().await;
    sqlx::query(db.sql(
        "INSERT INTO images (id, content_type, content, size_bytes, created_at) \
         VALUES (?, ?, ?, ?, ?)",
    ))
    .bind(id.clone())
    .bind("image/png")
    .bind(made_up.clone())
    .bind(made_up.len() as i64)
    .bind(0_i64)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let (status, _, _) = fetch(&second, &format!("/images/{id}"), &[]).await;
    if asked.elapsed() < Duration::from_millis(900) {
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "looked up despite a fresh list"
        );
    }
    // A second later the list is read again, and the image is served.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _, served) = fetch(&second, &format!("/images/{id}"), &[]).await;
        if status == StatusCode::OK {
            assert_eq!(served, made_up);
            break;
        }
        assert!(Instant::now() < deadline, "the new image was never found");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn the_console_sets_a_products_image_and_the_sale_page_shows_it() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let window = json!({ "starts_at": rfc3339(now - 60_000), "ends_at": rfc3339(now + 3_600_000) });
    let (status, event) = app.admin_post("/api/v1/admin/events", window).await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    let new_product = json!({
        "event_id": event["id"],
        "name": "Console kettle",
        "original_price_cents": 19_900,
        "sale_price_cents": 9_900,
        "stock": 5,
    });
    let (status, created) = app.admin_post("/api/v1/admin/products", new_product).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let product = created["id"].as_i64().unwrap();
    let Operator { browser, csrf, .. } = operator(&app).await;
    let page_url = app.url(&format!("/admin/products/{product}"));
    let page = browser.get(&page_url).text_of_answer().await;
    let form_action = format!("action=\"/admin/products/{product}/image\"");
    assert!(page.contains(&form_action), "{page}");
    assert!(page.contains("enctype=\"multipart/form-data\""));
    assert!(
        page.contains("src=\"/static/img/gift.svg\""),
        "the current image is shown"
    );

    let send = |csrf: String, content_type: &str, bytes: Vec<u8>| {
        let part = Part::bytes(bytes)
            .file_name("photo")
            .mime_str(content_type)
            .unwrap();
        let form = Form::new().text("csrf", csrf).part("image", part);
        browser
            .post(app.url(&format!("/admin/products/{product}/image")))
            .multipart(form)
            .send()
    };
    // Past the app-wide body limit, within the image limit.
    let png = file("image/png", 100_000);
    let forged = send("forged".into(), "image/png", png.clone())
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let html = b"<html><script>alert(1)</script></html>".to_vec();
    let refused = send(csrf.clone(), "image/png", html).await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let refused = refused.text().await.unwrap();
    assert!(refused.contains("not the image/png image"), "{refused}");
    assert!(refused.contains(&form_action), "the product page again");
    assert_eq!(
        stored_images(&app).await,
        0,
        "a refused upload stores nothing"
    );
    assert_eq!(
        app.product(product).await["image_url"],
        "/static/img/gift.svg"
    );

    let uploaded = send(csrf, "image/png", png.clone()).await.unwrap();
    assert_eq!(uploaded.status(), StatusCode::OK);
    assert_eq!(uploaded.url().as_str(), page_url);
    let url = format!("/images/{}", sha256(&png));
    let page = uploaded.text().await.unwrap();
    assert!(
        page.contains(&format!("src=\"{url}\"")),
        "the new image is shown"
    );
    assert_eq!(app.product(product).await["image_url"], url.as_str());
    let expected = format!("set the image of product {product} to {url}");
    assert_eq!(audited(&app).await.first(), Some(&expected));

    let deadline = Instant::now() + Duration::from_secs(5);
    while !app.page("/").await.contains(&format!("src=\"{url}\"")) {
        assert!(
            Instant::now() < deadline,
            "the sale page never showed the image"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, headers, served) = fetch(&app, &url, &[]).await;
    assert_eq!((status, served), (StatusCode::OK, png));
    assert_eq!(headers["content-type"], "image/png");
}
