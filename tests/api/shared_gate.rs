//! The stock gate in Redis, always on the local Redis whatever the run's backends: several
//! server processes share it, and a Redis that lost its data is rebuilt from the database.

use crate::support::TestDatabase;
use crate::support::{
    TestApp, code, delete_keys, fresh_prefix, once_the_gate_reopens, server_on_with,
};
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;

/// A server over `db` and the local Redis under `prefix`, with a worker inside.
async fn server_on(db: &Arc<TestDatabase>, prefix: &str) -> TestApp {
    server_on_with(db, prefix, true, None, |_| {}).await
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn two_servers_sharing_redis_and_a_database_sell_exactly_the_stock_once_per_buyer() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let first = Arc::new(server_on(&db, &prefix).await);
        let stock = 50;
        let product = first.live_product(stock, 1).await;
        // The second server starts after the product exists and finds it in Redis already.
        let second = Arc::new(server_on(&db, &prefix).await);
        let tokens = first.users(600).await;

        let barrier = Arc::new(tokio::sync::Barrier::new(tokens.len() * 2));
        let mut tasks = Vec::new();
        for token in &tokens {
            for server in [&first, &second] {
                let (server, token, barrier) = (server.clone(), token.clone(), barrier.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let (status, body) = server.buy(&token, product, 1).await;
                    (token, status, body)
                }));
            }
        }
        let mut accepted = HashSet::new();
        let mut buyers = HashSet::new();
        for task in tasks {
            let (token, status, body) = task.await.unwrap();
            match status {
                StatusCode::ACCEPTED => {
                    assert!(buyers.insert(token), "one buyer, two orders across servers");
                    let id = body["order_id"].as_str().unwrap().parse::<i64>().unwrap();
                    assert!(
                        accepted.insert(id),
                        "two servers answered the same order id"
                    );
                }
                StatusCode::CONFLICT => {
                    assert!(
                        ["sold_out", "limit_reached"].contains(&code(&body)),
                        "{body}"
                    )
                }
                other => panic!("unexpected {other}: {body}"),
            }
        }
        assert_eq!(accepted.len() as i64, stock);
        let stored: HashSet<i64> = first.live_order_ids(product).await.into_iter().collect();
        assert_eq!(stored, accepted);
        assert_eq!(first.stored(product).await, (stock, stock, 0));
        assert_eq!(second.product(product).await["remaining"], 0);
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_redis_that_lost_its_data_is_rebuilt_from_the_database_without_overselling() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let app = server_on(&db, &prefix).await;
        let product = app.live_product(3, 1).await;
        let tokens = app.users(4).await;
        app.buy_each(&tokens[..2], product).await;

        // Redis restarts empty.
        delete_keys(&format!("{prefix}*")).await;

        app.assert_gate_rebuilt_after_two_of_three_sold(product, &tokens)
            .await;
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_server_started_after_redis_lost_its_data_sells_none_of_what_a_live_server_accepted()
    {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        // Without a worker, the orders the first server accepts stay in the outbox and are lost
        // with it; only the first server's count of them is left.
        let first = server_on_with(&db, &prefix, false, None, |_| {}).await;
        let product = first.live_product(10, 1).await;
        let tokens = first.users(14).await;
        for token in &tokens[..4] {
            assert_eq!(first.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
        }
        delete_keys(&format!("{prefix}*")).await;

        let second = server_on_with(&db, &prefix, false, None, |_| {}).await;
        let mut answers = Vec::new();
        for token in &tokens[4..] {
            let (status, body) = once_the_gate_reopens(|| second.buy(token, product, 1)).await;
            answers.push((status, code(&body).to_owned()));
        }
        let accepted = answers
            .iter()
            .filter(|(status, _)| *status == StatusCode::ACCEPTED)
            .count();
        assert_eq!(accepted, 6, "{answers:?}");
        assert!(
            answers
                .iter()
                .all(|(status, code)| *status == StatusCode::ACCEPTED || code == "sold_out"),
            "{answers:?}"
        );
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn buyers_who_find_a_product_lost_by_redis_together_wait_for_one_rebuild() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let app = server_on(&db, &prefix).await;
        let product = app.live_product(1_000, 1).await;
        let tokens = app.users(400).await;
        app.buy_each(&tokens[..1], product).await;
        // The server shares its accepted units once a second, and the shares count as complete
        // once collected for 2.5 s: after that, a rebuild need not wait for them.
        tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;

        // Redis loses the product's keys, and a crowd finds it missing at once.
        delete_keys(&format!("{prefix}{{p:{product}}}*")).await;
        let misses = app.state.sale.gate_misses();
        let statuses = futures_util::future::join_all(
            tokens[1..]
                .iter()
                .map(|token| async { app.buy(token, product, 1).await.0 }),
        )
        .await;

        assert!(
            statuses
                .iter()
                .all(|status| *status == StatusCode::ACCEPTED),
            "{statuses:?}"
        );
        assert_eq!(app.state.sale.gate_misses() - misses, 1);
        assert_eq!(app.stored(product).await, (400, 400, 600));
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn stock_a_cancel_returns_on_one_server_goes_back_on_sale_on_the_other() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let first = server_on(&db, &prefix).await;
        let product = first.live_product(1, 1).await;
        let second = server_on(&db, &prefix).await;
        let tokens = first.users(3).await;
        let order = first.buy_each(&tokens[..1], product).await.remove(0).1;
        // The second server learns the product is sold out and remembers it locally.
        let (status, body) = second.buy(&tokens[1], product, 1).await;
        assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));

        assert_eq!(
            first.order_action(&tokens[0], &order, "cancel").await.0,
            StatusCode::OK
        );
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let (status, body) = second.buy(&tokens[2], product, 1).await;
            if status == StatusCode::ACCEPTED {
                break;
            }
            assert_eq!(code(&body), "sold_out");
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second server still says sold out"
            );
            // Four tries a second, within the buyer's rate limit.
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
}
