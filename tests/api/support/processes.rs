//! Cluster mode as it is deployed: `seckill serve` and `seckill worker` as processes of the
//! real binary over the backends one test's processes share, an in-process observer that mints
//! tokens and reads what is stored, and a sale spread over two servers and a worker.

use super::app::{ADMIN_TOKEN, SECRET, TestApp};
use super::backends::{self, TestDatabase, fresh_prefix, redis_url};
use super::crowd::assert_alive;
use super::shared_redis::server_on_with;
use seckill::config::Config;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The backends all processes of one test share.
pub struct Cluster {
    /// The database every process and the observer use.
    pub db: Arc<TestDatabase>,
    /// The database URL of the processes, when they reach it another way than the observer
    /// (through a test's proxy).
    database_url: Option<String>,
    /// The Redis of the processes (the observer's is always the local one).
    redis: String,
    /// The Redis key prefix of this test's processes, apart from every other test's.
    pub prefix: String,
    /// RabbitMQ's URL and this cluster's exchange and queue names, when the processes relay
    /// through it.
    amqp: Option<(String, String)>,
}

impl Cluster {
    /// Processes over `db` and the run's Redis, relaying through RabbitMQ when the run does.
    pub fn new(db: Arc<TestDatabase>) -> Self {
        Self::on_redis(db, redis_url())
    }

    /// Processes over the Redis at `redis`.
    pub fn on_redis(db: Arc<TestDatabase>, redis: String) -> Self {
        Self {
            db,
            database_url: None,
            redis,
            prefix: fresh_prefix(),
            amqp: backends::amqp(),
        }
    }

    /// The processes relay through the RabbitMQ at `url` (names of this cluster's own), whatever
    /// the run's backends.
    pub fn with_amqp(mut self, url: String) -> Self {
        let names = self.prefix.trim_end_matches(':').replace(':', ".");
        self.amqp = Some((url, format!("{names}.")));
        self
    }

    /// The processes reach the database at `url` (the observer still reaches it directly).
    pub fn with_database_url(mut self, url: String) -> Self {
        self.database_url = Some(url);
        self
    }

    /// RabbitMQ's URL and the names of this cluster's exchanges and queues, when it has one.
    pub fn amqp(&self) -> Option<&(String, String)> {
        self.amqp.as_ref()
    }

    /// The in-process server that mints tokens and reads the database; it runs no worker.
    pub async fn observer(&self) -> TestApp {
        self.observer_with(|_| {}).await
    }

    /// The observer, with `tweak` applied to its configuration.
    pub async fn observer_with(&self, tweak: impl FnOnce(&mut Config)) -> TestApp {
        server_on_with(&self.db, &self.prefix, false, self.amqp.clone(), tweak).await
    }

    /// `seckill <subcommand>` over the shared backends, with `extra` environment.
    pub fn command(&self, subcommand: &str, extra: &[(&str, &str)]) -> Command {
        self.command_via(&[], subcommand, extra)
    }

    /// [`Cluster::command`] run through `prefix` (`ip netns exec HOST`: on another host).
    pub fn command_via(
        &self,
        prefix: &[String],
        subcommand: &str,
        extra: &[(&str, &str)],
    ) -> Command {
        let binary = env!("CARGO_BIN_EXE_seckill");
        let mut command = match prefix.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .arg(subcommand)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "error")
            .env(
                "SECKILL_DATABASE_URL",
                self.database_url.as_ref().unwrap_or(&self.db.url),
            )
            .env("SECKILL_REDIS_URL", &self.redis)
            .env("SECKILL_REDIS_KEY_PREFIX", &self.prefix)
            .env("SECKILL_SECRET", SECRET)
            .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("SECKILL_HTTP_ADDR", "127.0.0.1:0")
            .env("SECKILL_RATE_LIMIT__PER_IP_PER_SEC", "1000000")
            .env("SECKILL_RATE_LIMIT__PER_IP_BURST", "1000000")
            // Buyers of the fault tests try again every 50 ms while a server answers 503.
            .env("SECKILL_RATE_LIMIT__PER_USER_PER_SEC", "1000000")
            .env("SECKILL_RATE_LIMIT__PER_USER_BURST", "1000000")
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if let Some((url, prefix)) = &self.amqp {
            command
                .env("SECKILL_AMQP_URL", url)
                .env("SECKILL_AMQP_PREFIX", prefix)
                .env("SECKILL_AMQP_QUEUE_EXPIRY_SECS", "600");
        }
        for (key, value) in extra {
            command.env(key, value);
        }
        command
    }

    /// Starts a process and waits for the first line it prints (it is ready then).
    pub async fn start(&self, subcommand: &str, extra: &[(&str, &str)]) -> (Child, String) {
        self.start_via(&[], subcommand, extra).await
    }

    /// [`Cluster::start`] through `prefix` (see [`Cluster::command_via`]).
    pub async fn start_via(
        &self,
        prefix: &[String],
        subcommand: &str,
        extra: &[(&str, &str)],
    ) -> (Child, String) {
        launch(self.command_via(prefix, subcommand, extra), subcommand).await
    }

    /// A server process; returns it and its base URL.
    pub async fn server(&self) -> (Child, String) {
        self.server_with(&[]).await
    }

    /// A server process with `extra` environment; returns it and its base URL.
    pub async fn server_with(&self, extra: &[(&str, &str)]) -> (Child, String) {
        self.server_via(&[], extra).await
    }

    /// [`Cluster::server_with`] through `prefix` (see [`Cluster::command_via`]).
    pub async fn server_via(&self, prefix: &[String], extra: &[(&str, &str)]) -> (Child, String) {
        let (child, line) = self.start_via(prefix, "serve", extra).await;
        (child, base_url(&line))
    }
}

/// Starts `command` (a `seckill <subcommand>` with its stdout piped) and waits for the first
/// line it prints (it is ready then); returns the process and that line.
pub async fn launch(mut command: Command, subcommand: &str) -> (Child, String) {
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("seckill {subcommand} did not start within 30 s"))
        .unwrap()
        .unwrap_or_else(|| panic!("seckill {subcommand} exited before it was ready"));
    // Keep draining its output so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, line)
}

/// A sale over a cluster's processes: the observer, a live product (one unit per buyer), the
/// crowd's tokens and one more buyer's, two servers and a worker.
pub struct Sale {
    /// The in-process server that mints tokens and reads what is stored.
    pub observer: TestApp,
    /// The product on sale.
    pub product: i64,
    /// The crowd's buyers, for [`Crowd::start`].
    pub tokens: Vec<String>,
    /// A buyer outside the crowd.
    pub spare: String,
    /// The two server processes and their base URLs.
    pub servers: [(Child, String); 2],
    /// The worker process that stores the orders.
    pub worker: Child,
}

impl Sale {
    /// Creates the product of `stock` units and `buyers` buyers, then starts the processes
    /// with `extra` environment.
    pub async fn start(
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
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(|(_, url)| url.clone()).collect()
    }

    /// Fails the test if a server or the worker has exited.
    pub fn assert_alive(&mut self) {
        let [(first, _), (second, _)] = &mut self.servers;
        assert_alive(&mut [
            ("first server", first),
            ("second server", second),
            ("worker", &mut self.worker),
        ]);
    }
}

/// `seckill serve` as a process of its own over `db`, embedded (no Redis), under the open-file
/// limit `ulimit -n` (the shell's as it is when `None`); returns it and the address it listens
/// on. A test reads the process's own memory, or gives it a limit of its own, through it.
pub async fn embedded_server(db: &TestDatabase, files: Option<u64>) -> (Child, String) {
    embedded_server_with(db, files, &[]).await
}

/// [`embedded_server`] with `extra` environment.
pub async fn embedded_server_with(
    db: &TestDatabase,
    files: Option<u64>,
    extra: &[(&str, &str)],
) -> (Child, String) {
    let limit = files.map_or(String::new(), |files| format!("ulimit -n {files} && "));
    let mut child = Command::new("sh")
        .args(["-c", &format!("{limit}exec \"$0\" serve")])
        .arg(env!("CARGO_BIN_EXE_seckill"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "error")
        .env("SECKILL_DATABASE_URL", &db.url)
        .env("SECKILL_SECRET", SECRET)
        .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("SECKILL_HTTP_ADDR", "127.0.0.1:0")
        .envs(extra.iter().copied())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the server starts within 30 s")
        .unwrap()
        .expect("the server prints its address");
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, addr)
}

/// The base URL a process's first line names (`… at http://ADDR/ …`).
pub fn base_url(line: &str) -> String {
    line.split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .trim_end_matches(['/', ';', ','])
        .to_owned()
}
