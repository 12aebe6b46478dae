//! The backends of this run of the suite: the one place that reads `SECKILL_TEST_*` and decides
//! the combination, for the whole run.
//!
//! - `SECKILL_TEST_DATABASE`: `sqlite` (default), `postgres` or `mysql`. Each test gets a
//!   database of its own: a temporary SQLite file, or a fresh PostgreSQL / MySQL database on the
//!   local server (`SECKILL_TEST_POSTGRES_URL`, `SECKILL_TEST_MYSQL_URL` name the servers).
//! - `SECKILL_TEST_REDIS=1`: the stock gate in Redis (`SECKILL_TEST_REDIS_URL`, default the
//!   local one; a `redis+cluster://` URL is a Redis Cluster), each test under a key prefix of its
//!   own, with the outbox drained by a worker inside the test server.
//! - `SECKILL_TEST_AMQP=1`: the outbox relayed through RabbitMQ (`SECKILL_TEST_AMQP_URL`),
//!   each test with queue names of its own.
//!
//! A server that cannot be reached fails the test with the reason. A test that needs a
//! combination only some runs have is `#[ignore = "needs …"]`, sits in a `needs_*` module that
//! `scripts/test` names in the runs that have it, and calls [`require`] first, so run anywhere
//! else it fails with the reason instead of passing untested.

use seckill::store::sql::Dialect;
use sqlx::migrate::MigrateDatabase;
use sqlx::{Any, AnyPool, AssertSqlSafe, Executor};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use tempfile::TempDir;
use tokio::sync::OnceCell;

/// A database of one test.
pub struct TestDatabase {
    /// The URL the server under test is given.
    pub url: String,
    /// Its SQL dialect, for the tests' own queries.
    pub dialect: Dialect,
    /// The SQLite file's directory, removed with the database.
    _dir: Option<TempDir>,
}

static NEXT: AtomicU64 = AtomicU64::new(1);
static STALE_DROPPED: OnceCell<()> = OnceCell::const_new();

/// The database kind of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Database {
    /// A temporary SQLite file per test.
    Sqlite,
    /// A fresh database per test on the PostgreSQL server.
    Postgres,
    /// A fresh database per test on the MySQL (MariaDB) server.
    Mysql,
}

/// The backend combination of this run, read once from the environment.
#[derive(Debug)]
pub struct Backends {
    /// Where each test's fresh database lives.
    pub database: Database,
    /// The PostgreSQL or MySQL server the fresh databases are made on (none for SQLite).
    database_server: Option<String>,
    /// Whether the test servers keep their stock gate in Redis (cluster mode) or in process.
    pub gate_in_redis: bool,
    /// The Redis of the run (`SECKILL_TEST_REDIS_URL`): the gate's when it is in Redis, and the
    /// one the tests of a shared gate use whatever the run's gate.
    pub redis_url: String,
    /// Whether the test servers relay their outbox through RabbitMQ.
    pub relay_through_amqp: bool,
    /// The RabbitMQ of the run (`SECKILL_TEST_AMQP_URL`), used by the tests of the relay
    /// whatever the run's pipeline.
    pub amqp_url: String,
}

impl Backends {
    fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let database = match var("SECKILL_TEST_DATABASE").as_deref().unwrap_or("sqlite") {
            "sqlite" => Database::Sqlite,
            "postgres" => Database::Postgres,
            "mysql" => Database::Mysql,
            other => panic!("SECKILL_TEST_DATABASE={other:?}: use sqlite, postgres or mysql"),
        };
        let database_server = match database {
            Database::Sqlite => None,
            Database::Postgres => Some(
                var("SECKILL_TEST_POSTGRES_URL")
                    .unwrap_or_else(|| "postgres://postgres:postgres@127.0.0.1:5432".into()),
            ),
            Database::Mysql => Some(
                var("SECKILL_TEST_MYSQL_URL")
                    .unwrap_or_else(|| "mysql://root@127.0.0.1:3306".into()),
            ),
        };
        Self {
            database,
            database_server,
            gate_in_redis: var("SECKILL_TEST_REDIS").as_deref() == Some("1"),
            redis_url: var("SECKILL_TEST_REDIS_URL")
                .unwrap_or_else(|| "redis://127.0.0.1:6379".into()),
            relay_through_amqp: var("SECKILL_TEST_AMQP").as_deref() == Some("1"),
            amqp_url: var("SECKILL_TEST_AMQP_URL")
                .unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into()),
        }
    }

    /// Whether the run's Redis is a Redis Cluster.
    pub fn redis_is_cluster(&self) -> bool {
        self.redis_url.starts_with("redis+cluster://")
    }
}

/// This run's backends.
pub fn backends() -> &'static Backends {
    static BACKENDS: OnceLock<Backends> = OnceLock::new();
    BACKENDS.get_or_init(Backends::from_env)
}

/// A backend combination that only some runs of `scripts/test` have, or a server some tests use
/// whatever the combination (which a plain `cargo test` on a machine without it must not fail
/// on). Each variant's tests sit in a module of the same name in snake case with a `needs_`
/// prefix, which `scripts/test` names in the runs that have it.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// The gate on a single Redis, and RabbitMQ.
    SingleRedisAndAmqp,
    /// The gate on a single Redis, without RabbitMQ.
    SingleRedisNoAmqp,
    /// The gate on a single Redis, with RabbitMQ or without.
    SingleRedis,
    /// The gate on a Redis Cluster.
    RedisCluster,
    /// The outbox relayed through RabbitMQ.
    Amqp,
    /// A database server (PostgreSQL or MySQL) and the gate on a single Redis.
    ServerDatabaseAndSingleRedis,
    /// Embedded on SQLite, or MySQL with RabbitMQ: the two ends of the payment pipeline.
    SqliteEmbeddedOrMysqlAmqp,
    /// A Redis server answering at `SECKILL_TEST_REDIS_URL`, whatever the run's gate: for the
    /// tests whose servers share a gate of their own on it.
    RedisServer,
    /// A Redis server as [`Need::RedisServer`] and RabbitMQ answering at
    /// `SECKILL_TEST_AMQP_URL`, whatever the run's pipeline.
    RedisAndRabbitmqServers,
    /// PostgreSQL, in the run with the gate on a single Redis and no RabbitMQ (one run of
    /// `scripts/test`), and `redis-server` on the `PATH`: the tests that start a Redis Sentinel
    /// group of their own and run processes over it.
    SentinelGroup,
    /// The programs a deployment test starts its hosts, backends and load balancer with
    /// (`ip`, `haproxy`, `openssl`, `redis-server`, `setpriv`, RabbitMQ's and PostgreSQL's),
    /// in a run without RabbitMQ (so its processes relay through their own node only).
    Deployment,
}

impl Need {
    /// Whether `run` has it.
    fn holds(self, run: &Backends) -> bool {
        let single_redis = run.gate_in_redis && !run.redis_is_cluster();
        match self {
            Self::SingleRedisAndAmqp => single_redis && run.relay_through_amqp,
            Self::SingleRedisNoAmqp => single_redis && !run.relay_through_amqp,
            Self::SingleRedis => single_redis,
            Self::RedisCluster => run.gate_in_redis && run.redis_is_cluster(),
            Self::Amqp => run.relay_through_amqp,
            Self::ServerDatabaseAndSingleRedis => run.database != Database::Sqlite && single_redis,
            Self::SqliteEmbeddedOrMysqlAmqp => {
                (run.database == Database::Sqlite && !run.gate_in_redis)
                    || (run.database == Database::Mysql && run.relay_through_amqp)
            }
            Self::SentinelGroup => {
                run.database == Database::Postgres
                    && single_redis
                    && !run.relay_through_amqp
                    && on_path("redis-server").is_some()
            }
            Self::RedisServer => answers(&run.redis_url),
            Self::RedisAndRabbitmqServers => answers(&run.redis_url) && answers(&run.amqp_url),
            Self::Deployment => {
                !run.relay_through_amqp
                    && ["ip", "haproxy", "openssl", "redis-server", "setpriv"]
                        .iter()
                        .all(|program| on_path(program).is_some())
                    && std::path::Path::new(RABBITMQ_SERVER).exists()
            }
        }
    }
}

/// RabbitMQ's own start script (Debian's `rabbitmq-server` on the `PATH` switches to the
/// system's `rabbitmq` user and node): a test starts a node of its own with it.
pub const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// Where `program` is on the `PATH`, when it is there.
pub fn on_path(program: &str) -> Option<std::path::PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|path| path.exists())
}

/// Whether the (first) server of `url` accepts a TCP connection: a test that needs a server
/// whatever the combination checks it is there, not the combination.
fn answers(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme.split('/').next().unwrap_or_default();
    let hosts = authority
        .rsplit_once('@')
        .map_or(authority, |(_, hosts)| hosts);
    let host_port = hosts.split(',').next().unwrap_or_default();
    std::net::ToSocketAddrs::to_socket_addrs(host_port)
        .into_iter()
        .flatten()
        .any(|addr| {
            std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).is_ok()
        })
}

/// Fails the test unless this run has `need`: an ignored test run by hand (`--ignored`) in a
/// combination without its backends says so, rather than pass without testing anything.
pub fn require(need: Need) {
    let run = backends();
    assert!(
        need.holds(run),
        "this test needs {need:?}, which this run does not have ({run:?}); scripts/test runs it \
         where it does: see its #[ignore] reason"
    );
}

/// Whether a database named `seckill_t_<pid>_…` belongs to a test process that has ended: only
/// those are dropped, so two test runs on one machine leave each other's databases alone.
fn of_an_ended_run(name: &str) -> bool {
    name.strip_prefix("seckill_t_")
        .and_then(|rest| rest.split('_').next())
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_none_or(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// Databases of earlier runs of this test binary that have ended, found by their name prefix.
async fn drop_stale_databases(server: &str, dialect: Dialect) {
    let admin = match dialect {
        Dialect::Postgres => format!("{server}/postgres"),
        _ => format!("{server}/mysql"),
    };
    let pool = AnyPool::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test database server {server}: {e}"));
    let list = match dialect {
        Dialect::Postgres => {
            "SELECT datname::text FROM pg_database WHERE datname LIKE 'seckill_t_%'"
        }
        _ => {
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'seckill_t_%'"
        }
    };
    let names: Vec<String> = sqlx::query_scalar(list).fetch_all(&pool).await.unwrap();
    for name in names.iter().filter(|n| of_an_ended_run(n)) {
        let drop = match dialect {
            Dialect::Postgres => format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
            _ => format!("DROP DATABASE IF EXISTS `{name}`"),
        };
        let _ = pool.execute(AssertSqlSafe(drop)).await;
    }
    pool.close().await;
}

impl TestDatabase {
    /// A new, empty database for one test.
    pub async fn fresh() -> Self {
        sqlx::any::install_default_drivers();
        let Some(server) = backends().database_server.clone() else {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("seckill.db").display());
            return Self {
                url,
                dialect: Dialect::Sqlite,
                _dir: Some(dir),
            };
        };
        let dialect = Dialect::from_url(&server).unwrap();
        STALE_DROPPED
            .get_or_init(|| drop_stale_databases(&server, dialect))
            .await;
        let name = format!(
            "seckill_t_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let url = format!("{server}/{name}");
        Any::create_database(&url)
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {url}: {e}"));
        Self {
            url,
            dialect,
            _dir: None,
        }
    }

    /// The database `url` names on a server of the test's own; the server under test creates
    /// it.
    pub fn on_own_server(url: String) -> Self {
        Self {
            dialect: Dialect::from_url(&url).unwrap(),
            url,
            _dir: None,
        }
    }

    /// `sql` with this database's placeholders.
    pub fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(self.dialect.placeholders(sql))
    }
}

/// The Redis URL and a fresh key prefix, when this run puts the gate in Redis.
pub async fn redis() -> Option<(String, String)> {
    let run = backends();
    if !run.gate_in_redis {
        return None;
    }
    STALE_KEYS_DROPPED
        .get_or_init(|| drop_stale_keys(&run.redis_url))
        .await;
    let prefix = format!(
        "seckill-test:{}:{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    Some((run.redis_url.clone(), prefix))
}

/// With `SECKILL_TEST_AMQP=1` (needs `SECKILL_TEST_REDIS=1`): RabbitMQ at
/// `SECKILL_TEST_AMQP_URL` (default the local one) and exchange and queue names of this test's
/// own. Its queues are declared to expire once unused, so failed runs leave nothing behind.
pub fn amqp() -> Option<(String, String)> {
    let run = backends();
    if !run.relay_through_amqp {
        return None;
    }
    let prefix = format!(
        "seckill-test.{}.{}.",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    Some((run.amqp_url.clone(), prefix))
}

/// The run's Redis (`SECKILL_TEST_REDIS_URL`), whatever the run's gate.
pub fn redis_url() -> String {
    backends().redis_url.clone()
}

/// A key prefix of one shared-gate test's own.
pub fn fresh_prefix() -> String {
    format!(
        "seckill-test:{}:shared{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// The run's RabbitMQ (`SECKILL_TEST_AMQP_URL`), whatever the run's backends, with exchange and
/// queue names of `prefix`'s own.
pub fn local_amqp(prefix: &str) -> (String, String) {
    (
        backends().amqp_url.clone(),
        format!("{}.", prefix.replace(':', ".")),
    )
}

static STALE_KEYS_DROPPED: OnceCell<()> = OnceCell::const_new();

/// Keys left by earlier runs of this test binary.
async fn drop_stale_keys(url: &str) {
    let mut redis = seckill::redis_link::connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test Redis {url}: {e:#}"));
    let mine = format!("seckill-test:{}:", std::process::id());
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("seckill-test:*")
        .query_async(&mut redis)
        .await
        .unwrap();
    for key in keys.iter().filter(|k| !k.starts_with(&mine)) {
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
}
