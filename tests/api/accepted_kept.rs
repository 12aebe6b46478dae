//! Accepted means kept, or not, through a Redis Cluster failover on an operator's bad day: the
//! processes (two servers and a worker) run over a private cluster of three masters with a
//! replica each (see `support/private_redis.rs`); a crowd of 600 shoppers buys one product one
//! unit at a time, each buy with an `Idempotency-Key` of its own, sent again while answered
//! `503`; the worker falls behind (stopped with SIGSTOP, so the orders wait in the outbox); the
//! replication stream from the product's master to its replica is cut with `iptables` for 3 s
//! (see `support/link_cut.rs`), then that master is killed with SIGKILL, its lagging replica
//! takes over, the killed node is started again to rejoin as the new master's replica, and the
//! worker goes on.
//!
//! With `redis_wait_replicas = 1` no order answered `202` may be lost; with 0 (asynchronous
//! replication, answered before any replica has the order) the test reports how many were, for
//! RELIABILITY.md. Either way the cut must be real: the master's `INFO replication` shows the
//! replica's acknowledged offset behind its own when it is killed.
//!
//! It runs once per `scripts/test`: in the run whose gate is on a Redis Cluster (the `postgres
//! cluster amqp` run, where the other failover test runs), as root, with `iptables` installed
//! (`scripts/services haproxy`).

use crate::support::faulty_sale::{Answer, FaultySale, Outcome, Setup};
use crate::support::link_cut::{self, LinkCut};
use crate::support::private_redis::PrivateCluster;
use std::time::Duration;
use tokio::time::Instant;

/// Units on sale: more than the crowd buys before the master is killed, whatever the setting.
const STOCK: i64 = 12_000;
/// The shoppers, each buying until refused (sold out) or holding [`PER_USER_LIMIT`] units.
const SHOPPERS: usize = 600;
const PER_USER_LIMIT: i64 = 100;
/// Buys in flight at once, and a shopper's pause after each accepted buy: at most 1,500 buys a
/// second, so the stock lasts past the failover on any machine.
const IN_FLIGHT: usize = 64;
const PAUSE: Duration = Duration::from_millis(400);
/// Orders accepted before the worker is stopped, and before the stream is cut.
const BEFORE_STOP: usize = 500;
const BEFORE_CUT: usize = 2_000;
/// How long the replication stream is cut before the master is killed.
const CUT: Duration = Duration::from_secs(3);

/// What one run of the scenario saw.
struct Run {
    /// The crowd's answers (one per buy, its last try).
    answers: Vec<Answer>,
    /// The tally against what was stored.
    outcome: Outcome,
    /// The product's stored orders.
    stored: usize,
    /// When the replication stream was cut, and when its master was killed.
    cut: Instant,
    killed: Instant,
}

impl Run {
    /// Buys sent after the cut and answered before the kill: while the old master, which the
    /// replica no longer heard, still served the product.
    fn in_cut(&self) -> impl Iterator<Item = &Answer> {
        self.answers
            .iter()
            .filter(|a| a.sent >= self.cut && a.answered < self.killed)
    }

    /// Tries answered `503 unconfirmed` that were sent between the cut and the kill.
    fn unconfirmed_in_cut(&self) -> usize {
        self.answers
            .iter()
            .flat_map(|a| &a.unconfirmed)
            .filter(|sent| **sent >= self.cut && **sent < self.killed)
            .count()
    }
}

/// The scenario with `SECKILL_REDIS_WAIT_REPLICAS=wait_replicas` given to the processes.
async fn failover_after_a_cut(test: &str, wait_replicas: &str) -> Run {
    link_cut::prepare();
    let mut redis = PrivateCluster::start().await;
    let env = [("SECKILL_REDIS_WAIT_REPLICAS", wait_replicas)];
    let setup = Setup {
        stock: STOCK,
        buyers: SHOPPERS,
        per_user_limit: PER_USER_LIMIT,
        buckets: 1,
        in_flight: IN_FLIGHT,
        pause: PAUSE,
        keyed: true,
        env: &env,
        logs: None,
    };
    let mut sale = FaultySale::start_with(redis.url(), setup).await;
    let slot_key = format!("{{p:{}}}", sale.product);
    let master = redis.master_of(&slot_key).await;
    sale.wait_accepted(BEFORE_STOP).await;
    sale.stop_worker().await;
    sale.wait_accepted(BEFORE_CUT).await;
    let replica_connection = redis.replica_connection(master).await;
    let link = LinkCut::between(master, replica_connection);
    let cut = Instant::now();
    tokio::time::sleep(CUT).await;
    let lag = redis.replication_lag(master).await;
    assert!(
        lag.bytes > 0 && lag.ack_age_secs >= 2,
        "the cut did not hold: the replica is only {lag:?} behind its master after {CUT:?}"
    );
    redis.kill(master).await;
    let killed = Instant::now();
    // The replica is promoted although it lags: its data is CUT plus the failure detection old,
    // well within what `cluster-replica-validity-factor` (10 node timeouts plus the
    // replication ping period) allows, so no forced failover is needed. The link stays cut
    // until then: the killed master's kernel still holds the stream it could not deliver, and
    // would deliver it once the packets pass (as a crashed host would not).
    let promoted = redis.wait_promoted(&slot_key, master).await;
    drop(link);
    eprintln!(
        "{test}: replica {lag:?} behind when 127.0.0.1:{master} was killed; 127.0.0.1:{promoted} \
         took over after {:?}",
        killed.elapsed()
    );
    redis.restart(master).await;
    sale.resume_worker().await;
    let answers = sale.answers().await;
    sale.drained().await;
    let stored = sale.stored().await;
    let outcome = Outcome::of(test, &answers, &sale.probed, killed, &stored);
    sale.assert_running();
    let run = Run {
        answers,
        outcome,
        stored: stored.len(),
        cut,
        killed,
    };
    eprintln!(
        "{test}: between the cut and the kill {} buys were answered ({} accepted), {} tries \
         answered 503 unconfirmed; {} tries answered 503 unconfirmed in all; {} of {} orders \
         answered 202 lost; {} stored of {STOCK}",
        run.in_cut().count(),
        run.in_cut().filter(|a| a.order.is_some()).count(),
        run.unconfirmed_in_cut(),
        run.answers
            .iter()
            .map(|a| a.unconfirmed.len())
            .sum::<usize>(),
        run.outcome.lost,
        run.outcome.accepted.len(),
        run.stored
    );
    run
}

mod needs_redis_cluster {
    use super::*;
    use crate::support::{Need, require};

    /// With replicas acknowledged, every order answered `202` survives the loss of its master:
    /// - none is lost: each is stored once the worker has drained the promoted master's outbox;
    /// - no buy sent after the cut and answered before the kill (while only the old master,
    ///   which its replica no longer heard, served the product) was answered `202`, and at least
    ///   one try sent then was answered `503 unconfirmed`;
    /// - the sale goes on after the failover (orders accepted for buys sent after the kill) and
    ///   sells exactly the stock: the units the old master took and lost go on sale again on
    ///   the promoted one, and the stored orders, none twice, hold every unit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a Redis Cluster: run by scripts/test on postgres cluster amqp"]
    async fn an_order_answered_202_with_a_replica_acknowledged_survives_a_lagging_failover() {
        require(Need::RedisCluster);
        let run = failover_after_a_cut("failover after a cut, wait 1 replica", "1").await;
        assert_eq!(
            run.outcome.lost, 0,
            "orders answered 202 lost with their master though a replica acknowledged them"
        );
        let accepted_in_cut = run.in_cut().filter(|a| a.order.is_some()).count();
        assert_eq!(
            accepted_in_cut, 0,
            "buys answered 202 while the replica did not hear the master"
        );
        assert!(
            run.unconfirmed_in_cut() > 0,
            "no buy was answered 503 unconfirmed while the replication stream was cut"
        );
        assert_eq!(
            run.stored as i64, STOCK,
            "the sale did not sell exactly its stock"
        );
    }

    /// Without replicas acknowledged (the default), the orders the master answered during the
    /// cut are lost with it: the test reports how many, and fails if the scenario lost none (then
    /// it could not show what the setting above prevents). The sale still sells exactly its
    /// stock, none twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a Redis Cluster: run by scripts/test on postgres cluster amqp"]
    async fn orders_answered_202_without_replicas_acknowledged_are_lost_in_a_lagging_failover() {
        require(Need::RedisCluster);
        let run = failover_after_a_cut("failover after a cut, wait 0 replicas", "0").await;
        assert!(
            run.outcome.lost > 0,
            "no order answered 202 was lost: the scenario did not provoke the loss"
        );
        assert_eq!(
            run.stored as i64, STOCK,
            "the sale did not sell exactly its stock"
        );
    }
}
