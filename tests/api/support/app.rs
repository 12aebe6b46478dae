//! `TestApp`: a real server on port 0 over its own database (and, as the run's backends say,
//! its own Redis key prefix and RabbitMQ names), plus the shortcuts tests need (many users at
//! once, a live product, a buy) and direct reads of what is stored. It knows the backends only
//! through `backends.rs`.

use super::backends::{self, TestDatabase};
use super::buy::{self, once_the_gate_reopens};
use super::http::{client_builder, code, rfc3339, status_and_json};
use reqwest::StatusCode;
use seckill::app::App;
use seckill::clock::{Clock, ManualClock, SharedClock, SystemClock};
use seckill::config::{Config, Secret};
use seckill::domain::{UserId, Username};
use seckill::http::AppState;
use seckill::payment::sandbox::Sandbox;
use serde_json::{Value, json};
use sqlx::{AnyPool, Row};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The admin token of every test server.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";
/// The session-signing secret of every test server, so tokens minted by one work on all.
pub const SECRET: &str = "test-secret-0123456789abcdef0123456789";

/// A running server and what a test needs to drive and inspect it.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`, the port the server took.
    pub base: String,
    /// The client every request of the test goes through (connections kept alive).
    pub client: reqwest::Client,
    /// The server's own state, to read what it holds without HTTP.
    pub state: AppState,
    /// The test's database, shared with the servers a restart test starts on it.
    pub db: Arc<TestDatabase>,
    /// The sandbox payment gateway, when the server takes payments through it.
    pub sandbox: Option<Arc<Sandbox>>,
    /// Tells the server to stop gracefully.
    stop: Option<oneshot::Sender<()>>,
    /// The server's task, awaited when it stops.
    server: Option<JoinHandle<()>>,
}

/// The configuration every test starts from: its own database, known secrets, and limits per
/// address, on registrations and on order requests high enough for thousands of buyers on one
/// loopback address (a test of a limit sets its own).
pub fn test_config(db: &TestDatabase) -> Config {
    let mut config = Config {
        database_url: db.url.parse().unwrap(),
        database_max_connections: Some(4),
        secret: Some(Secret::new(SECRET.into())),
        admin_token: Some(Secret::new(ADMIN_TOKEN.into())),
        // A test stops its server at once: no load balancer has to move away first.
        shutdown_grace_secs: 0,
        ..Config::default()
    };
    config.rate_limit.per_ip_per_sec = 1_000_000;
    config.rate_limit.per_ip_burst = 1_000_000;
    config.rate_limit.orders_per_user_per_sec = 1_000_000;
    config.rate_limit.orders_per_user_burst = 1_000_000;
    config.rate_limit.registrations_per_ip_per_hour = 1_000_000;
    config.rate_limit.registrations_per_hour = 1_000_000;
    config
}

impl TestApp {
    /// A server on the real clock with the test configuration.
    pub async fn spawn() -> Self {
        Self::spawn_with(Arc::new(SystemClock), |_| {}).await
    }

    /// A server on `clock`, with `tweak` applied to the test configuration.
    pub async fn spawn_with(clock: SharedClock, tweak: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_on(Arc::new(TestDatabase::fresh().await), clock, tweak).await
    }

    /// A server over an existing database (to test restarts).
    pub async fn spawn_on(
        db: Arc<TestDatabase>,
        clock: SharedClock,
        tweak: impl FnOnce(&mut Config),
    ) -> Self {
        // Logs of the server under test, shown for failing tests (`RUST_LOG` to choose).
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
        let mut config = test_config(&db);
        if let Some((url, prefix)) = backends::redis().await {
            config.redis_url = Some(url);
            config.redis_key_prefix = prefix;
            config.run_worker = true;
        }
        if let Some((url, prefix)) = backends::amqp() {
            config.amqp_url = Some(url);
            config.amqp_prefix = prefix;
            config.amqp_queue_expiry_secs = Some(600);
        }
        let listener = seckill::server::listen(([127, 0, 0, 1], 0).into()).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        config.public_url = Some(base.clone());
        tweak(&mut config);
        let app = App::build(&config, clock).await.expect("app builds");
        let state = app.state().clone();
        let sandbox = app.sandbox().cloned();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let stop = async {
                let _ = stopped.await;
            };
            app.serve(listener, stop, std::future::pending())
                .await
                .unwrap();
        });
        let client = client_builder()
            .pool_max_idle_per_host(4096)
            .build()
            .unwrap();
        Self {
            base,
            client,
            state,
            db,
            sandbox,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// Stops the server gracefully and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.unwrap();
        }
    }

    /// The server's URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A manual clock that starts at the real current time.
    pub fn manual_clock() -> Arc<ManualClock> {
        Arc::new(ManualClock::new(SystemClock.now_ms()))
    }

    /// Creates `n` users in one transaction (one shared password hash: argon2 for thousands
    /// would dominate the test) and returns a session token for each.
    pub async fn users(&self, n: usize) -> Vec<String> {
        self.users_with_ids(n)
            .await
            .into_iter()
            .map(|(_, token)| token)
            .collect()
    }

    /// [`users`](Self::users), each with their id.
    pub async fn users_with_ids(&self, n: usize) -> Vec<(UserId, String)> {
        let hash = "$argon2id$v=19$m=19456,t=2,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let now = self.state.sale.now();
        let batch = NEXT_BATCH.fetch_add(1, Ordering::SeqCst);
        let pool = self.pool().await;
        let mut tx = pool.begin().await.unwrap();
        for i in 0..n {
            sqlx::query(
                self.db.sql(
                    "INSERT INTO users (username, password_hash, created_at) VALUES (?, ?, ?)",
                ),
            )
            .bind(format!("b{batch}-{i}"))
            .bind(hash)
            .bind(now)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
        let rows = sqlx::query(
            self.db
                .sql("SELECT id, username FROM users WHERE username LIKE ?"),
        )
        .bind(format!("b{batch}-%"))
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        assert_eq!(rows.len(), n);
        rows.iter()
            .map(|row| {
                let username = Username::parse(row.get::<String, _>("username").as_str()).unwrap();
                let id = UserId(row.get::<i64, _>("id"));
                (id, self.state.auth.tokens.issue(id, &username, now).0)
            })
            .collect()
    }

    /// GETs an admin route with the admin token.
    pub async fn admin_get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        status_and_json(response).await
    }

    /// POSTs JSON to an admin route with the admin token.
    pub async fn admin_post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.admin_send(self.client.post(self.url(path)), body)
            .await
    }

    /// PATCHes JSON to an admin route with the admin token.
    pub async fn admin_patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.admin_send(self.client.patch(self.url(path)), body)
            .await
    }

    async fn admin_send(
        &self,
        request: reqwest::RequestBuilder,
        body: Value,
    ) -> (StatusCode, Value) {
        let response = request
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        status_and_json(response).await
    }

    /// A product on sale now (started a minute ago, ends in an hour).
    pub async fn live_product(&self, stock: i64, per_user_limit: i64) -> i64 {
        self.live_product_in(stock, per_user_limit, 1).await
    }

    /// [`live_product`](Self::live_product) with its stock split into `buckets` stock buckets.
    pub async fn live_product_in(&self, stock: i64, per_user_limit: i64, buckets: i64) -> i64 {
        let now = self.state.sale.now();
        let (status, body) = self
            .admin_post(
                "/api/v1/admin/products",
                json!({
                    "name": "Test phone",
                    "original_price_cents": 10_000,
                    "sale_price_cents": 4_999,
                    "stock": stock,
                    "per_user_limit": per_user_limit,
                    "buckets": buckets,
                    "starts_at": rfc3339(now - 60_000),
                    "ends_at": rfc3339(now + 3_600_000),
                }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["buckets"], buckets, "{body}");
        body["id"].as_i64().unwrap()
    }

    /// A live sale event with `products` products of `stock` units each, any number per buyer
    /// (100); returns the products' ids.
    pub async fn event_of_products(&self, products: usize, stock: i64) -> Vec<i64> {
        let now = self.state.sale.now();
        let (status, event) = self
            .admin_post(
                "/api/v1/admin/events",
                json!({ "starts_at": rfc3339(now - 60_000), "ends_at": rfc3339(now + 3_600_000) }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{event}");
        let mut ids = Vec::new();
        for i in 0..products {
            let (status, product) = self
                .admin_post(
                    "/api/v1/admin/products",
                    json!({ "event_id": event["id"], "name": format!("Kettle {i}"),
                            "original_price_cents": 3990, "sale_price_cents": 990,
                            "stock": stock, "per_user_limit": 100 }),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{product}");
            ids.push(product["id"].as_i64().unwrap());
        }
        ids
    }

    /// A live product of 5 units, 2 a buyer, of which two new buyers take 3 (2 and 1): the
    /// orders a server without a worker then holds in its outbox.
    pub async fn sell_three_of_five(&self) -> i64 {
        let product = self.live_product(5, 2).await;
        let tokens = self.users(2).await;
        for (token, quantity) in tokens.iter().zip([2, 1]) {
            let (status, body) = self.buy(token, product, quantity).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        }
        product
    }

    /// One buy attempt.
    pub async fn buy(&self, token: &str, product: i64, quantity: i64) -> (StatusCode, Value) {
        status_and_json(self.buy_response(token, product, quantity).await).await
    }

    /// One buy attempt's whole response, headers and all.
    pub async fn buy_response(
        &self,
        token: &str,
        product: i64,
        quantity: i64,
    ) -> reqwest::Response {
        buy::request(&self.client, &self.base, token, product, quantity)
            .send()
            .await
            .unwrap()
    }

    /// Waits until every accepted order is in the database (cluster mode answers a buy once
    /// the order is in the outbox; a worker stores it a moment later).
    pub async fn settle(&self) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let in_flight = self.state.sale.units_in_flight().await.unwrap();
            if in_flight == 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{in_flight} accepted orders still not stored after 30 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// One accepted buy of one unit per token; returns (token, order id) pairs.
    pub async fn buy_each(&self, tokens: &[String], product: i64) -> Vec<(String, String)> {
        let mut orders = Vec::with_capacity(tokens.len());
        for token in tokens {
            let (status, body) = self.buy(token, product, 1).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            orders.push((token.clone(), body["order_id"].as_str().unwrap().to_owned()));
        }
        self.settle().await;
        orders
    }

    /// The body of a GET, as text.
    pub async fn page(&self, path: &str) -> String {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        response.text().await.unwrap()
    }

    /// POST to an order action (`pay` or `cancel`).
    pub async fn order_action(
        &self,
        token: &str,
        order_id: &str,
        action: &str,
    ) -> (StatusCode, Value) {
        self.settle().await;
        let response = self
            .client
            .post(self.url(&format!("/api/v1/orders/{order_id}/{action}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        status_and_json(response).await
    }

    /// After the gate lost its state (restart, Redis data loss) with 2 of 3 units sold, one each
    /// to `tokens[0]` and `tokens[1]` (limit 1): the rebuilt gate knows both the stock and the
    /// buyers, so the last unit sells once and the first buyer cannot buy again; and the
    /// database ends with exactly the three orders.
    pub async fn assert_gate_rebuilt_after_two_of_three_sold(
        &self,
        product: i64,
        tokens: &[String],
    ) {
        self.assert_gate_knows_two_of_three_sold(product, tokens)
            .await;
        assert_eq!(self.stored(product).await, (3, 3, 0));
    }

    /// The buys of [`assert_gate_rebuilt_after_two_of_three_sold`](Self::assert_gate_rebuilt_after_two_of_three_sold),
    /// for a gate whose orders may not be stored yet.
    pub async fn assert_gate_knows_two_of_three_sold(&self, product: i64, tokens: &[String]) {
        let (status, body) = once_the_gate_reopens(|| self.buy(&tokens[0], product, 1)).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::CONFLICT, "limit_reached")
        );
        assert_eq!(self.product(product).await["remaining"], 1);
        assert_eq!(
            self.buy(&tokens[2], product, 1).await.0,
            StatusCode::ACCEPTED
        );
        let (status, body) = self.buy(&tokens[3], product, 1).await;
        assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
    }

    /// A GET's status and JSON body.
    pub async fn get_json(&self, path: &str) -> (StatusCode, Value) {
        status_and_json(self.client.get(self.url(path)).send().await.unwrap()).await
    }

    /// A GET as a signed-in buyer.
    pub async fn get_json_as(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let request = self.client.get(self.url(path)).bearer_auth(token);
        status_and_json(request.send().await.unwrap()).await
    }

    /// The product as the public API shows it.
    pub async fn product(&self, id: i64) -> Value {
        let (status, body) = self.get_json(&format!("/api/v1/products/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// A separate connection to the test database, to check what is really stored.
    pub async fn pool(&self) -> AnyPool {
        AnyPool::connect(&self.db.url).await.unwrap()
    }

    /// Ids of the orders of a product that are not cancelled, read straight from the database.
    pub async fn live_order_ids(&self, product: i64) -> Vec<i64> {
        self.settle().await;
        let pool = self.pool().await;
        let ids = sqlx::query_scalar(
            self.db
                .sql("SELECT id FROM orders WHERE product_id = ? AND status <> 'cancelled'"),
        )
        .bind(product)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        ids
    }

    /// (orders, units not cancelled, database stock) of a product, read straight from the
    /// database.
    pub async fn stored(&self, product: i64) -> (i64, i64, i64) {
        self.settle().await;
        let pool = self.pool().await;
        let units: Vec<i64> = sqlx::query_scalar(
            self.db
                .sql("SELECT quantity FROM orders WHERE product_id = ? AND status <> 'cancelled'"),
        )
        .bind(product)
        .fetch_all(&pool)
        .await
        .unwrap();
        let stock: i64 = sqlx::query_scalar(self.db.sql("SELECT stock FROM products WHERE id = ?"))
            .bind(product)
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        (units.len() as i64, units.iter().sum(), stock)
    }
}

/// Numbers the batches of users [`TestApp::users`] makes, so their names never collide.
static NEXT_BATCH: AtomicU64 = AtomicU64::new(1);

/// Waits until the next second starts, so what follows within it counts in one fixed window of
/// a limit of one second (none of it weighed as the window before).
pub async fn at_the_next_second() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into = now.as_millis() % 1000;
    tokio::time::sleep(std::time::Duration::from_millis((1000 - into) as u64 + 5)).await;
}
