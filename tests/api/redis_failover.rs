//! A Redis Cluster master killed in the middle of a sale: the processes run over a private cluster
//! of three masters with a replica each (see `support/private_redis.rs`), the master serving the
//! sale's product is killed with SIGKILL, its replica takes over, and the killed node is started
//! again as an operator would, to rejoin as a replica.
//!
//! Redis replicates asynchronously: a master acknowledges a buy script before its replica has
//! it, so the promoted replica may lack the last buys the master accepted. The test measures
//! how many (printed, for RELIABILITY.md) and asserts what holds whatever replication lost:
//! nothing oversold, no order stored twice, every process up, the sale going on.
//!
//! It runs once per `scripts/test`: in the run whose gate is on a Redis Cluster
//! (`SECKILL_TEST_REDIS_URL=redis+cluster://…`, the `postgres cluster amqp` run).

use crate::support::faulty_sale::{FaultySale, Outcome};
use crate::support::private_redis::PrivateCluster;
use std::time::Duration;
use tokio::time::Instant;

mod needs_redis_cluster {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a Redis Cluster: run by scripts/test on postgres cluster amqp"]
    async fn a_cluster_master_killed_mid_crowd_fails_over_and_nothing_is_oversold() {
        require(Need::RedisCluster);
        let test = "redis cluster master killed";
        let mut redis = PrivateCluster::start().await;
        let mut sale = FaultySale::start(redis.url(), 600, 1_500).await;
        let slot_key = format!("{{p:{}}}", sale.product);
        let master = redis.master_of(&slot_key).await;
        sale.wait_accepted(100).await;
        redis.kill(master).await;
        let killed = Instant::now();
        let promoted = redis.wait_promoted(&slot_key, master).await;
        eprintln!(
            "{test}: 127.0.0.1:{promoted} took over from 127.0.0.1:{master} after {:?}",
            killed.elapsed()
        );
        sale.answered_again(killed, Duration::from_secs(20)).await;
        let answers = sale.answers().await;
        redis.restart(master).await;
        sale.assert_every_process_sells(killed).await;
        sale.drained().await;
        let stored = sale.stored().await;
        let outcome = Outcome::of(test, &answers, &sale.probed, killed, &stored);
        // What asynchronous replication may lose is bounded by what the master accepted in its
        // last moments; the sale still must not lose the orders accepted after the failover.
        let after_lost = answers
            .iter()
            .filter(|a| a.sent > killed)
            .filter_map(|a| a.order)
            .filter(|id| !stored.contains(id))
            .count();
        assert!(
            after_lost < outcome.accepted_after,
            "every order accepted after the failover was lost"
        );
        let (balanced, report) = sale.reconcile().await;
        eprintln!("{test}: reconcile balanced: {balanced}\n{report}");
        sale.assert_running();
    }
}
