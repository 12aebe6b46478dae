//! How long a refund the provider did not take waits before it is asked again: the ticker
//! makes the refunds due every second, and a refund the provider refuses (for good, or for
//! hours) must neither hold up the others nor be sent to the provider every second. Each
//! failure doubles the wait, up to a cap; a success, or the order no longer being due,
//! forgets it. Kept in the process: a new scheduler leader starts by asking once more. The
//! waits are real time, not the sale's clock: they spare the provider, whatever a test's clock
//! says.

use crate::domain::OrderId;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The wait after a first failure.
const FIRST_WAIT: Duration = Duration::from_secs(2);
/// The longest wait: an operator who fixed the cause sees the refund made within it.
const MAX_WAIT: Duration = Duration::from_secs(5 * 60);

/// One failing order: how often it failed in a row, and when it may be tried again.
#[derive(Debug, Clone, Copy)]
struct Failing {
    failures: u32,
    next_at: Instant,
}

/// The failing refunds of this process, by order.
#[derive(Debug, Default)]
pub(super) struct Backoff {
    failing: Mutex<HashMap<OrderId, Failing>>,
}

impl Backoff {
    /// Whether `id` may be tried at `now`: never failed, or its wait is over.
    pub(super) fn ready(&self, id: OrderId, now: Instant) -> bool {
        self.lock().get(&id).is_none_or(|f| now >= f.next_at)
    }

    /// Notes a failure at `now`; returns how long `id` waits before the next try.
    pub(super) fn failed(&self, id: OrderId, now: Instant) -> Duration {
        let mut failing = self.lock();
        let entry = failing.entry(id).or_insert(Failing {
            failures: 0,
            next_at: now,
        });
        entry.failures = entry.failures.saturating_add(1);
        let wait = FIRST_WAIT
            .saturating_mul(1u32 << (entry.failures - 1).min(20))
            .min(MAX_WAIT);
        entry.next_at = now + wait;
        wait
    }

    /// Forgets `id`: its refund was made, or is no longer due.
    pub(super) fn forget(&self, id: OrderId) {
        self.lock().remove(&id);
    }

    /// Forgets every order not in `due` (refunded by another process meanwhile, or by an
    /// operator), so the map holds only refunds still due.
    pub(super) fn keep_only(&self, due: &HashSet<OrderId>) {
        self.lock().retain(|id, _| due.contains(id));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<OrderId, Failing>> {
        // A panic while holding it leaves a valid map: use it as it is.
        self.failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_new_order_is_ready_and_each_failure_doubles_its_wait_up_to_the_cap() {
        let (backoff, now) = (Backoff::default(), Instant::now());
        let id = OrderId(7);
        assert!(backoff.ready(id, now));
        assert_eq!(backoff.failed(id, now), FIRST_WAIT);
        assert!(!backoff.ready(id, now + FIRST_WAIT - MS));
        assert!(backoff.ready(id, now + FIRST_WAIT));
        assert_eq!(backoff.failed(id, now), 2 * FIRST_WAIT);
        assert_eq!(backoff.failed(id, now), 4 * FIRST_WAIT);
        for _ in 0..40 {
            backoff.failed(id, now);
        }
        assert_eq!(backoff.failed(id, now), MAX_WAIT);
        assert!(!backoff.ready(id, now + MAX_WAIT - MS));
        assert!(backoff.ready(id, now + MAX_WAIT));
    }

    #[test]
    fn one_failing_order_leaves_the_others_ready() {
        let (backoff, now) = (Backoff::default(), Instant::now());
        backoff.failed(OrderId(1), now);
        assert!(!backoff.ready(OrderId(1), now));
        assert!(backoff.ready(OrderId(2), now));
    }

    #[test]
    fn a_forgotten_order_or_one_no_longer_due_starts_again_from_the_first_wait() {
        let (backoff, now) = (Backoff::default(), Instant::now());
        for id in [OrderId(1), OrderId(2), OrderId(3)] {
            backoff.failed(id, now);
            backoff.failed(id, now);
        }
        backoff.forget(OrderId(1));
        backoff.keep_only(&HashSet::from([OrderId(3)]));
        assert!(backoff.ready(OrderId(1), now));
        assert!(backoff.ready(OrderId(2), now));
        assert!(!backoff.ready(OrderId(3), now));
        assert_eq!(backoff.failed(OrderId(1), now), FIRST_WAIT);
        assert_eq!(backoff.failed(OrderId(3), now), 4 * FIRST_WAIT);
    }
}
