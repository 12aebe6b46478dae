//! Where a product's stock lives: its buckets, each under a hash tag of its own, so a Redis
//! Cluster spreads one product's buys over its masters. A product of one bucket keeps the tag
//! `p:ID`; bucket `B` of several gets `p:ID:B:N`, the first `N` whose slot a chosen master
//! serves, the buckets dealt to the masters in turn (a tag left to luck puts 5 or more of 12 on
//! one of three masters for most products). The loading server writes the tags to
//! `PREFIX{p:ID}:layout`, so every server uses the same ones whatever topology it saw.
//! A resharding may move their slots so that some master holds more than its share: the
//! product is then taken off sale for a moment and loaded again, dealt anew
//! ([`spread_evenly`], `RedisGate::respread`).
//!
//! Each buyer has a home bucket, a fixed hash of their user id: it keeps their holdings and
//! idempotency keys, so the per-user limit and a retry are decided in one atomic step there.

use super::keys::{self, Keys};
use crate::domain::{ProductId, StockBuckets, UserId};
use crate::redis_link::RedisLink;
use redis::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// How long a product found without a layout is taken to have one bucket before Redis is asked
/// again: it may be loaded meanwhile, maybe with more.
const UNLOADED_FOR: Duration = Duration::from_secs(1);

/// How long a layout read is used before Redis is asked again: a product rebuilt after Redis
/// lost its data may have new tags, and a worker must find every bucket's outbox.
const LOADED_FOR: Duration = Duration::from_secs(10);

/// The home bucket of `user` among `buckets`: a fixed hash of the id, so every server agrees.
pub fn home_bucket(user: UserId, buckets: StockBuckets) -> u8 {
    let mixed = (user.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (mixed % u64::from(buckets.get())) as u8
}

/// The slot of a hash tag.
fn slot(tag: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % SLOTS
}

/// One product's buckets.
pub(super) struct Layout {
    /// Each bucket's hash tag, in bucket order.
    pub tags: Vec<String>,
    /// Each bucket's keys.
    pub keys: Vec<Keys>,
    /// The units each bucket last said it had left, to pick where to take units from.
    seen: Vec<AtomicI64>,
    /// One refill of a bucket at a time: buyers who find it dry together wait for one.
    pub refills: Vec<tokio::sync::Mutex<()>>,
    /// How many buckets, for the buyers' homes.
    buckets: StockBuckets,
}

impl Layout {
    /// The buckets with hash tags `tags` under `prefix`.
    pub fn new(prefix: &str, tags: Vec<String>) -> Self {
        Self {
            keys: tags.iter().map(|tag| Keys::of(prefix, tag)).collect(),
            seen: tags.iter().map(|_| AtomicI64::new(i64::MAX)).collect(),
            refills: tags.iter().map(|_| tokio::sync::Mutex::new(())).collect(),
            buckets: StockBuckets::parse(tags.len() as i64).unwrap_or(StockBuckets::ONE),
            tags,
        }
    }

    /// How many buckets.
    pub fn len(&self) -> usize {
        self.tags.len()
    }

    /// The bucket that keeps `user`'s holdings and keys.
    pub fn home(&self, user: UserId) -> usize {
        usize::from(home_bucket(user, self.buckets))
    }

    /// Notes that bucket `bucket` had `left` units.
    pub fn saw(&self, bucket: usize, left: i64) {
        self.seen[bucket].store(left, Ordering::Relaxed);
    }

    /// The units bucket `bucket` last said it had (unknown: as many as can be).
    pub fn seen(&self, bucket: usize) -> i64 {
        self.seen[bucket].load(Ordering::Relaxed)
    }

    /// The buckets other than `bucket`, those that last had the most units first.
    pub fn donors(&self, bucket: usize) -> Vec<usize> {
        let mut donors: Vec<usize> = (0..self.len()).filter(|&b| b != bucket).collect();
        donors.sort_by_key(|&b| std::cmp::Reverse(self.seen(b)));
        donors
    }
}

/// The hash tags of `buckets` buckets of product `id`, dealt to the masters `redis` reports in
/// turn (starting at a master that depends on the product, so the first buckets of many
/// products do not all land on one); on a Redis that is no cluster, spread over the slots.
pub(super) async fn plan(
    redis: &mut RedisLink,
    id: ProductId,
    buckets: StockBuckets,
) -> Vec<String> {
    if buckets == StockBuckets::ONE {
        return vec![keys::product_tag(id)];
    }
    deal(
        id,
        buckets,
        &masters(redis).await.unwrap_or_else(three_parts),
    )
}

/// Whether `tags` still sit evenly on the masters `redis` reports (bucket counts per master
/// differ by at most one), as they were dealt: a resharding may have moved their slots. A
/// cluster that does not say where its slots are (failing over) is taken to be even: the next
/// check asks again.
pub(super) async fn spread_evenly(redis: &mut RedisLink, tags: &[String]) -> bool {
    let masters = masters(redis).await;
    (redis.is_cluster() && masters.is_none())
        || evenly_on(tags, &masters.unwrap_or_else(three_parts))
}

/// Whether `tags` sit evenly on `masters` (each a list of slot ranges).
fn evenly_on(tags: &[String], masters: &[Vec<(u16, u16)>]) -> bool {
    let mut per_master = vec![0usize; masters.len()];
    for tag in tags {
        let slot = slot(tag);
        if let Some(master) = masters.iter().position(|ranges| {
            ranges
                .iter()
                .any(|&(low, high)| (low..=high).contains(&slot))
        }) {
            per_master[master] += 1;
        }
    }
    let most = per_master.iter().max().copied().unwrap_or(0);
    let least = per_master.iter().min().copied().unwrap_or(0);
    most - least <= 1
}

/// The tags of `buckets` buckets of product `id` over `masters` (each a list of slot ranges).
pub(super) fn deal(
    id: ProductId,
    buckets: StockBuckets,
    masters: &[Vec<(u16, u16)>],
) -> Vec<String> {
    let first = id.0.rem_euclid(masters.len() as i64) as usize;
    (0..buckets.get())
        .map(|bucket| {
            let ranges = &masters[(first + usize::from(bucket)) % masters.len()];
            (0u32..100_000)
                .map(|n| format!("p:{}:{bucket}:{n}", id.0))
                .find(|tag| {
                    let slot = slot(tag);
                    ranges
                        .iter()
                        .any(|&(low, high)| (low..=high).contains(&slot))
                })
                .unwrap_or_else(|| format!("p:{}:{bucket}", id.0))
        })
        .collect()
}

/// The slot ranges of each master, masters in the order of their node ids; `None` from a Redis
/// that is no cluster or does not say.
async fn masters(redis: &mut RedisLink) -> Option<Vec<Vec<(u16, u16)>>> {
    let reply: redis::RedisResult<Vec<Vec<Value>>> =
        redis::cmd("CLUSTER").arg("SLOTS").query_async(redis).await;
    let mut by_node: HashMap<String, Vec<(u16, u16)>> = HashMap::new();
    for range in reply.unwrap_or_default() {
        let (Some(Value::Int(low)), Some(Value::Int(high)), Some(Value::Array(master))) =
            (range.first(), range.get(1), range.get(2))
        else {
            continue;
        };
        let node = match master.get(2) {
            Some(Value::BulkString(id)) => String::from_utf8_lossy(id).into_owned(),
            _ => format!("{master:?}"),
        };
        by_node
            .entry(node)
            .or_default()
            .push((*low as u16, *high as u16));
    }
    let mut nodes: Vec<_> = by_node.into_iter().collect();
    nodes.sort();
    let masters: Vec<_> = nodes.into_iter().map(|(_, ranges)| ranges).collect();
    (!masters.is_empty()).then_some(masters)
}

/// The slots split into three even parts, as the masters of a Redis that is no cluster, so its
/// buckets' tags still differ.
fn three_parts() -> Vec<Vec<(u16, u16)>> {
    let third = SLOTS / 3;
    vec![
        vec![(0, third - 1)],
        vec![(third, 2 * third - 1)],
        vec![(2 * third, SLOTS - 1)],
    ]
}

/// The layouts this process knows, read from Redis on first use.
#[derive(Default)]
pub(super) struct Layouts {
    known: Mutex<HashMap<ProductId, Known>>,
}

/// A layout read from Redis (one bucket for a product found without one), and when to read it
/// again.
struct Known {
    layout: Arc<Layout>,
    stale_at: Instant,
}

impl Layouts {
    /// The layout of product `id`: as this process knows it, or read from Redis.
    pub async fn of(
        &self,
        redis: &mut RedisLink,
        prefix: &str,
        id: ProductId,
    ) -> redis::RedisResult<Arc<Layout>> {
        if let Some(layout) = self.cached(id) {
            return Ok(layout);
        }
        let value: Option<String> = redis::cmd("GET")
            .arg(keys::layout(prefix, id))
            .query_async(redis)
            .await?;
        let loaded = value.is_some();
        let tags: Vec<String> = match value {
            Some(value) => value.split(' ').map(str::to_owned).collect(),
            None => vec![keys::product_tag(id)],
        };
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        // The same tags as before: the same layout, with what it saw and its refills' turns.
        let layout = match known.get(&id) {
            Some(old) if old.layout.tags == tags => old.layout.clone(),
            _ => Arc::new(Layout::new(prefix, tags)),
        };
        let fresh_for = if loaded { LOADED_FOR } else { UNLOADED_FOR };
        known.insert(
            id,
            Known {
                layout: layout.clone(),
                stale_at: Instant::now() + fresh_for,
            },
        );
        Ok(layout)
    }

    /// The layout of `id` this process knows, unless it is time to read it again.
    fn cached(&self, id: ProductId) -> Option<Arc<Layout>> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let entry = known.get(&id)?;
        (Instant::now() < entry.stale_at).then(|| entry.layout.clone())
    }

    /// Reads `id`'s layout again on its next use: a bucket said the product is not loaded, or
    /// this process loaded or forgot it.
    pub fn reread(&self, id: ProductId) {
        if let Some(known) = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
        {
            known.stale_at = Instant::now();
        }
    }

    /// The layouts of more than one bucket this process knows.
    pub fn split(&self) -> Vec<Arc<Layout>> {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|known| known.layout.len() > 1)
            .map(|known| known.layout.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bucket_is_some_buyers_home_and_homes_do_not_move() {
        let twelve = StockBuckets::parse(12).unwrap();
        let mut homes = [0u32; 12];
        for user in 1..=1200 {
            homes[usize::from(home_bucket(UserId(user), twelve))] += 1;
        }
        assert!(homes.iter().all(|&n| (50..=150).contains(&n)), "{homes:?}");
        assert_eq!(home_bucket(UserId(77), StockBuckets::ONE), 0);
        assert_eq!(
            home_bucket(UserId(77), twelve),
            home_bucket(UserId(77), twelve)
        );
    }

    #[test]
    fn twelve_buckets_go_four_to_each_of_three_masters() {
        let masters = [vec![(0, 5460)], vec![(5461, 10922)], vec![(10923, 16383)]];
        let twelve = StockBuckets::parse(12).unwrap();
        for product in 1..=50 {
            let mut per_master = [0; 3];
            let tags = deal(ProductId(product), twelve, &masters);
            for tag in &tags {
                let slot = slot(tag);
                per_master[masters
                    .iter()
                    .position(|r| r[0].0 <= slot && slot <= r[0].1)
                    .unwrap()] += 1;
            }
            assert_eq!(per_master, [4, 4, 4], "product {product}: {tags:?}");
            let distinct: std::collections::HashSet<_> = tags.iter().collect();
            assert_eq!(distinct.len(), 12);
        }
    }

    #[test]
    fn buckets_dealt_sit_evenly_until_a_resharding_moves_a_masters_slots() {
        let three = [vec![(0, 5460)], vec![(5461, 10922)], vec![(10923, 16383)]];
        let twelve = StockBuckets::parse(12).unwrap();
        let tags = deal(ProductId(7), twelve, &three);
        assert!(evenly_on(&tags, &three));
        // The first master's slots moved to the second: 0 / 8 / 4 over those three, 8 / 4 over
        // the two that still serve slots.
        let resharded = [vec![(0, 10922)], vec![(10923, 16383)]];
        assert!(!evenly_on(&tags, &resharded));
        assert!(evenly_on(
            &deal(ProductId(7), twelve, &resharded),
            &resharded
        ));
        // Two buckets on three masters: one master without one is even.
        let two = deal(ProductId(7), StockBuckets::parse(2).unwrap(), &three);
        assert!(evenly_on(&two, &three));
    }

    #[test]
    fn a_slot_is_the_one_redis_computes_for_the_tag() {
        // CLUSTER KEYSLOT foo = 12182, CLUSTER KEYSLOT 123456789 = 12739.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("123456789"), 12739);
    }
}
