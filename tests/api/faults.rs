//! Faults during a live crowd, with `seckill serve` and `seckill worker` as processes of the
//! real binary (`processes.rs`): the database refusing connections, a server killed with buys
//! in flight, the deadlines' dead-letter target missing. After each: nothing oversold, every
//! accepted order stored exactly once, every process still up (or started again by the test,
//! as an operator would). `RELIABILITY.md` reports what each found.
//!
//! These tests are heavy, and the suite runs seven times over backend combinations: each one
//! runs in the one or two runs its doc comment names, and says on stderr where it does not.

use crate::backend::TestDatabase;
use crate::helpers::{TestApp, code};
use crate::processes::Cluster;
use lapin::types::FieldTable;
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The backends of this run of the suite, as `scripts/test` sets them.
pub(crate) struct Run {
    pub(crate) database: String,
    pub(crate) redis: bool,
    pub(crate) amqp: bool,
}

/// Whether a heavy test runs in this run of the suite: `wanted` says so of its backends. When
/// not, it says so on stderr, naming `why`.
pub(crate) fn runs_here(test: &str, why: &str, wanted: impl Fn(&Run) -> bool) -> bool {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let run = Run {
        database: Some(var("SECKILL_TEST_DATABASE"))
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "sqlite".into()),
        redis: var("SECKILL_TEST_REDIS") == "1",
        amqp: var("SECKILL_TEST_AMQP") == "1",
    };
    let runs = wanted(&run);
    if !runs {
        eprintln!("{test}: not in this run of the suite; it runs {why}");
    }
    runs
}

/// What a buyer was answered in the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Accepted(i64),
    SoldOut,
    /// 503: the server could not decide the buy now.
    Unavailable,
    /// No answer: the connection was refused or cut.
    NoAnswer,
}

/// One buy over HTTP, with `Idempotency-Key: key` when given.
async fn try_buy(
    client: &reqwest::Client,
    server: &str,
    token: &str,
    product: i64,
    key: Option<&str>,
) -> Outcome {
    let mut request = client
        .post(format!("{server}/api/v1/orders"))
        .bearer_auth(token)
        .json(&serde_json::json!({ "product_id": product, "quantity": 1 }));
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let Ok(response) = request.send().await else {
        return Outcome::NoAnswer;
    };
    let status = response.status();
    let Ok(body) = response.json::<Value>().await else {
        return Outcome::NoAnswer;
    };
    match status {
        StatusCode::ACCEPTED => {
            Outcome::Accepted(body["order_id"].as_str().unwrap().parse().unwrap())
        }
        StatusCode::CONFLICT => {
            assert_eq!(code(&body), "sold_out", "{body}");
            Outcome::SoldOut
        }
        StatusCode::SERVICE_UNAVAILABLE => Outcome::Unavailable,
        other => panic!("unexpected {other}: {body}"),
    }
}

/// One buyer's buy, once answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bought {
    pub(crate) outcome: Outcome,
    /// How many times it was sent (more than once after a 503, or after no answer).
    pub(crate) tries: usize,
    /// The index of the server that gave the last answer.
    pub(crate) server: usize,
}

/// A crowd of buyers, one buy each, spread over the servers in turn.
pub(crate) struct Crowd {
    accepted: Arc<AtomicUsize>,
    buys: Vec<JoinHandle<Bought>>,
}

impl Crowd {
    /// Starts one buy of one unit per token, at most `in_flight` at once. A buy answered 503 is
    /// sent again to the next server; with `keyed`, each buyer sends an `Idempotency-Key` and
    /// a buy without an answer is sent again too, with the same key, as a client retries. It
    /// gives up after 60 s.
    pub(crate) fn start(
        client: &reqwest::Client,
        servers: &[String],
        tokens: Vec<String>,
        product: i64,
        in_flight: usize,
        keyed: bool,
    ) -> Self {
        let accepted = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(in_flight));
        let servers: Arc<[String]> = servers.into();
        let buys = tokens
            .into_iter()
            .enumerate()
            .map(|(i, token)| {
                let (client, servers) = (client.clone(), servers.clone());
                let (accepted, gate) = (accepted.clone(), gate.clone());
                tokio::spawn(async move {
                    let _permit = gate.acquire().await.unwrap();
                    let key = keyed.then(|| format!("crowd-{i}"));
                    let sent = Instant::now();
                    let mut tries = 0;
                    loop {
                        let server = (i + tries) % servers.len();
                        tries += 1;
                        let outcome =
                            try_buy(&client, &servers[server], &token, product, key.as_deref())
                                .await;
                        let again = match outcome {
                            Outcome::Accepted(_) | Outcome::SoldOut => false,
                            Outcome::Unavailable => true,
                            Outcome::NoAnswer => keyed,
                        };
                        if !again || sent.elapsed() > Duration::from_secs(60) {
                            if matches!(outcome, Outcome::Accepted(_)) {
                                accepted.fetch_add(1, Ordering::SeqCst);
                            }
                            return Bought {
                                outcome,
                                tries,
                                server,
                            };
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                })
            })
            .collect();
        Self { accepted, buys }
    }

    /// How many buys were accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits until `n` buys were accepted (up to 60 s).
    pub(crate) async fn wait_accepted(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.accepted() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} buys accepted after 60 s",
                self.accepted()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Every buyer's answer, once all are in (up to 90 s). Each buyer got an order or "sold
    /// out": none was left without an answer or with a 503.
    pub(crate) async fn answers(self) -> Vec<Bought> {
        let mut answers = Vec::with_capacity(self.buys.len());
        for buy in self.buys {
            let bought = tokio::time::timeout(Duration::from_secs(90), buy)
                .await
                .expect("the crowd was not answered within 90 s")
                .unwrap();
            assert!(
                matches!(bought.outcome, Outcome::Accepted(_) | Outcome::SoldOut),
                "a buyer was left with {bought:?}"
            );
            answers.push(bought);
        }
        answers
    }
}

/// The accepted order ids of `answers`, asserting no id was answered twice.
pub(crate) fn accepted_ids(answers: &[Bought]) -> HashSet<i64> {
    let mut ids = HashSet::new();
    for bought in answers {
        if let Outcome::Accepted(id) = bought.outcome {
            assert!(ids.insert(id), "two buyers were answered with order {id}");
        }
    }
    ids
}

/// Waits until every accepted order is stored, then checks the database: the orders of
/// `product` not cancelled are exactly `accepted` (each stored once: the id is the key), no
/// more than its `stock`, and its stock was taken once per order.
pub(crate) async fn assert_stored_exactly(
    observer: &TestApp,
    product: i64,
    stock: i64,
    accepted: &HashSet<i64>,
) {
    let stored: HashSet<i64> = observer.live_order_ids(product).await.into_iter().collect();
    let lost = accepted.difference(&stored).count();
    let unanswered = stored.difference(accepted).count();
    assert!(
        lost == 0 && unanswered == 0,
        "{lost} accepted orders not stored, {unanswered} stored orders nobody was answered"
    );
    let sold = accepted.len() as i64;
    assert!(sold <= stock, "{sold} sold of {stock}");
    assert_eq!(observer.stored(product).await, (sold, sold, stock - sold));
}

/// Fails the test if any process has exited.
pub(crate) fn assert_alive(processes: &mut [(&str, &mut Child)]) {
    for (name, process) in processes {
        if let Some(exit) = process.try_wait().unwrap() {
            panic!("the {name} exited ({exit})");
        }
    }
}

/// A sale over a cluster's processes: the observer, a live product (one unit per buyer), the
/// crowd's tokens and one more buyer's, two servers and a worker.
pub(crate) struct Sale {
    pub(crate) observer: TestApp,
    pub(crate) product: i64,
    /// The crowd's buyers, for [`Crowd::start`].
    pub(crate) tokens: Vec<String>,
    /// A buyer outside the crowd.
    pub(crate) spare: String,
    pub(crate) servers: [(Child, String); 2],
    pub(crate) worker: Child,
}

impl Sale {
    /// Creates the product of `stock` units and `buyers` buyers, then starts the processes
    /// with `extra` environment.
    pub(crate) async fn start(
        cluster: &Cluster,
        stock: i64,
        buyers: usize,
        extra: &[(&str, &str)],
    ) -> Self {
        let observer = cluster.observer().await;
        let product = observer.live_product(stock, 1).await;
        let mut tokens = observer.users(buyers + 1).await;
        let spare = tokens.pop().unwrap();
        let first = cluster.server_with(extra).await;
        let second = cluster.server_with(extra).await;
        let (worker, _) = cluster.start("worker", extra).await;
        Self {
            observer,
            product,
            tokens,
            spare,
            servers: [first, second],
            worker,
        }
    }

    /// The servers' base URLs.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.servers.iter().map(|(_, url)| url.clone()).collect()
    }

    /// Fails the test if a server or the worker has exited.
    pub(crate) fn assert_alive(&mut self) {
        let [(first, _), (second, _)] = &mut self.servers;
        assert_alive(&mut [
            ("first server", first),
            ("second server", second),
            ("worker", &mut self.worker),
        ]);
    }
}

/// An HTTP client for a crowd: answers may take long while a backend is down.
pub(crate) fn crowd_client() -> reqwest::Client {
    crate::helpers::client_builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A TCP proxy between the processes and a server (the database): cut, it closes its
/// listener, so new connections are refused, and drops every connection it carries.
struct Proxy {
    port: u16,
    open: watch::Sender<bool>,
}

impl Proxy {
    /// A proxy on a free local port to `target`, open.
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (open, mut opened) = watch::channel(true);
        let cuts = opened.clone();
        tokio::spawn(async move {
            let mut listener = Some(listener);
            loop {
                let Some(accepting) = &listener else {
                    if opened.wait_for(|open| *open).await.is_err() {
                        return;
                    }
                    listener = Some(TcpListener::bind(("127.0.0.1", port)).await.unwrap());
                    continue;
                };
                tokio::select! {
                    accepted = accepting.accept() => {
                        let Ok((mut inbound, _)) = accepted else { continue };
                        let mut cut = cuts.clone();
                        tokio::spawn(async move {
                            let Ok(mut outbound) = TcpStream::connect(target).await else {
                                return;
                            };
                            tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                                _ = cut.wait_for(|open| !open) => {}
                            }
                        });
                    }
                    closed = opened.wait_for(|open| !open) => {
                        if closed.is_err() {
                            return;
                        }
                        listener = None;
                    }
                }
            }
        });
        Self { port, open }
    }

    /// Refuses new connections and drops the open ones.
    fn cut(&self) {
        self.open.send_replace(false);
    }

    /// Accepts connections again.
    fn restore(&self) {
        self.open.send_replace(true);
    }
}

/// The database refusing connections for 10 s (its listener closed, every open connection
/// dropped) in the middle of a crowd of 3,000 buyers of 1,500 units over two servers and a
/// worker, which reach it through a proxy in the test. The sale goes on meanwhile (the gate
/// and its outbox are in Redis); once the database is back, every accepted order is stored
/// exactly once, each server reads from the database again, and no process needed a restart.
///
/// It needs a database server: it runs where `SECKILL_TEST_DATABASE` is `postgres` with
/// `SECKILL_TEST_REDIS=1` and no RabbitMQ (orders go straight from the outbox to the database),
/// or `mysql` with `SECKILL_TEST_AMQP=1` (through RabbitMQ).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_refusing_connections_for_ten_seconds_loses_no_accepted_order() {
    if !runs_here(
        "database refusing connections",
        "on postgres with Redis and no RabbitMQ, and on mysql with RabbitMQ",
        |run| {
            (run.database == "postgres" && run.redis && !run.amqp)
                || (run.database == "mysql" && run.amqp)
        },
    ) {
        return;
    }
    let db = Arc::new(TestDatabase::fresh().await);
    let mut through = reqwest::Url::parse(&db.url).unwrap();
    let target = format!(
        "{}:{}",
        through.host_str().unwrap(),
        through.port().unwrap()
    );
    let proxy = Proxy::start(target.parse().unwrap()).await;
    through.set_port(Some(proxy.port)).unwrap();
    let cluster = Cluster::new(db).with_database_url(through.to_string());
    let stock = 1_500;
    let mut sale = Sale::start(&cluster, stock, 3_000, &[]).await;
    let (observer, product) = (&sale.observer, sale.product);
    let servers = sale.urls();
    let client = crowd_client();

    let tokens = std::mem::take(&mut sale.tokens);
    let crowd = Crowd::start(&client, &servers, tokens, product, 32, false);
    crowd.wait_accepted(100).await;
    proxy.cut();
    let cut = Instant::now();
    let accepted_at_cut = crowd.accepted();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let accepted_while_down = crowd.accepted() - accepted_at_cut;
    proxy.restore();
    let restored = Instant::now();
    let answers = crowd.answers().await;
    assert!(
        accepted_while_down > 0,
        "no buy was accepted while the database was down: the sale stopped with it"
    );
    let accepted = accepted_ids(&answers);
    eprintln!(
        "database down {:?}: {} buys accepted, {accepted_while_down} while it was down",
        restored - cut,
        accepted.len()
    );

    // Each server reads from the database again within 15 s (its pool reconnects).
    for server in &servers {
        let deadline = restored + Duration::from_secs(15);
        loop {
            let answer = client
                .get(format!("{server}/api/v1/orders"))
                .bearer_auth(&sale.spare)
                .send()
                .await;
            if answer.is_ok_and(|a| a.status() == StatusCode::OK) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{server} still cannot read the database 15 s after it came back"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_stored_exactly(observer, product, stock, &accepted).await;
    sale.assert_alive();
}

/// The Snowflake node id of an order id: which process made it.
fn node_of(order: i64) -> i64 {
    (order >> 12) & 0x3ff
}

/// A server killed with SIGKILL in the middle of a crowd of 3,000 buyers of 1,500 units, each
/// buy with an `Idempotency-Key`. Buys it had taken through the gate but not answered, and
/// buys it never answered at all, are sent again with their keys to the other server, as a
/// client retries: a buy the gate had decided gets its order (made by the dead server), and
/// every stored order is one a buyer was answered with. The operator then starts a server
/// again, and it sells.
///
/// It runs where `SECKILL_TEST_REDIS=1` and `SECKILL_TEST_AMQP` is not set (`sqlite redis`,
/// `postgres redis`): the keys live in the gate, whatever the pipeline after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_between_the_gate_and_its_answers_costs_no_buyer_their_order() {
    if !runs_here(
        "server killed between the gate and its answer",
        "with SECKILL_TEST_REDIS=1 and without RabbitMQ",
        |run| run.redis && !run.amqp,
    ) {
        return;
    }
    let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
    let stock = 1_500;
    let mut sale = Sale::start(&cluster, stock, 3_000, &[]).await;
    let product = sale.product;
    let client = crowd_client();

    let tokens = std::mem::take(&mut sale.tokens);
    let crowd = Crowd::start(&client, &sale.urls(), tokens, product, 256, true);
    crowd.wait_accepted(300).await;
    let doomed = &mut sale.servers[0].0;
    doomed.start_kill().unwrap();
    doomed.wait().await.unwrap();
    let answers = crowd.answers().await;
    let accepted = accepted_ids(&answers);

    let doomed_node = answers
        .iter()
        .find_map(|b| match b.outcome {
            Outcome::Accepted(id) if b.server == 0 => Some(node_of(id)),
            _ => None,
        })
        .expect("the doomed server answered some buys before it was killed");
    let retried = answers.iter().filter(|b| b.tries > 1).count();
    let recovered = answers
        .iter()
        .filter(|b| {
            b.tries > 1 && matches!(b.outcome, Outcome::Accepted(id) if node_of(id) == doomed_node)
        })
        .count();
    eprintln!(
        "server killed: {} accepted, {retried} buys retried on the survivor, {recovered} of \
         them answered with the order the dead server had made",
        accepted.len()
    );
    assert!(
        retried > 0,
        "no buy was in flight at the kill: the test proved nothing"
    );
    assert_stored_exactly(&sale.observer, product, stock, &accepted).await;

    // The operator starts the server again; it answers buys at once.
    sale.servers[0] = cluster.server().await;
    let late_buy = try_buy(
        &client,
        &sale.servers[0].1,
        &sale.spare,
        product,
        Some("late"),
    )
    .await;
    assert!(
        matches!(late_buy, Outcome::Accepted(_) | Outcome::SoldOut),
        "{late_buy:?}"
    );
    sale.assert_alive();
}

/// Whether the orders exchange under `names` routes a closed payment window anywhere: a
/// mandatory publish on `channel` (in confirm mode) comes back when it does not. What it routes
/// is an order id no order has, which a worker cancelling deadlines ignores.
async fn routes_deadlines(channel: &lapin::Channel, names: &str) -> bool {
    let confirmation = channel
        .basic_publish(
            format!("{names}orders").into(),
            "deadline".into(),
            lapin::options::BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"1",
            lapin::BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    confirmation.take_message().is_none()
}

/// Payment deadlines expiring with their dead-letter target missing: the binding that routes
/// an expired order from the delay queue to the `deadline` queue is removed (an operator's
/// slip) before a crowd of 2,000 buyers buys 1,000 units with a 5-second payment window. RabbitMQ drops every expired message (its
/// dead-lettering is at most once); the database sweep still cancels every order, once, and
/// every unit is back on sale, in the gate and in the database.
///
/// It runs where `SECKILL_TEST_AMQP=1` (`mysql redis amqp`, `postgres cluster amqp`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlines_whose_dead_letter_target_is_missing_are_still_cancelled_once_by_the_sweep() {
    if !runs_here(
        "dead-letter target missing",
        "with SECKILL_TEST_AMQP=1",
        |run| run.amqp,
    ) {
        return;
    }
    let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
    let (url, names) = cluster.amqp().cloned().unwrap();
    let stock = 1_000;
    let window = [("SECKILL_PAYMENT_WINDOW_SECS", "5")];
    let mut sale = Sale::start(&cluster, stock, 2_000, &window).await;
    let (observer, product, servers) = (&sale.observer, sale.product, sale.urls());
    // One order through the pipeline first: every link to the broker is open (a link declares
    // the topology when it opens), and nothing declares it again while no connection fails.
    let client = crowd_client();
    let Outcome::Accepted(first_order) =
        try_buy(&client, &servers[0], &sale.spare, product, None).await
    else {
        panic!("the first buy was not accepted");
    };
    observer.settle().await;
    // Then the topology is broken (again, if a consumer still starting declared it meanwhile).
    let connection = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        channel
            .queue_unbind(
                format!("{names}deadline").into(),
                format!("{names}orders").into(),
                "deadline".into(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        if !routes_deadlines(&channel, &names).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the topology was declared again and again"
        );
    }
    let tokens = std::mem::take(&mut sale.tokens);
    let crowd = Crowd::start(&client, &servers, tokens, product, 64, false);
    let answers = crowd.answers().await;
    // Units come back as windows close during the crowd, and sell again.
    let mut accepted = accepted_ids(&answers);
    accepted.insert(first_order);
    assert!(
        accepted.len() as i64 >= stock,
        "{} accepted",
        accepted.len()
    );
    // Every order expires unpaid; the sweep cancels them all.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (_, units, left) = observer.stored(product).await;
        if units == 0 {
            assert_eq!(left, stock, "each cancelled order's unit back exactly once");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{units} units still held by overdue orders after 40 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pool = observer.pool().await;
    let stored: Vec<(i64, String)> = sqlx::query_as(
        observer
            .db
            .sql("SELECT id, status FROM orders WHERE product_id = ?"),
    )
    .bind(product)
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    let ids: HashSet<i64> = stored.iter().map(|(id, _)| *id).collect();
    let lost = accepted.difference(&ids).count();
    assert_eq!(
        (lost, ids.len()),
        (0, accepted.len()),
        "accepted orders not stored, or stored orders nobody was answered"
    );
    assert!(stored.iter().all(|(_, status)| status == "cancelled"));
    // The target was still missing at the end: what expired had nowhere to go.
    assert!(
        !routes_deadlines(&channel, &names).await,
        "the deadline binding came back during the test: it proved nothing"
    );
    // Every unit is on sale again, in the gate too.
    let gate_deadline = Instant::now() + Duration::from_secs(10);
    while observer.product(product).await["remaining"] != stock {
        assert!(
            Instant::now() < gate_deadline,
            "the gate did not get every unit back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
