//! The outbox: each product's Redis streams of accepted orders (one a bucket, see
//! [`layout`](super::layout)), appended by the buy script in
//! the same atomic step that takes the stock, so no accepted order can fall between the gate
//! and the queue. Workers read it through a consumer group: an entry goes to one reader and
//! stays pending until that reader has handed it on (stored it, or had RabbitMQ confirm it);
//! a reader that dies leaves its entries pending, and another claims them. An entry is deleted
//! only once its order is stored, so the stream always holds exactly the orders sold but not in
//! the database yet, which is what a gate rebuild must subtract from the database's stock.
//!
//! With replicas waited for (`redis_wait_replicas`), a reader hands on only entries the
//! replicas have: each read is followed by a `WAIT` on the same connection, and entries read
//! without their acknowledgement stay pending, to be claimed again later. So the database never
//! holds an order that a replica promoted after a failover lacks, and would sell again.

use super::keys::Keys;
use super::layout::{Layout, Layouts};
use super::lua::{ACK, BURY};
use super::replicas::Replicas;
use crate::domain::order::MalformedOrder;
use crate::domain::{Order, ProductId};
use crate::redis_link::RedisLink;
use anyhow::Context;
use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use redis::{Cmd, FromRedisValue, RedisResult, Value};
use std::sync::Arc;
use std::time::Duration;

/// The consumer group every outbox reader belongs to.
pub const GROUP: &str = "pipeline";

/// Most entry ids one acknowledgement carries (Lua's `unpack` has a limit near 8,000).
const ACK_CHUNK: usize = 1_000;

/// One accepted order read from the outbox.
pub struct OutboxEntry {
    /// The stream entry id, to acknowledge it; `BUCKET@ID` for a bucket but the first.
    pub id: String,
    /// The message as the buy script stored it, kept to bury it unchanged if it is unreadable.
    pub raw: Vec<u8>,
    pub order: Result<Order, MalformedOrder>,
}

/// A worker process's handle on the outbox streams; cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    redis: RedisLink,
    prefix: String,
    /// This reader's name in the group; entries it takes are pending under it.
    consumer: String,
    /// How long an entry may stay pending under a reader before another one takes it over.
    claim_after: Duration,
    /// The replicas that must have the entries read before they are handed on.
    replicas: Replicas,
    /// The products' buckets, each with an outbox.
    layouts: Arc<Layouts>,
}

impl Outbox {
    /// A reader named `consumer` over the outbox streams under `prefix`, handing on only what
    /// `replicas` acknowledged.
    pub fn new(
        redis: RedisLink,
        prefix: &str,
        consumer: String,
        claim_after: Duration,
        replicas: Replicas,
    ) -> Self {
        Self {
            redis,
            prefix: prefix.to_owned(),
            consumer,
            claim_after,
            replicas,
            layouts: Arc::default(),
        }
    }

    /// Product `id`'s buckets.
    async fn layout(&self, id: ProductId) -> anyhow::Result<Arc<Layout>> {
        self.layouts
            .of(&mut self.redis.clone(), &self.prefix, id)
            .await
            .context("reading a product's buckets")
    }

    /// Up to `max` entries of `product`'s buckets, each read by `read` (from a bucket's keys and
    /// the entries still wanted), their ids naming their bucket.
    async fn read_buckets<'a, F, Fut>(
        &'a self,
        product: ProductId,
        max: usize,
        read: F,
    ) -> anyhow::Result<Vec<OutboxEntry>>
    where
        F: Fn(&'a Self, Keys, usize) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Vec<OutboxEntry>>>,
    {
        let layout = self.layout(product).await?;
        let mut entries = Vec::new();
        for (bucket, keys) in layout.keys.iter().enumerate() {
            if entries.len() >= max {
                break;
            }
            let read = read(self, keys.clone(), max - entries.len()).await?;
            entries.extend(read.into_iter().map(|mut entry| {
                entry.id = entry_id(bucket, &entry.id);
                entry
            }));
        }
        Ok(entries)
    }

    /// Sends `read`, which takes entries (and so writes: the group's pending list), with a
    /// `WAIT` after it when replicas are waited for. `None`: they did not acknowledge it, and
    /// the entries it took stay pending until claimed again.
    async fn replicated<T: FromRedisValue>(&self, read: Cmd) -> RedisResult<Option<T>> {
        let (reply, kept) = self.replicas.query(&mut self.redis.clone(), read).await?;
        if !kept {
            self.replicas.not_kept("outbox read");
        }
        Ok(kept.then_some(reply))
    }

    /// Takes over up to `max` entries of `product` that some reader took but did not finish
    /// within the claim time (it died, or failed to store them).
    pub async fn claim_stalled(
        &self,
        product: ProductId,
        max: usize,
    ) -> anyhow::Result<Vec<OutboxEntry>> {
        self.read_buckets(product, max, Self::claim_stalled_in)
            .await
    }

    /// [`claim_stalled`](Self::claim_stalled) in the bucket with `keys`.
    async fn claim_stalled_in(&self, keys: Keys, max: usize) -> anyhow::Result<Vec<OutboxEntry>> {
        let mut claim = redis::cmd("XAUTOCLAIM");
        claim
            .arg(keys.outbox)
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(self.claim_after.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(max);
        let reply: RedisResult<Option<StreamAutoClaimReply>> = self.replicated(claim).await;
        match reply {
            Ok(reply) => Ok(reply
                .into_iter()
                .flat_map(|r| r.claimed)
                .map(entry)
                .collect()),
            Err(e) if no_stream(&e) => Ok(Vec::new()),
            Err(e) => Err(e).context("claiming stalled outbox entries"),
        }
    }

    /// Takes up to `max` new entries of `product`.
    pub async fn take(&self, product: ProductId, max: usize) -> anyhow::Result<Vec<OutboxEntry>> {
        self.read_buckets(product, max, Self::take_in).await
    }

    /// [`take`](Self::take) from the bucket with `keys`.
    async fn take_in(&self, keys: Keys, max: usize) -> anyhow::Result<Vec<OutboxEntry>> {
        let key = keys.outbox;
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(max)
            .arg("STREAMS")
            .arg(&key)
            .arg(">");
        let reply: RedisResult<Option<Option<StreamReadReply>>> = self.replicated(read).await;
        match reply {
            Ok(reply) => Ok(reply
                .into_iter()
                .flatten()
                .flat_map(|r| r.keys)
                .flat_map(|k| k.ids)
                .map(entry)
                .collect()),
            Err(e) if no_stream(&e) => {
                // A stream made before its group (an outbox older than its preheat): make the
                // group from the stream's start so no entry is skipped.
                let _: Result<(), _> = redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(&key)
                    .arg(GROUP)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query_async(&mut self.redis.clone())
                    .await;
                Ok(Vec::new())
            }
            Err(e) => Err(e).context("reading the outbox"),
        }
    }

    /// Forgets entries whose orders are stored.
    pub async fn finish(&self, product: ProductId, ids: &[&str]) -> anyhow::Result<()> {
        let layout = self.layout(product).await?;
        for (keys, ids) in by_bucket(&layout, ids)? {
            for chunk in ids.chunks(ACK_CHUNK) {
                let _deleted: i64 = ACK
                    .key(&keys.outbox)
                    .arg(GROUP)
                    .arg(chunk)
                    .invoke_async(&mut self.redis.clone())
                    .await
                    .context("acknowledging outbox entries")?;
            }
        }
        Ok(())
    }

    /// Marks entries as handed on to RabbitMQ: no reader takes them again, but they stay in the
    /// stream, counted as in flight, until the worker that stores them calls
    /// [`finish`](Self::finish).
    pub async fn hand_over(&self, product: ProductId, ids: &[&str]) -> anyhow::Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let layout = self.layout(product).await?;
        for (keys, ids) in by_bucket(&layout, ids)? {
            let _acked: i64 = redis::cmd("XACK")
                .arg(&keys.outbox)
                .arg(GROUP)
                .arg(ids)
                .query_async(&mut self.redis.clone())
                .await
                .context("acknowledging relayed outbox entries")?;
        }
        Ok(())
    }

    /// Moves an entry no worker can ever store (its id, and its message as the buy script
    /// stored it) to the product's dead stream, with the reason, for an operator to look at
    /// (`seckill reconcile` counts them).
    pub async fn bury(
        &self,
        product: ProductId,
        entry: &str,
        raw: &[u8],
        reason: &str,
    ) -> anyhow::Result<()> {
        let layout = self.layout(product).await?;
        let (bucket, entry) = bucket_of(entry);
        let keys = layout
            .keys
            .get(bucket)
            .with_context(|| format!("outbox entry of bucket {bucket}, not in the product"))?;
        let _deleted: i64 = BURY
            .key(&keys.outbox)
            .key(&keys.dead)
            .arg(GROUP)
            .arg(entry)
            .arg(raw)
            .arg(reason)
            .invoke_async(&mut self.redis.clone())
            .await
            .context("burying an outbox entry")?;
        Ok(())
    }
}

/// The id of entry `id` of bucket `bucket`, as [`OutboxEntry::id`] names it.
fn entry_id(bucket: usize, id: &str) -> String {
    if bucket == 0 {
        id.to_owned()
    } else {
        format!("{bucket}@{id}")
    }
}

/// The bucket and stream entry id an [`OutboxEntry::id`] names.
fn bucket_of(id: &str) -> (usize, &str) {
    match id.split_once('@') {
        Some((bucket, id)) => (bucket.parse().unwrap_or(usize::MAX), id),
        None => (0, id),
    }
}

/// `ids` by their bucket's keys.
fn by_bucket<'a>(
    layout: &'a Layout,
    ids: &[&'a str],
) -> anyhow::Result<Vec<(&'a Keys, Vec<&'a str>)>> {
    let mut grouped: Vec<Vec<&str>> = vec![Vec::new(); layout.len()];
    for id in ids {
        let (bucket, id) = bucket_of(id);
        grouped
            .get_mut(bucket)
            .with_context(|| format!("outbox entry of bucket {bucket}, not in the product"))?
            .push(id);
    }
    Ok(layout
        .keys
        .iter()
        .zip(grouped)
        .filter(|(_, ids)| !ids.is_empty())
        .collect())
}

/// The order an outbox entry holds.
pub(super) fn order_of(id: StreamId) -> Result<Order, MalformedOrder> {
    entry(id).order
}

/// The entry with its message moved out of the reply rather than copied: a worker reads
/// hundreds of entries a batch.
fn entry(mut id: StreamId) -> OutboxEntry {
    let raw = match id.map.remove("order") {
        Some(Value::BulkString(bytes)) => bytes,
        _ => Vec::new(),
    };
    OutboxEntry {
        order: Order::decode(&raw),
        raw,
        id: id.id,
    }
}

/// The stream or its group does not exist yet: nothing was sold there. The read may have led a
/// pipeline, whose error holds each command's own.
fn no_stream(e: &redis::RedisError) -> bool {
    let nogroup = e
        .clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, error)| error.code() == "NOGROUP"));
    nogroup || e.to_string().contains("no such key")
}
