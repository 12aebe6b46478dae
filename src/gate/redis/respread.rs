//! A product's stock buckets spread again after a resharding moved their slots so that some
//! master holds more than its share (see [`layout::spread_evenly`]): the product is taken off
//! sale for a moment and loaded again, its buckets dealt anew. Its outbox entries must never be
//! left under tags no one reads, so the layout changes only once the worker has stored them.

use super::lua::unavailable;
use super::{RedisGate, keys, layout};
use crate::domain::ProductId;
use crate::gate::GateError;
use std::time::Duration;

/// How long a product taken off sale to be spread again waits for its outboxes to drain before
/// it is loaded back where it was: the worker stores what they hold within a second or two.
const DRAIN_FOR: Duration = Duration::from_secs(10);

/// How often those outboxes are measured meanwhile.
const DRAIN_POLL: Duration = Duration::from_millis(20);

impl RedisGate {
    /// [`StockGate::respread`] for the process holding the loading lock: the layout read
    /// afresh and checked again, then the buckets emptied of all but their outboxes (buys find
    /// the product not loaded and are told to retry), then, once the worker has stored every
    /// order their outboxes held, the layout deleted, so the load that follows deals the
    /// buckets anew. Outboxes that do not drain in time keep the layout, and the load puts the
    /// product back where it was: an order's outbox entry is never left under tags no one reads.
    pub(super) async fn respread_holding_lock(&self, id: ProductId) -> Result<bool, GateError> {
        self.layouts.reread(id);
        let layout = self.layout(id).await?;
        if layout.len() == 1 || layout::spread_evenly(&mut self.redis.clone(), &layout.tags).await {
            return Ok(false);
        }
        if self.loaded(&layout).await?.contains(&false) {
            // Half loaded: the next load forgets and loads it whole, dealt anew.
            return Ok(false);
        }
        if self
            .lengths(&layout, |keys| &keys.dead)
            .await?
            .iter()
            .any(|&n| n > 0)
        {
            tracing::warn!(
                product = id.0,
                "a product whose buckets a resharding left uneven stays on them: its dead \
                 stream holds orders for an operator (seckill reconcile)"
            );
            return Ok(false);
        }
        self.forget_buckets(&layout).await?;
        let drain_by = tokio::time::Instant::now() + DRAIN_FOR;
        loop {
            let waiting: u64 = self
                .lengths(&layout, |keys| &keys.outbox)
                .await?
                .iter()
                .sum();
            if waiting == 0 {
                let () = redis::cmd("DEL")
                    .arg(keys::layout(&self.prefix, id))
                    .query_async(&mut self.redis.clone())
                    .await
                    .map_err(unavailable)?;
                break;
            }
            if tokio::time::Instant::now() >= drain_by {
                tracing::warn!(
                    product = id.0,
                    waiting,
                    "the outboxes of a product to spread again did not drain: it is loaded \
                     again on the same buckets"
                );
                break;
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
        self.layouts.reread(id);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{SaleWindow, StockBuckets};
    use crate::gate::redis::batch::tests::{NOW, order};
    use crate::gate::redis::replicas::Replicas;
    use crate::gate::{GateProduct, Rejection, Reserved, StockGate};
    use crate::redis_link::RedisLink;

    /// Product 1 with `remaining` units in 12 buckets whose tags all sit on the first third of
    /// the slots (a single Redis is taken as three even masters): as a resharding that moved
    /// the other two masters' buckets' slots to the first would leave them. `sold` units are
    /// held by users 1 to `sold`, one each.
    fn product(remaining: i64, sold: i64) -> GateProduct {
        GateProduct {
            id: ProductId(1),
            window: SaleWindow::new(NOW - 1, NOW + 60_000).unwrap(),
            paused: false,
            remaining,
            per_user_limit: 1,
            buckets: StockBuckets::parse(12).unwrap(),
            holdings: (1..=sold)
                .map(|user| (crate::domain::UserId(user), 1))
                .collect(),
            released: vec![],
            kept: vec![],
        }
    }

    /// A gate under a prefix of this test's own (`tag`), product 1 loaded on lopsided buckets,
    /// and five of its units bought, their orders in the outboxes.
    async fn lopsided(tag: &str) -> (RedisLink, RedisGate, String) {
        let mut redis = crate::redis_link::test_link().await;
        let prefix = format!("seckill-unit:{}:{tag}:", std::process::id());
        let gate = RedisGate::new(redis.clone(), &prefix, 1_000, Replicas::NONE);
        gate.forget(ProductId(1)).await.unwrap();
        let first_third = [vec![(0, 5460)]];
        let tags = layout::deal(ProductId(1), StockBuckets::parse(12).unwrap(), &first_third);
        let () = redis::cmd("SET")
            .arg(keys::layout(&prefix, ProductId(1)))
            .arg(tags.join(" "))
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(gate.load(product(120, 0)).await.unwrap());
        assert!(!layout::spread_evenly(&mut redis, &tags).await);
        for user in 1..=5 {
            let bought = gate.reserve(&order(user, user), NOW).await;
            assert!(matches!(bought, Ok(Reserved::Taken { .. })), "{bought:?}");
        }
        (redis, gate, prefix)
    }

    /// The tags product 1's layout names, if it has one.
    async fn tags(redis: &mut RedisLink, prefix: &str) -> Option<Vec<String>> {
        let layout: Option<String> = redis::cmd("GET")
            .arg(keys::layout(prefix, ProductId(1)))
            .query_async(redis)
            .await
            .unwrap();
        Some(layout?.split(' ').map(str::to_owned).collect())
    }

    /// Empties every outbox of product 1's buckets, as a worker storing their orders does.
    async fn store_outboxes(redis: RedisLink, gate_tags: Vec<String>, prefix: String) {
        for tag in gate_tags {
            let () = redis::cmd("DEL")
                .arg(keys::Keys::of(&prefix, &tag).outbox)
                .query_async(&mut redis.clone())
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn lopsided_buckets_are_dealt_anew_once_their_outboxes_are_stored() {
        let (mut redis, gate, prefix) = lopsided("respread").await;
        let before = tags(&mut redis, &prefix).await.unwrap();
        // The worker stores the five orders a moment after the product is taken off sale.
        let worker = tokio::spawn({
            let (redis, before, prefix) = (redis.clone(), before.clone(), prefix.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                store_outboxes(redis, before, prefix).await;
            }
        });
        let respread = tokio::spawn({
            let gate = RedisGate::new(redis.clone(), &prefix, 1_000, Replicas::NONE);
            async move { gate.respread(ProductId(1)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Off sale meanwhile: a buy is told the product is not loaded, and nothing is taken.
        let meanwhile = gate.reserve(&order(6, 6), NOW).await;
        assert!(
            matches!(meanwhile, Err(GateError::Rejected(Rejection::NotLoaded))),
            "{meanwhile:?}"
        );
        assert!(respread.await.unwrap().unwrap());
        worker.await.unwrap();
        assert_eq!(tags(&mut redis, &prefix).await, None);

        // Loaded again from the database (115 left, five buyers), dealt anew and even.
        assert!(gate.load(product(115, 5)).await.unwrap());
        let after = tags(&mut redis, &prefix).await.unwrap();
        assert_ne!(after, before);
        assert!(layout::spread_evenly(&mut redis, &after).await);
        assert!(!gate.respread(ProductId(1)).await.unwrap());
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(115));
        let again = gate.reserve(&order(7, 1), NOW).await;
        assert!(
            matches!(again, Err(GateError::Rejected(Rejection::LimitReached))),
            "{again:?}"
        );
        let bought = gate.reserve(&order(8, 6), NOW).await;
        assert!(matches!(bought, Ok(Reserved::Taken { .. })), "{bought:?}");
        store_outboxes(redis, after, prefix).await;
        gate.forget(ProductId(1)).await.unwrap();
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn buckets_whose_outboxes_do_not_drain_keep_their_tags() {
        let (mut redis, gate, prefix) = lopsided("respread-stuck").await;
        let before = tags(&mut redis, &prefix).await;
        assert!(gate.respread(ProductId(1)).await.unwrap());
        // Nobody stored the orders: the layout stays, so the load finds their outboxes.
        assert_eq!(tags(&mut redis, &prefix).await, before);
        assert_eq!(gate.outbox(ProductId(1)).await.unwrap().len(), 5);
        assert!(gate.load(product(115, 5)).await.unwrap());
        assert_eq!(tags(&mut redis, &prefix).await, before);
        store_outboxes(redis, before.unwrap(), prefix).await;
        gate.forget(ProductId(1)).await.unwrap();
    }
}
