//! Servers sharing the run's Redis (whatever the run's gate) and one database under one key
//! prefix, and a Redis losing their keys.

use super::app::TestApp;
use super::backends::{TestDatabase, redis_url};
use seckill::clock::SystemClock;
use seckill::config::Config;
use std::sync::Arc;

/// A server over `db` and the local Redis under `prefix`: with a worker inside when `worker`,
/// relaying through RabbitMQ under `amqp` (URL, names) when given, `tweak` applied last.
pub async fn server_on_with(
    db: &Arc<TestDatabase>,
    prefix: &str,
    worker: bool,
    amqp: Option<(String, String)>,
    tweak: impl FnOnce(&mut Config),
) -> TestApp {
    let prefix = prefix.to_owned();
    TestApp::spawn_on(db.clone(), Arc::new(SystemClock), move |c| {
        c.redis_url = Some(redis_url());
        c.redis_key_prefix = prefix;
        c.run_worker = worker;
        if let Some((url, names)) = amqp {
            c.amqp_url = Some(url);
            c.amqp_prefix = names;
            c.amqp_queue_expiry_secs = Some(600);
        }
        tweak(c);
    })
    .await
}

/// Deletes the local Redis's keys that match `pattern`, as a Redis that lost them; fails the
/// test when none does.
pub async fn delete_keys(pattern: &str) {
    let mut redis = seckill::redis_link::connect(&redis_url()).await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "no key matches {pattern}");
    for key in keys {
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
}
