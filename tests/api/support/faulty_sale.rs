//! A sale over server processes and a worker on a Redis a test kills or restarts, with a crowd
//! that keeps buying through the fault, and the tally of what the fault cost.

use super::app::TestApp;
use super::backends::TestDatabase;
use super::buy;
use super::http::{client_builder, code, status_and_json};
use super::probes;
use super::processes::{Cluster, base_url, launch};
use reqwest::StatusCode;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::process::Child;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One buy of the crowd: when it was sent (its last try), the answer, and how many tries before
/// it were answered `503`.
pub struct Answer {
    /// When its last try was sent.
    pub sent: Instant,
    /// When the last try's answer came.
    pub answered: Instant,
    /// The last try's status.
    pub status: StatusCode,
    /// The order id, when accepted.
    pub order: Option<i64>,
    /// Whether it was refused as sold out.
    pub sold_out: bool,
    /// How many tries before it were answered `503`.
    pub unavailable: u32,
    /// When each of its tries answered `503 unconfirmed` was sent (the last one's too): Redis
    /// ran the buy, its replicas did not acknowledge it in time.
    pub unconfirmed: Vec<Instant>,
}

/// A buy of one unit as `token` on `server` (with `Idempotency-Key: key` when given), checked
/// to be an answer a buy may get while Redis comes and goes: accepted, sold out, refused
/// because an earlier try whose answer was lost took the buyer's unit, or unavailable for a
/// moment (`unconfirmed` with a `Retry-After`, when replicas did not acknowledge it).
async fn buy(
    client: &reqwest::Client,
    server: &str,
    token: &str,
    product: i64,
    key: Option<&str>,
) -> Answer {
    let sent = Instant::now();
    let mut request = buy::request(client, server, token, product, 1);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.unwrap();
    let retry_after = response
        .headers()
        .contains_key(reqwest::header::RETRY_AFTER);
    let (status, body) = status_and_json(response).await;
    let answered = Instant::now();
    let mut unconfirmed = Vec::new();
    let sold_out = status == StatusCode::CONFLICT && code(&body) == "sold_out";
    let order = match status {
        StatusCode::ACCEPTED => Some(body["order_id"].as_str().unwrap().parse().unwrap()),
        StatusCode::CONFLICT => {
            assert!(
                ["sold_out", "limit_reached"].contains(&code(&body)),
                "{body}"
            );
            None
        }
        StatusCode::SERVICE_UNAVAILABLE => {
            if code(&body) == "unconfirmed" {
                assert!(retry_after, "503 unconfirmed without Retry-After: {body}");
                unconfirmed.push(sent);
            }
            None
        }
        other => panic!("unexpected {other}: {body}"),
    };
    Answer {
        sent,
        answered,
        status,
        order,
        sold_out,
        unavailable: 0,
        unconfirmed,
    }
}

/// [`buy`], tried again every 50 ms while it is answered `503` (with the same `key`), as a
/// buyer would, for up to 30 s.
async fn buy_until_answered(
    client: &reqwest::Client,
    server: &str,
    token: &str,
    product: i64,
    key: Option<&str>,
) -> Answer {
    let started = Instant::now();
    let mut unavailable = 0;
    let mut unconfirmed = Vec::new();
    loop {
        let mut answer = buy(client, server, token, product, key).await;
        unconfirmed.append(&mut answer.unconfirmed);
        if answer.status != StatusCode::SERVICE_UNAVAILABLE
            || started.elapsed() > Duration::from_secs(30)
        {
            return Answer {
                unavailable,
                unconfirmed,
                ..answer
            };
        }
        unavailable += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts `seckill <subcommand>` over `cluster` with `env`, its log written to
/// `logs/<name>.log` when `logs` is given.
async fn start(
    cluster: &Cluster,
    subcommand: &str,
    name: &str,
    env: &[(&str, &str)],
    logs: Option<&Path>,
) -> (Child, String) {
    let mut command = cluster.command(subcommand, env);
    if let Some(dir) = logs {
        let file = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        command.stderr(file);
    }
    launch(command, subcommand).await
}

/// What a [`FaultySale`] sells and how its crowd buys.
#[derive(Clone, Copy)]
pub struct Setup<'a> {
    /// The product's units.
    pub stock: i64,
    /// Buyers in the crowd, each on one of the two servers.
    pub buyers: usize,
    /// The product's per-user limit: each buyer buys one unit at a time until they hold that
    /// many, or a buy is not accepted.
    pub per_user_limit: i64,
    /// Most buys in flight at once (each with its tries).
    pub in_flight: usize,
    /// How long a buyer waits after an accepted buy before the next: with the number of
    /// buyers, the most buys a second the crowd makes, however fast the servers are.
    pub pause: Duration,
    /// The stock buckets the product's stock is split into.
    pub buckets: i64,
    /// Whether each buy carries an `Idempotency-Key` of its own, sent again with its tries, as
    /// a client retries.
    pub keyed: bool,
    /// Environment of the server and worker processes.
    pub env: &'a [(&'a str, &'a str)],
    /// A directory where each process's log (stderr) is written, a file each (read by
    /// [`FaultySale::logs`]); `None`: the test's own stderr.
    pub logs: Option<&'a Path>,
}

impl Setup<'static> {
    /// `buyers` buying one unit each of `stock`, 32 at once, without keys.
    pub fn one_each(stock: i64, buyers: usize) -> Self {
        Self {
            stock,
            buyers,
            per_user_limit: 1,
            buckets: 1,
            in_flight: 32,
            pause: Duration::ZERO,
            keyed: false,
            env: &[],
            logs: None,
        }
    }
}

/// How a [`FaultySale`]'s crowd arrives, and how far each buyer pushes.
#[derive(Clone, Copy)]
pub struct Arrivals {
    /// The time between two buyers' first buys: zero, the whole crowd at once.
    pub every: Duration,
    /// Buys a buyer tries past the per-user limit (each answered `409 limit_reached` when the
    /// gate keeps the limit, which ends that buyer's buying).
    pub past_limit: i64,
}

impl Arrivals {
    /// The whole crowd at once, each buyer stopping at the limit.
    pub const AT_ONCE: Self = Self {
        every: Duration::ZERO,
        past_limit: 0,
    };
}

/// A live sale on two server processes and a worker over the Redis at `redis`, and a crowd
/// buying from both servers as its [`Setup`] says, each buy tried again while answered `503`;
/// then the checks every fault must leave true.
pub struct FaultySale {
    /// The backends the processes share, to run `seckill reconcile` over them.
    cluster: Cluster,
    /// The in-process server that minted the tokens and reads the database.
    observer: TestApp,
    /// The Redis the test faults, to watch its outbox.
    redis: String,
    /// The product on sale.
    pub product: i64,
    /// Its stock, which no fault may oversell.
    stock: i64,
    /// The server processes' base URLs.
    servers: Vec<String>,
    /// The servers and the worker, named, to check none exited.
    processes: Vec<(&'static str, Child)>,
    /// Where each process's log is written, when the test reads them.
    logs: Option<PathBuf>,
    /// The client of the crowd and the probes (long timeouts: Redis may be away).
    client: reqwest::Client,
    /// Buyers kept out of the crowd, to ask the servers whether they sell.
    probes: std::vec::IntoIter<String>,
    /// The orders the probes were accepted.
    pub probed: HashSet<i64>,
    /// Each buyer's task, ending with the answer to each of their buys.
    crowd: Vec<JoinHandle<Vec<Answer>>>,
    /// How many of the crowd's buys were accepted so far.
    accepted: Arc<AtomicUsize>,
}

impl FaultySale {
    /// Starts the processes and the crowd of `buyers` after `stock` units, one each.
    pub async fn start(redis: String, stock: i64, buyers: usize) -> Self {
        Self::start_with(redis, Setup::one_each(stock, buyers)).await
    }

    /// Starts the processes and the crowd as `setup` says.
    pub async fn start_with(redis: String, setup: Setup<'_>) -> Self {
        Self::start_arriving(redis, setup, Arrivals::AT_ONCE).await
    }

    /// Starts the processes and the crowd as `setup` says, the buyers arriving as `arrivals`
    /// says.
    pub async fn start_arriving(redis: String, setup: Setup<'_>, arrivals: Arrivals) -> Self {
        let Setup {
            stock,
            buyers,
            per_user_limit,
            buckets,
            in_flight,
            pause,
            keyed,
            env,
            logs,
        } = setup;
        let cluster = Cluster::on_redis(Arc::new(TestDatabase::fresh().await), redis.clone());
        let observer = cluster.observer().await;
        let product = observer
            .live_product_in(stock, per_user_limit, buckets)
            .await;
        let mut tokens = observer.users(buyers + 40).await;
        let probes = tokens.split_off(buyers).into_iter();
        let (first, first_line) = start(&cluster, "serve", "first server", env, logs).await;
        let (second, second_line) = start(&cluster, "serve", "second server", env, logs).await;
        let (worker, _) = start(&cluster, "worker", "worker", env, logs).await;
        let servers = vec![base_url(&first_line), base_url(&second_line)];
        let client = client_builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(tokio::sync::Semaphore::new(in_flight));
        let mut crowd = Vec::new();
        for (i, token) in tokens.into_iter().enumerate() {
            let server = servers[i % servers.len()].clone();
            let (client, accepted, in_flight) =
                (client.clone(), accepted.clone(), in_flight.clone());
            let arrival = arrivals.every * i as u32;
            crowd.push(tokio::spawn(async move {
                if !arrival.is_zero() {
                    tokio::time::sleep(arrival).await;
                }
                let mut answers = Vec::new();
                for n in 0..per_user_limit + arrivals.past_limit {
                    let key = keyed.then(|| format!("buy-{n}"));
                    let answer = {
                        let _permit = in_flight.acquire().await.unwrap();
                        buy_until_answered(&client, &server, &token, product, key.as_deref()).await
                    };
                    let bought = answer.order.is_some();
                    answers.push(answer);
                    if !bought {
                        break;
                    }
                    accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(pause).await;
                }
                answers
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
            logs: logs.map(Path::to_path_buf),
            client,
            probes,
            probed: HashSet::new(),
            crowd,
            accepted,
        }
    }

    /// The hash tags of the product's stock buckets, as the server that loaded it wrote them.
    pub async fn bucket_tags(&self) -> Vec<String> {
        self.layout_tags()
            .await
            .expect("the product's layout in Redis")
    }

    /// The hash tags of the product's stock buckets in Redis now: `None` while Redis holds
    /// none (the product unloaded) or answers the read with an error (its slot moving).
    pub async fn layout_tags(&self) -> Option<Vec<String>> {
        let mut redis = seckill::redis_link::connect(&self.redis).await.unwrap();
        let layout: Option<String> = redis::cmd("GET")
            .arg(format!(
                "{}{{p:{}}}:layout",
                self.cluster.prefix, self.product
            ))
            .query_async(&mut redis)
            .await
            .ok()?;
        Some(layout?.split(' ').map(str::to_owned).collect())
    }

    /// Waits until the crowd has `n` orders accepted.
    pub async fn wait_accepted(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.accepted.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "the crowd bought nothing");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until a buy is answered again (accepted, or sold out by the crowd) within `within`
    /// of `since`.
    pub async fn answered_again(&mut self, since: Instant, within: Duration) {
        loop {
            let token = self.probes.next().expect("more probe buyers");
            let answer = buy(&self.client, &self.servers[0], &token, self.product, None).await;
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

    /// Every answer of the crowd, once each buyer has done buying.
    pub async fn answers(&mut self) -> Vec<Answer> {
        let mut answers = Vec::new();
        for buy in self.crowd.drain(..) {
            answers.extend(
                tokio::time::timeout(Duration::from_secs(60), buy)
                    .await
                    .expect("the crowd was not answered within 60 s")
                    .unwrap(),
            );
        }
        answers
    }

    /// The server processes' base URLs.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// Each process's name and its log so far (started with logs: see
    /// [`FaultySale::start_with`]).
    pub fn logs(&self) -> Vec<(&'static str, String)> {
        let dir = self.logs.as_ref().expect("a sale started with logs");
        self.processes
            .iter()
            .map(|(name, _)| {
                let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap();
                (*name, log)
            })
            .collect()
    }

    /// Stops the worker with SIGSTOP, as a worker falls behind: the orders stay in the outbox.
    pub async fn stop_worker(&self) {
        probes::signal(self.worker(), "STOP").await;
    }

    /// Lets the stopped worker go on with SIGCONT.
    pub async fn resume_worker(&self) {
        probes::signal(self.worker(), "CONT").await;
    }

    /// The worker process.
    fn worker(&self) -> &Child {
        let (_, worker) = self
            .processes
            .iter()
            .find(|(name, _)| *name == "worker")
            .expect("the sale's worker");
        worker
    }

    /// Fails the test if any process has exited.
    pub fn assert_running(&mut self) {
        for (name, process) in &mut self.processes {
            if let Some(exit) = process.try_wait().unwrap() {
                panic!("the {name} exited ({exit}) after the fault");
            }
        }
    }

    /// Past a lease renewal (every 5 s) and a scheduler leadership term (5 s) after `fault`,
    /// both of which met Redis after it: every process still runs, and every server still
    /// answers buys.
    pub async fn assert_every_process_sells(&mut self, fault: Instant) {
        tokio::time::sleep_until(fault + Duration::from_secs(12)).await;
        self.assert_running();
        for server in self.servers.clone() {
            let token = self.probes.next().expect("more probe buyers");
            let answer = buy(&self.client, &server, &token, self.product, None).await;
            self.probed.extend(answer.order);
            assert_ne!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{server}");
        }
    }

    /// Waits until the worker has emptied the outboxes of the product's buckets.
    pub async fn drained(&self) {
        let mut redis = seckill::redis_link::connect(&self.redis).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let tags = self
                .layout_tags()
                .await
                .unwrap_or_else(|| vec![format!("p:{}", self.product)]);
            let mut waiting = 0;
            for tag in tags {
                let outbox = format!("{}{{{tag}}}:outbox", self.cluster.prefix);
                let length: u64 = redis::cmd("XLEN")
                    .arg(&outbox)
                    .query_async(&mut redis)
                    .await
                    .unwrap();
                waiting += length;
            }
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
    pub async fn stored(&self) -> HashSet<i64> {
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

    /// The units of the product each buyer holds in stored orders (not cancelled), by user id.
    pub async fn units_by_buyer(&self) -> HashMap<i64, i64> {
        let pool = self.observer.pool().await;
        let orders: Vec<(i64, i64)> = sqlx::query_as(self.observer.db.sql(
            "SELECT user_id, quantity FROM orders WHERE product_id = ? AND status <> 'cancelled'",
        ))
        .bind(self.product)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        let mut held = HashMap::new();
        for (user, units) in orders {
            *held.entry(user).or_insert(0) += units;
        }
        held
    }

    /// `seckill reconcile` over the processes' backends: whether it found every product
    /// balanced, and what it printed.
    pub async fn reconcile(&self) -> (bool, String) {
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
pub struct Outcome {
    /// Orders answered `202`, in all and after the fault.
    pub accepted: HashSet<i64>,
    /// Of those, the orders of buys sent after the fault.
    pub accepted_after: usize,
    /// Answered `202`, never stored.
    pub lost: usize,
    /// Buyers answered `503` at least once: Redis was away, or the gate closed. Some of those
    /// tries may have been taken all the same (Redis ran the script, the reply was lost with
    /// the connection): those orders are stored without a `202`, and their buyers see them in
    /// their order list.
    pub unavailable: usize,
    /// Stored, though no buy was answered `202` for them.
    pub stored_unanswered: usize,
}

impl Outcome {
    /// Tallies `answers` of a crowd whose fault came at `fault`, and the orders `probed` by
    /// the probes, against `stored`.
    pub fn of(
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
            "{test}: {} buys, {} orders accepted ({} of probes, {} of buys sent after the \
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
