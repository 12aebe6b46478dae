//! The backends a test runs against, chosen for the whole run by environment variables:
//!
//! - `SECKILL_TEST_DATABASE`: `sqlite` (default), `postgres` or `mysql`. Each test gets a
//!   database of its own: a temporary SQLite file, or a fresh PostgreSQL / MySQL database on the
//!   local server (`SECKILL_TEST_POSTGRES_URL`, `SECKILL_TEST_MYSQL_URL` name the servers).
//! - `SECKILL_TEST_REDIS=1`: the stock gate in Redis (`SECKILL_TEST_REDIS_URL`, default the
//!   local one), each test under a key prefix of its own, with the outbox drained by a worker
//!   inside the test server.
//! - `SECKILL_TEST_AMQP=1`: the outbox relayed through RabbitMQ (`SECKILL_TEST_AMQP_URL`),
//!   each test with queue names of its own.
//!
//! A server that cannot be reached fails the test with the reason; nothing is skipped.

use seckill::store::sql::Dialect;
use sqlx::migrate::MigrateDatabase;
use sqlx::{Any, AnyPool, AssertSqlSafe, Executor};
use std::sync::atomic::{AtomicU64, Ordering};
use tempfile::TempDir;
use tokio::sync::OnceCell;

/// A database of one test.
pub struct TestDatabase {
    pub url: String,
    pub dialect: Dialect,
    _dir: Option<TempDir>,
}

static NEXT: AtomicU64 = AtomicU64::new(1);
static STALE_DROPPED: OnceCell<()> = OnceCell::const_new();

fn server_url() -> Option<String> {
    let kind = std::env::var("SECKILL_TEST_DATABASE").unwrap_or_else(|_| "sqlite".into());
    match kind.as_str() {
        "sqlite" => None,
        "postgres" => Some(
            std::env::var("SECKILL_TEST_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1:5432".into()),
        ),
        "mysql" => Some(
            std::env::var("SECKILL_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into()),
        ),
        other => panic!("SECKILL_TEST_DATABASE={other:?}: use sqlite, postgres or mysql"),
    }
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
        let Some(server) = server_url() else {
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

    /// `sql` with this database's placeholders.
    pub fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(self.dialect.placeholders(sql))
    }
}

/// The Redis URL and a fresh key prefix, when this run puts the gate in Redis.
pub async fn redis() -> Option<(String, String)> {
    std::env::var("SECKILL_TEST_REDIS")
        .ok()
        .filter(|v| v == "1")?;
    let url =
        std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    STALE_KEYS_DROPPED
        .get_or_init(|| drop_stale_keys(&url))
        .await;
    let prefix = format!(
        "seckill-test:{}:{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    Some((url, prefix))
}

/// With `SECKILL_TEST_AMQP=1` (needs `SECKILL_TEST_REDIS=1`): RabbitMQ at
/// `SECKILL_TEST_AMQP_URL` (default the local one) and exchange and queue names of this test's
/// own. Its queues are declared to expire once unused, so failed runs leave nothing behind.
pub fn amqp() -> Option<(String, String)> {
    std::env::var("SECKILL_TEST_AMQP")
        .ok()
        .filter(|v| v == "1")?;
    let url = std::env::var("SECKILL_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let prefix = format!(
        "seckill-test.{}.{}.",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    Some((url, prefix))
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
