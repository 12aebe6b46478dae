//! Bad input gets a clear 4xx JSON error and changes nothing.

use crate::support::{ADMIN_TOKEN, TestApp, code, status_and_json};
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

/// One request of the route walk below: what is sent, and the status and code it must get.
struct Probe {
    method: reqwest::Method,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
}

fn probe(method: &str, path: impl Into<String>, status: u16, code: &'static str) -> Probe {
    Probe {
        method: method.parse().unwrap(),
        path: path.into(),
        content_type: None,
        body: Vec::new(),
        status,
        code,
    }
}

impl Probe {
    fn body(mut self, content_type: Option<&'static str>, body: impl Into<Vec<u8>>) -> Self {
        self.content_type = content_type;
        self.body = body.into();
        self
    }
}

/// Axum's own refusals (a path, query, form or body it cannot read, a body over the limit, a
/// method or route that does not exist) are answered in the API's error shape on every kind of
/// route: the JSON API, the pages, the console's forms, the payment provider's callback. Each
/// probe is sent by a signed-in shopper's and operator's browser, so the routes get past their
/// sign-in checks to the part that reads the request.
#[tokio::test]
async fn every_route_refuses_what_it_cannot_read_in_the_error_shape() {
    let app = TestApp::spawn().await;
    let product = app.live_product(10, 1).await;
    let browser = crate::support::operator::browser(&app);
    let signed_in = crate::support::operator::sign_in(&app, &browser, ADMIN_TOKEN).await;
    assert_eq!(signed_in.status(), StatusCode::OK);
    let shopper = app.users(1).await.remove(0);
    let too_big = vec![b'x'; 64 * 1024];
    let form = Some("application/x-www-form-urlencoded");
    let json = Some("application/json");
    let probes = vec![
        // Paths that do not parse as the route's parameters.
        probe("GET", "/api/v1/products/abc", 404, "not_found"),
        probe("GET", "/api/v1/events/%FF", 404, "not_found"),
        probe("GET", "/api/v1/orders/1.5", 404, "not_found"),
        probe("POST", "/api/v1/products/x/buy-token", 404, "not_found"),
        probe("GET", "/api/v1/admin/orders/-x", 404, "not_found"),
        probe("GET", "/images/%FF%FE", 404, "not_found"),
        probe("GET", "/lang/%FF", 404, "not_found"),
        probe("GET", "/lang/klingon", 404, "unknown_language"),
        probe("GET", "/static/%FF", 404, "not_found"),
        probe("GET", "/static/no-such-file.css", 404, "not_found"),
        probe("POST", "/admin/orders/abc/refund", 404, "not_found"),
        // Query strings that do not parse.
        probe("GET", "/?event=1&event=2", 422, "invalid_query"),
        probe("GET", "/?event=nope", 404, "unknown_event"),
        probe("GET", "/login?next=a&next=b", 422, "invalid_query"),
        probe(
            "GET",
            "/api/v1/admin/orders?limit=many",
            422,
            "invalid_query",
        ),
        probe(
            "GET",
            "/api/v1/admin/orders?status=paid&status=x",
            422,
            "invalid_query",
        ),
        probe("GET", "/admin/orders?order=1&order=2", 422, "invalid_query"),
        // Bodies: not JSON, no content type, the wrong one, over the limit.
        probe("POST", "/api/v1/sessions", 400, "malformed_json").body(json, "{"),
        probe("POST", "/api/v1/sessions", 415, "unsupported_media_type").body(None, "{}"),
        probe("POST", "/api/v1/users", 415, "unsupported_media_type").body(form, "a=b"),
        probe("POST", "/api/v1/users", 422, "invalid_body").body(json, "{\"username\": 1}"),
        probe("POST", "/api/v1/admin/events", 413, "body_too_large").body(json, too_big.clone()),
        probe("POST", "/api/v1/orders", 413, "body_too_large").body(json, too_big.clone()),
        probe(
            "POST",
            format!("/api/v1/products/{product}/buy-token"),
            413,
            "body_too_large",
        )
        .body(None, too_big.clone()),
        probe("POST", "/logout", 413, "body_too_large").body(form, too_big.clone()),
        probe("POST", "/admin/login", 413, "body_too_large").body(form, too_big.clone()),
        probe("POST", "/admin/products", 413, "body_too_large").body(form, too_big.clone()),
        probe("POST", "/pay/alipay/notify", 413, "body_too_large").body(form, too_big.clone()),
        // Methods and routes that do not exist.
        probe("DELETE", "/healthz", 405, "method_not_allowed"),
        probe("PUT", "/", 405, "method_not_allowed"),
        probe("POST", "/api/v1/events", 405, "method_not_allowed"),
        probe("PATCH", "/admin/login", 405, "method_not_allowed"),
        probe("GET", "/pay/alipay/notify", 405, "method_not_allowed"),
        probe("GET", "/api/v1/no-such-route", 404, "not_found"),
        probe("GET", "/no/such/page", 404, "not_found"),
    ];
    for p in probes {
        let mut request = browser
            .request(p.method.clone(), app.url(&p.path))
            .bearer_auth(if p.path.starts_with("/api/v1/admin") {
                ADMIN_TOKEN
            } else {
                shopper.as_str()
            })
            .body(p.body);
        if let Some(content_type) = p.content_type {
            request = request.header("content-type", content_type);
        }
        let (status, answer) = status_and_json(request.send().await.unwrap()).await;
        let what = format!("{} {}", p.method, p.path);
        assert_eq!(status.as_u16(), p.status, "{what} → {answer}");
        assert_eq!(code(&answer), p.code, "{what} → {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{what} → {answer}");
    }
    assert_eq!(app.stored(product).await, (0, 0, 10));
}

/// A request line and headers sent as they are, and the raw answer.
async fn raw_exchange(app: &TestApp, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// Whatever `Host` a request names, or none, it is served like any other: an unknown route is
/// the usual JSON 404, a page renders.
#[tokio::test]
async fn strange_hosts_get_the_usual_answers() {
    let app = TestApp::spawn().await;
    for host in [
        &b"Host: \xff\xfe\r\n"[..],
        b"Host: evil.example:99999\r\n",
        b"Host: a b c\r\n",
        b"Host: one\r\nHost: two\r\n",
        b"",
    ] {
        let mut request = b"GET /no-such-route HTTP/1.1\r\n".to_vec();
        request.extend_from_slice(host);
        request.extend_from_slice(b"Connection: close\r\n\r\n");
        let answer = raw_exchange(&app, &request).await;
        let what = String::from_utf8_lossy(host);
        assert!(answer.starts_with("HTTP/1.1 404 "), "{what} → {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{what} → {answer}"
        );
        assert!(answer.ends_with(r#""code":"not_found","message":"no such route"}}"#));
    }
}
