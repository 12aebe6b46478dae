//! The operator's controls of a running sale through the admin API: pausing and resuming
//! buying of a product, and ending a product's or a whole event's sale early. Each decides the
//! next buy on every server, changes no order already taken, and is kept in the audit log.

use crate::support::TestDatabase;
use crate::support::{ADMIN_TOKEN, TestApp, code, once_the_gate_reopens, rfc3339, status_and_json};
use crate::support::{fresh_prefix, server_on_with};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use seckill::domain::ProductId;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// POSTs a control (it has no body) with the admin token.
async fn control(app: &TestApp, path: &str) -> (StatusCode, Value) {
    let request = app.client.post(app.url(path)).bearer_auth(ADMIN_TOKEN);
    status_and_json(request.send().await.unwrap()).await
}

/// Pauses, resumes or ends (`action`) a product, which must answer 200 with the product.
async fn control_product(app: &TestApp, product: i64, action: &str) -> Value {
    let (status, body) = control(app, &format!("/api/v1/admin/products/{product}/{action}")).await;
    assert_eq!(status, StatusCode::OK, "{action}: {body}");
    assert_eq!(body["id"], product, "{body}");
    body
}

/// The audit log's actions, newest first.
async fn audit_actions(app: &TestApp) -> Vec<String> {
    let (status, log) = app.get_json_as(ADMIN_TOKEN, "/api/v1/admin/audit").await;
    assert_eq!(status, StatusCode::OK, "{log}");
    log.as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["action"].as_str().unwrap().to_owned())
        .collect()
}

/// A Unix-millisecond time from the API's RFC 3339.
fn ms(time: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(time.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

/// The status of an order, as its buyer sees it.
async fn order_status(app: &TestApp, token: &str, order: &str) -> Value {
    let (status, body) = app
        .get_json_as(token, &format!("/api/v1/orders/{order}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["status"].clone()
}

#[tokio::test]
async fn a_paused_product_refuses_every_buy_and_changes_nothing_until_it_is_resumed() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let tokens = app.users(2).await;
    app.buy_each(&tokens[..1], product).await;

    let paused = control_product(&app, product, "pause").await;
    assert_eq!(
        (&paused["paused"], &paused["remaining"]),
        (&json!(true), &json!(4))
    );
    let (status, body) = app.buy(&tokens[1], product, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "sale_paused")
    );
    assert_eq!(app.stored(product).await, (1, 1, 4), "nothing was bought");
    let shown = app.product(product).await;
    assert_eq!(
        (&shown["paused"], &shown["remaining"]),
        (&json!(true), &json!(4))
    );
    // Pausing a paused product answers the same, changes nothing and is not logged again.
    assert_eq!(
        control_product(&app, product, "pause").await["paused"],
        true
    );

    let resumed = control_product(&app, product, "resume").await;
    assert_eq!(resumed["paused"], false);
    assert_eq!(app.product(product).await["paused"], false);
    // The refused buy counted nothing against the buyer's limit; the earlier buyer still holds
    // theirs.
    assert_eq!(
        app.buy(&tokens[1], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    let (status, body) = app.buy(&tokens[0], product, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "limit_reached")
    );
    assert_eq!(app.stored(product).await, (2, 2, 3));
    assert_eq!(
        audit_actions(&app).await,
        [
            format!("resumed product {product}"),
            format!("paused product {product}"),
            format!("created product {product} \"Test phone\""),
        ]
    );
}

#[tokio::test]
async fn controls_of_unknown_ids_or_without_the_admin_token_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    for action in ["pause", "resume", "end"] {
        let (status, body) =
            control(&app, &format!("/api/v1/admin/products/424242/{action}")).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "unknown_product"),
            "{action}"
        );
        let (status, body) = control(&app, &format!("/api/v1/admin/products/x/{action}")).await;
        assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
        let url = app.url(&format!("/api/v1/admin/products/{product}/{action}"));
        let (status, body) = status_and_json(app.client.post(url).send().await.unwrap()).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
    }
    let (status, body) = control(&app, "/api/v1/admin/events/424242/end").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "unknown_event")
    );
    let shown = app.product(product).await;
    assert_eq!(
        (&shown["paused"], &shown["status"]),
        (&json!(false), &json!("live"))
    );
    assert_eq!(
        audit_actions(&app).await.len(),
        1,
        "only the product's creation"
    );
}

/// Two thousand buyers set off over about a second, and the operator pauses a third of the way
/// in: every buy sent after the pause's answer arrived is refused, and exactly the accepted
/// orders are stored and taken from the stock. A last hundred buyers set off only once the
/// pause has answered, so some surely come after it however slowly a loaded machine answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_buy_sent_after_a_pause_answered_is_accepted_among_two_thousand_racing_buyers() {
    let app = Arc::new(TestApp::spawn().await);
    // Enough for everybody: only the pause turns buyers away.
    let stock = 2_000;
    let product = app.live_product(stock, 1).await;
    let mut tokens = app.users(2_100).await;
    let late = tokens.split_off(2_000);
    let start = Instant::now() + Duration::from_millis(50);
    let buyers: Vec<_> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, token)| {
            let app = app.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start + Duration::from_micros(500 * i as u64)).await;
                let sent = Instant::now();
                let (status, body) = app.buy(&token, product, 1).await;
                (sent, status, body)
            })
        })
        .collect();
    tokio::time::sleep_until(start + Duration::from_millis(330)).await;
    control_product(&app, product, "pause").await;
    let pause_answered = Instant::now();
    let buyers = buyers.into_iter().chain(late.into_iter().map(|token| {
        let app = app.clone();
        tokio::spawn(async move {
            let sent = Instant::now();
            let (status, body) = app.buy(&token, product, 1).await;
            (sent, status, body)
        })
    }));

    let (mut accepted, mut sent_after) = (0, 0);
    for buyer in buyers {
        let (sent, status, body) = buyer.await.unwrap();
        match status {
            StatusCode::ACCEPTED => {
                accepted += 1;
                assert!(
                    sent < pause_answered,
                    "a buy sent after the pause answered was accepted"
                );
            }
            StatusCode::FORBIDDEN => assert_eq!(code(&body), "sale_paused", "{body}"),
            other => panic!("unexpected {other}: {body}"),
        }
        sent_after += i64::from(sent > pause_answered);
    }
    assert!(
        accepted > 0 && sent_after > 0,
        "the pause did not race the buyers: {accepted} accepted, {sent_after} sent after it"
    );
    assert_eq!(
        app.stored(product).await,
        (accepted, accepted, stock - accepted)
    );
    assert_eq!(app.product(product).await["remaining"], stock - accepted);
}

#[tokio::test]
async fn a_product_ended_early_refuses_buys_as_ended_and_keeps_the_orders_taken() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let tokens = app.users(2).await;
    let order = app.buy_each(&tokens[..1], product).await.remove(0).1;
    let created = app.product(product).await;

    let before = app.state.sale.now();
    let ended = control_product(&app, product, "end").await;
    assert_eq!(ended["status"], "ended");
    let end = ms(&ended["ends_at"]);
    assert!(before <= end && end <= app.state.sale.now(), "{ended}");
    assert_eq!(ended["starts_at"], created["starts_at"]);
    let (status, body) = app.buy(&tokens[1], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "ended"));
    assert_eq!(
        order_status(&app, &tokens[0], &order).await,
        "awaiting_payment"
    );
    assert_eq!(app.stored(product).await, (1, 1, 4));

    // Ending it again changes nothing, and is not logged again.
    assert_eq!(
        control_product(&app, product, "end").await["ends_at"],
        ended["ends_at"]
    );
    assert_eq!(
        audit_actions(&app).await[0],
        format!("ended product {product}")
    );
    assert_eq!(audit_actions(&app).await.len(), 2);
}

#[tokio::test]
async fn a_sale_ended_before_it_started_never_opens() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let (status, product) = app
        .admin_post(
            "/api/v1/admin/products",
            json!({ "name": "Later", "original_price_cents": 100, "sale_price_cents": 50,
                    "stock": 5, "starts_at": rfc3339(now + 3_600_000),
                    "ends_at": rfc3339(now + 7_200_000) }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{product}");
    let id = product["id"].as_i64().unwrap();
    let ended = control_product(&app, id, "end").await;
    assert_eq!(ended["status"], "ended");
    // A window ends after it starts: the start moved to just before the end.
    assert!(ms(&ended["starts_at"]) < ms(&ended["ends_at"]));
    assert!(ms(&ended["ends_at"]) <= app.state.sale.now());
    let token = app.users(1).await.remove(0);
    let (status, body) = app.buy(&token, id, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "ended"));
}

#[tokio::test]
async fn an_event_ended_early_ends_each_of_its_products_and_no_other() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let (status, event) = app
        .admin_post(
            "/api/v1/admin/events",
            json!({ "title": "10:00", "starts_at": rfc3339(now - 1000),
                    "ends_at": rfc3339(now + 7_200_000) }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    let event_id = event["id"].as_i64().unwrap();
    let mut products = Vec::new();
    // One selling in the event's window, one of its own that has not started.
    for window in [
        json!({}),
        json!({ "starts_at": rfc3339(now + 60_000), "ends_at": rfc3339(now + 120_000) }),
    ] {
        let mut body = json!({ "event_id": event_id, "name": "Tea", "original_price_cents": 100,
                               "sale_price_cents": 50, "stock": 5 });
        body.as_object_mut()
            .unwrap()
            .extend(window.as_object().unwrap().clone());
        let (status, product) = app.admin_post("/api/v1/admin/products", body).await;
        assert_eq!(status, StatusCode::CREATED, "{product}");
        products.push(product["id"].as_i64().unwrap());
    }
    let elsewhere = app.live_product(5, 1).await;
    let tokens = app.users(3).await;
    let order = app.buy_each(&tokens[..1], products[0]).await.remove(0).1;

    let (status, ended) = control(&app, &format!("/api/v1/admin/events/{event_id}/end")).await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(
        (&ended["id"], &ended["status"]),
        (&json!(event_id), &json!("ended"))
    );
    assert_eq!(ended["starts_at"], event["starts_at"]);
    let (_, shown) = app.get_json(&format!("/api/v1/events/{event_id}")).await;
    assert_eq!(shown["status"], "ended", "{shown}");
    for product in &products {
        assert_eq!(app.product(*product).await["status"], "ended");
        let (status, body) = app.buy(&tokens[1], *product, 1).await;
        assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "ended"));
    }
    assert_eq!(
        app.buy(&tokens[2], elsewhere, 1).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        order_status(&app, &tokens[0], &order).await,
        "awaiting_payment"
    );

    // Ending it again changes nothing, and is not logged again.
    let (status, again) = control(&app, &format!("/api/v1/admin/events/{event_id}/end")).await;
    assert_eq!(
        (status, &again["ends_at"]),
        (StatusCode::OK, &ended["ends_at"])
    );
    let actions = audit_actions(&app).await;
    assert_eq!(actions[0], format!("ended event {event_id}"));
    assert_eq!(actions.iter().filter(|a| a.starts_with("ended")).count(), 1);
}

#[tokio::test]
async fn a_paused_product_stays_paused_when_its_gate_entry_is_rebuilt_and_after_a_restart() {
    let db = Arc::new(TestDatabase::fresh().await);
    let app = TestApp::spawn_on(db.clone(), Arc::new(SystemClock), |_| {}).await;
    let product = app.live_product(3, 1).await;
    let tokens = app.users(2).await;
    app.buy_each(&tokens[..1], product).await;
    control_product(&app, product, "pause").await;

    // The gate forgets the product and loads it again from the database, as after Redis lost it.
    app.state
        .sale
        .rebuild_gate(ProductId(product))
        .await
        .unwrap();
    let (status, body) = app.buy(&tokens[1], product, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "sale_paused")
    );
    app.stop().await;

    // With the gate in Redis, the new server's is empty (a prefix of its own): it finds the
    // product lost, and reopens it once the servers' counts are collected.
    let app = TestApp::spawn_on(db, Arc::new(SystemClock), |_| {}).await;
    let (status, body) = once_the_gate_reopens(|| app.buy(&tokens[1], product, 1)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "sale_paused")
    );
    assert_eq!(app.product(product).await["paused"], true);
    control_product(&app, product, "resume").await;
    assert_eq!(
        app.buy(&tokens[1], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(app.stored(product).await, (2, 2, 1));
}

/// Waits until `server` shows `product` with `paused`, at most `within`.
async fn shown_paused_within(server: &TestApp, product: i64, paused: bool, within: Duration) {
    let deadline = Instant::now() + within;
    while server.product(product).await["paused"] != paused {
        assert!(
            Instant::now() < deadline,
            "the other server does not show paused = {paused} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_control_on_one_server_decides_the_next_buy_on_another_at_once() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let first = server_on_with(&db, &prefix, true, None, |_| {}).await;
        let product = first.live_product(10, 1).await;
        let second = server_on_with(&db, &prefix, false, None, |_| {}).await;
        let tokens = first.users(3).await;
        // Each server's catalog refreshes every second; a loaded machine may add a little.
        let refresh = Duration::from_millis(1_500);

        control_product(&first, product, "pause").await;
        let (status, body) = second.buy(&tokens[0], product, 1).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "sale_paused")
        );
        shown_paused_within(&second, product, true, refresh).await;

        control_product(&second, product, "resume").await;
        assert_eq!(
            first.buy(&tokens[0], product, 1).await.0,
            StatusCode::ACCEPTED
        );
        shown_paused_within(&first, product, false, refresh).await;

        control_product(&first, product, "end").await;
        let (status, body) = second.buy(&tokens[1], product, 1).await;
        assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "ended"));
        assert_eq!(first.stored(product).await, (1, 1, 9));
    }
}
