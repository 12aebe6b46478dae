//! In-process throttles (GCRA token buckets from `governor`): per user on buys, per client
//! address on buys and sign-ins, per account on sign-ins. Over the limit is 429 with
//! `Retry-After`, counted in `seckill_rate_limited_total` by limit. The address is the TCP peer,
//! never a client-supplied header, and never stands in for a user.

use crate::config::RateLimitConfig;
use crate::domain::{UserId, Username};
use crate::error::ApiError;
use axum::http::StatusCode;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

/// Sign-in attempts one account may make in a row: a person mistyping a password a few times
/// is never throttled.
const ACCOUNT_BURST: NonZeroU32 = NonZeroU32::new(5).unwrap();

/// After the burst, one more attempt per account this often, so guessing one account's password
/// from many addresses goes no faster than from one.
const ACCOUNT_PERIOD: Duration = Duration::from_secs(12);

/// The throttles of one process.
pub struct RateLimits {
    per_user: DefaultKeyedRateLimiter<UserId>,
    per_ip: DefaultKeyedRateLimiter<IpAddr>,
    /// Sign-in attempts per username, known or not.
    per_account: DefaultKeyedRateLimiter<String>,
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
            per_account: RateLimiter::keyed(
                Quota::with_period(ACCOUNT_PERIOD)
                    .unwrap_or(Quota::per_second(NonZeroU32::MIN))
                    .allow_burst(ACCOUNT_BURST),
            ),
            clock: DefaultClock::default(),
        }
    }

    /// One attempt by this user.
    pub fn check_user(&self, user: UserId) -> Result<(), ApiError> {
        self.per_user.check_key(&user).map_err(|wait| {
            metrics::counter!("seckill_rate_limited_total", "limit" => "user").increment(1);
            self.too_many(wait)
        })
    }

    /// One attempt from this address.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.per_ip.check_key(&ip).map_err(|wait| {
            metrics::counter!("seckill_rate_limited_total", "limit" => "ip").increment(1);
            self.too_many(wait)
        })
    }

    /// One sign-in attempt at this account. Every attempt counts, not only the failed ones:
    /// counted before the hash, parallel guesses at one account cannot all slip in before the
    /// first of them fails. An unknown name is counted the same way, so the answer says nothing
    /// about which names exist.
    pub fn check_sign_in(&self, username: &Username) -> Result<(), ApiError> {
        self.per_account
            .check_key(&username.as_str().to_owned())
            .map_err(|wait| {
                metrics::counter!("seckill_rate_limited_total", "limit" => "account").increment(1);
                ApiError::client(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_sign_ins",
                    "too many sign-in attempts for this account: try again after the \
                     Retry-After seconds",
                )
                .retry_after(self.wait_secs(wait))
            })
    }

    fn too_many(&self, wait: governor::NotUntil<<DefaultClock as Clock>::Instant>) -> ApiError {
        ApiError::RateLimited {
            retry_after_secs: self.wait_secs(wait),
        }
    }

    /// Whole seconds until the bucket allows another attempt, at least one.
    fn wait_secs(&self, wait: governor::NotUntil<<DefaultClock as Clock>::Instant>) -> u64 {
        let secs = wait.wait_time_from(self.clock.now()).as_secs_f64().ceil() as u64;
        secs.max(1)
    }

    /// Forgets keys whose buckets are full again, so memory stays bounded by recent clients.
    /// Accounts are keyed only once a sign-in has a hashing turn, so a flood of made-up names
    /// adds them no faster than passwords are hashed.
    pub fn forget_idle(&self) {
        self.per_user.retain_recent();
        self.per_ip.retain_recent();
        self.per_account.retain_recent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(raw: &str) -> Username {
        Username::parse(raw).unwrap()
    }

    #[test]
    fn an_account_is_throttled_after_its_burst_and_others_are_not() {
        let limits = RateLimits::new(&RateLimitConfig::default());
        for _ in 0..ACCOUNT_BURST.get() {
            limits.check_sign_in(&name("target")).unwrap();
        }
        let ApiError::Client {
            status,
            code,
            retry_after,
            ..
        } = limits.check_sign_in(&name("target")).unwrap_err()
        else {
            panic!("a throttled sign-in is a client error");
        };
        assert_eq!(
            (status, code),
            (StatusCode::TOO_MANY_REQUESTS, "too_many_sign_ins")
        );
        assert!(retry_after.is_some_and(|secs| (1..=ACCOUNT_PERIOD.as_secs()).contains(&secs)));
        limits.check_sign_in(&name("bystander")).unwrap();
    }

    #[test]
    fn forgetting_idle_keys_keeps_a_throttled_account_throttled() {
        let limits = RateLimits::new(&RateLimitConfig::default());
        for _ in 0..ACCOUNT_BURST.get() {
            limits.check_sign_in(&name("target")).unwrap();
        }
        limits.forget_idle();
        assert!(limits.check_sign_in(&name("target")).is_err());
    }
}
