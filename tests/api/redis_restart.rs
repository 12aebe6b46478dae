//! Redis killed in the middle of a sale: two `seckill serve` processes and a `seckill worker`
//! keep running over a Redis of the test's own (see `private_redis.rs`), a crowd of buyers keeps
//! buying, and afterwards nothing is oversold, every stored order is stored once, and what was
//! lost is what the deployment's Redis settings allow (RELIABILITY.md has the figures).
//!
//! These tests bring their own Redis, so running them in every backend combination of
//! `scripts/test` would only multiply its time: each runs where `SECKILL_TEST_REDIS=1` names a
//! single Redis (see [`single_redis_run`]), and says so when it does not run.

use crate::backend::TestDatabase;
use crate::helpers::{TestApp, code, status_and_json};
use crate::private_redis::{Persistence, PrivateRedis};
use crate::processes::Cluster;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::process::Child;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Whether this run of the suite is one a fault test of a private Redis runs in: the gate in
/// Redis (`SECKILL_TEST_REDIS=1`) on a single Redis, and RabbitMQ present as `amqp` asks
/// (`None`: either). Prints why when it is not, so nothing is skipped silently.
pub(crate) fn single_redis_run(test: &str, amqp: Option<bool>) -> bool {
    let redis = std::env::var("SECKILL_TEST_REDIS").is_ok_and(|v| v == "1");
    let cluster = crate::shared_gate::redis_url().starts_with("redis+cluster://");
    let with_amqp = crate::backend::amqp().is_some();
    let runs = redis && !cluster && amqp.is_none_or(|wanted| wanted == with_amqp);
    if !runs {
        eprintln!(
            "{test}: runs only with SECKILL_TEST_REDIS=1 on a single Redis{}; not in this run",
            match amqp {
                Some(true) => " and SECKILL_TEST_AMQP=1",
                Some(false) => " without RabbitMQ",
                None => "",
            }
        );
    }
    runs
}

/// One buy of the crowd: when it was sent (its last try), the answer, and how many tries before
/// it were answered `503`.
pub(crate) struct Answer {
    pub(crate) sent: Instant,
    pub(crate) status: StatusCode,
    pub(crate) order: Option<i64>,
    pub(crate) unavailable: u32,
}

/// A buy of one unit as `token` on `server`, checked to be an answer a buy may get while Redis
/// comes and goes: accepted, sold out, refused because an earlier try whose answer was lost took
/// the buyer's unit, or unavailable for a moment.
async fn buy(client: &reqwest::Client, server: &str, token: &str, product: i64) -> Answer {
    let sent = Instant::now();
    let response = client
        .post(format!("{server}/api/v1/orders"))
        .bearer_auth(token)
        .json(&serde_json::json!({ "product_id": product, "quantity": 1 }))
        .send()
        .await
        .unwrap();
    let (status, body) = status_and_json(response).await;
    let order = match status {
        StatusCode::ACCEPTED => Some(body["order_id"].as_str().unwrap().parse().unwrap()),
        StatusCode::CONFLICT => {
            assert!(
                ["sold_out", "limit_reached"].contains(&code(&body)),
                "{body}"
            );
            None
        }
        StatusCode::SERVICE_UNAVAILABLE => None,
        other => panic!("unexpected {other}: {body}"),
    };
    Answer {
        sent,
        status,
        order,
        unavailable: 0,
    }
}

/// [`buy`], tried again every 50 ms while it is answered `503`, as a buyer would, for up to
/// 30 s.
async fn buy_until_answered(
    client: &reqwest::Client,
    server: &str,
    token: &str,
    product: i64,
) -> Answer {
    let started = Instant::now();
    let mut unavailable = 0;
    loop {
        let answer = buy(client, server, token, product).await;
        if answer.status != StatusCode::SERVICE_UNAVAILABLE
            || started.elapsed() > Duration::from_secs(30)
        {
            return Answer {
                unavailable,
                ..answer
            };
        }
        unavailable += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A live sale on two server processes and a worker over the Redis at `redis`, and a crowd
/// buying one unit each from both servers, 32 buys in flight, each buyer trying again while
/// answered `503`; then the checks every fault must leave true.
pub(crate) struct FaultySale {
    cluster: Cluster,
    observer: TestApp,
    redis: String,
    pub(crate) product: i64,
    stock: i64,
    servers: Vec<String>,
    processes: Vec<(&'static str, Child)>,
    client: reqwest::Client,
    /// Buyers kept out of the crowd, to ask the servers whether they sell.
    probes: std::vec::IntoIter<String>,
    /// The orders the probes were accepted.
    pub(crate) probed: HashSet<i64>,
    crowd: Vec<JoinHandle<Answer>>,
    accepted: Arc<AtomicUsize>,
}

impl FaultySale {
    /// Starts the processes and the crowd of `buyers` after `stock` units.
    pub(crate) async fn start(redis: String, stock: i64, buyers: usize) -> Self {
        let cluster = Cluster::on_redis(Arc::new(TestDatabase::fresh().await), redis.clone());
        let observer = cluster.observer().await;
        let product = observer.live_product(stock, 1).await;
        let mut tokens = observer.users(buyers + 40).await;
        let probes = tokens.split_off(buyers).into_iter();
        let (first, first_url) = cluster.server().await;
        let (second, second_url) = cluster.server().await;
        let (worker, _) = cluster.start("worker", &[]).await;
        let servers = vec![first_url, second_url];
        let client = crate::helpers::client_builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(tokio::sync::Semaphore::new(32));
        let mut crowd = Vec::new();
        for (i, token) in tokens.into_iter().enumerate() {
            let server = servers[i % servers.len()].clone();
            let (client, accepted, in_flight) =
                (client.clone(), accepted.clone(), in_flight.clone());
            crowd.push(tokio::spawn(async move {
                let _permit = in_flight.acquire().await.unwrap();
                let answer = buy_until_answered(&client, &server, &token, product).await;
                if answer.order.is_some() {
                    accepted.fetch_add(1, Ordering::SeqCst);
                }
                answer
            }));
        }
        Self {
            cluster,
            observer,
            redis,
            product,
            stock,
            servers,
            processes: vec![
                ("first server", first),
                ("second server", second),
                ("worker", worker),
            ],
            client,
            probes,
            probed: HashSet::new(),
            crowd,
            accepted,
        }
    }

    /// Waits until the crowd has `n` orders accepted.
    pub(crate) async fn wait_accepted(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.accepted.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "the crowd bought nothing");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until a buy is answered again (accepted, or sold out by the crowd) within `within`
    /// of `since`.
    pub(crate) async fn answered_again(&mut self, since: Instant, within: Duration) {
        loop {
            let token = self.probes.next().expect("more probe buyers");
            let answer = buy(&self.client, &self.servers[0], &token, self.product).await;
            self.probed.extend(answer.order);
            if answer.status != StatusCode::SERVICE_UNAVAILABLE {
                return;
            }
            assert!(
                since.elapsed() < within,
                "buys still fail {within:?} after the fault"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every answer of the crowd, once each buyer has one.
    pub(crate) async fn answers(&mut self) -> Vec<Answer> {
        let mut answers = Vec::new();
        for buy in self.crowd.drain(..) {
            answers.push(
                tokio::time::timeout(Duration::from_secs(60), buy)
                    .await
                    .expect("the crowd was not answered within 60 s")
                    .unwrap(),
            );
        }
        answers
    }

    /// Fails the test if any process has exited.
    pub(crate) fn assert_running(&mut self) {
        for (name, process) in &mut self.processes {
            if let Some(exit) = process.try_wait().unwrap() {
                panic!("the {name} exited ({exit}) after the fault");
            }
        }
    }

    /// Past a lease renewal (every 5 s) and a scheduler leadership term (5 s) after `fault`,
    /// both of which met Redis after it: every process still runs, and every server still
    /// answers buys.
    pub(crate) async fn assert_every_process_sells(&mut self, fault: Instant) {
        tokio::time::sleep_until(fault + Duration::from_secs(12)).await;
        self.assert_running();
        for server in self.servers.clone() {
            let token = self.probes.next().expect("more probe buyers");
            let answer = buy(&self.client, &server, &token, self.product).await;
            self.probed.extend(answer.order);
            assert_ne!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{server}");
        }
    }

    /// Waits until the worker has emptied the product's outbox.
    pub(crate) async fn drained(&self) {
        let mut redis = seckill::redis_link::connect(&self.redis).await.unwrap();
        let outbox = format!("{}{{p:{}}}:outbox", self.cluster.prefix, self.product);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let waiting: u64 = redis::cmd("XLEN")
                .arg(&outbox)
                .query_async(&mut redis)
                .await
                .unwrap();
            if waiting == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{waiting} orders still in the outbox after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The ids of the product's stored orders, checked: none twice, no more units than the
    /// stock, and the stock taken once per order. Read straight from the database: the
    /// observer's own gate (on the shared Redis) knows nothing of this sale.
    pub(crate) async fn stored(&self) -> HashSet<i64> {
        let pool = self.observer.pool().await;
        let db = &self.observer.db;
        let stored: Vec<(i64, i64)> =
            sqlx::query_as(db.sql(
                "SELECT id, quantity FROM orders WHERE product_id = ? AND status <> 'cancelled'",
            ))
            .bind(self.product)
            .fetch_all(&pool)
            .await
            .unwrap();
        let left: i64 = sqlx::query_scalar(db.sql("SELECT stock FROM products WHERE id = ?"))
            .bind(self.product)
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        let ids: HashSet<i64> = stored.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.len(), stored.len(), "an order stored twice");
        let units: i64 = stored.iter().map(|(_, units)| units).sum();
        assert!(units <= self.stock, "{units} units sold of {}", self.stock);
        assert_eq!(left, self.stock - units, "stock taken once per order");
        ids
    }

    /// `seckill reconcile` over the processes' backends: whether it found every product
    /// balanced, and what it printed.
    pub(crate) async fn reconcile(&self) -> (bool, String) {
        let output = self
            .cluster
            .command("reconcile", &[])
            .stderr(Stdio::piped())
            .output()
            .await
            .unwrap();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), printed)
    }
}

/// What a crowd's answers and the database say about one fault, printed for RELIABILITY.md.
pub(crate) struct Outcome {
    /// Orders answered `202`, in all and after the fault.
    pub(crate) accepted: HashSet<i64>,
    pub(crate) accepted_after: usize,
    /// Answered `202`, never stored.
    pub(crate) lost: usize,
    /// Buyers answered `503` at least once: Redis was away, or the gate closed. Some of those
    /// tries may have been taken all the same (Redis ran the script, the reply was lost with
    /// the connection): those orders are stored without a `202`, and their buyers see them in
    /// their order list.
    pub(crate) unavailable: usize,
    pub(crate) stored_unanswered: usize,
}

impl Outcome {
    /// Tallies `answers` of a crowd whose fault came at `fault`, and the orders `probed` by
    /// the probes, against `stored`.
    pub(crate) fn of(
        test: &str,
        answers: &[Answer],
        probed: &HashSet<i64>,
        fault: Instant,
        stored: &HashSet<i64>,
    ) -> Self {
        let mut accepted: HashSet<i64> = answers.iter().filter_map(|a| a.order).collect();
        accepted.extend(probed);
        let outcome = Self {
            accepted_after: answers
                .iter()
                .filter(|a| a.sent > fault && a.order.is_some())
                .count(),
            lost: accepted.difference(stored).count(),
            unavailable: answers.iter().filter(|a| a.unavailable > 0).count(),
            stored_unanswered: stored.difference(&accepted).count(),
            accepted,
        };
        eprintln!(
            "{test}: {} buyers, {} orders accepted ({} of probes, {} of buys sent after the \
             fault), {} answered 503 at least once ({} tries in all), {} accepted and never \
             stored, {} stored without a 202, {} stored",
            answers.len(),
            outcome.accepted.len(),
            probed.len(),
            outcome.accepted_after,
            outcome.unavailable,
            answers.iter().map(|a| a.unavailable).sum::<u32>(),
            outcome.lost,
            outcome.stored_unanswered,
            stored.len()
        );
        assert!(
            outcome.accepted_after > 0,
            "no buy sent after the fault was accepted: the sale did not go on"
        );
        outcome
    }
}

/// The units `seckill reconcile` reports accepted and neither stored nor in the outbox for
/// `product`, from its table (the product's line; its name is two words).
fn missing_units(report: &str, product: i64) -> i64 {
    let line = report
        .lines()
        .find(|line| line.split_whitespace().next() == Some(&product.to_string()))
        .unwrap_or_else(|| panic!("no line for product {product}:\n{report}"));
    line.split_whitespace()
        .nth(10)
        .and_then(|missing| missing.parse().ok())
        .unwrap_or_else(|| panic!("no missing units in {line:?}"))
}

/// Redis without persistence (or a replica promoted without the data) comes back empty: the
/// gate stays closed until every server has shared again what it accepted, is rebuilt from
/// the database less what is unaccounted for, and the sale goes on without selling more than
/// the stock or losing an order accepted after the restart; `seckill reconcile` reports what
/// the empty Redis lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restarted_empty_mid_crowd_leaves_every_process_selling_and_nothing_oversold() {
    let test = "redis restarted empty";
    if !single_redis_run(test, None) {
        return;
    }
    let mut redis = PrivateRedis::start(Persistence::None).await;
    let mut sale = FaultySale::start(redis.url(), 600, 1_500).await;
    sale.wait_accepted(100).await;
    redis.kill_and_restart().await;
    let restarted = Instant::now();
    // Closed until every server has shared its counts again: a few seconds.
    sale.answered_again(restarted, Duration::from_secs(15))
        .await;
    let answers = sale.answers().await;
    sale.assert_every_process_sells(restarted).await;
    sale.drained().await;
    let stored = sale.stored().await;
    let outcome = Outcome::of(test, &answers, &sale.probed, restarted, &stored);
    // The gate rebuilt from the database keeps off sale what the servers accepted before the
    // restart and neither the database nor the new outbox holds (orders in RabbitMQ or in a
    // worker's hands, or lost with Redis), so every order accepted after it is stored.
    let after: Vec<i64> = answers
        .iter()
        .filter(|a| a.sent > restarted)
        .filter_map(|a| a.order)
        .collect();
    let unstored = after.iter().filter(|id| !stored.contains(id)).count();
    assert_eq!(
        unstored,
        0,
        "{unstored} of {} orders accepted after the restart were never stored",
        after.len()
    );
    // What Redis lost (the orders in its outbox not relayed or stored yet) is reported.
    let (balanced, report) = sale.reconcile().await;
    eprintln!("{test}: reconcile:\n{report}");
    let missing = missing_units(&report, sale.product);
    if outcome.lost > 0 {
        assert!(!balanced, "reconcile found nothing amiss:\n{report}");
        assert!(
            missing > 0 && missing <= outcome.lost as i64,
            "reconcile reports {missing} units missing, {} accepted orders were lost:\n{report}",
            outcome.lost
        );
    } else {
        assert_eq!(missing, 0, "{report}");
    }
    sale.assert_running();
    redis.stop().await;
}

/// Redis with its append-only file, killed with SIGKILL and started again from it: it comes
/// back with every write it acknowledged (the file is written before each reply; `appendfsync`
/// only says when the operating system is told to put it on disk, which a killed process does
/// not need), so the servers reconnect, the gate reopens by itself without a rebuild, every
/// accepted order is stored and the gate and database balance.
async fn redis_killed_and_restarted_from_its_append_only_file(fsync: &'static str) {
    let test = format!("redis killed, restarted from its AOF (appendfsync {fsync})");
    let mut redis = PrivateRedis::start(Persistence::Aof(fsync)).await;
    let mut sale = FaultySale::start(redis.url(), 600, 1_500).await;
    sale.wait_accepted(100).await;
    redis.kill_and_restart().await;
    let restarted = Instant::now();
    sale.answered_again(restarted, Duration::from_secs(5)).await;
    let answers = sale.answers().await;
    sale.assert_every_process_sells(restarted).await;
    sale.drained().await;
    let stored = sale.stored().await;
    let outcome = Outcome::of(&test, &answers, &sale.probed, restarted, &stored);
    assert_eq!(outcome.lost, 0, "accepted orders lost with the AOF");
    assert!(
        outcome.stored_unanswered <= outcome.unavailable,
        "{} orders stored that no buy was answered for",
        outcome.stored_unanswered
    );
    let (balanced, report) = sale.reconcile().await;
    assert!(balanced, "the gate and the database differ:\n{report}");
    sale.assert_running();
    redis.stop().await;
}

/// Runs without RabbitMQ: the `sqlite redis` and `postgres redis` runs of `scripts/test`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_with_aof_everysec_comes_back_with_every_accepted_order() {
    if single_redis_run("AOF everysec", Some(false)) {
        redis_killed_and_restarted_from_its_append_only_file("everysec").await;
    }
}

/// Runs with RabbitMQ: the `mysql redis amqp` run of `scripts/test`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_with_aof_always_comes_back_with_every_accepted_order() {
    if single_redis_run("AOF always", Some(true)) {
        redis_killed_and_restarted_from_its_append_only_file("always").await;
    }
}
