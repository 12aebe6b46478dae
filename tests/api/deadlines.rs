//! Payment windows: unpaid orders are cancelled at their deadline and their stock returns
//! exactly once, and paid ones never are (payments racing cancels: `payments.rs`). Time is moved
//! with a manual clock, never slept through; only the server's own once-a-second sweep is
//! waited for.

use crate::support::{TestApp, code};
use reqwest::StatusCode;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

const WINDOW_MS: i64 = 15 * 60 * 1000;

#[tokio::test]
async fn the_servers_own_sweep_cancels_an_unpaid_order_at_its_deadline_and_the_stock_returns() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |_| {}).await;
    let product = app.live_product(1, 1).await;
    let token = &app.users(1).await[0];
    let order_id = &app.buy_each(std::slice::from_ref(token), product).await[0].1;

    clock.advance(WINDOW_MS - 1);
    assert_eq!(
        app.state.sale.expire_overdue().await.unwrap(),
        0,
        "not yet due"
    );
    assert_eq!(app.product(product).await["remaining"], 0);

    // Nothing in the test cancels from here on: the server's once-a-second housekeeping must
    // find the overdue order by itself.
    clock.advance(1);
    wait_until_cancelled_and_back_on_sale(&app, token, order_id, product).await;
    assert_eq!(app.stored(product).await, (0, 0, 1));

    // The same buyer may buy again, and the stock is back exactly once.
    assert_eq!(app.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
    let (status, body) = app.buy(&app.users(1).await[0], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
}

/// Waits (up to 10 s, ten of the sweep's periods) until the buyer sees `order` cancelled and
/// its unit shows as on sale again.
async fn wait_until_cancelled_and_back_on_sale(
    app: &TestApp,
    token: &str,
    order: &str,
    product: i64,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = app
            .get_json_as(token, &format!("/api/v1/orders/{order}"))
            .await;
        let remaining = &app.product(product).await["remaining"];
        if body["status"] == "cancelled" && remaining == 1 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no sweep cancelled the overdue order: {body}, remaining {remaining}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn asking_to_pay_after_the_deadline_is_refused_and_the_sweep_cancels_the_order() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_paying(clock.clone()).await;
    let product = app.live_product(5, 1).await;
    let token = &app.users(1).await[0];
    let order_id = &app.buy_each(std::slice::from_ref(token), product).await[0].1;
    clock.advance(WINDOW_MS);
    let (status, body) = app.ask_to_pay(token, order_id, Value::Null).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "payment_window_closed")
    );
    assert_eq!(app.state.sale.expire_overdue().await.unwrap(), 1);
    assert_eq!(app.stored(product).await, (0, 0, 5));
    assert_eq!(app.product(product).await["remaining"], 5);
}

#[tokio::test]
async fn a_paid_order_is_never_cancelled_by_its_deadline() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_paying(clock.clone()).await;
    let product = app.live_product(5, 1).await;
    let token = &app.users(1).await[0];
    let order_id = &app.buy_each(std::slice::from_ref(token), product).await[0].1;
    app.pay_at_sandbox(token, order_id).await;
    let (_, paid) = app
        .get_json_as(token, &format!("/api/v1/orders/{order_id}"))
        .await;
    assert!(paid["paid_at"].is_string(), "{paid}");
    let (status, body) = app.order_action(token, order_id, "cancel").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_paid")
    );
    clock.advance(2 * WINDOW_MS);
    assert_eq!(app.state.sale.expire_overdue().await.unwrap(), 0);
    assert_eq!(app.stored(product).await, (1, 1, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_deadline_sweep_racing_buyers_cancels_returns_each_unit_once() {
    let clock = TestApp::manual_clock();
    let app = Arc::new(TestApp::spawn_with(clock.clone(), |_| {}).await);
    let stock = 100;
    let product = app.live_product(stock, 1).await;
    let tokens = app.users(stock as usize).await;
    let orders = app.buy_each(&tokens, product).await;
    clock.advance(WINDOW_MS);
    let sweeps: Vec<_> = (0..4)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.state.sale.expire_overdue().await.unwrap() })
        })
        .collect();
    let cancels: Vec<_> = orders
        .into_iter()
        .map(|(token, id)| {
            let app = app.clone();
            tokio::spawn(async move { app.order_action(&token, &id, "cancel").await.0 })
        })
        .collect();
    for sweep in sweeps {
        sweep.await.unwrap();
    }
    for cancel in cancels {
        assert_eq!(cancel.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(app.stored(product).await, (0, 0, stock));
    assert_eq!(app.product(product).await["remaining"], stock);
}
