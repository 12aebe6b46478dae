//! The database a test runs against, chosen for the whole run by `SECKILL_TEST_DATABASE`:
//! `sqlite` (default), `postgres` or `mysql`. Each test gets a database of its own: a temporary
//! SQLite file, or a fresh PostgreSQL / MySQL database on the local server
//! (`SECKILL_TEST_POSTGRES_URL`, `SECKILL_TEST_MYSQL_URL` name the servers). A server that
//! cannot be reached fails the test with the reason; nothing is skipped.

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

/// Databases of earlier runs of this test binary, found by their name prefix.
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
    let mine = format!("seckill_t_{}_", std::process::id());
    for name in names.iter().filter(|n| !n.starts_with(&mine)) {
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
