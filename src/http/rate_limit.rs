//! In-process throttles (GCRA token buckets from `governor`): per user on buys, per client
//! address on buys and sign-ins. Over the limit is 429 with `Retry-After`. The address is the
//! TCP peer, never a client-supplied header, and never stands in for a user.

use crate::config::RateLimitConfig;
use crate::domain::UserId;
use crate::error::ApiError;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::net::IpAddr;
use std::num::NonZeroU32;

/// The throttles of one process.
pub struct RateLimits {
    per_user: DefaultKeyedRateLimiter<UserId>,
    per_ip: DefaultKeyedRateLimiter<IpAddr>,
    clock: DefaultClock,
}

fn quota(per_sec: u32, burst: u32) -> Quota {
    let per_sec = NonZeroU32::new(per_sec).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst.max(per_sec.get())).unwrap_or(per_sec);
    Quota::per_second(per_sec).allow_burst(burst)
}

impl RateLimits {
    /// Throttles with the configured rates.
    pub fn new(config: &RateLimitConfig) -> Self {
        Self {
            per_user: RateLimiter::keyed(quota(config.per_user_per_sec, config.per_user_burst)),
            per_ip: RateLimiter::keyed(quota(config.per_ip_per_sec, config.per_ip_burst)),
            clock: DefaultClock::default(),
        }
    }

    /// One attempt by this user.
    pub fn check_user(&self, user: UserId) -> Result<(), ApiError> {
        self.per_user
            .check_key(&user)
            .map_err(|wait| self.too_many(wait))
    }

    /// One attempt from this address.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.per_ip
            .check_key(&ip)
            .map_err(|wait| self.too_many(wait))
    }

    fn too_many(&self, wait: governor::NotUntil<<DefaultClock as Clock>::Instant>) -> ApiError {
        let secs = wait.wait_time_from(self.clock.now()).as_secs_f64().ceil() as u64;
        ApiError::RateLimited {
            retry_after_secs: secs.max(1),
        }
    }

    /// Forgets keys whose buckets are full again, so memory stays bounded by recent clients.
    pub fn forget_idle(&self) {
        self.per_user.retain_recent();
        self.per_ip.retain_recent();
    }
}
