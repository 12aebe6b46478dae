//! The flash-sale invariants under real concurrency: thousands of buyers at once over HTTP.

use crate::support::{TestApp, code};
use reqwest::StatusCode;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Fires one buy per (token, quantity) all at once and returns each answer with its buyer.
async fn stampede(
    app: &Arc<TestApp>,
    product: i64,
    attempts: Vec<(String, i64)>,
) -> Vec<(String, i64, StatusCode, serde_json::Value)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(attempts.len()));
    let tasks: Vec<_> = attempts
        .into_iter()
        .map(|(token, quantity)| {
            let app = app.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let (status, body) = app.buy(&token, product, quantity).await;
                (token, quantity, status, body)
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_thousand_buyers_clicking_twice_buy_exactly_the_stock_once_each() {
    let app = Arc::new(TestApp::spawn().await);
    let stock = 100;
    let product = app.live_product(stock, 1).await;
    let tokens = app.users(2_000).await;
    // Every buyer clicks twice at the same instant.
    let attempts = tokens
        .iter()
        .flat_map(|t| [(t.clone(), 1), (t.clone(), 1)])
        .collect();

    let results = stampede(&app, product, attempts).await;

    let mut accepted_ids = HashSet::new();
    let mut per_buyer: HashMap<&str, u32> = HashMap::new();
    for (token, _, status, body) in &results {
        match status.as_u16() {
            202 => {
                assert_eq!(body["status"], "awaiting_payment");
                assert!(accepted_ids.insert(body["order_id"].as_str().unwrap().to_owned()));
                *per_buyer.entry(token).or_default() += 1;
            }
            409 => assert!(
                ["sold_out", "limit_reached"].contains(&code(body)),
                "unexpected rejection {body}"
            ),
            other => panic!("unexpected status {other}: {body}"),
        }
    }
    assert_eq!(
        accepted_ids.len() as i64,
        stock,
        "exactly the stock is sold"
    );
    assert!(per_buyer.values().all(|&n| n == 1), "nobody buys twice");

    let (orders, units, db_stock) = app.stored(product).await;
    assert_eq!((orders, units, db_stock), (stock, stock, 0));
    let stored: HashSet<String> = app
        .live_order_ids(product)
        .await
        .iter()
        .map(i64::to_string)
        .collect();
    assert_eq!(
        stored, accepted_ids,
        "every accepted order, and only those, is stored"
    );
    assert_eq!(app.product(product).await["remaining"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multi_unit_orders_never_oversell_and_the_last_unit_still_sells() {
    let app = Arc::new(TestApp::spawn().await);
    let stock = 101;
    let product = app.live_product(stock, 3).await;
    let tokens = app.users(1_000).await;
    let attempts = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), (i % 3) as i64 + 1))
        .collect();

    let results = stampede(&app, product, attempts).await;

    let sold: i64 = results
        .iter()
        .filter(|r| r.2 == StatusCode::ACCEPTED)
        .map(|r| r.1)
        .sum();
    assert!(sold <= stock, "sold {sold} of {stock}");
    let (_, units, db_stock) = app.stored(product).await;
    assert_eq!(units, sold);
    assert_eq!(db_stock, stock - sold);

    // Whatever is left goes one unit at a time, down to the very last one.
    let left = stock - sold;
    let mop_up = app.users(left as usize + 1).await;
    for token in &mop_up[..left as usize] {
        let (status, body) = app.buy(token, product, 1).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let (status, body) = app.buy(&mop_up[left as usize], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
    let (_, units, db_stock) = app.stored(product).await;
    assert_eq!((units, db_stock), (stock, 0));
}

#[tokio::test]
async fn a_buyer_may_hold_up_to_the_per_user_limit_in_several_orders() {
    let app = TestApp::spawn().await;
    let product = app.live_product(10, 2).await;
    let token = &app.users(1).await[0];
    assert_eq!(app.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
    assert_eq!(app.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
    let (status, body) = app.buy(token, product, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "limit_reached")
    );
    let (status, body) = app.buy(&app.users(1).await[0], product, 3).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "limit_reached")
    );
}

#[tokio::test]
async fn a_sold_out_product_sells_again_after_a_cancel_or_new_stock() {
    let app = TestApp::spawn().await;
    let product = app.live_product(1, 1).await;
    let tokens = app.users(3).await;
    let (_, order) = app.buy(&tokens[0], product, 1).await;
    let (status, body) = app.buy(&tokens[1], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));

    let order_id = order["order_id"].as_str().unwrap();
    let (status, _) = app.order_action(&tokens[0], order_id, "cancel").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        app.buy(&tokens[1], product, 1).await.0,
        StatusCode::ACCEPTED
    );

    let (status, body) = app
        .admin_post(
            &format!("/api/v1/admin/products/{product}/stock"),
            serde_json::json!({ "quantity": 1 }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["stock_total"], 2);
    let shown = app.product(product).await;
    assert_eq!(
        (&shown["stock_total"], &shown["remaining"]),
        (&2.into(), &1.into())
    );
    assert_eq!(
        app.buy(&tokens[2], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(app.stored(product).await, (2, 2, 0));
}

#[tokio::test]
async fn buys_outside_the_sale_window_are_refused() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let token = &app.users(1).await[0];
    for (start, end, expected) in [
        (now + 60_000, now + 120_000, "not_started"),
        (now + 86_400_000, now + 90_000_000, "not_started"),
        (now - 120_000, now - 60_000, "ended"),
    ] {
        let (status, body) = app
            .admin_post(
                "/api/v1/admin/products",
                serde_json::json!({
                    "name": "Later", "original_price_cents": 100, "sale_price_cents": 50,
                    "stock": 5, "starts_at": crate::support::rfc3339(start),
                    "ends_at": crate::support::rfc3339(end),
                }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (status, body) = app.buy(token, body["id"].as_i64().unwrap(), 1).await;
        assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, expected));
    }
}

#[tokio::test]
async fn a_sale_opens_by_itself_at_its_start() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |_| {}).await;
    let now = app.state.sale.now();
    let (_, body) = app
        .admin_post(
            "/api/v1/admin/products",
            serde_json::json!({
                "name": "Soon", "original_price_cents": 100, "sale_price_cents": 50, "stock": 5,
                "starts_at": crate::support::rfc3339(now + 10_000),
                "ends_at": crate::support::rfc3339(now + 20_000),
            }),
        )
        .await;
    let product = body["id"].as_i64().unwrap();
    let token = &app.users(1).await[0];
    assert_eq!(app.buy(token, product, 1).await.0, StatusCode::FORBIDDEN);
    clock.advance(10_000);
    assert_eq!(app.product(product).await["status"], "live");
    assert_eq!(app.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
    clock.advance(10_000);
    let (status, body) = app.buy(&app.users(1).await[0], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "ended"));
}

#[tokio::test]
async fn products_far_in_the_future_are_preheated_by_the_scheduler_before_they_start() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_with(clock.clone(), |c| c.preheat_secs = 60).await;
    let now = app.state.sale.now();
    let (_, body) = app
        .admin_post(
            "/api/v1/admin/products",
            serde_json::json!({
                "name": "Tomorrow", "original_price_cents": 100, "sale_price_cents": 50,
                "stock": 5, "starts_at": crate::support::rfc3339(now + 3_600_000),
                "ends_at": crate::support::rfc3339(now + 7_200_000),
            }),
        )
        .await;
    let product = body["id"].as_i64().unwrap();
    assert_eq!(
        gate_units(&app, product).await,
        None,
        "not due an hour ahead"
    );

    // Into the preheat lead: nothing in the test loads the product and nobody buys, so only
    // the server's once-a-second scheduler can put it in the gate.
    clock.advance(3_600_000 - 30_000);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while gate_units(&app, product).await != Some(5) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the scheduler did not preheat the product within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    clock.advance(30_000);
    let token = &app.users(1).await[0];
    assert_eq!(app.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
}

/// The units the stock gate holds for `product`, as the reconcile audit reads them: `None`
/// until the product is loaded into the gate.
async fn gate_units(app: &TestApp, product: i64) -> Option<i64> {
    let audits = app.state.sale.audit().await.unwrap();
    let audit = audits.iter().find(|a| a.product.id.0 == product).unwrap();
    audit.gate.map(|gate| gate.remaining)
}

#[tokio::test]
async fn a_bot_hammering_the_buy_button_is_throttled_with_retry_after() {
    let app = TestApp::spawn().await;
    let product = app.live_product(1_000, 1).await;
    let token = &app.users(1).await[0];
    let mut throttled = None;
    for _ in 0..30 {
        let response = app
            .client
            .post(app.url("/api/v1/orders"))
            .bearer_auth(token)
            .json(&serde_json::json!({ "product_id": product, "quantity": 1 }))
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            throttled = Some(response);
            break;
        }
    }
    let response = throttled.expect("30 buys in a burst are throttled");
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(code(&body), "rate_limited");
    assert_eq!(
        app.stored(product).await.0,
        1,
        "only the first buy went through"
    );
}

#[tokio::test]
async fn behind_a_named_proxy_header_each_client_address_has_its_own_throttle() {
    let app = TestApp::spawn_with(std::sync::Arc::new(seckill::clock::SystemClock), |c| {
        c.client_ip_header = Some("x-forwarded-for".parse().unwrap());
        c.rate_limit.per_ip_per_sec = 1;
        c.rate_limit.per_ip_burst = 1;
    })
    .await;
    let product = app.live_product(100, 1).await;
    let tokens = app.users(3).await;
    let attempt = |token: &str, forwarded: &str| {
        app.client
            .post(app.url("/api/v1/orders"))
            .bearer_auth(token)
            .header("x-forwarded-for", forwarded)
            .json(&serde_json::json!({ "product_id": product, "quantity": 1 }))
            .send()
    };
    assert_eq!(
        attempt(&tokens[0], "10.0.0.1").await.unwrap().status(),
        StatusCode::ACCEPTED
    );
    // A client cannot escape by prepending addresses: only the proxy's last entry counts.
    let spoofed = attempt(&tokens[1], "1.2.3.4, 10.0.0.1").await.unwrap();
    assert_eq!(spoofed.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        attempt(&tokens[2], "10.0.0.2").await.unwrap().status(),
        StatusCode::ACCEPTED
    );
}
