//! The cluster pipeline's own promises: orders waiting in the outbox count when the gate is
//! rebuilt, and RabbitMQ's delay queue cancels an unpaid order by itself.

use crate::backend::TestDatabase;
use crate::helpers::{TestApp, code};
use crate::shared_gate::{fresh_prefix, redis_url};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use std::sync::Arc;
use std::time::Duration;

async fn redis() -> seckill::redis_link::RedisLink {
    seckill::redis_link::connect(&redis_url()).await.unwrap()
}

#[tokio::test]
async fn orders_waiting_in_the_outbox_count_when_the_gate_is_rebuilt() {
    let db = Arc::new(TestDatabase::fresh().await);
    let prefix = fresh_prefix();
    let spawn = |worker: bool| {
        let prefix = prefix.clone();
        TestApp::spawn_on(db.clone(), Arc::new(SystemClock), move |c| {
            c.redis_url = Some(redis_url());
            c.redis_key_prefix = prefix;
            c.run_worker = worker;
        })
    };
    let app = spawn(false).await;
    let product = app.live_product(3, 1).await;
    let tokens = app.users(4).await;
    for token in &tokens[..2] {
        assert_eq!(app.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
    }

    // The gate's counters vanish (evicted, or lost in a failover) while both orders still wait
    // in the outbox, not yet in the database.
    // (Two keys of one hash tag: one command on a cluster too.)
    let _: () = redis::cmd("DEL")
        .arg(format!("{prefix}{{p:{product}}}:sale"))
        .arg(format!("{prefix}{{p:{product}}}:buyers"))
        .query_async(&mut redis().await)
        .await
        .unwrap();
    let (status, body) = app.buy(&tokens[0], product, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "limit_reached")
    );
    assert_eq!(app.product(product).await["remaining"], 1);
    assert_eq!(
        app.buy(&tokens[2], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    let (status, body) = app.buy(&tokens[3], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));

    let worker = spawn(true).await;
    assert_eq!(worker.stored(product).await, (3, 3, 0));
}

#[tokio::test]
async fn the_delay_queue_alone_cancels_an_unpaid_order_when_its_window_closes() {
    let db = Arc::new(TestDatabase::fresh().await);
    let prefix = fresh_prefix();
    // Another process leads the scheduler, so this server's deadline sweep never runs: only
    // the delay queue can cancel.
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}{{leader}}"))
        .arg("another-process")
        .arg("EX")
        .arg(120)
        .query_async(&mut redis().await)
        .await
        .unwrap();
    let amqp_url = std::env::var("SECKILL_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let amqp_prefix = format!("{}.", prefix.replace(':', "."));
    let app = TestApp::spawn_on(db, Arc::new(SystemClock), move |c| {
        c.redis_url = Some(redis_url());
        c.redis_key_prefix = prefix;
        c.run_worker = true;
        c.amqp_url = Some(amqp_url);
        c.amqp_prefix = amqp_prefix;
        c.amqp_queue_expiry_secs = Some(600);
        c.payment_window_secs = 1;
    })
    .await;
    let product = app.live_product(1, 1).await;
    let tokens = app.users(2).await;
    let order = app.buy_each(&tokens[..1], product).await.remove(0).1;
    assert_eq!(app.stored(product).await, (1, 1, 0));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, body) = app
            .get_json_as(&tokens[0], &format!("/api/v1/orders/{order}"))
            .await;
        if body["status"] == "cancelled" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(app.stored(product).await, (0, 0, 1));
    assert_eq!(
        app.buy(&tokens[1], product, 1).await.0,
        StatusCode::ACCEPTED
    );
}
