//! The throttles of one process: a GCRA token bucket per key (`governor`), `limit` requests at
//! once and then one every `window / limit`, forgotten once full again. Embedded mode counts
//! only here; the shared limiter counts here first.

use super::{Hit, Key, Limiter, Quota, Refused};
use async_trait::async_trait;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, RateLimiter};
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};

/// Keyed buckets of one process.
pub struct LocalLimiter {
    /// One set of buckets per quota (a `governor` limiter has one quota): a deployment has a
    /// handful of quotas, so finding one is a short scan. Keys carry their scope, so limits of
    /// the same quota share a set without sharing buckets.
    buckets: RwLock<Vec<(Quota, Arc<DefaultKeyedRateLimiter<Key>>)>>,
    clock: DefaultClock,
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
    /// The buckets of `quota`, made on first use.
    fn buckets(&self, quota: Quota) -> Arc<DefaultKeyedRateLimiter<Key>> {
        let find = |sets: &[(Quota, Arc<DefaultKeyedRateLimiter<Key>>)]| {
            sets.iter()
                .find(|(q, _)| *q == quota)
                .map(|(_, b)| b.clone())
        };
        if let Some(buckets) = find(&self.buckets.read().unwrap_or_else(|p| p.into_inner())) {
            return buckets;
        }
        let mut sets = self.buckets.write().unwrap_or_else(|p| p.into_inner());
        if let Some(buckets) = find(&sets) {
            return buckets;
        }
        let buckets = Arc::new(RateLimiter::keyed(gcra(quota)));
        sets.push((quota, buckets.clone()));
        buckets
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
            self.buckets(hit.quota)
                .check_key(&hit.key)
                .map_err(|wait| Refused {
                    hit: i,
                    retry_after: wait.wait_time_from(self.clock.now()),
                })?;
        }
        Ok(())
    }

    async fn hit_here(&self, hits: &[Hit]) -> Result<(), Refused> {
        self.hit(hits).await
    }

    fn forget_idle(&self) {
        for (_, buckets) in self
            .buckets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            buckets.retain_recent();
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
