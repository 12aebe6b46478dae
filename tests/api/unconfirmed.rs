//! `redis_wait_replicas`: a buy is answered `202` only once the Redis master's replica has it.
//! A replica that stops answering (its process stopped, as a hung host) turns the buys into
//! `503 unconfirmed`: taken on the master, so the order may stand, but never announced as
//! bought. The worker stores none of them while the replica lacks them; once it catches up they
//! are stored, and a retry with the same `Idempotency-Key` is answered with its order.
//!
//! The test brings its own Redis master and replica (see `support/private_redis.rs`), so it
//! runs once per `scripts/test`, where `SECKILL_TEST_REDIS=1` names a single Redis.

mod needs_single_redis {
    use crate::support::private_redis::{Persistence, PrivateRedis};
    use crate::support::{Need, TestApp, code, fresh_prefix, require, status_and_json};
    use reqwest::StatusCode;
    use seckill::clock::SystemClock;
    use serde_json::{Value, json};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::time::Instant;

    /// `POST /api/v1/orders` of one unit as `token`, with `key` as its `Idempotency-Key` if
    /// any: the status, the body and the `Retry-After` header.
    async fn buy(
        app: &TestApp,
        token: &str,
        product: i64,
        key: Option<&str>,
    ) -> (StatusCode, Value, Option<String>) {
        let mut request = app
            .client
            .post(app.url("/api/v1/orders"))
            .bearer_auth(token)
            .json(&json!({ "product_id": product, "quantity": 1 }));
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await.unwrap();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|value| value.to_str().unwrap().to_owned());
        let (status, body) = status_and_json(response).await;
        (status, body, retry_after)
    }

    /// The ids of `product`'s orders in the database, read without waiting for the outbox.
    async fn stored_ids(app: &TestApp, product: i64) -> Vec<i64> {
        let pool = app.pool().await;
        let ids = sqlx::query_scalar(app.db.sql("SELECT id FROM orders WHERE product_id = ?"))
            .bind(product)
            .fetch_all(&pool)
            .await
            .unwrap();
        pool.close().await;
        ids
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a single Redis: run by scripts/test on sqlite redis, postgres redis and mysql redis amqp"]
    async fn buys_the_replica_has_not_acknowledged_are_unconfirmed_and_kept_once_it_has() {
        require(Need::SingleRedis);
        let master = PrivateRedis::start(Persistence::None).await;
        let replica = PrivateRedis::replica_of(&master).await;
        let url = master.url();
        let app = TestApp::spawn_with(Arc::new(SystemClock), |config| {
            config.redis_url = Some(url);
            config.redis_key_prefix = fresh_prefix();
            config.run_worker = true;
            config.redis_wait_replicas = 1;
            config.redis_wait_timeout_ms = 100;
            config.claim_after_ms = 300;
        })
        .await;
        let product = app.live_product(10, 3).await;
        let tokens = app.users(2).await;

        let (status, first, _) = buy(&app, &tokens[0], product, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{first}");
        app.settle().await;

        replica.freeze(true);
        let (status, body, retry_after) = buy(&app, &tokens[0], product, Some("k-1")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(code(&body), "unconfirmed");
        assert_eq!(retry_after.as_deref(), Some("1"));
        let (status, body, _) = buy(&app, &tokens[1], product, None).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::SERVICE_UNAVAILABLE, "unconfirmed")
        );
        // The retry is not answered as bought either while the replica lacks the order.
        let (status, body, _) = buy(&app, &tokens[0], product, Some("k-1")).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::SERVICE_UNAVAILABLE, "unconfirmed")
        );
        // Taken on the master: the units are gone, and the worker stores nothing the replica
        // lacks, however long it waits.
        assert_eq!(app.product(product).await["remaining"], 7);
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(stored_ids(&app, product).await.len(), 1);

        replica.freeze(false);
        let (status, retried, _) = buy(&app, &tokens[0], product, Some("k-1")).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{retried}");
        assert_ne!(retried["order_id"], first["order_id"]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while stored_ids(&app, product).await.len() < 3 {
            assert!(
                Instant::now() < deadline,
                "the unconfirmed orders were not stored once the replica caught up"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stored = stored_ids(&app, product).await;
        let retried: i64 = retried["order_id"].as_str().unwrap().parse().unwrap();
        assert!(stored.contains(&retried), "{retried} not in {stored:?}");
        let (orders, units, stock) = app.stored(product).await;
        assert_eq!((orders, units, stock), (3, 3, 7));
        app.stop().await;
        replica.stop().await;
        master.stop().await;
    }
}
