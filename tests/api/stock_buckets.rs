//! A product's stock split into buckets in Redis: no unit stranded in a bucket whose buyers
//! stopped coming, and the per-user limit kept across buckets. Runs on the run's Redis, a
//! cluster in the cluster run (where the buckets sit on different masters).

use crate::support::{
    TestApp, TestDatabase, code, delete_keys, fresh_prefix, once_the_gate_reopens, server_on_with,
};
use reqwest::StatusCode;
use seckill::domain::{StockBuckets, UserId};
use seckill::gate::redis::home_bucket;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// One unit bought as a real client does: a `503` (a bucket being refilled, the outbox full) is
/// tried again after a moment. The final status and error code, and the order id if any.
async fn buy_until_answered(
    app: &TestApp,
    token: &str,
    product: i64,
) -> (StatusCode, String, Option<i64>) {
    for _ in 0..600 {
        let (status, body) = app.buy(token, product, 1).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let order = body["order_id"].as_str().and_then(|id| id.parse().ok());
        return (status, code(&body).to_owned(), order);
    }
    panic!("a buy answered 503 for 30 s");
}

/// `n` users of `candidates` (id, token), nine in ten of them at home in bucket 0 or 1 of
/// `buckets`: the crowd a few buckets draw while the others' stock waits.
fn skewed(candidates: Vec<(UserId, String)>, buckets: StockBuckets, n: usize) -> Vec<String> {
    let (hot, cold): (Vec<_>, Vec<_>) = candidates
        .into_iter()
        .partition(|(user, _)| home_bucket(*user, buckets) < 2);
    let from_hot = n * 9 / 10;
    assert!(hot.len() >= from_hot && cold.len() >= n - from_hot);
    hot.into_iter()
        .take(from_hot)
        .chain(cold.into_iter().take(n - from_hot))
        .map(|(_, token)| token)
        .collect()
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn with_demand_equal_to_the_stock_every_buyer_gets_one_whatever_their_bucket() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let app = Arc::new(server_on_with(&db, &prefix, true, None, |_| {}).await);
        let (stock, buckets) = (240, StockBuckets::parse(12).unwrap());
        let product = app.live_product_in(stock, 1, 12).await;
        // 2,000 candidates hold about 333 at home in buckets 0 and 1: 216 are needed there,
        // while those two buckets hold 40 units.
        let buyers = skewed(app.users_with_ids(2_000).await, buckets, stock as usize);

        let barrier = Arc::new(tokio::sync::Barrier::new(buyers.len()));
        let mut tasks = Vec::new();
        for token in buyers {
            let (app, barrier) = (app.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                buy_until_answered(&app, &token, product).await
            }));
        }
        let mut orders = HashSet::new();
        for task in tasks {
            let (status, code, order) = task.await.unwrap();
            assert_eq!(status, StatusCode::ACCEPTED, "a buyer was answered {code}");
            assert!(orders.insert(order.unwrap()), "one order id answered twice");
        }
        assert_eq!(orders.len() as i64, stock);
        assert_eq!(app.stored(product).await, (stock, stock, 0));
        // Only now is it sold out, for everybody.
        let late = app.users(1).await;
        let (status, code, _) = buy_until_answered(&app, &late[0], product).await;
        assert_eq!((status, code.as_str()), (StatusCode::CONFLICT, "sold_out"));
        assert_eq!(app.product(product).await["remaining"], 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn with_ten_times_the_demand_two_servers_sell_exactly_the_stock_within_each_limit() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let first = Arc::new(server_on_with(&db, &prefix, true, None, |_| {}).await);
        let (stock, limit) = (150, 2);
        let product = first.live_product_in(stock, limit, 12).await;
        let second = Arc::new(server_on_with(&db, &prefix, true, None, |_| {}).await);
        // 750 buyers, each trying for one unit three times through alternating servers: 2,250
        // tries for 150 units.
        let mut buyers = first.users(750).await;
        // Forty of them first, together: each gets the limit, two, across buckets and servers,
        // and no third.
        let mut early = Vec::new();
        for (i, token) in buyers.drain(..40).enumerate() {
            let servers = [first.clone(), second.clone()];
            early.push(tokio::spawn(async move {
                let mut answers = Vec::new();
                for attempt in 0..3 {
                    let server = &servers[(i + attempt) % 2];
                    answers.push(buy_until_answered(server, &token, product).await);
                }
                answers
            }));
        }
        let mut orders = HashSet::new();
        for buyer in early {
            let answers = buyer.await.unwrap();
            let codes: Vec<_> = answers
                .iter()
                .map(|(status, code, _)| (*status, code.as_str()))
                .collect();
            assert_eq!(
                codes,
                [
                    (StatusCode::ACCEPTED, "<no error code>"),
                    (StatusCode::ACCEPTED, "<no error code>"),
                    (StatusCode::CONFLICT, "limit_reached")
                ],
                "a buyer's limit of {limit}, across buckets and servers"
            );
            orders.extend(answers.iter().filter_map(|(_, _, order)| *order));
        }
        let barrier = Arc::new(tokio::sync::Barrier::new(buyers.len()));
        let mut tasks = Vec::new();
        for (i, token) in buyers.into_iter().enumerate() {
            let servers = [first.clone(), second.clone()];
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let mut answers = Vec::new();
                for attempt in 0..3 {
                    let server = &servers[(i + attempt) % 2];
                    answers.push(buy_until_answered(server, &token, product).await);
                }
                (token, answers)
            }));
        }
        let mut held: HashMap<String, i64> = HashMap::new();
        for task in tasks {
            let (token, answers) = task.await.unwrap();
            for (status, code, order) in answers {
                match status {
                    StatusCode::ACCEPTED => {
                        assert!(orders.insert(order.unwrap()), "one order id answered twice");
                        *held.entry(token.clone()).or_default() += 1;
                    }
                    StatusCode::CONFLICT => {
                        assert!(
                            ["sold_out", "limit_reached"].contains(&code.as_str()),
                            "{code}"
                        )
                    }
                    other => panic!("unexpected {other} {code}"),
                }
            }
        }
        assert_eq!(orders.len() as i64, stock, "sold exactly the stock");
        assert!(
            held.values().all(|&units| units <= limit),
            "a buyer above the limit"
        );
        let stored: HashSet<i64> = first.live_order_ids(product).await.into_iter().collect();
        assert_eq!(stored, orders, "every accepted order stored, nothing else");
        assert_eq!(first.stored(product).await, (stock, stock, 0));
        assert_eq!(second.product(product).await["remaining"], 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_product_whose_buckets_redis_lost_is_rebuilt_whole_and_never_oversold() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let app = server_on_with(&db, &prefix, true, None, |_| {}).await;
        let stock = 60;
        let product = app.live_product_in(stock, 1, 12).await;
        let tokens = app.users(80).await;
        for token in &tokens[..20] {
            assert_eq!(
                buy_until_answered(&app, token, product).await.0,
                StatusCode::ACCEPTED
            );
        }
        app.settle().await;
        // The shards of some buckets restart empty: their units, buyers and outboxes are gone.
        delete_keys(&format!("{prefix}{{p:{product}:1:*")).await;
        delete_keys(&format!("{prefix}{{p:{product}:7:*")).await;

        let mut accepted = 20;
        for token in &tokens[20..] {
            let (status, body) = once_the_gate_reopens(|| app.buy(token, product, 1)).await;
            match status {
                StatusCode::ACCEPTED => accepted += 1,
                StatusCode::CONFLICT => assert_eq!(code(&body), "sold_out", "{body}"),
                other => panic!("unexpected {other}: {body}"),
            }
        }
        assert_eq!(accepted, stock, "after the rebuild, exactly the stock sold");
        assert_eq!(app.stored(product).await, (stock, stock, 0));
    }
}
