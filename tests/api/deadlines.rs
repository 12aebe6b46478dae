//! Payment windows: unpaid orders are cancelled at their deadline and their stock returns
//! exactly once; pay and cancel racing each other settle on exactly one outcome. Time is moved
//! with a manual clock, never slept through; only the server's own once-a-second sweep is
//! waited for.

use crate::helpers::{TestApp, code};
use reqwest::StatusCode;
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
async fn paying_after_the_deadline_fails_and_cancels_the_order() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |_| {}).await;
    let product = app.live_product(5, 1).await;
    let token = &app.users(1).await[0];
    let order_id = &app.buy_each(std::slice::from_ref(token), product).await[0].1;
    clock.advance(WINDOW_MS);
    let (status, body) = app.order_action(token, order_id, "pay").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        ["payment_window_closed", "order_cancelled"].contains(&code(&body)),
        "{body}"
    );
    assert_eq!(app.stored(product).await, (0, 0, 5));
    assert_eq!(app.product(product).await["remaining"], 5);
}

#[tokio::test]
async fn a_paid_order_is_never_cancelled_by_its_deadline() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |_| {}).await;
    let product = app.live_product(5, 1).await;
    let token = &app.users(1).await[0];
    let order_id = &app.buy_each(std::slice::from_ref(token), product).await[0].1;
    let (status, paid) = app.order_action(token, order_id, "pay").await;
    assert_eq!((status, &paid["status"]), (StatusCode::OK, &"paid".into()));
    // The answer is the order as stored, paid_at included.
    let (_, stored) = app
        .get_json_as(token, &format!("/api/v1/orders/{order_id}"))
        .await;
    assert_eq!(paid, stored);
    assert!(paid["paid_at"].is_string(), "{paid}");
    // Paying again is harmless; cancelling a paid order is refused.
    assert_eq!(
        app.order_action(token, order_id, "pay").await.0,
        StatusCode::OK
    );
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
async fn pay_and_cancel_racing_on_the_same_orders_settle_on_exactly_one_outcome() {
    let app = Arc::new(TestApp::spawn().await);
    let stock = 200;
    let product = app.live_product(stock, 1).await;
    let tokens = app.users(stock as usize).await;
    let orders = app.buy_each(&tokens, product).await;
    let races: Vec<_> = orders
        .into_iter()
        .map(|(token, id)| {
            let app = app.clone();
            tokio::spawn(async move {
                let (pay, cancel) = tokio::join!(
                    app.order_action(&token, &id, "pay"),
                    app.order_action(&token, &id, "cancel")
                );
                (pay, cancel)
            })
        })
        .collect();
    let mut paid = 0;
    for race in races {
        let ((pay_status, pay_body), (cancel_status, cancel_body)) = race.await.unwrap();
        match (pay_status.as_u16(), cancel_status.as_u16()) {
            (200, 409) => {
                assert_eq!(code(&cancel_body), "already_paid");
                paid += 1;
            }
            (409, 200) => assert_eq!(code(&pay_body), "order_cancelled"),
            other => panic!("both or neither won: {other:?} {pay_body} {cancel_body}"),
        }
    }
    let (orders_left, units, db_stock) = app.stored(product).await;
    assert_eq!((orders_left, units), (paid, paid));
    assert_eq!(
        db_stock,
        stock - paid,
        "each cancel returned its unit exactly once"
    );
    assert_eq!(app.product(product).await["remaining"], stock - paid);
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
