//! Time as the system sees it. Everything that asks "what time is it" goes through [`Clock`],
//! so tests can move time forward instead of sleeping through payment windows.

use crate::domain::Millis;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of the current time in Unix milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> Millis;
}

/// Shared handle to the clock the whole application uses.
pub type SharedClock = Arc<dyn Clock>;

/// The real wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that only moves when told to: lets tests cross a payment deadline or a sale start
/// at an exact instant, with no real sleeping.
#[derive(Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock stopped at `now`.
    pub fn new(now: Millis) -> Self {
        Self(AtomicI64::new(now))
    }

    /// Moves the clock forward (or backward, to test clock skew) by `ms`.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `now`.
    pub fn set(&self, now: Millis) {
        self.0.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// The time of day of `ms` in the server's local time zone, e.g. "10:00": the usual title of
/// a sale event (场次).
pub fn local_time_of_day(ms: Millis) -> String {
    use chrono::TimeZone;
    chrono::Local
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format("%H:%M").to_string())
        .unwrap_or_default()
}
