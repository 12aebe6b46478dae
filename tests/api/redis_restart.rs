//! Redis killed in the middle of a sale: two `seckill serve` processes and a `seckill worker` keep
//! running over a Redis of the test's own (see `support/private_redis.rs`), a crowd of buyers keeps
//! buying, and afterwards nothing is oversold, every stored order is stored once, and what was lost
//! is what the deployment's Redis settings allow (RELIABILITY.md has the figures).
//!
//! These tests bring their own Redis, so running them in every backend combination of
//! `scripts/test` would only multiply its time: each runs where `SECKILL_TEST_REDIS=1` names a
//! single Redis, as its `needs_*` module and `#[ignore]` reason say; elsewhere it is ignored.

use crate::support::faulty_sale::{FaultySale, Outcome};
use crate::support::private_redis::{Persistence, PrivateRedis};
use std::time::Duration;
use tokio::time::Instant;

/// Redis with its append-only file, killed with SIGKILL and started again from it: it comes
/// back with every write it acknowledged (the file is written before each reply; `appendfsync`
/// only says when the operating system is told to put it on disk, which a killed process does
/// not need), so the servers reconnect, the gate reopens by itself without a rebuild, every
/// accepted order is stored and the gate and database balance.
async fn redis_killed_and_restarted_from_its_append_only_file(fsync: &'static str) {
    let test = format!("redis killed, restarted from its AOF (appendfsync {fsync})");
    let mut redis = PrivateRedis::start(Persistence::Aof(fsync)).await;
    let mut sale = FaultySale::start(redis.url(), 600, 1_500).await;
    sale.wait_accepted(100).await;
    redis.kill_and_restart().await;
    let restarted = Instant::now();
    sale.answered_again(restarted, Duration::from_secs(5)).await;
    let answers = sale.answers().await;
    sale.assert_every_process_sells(restarted).await;
    sale.drained().await;
    let stored = sale.stored().await;
    let outcome = Outcome::of(&test, &answers, &sale.probed, restarted, &stored);
    assert_eq!(outcome.lost, 0, "accepted orders lost with the AOF");
    assert!(
        outcome.stored_unanswered <= outcome.unavailable,
        "{} orders stored that no buy was answered for",
        outcome.stored_unanswered
    );
    let (balanced, report) = sale.reconcile().await;
    assert!(balanced, "the gate and the database differ:\n{report}");
    sale.assert_running();
    redis.stop().await;
}

mod needs_single_redis {
    use super::*;
    use crate::support::{Need, require};

    /// The units `seckill reconcile` reports accepted and neither stored nor in the outbox for
    /// `product`, from its table (the product's line; its name is two words).
    fn missing_units(report: &str, product: i64) -> i64 {
        let line = report
            .lines()
            .find(|line| line.split_whitespace().next() == Some(&product.to_string()))
            .unwrap_or_else(|| panic!("no line for product {product}:\n{report}"));
        line.split_whitespace()
            .nth(10)
            .and_then(|missing| missing.parse().ok())
            .unwrap_or_else(|| panic!("no missing units in {line:?}"))
    }

    /// Redis without persistence (or a replica promoted without the data) comes back empty: the
    /// gate stays closed until every server has shared again what it accepted, is rebuilt from
    /// the database less what is unaccounted for, and the sale goes on without selling more than
    /// the stock or losing an order accepted after the restart; `seckill reconcile` reports what
    /// the empty Redis lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a single Redis: run by scripts/test on sqlite redis, postgres redis and mysql redis amqp"]
    async fn redis_restarted_empty_mid_crowd_leaves_every_process_selling_and_nothing_oversold() {
        require(Need::SingleRedis);
        let test = "redis restarted empty";
        let mut redis = PrivateRedis::start(Persistence::None).await;
        let mut sale = FaultySale::start(redis.url(), 600, 1_500).await;
        sale.wait_accepted(100).await;
        redis.kill_and_restart().await;
        let restarted = Instant::now();
        // Closed until every server has shared its counts again: a few seconds.
        sale.answered_again(restarted, Duration::from_secs(15))
            .await;
        let answers = sale.answers().await;
        sale.assert_every_process_sells(restarted).await;
        sale.drained().await;
        let stored = sale.stored().await;
        let outcome = Outcome::of(test, &answers, &sale.probed, restarted, &stored);
        // The gate rebuilt from the database keeps off sale what the servers accepted before the
        // restart and neither the database nor the new outbox holds (orders in RabbitMQ or in a
        // worker's hands, or lost with Redis), so every order accepted after it is stored.
        let after: Vec<i64> = answers
            .iter()
            .filter(|a| a.sent > restarted)
            .filter_map(|a| a.order)
            .collect();
        let unstored = after.iter().filter(|id| !stored.contains(id)).count();
        assert_eq!(
            unstored,
            0,
            "{unstored} of {} orders accepted after the restart were never stored",
            after.len()
        );
        // What Redis lost (the orders in its outbox not relayed or stored yet) is reported.
        let (balanced, report) = sale.reconcile().await;
        eprintln!("{test}: reconcile:\n{report}");
        let missing = missing_units(&report, sale.product);
        if outcome.lost > 0 {
            assert!(!balanced, "reconcile found nothing amiss:\n{report}");
            assert!(
                missing > 0 && missing <= outcome.lost as i64,
                "reconcile reports {missing} units missing, {} accepted orders were lost:\n{report}",
                outcome.lost
            );
        } else {
            assert_eq!(missing, 0, "{report}");
        }
        sale.assert_running();
        redis.stop().await;
    }
}

mod needs_single_redis_no_amqp {
    use super::*;
    use crate::support::{Need, require};

    /// Runs without RabbitMQ: the `sqlite redis` and `postgres redis` runs of `scripts/test`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a single Redis without RabbitMQ: run by scripts/test on sqlite redis and postgres redis"]
    async fn redis_killed_with_aof_everysec_comes_back_with_every_accepted_order() {
        require(Need::SingleRedisNoAmqp);
        redis_killed_and_restarted_from_its_append_only_file("everysec").await;
    }
}

mod needs_single_redis_and_amqp {
    use super::*;
    use crate::support::{Need, require};

    /// Runs with RabbitMQ: the `mysql redis amqp` run of `scripts/test`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a single Redis and RabbitMQ: run by scripts/test on mysql redis amqp"]
    async fn redis_killed_with_aof_always_comes_back_with_every_accepted_order() {
        require(Need::SingleRedisAndAmqp);
        redis_killed_and_restarted_from_its_append_only_file("always").await;
    }
}
