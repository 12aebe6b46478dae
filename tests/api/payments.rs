//! Taking the money through Alipay's protocol, against the built-in sandbox gateway: an order
//! is paid only on the provider's verified word, once, for the right amount and the right
//! merchant; money for a cancelled order goes back and its stock is never sold twice; the
//! deadline sweep asks the provider before it cancels. Each test runs on every backend
//! combination of the suite. Time is moved with a manual clock.

use crate::support::sandbox::{Params, WINDOW_MS, param, resign, sold, wap};
use crate::support::{TestApp, code};
use reqwest::StatusCode;
use seckill::clock::Clock;
use seckill::config::ProviderKind;
use seckill::payment::alipay::beijing;
use seckill::payment::alipay::sign::AppKey;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

#[tokio::test]
async fn a_buyer_pays_on_the_sandbox_checkout_page_and_the_notification_pays_the_order() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (product, orders) = sold(&app, 3, 1).await;
    let (token, order) = &orders[0];

    let pay_url = app.pay_url(token, order).await;
    assert!(
        pay_url.contains("method=alipay.trade.page.pay"),
        "{pay_url}"
    );
    assert!(pay_url.contains("FAST_INSTANT_TRADE_PAY"), "{pay_url}");
    // Asking for the URL pays nothing.
    assert_eq!(app.order_status(token, order).await, "awaiting_payment");

    let page = app.open_checkout(token, order).await;
    assert!(
        page.contains("49.99"),
        "the checkout shows the price: {page}"
    );
    assert!(page.to_uppercase().contains("SANDBOX"), "{page}");
    // The browser is sent back to the shop, which shows the order.
    let (status, returned) = app.checkout(order, "pay").await;
    assert_eq!(status, StatusCode::OK, "{returned}");
    assert!(returned.contains(order.as_str()), "{returned}");
    app.wait_for_status(token, order, "paid").await;

    let (status, body) = app.ask_to_pay(token, order, Value::Null).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_paid")
    );
    let (status, body) = app.order_action(token, order, "cancel").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_paid")
    );
    let records = app.payment_records(order).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].1, "TRADE_SUCCESS");
    assert_eq!(app.stored(product).await, (1, 1, 2));
}

#[tokio::test]
async fn a_buyer_who_abandons_the_checkout_is_cancelled_at_the_deadline_and_the_stock_returns() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_paying(clock.clone()).await;
    let (product, orders) = sold(&app, 1, 1).await;
    let (token, order) = &orders[0];
    app.open_checkout(token, order).await;
    let (status, page) = app.checkout(order, "abandon").await;
    assert_eq!(status, StatusCode::OK, "{page}");

    clock.advance(WINDOW_MS);
    assert_eq!(app.state.sale.expire_overdue().await.unwrap(), 1);
    app.wait_for_status(token, order, "cancelled").await;
    assert_eq!(app.stored(product).await, (0, 0, 1));
    assert_eq!(app.product(product).await["remaining"], 1);
    // The trade was closed at the gateway: the checkout takes no money for it any more.
    let (_, page) = app.checkout(order, "pay").await;
    let notification = app.sandbox_notification(order);
    assert_ne!(
        param(&notification, "trade_status"),
        "TRADE_SUCCESS",
        "{page}"
    );
}

#[tokio::test]
async fn the_mobile_channel_signs_a_wap_pay_url_and_a_bad_channel_is_refused() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (_, orders) = sold(&app, 1, 1).await;
    let (token, order) = &orders[0];
    let (status, body) = app.ask_to_pay(token, order, wap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let url = body["pay_url"].as_str().unwrap();
    assert!(url.contains("method=alipay.trade.wap.pay"), "{url}");
    assert!(url.contains("QUICK_WAP_WAY"), "{url}");
    assert!(url.contains("time_expire"), "{url}");
    let (status, body) = app
        .ask_to_pay(token, order, serde_json::json!({ "channel": "fax" }))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
}

#[tokio::test]
async fn without_a_provider_paying_is_refused_and_nothing_is_paid() {
    let app = TestApp::spawn().await;
    let (product, orders) = sold(&app, 1, 1).await;
    let (token, order) = &orders[0];
    let (status, body) = app.ask_to_pay(token, order, Value::Null).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "payments_not_configured")
    );
    assert_eq!(app.notify(&vec![]).await, "failure");
    assert_eq!(app.order_status(token, order).await, "awaiting_payment");
    assert_eq!(app.stored(product).await, (1, 1, 0));
}

#[tokio::test]
async fn forged_and_mismatched_notifications_are_refused_and_change_nothing() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (product, orders) = sold(&app, 2, 2).await;
    let (token, order) = &orders[0];
    let (_, other_order) = &orders[1];
    app.open_checkout(token, order).await;
    let waiting = app.sandbox_notification(order);
    let paid = app
        .signed_by_gateway(&waiting, &[("trade_status", "TRADE_SUCCESS")])
        .await;

    let mut altered = paid.clone();
    altered
        .iter_mut()
        .find(|(k, _)| k == "total_amount")
        .unwrap()
        .1 = "0.01".into();
    let mut unsigned = paid.clone();
    unsigned.retain(|(k, _)| k != "sign");
    let other_key = AppKey::parse(&test_key("app_key_pkcs8.pem")).unwrap();
    let refused: Vec<(&str, Params)> = vec![
        ("altered after signing", altered),
        ("unsigned", unsigned),
        ("signed with another key", resign(&other_key, &paid, &[])),
        (
            "another app",
            app.signed_by_gateway(&paid, &[("app_id", "2021000000009999")])
                .await,
        ),
        (
            "another amount",
            app.signed_by_gateway(&paid, &[("total_amount", "0.01")])
                .await,
        ),
        (
            "another seller",
            app.signed_by_gateway(&paid, &[("seller_id", "2088999999999999")])
                .await,
        ),
        (
            "an unknown order",
            app.signed_by_gateway(&paid, &[("out_trade_no", "12345")])
                .await,
        ),
        (
            "another order, at another price",
            app.signed_by_gateway(
                &paid,
                &[("out_trade_no", other_order), ("total_amount", "0.50")],
            )
            .await,
        ),
    ];
    for (what, notification) in &refused {
        assert_eq!(app.notify(notification).await, "failure", "{what}");
    }
    // Verified and matching, but not paid: acknowledged, and nothing changes.
    for status in ["WAIT_BUYER_PAY", "TRADE_CLOSED"] {
        let notification = app
            .signed_by_gateway(&paid, &[("trade_status", status), ("notify_id", status)])
            .await;
        assert_eq!(app.notify(&notification).await, "success", "{status}");
    }
    for (token, order) in &orders {
        assert_eq!(app.order_status(token, order).await, "awaiting_payment");
        assert!(
            app.payment_records(order)
                .await
                .iter()
                .all(|(_, s)| s != "TRADE_SUCCESS")
        );
    }
    assert_eq!(app.stored(product).await, (2, 2, 0));

    // Signed by the gateway and matching the order: it pays.
    assert_eq!(app.notify(&paid).await, "success");
    app.wait_for_status(token, order, "paid").await;
}

#[tokio::test]
async fn the_same_notification_eight_times_pays_once_and_is_recorded_once() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (product, orders) = sold(&app, 1, 1).await;
    let (token, order) = &orders[0];
    app.pay_at_sandbox(token, order).await;
    let notification = app.sandbox_notification(order);
    let answers = futures_util::future::join_all((0..8).map(|_| app.notify(&notification))).await;
    assert!(answers.iter().all(|a| a == "success"), "{answers:?}");
    assert_eq!(app.payment_records(order).await.len(), 1);
    assert_eq!(app.order_status(token, order).await, "paid");
    assert_eq!(app.stored(product).await, (1, 1, 0));
}

#[tokio::test]
async fn money_for_a_cancelled_order_is_refunded_once_and_its_stock_is_not_sold_twice() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (product, orders) = sold(&app, 1, 1).await;
    let (token, order) = &orders[0];
    app.open_checkout(token, order).await;
    // The buyer pays, but the notification is lost on its way; then the buyer cancels.
    let (status, page) = app.checkout(order, "pay_without_notice").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (status, body) = app.order_action(token, order, "cancel").await;
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &"cancelled".into())
    );
    assert_eq!(app.product(product).await["remaining"], 1);

    // The notification comes after all, eight times.
    let notification = app.sandbox_notification(order);
    assert_eq!(param(&notification, "trade_status"), "TRADE_SUCCESS");
    for _ in 0..8 {
        assert_eq!(app.notify(&notification).await, "success");
    }
    app.wait_for_status(token, order, "refunded").await;
    let refunded = app.sandbox_notification(order);
    assert_eq!(
        param(&refunded, "trade_status"),
        "TRADE_CLOSED",
        "refunded in full"
    );
    // The unit went back on sale once, at the cancel; the refund did not add it again.
    assert_eq!(app.stored(product).await, (0, 0, 1));
    let buyer = &app.users(2).await;
    assert_eq!(app.buy(&buyer[0], product, 1).await.0, StatusCode::ACCEPTED);
    let (status, body) = app.buy(&buyer[1], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
    let (status, body) = app.ask_to_pay(token, order, Value::Null).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "order_cancelled")
    );
}

#[tokio::test]
async fn the_sweep_asks_the_gateway_first_and_settles_a_paid_trade_whose_notification_was_lost() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_paying(clock.clone()).await;
    let (product, orders) = sold(&app, 2, 2).await;
    let (token, paid) = &orders[0];
    let (_, unpaid) = &orders[1];
    app.open_checkout(token, paid).await;
    let (status, page) = app.checkout(paid, "pay_without_notice").await;
    assert_eq!(status, StatusCode::OK, "{page}");

    clock.advance(WINDOW_MS);
    assert_eq!(
        app.state.sale.expire_overdue().await.unwrap(),
        1,
        "only the unpaid one"
    );
    app.wait_for_status(token, paid, "paid").await;
    let records = app.payment_records(paid).await;
    assert!(records[0].0.starts_with("query:"), "{records:?}");
    assert!(app.payment_records(unpaid).await.is_empty());
    assert_eq!(app.stored(product).await, (1, 1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payments_racing_cancels_and_the_sweep_settle_each_order_once() {
    let clock = TestApp::manual_clock();
    let app = Arc::new(TestApp::spawn_paying(clock.clone()).await);
    let (product, orders) = sold(&app, 100, 100).await;
    for (token, order) in &orders {
        app.open_checkout(token, order).await;
    }
    // Half the buyers pay and cancel at once; the other half pay at the last moment, as the
    // deadline sweep runs.
    let (racing_cancel, racing_sweep) = orders.split_at(50);
    let cancels = racing_cancel.iter().cloned().map(|(token, order)| {
        let app = app.clone();
        tokio::spawn(async move {
            let (pay, cancel) = tokio::join!(
                app.checkout(&order, "pay"),
                app.order_action(&token, &order, "cancel")
            );
            (order, pay.0, cancel.0)
        })
    });
    let cancels = futures_util::future::join_all(cancels).await;
    clock.advance(WINDOW_MS - 1_500);
    let pays = racing_sweep
        .iter()
        .map(|(_, order)| app.checkout(order, "pay"));
    let sweep = async {
        tokio::task::yield_now().await;
        clock.advance(1_500);
        app.state.sale.expire_overdue().await
    };
    let (_, swept) = tokio::join!(futures_util::future::join_all(pays), sweep);
    swept.unwrap();

    // Every order ends paid, cancelled (its trade closed before the money came) or refunded
    // (the money came after the cancel); the money matches.
    let mut held = 0;
    for (token, order) in &orders {
        let status = settled_status(&app, token, order).await;
        let trade = param(&app.sandbox_notification(order), "trade_status").to_owned();
        match status.as_str() {
            "paid" => {
                held += 1;
                assert_eq!(trade, "TRADE_SUCCESS", "{order}");
            }
            "cancelled" => assert_ne!(trade, "TRADE_SUCCESS", "{order}: money kept"),
            "refunded" => assert_eq!(trade, "TRADE_CLOSED", "{order}"),
            other => panic!("{order} ended {other}"),
        }
    }
    for outcome in cancels {
        let (order, _, cancel) = outcome.unwrap();
        assert!(
            [StatusCode::OK, StatusCode::CONFLICT].contains(&cancel),
            "{order}"
        );
    }
    assert_eq!(app.stored(product).await, (held, held, 100 - held));
    assert_eq!(app.product(product).await["remaining"], 100 - held);
}

/// The order's status once no payment is on its way to it (up to 15 s).
async fn settled_status(app: &TestApp, token: &str, order: &str) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let status = app.order_status(token, order).await;
        let trade = param(&app.sandbox_notification(order), "trade_status").to_owned();
        // A paid trade for a cancelled order is a refund still on its way.
        let settling =
            status == "awaiting_payment" || (status == "cancelled" && trade == "TRADE_SUCCESS");
        if !settling || tokio::time::Instant::now() > deadline {
            return status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn with_the_gateway_down_the_sweep_leaves_an_order_whose_buyer_went_to_pay() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |c| {
        c.payment.provider = Some(ProviderKind::Alipay);
        c.alipay.app_id = Some("2021000000000001".into());
        c.alipay.private_key_file = Some(test_key_path("app_key_pkcs1.pem"));
        c.alipay.alipay_public_key_file = Some(test_key_path("alipay_public_key.pem"));
        // Nothing listens on port 9 of this machine.
        c.alipay.gateway_url = Some("http://127.0.0.1:9/gateway.do".into());
    })
    .await;
    let (product, orders) = sold(&app, 2, 2).await;
    let (token, went_to_pay) = &orders[0];
    let (status, body) = app.ask_to_pay(token, went_to_pay, Value::Null).await;
    assert_eq!(
        (status, &body["provider"]),
        (StatusCode::OK, &"alipay".into()),
        "{body}"
    );

    clock.advance(WINDOW_MS);
    assert_eq!(
        app.state.sale.expire_overdue().await.unwrap(),
        1,
        "only the other one"
    );
    assert_eq!(
        app.order_status(token, went_to_pay).await,
        "awaiting_payment",
        "its stock stays held"
    );
    assert_eq!(app.stored(product).await, (1, 1, 1));

    // Alipay's notification, signed with (the test stand-in for) Alipay's key, still pays it.
    let alipay = AppKey::parse(&test_key("alipay_key_pkcs1.pem")).unwrap();
    let notification = resign(
        &alipay,
        &Vec::new(),
        &[
            ("app_id", "2021000000000001"),
            ("out_trade_no", went_to_pay),
            ("trade_no", "2026112422001400000000000001"),
            ("total_amount", "49.99"),
            ("trade_status", "TRADE_SUCCESS"),
            ("notify_id", "gateway-down-1"),
            ("gmt_payment", &beijing::format(clock.now_ms() - 1_000)),
            ("sign_type", "RSA2"),
        ],
    );
    assert_eq!(app.notify(&notification).await, "success");
    app.wait_for_status(token, went_to_pay, "paid").await;
}

#[tokio::test]
async fn the_return_page_needs_a_genuine_signature() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (_, orders) = sold(&app, 1, 1).await;
    let (token, order) = &orders[0];
    app.open_checkout(token, order).await;
    let response = app
        .client
        .get(app.url(&format!(
            "/pay/alipay/return?out_trade_no={order}&total_amount=49.99&sign=AAAA"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

fn test_key_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/payment/alipay/testdata")
        .join(name)
}

/// A key made for these tests only (see `src/payment/alipay/testdata/README.md`).
fn test_key(name: &str) -> String {
    std::fs::read_to_string(test_key_path(name)).unwrap()
}
