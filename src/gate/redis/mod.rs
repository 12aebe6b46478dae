//! The stock gate in Redis, shared by every server process: a Lua script (EVALSHA, reloaded on
//! NOSCRIPT by `redis::Script`) decides a batch of buys of one product (see [`batch`]), so the
//! check-and-take is atomic without any lock.
//! A product's keys share the hash tag `{p:ID}` so its scripts run on one shard of a cluster:
//!
//! - `PREFIX{p:ID}:sale`: hash of `remaining`, `start`, `end` (Unix ms), `limit`, `paused`
//!   (`1` while an operator has buying paused)
//! - `PREFIX{p:ID}:buyers`: hash of user id → units held
//! - `PREFIX{p:ID}:released`: set of order ids whose units were given back (release runs once)
//! - `PREFIX{p:ID}:outbox`: stream of accepted orders not yet safe downstream, appended by the
//!   buy script itself (see [`outbox`])
//! - `PREFIX{p:ID}:dead`: stream of outbox entries no worker could ever store
//! - `PREFIX{p:ID}:replay:CALL`: the answers of a reserve call that took stock, kept a minute,
//!   so the same call re-sent by the client (a cluster connection retries a timed-out reply)
//!   answers as it did instead of taking the stock twice
//! - `PREFIX{p:ID}:kept`: hash of `USER:KEY` → the order placed with that idempotency key, and
//!   `PREFIX{u:USER}:key:KEY`: the buyer's claim on the key (see [`idempotency`])

mod batch;
mod idempotency;
mod keys;
mod lua;
mod outbox;
mod replicas;

pub use outbox::{Outbox, OutboxEntry};
pub use replicas::Replicas;

use crate::domain::{IdempotencyKey, Millis, Order, ProductId, SaleWindow};
use crate::gate::{GateAudit, GateError, GateProduct, Rejection, Reserved, StockGate};
use crate::redis_link::RedisLink;
use async_trait::async_trait;
use batch::ReserveBatches;
use idempotency::{Claim, KeyClaim};
use keys::Keys;
use lua::{LOAD, RELEASE, UPDATE, unavailable};
use redis::streams::StreamId;

/// The Redis [`StockGate`].
pub struct RedisGate {
    /// Multiplexed, reconnecting connection shared by all requests of this process.
    redis: RedisLink,
    /// Prepended to every key, so several deployments (or tests) share one Redis.
    prefix: String,
    /// Buys on their way to the reserve script.
    batches: ReserveBatches,
    /// The replicas that must acknowledge a change before it counts as kept.
    replicas: Replicas,
}

impl RedisGate {
    /// The gate over `redis`; keys start with `prefix`. A product's outbox holds at most
    /// `outbox_max` orders: past it, buys are refused ([`Rejection::BacklogFull`]) in the same
    /// atomic step that would take the stock, so nothing is taken for them. A buy, and every
    /// other change, is kept once `replicas` acknowledged it (see [`replicas`]).
    pub fn new(redis: RedisLink, prefix: &str, outbox_max: u64, replicas: Replicas) -> Self {
        Self {
            batches: ReserveBatches::new(redis.clone(), prefix, outbox_max, replicas),
            redis,
            prefix: prefix.to_owned(),
            replicas,
        }
    }

    fn keys(&self, id: ProductId) -> Keys {
        Keys::of(&self.prefix, id)
    }

    /// An operator's change of a loaded product (`op`: `configure`, `pause`, `add`), waited
    /// for by the replicas.
    async fn update(&self, id: ProductId, args: &[i64], op: &'static str) -> Result<(), GateError> {
        let mut command = lua::command(&UPDATE, &[&self.keys(id).sale]);
        command.arg(op).arg(args);
        let (loaded, kept): (i64, bool) = self
            .replicas
            .evalsha(&mut self.redis.clone(), &UPDATE, command)
            .await
            .map_err(unavailable)?;
        if !kept {
            self.replicas.not_kept(op);
        }
        if loaded == 1 {
            Ok(())
        } else {
            Err(Rejection::NotLoaded.into())
        }
    }

    /// A buy with an idempotency key: the buyer's claim on the key first, so a key sent for
    /// another product is refused, then the product's script, which answers a retry with its
    /// order or decides the buy. A refusal frees the claim (see [`idempotency`]).
    async fn reserve_keyed(
        &self,
        order: &Order,
        key: &IdempotencyKey,
        now: Millis,
    ) -> Result<Reserved, GateError> {
        let mut redis = self.redis.clone();
        let claim = KeyClaim::of(&self.prefix, order, key);
        let claimed = claim.make(&mut redis).await?;
        if claimed == Claim::Foreign {
            return Err(Rejection::KeyReused.into());
        }
        let decided = self.batches.reserve(order, now).await;
        match (&decided, claimed) {
            (Err(GateError::Rejected(_)), Claim::Mine) => claim.free(&mut redis).await,
            (Ok(Reserved::Taken { .. }), Claim::Shared) => claim.hold(&mut redis).await,
            _ => {}
        }
        decided
    }
}

/// Warns when Redis is set up so that it may lose accepted orders or gate state: in cluster mode
/// an order is acknowledged once it is in the Redis outbox, so Redis must persist it, and must
/// never evict a key to make room. Redis that hides its configuration (managed services) is
/// trusted.
pub async fn warn_unless_durable(redis: &RedisLink) {
    let mut redis = redis.clone();
    if config_value(&mut redis, "appendonly").await.as_deref() == Some("no") {
        tracing::warn!(
            "Redis runs without its append-only file: a Redis restart loses the orders still \
             in the outbox (set appendonly yes)"
        );
    }
    if let Some(policy) = config_value(&mut redis, "maxmemory-policy").await
        && policy != "noeviction"
    {
        tracing::warn!(
            policy,
            "Redis may evict keys when full: set maxmemory-policy noeviction so it refuses \
             buys instead of dropping orders"
        );
    }
}

/// A Redis setting, or `None` when Redis does not tell.
async fn config_value(redis: &mut RedisLink, name: &str) -> Option<String> {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(redis)
        .await
        .ok()?;
    pair.into_iter().nth(1)
}

#[async_trait]
impl StockGate for RedisGate {
    async fn load(&self, p: GateProduct) -> Result<bool, GateError> {
        let keys = self.keys(p.id);
        let mut call = LOAD.key(keys.sale);
        call.key(keys.buyers)
            .key(keys.released)
            .key(keys.kept)
            .arg(p.remaining)
            .arg(p.window.start)
            .arg(p.window.end)
            .arg(p.per_user_limit)
            .arg(i64::from(p.paused))
            .arg(p.holdings.len());
        for (user, units) in &p.holdings {
            call.arg(user.0).arg(*units);
        }
        call.arg(p.released.len());
        for order in &p.released {
            call.arg(order.0);
        }
        for order in &p.kept {
            if let Some(key) = &order.idempotency_key {
                call.arg(idempotency::field(order, key))
                    .arg(idempotency::kept_value(order, &order.encode()));
            }
        }
        let loaded_now: i64 = call
            .invoke_async(&mut self.redis.clone())
            .await
            .map_err(unavailable)?;
        Ok(loaded_now == 1)
    }

    async fn configure(
        &self,
        id: ProductId,
        window: SaleWindow,
        per_user_limit: u32,
    ) -> Result<(), GateError> {
        let args = [window.start, window.end, i64::from(per_user_limit)];
        self.update(id, &args, "configure").await
    }

    async fn set_paused(&self, id: ProductId, paused: bool) -> Result<(), GateError> {
        self.update(id, &[i64::from(paused)], "pause").await
    }

    async fn reserve(&self, order: &Order, now: Millis) -> Result<Reserved, GateError> {
        match &order.idempotency_key {
            None => self.batches.reserve(order, now).await,
            Some(key) => self.reserve_keyed(order, key, now).await,
        }
    }

    async fn kept(&self, order: &Order) -> Result<Option<Order>, GateError> {
        let Some(key) = &order.idempotency_key else {
            return Ok(None);
        };
        let kept = self.keys(order.product_id).kept;
        let mut read = redis::pipe();
        read.hget(&kept, idempotency::field(order, key));
        let (value, acknowledged) = match self.replicas.wait() {
            None => {
                let (value,): (Option<Vec<u8>>,) = read
                    .query_async(&mut self.redis.clone())
                    .await
                    .map_err(unavailable)?;
                (value, true)
            }
            Some(wait) => {
                // Written to (its lifetime renewed) so that the WAIT after it covers the write
                // that kept the order, whichever server made it.
                read.pexpire(&kept, IdempotencyKey::LIFETIME_MS)
                    .ignore()
                    .add_command(wait);
                let (value, acknowledged): (Option<Vec<u8>>, i64) = read
                    .query_async(&mut self.redis.clone())
                    .await
                    .map_err(unavailable)?;
                (value, self.replicas.enough(acknowledged))
            }
        };
        let order = value.and_then(|value| idempotency::kept_order(&value, order.created_at));
        if order.is_some() && !acknowledged {
            return Err(GateError::Unconfirmed { taken: false });
        }
        Ok(order)
    }

    async fn drop_key(&self, order: &Order) -> Result<(), GateError> {
        let Some(key) = &order.idempotency_key else {
            return Ok(());
        };
        let mut redis = self.redis.clone();
        let _dropped: i64 = redis::cmd("HDEL")
            .arg(self.keys(order.product_id).kept)
            .arg(idempotency::field(order, key))
            .query_async(&mut redis)
            .await
            .map_err(unavailable)?;
        KeyClaim::of(&self.prefix, order, key)
            .free(&mut redis)
            .await;
        Ok(())
    }

    async fn release(&self, order: &Order) -> Result<(), GateError> {
        let keys = self.keys(order.product_id);
        let mut command = lua::command(&RELEASE, &[&keys.sale, &keys.buyers, &keys.released]);
        command
            .arg(order.user_id.0)
            .arg(order.quantity.get())
            .arg(order.id.0);
        let (_released_now, kept): (i64, bool) = self
            .replicas
            .evalsha(&mut self.redis.clone(), &RELEASE, command)
            .await
            .map_err(unavailable)?;
        if !kept {
            self.replicas.not_kept("release");
        }
        Ok(())
    }

    async fn add_stock(&self, id: ProductId, units: i64) -> Result<(), GateError> {
        self.update(id, &[units], "add").await
    }

    async fn audit(&self, id: ProductId) -> Result<Option<GateAudit>, GateError> {
        let in_flight = self.outbox(id).await?;
        let keys = self.keys(id);
        let (remaining, dead): (Option<i64>, u64) = redis::pipe()
            .hget(keys.sale, "remaining")
            .xlen(keys.dead)
            .query_async(&mut self.redis.clone())
            .await
            .map_err(unavailable)?;
        Ok(remaining.map(|remaining| GateAudit {
            remaining,
            in_flight_units: in_flight.iter().map(|o| i64::from(o.quantity.get())).sum(),
            in_flight_orders: in_flight.len() as u64,
            dead,
        }))
    }

    async fn outbox(&self, id: ProductId) -> Result<Vec<Order>, GateError> {
        let entries: Vec<StreamId> = redis::cmd("XRANGE")
            .arg(self.keys(id).outbox)
            .arg("-")
            .arg("+")
            .query_async::<redis::streams::StreamRangeReply>(&mut self.redis.clone())
            .await
            .map_err(unavailable)?
            .ids;
        // An unreadable entry is no order the gate sold: the drain buries it.
        Ok(entries
            .into_iter()
            .filter_map(|entry| outbox::order_of(entry).ok())
            .collect())
    }

    async fn forget(&self, id: ProductId) -> Result<(), GateError> {
        let keys = self.keys(id);
        redis::cmd("DEL")
            .arg(keys.sale)
            .arg(keys.buyers)
            .arg(keys.released)
            .arg(keys.kept)
            .query_async(&mut self.redis.clone())
            .await
            .map_err(unavailable)
    }

    async fn remaining(&self, id: ProductId) -> Result<Option<i64>, GateError> {
        redis::cmd("HGET")
            .arg(self.keys(id).sale)
            .arg("remaining")
            .query_async(&mut self.redis.clone())
            .await
            .map_err(unavailable)
    }
}
