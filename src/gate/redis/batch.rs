//! Buys travel to Redis in batches. Every buy of a product's bucket (see
//! [`layout`](super::layout)) that arrives while that bucket's previous script call is on its
//! way joins the next call, so Redis runs one call (one parse,
//! one sale lookup, one reply) for many buys, and this process writes and reads one command
//! instead of many. Nobody waits for a timer: a lone buy leaves at once, and under a crowd a
//! batch grows to what arrived during one round trip. The script decides each buy as if it ran
//! alone, in arrival order, so batching changes no answer.
//!
//! A bucket's queue is bounded: buys that find it full (Redis stalled, or buys of one product
//! arriving faster than Redis decides them) are refused at once as [`Rejection::BacklogFull`]
//! rather than waiting without end. Buys with an idempotency key go on after their buyer
//! leaves, so the number of open connections alone would not bound it.

use super::idempotency;
use super::keys::Keys;
use super::lua::{RESERVE, unavailable};
use super::replicas::Replicas;
use crate::domain::{Millis, Order};
use crate::gate::{GateError, Rejection, Reserved};
use crate::redis_link::RedisLink;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Most buys in one script call, which bounds how long it holds Redis (which runs one script
/// at a time) and its argument list.
const MAX_BUYS: usize = 128;

/// Most buys of one product waiting for their script call: sixty-four full calls, far more
/// than arrive during one round trip of a working Redis.
const MAX_WAITING: usize = 64 * MAX_BUYS;

/// A buy waiting for its batch: the script's arguments for it, and where its answer goes. The
/// order is encoded by its buyer's own task, not by the product's one batch task, which every
/// buy of the product passes through.
struct Pending {
    user: i64,
    units: u32,
    now: Millis,
    encoded: String,
    /// Its field in the product's `kept` hash, for a buy with an idempotency key.
    kept_as: Option<String>,
    answer: oneshot::Sender<Result<Reserved, GateError>>,
}

/// Where a buy's answer arrives.
type Answered = oneshot::Receiver<Result<Reserved, GateError>>;

impl Pending {
    /// `order`, bought at `now`, ready to join a batch; and where its answer will arrive.
    fn of(order: &Order, now: Millis) -> (Self, Answered) {
        let (answer, answered) = oneshot::channel();
        let pending = Self {
            user: order.user_id.0,
            units: order.quantity.get(),
            now,
            encoded: order.encode(),
            kept_as: order
                .idempotency_key
                .as_ref()
                .map(|key| idempotency::field(order, key)),
            answer,
        };
        (pending, answered)
    }
}

/// One queue per bucket in front of the reserve script, each emptied by a task of its own, so
/// a slow call (a shard failing over) holds up the buys of its own bucket only.
pub(super) struct ReserveBatches {
    redis: RedisLink,
    /// The queues by their bucket's sale key.
    queues: Mutex<HashMap<String, mpsc::Sender<Pending>>>,
    /// Most entries a product's outbox may hold; the script refuses buys past it.
    outbox_max: u64,
    /// The replicas each call's buys wait for before they are answered as taken.
    replicas: Replicas,
}

impl ReserveBatches {
    /// Batches over `redis`, refusing buys of a bucket whose outbox holds `outbox_max`
    /// entries, each call's buys answered as taken only once `replicas` acknowledged them. A
    /// bucket's task starts with its first buy and ends when this is dropped.
    pub fn new(redis: RedisLink, outbox_max: u64, replicas: Replicas) -> Self {
        Self {
            redis,
            queues: Mutex::new(HashMap::new()),
            outbox_max,
            replicas,
        }
    }

    /// Runs the reserve script for `order` within a batch of the bucket with `keys`; returns
    /// the units left there, as [`StockGate::reserve`](crate::gate::StockGate::reserve) does.
    /// Must be called within a Tokio runtime.
    pub async fn reserve(
        &self,
        keys: &Keys,
        order: &Order,
        now: Millis,
    ) -> Result<Reserved, GateError> {
        let (pending, answered) = Pending::of(order, now);
        let stopped = || GateError::Unavailable(anyhow::anyhow!("the stock gate is shutting down"));
        self.queue_of(keys).try_send(pending).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Rejection::BacklogFull.into(),
            mpsc::error::TrySendError::Closed(_) => stopped(),
        })?;
        answered.await.map_err(|_| stopped())?
    }

    /// The queue of the bucket with `keys`, started on first use.
    fn queue_of(&self, keys: &Keys) -> mpsc::Sender<Pending> {
        let mut queues = self
            .queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(queue) = queues.get(&keys.sale) {
            return queue.clone();
        }
        queues
            .entry(keys.sale.clone())
            .or_insert_with(|| {
                let (queue, buys) = mpsc::channel(MAX_WAITING);
                let call = Call {
                    redis: self.redis.clone(),
                    keys: keys.clone(),
                    outbox_max: self.outbox_max,
                    replicas: self.replicas,
                };
                tokio::spawn(send_batches(call, buys));
                queue
            })
            .clone()
    }
}

/// Sends one script call at a time for one product's buys, then takes whatever queued
/// meanwhile. The call in flight while the next fills is what batches the buys: on loopback,
/// a second call in flight made batches smaller and buys slower.
async fn send_batches(mut call: Call, mut buys: mpsc::Receiver<Pending>) {
    let mut batch = Vec::with_capacity(MAX_BUYS);
    while buys.recv_many(&mut batch, MAX_BUYS).await > 0 {
        // A buyer who left before the call has nothing sent for them: no order, no stock taken.
        batch.retain(|pending| !pending.answer.is_closed());
        if !batch.is_empty() {
            let batch = std::mem::take(&mut batch);
            call.reserve_batch(rand::random(), batch).await;
        }
    }
}

/// What every script call of one product's batches is made of.
struct Call {
    redis: RedisLink,
    keys: Keys,
    /// Most entries the product's outbox takes.
    outbox_max: u64,
    /// The replicas that must acknowledge a call before its buys are answered as taken.
    replicas: Replicas,
}

impl Call {
    /// One script call for `batch`, all buys of one product, and each buy's answer sent back.
    /// `id` names the call's replay key: drawn at random for every call, so only a copy of
    /// this very call (the client sending it again) finds the answers it left there. A buy
    /// taken (or a retry answered with its order) whose call the replicas did not acknowledge
    /// is answered [`GateError::Unconfirmed`].
    async fn reserve_batch(&mut self, id: u64, batch: Vec<Pending>) {
        metrics::histogram!("seckill_gate_batch_size").record(batch.len() as f64);
        let started = Instant::now();
        let answers = self.run_reserve(id, &batch).await;
        metrics::histogram!("seckill_gate_call_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        let (text, kept) = match answers {
            Ok(answered) => answered,
            Err(e) => return fail(batch, || unavailable(e.clone())),
        };
        let lines = match split(&text, batch.len()) {
            Ok(lines) => lines,
            Err(e) => return fail(batch, || GateError::Unavailable(anyhow::anyhow!("{e:#}"))),
        };
        for (pending, line) in batch.into_iter().zip(lines) {
            let answer = match decode(line) {
                Ok(reserved) if !kept => Err(GateError::Unconfirmed {
                    taken: matches!(reserved, Reserved::Taken { .. }),
                }),
                answer => answer,
            };
            // The buyer may have left; the buy stands either way, as it would unbatched.
            let _gone = pending.answer.send(answer);
        }
    }

    /// Runs the reserve script over `batch` and returns its answer's text, and whether the
    /// replicas acknowledged the call (always, when none is waited for: then no `WAIT` is
    /// sent). Only a batch with a buy that has an idempotency key names the `kept` hash and
    /// gives each buy its field there: a batch without one names neither.
    async fn run_reserve(
        &mut self,
        id: u64,
        batch: &[Pending],
    ) -> redis::RedisResult<(Vec<u8>, bool)> {
        let keys = &self.keys;
        let keyed = batch.iter().any(|pending| pending.kept_as.is_some());
        let per_buy = if keyed { 5 } else { 4 };
        let bytes: usize = batch
            .iter()
            .map(|pending| {
                40 + pending.encoded.len() + pending.kept_as.as_ref().map_or(0, String::len)
            })
            .sum();
        let mut command = redis::Cmd::with_capacity(9 + per_buy * batch.len(), 256 + bytes);
        command
            .arg("EVALSHA")
            .arg(RESERVE.get_hash())
            .arg(if keyed { 5 } else { 4 })
            .arg(&keys.sale)
            .arg(&keys.buyers)
            .arg(&keys.outbox)
            .arg(keys.replay(id));
        if keyed {
            command.arg(&keys.kept);
        }
        for pending in batch {
            command
                .arg(pending.user)
                .arg(pending.units)
                .arg(pending.now)
                .arg(&pending.encoded);
            if keyed {
                command.arg(pending.kept_as.as_deref().unwrap_or(""));
            }
        }
        command.arg(self.outbox_max);
        self.replicas
            .evalsha(&mut self.redis, &RESERVE, command)
            .await
    }
}

/// Answers every buy of `batch` with `error()`: its call failed.
fn fail(batch: Vec<Pending>, error: impl Fn() -> GateError) {
    for pending in batch {
        let _gone = pending.answer.send(Err(error()));
    }
}

/// The script's answer for `buys` buys: each buy's code and second line, in order.
fn split(text: &[u8], buys: usize) -> anyhow::Result<impl Iterator<Item = (&[u8], &[u8])>> {
    let lines = text.split(|&byte| byte == b'\n');
    let count = lines.clone().count();
    anyhow::ensure!(
        count == 2 * buys,
        "reserve script answered {count} lines for {buys} buys"
    );
    let mut lines = lines;
    Ok(std::iter::from_fn(move || {
        Some((lines.next()?, lines.next()?))
    }))
}

/// One buy's code and units left (or, for a retry, the order its key made) from the script, as
/// the gate's answer.
fn decode((code, second): (&[u8], &[u8])) -> Result<Reserved, GateError> {
    let odd = || {
        GateError::Unavailable(anyhow::anyhow!(
            "reserve script answered {:?}, {:?}",
            String::from_utf8_lossy(code),
            String::from_utf8_lossy(second)
        ))
    };
    let number = |text: &[u8]| -> Option<i64> { std::str::from_utf8(text).ok()?.parse().ok() };
    let code = number(code).ok_or_else(odd)?;
    let remaining = || number(second).ok_or_else(odd);
    let rejection = match code {
        0 => {
            return Ok(Reserved::Taken {
                remaining: remaining()?,
            });
        }
        1 => {
            let order = Order::decode(second).map_err(|e| GateError::Unavailable(e.into()))?;
            return Ok(Reserved::Replayed(order));
        }
        -1 => Rejection::NotLoaded,
        -2 => Rejection::NotStarted,
        -3 => Rejection::Ended,
        -4 => Rejection::LimitReached,
        -5 => Rejection::SoldOut {
            remaining: remaining()?,
        },
        -6 => Rejection::Paused,
        -7 => Rejection::KeyReused,
        -8 => Rejection::BacklogFull,
        _ => return Err(odd()),
    };
    Err(rejection.into())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::domain::{
        IdempotencyKey, Money, OrderId, OrderStatus, ProductId, Quantity, SaleWindow, StockBuckets,
        UserId,
    };
    use crate::gate::redis::RedisGate;
    use crate::gate::{GateProduct, StockGate};

    /// When the tests' buys are made.
    pub(in crate::gate::redis) const NOW: Millis = 1_800_000_000_000;

    /// Order `id` of one unit of product 1 by `user`, made at [`NOW`].
    pub(in crate::gate::redis) fn order(id: i64, user: i64) -> Order {
        let price = Money::from_cents(100).unwrap();
        Order {
            id: OrderId(id),
            user_id: UserId(user),
            product_id: ProductId(1),
            product_name: "Kettle".into(),
            unit_price: price,
            quantity: Quantity::parse(1).unwrap(),
            total: price,
            status: OrderStatus::AwaitingPayment,
            created_at: NOW,
            pay_before: NOW + 900_000,
            paid_at: None,
            cancelled_at: None,
            pay_started_at: None,
            idempotency_key: None,
        }
    }

    /// `order(id, user)` for `units`, placed with idempotency key `key`.
    fn keyed(id: i64, user: i64, units: i64, key: &str) -> Order {
        let price = Money::from_cents(100).unwrap();
        Order {
            quantity: Quantity::parse(units).unwrap(),
            total: price.times(units as u32),
            idempotency_key: Some(IdempotencyKey::parse(key).unwrap()),
            ..order(id, user)
        }
    }

    /// Runs `orders` as reserve call `call`; each buy's answer, errors by name, a replay by the
    /// id of the order it answers with.
    async fn run(redis: &mut RedisLink, keys: &Keys, call: u64, orders: &[Order]) -> Vec<String> {
        run_bounded(redis, keys, 1_000, call, orders).await
    }

    /// [`run`] with an outbox of at most `outbox_max` entries.
    async fn run_bounded(
        redis: &mut RedisLink,
        keys: &Keys,
        outbox_max: u64,
        call: u64,
        orders: &[Order],
    ) -> Vec<String> {
        run_waiting(redis, keys, outbox_max, Replicas::NONE, call, orders).await
    }

    /// [`run_bounded`], each call acknowledged by `replicas`.
    async fn run_waiting(
        redis: &mut RedisLink,
        keys: &Keys,
        outbox_max: u64,
        replicas: Replicas,
        id: u64,
        orders: &[Order],
    ) -> Vec<String> {
        let (batch, answers): (Vec<_>, Vec<_>) =
            orders.iter().map(|order| Pending::of(order, NOW)).unzip();
        let mut call = Call {
            redis: redis.clone(),
            keys: keys.clone(),
            outbox_max,
            replicas,
        };
        call.reserve_batch(id, batch).await;
        let mut decided = Vec::new();
        for answered in answers {
            decided.push(match answered.await.unwrap() {
                Ok(Reserved::Replayed(first)) => format!("Replayed({})", first.id),
                other => format!("{other:?}"),
            });
        }
        decided
    }

    /// Product 1 on sale now with three units, paused or not, at `limit` a buyer.
    fn three_units(paused: bool, limit: u32) -> GateProduct {
        GateProduct {
            id: ProductId(1),
            window: SaleWindow::new(NOW - 1_000, NOW + 60_000).unwrap(),
            paused,
            remaining: 3,
            per_user_limit: limit,
            buckets: StockBuckets::ONE,
            holdings: vec![],
            released: vec![],
            kept: vec![],
        }
    }

    /// A gate under a prefix of this test's own (`tag`) with `product` loaded: the Redis link,
    /// the gate and the product's keys.
    async fn loaded(tag: &str, product: &GateProduct) -> (RedisLink, RedisGate, Keys) {
        let redis = crate::redis_link::test_link().await;
        let prefix = format!("seckill-unit:{}:{tag}", std::process::id());
        let gate = RedisGate::new(redis.clone(), &prefix, 1_000, Replicas::NONE);
        gate.load(product.clone()).await.unwrap();
        (redis, gate, Keys::of(&prefix, "p:1"))
    }

    /// Removes what a test left under its prefix: the outbox, the replay keys of `calls`, the
    /// product.
    async fn clean_up(redis: &mut RedisLink, gate: &RedisGate, keys: &Keys, calls: &[u64]) {
        let mut del = redis::cmd("DEL");
        del.arg(&keys.outbox);
        for &call in calls {
            del.arg(keys.replay(call));
        }
        let _: () = del.query_async(redis).await.unwrap();
        gate.forget(ProductId(1)).await.unwrap();
    }

    /// More replicas than any test Redis has: every `WAIT` for them times out.
    const MISSING_REPLICAS: Replicas = Replicas {
        count: 16,
        timeout_ms: 10,
    };

    #[test]
    fn a_script_answer_is_read_as_two_lines_a_buy_and_nothing_else() {
        let first = Order {
            product_name: "Kettle, blue\n\"2L\"".into(),
            ..keyed(9, 7, 1, "k-1")
        };
        let text = format!("0\n4\n-5\n0\n1\n{}\n-4\n3", first.encode());
        let answers: Vec<_> = split(text.as_bytes(), 4).unwrap().map(decode).collect();
        assert_eq!(
            answers[0].as_ref().unwrap(),
            &Reserved::Taken { remaining: 4 }
        );
        assert!(matches!(
            answers[1],
            Err(GateError::Rejected(Rejection::SoldOut { remaining: 0 }))
        ));
        assert_eq!(answers[2].as_ref().unwrap(), &Reserved::Replayed(first));
        assert!(matches!(
            answers[3],
            Err(GateError::Rejected(Rejection::LimitReached))
        ));
        assert!(split(b"0\n4\n-5", 2).is_err(), "a line missing");
        assert!(split(b"0\n4\n-5\n0\n1", 2).is_err(), "a line too many");
        for odd in [&b"2\n0"[..], b"0\nmany", b"x\n0", b"1\n{"] {
            let answer = decode(split(odd, 1).unwrap().next().unwrap());
            assert!(matches!(answer, Err(GateError::Unavailable(_))), "{odd:?}");
        }
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn buys_the_replicas_did_not_acknowledge_are_unconfirmed_yet_taken() {
        let product = three_units(false, 1);
        let (mut redis, gate, keys) = loaded("unacknowledged:", &product).await;
        let buys = [order(1, 7), order(2, 7), keyed(3, 8, 1, "k")];
        let answers = run_waiting(&mut redis, &keys, 1_000, MISSING_REPLICAS, 1, &buys).await;
        // Taken on the master (a refusal stays a refusal): in the outbox, for the worker to
        // store if the master survives, but not answered as bought.
        assert_eq!(
            answers,
            [
                "Err(Unconfirmed { taken: true })",
                "Err(Rejected(LimitReached))",
                "Err(Unconfirmed { taken: true })"
            ]
        );
        let in_outbox: u64 = redis::cmd("XLEN")
            .arg(&keys.outbox)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(in_outbox, 2);
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(1));
        // The keyed buy's retry is answered with its order only once the replicas have it.
        let retry = keyed(4, 8, 1, "k");
        assert_eq!(
            run_waiting(
                &mut redis,
                &keys,
                1_000,
                MISSING_REPLICAS,
                2,
                std::slice::from_ref(&retry)
            )
            .await,
            ["Err(Unconfirmed { taken: false })"]
        );
        assert_eq!(
            run(&mut redis, &keys, 3, std::slice::from_ref(&retry)).await,
            ["Replayed(3)"]
        );
        let waiting = RedisGate::new(redis.clone(), &gate.prefix, 1_000, MISSING_REPLICAS);
        assert!(matches!(
            waiting.kept(&retry).await,
            Err(GateError::Unconfirmed { taken: false })
        ));
        assert_eq!(gate.kept(&retry).await.unwrap().map(|o| o.id.0), Some(3));
        // With nothing waited for, the same call is answered as taken.
        assert_eq!(
            run_waiting(&mut redis, &keys, 1_000, Replicas::NONE, 4, &[order(5, 9)]).await,
            ["Ok(Taken { remaining: 0 })"]
        );
        clean_up(&mut redis, &gate, &keys, &[1, 2, 3, 4]).await;
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_key_is_kept_with_its_order_in_the_step_that_takes_the_units() {
        let product = three_units(false, 2);
        let (mut redis, gate, keys) = loaded("keyed:", &product).await;

        // One call: a buy with key `a`, its retry (which replays it), the key with another
        // quantity (refused), and a buy without a key.
        let first = [
            keyed(1, 7, 1, "a"),
            keyed(2, 7, 1, "a"),
            keyed(3, 7, 2, "a"),
            order(4, 8),
        ];
        let answers = run(&mut redis, &keys, 1, &first).await;
        assert_eq!(
            answers,
            [
                "Ok(Taken { remaining: 2 })",
                "Replayed(1)",
                "Err(Rejected(KeyReused))",
                "Ok(Taken { remaining: 1 })"
            ]
        );
        // The call sent again answers the same, replays included.
        assert_eq!(run(&mut redis, &keys, 1, &first).await, answers);
        // A retry in a later call (another server's), and the sale closed meanwhile: the same
        // order, as encoded, and nothing taken.
        gate.set_paused(ProductId(1), true).await.unwrap();
        assert_eq!(
            run(&mut redis, &keys, 2, &[keyed(5, 7, 1, "a")]).await,
            ["Replayed(1)"]
        );
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(1));
        assert_eq!(
            gate.outbox(ProductId(1)).await.unwrap(),
            [keyed(1, 7, 1, "a"), order(4, 8)]
        );
        assert_eq!(
            gate.kept(&keyed(6, 7, 1, "a")).await.unwrap(),
            Some(keyed(1, 7, 1, "a"))
        );
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&keys.kept)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(ttl > IdempotencyKey::LIFETIME_MS - 60_000, "{ttl}");

        // The gate rebuilt from the database (forgotten, loaded with its kept orders) still
        // replays; a key dropped with its order (never made durable) is decided afresh.
        gate.forget(ProductId(1)).await.unwrap();
        let rebuilt = GateProduct {
            remaining: 1,
            holdings: vec![(UserId(7), 1), (UserId(8), 1)],
            kept: vec![keyed(1, 7, 1, "a")],
            ..product
        };
        gate.load(rebuilt).await.unwrap();
        let retry = [keyed(7, 7, 1, "a"), keyed(8, 8, 1, "b")];
        assert_eq!(
            run(&mut redis, &keys, 3, &retry).await,
            ["Replayed(1)", "Ok(Taken { remaining: 0 })"]
        );
        gate.release(&keyed(8, 8, 1, "b")).await.unwrap();
        gate.drop_key(&keyed(8, 8, 1, "b")).await.unwrap();
        assert_eq!(gate.kept(&keyed(9, 8, 1, "b")).await.unwrap(), None);
        assert_eq!(
            run(&mut redis, &keys, 4, &[keyed(9, 8, 1, "b")]).await,
            ["Ok(Taken { remaining: 0 })"]
        );

        clean_up(&mut redis, &gate, &keys, &[1, 3, 4]).await;
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_call_sent_again_answers_as_its_first_run_and_takes_nothing_more() {
        let (mut redis, gate, keys) = loaded("", &three_units(false, 1)).await;

        // Redis forgets its scripts (as after a restart): the first call loads it again.
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut redis)
            .await
            .unwrap();
        // User 7's second order is over the per-user limit.
        let first = [order(1, 7), order(2, 7), order(3, 8)];
        let answers = run(&mut redis, &keys, 42, &first).await;
        assert_eq!(
            answers,
            [
                "Ok(Taken { remaining: 2 })",
                "Err(Rejected(LimitReached))",
                "Ok(Taken { remaining: 1 })"
            ]
        );
        // The client sends the same call again (its reply timed out): the same answers, and
        // nothing more taken or appended.
        assert_eq!(run(&mut redis, &keys, 42, &first).await, answers);
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(1));
        let outbox = gate.outbox(ProductId(1)).await.unwrap();
        assert_eq!(outbox, [order(1, 7), order(3, 8)]);
        // Another call is decided afresh.
        let next = [order(4, 9), order(5, 10)];
        let answers = run(&mut redis, &keys, 43, &next).await;
        assert_eq!(
            answers,
            [
                "Ok(Taken { remaining: 0 })",
                "Err(Rejected(SoldOut { remaining: 0 }))"
            ]
        );

        clean_up(&mut redis, &gate, &keys, &[42, 43]).await;
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_paused_product_refuses_every_buy_of_a_call_until_resumed() {
        let (mut redis, gate, keys) = loaded("paused:", &three_units(true, 1)).await;

        let buys = [order(1, 7), order(2, 8)];
        let answers = run(&mut redis, &keys, 1, &buys).await;
        assert_eq!(answers, ["Err(Rejected(Paused))", "Err(Rejected(Paused))"]);
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(3));
        assert!(gate.outbox(ProductId(1)).await.unwrap().is_empty());

        gate.set_paused(ProductId(1), false).await.unwrap();
        assert_eq!(
            run(&mut redis, &keys, 2, &buys).await,
            ["Ok(Taken { remaining: 2 })", "Ok(Taken { remaining: 1 })"]
        );
        gate.set_paused(ProductId(1), true).await.unwrap();
        let later = [order(3, 9)];
        assert_eq!(
            run(&mut redis, &keys, 3, &later).await,
            ["Err(Rejected(Paused))"]
        );

        clean_up(&mut redis, &gate, &keys, &[2]).await;
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_full_outbox_refuses_buys_and_takes_nothing_until_entries_are_stored() {
        let (mut redis, gate, keys) = loaded("full:", &three_units(false, 1)).await;

        // An outbox of two: the third buy of the call finds it full, though stock is left.
        let buys = [order(1, 7), order(2, 8), order(3, 9)];
        assert_eq!(
            run_bounded(&mut redis, &keys, 2, 1, &buys).await,
            [
                "Ok(Taken { remaining: 2 })",
                "Ok(Taken { remaining: 1 })",
                "Err(Rejected(BacklogFull))"
            ]
        );
        assert_eq!(gate.remaining(ProductId(1)).await.unwrap(), Some(1));
        assert_eq!(
            gate.outbox(ProductId(1)).await.unwrap(),
            [order(1, 7), order(2, 8)]
        );
        // Still full in a later call.
        assert_eq!(
            run_bounded(&mut redis, &keys, 2, 2, &[order(4, 9)]).await,
            ["Err(Rejected(BacklogFull))"]
        );

        // A worker stores one: the refused buyer's retry is taken, and with the outbox full
        // again, a buy past the stock is told it is sold out.
        let first: Vec<redis::streams::StreamId> = redis::cmd("XRANGE")
            .arg(&keys.outbox)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async::<redis::streams::StreamRangeReply>(&mut redis)
            .await
            .unwrap()
            .ids;
        let _: i64 = redis::cmd("XDEL")
            .arg(&keys.outbox)
            .arg(&first[0].id)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(
            run_bounded(&mut redis, &keys, 2, 3, &[order(5, 9), order(6, 10)]).await,
            [
                "Ok(Taken { remaining: 0 })",
                "Err(Rejected(SoldOut { remaining: 0 }))"
            ]
        );

        clean_up(&mut redis, &gate, &keys, &[1, 3]).await;
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn buys_finding_their_products_queue_full_are_refused_at_once() {
        let redis = crate::redis_link::test_link().await;
        let batches = ReserveBatches::new(redis, 1_000, Replicas::NONE);
        let keys = Keys::of("seckill-unit:waiting:", "p:1");
        // The bucket's queue, as its task would hold it, with nobody emptying it: Redis stalled.
        let (queue, mut waiting) = mpsc::channel(MAX_WAITING);
        batches
            .queues
            .lock()
            .unwrap()
            .insert(keys.sale.clone(), queue);
        let batches = std::sync::Arc::new(batches);
        let mut buyers = Vec::new();
        for i in 0..MAX_WAITING as i64 {
            let (batches, keys) = (batches.clone(), keys.clone());
            buyers.push(tokio::spawn(async move {
                batches.reserve(&keys, &order(i + 1, i + 1), NOW).await
            }));
        }
        while waiting.len() < MAX_WAITING {
            tokio::task::yield_now().await;
        }

        let late = batches.reserve(&keys, &order(0, 0), NOW).await;
        assert!(
            matches!(late, Err(GateError::Rejected(Rejection::BacklogFull))),
            "{late:?}"
        );
        // The buys that waited get their answers once the queue moves again.
        for _ in 0..MAX_WAITING {
            let pending = waiting.recv().await.unwrap();
            let _ = pending.answer.send(Ok(Reserved::Taken { remaining: 0 }));
        }
        for buyer in buyers {
            assert!(buyer.await.unwrap().is_ok());
        }
    }
}
