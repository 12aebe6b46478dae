//! Backpressure: when the database (or the worker) falls behind, accepted orders wait in a
//! bounded backlog (cluster mode: the product's outbox; embedded mode: the group commit's
//! queue). Buys past the bound are refused with `503 backlog_full` and `Retry-After`, never
//! accepted and dropped; once the database catches up every accepted order is stored once and
//! the refused buyers can buy.

use crate::support::TestDatabase;
use crate::support::{TestApp, code, status_and_json};
use crate::support::{fresh_prefix, local_amqp, server_on_with};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use seckill::store::sql::Dialect;
use serde_json::Value;
use sqlx::{AnyConnection, Connection, Executor};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Most orders that may wait: the bound of each test's backlog.
const BOUND: usize = 8;

/// Another connection holding the test database's write lock on the orders, so the server's
/// order writer waits for it: a database that has stalled, while reads go on.
struct WriteLock {
    connection: AnyConnection,
    dialect: Dialect,
}

impl WriteLock {
    async fn take(db: &TestDatabase) -> Self {
        let mut connection = AnyConnection::connect(&db.url).await.unwrap();
        let statements: &[&'static str] = match db.dialect {
            Dialect::Sqlite => &["BEGIN IMMEDIATE"],
            Dialect::Postgres => &["BEGIN", "LOCK TABLE orders IN SHARE MODE"],
            Dialect::MySql => &["LOCK TABLES orders READ"],
        };
        for statement in statements {
            connection.execute(*statement).await.unwrap();
        }
        Self {
            connection,
            dialect: db.dialect,
        }
    }

    async fn release(mut self) {
        let statement = match self.dialect {
            Dialect::MySql => "UNLOCK TABLES",
            _ => "COMMIT",
        };
        self.connection.execute(statement).await.unwrap();
        self.connection.close().await.unwrap();
    }
}

/// How the test server falls behind, by the run's mode.
enum Behind {
    /// Cluster mode: no worker drains the outbox until one starts over the same backends.
    NoWorker {
        db: Arc<TestDatabase>,
        prefix: String,
        amqp: Option<(String, String)>,
    },
    /// Embedded mode: the database's write lock is held.
    Locked(WriteLock),
}

impl Behind {
    /// Lets the pipeline catch up; returns the worker, to keep running.
    async fn catch_up(self) -> Option<TestApp> {
        match self {
            Self::NoWorker { db, prefix, amqp } => {
                Some(server_on_with(&db, &prefix, true, amqp, |_| {}).await)
            }
            Self::Locked(lock) => {
                lock.release().await;
                None
            }
        }
    }
}

/// One buy's answer: the buyer's token, the status, the body and the `Retry-After` header.
type Answer = (String, StatusCode, Value, Option<String>);

async fn buy(app: &TestApp, token: String, product: i64) -> Answer {
    let response = app.buy_response(&token, product, 1).await;
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .map(|value| value.to_str().unwrap().to_owned());
    let (status, body) = status_and_json(response).await;
    (token, status, body, retry_after)
}

fn backlog_full(answer: &Answer) -> bool {
    answer.1 == StatusCode::SERVICE_UNAVAILABLE && code(&answer.2) == "backlog_full"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_the_backlog_bound_buys_are_refused_and_every_accepted_order_is_stored_once() {
    let db = Arc::new(TestDatabase::fresh().await);
    let crowd = 5 * BOUND;
    let stock = 4 * crowd as i64;
    // Cluster mode: the outbox holds BOUND, exactly, with no worker to empty it. Embedded mode:
    // the group commit's queue holds BOUND, and the writer has taken one order into each of its
    // two batches in flight.
    let cluster = match crate::support::backends::redis().await {
        Some(_) => {
            let prefix = fresh_prefix();
            let amqp = crate::support::backends::amqp().map(|_| local_amqp(&prefix));
            Some((prefix, amqp))
        }
        None => None,
    };
    let (app, most_waiting) = match &cluster {
        Some((prefix, amqp)) => {
            let app = server_on_with(&db, prefix, false, amqp.clone(), |c| {
                c.outbox_max_orders = BOUND as u64;
            })
            .await;
            (app, BOUND)
        }
        None => {
            let app = TestApp::spawn_on(db.clone(), Arc::new(SystemClock), |c| {
                c.commit_queue_max_orders = BOUND;
                c.max_batch = 1;
            })
            .await;
            (app, BOUND + 2)
        }
    };
    let app = Arc::new(app);
    let product = app.live_product(stock, 1).await;
    let tokens = app.users(crowd).await;
    let behind = match cluster {
        Some((prefix, amqp)) => Behind::NoWorker {
            db: db.clone(),
            prefix,
            amqp,
        },
        None => Behind::Locked(WriteLock::take(&db).await),
    };

    // A crowd buys while the pipeline is behind.
    let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for token in &tokens {
        let (app, token, answers) = (app.clone(), token.clone(), answers.clone());
        tokio::spawn(async move { answers.send(buy(&app, token, product).await).unwrap() });
    }
    drop(answers);
    let mut first = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.iter().filter(|a| backlog_full(a)).count() < crowd - most_waiting {
        assert!(Instant::now() < deadline, "no refusals: {first:?}");
        first.push(answered.recv().await.unwrap());
    }
    // The database catches up; the buys that waited are answered.
    let _worker = behind.catch_up().await;
    while let Some(answer) = answered.recv().await {
        first.push(answer);
    }

    let accepted: HashSet<String> = first
        .iter()
        .filter(|(_, status, ..)| *status == StatusCode::ACCEPTED)
        .map(|(_, _, body, _)| body["order_id"].as_str().unwrap().to_owned())
        .collect();
    let refused: Vec<String> = first
        .iter()
        .filter(|a| backlog_full(a))
        .map(|(token, ..)| token.clone())
        .collect();
    assert_eq!(accepted.len() + refused.len(), crowd, "{first:?}");
    assert!(
        (BOUND..=most_waiting).contains(&accepted.len()),
        "{} accepted",
        accepted.len()
    );
    for (_, _, body, retry_after) in first.iter().filter(|a| backlog_full(a)) {
        assert_eq!(retry_after.as_deref(), Some("1"));
        assert!(body["error"]["message"].as_str().is_some(), "{body}");
    }
    // Every accepted order is stored, once; nothing refused was.
    let stored: Vec<i64> = app.live_order_ids(product).await;
    let stored: HashSet<String> = stored.iter().map(i64::to_string).collect();
    assert_eq!(stored, accepted);

    // The refused buyers buy now, retrying while the backlog (cluster mode: filled by these
    // very buys faster than the worker empties it) says so.
    for token in refused {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = buy(&app, token.clone(), product).await;
            if answer.1 == StatusCode::ACCEPTED {
                break;
            }
            assert!(
                backlog_full(&answer) && Instant::now() < deadline,
                "{answer:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let crowd = crowd as i64;
    assert_eq!(app.stored(product).await, (crowd, crowd, stock - crowd));
    assert_eq!(app.product(product).await["remaining"], stock - crowd);
}
