//! Scheduler leadership: of all processes sharing a Redis, one at a time preheats sales and
//! sweeps overdue orders. The lock is a Redis key with an expiry holding a token that grows with
//! every new leader; a leader renews only while the key still holds its own token, so one that
//! paused past its expiry finds out on its next renewal that it was deposed, and stands down.
//! The token is not checked by the steps themselves: they need no fencing, since every step is
//! idempotent and conditional (load-if-absent, cancel-if-awaiting), so the one step a deposed
//! leader may still take is harmless. The lock keeps the crowd of processes from repeating work.

use crate::redis_link::RedisLink;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

/// How long leadership lasts without renewal: a dead leader is replaced after this.
const LEASE: Duration = Duration::from_secs(5);

/// Takes the lock when free, with the next fencing token. KEYS = lock, token counter (one hash
/// tag). ARGV = lease ms, this process's nonce. The lock holds token and nonce: a counter that
/// Redis lost restarts at 1, and a token alone could then match the one an earlier leader still
/// renews. Returns the token, or 0 when another process leads.
static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"#!lua
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[2], 'PX', ARGV[1])
return token
",
    )
});

/// Extends the lock only if it still holds our token and nonce (`TOKEN:NONCE`). Returns 1 when
/// extended.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
",
    )
});

/// This process's claim on the scheduler.
pub enum Leadership {
    /// The only process (embedded mode): always leads.
    Solo,
    /// One of many processes sharing a Redis.
    Shared {
        redis: RedisLink,
        lock: String,
        counter: String,
        /// Drawn once per process, stored in the lock beside the token (see `TAKE`).
        nonce: u64,
        /// Our fencing token while we lead.
        token: Option<i64>,
    },
}

impl Leadership {
    /// Leadership among the processes using `prefix` on this Redis.
    pub fn shared(redis: RedisLink, prefix: &str) -> Self {
        Self::Shared {
            redis,
            lock: format!("{prefix}{{leader}}"),
            counter: format!("{prefix}{{leader}}:token"),
            nonce: rand::random(),
            token: None,
        }
    }

    /// Whether this process leads now: renews the lock it holds or takes a free one. Returns
    /// the leader's token (0 for a solo process); `None` also when Redis cannot be asked.
    pub async fn lead(&mut self) -> Option<i64> {
        let Self::Shared {
            redis,
            lock,
            counter,
            nonce,
            token,
        } = self
        else {
            return Some(0);
        };
        let lease_ms = LEASE.as_millis() as u64;
        let result: Result<i64, _> = match *token {
            Some(held) => RENEW
                .key(&*lock)
                .arg(format!("{held}:{nonce}"))
                .arg(lease_ms)
                .invoke_async(redis)
                .await
                .map(|renewed: i64| if renewed == 1 { held } else { 0 }),
            None => {
                TAKE.key(&*lock)
                    .key(&*counter)
                    .arg(lease_ms)
                    .arg(*nonce)
                    .invoke_async(redis)
                    .await
            }
        };
        let now = match result {
            Ok(0) => None,
            Ok(t) => Some(t),
            Err(e) => {
                // Cannot tell: skip this step, but keep the token, so the next renewal that
                // reaches Redis finds out whether the lock is still ours.
                tracing::warn!(error = %e, "checking scheduler leadership");
                return None;
            }
        };
        if now != *token {
            match now {
                Some(t) => tracing::info!(token = t, "leading the scheduler"),
                None => tracing::info!("no longer leading the scheduler"),
            }
            *token = now;
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_leader_whose_lock_redis_lost_stands_down_when_another_takes_the_same_token() {
        let mut redis = crate::redis_link::test_link().await;
        let prefix = format!("seckill-unit:{}:leader:", std::process::id());
        let mut first = Leadership::shared(redis.clone(), &prefix);
        let mut second = Leadership::shared(redis.clone(), &prefix);
        assert_eq!(first.lead().await, Some(1));
        assert_eq!(second.lead().await, None);

        // Redis restarts empty: the lock and the token counter are gone, so the next leader
        // draws token 1 again.
        let (lock, counter) = (
            format!("{prefix}{{leader}}"),
            format!("{prefix}{{leader}}:token"),
        );
        let _: () = redis::cmd("DEL")
            .arg(&lock)
            .arg(&counter)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(second.lead().await, Some(1));
        assert_eq!(first.lead().await, None, "two leaders at once");
        assert_eq!(second.lead().await, Some(1));

        let _: () = redis::cmd("DEL")
            .arg(&lock)
            .arg(&counter)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
}
