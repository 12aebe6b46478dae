//! The stock gate in Redis, shared by every server process: a Lua script (EVALSHA, reloaded on
//! NOSCRIPT by `redis::Script`) decides a batch of buys of one bucket of a product's stock (see
//! [`batch`]), so the check-and-take is atomic without any lock.
//! A product's stock is split into buckets (one unless an operator asked for more), each under a
//! hash tag of its own, so its scripts run on one shard of a cluster and the buckets of a hot
//! product on several (see [`layout`]). A buyer's buys are decided in their home bucket; when it
//! runs dry, units move to it from the others (see [`transfer`]). Each bucket's keys, under its
//! tag (`p:ID` for a product of one bucket):
//!
//! - `PREFIX{TAG}:sale`: hash of `remaining`, `start`, `end` (Unix ms), `limit`, `paused`
//!   (`1` while an operator has buying paused)
//! - `PREFIX{TAG}:buyers`: hash of user id → units held, for the buyers whose home it is
//! - `PREFIX{TAG}:released`: set of order ids whose units were given back (release runs once)
//! - `PREFIX{TAG}:outbox`: stream of accepted orders not yet safe downstream, appended by the
//!   buy script itself (see [`outbox`])
//! - `PREFIX{TAG}:dead`: stream of outbox entries no worker could ever store
//! - `PREFIX{TAG}:replay:CALL`: the answers of a reserve call that took stock, kept a minute,
//!   so the same call re-sent by the client (a cluster connection retries a timed-out reply)
//!   answers as it did instead of taking the stock twice
//! - `PREFIX{TAG}:kept`: hash of `USER:KEY` → the order placed with that idempotency key, and
//!   `PREFIX{u:USER}:key:KEY`: the buyer's claim on the key (see [`idempotency`])
//! - `PREFIX{TAG}:transfers` and `PREFIX{TAG}:got:ID`: units on their way to another bucket, and
//!   the mark of a transfer received
//!
//! and `PREFIX{p:ID}:layout`, the buckets' tags, and `PREFIX{p:ID}:layout:loading`, held by the
//! one process loading the product or spreading its buckets again after a resharding.

mod batch;
mod idempotency;
mod keys;
mod layout;
mod lua;
mod outbox;
mod replicas;
mod respread;
mod transfer;

pub use layout::home_bucket;
pub use outbox::{Outbox, OutboxEntry};
pub use replicas::Replicas;

use crate::domain::{IdempotencyKey, Millis, Order, ProductId, SaleWindow};
use crate::gate::{GateAudit, GateError, GateProduct, Rejection, Reserved, StockGate};
use crate::redis_link::RedisLink;
use async_trait::async_trait;
use batch::ReserveBatches;
use idempotency::{Claim, KeyClaim};
use keys::Keys;
use layout::{Layout, Layouts};
use lua::{LOAD, RELEASE, UPDATE, unavailable};
use redis::streams::StreamId;
use std::sync::Arc;
use std::time::Duration;
use transfer::Refill;

/// How often a server finishes the transfers between buckets that a process left half done.
const SETTLE_EVERY: Duration = Duration::from_secs(1);

/// How long a server may take to load a product before another may try: far longer than a
/// load takes, short enough that a loader that died holds up nothing for long.
const LOADING_MS: u64 = 30_000;

/// Most refills one buy waits for before it is answered `Refilling` (503, try again): others'
/// buys may take what each refill brought.
const REFILLS_PER_BUY: usize = 3;

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
    /// The buckets of the products this process has met.
    layouts: Arc<Layouts>,
}

impl RedisGate {
    /// The gate over `redis`; keys start with `prefix`. A bucket's outbox holds at most
    /// `outbox_max` orders: past it, buys are refused ([`Rejection::BacklogFull`]) in the same
    /// atomic step that would take the stock, so nothing is taken for them. A buy, and every
    /// other change, is kept once `replicas` acknowledged it (see [`replicas`]). Within a Tokio
    /// runtime, a task finishes transfers left half done until the gate is dropped.
    pub fn new(redis: RedisLink, prefix: &str, outbox_max: u64, replicas: Replicas) -> Self {
        let layouts = Arc::new(Layouts::default());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(settle_transfers(
                redis.clone(),
                replicas,
                Arc::downgrade(&layouts),
            ));
        }
        Self {
            batches: ReserveBatches::new(redis.clone(), outbox_max, replicas),
            redis,
            prefix: prefix.to_owned(),
            replicas,
            layouts,
        }
    }

    /// Product `id`'s buckets.
    async fn layout(&self, id: ProductId) -> Result<Arc<Layout>, GateError> {
        self.layouts
            .of(&mut self.redis.clone(), &self.prefix, id)
            .await
            .map_err(unavailable)
    }

    /// An operator's change of a loaded product (`op`: `configure`, `pause`, `add`) in one of
    /// its buckets, waited for by the replicas.
    async fn update(&self, keys: &Keys, args: &[i64], op: &'static str) -> Result<(), GateError> {
        let mut command = lua::command(&UPDATE, &[&keys.sale]);
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

    /// The same change in every bucket of product `id`.
    async fn update_all(
        &self,
        id: ProductId,
        args: &[i64],
        op: &'static str,
    ) -> Result<(), GateError> {
        let layout = self.layout(id).await?;
        for keys in &layout.keys {
            self.update(keys, args, op).await?;
        }
        Ok(())
    }

    /// `order` decided in bucket `bucket` of `layout`, whose units left are noted.
    async fn reserve_in(
        &self,
        layout: &Layout,
        bucket: usize,
        order: &Order,
        now: Millis,
    ) -> Result<Reserved, GateError> {
        let keys = &layout.keys[bucket];
        let decided = match &order.idempotency_key {
            None => self.batches.reserve(keys, order, now).await,
            Some(key) => self.reserve_keyed(keys, order, key, now).await,
        };
        match decided {
            Ok(Reserved::Taken { remaining })
            | Err(GateError::Rejected(Rejection::SoldOut { remaining })) => {
                layout.saw(bucket, remaining)
            }
            _ => {}
        }
        decided
    }

    /// A buy with an idempotency key: the buyer's claim on the key first, so a key sent for
    /// another product is refused, then the bucket's script, which answers a retry with its
    /// order or decides the buy. A refusal frees the claim (see [`idempotency`]).
    async fn reserve_keyed(
        &self,
        keys: &Keys,
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
        let decided = self.batches.reserve(keys, order, now).await;
        match (&decided, claimed) {
            (Err(GateError::Rejected(_)), Claim::Mine) => claim.free(&mut redis).await,
            (Ok(Reserved::Taken { .. }), Claim::Shared) => claim.hold(&mut redis).await,
            _ => {}
        }
        decided
    }

    /// Loads bucket `bucket` of `layout` with `remaining` units and its share of `p`'s buyers:
    /// those whose home it is. True when this call loaded it.
    async fn load_bucket(
        &self,
        layout: &Layout,
        bucket: usize,
        remaining: i64,
        p: &GateProduct,
    ) -> Result<bool, GateError> {
        let keys = &layout.keys[bucket];
        let home = |user| layout.home(user) == bucket;
        let holdings: Vec<_> = p.holdings.iter().filter(|(user, _)| home(*user)).collect();
        let mut call = LOAD.key(&keys.sale);
        call.key(&keys.buyers)
            .key(&keys.released)
            .key(&keys.kept)
            .arg(remaining)
            .arg(p.window.start)
            .arg(p.window.end)
            .arg(p.per_user_limit)
            .arg(i64::from(p.paused))
            .arg(holdings.len());
        for (user, units) in holdings {
            call.arg(user.0).arg(*units);
        }
        // An order's release goes to its buyer's home, which this list does not say: every
        // bucket keeps them all.
        call.arg(p.released.len());
        for order in &p.released {
            call.arg(order.0);
        }
        for order in p.kept.iter().filter(|order| home(order.user_id)) {
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

    /// [`StockGate::load`] for the one loader: the layout (kept if there is one, else planned and
    /// written), then every bucket, unless all are loaded. A product half loaded (its loader
    /// died, or a shard lost its data) is forgotten instead, and loaded whole by the next load,
    /// whose caller reads the outbox after this: buys ran on the loaded buckets meanwhile.
    async fn load_unless_loaded(&self, p: &GateProduct) -> Result<bool, GateError> {
        let mut redis = self.redis.clone();
        let layout_key = keys::layout(&self.prefix, p.id);
        let planned = layout::plan(&mut redis, p.id, p.buckets).await.join(" ");
        let () = redis::cmd("SET")
            .arg(&layout_key)
            .arg(&planned)
            .arg("NX")
            .query_async(&mut redis)
            .await
            .map_err(unavailable)?;
        self.layouts.reread(p.id);
        let layout = self.layout(p.id).await?;
        let loaded = self.loaded(&layout).await?;
        if loaded.iter().all(|&loaded| loaded) {
            return Ok(false);
        }
        if loaded.iter().any(|&loaded| loaded) {
            tracing::warn!(
                product = p.id.0,
                "a product half loaded into the gate is forgotten, to be loaded again"
            );
            self.forget(p.id).await?;
            return Ok(false);
        }
        let buckets = layout.len() as i64;
        let mut loaded_now = false;
        for bucket in 0..layout.len() {
            let share = p.remaining / buckets + i64::from((bucket as i64) < p.remaining % buckets);
            loaded_now |= self.load_bucket(&layout, bucket, share, p).await?;
        }
        Ok(loaded_now)
    }

    /// Takes product `id`'s loading lock: false when another process holds it.
    async fn lock_loading(&self, id: ProductId) -> Result<bool, GateError> {
        redis::cmd("SET")
            .arg(keys::loading(&self.prefix, id))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(LOADING_MS)
            .query_async(&mut self.redis.clone())
            .await
            .map_err(unavailable)
    }

    /// Lets the next loader of product `id` in (the lock lapses anyway should this fail).
    async fn unlock_loading(&self, id: ProductId) {
        let _: Result<i64, _> = redis::cmd("DEL")
            .arg(keys::loading(&self.prefix, id))
            .query_async(&mut self.redis.clone())
            .await;
    }

    /// The length of one stream of each bucket of `layout` (`stream` names it).
    async fn lengths(
        &self,
        layout: &Layout,
        stream: impl Fn(&Keys) -> &String,
    ) -> Result<Vec<u64>, GateError> {
        let mut lengths = Vec::with_capacity(layout.len());
        for keys in &layout.keys {
            let length: u64 = redis::cmd("XLEN")
                .arg(stream(keys))
                .query_async(&mut self.redis.clone())
                .await
                .map_err(unavailable)?;
            lengths.push(length);
        }
        Ok(lengths)
    }

    /// Whether each bucket of `layout` is loaded.
    async fn loaded(&self, layout: &Layout) -> Result<Vec<bool>, GateError> {
        let mut loaded = Vec::with_capacity(layout.len());
        for keys in &layout.keys {
            let exists: bool = redis::cmd("EXISTS")
                .arg(&keys.sale)
                .query_async(&mut self.redis.clone())
                .await
                .map_err(unavailable)?;
            loaded.push(exists);
        }
        Ok(loaded)
    }

    /// Deletes what `layout`'s buckets hold but their outboxes.
    async fn forget_buckets(&self, layout: &Layout) -> Result<(), GateError> {
        for keys in &layout.keys {
            let () = redis::cmd("DEL")
                .arg(&keys.sale)
                .arg(&keys.buyers)
                .arg(&keys.released)
                .arg(&keys.kept)
                .arg(&keys.transfers)
                .query_async(&mut self.redis.clone())
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }
}

/// Every [`SETTLE_EVERY`], finishes the transfers left half done in the products of `layouts`,
/// until the gate that holds them is dropped.
async fn settle_transfers(redis: RedisLink, replicas: Replicas, layouts: std::sync::Weak<Layouts>) {
    loop {
        tokio::time::sleep(SETTLE_EVERY).await;
        let Some(layouts) = layouts.upgrade() else {
            return;
        };
        for layout in layouts.split() {
            if let Err(e) = transfer::settle_all(&redis, replicas, &layout).await {
                tracing::debug!(error = %e, "settling transfers between buckets");
            }
        }
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
        // One loader at a time: another server's load in progress is as good as done.
        if !self.lock_loading(p.id).await? {
            return Ok(false);
        }
        let loaded = self.load_unless_loaded(&p).await;
        self.unlock_loading(p.id).await;
        loaded
    }

    async fn configure(
        &self,
        id: ProductId,
        window: SaleWindow,
        per_user_limit: u32,
    ) -> Result<(), GateError> {
        let args = [window.start, window.end, i64::from(per_user_limit)];
        self.update_all(id, &args, "configure").await
    }

    async fn set_paused(&self, id: ProductId, paused: bool) -> Result<(), GateError> {
        self.update_all(id, &[i64::from(paused)], "pause").await
    }

    async fn reserve(&self, order: &Order, now: Millis) -> Result<Reserved, GateError> {
        let mut layout = self.layout(order.product_id).await?;
        let mut home = layout.home(order.user_id);
        let mut decided = self.reserve_in(&layout, home, order, now).await;
        if matches!(decided, Err(GateError::Rejected(Rejection::NotLoaded))) {
            // Maybe loaded again since this process read its layout.
            self.layouts.reread(order.product_id);
            let fresh = self.layout(order.product_id).await?;
            if fresh.tags != layout.tags {
                layout = fresh;
                home = layout.home(order.user_id);
                decided = self.reserve_in(&layout, home, order, now).await;
            }
        }
        if layout.len() == 1 {
            return decided;
        }
        let need = i64::from(order.quantity.get());
        for _ in 0..REFILLS_PER_BUY {
            let Err(GateError::Rejected(Rejection::SoldOut { .. })) = decided else {
                return decided;
            };
            {
                let _turn = layout.refills[home].lock().await;
                // Refilled by a buyer who found it dry first: buy from that.
                if layout.seen(home) < need {
                    match transfer::refill(&self.redis, self.replicas, &layout, home, need).await? {
                        Refill::Moved => {}
                        Refill::Pending => return Err(Rejection::Refilling.into()),
                        Refill::Empty => {
                            let remaining = layout.seen(home).max(0);
                            return Err(Rejection::SoldOut { remaining }.into());
                        }
                    }
                }
            }
            decided = self.reserve_in(&layout, home, order, now).await;
        }
        match decided {
            Err(GateError::Rejected(Rejection::SoldOut { .. })) => Err(Rejection::Refilling.into()),
            decided => decided,
        }
    }

    async fn kept(&self, order: &Order) -> Result<Option<Order>, GateError> {
        let Some(key) = &order.idempotency_key else {
            return Ok(None);
        };
        let layout = self.layout(order.product_id).await?;
        let kept = &layout.keys[layout.home(order.user_id)].kept;
        let mut read = redis::pipe();
        read.hget(kept, idempotency::field(order, key));
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
                read.pexpire(kept, IdempotencyKey::LIFETIME_MS)
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
        let layout = self.layout(order.product_id).await?;
        let mut redis = self.redis.clone();
        let _dropped: i64 = redis::cmd("HDEL")
            .arg(&layout.keys[layout.home(order.user_id)].kept)
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
        let layout = self.layout(order.product_id).await?;
        let keys = &layout.keys[layout.home(order.user_id)];
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
        let layout = self.layout(id).await?;
        let buckets = layout.len() as i64;
        for (bucket, keys) in layout.keys.iter().enumerate() {
            let share = units / buckets + i64::from((bucket as i64) < units % buckets);
            if share > 0 {
                self.update(keys, &[share], "add").await?;
            }
        }
        Ok(())
    }

    async fn audit(&self, id: ProductId) -> Result<Option<GateAudit>, GateError> {
        let in_flight = self.outbox(id).await?;
        let layout = self.layout(id).await?;
        let dead = self.lengths(&layout, |keys| &keys.dead).await?.iter().sum();
        let remaining = transfer::units_left(&self.redis, &layout).await?;
        Ok(remaining.map(|remaining| GateAudit {
            remaining,
            in_flight_units: in_flight.iter().map(|o| i64::from(o.quantity.get())).sum(),
            in_flight_orders: in_flight.len() as u64,
            dead,
        }))
    }

    async fn outbox(&self, id: ProductId) -> Result<Vec<Order>, GateError> {
        let layout = self.layout(id).await?;
        let mut orders = Vec::new();
        for keys in &layout.keys {
            let entries: Vec<StreamId> = redis::cmd("XRANGE")
                .arg(&keys.outbox)
                .arg("-")
                .arg("+")
                .query_async::<redis::streams::StreamRangeReply>(&mut self.redis.clone())
                .await
                .map_err(unavailable)?
                .ids;
            // An unreadable entry is no order the gate sold: the drain buries it.
            orders.extend(
                entries
                    .into_iter()
                    .filter_map(|entry| outbox::order_of(entry).ok()),
            );
        }
        Ok(orders)
    }

    async fn forget(&self, id: ProductId) -> Result<(), GateError> {
        let layout = self.layout(id).await?;
        self.forget_buckets(&layout).await?;
        let () = redis::cmd("DEL")
            .arg(keys::layout(&self.prefix, id))
            .query_async(&mut self.redis.clone())
            .await
            .map_err(unavailable)?;
        self.layouts.reread(id);
        Ok(())
    }

    async fn respread(&self, id: ProductId) -> Result<bool, GateError> {
        let layout = self.layout(id).await?;
        if layout.len() == 1 || layout::spread_evenly(&mut self.redis.clone(), &layout.tags).await {
            return Ok(false);
        }
        if !self.lock_loading(id).await? {
            return Ok(false);
        }
        let respread = self.respread_holding_lock(id).await;
        self.unlock_loading(id).await;
        respread
    }

    async fn remaining(&self, id: ProductId) -> Result<Option<i64>, GateError> {
        let layout = self.layout(id).await?;
        transfer::units_left(&self.redis, &layout).await
    }
}
