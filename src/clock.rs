//! Time as the system sees it. Everything that asks "what time is it" goes through [`Clock`],
//! so tests can move time forward instead of sleeping through payment windows.

use crate::domain::Millis;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

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

/// At most one log line per period, whoever asks: a fault that every request of a crowd meets
/// is told once in a while, not once a request. Wall time, whatever a test's clock says.
pub struct LogEvery {
    period_ms: u64,
    /// Milliseconds since the Unix epoch of the last line, 0 for none.
    last: AtomicU64,
}

impl LogEvery {
    /// Lines at most once per `period`.
    pub const fn new(period: Duration) -> Self {
        Self {
            period_ms: period.as_millis() as u64,
            last: AtomicU64::new(0),
        }
    }

    /// Whether the caller should log now; if so, the next may only after the period.
    pub fn due(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        let last = self.last.load(Ordering::Relaxed);
        now.saturating_sub(last) >= self.period_ms
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_due_once_per_period() {
        let every = LogEvery::new(Duration::from_secs(3600));
        assert!(every.due());
        assert!(!every.due());
    }
}
