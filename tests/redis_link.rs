//! `seckill::redis_link` against real servers: a single Redis (`SECKILL_TEST_REDIS_URL`, default
//! `redis://127.0.0.1:6379`) and a three-node Redis Cluster (`SECKILL_TEST_REDIS_CLUSTER_URL`,
//! default `redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002`).
//!
//! Both tests are `#[ignore]`d, so a plain `cargo test` on a machine without the servers reports
//! them as not run; `scripts/test` runs them (`cargo test --test redis_link -- --ignored`). Run
//! without its server, a test fails with the reason and the command that starts it
//! (`eval "$(scripts/services redis redis-cluster)"`).

use std::time::{SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use seckill::redis_link::{RedisLink, connect};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

async fn link(variable: &str, default: &str, service: &str) -> RedisLink {
    let url = env_or(variable, default);
    match connect(&url).await {
        Ok(link) => link,
        Err(e) => panic!(
            "{e:#}\nThis test needs the server of {variable}: start it with \
             `eval \"$(scripts/services {service})\"` (or point {variable} at one)."
        ),
    }
}

/// A key part no other run (or concurrent test) uses.
fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// Runs what seckill needs from either kind of link: a script over two keys of one hash tag
/// (loaded on the spot: its text is new to the server, so EVALSHA answers NOSCRIPT first), then
/// plain SET/GET on keys spread over many slots.
async fn exercise(mut link: RedisLink) {
    let run = unique();
    let stock = format!("seckill-test:{{t}}:stock:{run}");
    let buyers = format!("seckill-test:{{t}}:buyers:{run}");
    // A comment unique to this run makes the script's SHA new to every node.
    let script = redis::Script::new(&format!(
        "-- run {run}
         redis.call('SET', KEYS[1], ARGV[1], 'EX', 60)
         local left = redis.call('DECRBY', KEYS[1], ARGV[2])
         redis.call('SADD', KEYS[2], ARGV[3])
         redis.call('EXPIRE', KEYS[2], 60)
         return {{left, redis.call('SCARD', KEYS[2])}}"
    ));
    let (left, buyers_count): (i64, i64) = script
        .key(&stock)
        .key(&buyers)
        .arg(10)
        .arg(3)
        .arg("alice")
        .invoke_async(&mut link)
        .await
        .expect("the script runs");
    assert_eq!((left, buyers_count), (7, 1));
    // The cached script runs again (EVALSHA, no reload) and sees its own writes.
    let again: (i64, i64) = script
        .key(&stock)
        .key(&buyers)
        .arg(5)
        .arg(1)
        .arg("bob")
        .invoke_async(&mut link)
        .await
        .expect("the script runs again");
    assert_eq!(again, (4, 2));

    for i in 0..16 {
        let key = format!("seckill-test:plain:{run}:{i}");
        let () = link
            .set_ex(&key, format!("value {i}"), 60)
            .await
            .expect("SET works");
        let value: String = link.get(&key).await.expect("GET works");
        assert_eq!(value, format!("value {i}"));
    }
    let stock_left: i64 = link
        .get(&stock)
        .await
        .expect("GET of the script's key works");
    assert_eq!(stock_left, 4);
}

#[tokio::test]
#[ignore = "needs a Redis server: run by scripts/test"]
async fn a_single_redis_runs_scripts_and_commands() {
    let link = link("SECKILL_TEST_REDIS_URL", "redis://127.0.0.1:6379", "redis").await;
    assert!(!link.is_cluster());
    exercise(link).await;
}

#[tokio::test]
#[ignore = "needs a Redis Cluster: run by scripts/test"]
async fn a_redis_cluster_runs_scripts_and_commands() {
    let link = link(
        "SECKILL_TEST_REDIS_CLUSTER_URL",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
        "redis-cluster",
    )
    .await;
    assert!(link.is_cluster());
    exercise(link).await;
}
