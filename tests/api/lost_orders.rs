//! Orders answered `202` and then lost with a Redis that lost its data, named one by one by
//! `seckill reconcile`: two `seckill serve` processes over a Redis of the test's own (see
//! `support/private_redis.rs`), some orders stored by a worker, then the worker stopped so the
//! next orders wait in the outbox, then Redis killed and started again empty. The servers still
//! hold what they answered and share it again; `seckill reconcile` lists exactly the orders the
//! test saw answered `202` and finds stored nowhere, none of those stored.
//!
//! It brings its own Redis, so it runs where `SECKILL_TEST_REDIS=1` names a single Redis, with
//! RabbitMQ (the outbox's entries stay until a consumer stored their orders) and without.

mod needs_single_redis {
    use crate::support::app::TestApp;
    use crate::support::buy;
    use crate::support::private_redis::{Persistence, PrivateRedis};
    use crate::support::processes::Cluster;
    use crate::support::{Need, TestDatabase, client_builder, require, status_and_json};
    use reqwest::StatusCode;
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::task::JoinSet;
    use tokio::time::Instant;

    /// Buys one unit of `product` as each of `tokens`, spread over `servers`, each tried again
    /// while answered `503` (a gate that lost its data stays closed a few seconds); every buy
    /// must be answered `202`. Returns the orders' ids.
    async fn bought(
        client: &reqwest::Client,
        servers: &[String],
        product: i64,
        tokens: &[String],
    ) -> HashSet<i64> {
        let mut buys = JoinSet::new();
        for (i, token) in tokens.iter().enumerate() {
            let (client, server, token) = (
                client.clone(),
                servers[i % servers.len()].clone(),
                token.clone(),
            );
            buys.spawn(async move {
                buy::once_the_gate_reopens(|| async {
                    let response = buy::request(&client, &server, &token, product, 1)
                        .send()
                        .await
                        .unwrap();
                    status_and_json(response).await
                })
                .await
            });
        }
        let mut ids = HashSet::new();
        while let Some(answer) = buys.join_next().await {
            let (status, body) = answer.unwrap();
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            ids.insert(body["order_id"].as_str().unwrap().parse().unwrap());
        }
        ids
    }

    /// The ids of `product`'s stored orders, read straight from the database.
    async fn stored(observer: &TestApp, product: i64) -> HashSet<i64> {
        let pool = observer.pool().await;
        let ids: Vec<i64> = sqlx::query_scalar(
            observer
                .db
                .sql("SELECT id FROM orders WHERE product_id = ?"),
        )
        .bind(product)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        ids.into_iter().collect()
    }

    /// Waits until every order of `ids` is stored.
    async fn wait_stored(observer: &TestApp, product: i64, ids: &HashSet<i64>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = ids.difference(&stored(observer, product).await).count();
            if left == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{left} orders not stored after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How many entries the outbox stream `outbox` holds.
    async fn waiting(link: &mut seckill::redis_link::RedisLink, outbox: &str) -> u64 {
        redis::cmd("XLEN")
            .arg(outbox)
            .query_async(link)
            .await
            .unwrap()
    }

    /// The order ids `seckill reconcile` lists as answered `202` and missing, checked to be of
    /// `product`, one unit each.
    fn listed(report: &str, product: i64) -> HashSet<i64> {
        let Some((_, list)) =
            report.split_once("answered 202 are neither stored nor in the outbox")
        else {
            return HashSet::new();
        };
        list.lines()
            .skip(2)
            .map_while(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.len() == 7).then_some(fields)
            })
            .filter(|fields| fields[0].parse::<i64>().is_ok())
            .map(|fields| {
                assert_eq!(fields[0], product.to_string(), "{report}");
                assert_eq!(fields[3], "1", "{report}");
                fields[1].parse().unwrap()
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a single Redis: run by scripts/test on sqlite redis, postgres redis and mysql redis amqp"]
    async fn reconcile_lists_exactly_the_orders_answered_and_lost_with_redis() {
        require(Need::SingleRedis);
        let mut redis = PrivateRedis::start(Persistence::None).await;
        let cluster = Cluster::on_redis(Arc::new(TestDatabase::fresh().await), redis.url());
        let observer = cluster.observer().await;
        let product = observer.live_product(500, 1).await;
        let mut tokens = observer.users(130).await;
        let (after, lost, before) = (tokens.split_off(100), tokens.split_off(40), tokens);
        let (_first, first) = cluster.server().await;
        let (_second, second) = cluster.server().await;
        let servers = [first, second];
        let client = client_builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();

        // Stored by a worker, then the worker stops: the next orders wait in the outbox.
        let (mut worker, _) = cluster.start("worker", &[]).await;
        let stored_before = bought(&client, &servers, product, &before).await;
        wait_stored(&observer, product, &stored_before).await;
        let outbox = format!("{}{{p:{product}}}:outbox", cluster.prefix);
        let mut link = seckill::redis_link::connect(&redis.url()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while waiting(&mut link, &outbox).await > 0 {
            assert!(Instant::now() < deadline, "the outbox not emptied in 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        worker.start_kill().unwrap();
        worker.wait().await.unwrap();
        let outboxed = bought(&client, &servers, product, &lost).await;
        assert_eq!(
            waiting(&mut link, &outbox).await,
            60,
            "the orders answered with no worker wait in the outbox"
        );
        // Shared with the fleet, then lost with Redis: the servers must share them all again.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        redis.kill_and_restart().await;

        // A worker again, and buys after the restart, stored.
        let (_worker, _) = cluster.start("worker", &[]).await;
        let stored_after = bought(&client, &servers, product, &after).await;
        wait_stored(&observer, product, &stored_after).await;

        let answered: HashSet<i64> = stored_before
            .iter()
            .chain(&outboxed)
            .chain(&stored_after)
            .copied()
            .collect();
        let stored = stored(&observer, product).await;
        let unstored: HashSet<i64> = answered.difference(&stored).copied().collect();
        assert_eq!(unstored, outboxed, "Redis lost the orders in its outbox");

        let output = cluster
            .command("reconcile", &[])
            .stderr(std::process::Stdio::piped())
            .output()
            .await
            .unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!("reconcile:\n{report}");
        assert!(!output.status.success(), "reconcile found nothing amiss");
        let listed = listed(&report, product);
        assert_eq!(
            listed.len(),
            unstored.len(),
            "reconcile lists {} orders, {} answered 202 were never stored:\n{report}",
            listed.len(),
            unstored.len()
        );
        assert_eq!(listed, unstored, "{report}");
        assert!(listed.is_disjoint(&stored));
        assert_eq!(
            stored,
            self::stored(&observer, product).await,
            "nothing stored since"
        );
        redis.stop().await;
    }
}
