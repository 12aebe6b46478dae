//! Cluster mode as it is deployed: `seckill serve` and `seckill worker` as separate operating
//! system processes of the real binary, sharing Redis, the database and (with
//! `SECKILL_TEST_AMQP=1`) RabbitMQ. Buyers spread over two servers; workers are killed with
//! SIGKILL mid-batch. An in-process server over the same backends mints tokens and reads what
//! is stored.

use crate::support::TestDatabase;
use crate::support::processes::Cluster;
use crate::support::redis_url;
use crate::support::{TestApp, code};
use reqwest::StatusCode;
use sqlx::AnyPool;
use std::collections::HashSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;

/// Buys one unit per token, spread over `servers` in turn, all at once (at most 256 requests
/// in flight). Returns the accepted order ids, after checking every other answer is a
/// legitimate refusal and no buyer got two orders.
async fn buy_spread(
    client: &reqwest::Client,
    servers: &[String],
    tokens: &[String],
    product: i64,
) -> HashSet<i64> {
    let gate = Arc::new(tokio::sync::Semaphore::new(256));
    let mut tasks = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let server = servers[i % servers.len()].clone();
        let (client, token, gate) = (client.clone(), token.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            let response = crate::support::buy::request(&client, &server, &token, product, 1)
                .send()
                .await
                .unwrap();
            crate::support::status_and_json(response).await
        }));
    }
    let mut accepted = HashSet::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        match status {
            StatusCode::ACCEPTED => {
                let id = body["order_id"].as_str().unwrap().parse().unwrap();
                assert!(accepted.insert(id), "two answers with one order id");
            }
            StatusCode::CONFLICT => assert_eq!(code(&body), "sold_out", "{body}"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    accepted
}

/// Orders stored for `product`, straight from `app`'s database through `pool`.
async fn stored_count(app: &TestApp, pool: &AnyPool, product: i64) -> i64 {
    sqlx::query_scalar(
        app.db
            .sql("SELECT COUNT(*) FROM orders WHERE product_id = ?"),
    )
    .bind(product)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Two servers and a worker sell 300 units to 3,000 buyers, over quorum queues when `quorum`.
async fn sell_exactly_the_stock(quorum: bool) {
    let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
    let observer = cluster
        .observer_with(|c| c.amqp_quorum_queues = quorum)
        .await;
    let stock = 300;
    let product = observer.live_product(stock, 1).await;
    let tokens = observer.users(3_000).await;
    let extra = [(
        "SECKILL_AMQP_QUORUM_QUEUES",
        if quorum { "true" } else { "false" },
    )];
    let (_first, first) = cluster.server_with(&extra).await;
    let (_second, second) = cluster.server_with(&extra).await;
    let (_worker, _) = cluster.start("worker", &extra).await;

    let accepted = buy_spread(&observer.client, &[first, second], &tokens, product).await;

    assert_eq!(accepted.len() as i64, stock);
    let stored: HashSet<i64> = observer.live_order_ids(product).await.into_iter().collect();
    assert_eq!(
        stored, accepted,
        "every accepted order, and only those, is stored"
    );
    assert_eq!(observer.stored(product).await, (stock, stock, 0));
}

/// How a worker is stopped in the middle of its work.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGKILL: nothing finished; another worker takes its entries over after the claim time.
    Kill,
    /// SIGTERM: it finishes and acknowledges the batch in hand, then exits cleanly.
    Terminate,
}

/// Fills the outbox with `stock` accepted orders, starts a worker with small batches, stops it
/// `how` once it has stored some, and lets a second worker finish. Whatever the stop, every
/// accepted order ends up stored exactly once.
async fn stop_a_worker_mid_stream(how: Stop) {
    let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
    let observer = cluster.observer().await;
    let stock = 2_000;
    let product = observer.live_product(stock, 1).await;
    let tokens = observer.users(stock as usize).await;
    let (_server, server) = cluster.server().await;
    // No worker yet: every accepted order waits in the outbox.
    let accepted = buy_spread(&observer.client, &[server], &tokens, product).await;
    assert_eq!(accepted.len() as i64, stock);
    // One connection for the polling below, so each look is a query, not a connect.
    let pool = observer.pool().await;
    assert_eq!(stored_count(&observer, &pool, product).await, 0);

    let (mut first, _) = cluster
        .start("worker", &[("SECKILL_MAX_BATCH", "20")])
        .await;
    let stored_at_stop = loop {
        let n = stored_count(&observer, &pool, product).await;
        if n > 0 {
            match how {
                Stop::Kill => first.start_kill().unwrap(),
                Stop::Terminate => {
                    let pid = first.id().unwrap().to_string();
                    let sent = Command::new("kill").args(["-TERM", &pid]).status();
                    assert!(sent.await.unwrap().success());
                }
            }
            break n;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    pool.close().await;
    let exit = tokio::time::timeout(Duration::from_secs(10), first.wait())
        .await
        .expect("the worker did not stop within 10 s")
        .unwrap();
    assert!(
        stored_at_stop < stock,
        "the worker finished before it was stopped: the test proved nothing"
    );
    // A killed worker's entries are taken over after one second. A terminated one must leave
    // none behind: its successor would only take them over after a minute, after `stored`
    // below has given up.
    let claim_after = match how {
        Stop::Kill => "1000",
        Stop::Terminate => {
            assert!(
                exit.success(),
                "SIGTERM must end the worker cleanly: {exit}"
            );
            "60000"
        }
    };
    let (_second, _) = cluster
        .start("worker", &[("SECKILL_CLAIM_AFTER_MS", claim_after)])
        .await;
    let stored: HashSet<i64> = observer.live_order_ids(product).await.into_iter().collect();
    assert_eq!(
        stored, accepted,
        "every accepted order, and only those, is stored"
    );
    // Stock taken exactly once per order: a duplicate would have taken it twice.
    assert_eq!(observer.stored(product).await, (stock, stock, 0));
}

mod needs_amqp {
    use super::*;
    use crate::support::{Need, require};

    /// The same over quorum queues (`SECKILL_AMQP_QUORUM_QUEUES`); it runs where
    /// `SECKILL_TEST_AMQP=1`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs RabbitMQ: run by scripts/test on mysql redis amqp and postgres cluster amqp"]
    async fn over_quorum_queues_two_server_processes_and_a_worker_sell_exactly_the_stock() {
        require(Need::Amqp);
        sell_exactly_the_stock(true).await;
    }
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn two_server_processes_and_a_worker_sell_exactly_the_stock() {
        require(Need::RedisServer);
        sell_exactly_the_stock(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_worker_killed_mid_batch_loses_and_duplicates_nothing() {
        require(Need::RedisServer);
        stop_a_worker_mid_stream(Stop::Kill).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_worker_stopped_with_sigterm_finishes_its_batch_and_leaves_nothing_pending() {
        require(Need::RedisServer);
        stop_a_worker_mid_stream(Stop::Terminate).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn reconcile_reports_gate_drift_and_repair_rebuilds_the_gate() {
        require(Need::RedisServer);
        let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
        let observer = cluster.observer().await;
        let product = observer.live_product(5, 1).await;
        let tokens = observer.users(2).await;
        let (_worker, _) = cluster.start("worker", &[]).await;
        observer.buy_each(&tokens, product).await;
        let reconcile = |repair: bool| {
            let mut command = cluster.command("reconcile", &[]);
            if repair {
                command.arg("--repair");
            }
            async move {
                let output = command.stderr(Stdio::piped()).output().await.unwrap();
                let text = String::from_utf8_lossy(&output.stdout).into_owned();
                (output.status.success(), text)
            }
        };
        let (balanced, report) = reconcile(false).await;
        assert!(balanced, "{report}");

        // The gate loses two units (a crash between a cancel in the database and its release).
        let mut redis = seckill::redis_link::connect(&redis_url()).await.unwrap();
        let _: i64 = redis::cmd("HINCRBY")
            .arg(format!("{}{{p:{product}}}:sale", cluster.prefix))
            .arg("remaining")
            .arg(-2)
            .query_async(&mut redis)
            .await
            .unwrap();
        let (balanced, report) = reconcile(false).await;
        assert!(!balanced && report.contains("GATE SHORT"), "{report}");

        let (balanced, report) = reconcile(true).await;
        assert!(balanced && report.contains("gate rebuilt"), "{report}");
        assert_eq!(observer.product(product).await["remaining"], 3);
    }

    /// The payment settings are a contract of the environment: `SECKILL_PAYMENT__PROVIDER=sandbox`
    /// makes a server process take payments through its own sandbox gateway, whose URLs name the
    /// port the process actually took; without a provider, paying is refused.
    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_server_process_pays_through_the_sandbox_its_environment_names() {
        require(Need::RedisServer);
        let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
        let app = cluster.observer().await;
        let sandbox = [
            ("SECKILL_PAYMENT__PROVIDER", "sandbox"),
            ("SECKILL_RUN_WORKER", "true"),
        ];
        let product = app.live_product(2, 1).await;
        let (_paying, base) = cluster.server_with(&sandbox).await;
        let (_free, free_base) = cluster.server_with(&[("SECKILL_RUN_WORKER", "true")]).await;
        let tokens = app.users(2).await;
        let mut orders = Vec::new();
        for token in &tokens {
            let answer = app
                .client
                .post(format!("{base}/api/v1/orders"))
                .bearer_auth(token)
                .json(&serde_json::json!({ "product_id": product, "quantity": 1 }))
                .send()
                .await
                .unwrap();
            let (status, body) = crate::support::status_and_json(answer).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            orders.push(body["order_id"].as_str().unwrap().to_owned());
        }
        app.settle().await;
        let (first_token, first) = (&tokens[0], &orders[0]);
        let (second_token, second) = (&tokens[1], &orders[1]);

        let pay = |server: &str, token: &str, order: &str| {
            app.client
                .post(format!("{server}/api/v1/orders/{order}/pay"))
                .bearer_auth(token)
                .send()
        };
        let answer = pay(&free_base, second_token, second).await.unwrap();
        let (status, body) = crate::support::status_and_json(answer).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::SERVICE_UNAVAILABLE, "payments_not_configured")
        );

        let answer = pay(&base, first_token, first).await.unwrap();
        let (status, body) = crate::support::status_and_json(answer).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["provider"], "sandbox");
        let pay_url = body["pay_url"].as_str().unwrap();
        assert!(
            pay_url.starts_with(&format!("{base}/sandbox/alipay/gateway.do?")),
            "{pay_url}"
        );
        let page = app.client.get(pay_url).send().await.unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        let paid = app
            .client
            .post(format!("{base}/sandbox/alipay/checkout/{first}"))
            .form(&[("action", "pay")])
            .send()
            .await
            .unwrap();
        assert_eq!(paid.status(), StatusCode::OK, "the return page");
        app.wait_for_status(first_token, first, "paid").await;
        app.wait_for_status(second_token, second, "awaiting_payment")
            .await;
    }
}
