//! Buys travel to Redis in batches. Every buy of a product that arrives while that product's
//! previous script call is on its way joins the next call, so Redis runs one call (one parse,
//! one sale lookup, one reply) for many buys, and this process writes and reads one command
//! instead of many. Nobody waits for a timer: a lone buy leaves at once, and under a crowd a
//! batch grows to what arrived during one round trip. The script decides each buy as if it ran
//! alone, in arrival order, so batching changes no answer.

use super::{Keys, RESERVE, unavailable};
use crate::domain::{Millis, Order, ProductId};
use crate::gate::{GateError, Rejection};
use crate::redis_link::RedisLink;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::{mpsc, oneshot};

/// Most buys in one script call, which bounds how long it holds Redis (which runs one script
/// at a time) and its argument list.
const MAX_BUYS: usize = 128;

/// A buy waiting for its batch: the script's five arguments for it, and where its answer goes.
/// The order is encoded by its buyer's own task, not by the product's one batch task, which
/// every buy of the product passes through.
struct Pending {
    user: i64,
    units: u32,
    now: Millis,
    encoded: String,
    id: i64,
    answer: oneshot::Sender<Result<i64, GateError>>,
}

/// One queue per product in front of the reserve script, each emptied by a task of its own, so
/// a slow call (a shard failing over) holds up the buys of its own product only.
pub(super) struct ReserveBatches {
    redis: RedisLink,
    prefix: String,
    queues: Mutex<HashMap<ProductId, mpsc::UnboundedSender<Pending>>>,
}

impl ReserveBatches {
    /// Batches over `redis`, for keys under `prefix`. A product's task starts with its first buy
    /// and ends when this is dropped.
    pub fn new(redis: RedisLink, prefix: &str) -> Self {
        Self {
            redis,
            prefix: prefix.to_owned(),
            queues: Mutex::new(HashMap::new()),
        }
    }

    /// Runs the reserve script for `order` within a batch; returns the units left, as
    /// [`StockGate::reserve`](crate::gate::StockGate::reserve) does. Must be called within a
    /// Tokio runtime.
    pub async fn reserve(&self, order: &Order, now: Millis) -> Result<i64, GateError> {
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            user: order.user_id.0,
            units: order.quantity.get(),
            now,
            encoded: order.encode(),
            id: order.id.0,
            answer,
        };
        let stopped = || GateError::Unavailable(anyhow::anyhow!("the stock gate is shutting down"));
        self.queue_of(order.product_id)
            .send(pending)
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }

    /// The queue of `product`, started on first use.
    fn queue_of(&self, product: ProductId) -> mpsc::UnboundedSender<Pending> {
        let mut queues = self
            .queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        queues
            .entry(product)
            .or_insert_with(|| {
                let (queue, buys) = mpsc::unbounded_channel();
                let keys = Keys::of(&self.prefix, product);
                tokio::spawn(send_batches(self.redis.clone(), keys, buys));
                queue
            })
            .clone()
    }
}

/// Sends one script call at a time for one product's buys, then takes whatever queued
/// meanwhile. The call in flight while the next fills is what batches the buys: on loopback,
/// a second call in flight made batches smaller and buys slower.
async fn send_batches(
    mut redis: RedisLink,
    keys: Keys,
    mut buys: mpsc::UnboundedReceiver<Pending>,
) {
    let mut batch = Vec::with_capacity(MAX_BUYS);
    while buys.recv_many(&mut batch, MAX_BUYS).await > 0 {
        // A buyer who left before the call has nothing sent for them: no order, no stock taken.
        batch.retain(|pending| !pending.answer.is_closed());
        if !batch.is_empty() {
            reserve_batch(&mut redis, &keys, std::mem::take(&mut batch)).await;
        }
    }
}

/// One script call for `batch`, all buys of one product, and each buy's answer sent back.
async fn reserve_batch(redis: &mut RedisLink, keys: &Keys, batch: Vec<Pending>) {
    let mut call = RESERVE.key(&keys.sale);
    call.key(&keys.buyers).key(&keys.outbox).key(&keys.taken);
    for pending in &batch {
        call.arg(pending.user)
            .arg(pending.units)
            .arg(pending.now)
            .arg(&pending.encoded)
            .arg(pending.id);
    }
    let answers: Result<Vec<i64>, redis::RedisError> = call.invoke_async(redis).await;
    let expected = 2 * batch.len();
    for (i, pending) in batch.into_iter().enumerate() {
        let answer = match &answers {
            Ok(answers) if answers.len() == expected => decode(answers[2 * i], answers[2 * i + 1]),
            Ok(answers) => Err(GateError::Unavailable(anyhow::anyhow!(
                "reserve script answered {} values for {expected}",
                answers.len()
            ))),
            Err(e) => Err(unavailable(e.clone())),
        };
        // The buyer may have left; the buy stands either way, as it would unbatched.
        let _gone = pending.answer.send(answer);
    }
}

/// One buy's `{code, remaining}` from the script, as the gate's answer.
fn decode(code: i64, remaining: i64) -> Result<i64, GateError> {
    let rejection = match code {
        0 => return Ok(remaining),
        -1 => Rejection::NotLoaded,
        -2 => Rejection::NotStarted,
        -3 => Rejection::Ended,
        -4 => Rejection::LimitReached,
        -5 => Rejection::SoldOut { remaining },
        other => {
            return Err(GateError::Unavailable(anyhow::anyhow!(
                "reserve script answered {other}"
            )));
        }
    };
    Err(rejection.into())
}
