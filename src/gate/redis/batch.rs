//! Buys travel to Redis in batches. Every buy of a product that arrives while the previous
//! round of script calls is on its way joins the next call for that product, so Redis runs one
//! call (one parse, one sale lookup, one reply) for many buys, and this process writes and reads
//! one command instead of many. Nobody waits for a timer: a lone buy leaves at once, and under a
//! crowd a batch grows to what arrived during one round trip. The script decides each buy as if
//! it ran alone, in arrival order, so batching changes no answer.

use super::{Keys, RESERVE, unavailable};
use crate::domain::{Millis, Order, ProductId};
use crate::gate::{GateError, Rejection};
use crate::redis_link::RedisLink;
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

/// Most buys taken from the queue for one round of calls, which bounds one script's run (and
/// so how long it holds Redis, which runs one script at a time) and its argument list.
const MAX_BUYS: usize = 128;

/// A buy waiting for its batch, with where its answer goes.
struct Pending {
    order: Order,
    now: Millis,
    answer: oneshot::Sender<Result<i64, GateError>>,
}

/// The queue in front of the reserve script, and the task that empties it.
pub(super) struct ReserveBatches {
    queue: mpsc::UnboundedSender<Pending>,
}

impl ReserveBatches {
    /// Starts the task that sends batches over `redis`; it ends when this is dropped. Must be
    /// called within a Tokio runtime.
    pub fn start(redis: RedisLink, prefix: &str) -> Self {
        let (queue, buys) = mpsc::unbounded_channel();
        tokio::spawn(send_batches(redis, prefix.to_owned(), buys));
        Self { queue }
    }

    /// Runs the reserve script for `order` within a batch; returns the units left, as
    /// [`StockGate::reserve`](crate::gate::StockGate::reserve) does.
    pub async fn reserve(&self, order: &Order, now: Millis) -> Result<i64, GateError> {
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            order: order.clone(),
            now,
            answer,
        };
        let stopped = || GateError::Unavailable(anyhow::anyhow!("the stock gate is shutting down"));
        self.queue.send(pending).map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

/// Sends one round of script calls at a time, one per product among the buys queued, then
/// takes whatever queued meanwhile. A round in flight while the next fills is what batches
/// the buys: on loopback, a second round in flight made batches smaller and buys slower.
async fn send_batches(
    redis: RedisLink,
    prefix: String,
    mut buys: mpsc::UnboundedReceiver<Pending>,
) {
    let mut taken = Vec::with_capacity(MAX_BUYS);
    while buys.recv_many(&mut taken, MAX_BUYS).await > 0 {
        let mut by_product: HashMap<ProductId, Vec<Pending>> = HashMap::new();
        for pending in taken.drain(..) {
            by_product
                .entry(pending.order.product_id)
                .or_default()
                .push(pending);
        }
        let calls = by_product.into_iter().map(|(product, batch)| {
            reserve_batch(redis.clone(), Keys::of(&prefix, product), batch)
        });
        futures_util::future::join_all(calls).await;
    }
}

/// One script call for `batch`, all buys of one product, and each buy's answer sent back.
async fn reserve_batch(mut redis: RedisLink, keys: Keys, batch: Vec<Pending>) {
    let mut call = RESERVE.key(keys.sale);
    call.key(keys.buyers).key(keys.outbox).key(keys.taken);
    for pending in &batch {
        let order = &pending.order;
        call.arg(order.user_id.0)
            .arg(order.quantity.get())
            .arg(pending.now)
            .arg(order.encode())
            .arg(order.id.0);
    }
    let answers: Result<Vec<i64>, redis::RedisError> = call.invoke_async(&mut redis).await;
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
