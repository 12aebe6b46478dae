//! The throttles every server shares: counted in Redis with a sliding window (`window.lua`), so
//! N servers allow a key its quota once, not N times.
//!
//! - This process's own buckets count first: a request over a limit here never costs a round
//!   trip, so a flood from one client stays off Redis.
//! - The requests that arrive while a script call is on its way join the next call (one call in
//!   flight, no timer), as the gate's buys do: under a crowd one call counts many requests, and
//!   a request's limits (its address, its user, its sale event) travel together.
//! - A limiter must not take the sale down: when Redis does not answer within [`WAIT`] (or its
//!   queue is full), the request is let through on this process's count alone, and a warning
//!   is logged (at most one per [`WARN_EVERY`]).
//!
//! Keys: `PREFIX{limits}:SCOPE:WINDOW_MS:N`, a hash per limit and fixed window (the `N`th since
//! the epoch, by this server's clock), id → requests; one hash tag for all, so the keys of a
//! batch are on one shard of a cluster and one script call counts them.

use super::{Hit, Limiter, Refused};
use crate::clock::LogEvery;
use crate::redis_link::{RedisLink, ScriptRequest};
use async_trait::async_trait;
use redis::Script;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Longest a request waits for Redis's count before it goes on with this process's: longer
/// than a round trip under a crowd, short enough that an outage costs a shopper little.
pub const WAIT: Duration = Duration::from_millis(500);

/// Most time between two warnings that Redis could not count.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Most requests in one script call, which bounds how long it holds Redis.
const MAX_REQUESTS: usize = 128;

/// Most requests waiting for a call; past that, Redis is not keeping up and requests fall back.
const MAX_WAITING: usize = 4096;

static WINDOW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("window.lua")));

/// Redis's count of one request, or why there is none.
type Answer = anyhow::Result<Result<(), Refused>>;

/// One limit as the script sees it: its scope, quota and window (ms).
type Limit = (&'static str, u32, u64);

/// A request waiting for its script call: each hit's limit and id, and where the count goes.
struct Pending {
    hits: Vec<(Limit, String)>,
    answer: oneshot::Sender<Answer>,
}

/// Throttles shared through Redis, after this process's own.
pub struct RedisLimiter {
    local: Arc<dyn Limiter>,
    queue: mpsc::Sender<Pending>,
    /// When Redis's count was last missed aloud.
    warned: LogEvery,
}

impl RedisLimiter {
    /// Counts in `local` first, then over `redis` under `prefix`. Starts the task that sends
    /// the script calls (it ends when this is dropped), so it must be called within a Tokio
    /// runtime.
    pub fn new(redis: RedisLink, prefix: &str, local: Arc<dyn Limiter>) -> Self {
        let (queue, waiting) = mpsc::channel(MAX_WAITING);
        let keys = format!("{prefix}{{limits}}:");
        tokio::spawn(send_batches(redis, keys, waiting));
        Self {
            local,
            queue,
            warned: LogEvery::new(WARN_EVERY),
        }
    }

    /// Redis's count of `hits`.
    async fn shared(&self, hits: &[Hit]) -> Answer {
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            hits: hits
                .iter()
                .map(|hit| {
                    let window = hit.quota.window().as_millis().max(1) as u64;
                    let limit = (hit.key.scope(), hit.quota.limit(), window);
                    (limit, hit.key.id().to_string())
                })
                .collect(),
            answer,
        };
        self.queue.try_send(pending).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                anyhow::anyhow!("{MAX_WAITING} requests are waiting for Redis")
            }
            mpsc::error::TrySendError::Closed(_) => {
                anyhow::anyhow!("the rate limiter is shutting down")
            }
        })?;
        match tokio::time::timeout(WAIT, answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(anyhow::anyhow!("the rate limiter is shutting down")),
            Err(_) => Err(anyhow::anyhow!("Redis did not answer within {WAIT:?}")),
        }
    }

    /// Counts a missed answer, and logs it unless it did so recently.
    fn missed(&self, error: &anyhow::Error) {
        metrics::counter!("seckill_rate_limit_fallbacks_total").increment(1);
        if self.warned.due() {
            tracing::warn!(
                error = format!("{error:#}"),
                "shared rate limits unavailable: counting in this process only"
            );
        }
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    async fn hit(&self, hits: &[Hit]) -> Result<(), Refused> {
        self.local.hit(hits).await?;
        match self.shared(hits).await {
            Ok(counted) => counted,
            Err(error) => {
                self.missed(&error);
                Ok(())
            }
        }
    }

    async fn hit_here(&self, hits: &[Hit]) -> Result<(), Refused> {
        self.local.hit(hits).await
    }

    fn forget_idle(&self) {
        self.local.forget_idle();
    }
}

/// Sends one script call at a time, then takes whatever queued meanwhile.
/// Its keys start with `keys`, `PREFIX{limits}:`.
async fn send_batches(mut redis: RedisLink, keys: String, mut waiting: mpsc::Receiver<Pending>) {
    let mut batch = Vec::with_capacity(MAX_REQUESTS);
    while waiting.recv_many(&mut batch, MAX_REQUESTS).await > 0 {
        // A request that stopped waiting went on with this process's count: count it no more.
        batch.retain(|pending| !pending.answer.is_closed());
        if !batch.is_empty() {
            count(&mut redis, &keys, std::mem::take(&mut batch)).await;
        }
    }
}

/// One script call for `batch`, and each request's count sent back. Its windows are those of
/// this moment by this server's clock.
async fn count(redis: &mut RedisLink, keys: &str, batch: Vec<Pending>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    // The limits of the batch, each sent once: a request's hits name theirs by number.
    let mut limits: Vec<Limit> = Vec::new();
    for (limit, _) in batch.iter().flat_map(|pending| &pending.hits) {
        if !limits.contains(limit) {
            limits.push(*limit);
        }
    }
    let hits: usize = batch.iter().map(|pending| pending.hits.len()).sum();
    let args = 6 + 4 * limits.len() + batch.len() + 2 * hits;
    let mut command = redis::Cmd::with_capacity(args, 128 * limits.len() + 32 * hits);
    command
        .arg("EVALSHA")
        .arg(WINDOW.get_hash())
        .arg(2 * limits.len());
    for (scope, _, window) in &limits {
        let number = now / window;
        for n in [number.saturating_sub(1), number] {
            command.arg(format!("{keys}{scope}:{window}:{n}"));
        }
    }
    command.arg(now).arg(limits.len());
    for (_, quota, window) in &limits {
        command.arg(quota).arg(window);
    }
    for pending in &batch {
        command.arg(pending.hits.len());
        for (limit, id) in &pending.hits {
            let number = limits.iter().position(|l| l == limit).unwrap_or_default() + 1;
            command.arg(number).arg(id);
        }
    }
    let answers: redis::RedisResult<Vec<i64>> =
        crate::redis_link::evalsha(redis, &WINDOW, ScriptRequest::Alone(&command)).await;
    let expected = 2 * batch.len();
    for (i, pending) in batch.into_iter().enumerate() {
        let answer = match &answers {
            Ok(answers) if answers.len() == expected => {
                Ok(decode(answers[2 * i], answers[2 * i + 1]))
            }
            Ok(answers) => Err(anyhow::anyhow!(
                "the rate-limit script answered {} values for {expected}",
                answers.len()
            )),
            Err(e) => Err(anyhow::anyhow!("Redis: {e}")),
        };
        // The request may have stopped waiting; its count stands.
        let _gone = pending.answer.send(answer);
    }
}

/// One request's `{refusing hit, ms to wait}` from the script.
fn decode(refused: i64, wait_ms: i64) -> Result<(), Refused> {
    match usize::try_from(refused) {
        Err(_) => Ok(()),
        Ok(hit) => Err(Refused {
            hit,
            retry_after: Duration::from_millis(wait_ms.max(1) as u64),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::local::LocalLimiter;
    use crate::limits::{Key, Quota};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A key prefix no other test uses.
    fn prefix() -> String {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        format!("seckill-unit:{}:limits{n}:", std::process::id())
    }

    /// A server's limiter: its own buckets, the shared count under `prefix`.
    async fn server(prefix: &str) -> RedisLimiter {
        let redis = crate::redis_link::test_link().await;
        RedisLimiter::new(redis, prefix, Arc::new(LocalLimiter::default()))
    }

    fn hit(key: &str, limit: u32, window: Duration) -> Hit {
        Hit {
            key: Key::new("test", key),
            quota: Quota::per_window(limit, window),
        }
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn two_servers_sharing_redis_allow_a_key_its_quota_once() {
        let prefix = prefix();
        let servers = [server(&prefix).await, server(&prefix).await];
        let minute = Duration::from_secs(60);
        let mut passed = 0;
        for i in 0..20 {
            if servers[i % 2].hit(&[hit("k", 6, minute)]).await.is_ok() {
                passed += 1;
            }
        }
        assert_eq!(passed, 6);
        let refused = servers[0].hit(&[hit("k", 6, minute)]).await.unwrap_err();
        assert_eq!(refused.hit, 0);
        assert!(refused.retry_after <= minute, "{refused:?}");
        servers[1].hit(&[hit("other", 6, minute)]).await.unwrap();
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_crowd_in_one_batch_is_counted_one_request_at_a_time() {
        let prefix = prefix();
        let servers = [
            Arc::new(server(&prefix).await),
            Arc::new(server(&prefix).await),
        ];
        let tasks: Vec<_> = (0..400)
            .map(|i| {
                let limiter = servers[i % 2].clone();
                tokio::spawn(async move {
                    let minute = Duration::from_secs(60);
                    let own = format!("own{i}");
                    let request = [hit(&own, 1, minute), hit("shared", 150, minute)];
                    limiter.hit(&request).await
                })
            })
            .collect();
        let mut passed = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(()) => passed += 1,
                Err(refused) => assert_eq!(refused.hit, 1),
            }
        }
        assert_eq!(passed, 150);
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn the_previous_window_weighs_by_the_part_of_it_still_in_the_sliding_window() {
        let prefix = prefix();
        let limiter = server(&prefix).await;
        let window = Duration::from_secs(3600);
        let limit = 1000;
        // The window before this one had its whole limit.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let window_ms = window.as_millis() as i64;
        let previous = format!(
            "{prefix}{{limits}}:test:{window_ms}:{}",
            now / window_ms - 1
        );
        let mut redis = crate::redis_link::test_link().await;
        let _: () = redis::cmd("HSET")
            .arg(&previous)
            .arg("weighed")
            .arg(limit)
            .query_async(&mut redis)
            .await
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg(&previous)
            .arg(60_000)
            .query_async(&mut redis)
            .await
            .unwrap();
        let mut passed = 0;
        while limiter.hit(&[hit("weighed", limit, window)]).await.is_ok() {
            passed += 1;
        }
        // Its requests count as if spread evenly: the part of it the sliding window still
        // covers is the part of this window not yet gone.
        let gone = (now % window_ms) as f64 / window_ms as f64;
        let expected = gone * f64::from(limit);
        assert!(
            (passed as f64 - expected).abs() <= 2.0,
            "{passed} for {expected}"
        );
    }
}
