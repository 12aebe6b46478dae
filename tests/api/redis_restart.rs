//! Redis restarted empty in the middle of a sale (no persistence, or a replica promoted without
//! the data): two `seckill serve` processes and a `seckill worker` keep running, the gate is
//! rebuilt from the database, and the sale goes on without selling more than the stock. The
//! processes use a Redis of this test's own, killed and restarted here; the shared one is never
//! touched. It runs in every run of the suite, over that run's database (and RabbitMQ when the
//! run has it), since its processes bring their own Redis.

use crate::backend::TestDatabase;
use crate::helpers::{code, status_and_json};
use crate::processes::Cluster;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// A Redis server of a test's own, without persistence, so a restart comes back empty.
pub(crate) struct PrivateRedis {
    binary: String,
    port: u16,
    server: Child,
}

impl PrivateRedis {
    /// Starts `redis-server` on a free port; fails the test when it is not installed.
    pub(crate) async fn start() -> Self {
        let found = std::process::Command::new("which")
            .arg("redis-server")
            .output()
            .expect("running `which redis-server`");
        let binary = String::from_utf8_lossy(&found.stdout).trim().to_owned();
        assert!(
            found.status.success() && !binary.is_empty(),
            "this test needs redis-server on the PATH (scripts/services redis installs it)"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("finding a free port")
            .port();
        let server = Self::spawn(&binary, port).await;
        Self {
            binary,
            port,
            server,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server with SIGKILL, so it saves nothing, and starts an empty one on the same
    /// port.
    async fn kill_and_restart_empty(&mut self) {
        self.kill().await;
        self.server = Self::spawn(&self.binary, self.port).await;
    }

    /// Kills the server with SIGKILL, for good.
    pub(crate) async fn stop(mut self) {
        self.kill().await;
    }

    async fn kill(&mut self) {
        self.server.start_kill().unwrap();
        self.server.wait().await.unwrap();
    }

    /// A server on `port`, once it answers.
    async fn spawn(binary: &str, port: u16) -> Child {
        let server = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut connection) = client.get_multiplexed_async_connection().await {
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut connection).await;
                if pong.is_ok() {
                    return server;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer on port {port} within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One buy of the crowd: when it was sent, and the answer.
struct Answer {
    sent: Instant,
    status: StatusCode,
    order: Option<i64>,
}

/// A buy of one unit as `token` on `server`, checked to be an answer a buy may get while Redis
/// comes and goes: accepted, sold out, or unavailable for a moment.
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
            assert_eq!(code(&body), "sold_out", "{body}");
            None
        }
        StatusCode::SERVICE_UNAVAILABLE => None,
        other => panic!("unexpected {other}: {body}"),
    };
    Answer {
        sent,
        status,
        order,
    }
}

/// Fails the test if any process has exited.
fn assert_running(processes: &mut [(&str, &mut Child)]) {
    for (name, process) in processes {
        if let Some(exit) = process.try_wait().unwrap() {
            panic!("the {name} exited ({exit}) after Redis came back empty");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restarted_empty_mid_crowd_leaves_every_process_selling_and_nothing_oversold() {
    let mut redis = PrivateRedis::start().await;
    let cluster = Cluster::on_redis(Arc::new(TestDatabase::fresh().await), redis.url());
    let observer = cluster.observer().await;
    let (stock, buyers) = (600, 1_500);
    let product = observer.live_product(stock, 1).await;
    let mut tokens = observer.users(buyers + 40).await;
    let probes = tokens.split_off(buyers);
    let (mut first, first_url) = cluster.server().await;
    let (mut second, second_url) = cluster.server().await;
    let (mut worker, _) = cluster.start("worker", &[]).await;
    let servers = [first_url, second_url];
    let client = crate::helpers::client_builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    // The crowd, a bounded number of buys in flight, spread over both servers.
    let accepted = Arc::new(AtomicUsize::new(0));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(32));
    let mut crowd = Vec::new();
    for (i, token) in tokens.into_iter().enumerate() {
        let server = servers[i % servers.len()].clone();
        let (client, accepted, in_flight) = (client.clone(), accepted.clone(), in_flight.clone());
        crowd.push(tokio::spawn(async move {
            let _permit = in_flight.acquire().await.unwrap();
            let answer = buy(&client, &server, &token, product).await;
            if answer.order.is_some() {
                accepted.fetch_add(1, Ordering::SeqCst);
            }
            answer
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while accepted.load(Ordering::SeqCst) < 100 {
        assert!(Instant::now() < deadline, "the crowd bought nothing");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    redis.kill_and_restart_empty().await;
    let restarted = Instant::now();

    // A buy is answered again within a few seconds: accepted, or sold out by the crowd.
    let mut probes = probes.into_iter();
    loop {
        let token = probes.next().expect("more probe buyers");
        let answer = buy(&client, &servers[0], &token, product).await;
        if answer.status != StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(5),
            "buys still fail 5 s after Redis came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut answers = Vec::new();
    for buy in crowd {
        answers.push(
            tokio::time::timeout(Duration::from_secs(60), buy)
                .await
                .expect("the crowd was not answered within 60 s")
                .unwrap(),
        );
    }
    let after: Vec<&Answer> = answers.iter().filter(|a| a.sent > restarted).collect();
    assert!(
        after.iter().any(|a| a.status == StatusCode::ACCEPTED),
        "no buy sent after the restart was accepted ({} were sent): the sale did not go on",
        after.len()
    );

    // Past a lease renewal (every 5 s) and a scheduler leadership term (5 s), both of which
    // met the empty Redis: every process still runs, and every server still sells.
    tokio::time::sleep_until(restarted + Duration::from_secs(12)).await;
    assert_running(&mut [
        ("first server", &mut first),
        ("second server", &mut second),
        ("worker", &mut worker),
    ]);
    for server in &servers {
        let token = probes.next().expect("more probe buyers");
        let answer = buy(&client, server, &token, product).await;
        assert_ne!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{server}");
    }

    // The worker drains the recreated outbox: orders accepted after the restart are stored,
    // each once, and the database never sells more than its stock.
    let mut private = seckill::redis_link::connect(&redis.url()).await.unwrap();
    let outbox = format!("{}{{p:{product}}}:outbox", cluster.prefix);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: u64 = redis::cmd("XLEN")
            .arg(&outbox)
            .query_async(&mut private)
            .await
            .unwrap();
        if waiting == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} orders still in the outbox after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Read straight from the database: the observer's own gate (on the shared Redis) knows
    // nothing of this sale.
    let pool = observer.pool().await;
    let stored: Vec<(i64, i64)> = sqlx::query_as(
        observer
            .db
            .sql("SELECT id, quantity FROM orders WHERE product_id = ? AND status <> 'cancelled'"),
    )
    .bind(product)
    .fetch_all(&pool)
    .await
    .unwrap();
    let left: i64 = sqlx::query_scalar(observer.db.sql("SELECT stock FROM products WHERE id = ?"))
        .bind(product)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    let ids: HashSet<i64> = stored.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), stored.len(), "an order stored twice");
    let units: i64 = stored.iter().map(|(_, units)| units).sum();
    assert!(units <= stock, "{units} units sold of {stock}");
    assert_eq!(left, stock - units, "stock taken once per order");
    // The gate rebuilt from the database cannot know the orders that were on their way to it
    // (in RabbitMQ, or in a worker's hands) when Redis lost its data: it may accept that many
    // more, which the database then refuses. Those are the only accepted orders it may lose.
    let before = answers
        .iter()
        .filter(|a| a.sent <= restarted && a.order.is_some())
        .count();
    let accepted_after: Vec<i64> = after.iter().filter_map(|a| a.order).collect();
    let unstored = accepted_after.iter().filter(|id| !ids.contains(id)).count();
    assert!(
        unstored < accepted_after.len() && unstored <= before,
        "{unstored} of {} orders accepted after the restart were never stored ({before} \
         accepted before it)",
        accepted_after.len()
    );
    assert_running(&mut [
        ("first server", &mut first),
        ("second server", &mut second),
        ("worker", &mut worker),
    ]);
}
