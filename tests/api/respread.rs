//! A product's stock buckets spread again after a resharding (issue 36): the processes (two
//! servers and a worker) run over a private Redis Cluster of three masters with a replica each
//! (see `support/private_redis.rs`); a product of 3,000 units in 12 buckets is dealt 4 to each
//! master; a crowd arriving steadily buys it, two units a buyer at most, each buy with an
//! `Idempotency-Key` of its own sent again while answered `503`, as a client does. Mid-sale an
//! operator empties one master with `redis-cli --cluster reshard` (all its slots, keys and all,
//! to another master), which leaves the buckets 8 on one master and 4 on the other.
//!
//! Every server checks every 5 s that a loaded product's buckets sit evenly on the masters that
//! serve slots and, when they do not, spreads them again (frozen meanwhile: buys answered `503`
//! with a `Retry-After`, the orders in their outboxes stored, the product loaded again from the
//! database under new tags). So the layout in Redis names tags 6 and 6 on the two masters
//! within [`RESPREAD_WITHIN`] of the resharding, and the sale goes on to sell exactly its stock.
//!
//! It runs once per `scripts/test`: in the run whose gate is on a Redis Cluster (the `postgres
//! cluster amqp` run, where the failover tests run).

use crate::support::faulty_sale::{Answer, Arrivals, FaultySale, Outcome, Setup};
use crate::support::private_redis::{Master, PrivateCluster};
use reqwest::StatusCode;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use tokio::time::Instant;

/// Units on sale, and the stock buckets they are split into.
const STOCK: i64 = 3_000;
const BUCKETS: i64 = 12;
/// The crowd: each buyer buys one unit at a time up to [`PER_USER_LIMIT`], then tries once
/// more (to be refused `limit_reached`); together they ask for more than the stock.
const BUYERS: usize = 1_800;
const PER_USER_LIMIT: i64 = 2;
/// One buyer arrives every [`ARRIVING_EVERY`], and waits [`PAUSE`] after each accepted buy: about
/// 33 units a second, so the stock lasts about 90 s, past the resharding and the slowest
/// re-spread [`RESPREAD_WITHIN`] allows.
const ARRIVING_EVERY: Duration = Duration::from_millis(60);
const PAUSE: Duration = Duration::from_millis(500);
const IN_FLIGHT: usize = 64;
/// Orders accepted before the resharding.
const BEFORE_RESHARD: usize = 300;
/// How long after the resharding the buckets must sit evenly again.
const RESPREAD_WITHIN: Duration = Duration::from_secs(60);

/// How many of a product's buckets each master serving slots holds, by port (masters holding
/// none included).
type Spread = BTreeMap<u16, usize>;

/// Where `tags` sit on the masters of `redis` that serve slots now.
async fn spread(redis: &PrivateCluster, tags: &[String]) -> Spread {
    let mut spread: Spread = redis.masters().await.iter().map(|m| (m.port, 0)).collect();
    for tag in tags {
        *spread
            .entry(redis.master_of(&format!("{{{tag}}}")).await)
            .or_default() += 1;
    }
    spread
}

/// Whether the buckets are spread evenly: per master, counts differing by at most one.
fn even(spread: &Spread) -> bool {
    let (least, most) = (spread.values().min(), spread.values().max());
    matches!((least, most), (Some(least), Some(most)) if most - least <= 1)
}

/// The counts of a spread, for a message: `8/4`.
fn counts(spread: &Spread) -> String {
    let counts: Vec<String> = spread.values().map(usize::to_string).collect();
    counts.join("/")
}

/// What waiting for the re-spread saw.
struct Respread {
    /// The spread last seen: even, if the re-spread came.
    spread: Spread,
    /// When it was seen even, if it was.
    at: Option<Instant>,
    /// Reads that found no layout in Redis, or failed (the product unloaded, a slot moving).
    unread: usize,
}

/// Reads the product's layout every 500 ms until its buckets sit evenly on the masters that
/// serve slots, for up to [`RESPREAD_WITHIN`].
async fn wait_respread(sale: &FaultySale, redis: &PrivateCluster) -> Respread {
    let deadline = Instant::now() + RESPREAD_WITHIN;
    let mut seen = Respread {
        spread: Spread::new(),
        at: None,
        unread: 0,
    };
    while Instant::now() < deadline {
        match sale.layout_tags().await {
            Some(tags) => {
                seen.spread = spread(redis, &tags).await;
                if even(&seen.spread) {
                    seen.at = Some(Instant::now());
                    return seen;
                }
            }
            None => seen.unread += 1,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    seen
}

/// The product's stored orders, once they hold the whole stock (the worker stores the outboxes
/// of every bucket, old tags and new) or 60 s have passed.
async fn stored_in_full(sale: &FaultySale) -> HashSet<i64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while sale.units_by_buyer().await.values().sum::<i64>() < STOCK && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    sale.stored().await
}

/// Buys answered `409 sold_out` before another buy, sent later, was accepted: told sold out
/// while units were left.
fn sold_out_too_early(answers: &[Answer]) -> usize {
    let Some(last_accepted) = answers
        .iter()
        .filter(|a| a.order.is_some())
        .map(|a| a.sent)
        .max()
    else {
        return 0;
    };
    answers
        .iter()
        .filter(|a| a.sold_out && a.answered < last_accepted)
        .count()
}

/// The master of the product's own keys (its layout among them), and another master to move
/// its slots to.
async fn pick_masters(redis: &PrivateCluster, product: i64) -> (Master, Master) {
    let masters = redis.masters().await;
    assert_eq!(masters.len(), 3, "{masters:?}");
    let of_product = redis.master_of(&format!("{{p:{product}}}")).await;
    let from = masters.iter().position(|m| m.port == of_product).unwrap();
    let to = (from + 1) % masters.len();
    (masters[from].clone(), masters[to].clone())
}

/// The sale of [`STOCK`] units in [`BUCKETS`] buckets over `redis`, its crowd arriving steadily.
async fn start_sale(redis: &PrivateCluster) -> FaultySale {
    let setup = Setup {
        stock: STOCK,
        buyers: BUYERS,
        per_user_limit: PER_USER_LIMIT,
        buckets: BUCKETS,
        in_flight: IN_FLIGHT,
        pause: PAUSE,
        keyed: true,
        env: &[],
        logs: None,
    };
    let arrivals = Arrivals {
        every: ARRIVING_EVERY,
        past_limit: 1,
    };
    FaultySale::start_arriving(redis.url(), setup, arrivals).await
}

/// Empties the master of the product's own keys into another one mid-sale; returns when the
/// resharding began and when it ended.
async fn empty_a_master(test: &str, redis: &PrivateCluster, sale: &FaultySale) -> [Instant; 2] {
    let (from, to) = pick_masters(redis, sale.product).await;
    let resharding = Instant::now();
    redis.reshard_all(&from, &to).await;
    let resharded = Instant::now();
    let after = spread(redis, &sale.bucket_tags().await).await;
    eprintln!(
        "{test}: {} slots moved from 127.0.0.1:{} to 127.0.0.1:{} in {:.1} s; buckets per \
         master: {after:?}",
        from.slots,
        from.port,
        to.port,
        (resharded - resharding).as_secs_f64()
    );
    assert_eq!(after.len(), 2, "not two masters serve slots: {after:?}");
    [resharding, resharded]
}

/// Prints what waiting for the re-spread saw.
fn report_respread(test: &str, respread: &Respread, resharded: Instant) {
    match respread.at {
        Some(at) => eprintln!(
            "{test}: buckets per master {:.1} s after the resharding: {:?}",
            (at - resharded).as_secs_f64(),
            respread.spread
        ),
        None => eprintln!(
            "{test}: buckets per master still {:?} {RESPREAD_WITHIN:?} after the resharding",
            respread.spread
        ),
    }
    eprintln!(
        "{test}: {} reads of the layout found none or failed",
        respread.unread
    );
}

/// Prints how the crowd was answered: the tries answered `503` (in all, since the resharding
/// began, since the re-spread), the buys given up, refused, and the most units a buyer holds.
fn report_answers(test: &str, answers: &[Answer], [resharding, respread]: [Instant; 2], most: i64) {
    let unavailable_since = |since: Instant| -> u32 {
        let after = answers.iter().filter(|a| a.answered > since);
        after.map(|a| a.unavailable).sum()
    };
    let answered = |status| answers.iter().filter(|a| a.status == status).count();
    let sold_out = answers.iter().filter(|a| a.sold_out).count();
    eprintln!(
        "{test}: {} tries answered 503 in all, {} of buys answered after the resharding began, \
         {} after the re-spread; {} buys given up after 30 s of 503; {sold_out} buys refused \
         sold_out, {} limit_reached; a buyer holds at most {most} units",
        answers.iter().map(|a| a.unavailable).sum::<u32>(),
        unavailable_since(resharding),
        unavailable_since(respread),
        answered(StatusCode::SERVICE_UNAVAILABLE),
        answered(StatusCode::CONFLICT) - sold_out,
    );
}

mod needs_redis_cluster {
    use super::*;
    use crate::support::{Need, require};

    /// - before: the 12 buckets sit 4, 4 and 4 on the three masters;
    /// - within [`RESPREAD_WITHIN`] of emptying one master, 6 and 6 on the other two;
    /// - the sale goes on after the re-spread, and sells exactly its stock: every order
    ///   answered `202` stored once, nothing stored without a `202`, no buyer above the limit,
    ///   nobody told `sold_out` while units were left, `seckill reconcile` balanced.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a Redis Cluster: run by scripts/test on postgres cluster amqp"]
    async fn a_products_buckets_are_spread_evenly_again_after_a_master_is_emptied_mid_sale() {
        require(Need::RedisCluster);
        let test = "re-spread after a resharding";
        let redis = PrivateCluster::start().await;
        let mut sale = start_sale(&redis).await;
        sale.wait_accepted(BEFORE_RESHARD).await;
        let before = spread(&redis, &sale.bucket_tags().await).await;
        eprintln!("{test}: buckets per master before: {before:?}");
        assert_eq!(
            counts(&before),
            "4/4/4",
            "the buckets were not dealt evenly"
        );

        let [resharding, resharded] = empty_a_master(test, &redis, &sale).await;
        let respread = wait_respread(&sale, &redis).await;
        report_respread(test, &respread, resharded);
        let Some(respread_at) = respread.at else {
            panic!(
                "the buckets still sit {} on the two masters {RESPREAD_WITHIN:?} after the \
                 resharding: not spread again",
                counts(&respread.spread)
            );
        };

        let answers = sale.answers().await;
        let accepted: HashSet<i64> = answers.iter().filter_map(|a| a.order).collect();
        let stored = stored_in_full(&sale).await;
        let outcome = Outcome::of(test, &answers, &sale.probed, respread_at, &stored);
        let most = sale.units_by_buyer().await.into_values().max().unwrap();
        report_answers(test, &answers, [resharding, respread_at], most);
        assert_eq!(outcome.lost, 0, "orders answered 202 never stored");
        assert_eq!(outcome.stored_unanswered, 0, "orders stored without a 202");
        assert_eq!(accepted.len() as i64, STOCK, "units answered 202");
        assert_eq!(stored.len() as i64, STOCK, "units stored");
        assert!(most <= PER_USER_LIMIT, "a buyer holds {most} units");
        assert_eq!(
            sold_out_too_early(&answers),
            0,
            "buys answered sold_out while units were left"
        );
        let (balanced, report) = sale.reconcile().await;
        assert!(
            balanced,
            "seckill reconcile found the sale unbalanced:\n{report}"
        );
        sale.assert_running();
    }
}
