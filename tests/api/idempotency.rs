//! Retries with `Idempotency-Key`, as a hostile (or merely unlucky) client sends them: the same
//! buy again and again, at once, on another server, after the gate lost its state, after the
//! order was cancelled; the key reused for another buy, by another buyer, or malformed. A retry
//! gets the first order, and the stock is taken once.

use crate::support::TestDatabase;
use crate::support::{TestApp, code, once_the_gate_reopens, status_and_json};
use crate::support::{delete_keys, fresh_prefix, redis_url, server_on_with};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use seckill::domain::{IdempotencyKey, Money, Order, OrderId, OrderStatus, ProductId, Quantity};
use seckill::gate::redis::{RedisGate, Replicas};
use seckill::gate::{Reserved, StockGate};
use seckill::ids::{MAX_NODE_ID, Snowflake};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

/// `POST /api/v1/orders` as `token` with `Idempotency-Key: key`.
async fn buy(
    app: &TestApp,
    token: &str,
    product: i64,
    quantity: i64,
    key: &str,
) -> (StatusCode, Value) {
    let response = app
        .client
        .post(app.url("/api/v1/orders"))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(&json!({ "product_id": product, "quantity": quantity }))
        .send()
        .await
        .unwrap();
    status_and_json(response).await
}

/// The order id of an accepted buy.
fn accepted(answer: &(StatusCode, Value)) -> String {
    assert_eq!(answer.0, StatusCode::ACCEPTED, "{}", answer.1);
    answer.1["order_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_retried_buy_gets_the_same_order_and_the_stock_is_taken_once() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 2).await;
    let token = &app.users(1).await[0];

    let first = buy(&app, token, product, 1, "retry-1").await;
    let id = accepted(&first);
    for _ in 0..3 {
        let again = buy(&app, token, product, 1, "retry-1").await;
        assert_eq!(again, first, "a retry must get the first answer");
    }
    // Without the key, the same body is another buy.
    let (status, body) = app.buy(token, product, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_ne!(body["order_id"], id.as_str());
    assert_eq!(app.stored(product).await, (2, 2, 3));
    assert_eq!(app.product(product).await["remaining"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_copies_of_one_buy_at_once_make_one_order_and_all_get_it() {
    // The buyer's own throttle opened: every copy reaches the sale.
    let app = TestApp::spawn_with(Arc::new(SystemClock), |c| {
        c.rate_limit.per_user_per_sec = 1_000;
        c.rate_limit.per_user_burst = 1_000;
    })
    .await;
    let app = Arc::new(app);
    let product = app.live_product(10, 5).await;
    let token = app.users(1).await.remove(0);
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (app, token, barrier) = (app.clone(), token.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                buy(&app, &token, product, 2, "one-buy").await
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for task in tasks {
        ids.insert(accepted(&task.await.unwrap()));
    }
    assert_eq!(ids.len(), 1, "one key, several orders: {ids:?}");
    assert_eq!(app.stored(product).await, (1, 2, 8));
    assert_eq!(app.product(product).await["remaining"], 8);
}

#[tokio::test]
async fn another_key_or_another_buyer_is_another_buy_and_the_limit_still_holds() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 2).await;
    let tokens = app.users(2).await;

    let first = accepted(&buy(&app, &tokens[0], product, 1, "a").await);
    let second = accepted(&buy(&app, &tokens[0], product, 1, "b").await);
    assert_ne!(first, second);
    let (status, body) = buy(&app, &tokens[0], product, 1, "c").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "limit_reached")
    );
    // The refusal kept nothing: the key is free for another buy.
    let other = app.live_product(5, 1).await;
    accepted(&buy(&app, &tokens[0], other, 1, "c").await);
    // The same key from another buyer is theirs.
    let theirs = accepted(&buy(&app, &tokens[1], product, 1, "a").await);
    assert_ne!(theirs, first);
    assert_eq!(app.stored(product).await, (3, 3, 2));
}

#[tokio::test]
async fn a_key_sent_again_for_another_product_or_quantity_is_refused_and_takes_nothing() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 3).await;
    let other = app.live_product(5, 3).await;
    let token = &app.users(1).await[0];
    let id = accepted(&buy(&app, token, product, 1, "mine").await);

    for (target, quantity) in [(other, 1), (product, 2)] {
        let (status, body) = buy(&app, token, target, quantity, "mine").await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::CONFLICT, "idempotency_key_reused"),
            "{body}"
        );
    }
    // And the first buy is still what the key names.
    assert_eq!(accepted(&buy(&app, token, product, 1, "mine").await), id);
    assert_eq!(app.stored(product).await, (1, 1, 4));
    assert_eq!(app.stored(other).await, (0, 0, 5));
    assert_eq!(app.product(other).await["remaining"], 5);
}

#[tokio::test]
async fn malformed_keys_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 5).await;
    let token = &app.users(1).await[0];
    let long = "k".repeat(IdempotencyKey::MAX_LEN + 1);
    for bad in ["", "two words", "tab\there", long.as_str()] {
        let (status, body) = buy(&app, token, product, 1, bad).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_idempotency_key"),
            "{bad:?}: {body}"
        );
    }
    let odd = [
        vec![reqwest::header::HeaderValue::from_bytes("clé".as_bytes()).unwrap()],
        vec!["a".parse().unwrap(), "b".parse().unwrap()],
    ];
    for values in odd {
        let mut request = app
            .client
            .post(app.url("/api/v1/orders"))
            .bearer_auth(token)
            .json(&json!({ "product_id": product, "quantity": 1 }));
        for value in values {
            request = request.header("Idempotency-Key", value);
        }
        let (status, body) = status_and_json(request.send().await.unwrap()).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_idempotency_key"),
            "{body}"
        );
    }
    assert_eq!(app.stored(product).await, (0, 0, 5));
}

#[tokio::test]
async fn a_retry_after_a_cancel_gets_the_cancelled_order_and_buys_nothing() {
    let app = TestApp::spawn().await;
    let product = app.live_product(1, 1).await;
    let token = &app.users(1).await[0];
    let id = accepted(&buy(&app, token, product, 1, "then-cancel").await);
    let (status, body) = app.order_action(token, &id, "cancel").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, body) = buy(&app, token, product, 1, "then-cancel").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["order_id"], id.as_str());
    assert_eq!(body["status"], "cancelled");
    assert_eq!(app.stored(product).await, (0, 0, 1));
    assert_eq!(app.product(product).await["remaining"], 1);
}

#[tokio::test]
async fn the_retry_of_the_buy_that_took_the_last_unit_gets_its_order_not_sold_out() {
    let app = TestApp::spawn().await;
    let product = app.live_product(1, 1).await;
    let tokens = app.users(2).await;
    let id = accepted(&buy(&app, &tokens[0], product, 1, "last").await);
    // Another buyer finds it sold out, and this server remembers so.
    let (status, body) = app.buy(&tokens[1], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));

    assert_eq!(
        accepted(&buy(&app, &tokens[0], product, 1, "last").await),
        id
    );
    let (status, body) = buy(&app, &tokens[0], product, 1, "another").await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
    assert_eq!(app.stored(product).await, (1, 1, 0));
}

#[tokio::test]
async fn a_gate_rebuilt_from_the_database_or_restarted_still_answers_a_retry() {
    let db = Arc::new(TestDatabase::fresh().await);
    let app = TestApp::spawn_on(db.clone(), Arc::new(SystemClock), |_| {}).await;
    let product = app.live_product(3, 1).await;
    let token = app.users(1).await.remove(0);
    let id = accepted(&buy(&app, &token, product, 1, "survives").await);
    app.settle().await;

    app.state
        .sale
        .rebuild_gate(ProductId(product))
        .await
        .unwrap();
    assert_eq!(
        accepted(&buy(&app, &token, product, 1, "survives").await),
        id
    );
    app.stop().await;

    // With the gate in Redis, the new server's gate is empty (a prefix of its own): it finds
    // the product lost, and reopens it once the servers' counts are collected.
    let app = TestApp::spawn_on(db, Arc::new(SystemClock), |_| {}).await;
    let retried = once_the_gate_reopens(|| buy(&app, &token, product, 1, "survives")).await;
    assert_eq!(accepted(&retried), id);
    assert_eq!(app.stored(product).await, (1, 1, 2));
}

#[tokio::test]
async fn a_pay_call_retried_with_its_key_gets_the_same_pay_url() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_paying(clock.clone()).await;
    let product = app.live_product(2, 1).await;
    let tokens = app.users(2).await;
    let order = app.buy_each(&tokens[..1], product).await.remove(0).1;
    let other = app.buy_each(&tokens[1..], product).await.remove(0).1;
    let token = &tokens[0];
    let pay = |key: &'static str, order: String, body: Value| {
        let app = &app;
        async move {
            let mut request = app
                .client
                .post(app.url(&format!("/api/v1/orders/{order}/pay")))
                .bearer_auth(token)
                .header("Idempotency-Key", key);
            if !body.is_null() {
                request = request.json(&body);
            }
            status_and_json(request.send().await.unwrap()).await
        }
    };

    let (status, first) = pay("pay-1", order.clone(), Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    // The URL is signed with the time to the second: a new one a second later differs.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    assert_ne!(first["pay_url"], app.pay_url(token, &order).await);
    assert_eq!(
        pay("pay-1", order.clone(), Value::Null).await,
        (StatusCode::OK, first.clone())
    );
    // Another key is another call.
    let (status, second) = pay("pay-2", order.clone(), Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_ne!(second["pay_url"], first["pay_url"]);

    // The key for another order or another channel is refused; another buyer's order stays
    // unknown to this one.
    let (status, body) = pay("pay-4", other.clone(), Value::Null).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "order_not_found")
    );
    let another = accepted(&app.buy(&tokens[0], app.live_product(1, 1).await, 1).await);
    app.settle().await;
    for (target, body) in [
        (another, Value::Null),
        (order.clone(), json!({ "channel": "wap" })),
    ] {
        let (status, body) = pay("pay-1", target, body).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::CONFLICT, "idempotency_key_reused"),
            "{body}"
        );
    }
    // Whatever became of the order since, the retry gets the first answer.
    app.order_action(token, &order, "cancel").await;
    assert_eq!(
        pay("pay-1", order.clone(), Value::Null).await,
        (StatusCode::OK, first)
    );
    let (status, body) = pay("pay-3", order, Value::Null).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "order_cancelled")
    );
    let (status, body) = pay("", other, Value::Null).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_idempotency_key")
    );
    // The two answers kept go a day later.
    clock.advance(IdempotencyKey::LIFETIME_MS + 1);
    assert_eq!(
        app.state.sale.forget_expired_pay_answers().await.unwrap(),
        2
    );
}

/// A server on a fresh database and Redis prefix (the local Redis, or the run's cluster,
/// whatever the run's backends), with a worker inside.
async fn first_server() -> (Arc<TestDatabase>, String, TestApp) {
    let db = Arc::new(TestDatabase::fresh().await);
    let prefix = fresh_prefix();
    let first = server_on_with(&db, &prefix, true, None, |_| {}).await;
    (db, prefix, first)
}

/// Another server sharing `db` and the Redis keys under `prefix`, started after the products
/// exist (so it knows them from the start).
async fn second_server(db: &Arc<TestDatabase>, prefix: &str) -> TestApp {
    server_on_with(db, prefix, false, None, |_| {}).await
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_buy_retried_on_another_server_gets_the_same_order() {
        require(Need::RedisServer);
        let (db, prefix, first) = first_server().await;
        let product = first.live_product(3, 2).await;
        let other = first.live_product(3, 2).await;
        let second = second_server(&db, &prefix).await;
        let token = &first.users(1).await[0];
        let answer = buy(&first, token, product, 1, "roaming").await;
        let id = accepted(&answer);
        assert_eq!(buy(&second, token, product, 1, "roaming").await, answer);
        // Stored by the first server's worker meanwhile: the second answers the order as stored.
        first.settle().await;
        assert_eq!(
            accepted(&buy(&second, token, product, 1, "roaming").await),
            id
        );
        // The key sent to the other server for another product is refused there too.
        let (status, body) = buy(&second, token, other, 1, "roaming").await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::CONFLICT, "idempotency_key_reused"),
            "{body}"
        );
        assert_eq!(first.stored(product).await, (1, 1, 2));
        assert_eq!(first.stored(other).await, (0, 0, 3));
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_buy_whose_server_died_after_the_gate_is_answered_on_retry_with_its_order() {
        require(Need::RedisServer);
        let (db, prefix, first) = first_server().await;
        let product = first.live_product(3, 1).await;
        let second = second_server(&db, &prefix).await;
        let tokens = first.users(2).await;
        // Loads the product into the gate.
        accepted(&first.buy(&tokens[1], product, 1).await);

        // The dead server's buy: the gate's step ran (stock taken, order in the outbox, key kept)
        // and no answer ever left.
        let now = first.state.sale.now();
        let user = first
            .state
            .auth
            .tokens
            .verify(&tokens[0], now)
            .unwrap()
            .user_id;
        let ids = Snowflake::new(MAX_NODE_ID, Arc::new(SystemClock)).unwrap();
        let price = Money::from_cents(4_999).unwrap();
        let order = Order {
            id: OrderId(ids.next_id()),
            user_id: user,
            product_id: ProductId(product),
            product_name: "Test phone".into(),
            unit_price: price,
            quantity: Quantity::parse(1).unwrap(),
            total: price,
            status: OrderStatus::AwaitingPayment,
            created_at: now,
            pay_before: now + 900_000,
            paid_at: None,
            cancelled_at: None,
            pay_started_at: None,
            idempotency_key: Some(IdempotencyKey::parse("lost-answer").unwrap()),
        };
        let link = seckill::redis_link::connect(&redis_url()).await.unwrap();
        let outbox_max = seckill::config::Config::default().outbox_max_orders;
        let dead = RedisGate::new(link, &prefix, outbox_max, Replicas::NONE);
        assert_eq!(
            dead.reserve(&order, now).await.unwrap(),
            Reserved::Taken { remaining: 1 }
        );

        let (status, body) = buy(&second, &tokens[0], product, 1, "lost-answer").await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["order_id"], order.id.to_string());
        assert_eq!(first.stored(product).await, (2, 2, 1));
        assert_eq!(first.product(product).await["remaining"], 1);
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_redis_that_lost_its_data_still_answers_a_retry_from_the_database() {
        require(Need::RedisServer);
        let (db, prefix, first) = first_server().await;
        let product = first.live_product(3, 1).await;
        let second = second_server(&db, &prefix).await;
        let token = &first.users(1).await[0];
        let id = accepted(&buy(&first, token, product, 1, "before-the-loss").await);
        first.settle().await;

        // Redis restarts empty: every key of these servers is gone, claims included.
        delete_keys(&format!("{prefix}*")).await;

        let retry =
            once_the_gate_reopens(|| buy(&second, token, product, 1, "before-the-loss")).await;
        assert_eq!(accepted(&retry), id);
        assert_eq!(first.stored(product).await, (1, 1, 2));
    }
}
