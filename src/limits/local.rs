//! The throttles of one process: a GCRA token bucket per key (`governor`), `limit` requests at
//! once and then one every `window / limit`, forgotten once full again. Embedded mode counts
//! only here; the shared limiter counts here first.

use super::{Hit, Id, Key, Limiter, Quota, Refused};
use async_trait::async_trait;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, RateLimiter};
use std::num::NonZeroU32;
use std::sync::RwLock;
use std::time::Duration;

/// Keyed buckets of one process.
pub struct LocalLimiter {
    /// One set of buckets per scope and quota (a `governor` limiter has one quota): a
    /// deployment has a handful of limits, so finding one is a short scan, and a bucket is
    /// found by its id alone.
    buckets: RwLock<Vec<Buckets>>,
    clock: DefaultClock,
}

/// The buckets of one scope and quota.
struct Buckets {
    scope: &'static str,
    quota: Quota,
    by_id: DefaultKeyedRateLimiter<Id>,
}

impl Buckets {
    /// Whether these are the buckets `key` is counted in under `quota`.
    fn of(&self, key: &Key, quota: Quota) -> bool {
        self.quota == quota && self.scope == key.scope()
    }
}

impl Default for LocalLimiter {
    fn default() -> Self {
        Self {
            buckets: RwLock::new(Vec::new()),
            clock: DefaultClock::default(),
        }
    }
}

impl LocalLimiter {
    /// Counts one request against `key`'s bucket of `quota` (the set made on first use).
    fn count(&self, key: &Key, quota: Quota) -> Result<(), Duration> {
        let check = |buckets: &Buckets| {
            buckets
                .by_id
                .check_key(key.id())
                .map_err(|wait| wait.wait_time_from(self.clock.now()))
        };
        {
            let sets = self.buckets.read().unwrap_or_else(|p| p.into_inner());
            if let Some(buckets) = sets.iter().find(|b| b.of(key, quota)) {
                return check(buckets);
            }
        }
        let mut sets = self.buckets.write().unwrap_or_else(|p| p.into_inner());
        let at = match sets.iter().position(|b| b.of(key, quota)) {
            Some(at) => at,
            None => {
                sets.push(Buckets {
                    scope: key.scope(),
                    quota,
                    by_id: RateLimiter::keyed(gcra(quota)),
                });
                sets.len() - 1
            }
        };
        check(&sets[at])
    }
}

/// `quota.limit()` at once, then one every `window / limit`.
fn gcra(quota: Quota) -> governor::Quota {
    let burst = NonZeroU32::new(quota.limit()).unwrap_or(NonZeroU32::MIN);
    let period = quota.window() / quota.limit();
    governor::Quota::with_period(period)
        .unwrap_or(governor::Quota::per_second(NonZeroU32::MAX))
        .allow_burst(burst)
}

#[async_trait]
impl Limiter for LocalLimiter {
    async fn hit(&self, hits: &[Hit]) -> Result<(), Refused> {
        for (i, hit) in hits.iter().enumerate() {
            self.count(&hit.key, hit.quota)
                .map_err(|retry_after| Refused {
                    hit: i,
                    retry_after,
                })?;
        }
        Ok(())
    }

    async fn hit_here(&self, hits: &[Hit]) -> Result<(), Refused> {
        self.hit(hits).await
    }

    fn forget_idle(&self) {
        for buckets in self
            .buckets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            buckets.by_id.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hit(key: &str, quota: Quota) -> Hit {
        Hit {
            key: Key::new("test", key),
            quota,
        }
    }

    #[tokio::test]
    async fn a_key_gets_its_limit_at_once_then_waits_for_the_next_and_others_do_not() {
        let limiter = LocalLimiter::default();
        let quota = Quota::per_window(3, Duration::from_secs(60));
        for _ in 0..3 {
            limiter.hit(&[hit("a", quota)]).await.unwrap();
        }
        let refused = limiter.hit(&[hit("a", quota)]).await.unwrap_err();
        assert_eq!(refused.hit, 0);
        assert!(refused.retry_after > Duration::from_secs(19));
        assert!(refused.retry_after <= Duration::from_secs(20));
        limiter.hit(&[hit("b", quota)]).await.unwrap();
    }

    #[tokio::test]
    async fn the_first_refusing_hit_ends_the_count_and_earlier_ones_stay_counted() {
        let limiter = LocalLimiter::default();
        let two = Quota::per_window(2, Duration::from_secs(60));
        let one = Quota::per_window(1, Duration::from_secs(60));
        let request = [hit("before", two), hit("refusing", one), hit("after", two)];
        limiter.hit(&request).await.unwrap();
        assert_eq!(limiter.hit(&request).await.unwrap_err().hit, 1);
        // The refused request used the key before the refusing one, not the key after it.
        assert!(limiter.hit(&request[..1]).await.is_err());
        limiter.hit(&request[2..]).await.unwrap();
        assert!(limiter.hit(&request[2..]).await.is_err());
    }

    #[tokio::test]
    async fn forgetting_idle_keys_keeps_a_throttled_key_throttled() {
        let limiter = LocalLimiter::default();
        let quota = Quota::per_window(1, Duration::from_secs(60));
        limiter.hit(&[hit("a", quota)]).await.unwrap();
        limiter.forget_idle();
        assert!(limiter.hit(&[hit("a", quota)]).await.is_err());
    }
}
