//! Units moved between a product's buckets, so none is stranded: when a buyer's home bucket runs
//! dry, units are taken from the buckets that last had the most (half of what each has, at
//! least what the buyer needs) and given to it. A transfer is two atomic steps on two shards:
//! `take.lua` takes the units and records the transfer at the giver, `give.lua` adds them at
//! the receiver once (marked by the transfer's id), and then the record is deleted. A process
//! that dies between the steps leaves the record, and any server finishes it ([`settle_all`],
//! every second); while it is recorded and not received, the units are in transit, and the
//! gate's audit counts them among the units left.

use super::layout::Layout;
use super::lua::{self, GIVE, TAKE, unavailable};
use super::replicas::Replicas;
use crate::gate::GateError;
use crate::redis_link::RedisLink;
use std::collections::HashMap;

/// What a refill of a dry bucket came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refill {
    /// At least the units needed are in the bucket now.
    Moved,
    /// Not enough, but units are on their way somewhere: another try soon may find them.
    Pending,
    /// No other bucket has a unit, and none is in transit.
    Empty,
}

/// Moves at least `need` units into bucket `to` from the others, if they have them.
pub(super) async fn refill(
    redis: &RedisLink,
    replicas: Replicas,
    layout: &Layout,
    to: usize,
    need: i64,
) -> Result<Refill, GateError> {
    let mut moved = 0;
    let mut pending = false;
    // A shard failing over leaves the others to give: its error is reported only if nothing
    // moved.
    let mut failed = None;
    for from in layout.donors(to) {
        if moved >= need {
            break;
        }
        let id = format!("{:016x}", rand::random::<u64>());
        let keys = &layout.keys[from];
        let mut take = lua::command(&TAKE, &[&keys.sale, &keys.transfers]);
        take.arg(&id).arg(&layout.tags[to]).arg(need - moved);
        let taken: redis::RedisResult<((i64, i64, i64), bool)> =
            replicas.evalsha(&mut redis.clone(), &TAKE, take).await;
        let ((taken, left, waiting), kept) = match taken {
            Ok(taken) => taken,
            Err(e) => {
                failed = Some(e);
                continue;
            }
        };
        if !kept {
            replicas.not_kept("transfer");
        }
        if taken < 0 {
            continue;
        }
        layout.saw(from, left);
        pending |= waiting > 0;
        if taken > 0 {
            if settle(redis, replicas, layout, from, &id, to, taken).await? {
                moved += taken;
            } else {
                pending = true;
            }
        }
    }
    Ok(if moved >= need {
        Refill::Moved
    } else if pending || moved > 0 {
        Refill::Pending
    } else if let Some(e) = failed {
        return Err(unavailable(e));
    } else {
        Refill::Empty
    })
}

/// Gives transfer `id` (`units` from bucket `from`) to bucket `to` and deletes its record.
/// False when `to` is not loaded: the record stays.
async fn settle(
    redis: &RedisLink,
    replicas: Replicas,
    layout: &Layout,
    from: usize,
    id: &str,
    to: usize,
    units: i64,
) -> Result<bool, GateError> {
    let receiver = &layout.keys[to];
    let mut give = lua::command(&GIVE, &[&receiver.sale, &receiver.received(id)]);
    give.arg(units);
    let (has, kept): (i64, bool) = replicas
        .evalsha(&mut redis.clone(), &GIVE, give)
        .await
        .map_err(unavailable)?;
    if !kept {
        replicas.not_kept("transfer");
    }
    if has < 0 {
        return Ok(false);
    }
    layout.saw(to, has);
    let _deleted: i64 = redis::cmd("HDEL")
        .arg(&layout.keys[from].transfers)
        .arg(id)
        .query_async(&mut redis.clone())
        .await
        .map_err(unavailable)?;
    Ok(true)
}

/// A transfer recorded at its giver: its id, the receiving bucket and the units.
struct Recorded {
    id: String,
    to: usize,
    units: i64,
}

/// The transfers recorded at each bucket of `layout` (by giver).
async fn recorded(redis: &RedisLink, layout: &Layout) -> Result<Vec<Vec<Recorded>>, GateError> {
    let mut all = Vec::with_capacity(layout.len());
    if layout.len() == 1 {
        // A product of one bucket moves nothing.
        all.push(Vec::new());
        return Ok(all);
    }
    for keys in &layout.keys {
        let records: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&keys.transfers)
            .query_async(&mut redis.clone())
            .await
            .map_err(unavailable)?;
        all.push(
            records
                .into_iter()
                .filter_map(|(id, value)| {
                    let (tag, units) = value.split_once(' ')?;
                    Some(Recorded {
                        to: layout.tags.iter().position(|t| t == tag)?,
                        units: units.parse().ok()?,
                        id,
                    })
                })
                .collect(),
        );
    }
    Ok(all)
}

/// Finishes every transfer recorded in `layout`'s buckets: those of a process that died between
/// the steps (and those in progress, harmlessly: each step happens once).
pub(super) async fn settle_all(
    redis: &RedisLink,
    replicas: Replicas,
    layout: &Layout,
) -> Result<(), GateError> {
    for (from, records) in recorded(redis, layout).await?.into_iter().enumerate() {
        for record in records {
            settle(
                redis,
                replicas,
                layout,
                from,
                &record.id,
                record.to,
                record.units,
            )
            .await?;
        }
    }
    Ok(())
}

/// The units left in `layout`'s buckets, those in transit between them included; `None` when a
/// bucket is not loaded. The records are read before the buckets: a transfer received between
/// the reads is then counted once, in its receiver (read the other way round, it would be
/// counted nowhere).
pub(super) async fn units_left(
    redis: &RedisLink,
    layout: &Layout,
) -> Result<Option<i64>, GateError> {
    let records = recorded(redis, layout).await?;
    let mut total = 0;
    for (bucket, keys) in layout.keys.iter().enumerate() {
        let incoming: Vec<&Recorded> = records
            .iter()
            .flatten()
            .filter(|record| record.to == bucket)
            .collect();
        let mut read = redis::pipe();
        read.hget(&keys.sale, "remaining");
        for record in &incoming {
            read.exists(keys.received(&record.id));
        }
        let (remaining, received): (Option<i64>, Vec<bool>) = {
            let mut values: Vec<redis::Value> = read
                .query_async(&mut redis.clone())
                .await
                .map_err(unavailable)?;
            let first = values.remove(0);
            let remaining = redis::from_redis_value(first).map_err(|e| unavailable(e.into()))?;
            let received = values
                .into_iter()
                .map(redis::from_redis_value)
                .collect::<Result<_, _>>()
                .map_err(|e| unavailable(e.into()))?;
            (remaining, received)
        };
        let Some(remaining) = remaining else {
            return Ok(None);
        };
        let in_transit: i64 = incoming
            .iter()
            .zip(received)
            .filter(|(_, received)| !received)
            .map(|(record, _)| record.units)
            .sum();
        total += remaining + in_transit;
    }
    Ok(Some(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ProductId, SaleWindow, StockBuckets, UserId};
    use crate::gate::redis::batch::tests::{NOW, order};
    use crate::gate::redis::{RedisGate, home_bucket};
    use crate::gate::{GateProduct, Rejection, Reserved, StockGate};

    /// A gate under a prefix of this test's own (`tag`) with product 1 loaded: `remaining`
    /// units in `buckets` buckets, one a buyer.
    async fn loaded(tag: &str, remaining: i64, buckets: i64) -> (RedisLink, RedisGate) {
        let redis = crate::redis_link::test_link().await;
        let prefix = format!("seckill-unit:{}:{tag}:", std::process::id());
        let gate = RedisGate::new(redis.clone(), &prefix, 1_000, Replicas::NONE);
        gate.forget(ProductId(1)).await.unwrap();
        gate.load(GateProduct {
            id: ProductId(1),
            window: SaleWindow::new(NOW - 1, NOW + 60_000).unwrap(),
            paused: false,
            remaining,
            per_user_limit: 1,
            buckets: StockBuckets::parse(buckets).unwrap(),
            holdings: vec![],
            released: vec![],
            kept: vec![],
        })
        .await
        .unwrap();
        (redis, gate)
    }

    /// Units left in each bucket of product 1.
    async fn each(redis: &RedisLink, layout: &Layout) -> Vec<i64> {
        let mut left = Vec::new();
        for keys in &layout.keys {
            let units: i64 = redis::cmd("HGET")
                .arg(&keys.sale)
                .arg("remaining")
                .query_async(&mut redis.clone())
                .await
                .unwrap();
            left.push(units);
        }
        left
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_transfer_cut_between_its_steps_is_counted_in_transit_then_settled_once() {
        let (redis, gate) = loaded("cut-transfer", 40, 4).await;
        let layout = gate.layout(ProductId(1)).await.unwrap();
        assert_eq!(each(&redis, &layout).await, [10, 10, 10, 10]);
        // Bucket 1 gives to bucket 0, and the process dies before the second step.
        let giver = &layout.keys[1];
        let mut take = lua::command(&TAKE, &[&giver.sale, &giver.transfers]);
        take.arg("cut").arg(&layout.tags[0]).arg(1);
        let ((taken, left, _), _): ((i64, i64, i64), bool) = Replicas::NONE
            .evalsha(&mut redis.clone(), &TAKE, take)
            .await
            .unwrap();
        assert_eq!((taken, left), (5, 5));
        assert_eq!(each(&redis, &layout).await, [10, 5, 10, 10]);
        assert_eq!(units_left(&redis, &layout).await.unwrap(), Some(40));

        settle_all(&redis, Replicas::NONE, &layout).await.unwrap();
        assert_eq!(each(&redis, &layout).await, [15, 5, 10, 10]);
        assert_eq!(units_left(&redis, &layout).await.unwrap(), Some(40));
        // Given again (a second server settling the same record): nothing changes.
        settle(&redis, Replicas::NONE, &layout, 1, "cut", 0, 5)
            .await
            .unwrap();
        settle_all(&redis, Replicas::NONE, &layout).await.unwrap();
        assert_eq!(each(&redis, &layout).await, [15, 5, 10, 10]);
        gate.forget(ProductId(1)).await.unwrap();
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn buyers_of_one_bucket_buy_every_unit_of_the_others_and_only_then_sold_out() {
        let (redis, gate) = loaded("stranded", 8, 4).await;
        let four = StockBuckets::parse(4).unwrap();
        let at_home_in_0: Vec<i64> = (1..)
            .filter(|&user| home_bucket(UserId(user), four) == 0)
            .take(9)
            .collect();
        for (i, &user) in at_home_in_0[..8].iter().enumerate() {
            let bought = gate.reserve(&order(i as i64 + 1, user), NOW).await;
            assert!(
                matches!(bought, Ok(Reserved::Taken { .. })),
                "buyer {i}: {bought:?}"
            );
        }
        let late = gate.reserve(&order(9, at_home_in_0[8]), NOW).await;
        assert!(
            matches!(
                late,
                Err(GateError::Rejected(Rejection::SoldOut { remaining: 0 }))
            ),
            "{late:?}"
        );
        let layout = gate.layout(ProductId(1)).await.unwrap();
        assert_eq!(each(&redis, &layout).await, [0, 0, 0, 0]);
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(0));
        assert_eq!(gate.outbox(ProductId(1)).await.unwrap().len(), 8);
        // The limit holds across buckets: the first buyer cannot buy again anywhere.
        gate.add_stock(ProductId(1), 4).await.unwrap();
        let again = gate.reserve(&order(10, at_home_in_0[0]), NOW).await;
        assert!(
            matches!(again, Err(GateError::Rejected(Rejection::LimitReached))),
            "{again:?}"
        );
        for keys in &layout.keys {
            let () = redis::cmd("DEL")
                .arg(&keys.outbox)
                .query_async(&mut redis.clone())
                .await
                .unwrap();
        }
        gate.forget(ProductId(1)).await.unwrap();
    }
}
