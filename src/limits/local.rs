//! The throttles of one process: a GCRA token bucket per key (`governor`), `limit` requests at
//! once and then one every `window / limit`, forgotten once full again. Embedded mode counts
//! here; cluster mode keeps buckets of the same kind beside its shared counts (`redis/`).
//!
//! A limit holds at most [`MAX_KEYS`] buckets: the ids come from outside (addresses, the names
//! signed in with), and a flood of new ones within one window must not grow memory without end.
//! Past it, an id without a bucket is counted in the one bucket of [`Id::Overflow`].

use super::{Hit, Id, IdHasher, Key, Limiter, Quota, Refused};
use governor::RateLimiter;
use governor::clock::{Clock, DefaultClock};
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};
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
    /// Most buckets of one limit.
    max_keys: usize,
}

/// Most buckets of one limit: far more than the distinct buyers of a sale within one window,
/// about 64 MiB of buckets at most.
pub const MAX_KEYS: usize = 1 << 20;

/// The buckets of one scope and quota.
struct Buckets {
    scope: &'static str,
    quota: Quota,
    by_id: RateLimiter<Id, Capped, DefaultClock>,
}

/// A bucket per id, at most `max` (normally [`MAX_KEYS`]); past that, new ids share
/// [`Id::Overflow`]'s.
struct Capped {
    by_id: DashMapStateStore<Id, IdHasher>,
    max: usize,
}

impl StateStore for Capped {
    type Key = Id;

    fn measure_and_replace<T, F, E>(&self, key: &Id, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let key = if self.by_id.contains_key(key) || self.by_id.len() < self.max {
            key
        } else {
            &Id::Overflow
        };
        self.by_id.measure_and_replace(key, f)
    }
}

impl ShrinkableKeyedStateStore<Id> for Capped {
    fn retain_recent(&self, drop_below: Nanos) {
        self.by_id.retain_recent(drop_below);
    }

    fn len(&self) -> usize {
        self.by_id.len()
    }

    fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
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
            max_keys: MAX_KEYS,
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
                    by_id: RateLimiter::new(
                        gcra(quota),
                        Capped {
                            by_id: DashMapStateStore::with_hasher(IdHasher::default()),
                            max: self.max_keys,
                        },
                        self.clock.clone(),
                    ),
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

impl Limiter for LocalLimiter {
    fn hit(&self, hits: &[Hit]) -> Result<(), Refused> {
        for (i, hit) in hits.iter().enumerate() {
            self.count(&hit.key, hit.quota)
                .map_err(|retry_after| Refused {
                    hit: i,
                    retry_after,
                })?;
        }
        Ok(())
    }

    fn hit_here(&self, hits: &[Hit]) -> Result<(), Refused> {
        self.hit(hits)
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

    #[test]
    fn a_key_gets_its_limit_at_once_then_waits_for_the_next_and_others_do_not() {
        let limiter = LocalLimiter::default();
        let quota = Quota::per_window(3, Duration::from_secs(60));
        for _ in 0..3 {
            limiter.hit(&[hit("a", quota)]).unwrap();
        }
        let refused = limiter.hit(&[hit("a", quota)]).unwrap_err();
        assert_eq!(refused.hit, 0);
        assert!(refused.retry_after > Duration::from_secs(19));
        assert!(refused.retry_after <= Duration::from_secs(20));
        limiter.hit(&[hit("b", quota)]).unwrap();
    }

    #[test]
    fn the_first_refusing_hit_ends_the_count_and_earlier_ones_stay_counted() {
        let limiter = LocalLimiter::default();
        let two = Quota::per_window(2, Duration::from_secs(60));
        let one = Quota::per_window(1, Duration::from_secs(60));
        let request = [hit("before", two), hit("refusing", one), hit("after", two)];
        limiter.hit(&request).unwrap();
        assert_eq!(limiter.hit(&request).unwrap_err().hit, 1);
        // The refused request used the key before the refusing one, not the key after it.
        assert!(limiter.hit(&request[..1]).is_err());
        limiter.hit(&request[2..]).unwrap();
        assert!(limiter.hit(&request[2..]).is_err());
    }

    #[test]
    fn past_its_most_buckets_a_limit_counts_new_ids_together_and_known_ones_alone() {
        let limiter = LocalLimiter {
            max_keys: 3,
            ..LocalLimiter::default()
        };
        let quota = Quota::per_window(2, Duration::from_secs(60));
        for known in ["a", "b", "c"] {
            limiter.hit(&[hit(known, quota)]).unwrap();
        }
        // New ids share one bucket of the quota.
        limiter.hit(&[hit("new 1", quota)]).unwrap();
        limiter.hit(&[hit("new 2", quota)]).unwrap();
        assert!(limiter.hit(&[hit("new 3", quota)]).is_err());
        // A known id keeps its own.
        limiter.hit(&[hit("a", quota)]).unwrap();
        assert!(limiter.hit(&[hit("a", quota)]).is_err());
    }

    #[test]
    fn forgetting_idle_keys_keeps_a_throttled_key_throttled() {
        let limiter = LocalLimiter::default();
        let quota = Quota::per_window(1, Duration::from_secs(60));
        limiter.hit(&[hit("a", quota)]).unwrap();
        limiter.forget_idle();
        assert!(limiter.hit(&[hit("a", quota)]).is_err());
    }
}
