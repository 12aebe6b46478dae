//! The gateway end to end through its router: the shop's side is played with the test app key,
//! and everything the gateway says is checked with the test "Alipay" public key.

use super::protocol::{Params, param, parse_params};
use super::*;
use crate::clock::ManualClock;
use crate::payment::alipay::beijing;
use crate::payment::alipay::sign::{signed_query, string_to_sign, string_to_verify};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::routing::{get, post};
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::time::Duration;
use tower::ServiceExt as _;

const APP_KEY: &str = include_str!("../alipay/testdata/app_key_pkcs8.pem");
const APP_PUBLIC_KEY: &str = include_str!("../alipay/testdata/app_public_key.pem");
const ALIPAY_KEY: &str = include_str!("../alipay/testdata/alipay_key_pkcs1.pem");
const ALIPAY_PUBLIC_KEY: &str = include_str!("../alipay/testdata/alipay_public_key.pem");

/// 2026-11-24 08:15:00 in Beijing.
const NOW: Millis = 1_795_479_300_000;
/// Fifteen minutes later, as `time_expire` writes it.
const DEADLINE: &str = "2026-11-24 08:30:00";
const RETURN_URL: &str = "http://shop.example/pay/alipay/return?from=sandbox";

/// The gateway's routes, as the server's router mounts them.
fn routes(sandbox: &Arc<Sandbox>) -> Router {
    Router::new()
        .route(GATEWAY_PATH, get(gateway).post(gateway))
        .route(CHECKOUT_PATH, post(super::decide))
        .with_state(Arc::clone(sandbox))
}

struct Fixture {
    sandbox: Arc<Sandbox>,
    clock: Arc<ManualClock>,
    app_key: AppKey,
}

fn fixture() -> Fixture {
    let settings = SandboxSettings {
        app_id: SANDBOX_APP_ID.to_owned(),
        seller_id: SANDBOX_SELLER_ID.to_owned(),
        app_public_key: AlipayPublicKey::parse(APP_PUBLIC_KEY).unwrap(),
        gateway_key: AppKey::parse(ALIPAY_KEY).unwrap(),
    };
    let clock = Arc::new(ManualClock::new(NOW));
    let sandbox = Sandbox::new(settings, clock.clone()).unwrap();
    let app_key = AppKey::parse(APP_KEY).unwrap();
    Fixture {
        sandbox,
        clock,
        app_key,
    }
}

fn alipay_public_key() -> AlipayPublicKey {
    AlipayPublicKey::parse(ALIPAY_PUBLIC_KEY).unwrap()
}

fn pairs(params: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
}

/// A request's parameters as the shop's client builds them, not yet signed.
fn request(method: &str, biz_content: Value, notify_url: Option<&str>) -> Params {
    let mut params: Params = [
        ("app_id", SANDBOX_APP_ID),
        ("method", method),
        ("format", "JSON"),
        ("charset", "utf-8"),
        ("sign_type", "RSA2"),
        ("timestamp", "2026-11-24 08:15:00"),
        ("version", "1.0"),
        ("return_url", RETURN_URL),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    params.push(("biz_content".to_owned(), biz_content.to_string()));
    if let Some(url) = notify_url {
        params.push(("notify_url".to_owned(), url.to_owned()));
    }
    params
}

fn page_pay(id: i64, amount: &str, notify_url: Option<&str>) -> Params {
    let content = serde_json::json!({
        "out_trade_no": id.to_string(),
        "total_amount": amount,
        "subject": "秒杀 iPhone & case",
        "product_code": "FAST_INSTANT_TRADE_PAY",
        "time_expire": DEADLINE,
    });
    request("alipay.trade.page.pay", content, notify_url)
}

/// The query of a signed request, as the client's pay URL carries it.
fn signed(key: &AppKey, params: &Params) -> String {
    let sign = key.sign(&string_to_sign(pairs(params))).unwrap();
    signed_query(pairs(params), &sign)
}

async fn send(sandbox: &Arc<Sandbox>, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
    let response = routes(sandbox).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

async fn open(fx: &Fixture, query: &str) -> (StatusCode, String) {
    let uri = format!("{GATEWAY_PATH}?{query}");
    let request = Request::get(uri).body(Body::empty()).unwrap();
    let (status, _, body) = send(&fx.sandbox, request).await;
    (status, body)
}

async fn decide(fx: &Fixture, id: i64, action: &str) -> (StatusCode, HeaderMap, String) {
    let request = Request::post(format!("/sandbox/alipay/checkout/{id}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("action={action}")))
        .unwrap();
    send(&fx.sandbox, request).await
}

/// Calls the synchronous API with `params` signed by `key`; checks the answer's signature over
/// the raw text of its response object and returns that object.
async fn call(fx: &Fixture, key: &AppKey, params: Params) -> Value {
    let request = Request::post(GATEWAY_PATH)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(signed(key, &params)))
        .unwrap();
    let (status, headers, text) = send(&fx.sandbox, request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "application/json;charset=utf-8"
    );
    let method = param(&params, "method").unwrap();
    signed_response(&text, &format!("{}_response", method.replace('.', "_")))
}

async fn api(fx: &Fixture, method: &str, content: Value) -> Value {
    call(fx, &fx.app_key, request(method, content, None)).await
}

async fn query_status(fx: &Fixture, id: i64) -> Value {
    let content = serde_json::json!({ "out_trade_no": id.to_string() });
    api(fx, "alipay.trade.query", content).await["trade_status"].clone()
}

#[tokio::test]
async fn a_signed_page_pay_opens_the_checkout_and_shows_it_again() {
    let fx = fixture();
    let query = signed(&fx.app_key, &page_pay(7, "5999.00", None));
    let (status, page) = open(&fx, &query).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    for shown in [
        "SANDBOX",
        "no real money",
        "秒杀 iPhone &#38; case",
        "¥5999.00",
        DEADLINE,
        r#"method="post" action="/sandbox/alipay/checkout/7""#,
        r#"name="action" value="pay""#,
        r#"name="action" value="abandon""#,
    ] {
        assert!(page.contains(shown), "{shown:?} missing from\n{page}");
    }
    let (again, page_again) = open(&fx, &query).await;
    assert_eq!((again, page_again), (StatusCode::OK, page));

    let cheaper = signed(&fx.app_key, &page_pay(7, "0.01", None));
    let (status, page) = open(&fx, &cheaper).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("ACQ.CONTEXT_INCONSISTENT"), "{page}");
}

#[tokio::test]
async fn forged_altered_or_foreign_requests_are_refused_and_open_nothing() {
    let fx = fixture();
    let gateway_key = AppKey::parse(ALIPAY_KEY).unwrap();
    let forged = signed(&gateway_key, &page_pay(7, "5999.00", None));
    let honest = signed(&fx.app_key, &page_pay(7, "5999.00", None));
    let altered = honest.replace("5999.00", "0.01");
    assert_ne!(altered, honest);
    let mut foreign = page_pay(7, "5999.00", None);
    foreign[0].1 = "2021000000000000".to_owned();
    let foreign = signed(&fx.app_key, &foreign);
    let mut wap = page_pay(7, "5999.00", None);
    wap[1].1 = "alipay.trade.wap.pay".to_owned();
    let wap = signed(&fx.app_key, &wap);
    let unsigned = honest[..honest.find("&sign=").unwrap()].to_owned();
    let twice = format!("{honest}&app_id={SANDBOX_APP_ID}");
    for (query, reason) in [
        (forged.as_str(), "signature does not match"),
        (&altered, "signature does not match"),
        (&foreign, "app_id"),
        (&wap, "QUICK_WAP_WAY"),
        (&unsigned, "no sign"),
        (&twice, "more than once"),
    ] {
        let (status, page) = open(&fx, query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}\n{page}");
        assert!(page.contains(reason), "{reason:?} missing from\n{page}");
    }
    let content = serde_json::json!({ "out_trade_no": "7" });
    let answer = call(
        &fx,
        &gateway_key,
        request("alipay.trade.query", content, None),
    )
    .await;
    assert_eq!(answer["code"], "40002");
    assert_eq!(answer["msg"], "Invalid Arguments");
    assert_eq!(answer["sub_code"], "isv.invalid-signature");
    assert!(
        fx.sandbox.notification(OrderId(7)).is_none(),
        "nothing opened"
    );
}

/// A shop listening for notifications on a real socket: it answers `failure` to the first
/// `refusals` deliveries and `success` after, and hands each one over as it came.
async fn shop(refusals: usize) -> (String, tokio::sync::mpsc::Receiver<Params>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    let seen = Arc::new(AtomicUsize::new(0));
    let notify = move |body: Bytes| async move {
        sender.send(parse_params(&body)).await.unwrap();
        if seen.fetch_add(1, Ordering::SeqCst) < refusals {
            "failure"
        } else {
            "success"
        }
    };
    let shop = Router::new().route("/notify", post(notify));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/notify", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, shop).await });
    (url, receiver)
}

#[tokio::test]
async fn paying_returns_signed_params_and_notifies_until_the_shop_says_success() {
    let fx = fixture();
    let (notify_url, mut notifications) = shop(2).await;
    let query = signed(&fx.app_key, &page_pay(7, "5999.00", Some(&notify_url)));
    assert_eq!(open(&fx, &query).await.0, StatusCode::OK);
    fx.clock.advance(61_000);

    let (status, headers, _) = decide(&fx, 7, "pay").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let location = headers[header::LOCATION].to_str().unwrap();
    let returned = location.strip_prefix(&format!("{RETURN_URL}&")).unwrap();
    let returned = parse_params(returned.as_bytes());
    let gateway = alipay_public_key();
    let sign = param(&returned, "sign").unwrap();
    gateway
        .verify(&string_to_verify(pairs(&returned)), sign)
        .unwrap();
    for (key, value) in [
        ("method", "alipay.trade.page.pay.return"),
        ("out_trade_no", "7"),
        ("total_amount", "5999.00"),
        ("app_id", SANDBOX_APP_ID),
        ("seller_id", SANDBOX_SELLER_ID),
        ("sign_type", "RSA2"),
        ("timestamp", "2026-11-24 08:16:01"),
    ] {
        assert_eq!(param(&returned, key), Some(value), "{key}");
    }

    let mut deliveries = Vec::new();
    for _ in 0..3 {
        let wait = tokio::time::timeout(Duration::from_secs(10), notifications.recv());
        deliveries.push(wait.await.unwrap().unwrap());
    }
    assert_eq!(
        deliveries[0], deliveries[2],
        "a retry is the same notification"
    );
    assert_eq!(
        Some(&deliveries[0]),
        fx.sandbox.notification(OrderId(7)).as_ref()
    );
    let delivered = &deliveries[0];
    gateway
        .verify(
            &string_to_verify(pairs(delivered)),
            param(delivered, "sign").unwrap(),
        )
        .unwrap();
    for (key, value) in [
        ("trade_status", "TRADE_SUCCESS"),
        ("out_trade_no", "7"),
        ("total_amount", "5999.00"),
        ("subject", "秒杀 iPhone & case"),
        ("gmt_create", "2026-11-24 08:15:00"),
        ("gmt_payment", "2026-11-24 08:16:01"),
        ("notify_type", "trade_status_sync"),
        ("app_id", SANDBOX_APP_ID),
        ("seller_id", SANDBOX_SELLER_ID),
    ] {
        assert_eq!(param(delivered, key), Some(value), "{key}");
    }
    let after = tokio::time::timeout(Duration::from_millis(4_500), notifications.recv()).await;
    assert!(
        after.is_err(),
        "a notification answered success is not sent again"
    );

    let (status, headers, _) = decide(&fx, 7, "pay").await;
    assert_eq!(
        status,
        StatusCode::SEE_OTHER,
        "a second click returns again"
    );
    assert!(
        headers[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with(RETURN_URL)
    );
}

#[tokio::test]
async fn the_current_notification_verifies_and_no_altered_copy_does() {
    let fx = fixture();
    let query = signed(&fx.app_key, &page_pay(7, "5999.00", None));
    open(&fx, &query).await;
    let waiting = fx.sandbox.notification(OrderId(7)).unwrap();
    assert_eq!(param(&waiting, "trade_status"), Some("WAIT_BUYER_PAY"));
    decide(&fx, 7, "pay").await;
    let paid = fx.sandbox.notification(OrderId(7)).unwrap();
    assert_ne!(param(&paid, "notify_id"), param(&waiting, "notify_id"));
    assert_eq!(fx.sandbox.notification(OrderId(7)), Some(paid.clone()));
    let gateway = alipay_public_key();
    let verify = |params: &Params| {
        let sign = param(params, "sign").unwrap_or_default();
        gateway.verify(&string_to_verify(pairs(params)), sign)
    };
    verify(&paid).unwrap();
    for (key, value) in [
        ("total_amount", "0.01"),
        ("out_trade_no", "8"),
        ("trade_status", "TRADE_FINISHED"),
        ("app_id", "2021000000000000"),
    ] {
        let mut altered = paid.clone();
        altered.iter_mut().find(|(k, _)| k == key).unwrap().1 = value.to_owned();
        assert!(verify(&altered).is_err(), "{key} altered yet verified");
    }
    assert!(fx.sandbox.notification(OrderId(8)).is_none());
}

#[tokio::test]
async fn query_close_and_refund_answer_like_alipay() {
    let fx = fixture();
    let trade = |id: i64| serde_json::json!({ "out_trade_no": id.to_string() });
    let unknown = api(&fx, "alipay.trade.query", trade(7)).await;
    assert_eq!(unknown["code"], "40004");
    assert_eq!(unknown["msg"], "Business Failed");
    assert_eq!(unknown["sub_code"], "ACQ.TRADE_NOT_EXIST");
    let closed = api(&fx, "alipay.trade.close", trade(7)).await;
    assert_eq!(closed["sub_code"], "ACQ.TRADE_NOT_EXIST");

    open(&fx, &signed(&fx.app_key, &page_pay(7, "5999.00", None))).await;
    open(&fx, &signed(&fx.app_key, &page_pay(8, "19.99", None))).await;
    let waiting = api(&fx, "alipay.trade.query", trade(7)).await;
    assert_eq!(waiting["code"], "10000");
    assert_eq!(waiting["msg"], "Success");
    assert_eq!(waiting["trade_status"], "WAIT_BUYER_PAY");
    assert_eq!(waiting["total_amount"], "5999.00");
    assert_eq!(waiting["out_trade_no"], "7");
    assert!(waiting.get("send_pay_date").is_none());

    let closed = api(&fx, "alipay.trade.close", trade(7)).await;
    assert_eq!(closed["code"], "10000");
    assert_eq!(closed["trade_no"], waiting["trade_no"]);
    assert_eq!(query_status(&fx, 7).await, "TRADE_CLOSED");
    assert_eq!(decide(&fx, 7, "pay").await.0, StatusCode::CONFLICT);

    assert_eq!(decide(&fx, 8, "pay").await.0, StatusCode::SEE_OTHER);
    let paid = api(&fx, "alipay.trade.query", trade(8)).await;
    assert_eq!(paid["trade_status"], "TRADE_SUCCESS");
    assert_eq!(paid["send_pay_date"], "2026-11-24 08:15:00");
    let refused = api(&fx, "alipay.trade.close", trade(8)).await;
    assert_eq!(refused["code"], "40004");
    assert_eq!(refused["sub_code"], "ACQ.TRADE_STATUS_ERROR");

    let refund = serde_json::json!({
        "out_trade_no": "8", "refund_amount": "19.99", "out_request_no": "refund-8",
    });
    let first = api(&fx, "alipay.trade.refund", refund.clone()).await;
    assert_eq!(first["code"], "10000");
    assert_eq!(first["fund_change"], "Y");
    assert_eq!(first["refund_fee"], "19.99");
    let second = api(&fx, "alipay.trade.refund", refund).await;
    assert_eq!(second["code"], "10000");
    assert_eq!(second["fund_change"], "N", "the same request refunds once");
    assert_eq!(second["refund_fee"], "19.99");
    assert_eq!(query_status(&fx, 8).await, "TRADE_CLOSED");
    let more = serde_json::json!({
        "out_trade_no": "8", "refund_amount": "0.01", "out_request_no": "another",
    });
    let more = api(&fx, "alipay.trade.refund", more).await;
    assert_eq!(more["sub_code"], "ACQ.TRADE_HAS_CLOSE");
    let refunded = fx.sandbox.notification(OrderId(8)).unwrap();
    assert_eq!(param(&refunded, "trade_status"), Some("TRADE_CLOSED"));
    assert_eq!(param(&refunded, "refund_fee"), Some("19.99"));
}

/// The answer's response object under `name`, after checking its signature.
fn signed_response(text: &str, name: &str) -> Value {
    let answer: HashMap<String, &RawValue> = serde_json::from_str(text).unwrap();
    let raw = answer[name].get();
    let sign: String = serde_json::from_str(answer["sign"].get()).unwrap();
    alipay_public_key().verify(raw, &sign).unwrap();
    serde_json::from_str(raw).unwrap()
}

#[tokio::test]
async fn unknown_methods_and_garbage_are_answered_as_signed_error_responses() {
    let fx = fixture();
    let params = request("alipay.trade.pay", serde_json::json!({}), None);
    for (body, sub_code) in [
        (signed(&fx.app_key, &params), "isv.invalid-method"),
        ("%FF%00=&&=".to_owned(), "isv.missing-signature"),
        (String::new(), "isv.missing-signature"),
    ] {
        let request = Request::post(GATEWAY_PATH).body(Body::from(body)).unwrap();
        let (status, _, text) = send(&fx.sandbox, request).await;
        assert_eq!(status, StatusCode::OK);
        let response = signed_response(&text, "error_response");
        assert_eq!(response["code"], "40002");
        assert_eq!(response["sub_code"], sub_code);
    }
}

#[tokio::test]
async fn an_unpaid_trade_past_its_deadline_reads_closed_and_takes_no_payment() {
    let fx = fixture();
    open(&fx, &signed(&fx.app_key, &page_pay(7, "5999.00", None))).await;
    fx.clock.set(beijing::parse(DEADLINE).unwrap() - 1);
    assert_eq!(query_status(&fx, 7).await, "WAIT_BUYER_PAY");
    fx.clock.advance(1);
    assert_eq!(query_status(&fx, 7).await, "TRADE_CLOSED");
    let (status, _, page) = decide(&fx, 7, "pay").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("Trade closed"), "{page}");
    let (status, page) = open(&fx, &signed(&fx.app_key, &page_pay(9, "1.00", None))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("time_expire has passed"), "{page}");
}

#[tokio::test]
async fn abandoning_leaves_the_trade_waiting_and_links_back_to_the_shop() {
    let fx = fixture();
    open(&fx, &signed(&fx.app_key, &page_pay(7, "5999.00", None))).await;
    let (status, _, page) = decide(&fx, 7, "abandon").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"href="http://shop.example/""#), "{page}");
    assert_eq!(query_status(&fx, 7).await, "WAIT_BUYER_PAY");
    assert!(fx.sandbox.notification(OrderId(7)).is_some());
    assert_eq!(decide(&fx, 8, "abandon").await.0, StatusCode::NOT_FOUND);
    assert_eq!(decide(&fx, 7, "steal").await.0, StatusCode::BAD_REQUEST);
}

#[test]
fn generated_keys_are_fresh_and_sign_verifiably() {
    let pem = generate_key_pem();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    assert_ne!(pem, generate_key_pem());
    let key = AppKey::parse(&pem).unwrap();
    let public = key.public_key();
    let sign = key.sign("a=1&b=2").unwrap();
    public.verify("a=1&b=2", &sign).unwrap();
    assert!(public.verify("a=1&b=3", &sign).is_err());
}

/// The shop's real Alipay client, with freshly generated keys, pays through the gateway over
/// HTTP on both channels: the demo's payments are this conversation.
#[tokio::test]
async fn the_alipay_client_pays_queries_closes_and_refunds_through_the_gateway() {
    use crate::clock::SystemClock;
    use crate::domain::Money;
    use crate::payment::alipay::client::{AlipayClient, AlipaySettings};
    use crate::payment::{Channel, GatewayError, PayRequest, PaymentProvider, TradeStatus};

    let app_key_pem = generate_key_pem();
    let gateway_key = AppKey::parse(&generate_key_pem()).unwrap();
    let alipay_public_key = gateway_key.public_key();
    let settings = SandboxSettings {
        app_id: SANDBOX_APP_ID.to_owned(),
        seller_id: SANDBOX_SELLER_ID.to_owned(),
        app_public_key: AppKey::parse(&app_key_pem).unwrap().public_key(),
        gateway_key,
    };
    let sandbox = Sandbox::new(settings, Arc::new(SystemClock)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = listener.local_addr().unwrap();
    let router = routes(&sandbox);
    tokio::spawn(async move { axum::serve(listener, router).await });
    let (notify_url, mut notifications) = shop(0).await;
    let client = AlipayClient::new(AlipaySettings {
        provider_name: "sandbox",
        app_id: SANDBOX_APP_ID.to_owned(),
        app_key: AppKey::parse(&app_key_pem).unwrap(),
        alipay_public_key,
        gateway_url: format!("http://{gateway}{GATEWAY_PATH}"),
        seller_id: Some(SANDBOX_SELLER_ID.to_owned()),
        notify_url,
        return_url: RETURN_URL.to_owned(),
        reached_base: None,
    })
    .unwrap();
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let total = Money::from_cents(599_900).unwrap();
    let mut next_notification = async || {
        let wait = tokio::time::timeout(Duration::from_secs(5), notifications.recv());
        let params = wait.await.unwrap().unwrap();
        client.verify_notification(&params).unwrap().trade
    };

    for (order, channel) in [(OrderId(7), Channel::Page), (OrderId(8), Channel::Wap)] {
        let url = client
            .pay_url(&PayRequest {
                order,
                subject: "秒杀 iPhone & case +/?",
                total,
                expires_at: chrono::Utc::now().timestamp_millis() + 900_000,
                channel,
                reached_at: None,
            })
            .unwrap();
        let page = browser.get(&url).send().await.unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        let trade = client.query(order).await.unwrap().unwrap();
        assert_eq!(trade.status, TradeStatus::WaitBuyerPay);

        let paid = browser
            .post(format!("http://{gateway}{CHECKOUT_PREFIX}{order}"))
            .form(&[("action", "pay")])
            .send()
            .await
            .unwrap();
        assert_eq!(paid.status(), StatusCode::SEE_OTHER);
        let location = paid.headers()[header::LOCATION].to_str().unwrap();
        let returned = location.strip_prefix(&format!("{RETURN_URL}&")).unwrap();
        let returned = parse_params(returned.as_bytes());
        assert_eq!(client.verify_return(&returned).unwrap(), order);
        let notified = next_notification().await;
        assert_eq!((notified.order, notified.total), (order, total));
        assert_eq!(notified.status, TradeStatus::Success);
        assert_eq!(client.query(order).await.unwrap().unwrap(), notified);

        let refused = client.close(order).await.unwrap_err();
        assert!(
            matches!(&refused, GatewayError::Refused { code, .. } if code == "ACQ.TRADE_STATUS_ERROR"),
            "{refused:?}"
        );
        client.refund(order, total).await.unwrap();
        client.refund(order, total).await.unwrap();
        assert_eq!(next_notification().await.status, TradeStatus::Closed);
        let trade = client.query(order).await.unwrap().unwrap();
        assert_eq!(trade.status, TradeStatus::Closed);
    }
    assert_eq!(client.query(OrderId(9)).await.unwrap(), None);
    client.close(OrderId(9)).await.unwrap();
}
