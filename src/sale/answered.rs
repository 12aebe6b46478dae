//! The orders this server answered `202` lately, held in its memory so that `seckill reconcile`
//! can name those a Redis that lost its data took with it (see `accepted.rs`). Bounded twice:
//! the latest [`HELD`] orders, and none made more than [`KEPT_FOR_MS`] ago (those are dropped
//! at each share, off the request path). The buffer is allocated once, when the service is
//! built (cluster mode only): recording an order is one push under the lock the accepted units
//! already take, never a reallocation. The fleet gets them once a second, only those recorded
//! since the last share; all of them again when it has lost them.

use super::{Answered, AnswersToShare};
use crate::domain::Millis;
use std::collections::VecDeque;

/// Most orders a server holds; the oldest go first.
pub const HELD: usize = 100_000;

/// How long after it was made an order is held (ms).
pub const KEPT_FOR_MS: Millis = 10 * 60 * 1_000;

/// The latest orders answered `202`, oldest first, and how far the fleet has them.
#[derive(Debug)]
pub(super) struct RecentAnswers {
    /// The orders, oldest first.
    held: VecDeque<Answered>,
    /// Most orders held.
    bound: usize,
    /// Orders recorded since the start: the next one's sequence number.
    recorded: u64,
    /// The sequence number the fleet's copy ends at; `None` when every order held must be
    /// shared (at the start, or after the fleet lost its copy).
    shared: Option<u64>,
}

impl Default for RecentAnswers {
    fn default() -> Self {
        Self::bounded(HELD)
    }
}

impl RecentAnswers {
    /// A buffer of at most `bound` orders, allocated now.
    fn bounded(bound: usize) -> Self {
        Self {
            held: VecDeque::with_capacity(bound),
            bound,
            recorded: 0,
            shared: None,
        }
    }

    /// Records an order answered `202`, dropping the oldest held when full.
    pub fn record(&mut self, answered: Answered) {
        if self.held.len() >= self.bound {
            self.held.pop_front();
        }
        self.held.push_back(answered);
        self.recorded += 1;
    }

    /// Drops the orders made more than [`KEPT_FOR_MS`] before `now`, then returns at most
    /// `most` of those the fleet does not have yet, oldest first (from the oldest held, when
    /// every order held must be shared).
    pub fn unshared(&mut self, now: Millis, most: usize) -> AnswersToShare {
        let keep_since = now - KEPT_FOR_MS;
        while self
            .held
            .front()
            .is_some_and(|oldest| oldest.made_at() < keep_since)
        {
            self.held.pop_front();
        }
        let first_held = self.recorded - self.held.len() as u64;
        let start = self.shared.map_or(first_held, |end| end.max(first_held));
        let orders: Vec<Answered> = self
            .held
            .iter()
            .skip((start - first_held) as usize)
            .take(most)
            .copied()
            .collect();
        AnswersToShare {
            from: self.shared,
            to: start + orders.len() as u64,
            orders,
            keep_since,
        }
    }

    /// What became of a share up to `to`: the fleet's copy now ends there (`followed`), or it
    /// did not have what the share followed on, and every order held is shared next.
    pub fn shared(&mut self, to: u64, followed: bool) {
        self.shared = followed.then_some(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::domain::{OrderId, ProductId, Quantity, UserId};
    use crate::ids::{EPOCH_MS, Snowflake};
    use std::sync::Arc;

    const START: Millis = EPOCH_MS + 86_400_000;

    /// Orders made by one server, one a millisecond from `START`.
    struct Server {
        clock: Arc<ManualClock>,
        ids: Snowflake,
    }

    impl Server {
        fn new() -> Self {
            let clock = Arc::new(ManualClock::new(START));
            let ids = Snowflake::new(5, clock.clone()).unwrap();
            Self { clock, ids }
        }

        fn answer(&self, user: i64) -> Answered {
            self.clock.advance(1);
            Answered {
                order: OrderId(self.ids.next_id()),
                product: ProductId(3),
                user: UserId(user),
                quantity: Quantity::parse(1).unwrap(),
            }
        }
    }

    fn users(share: &AnswersToShare) -> Vec<i64> {
        share.orders.iter().map(|a| a.user.0).collect()
    }

    #[test]
    fn it_holds_the_latest_orders_up_to_its_bound() {
        let server = Server::new();
        let mut recent = RecentAnswers::bounded(4);
        for user in 1..=6 {
            recent.record(server.answer(user));
        }
        let share = recent.unshared(START + 10, 100);
        assert_eq!(users(&share), [3, 4, 5, 6]);
        assert_eq!((share.from, share.to), (None, 6));
    }

    #[test]
    fn a_share_after_one_that_followed_carries_only_the_new_orders() {
        let server = Server::new();
        let mut recent = RecentAnswers::bounded(10);
        recent.record(server.answer(1));
        recent.record(server.answer(2));
        let first = recent.unshared(START + 10, 100);
        assert_eq!((first.from, first.to, users(&first)), (None, 2, vec![1, 2]));
        recent.shared(first.to, true);
        recent.record(server.answer(3));
        let second = recent.unshared(START + 10, 100);
        assert_eq!(
            (second.from, second.to, users(&second)),
            (Some(2), 3, vec![3])
        );
        recent.shared(second.to, true);
        let idle = recent.unshared(START + 10, 100);
        assert_eq!((idle.from, idle.to, users(&idle)), (Some(3), 3, vec![]));
    }

    #[test]
    fn a_share_that_did_not_follow_makes_the_next_one_carry_everything_held() {
        let server = Server::new();
        let mut recent = RecentAnswers::bounded(10);
        recent.record(server.answer(1));
        let first = recent.unshared(START + 10, 100);
        recent.shared(first.to, true);
        recent.record(server.answer(2));
        let lost = recent.unshared(START + 10, 100);
        recent.shared(lost.to, false);
        let again = recent.unshared(START + 10, 100);
        assert_eq!((again.from, again.to, users(&again)), (None, 2, vec![1, 2]));
    }

    #[test]
    fn a_share_that_failed_is_carried_again() {
        let server = Server::new();
        let mut recent = RecentAnswers::bounded(10);
        recent.record(server.answer(1));
        let first = recent.unshared(START + 10, 100);
        recent.shared(first.to, true);
        recent.record(server.answer(2));
        let _failed = recent.unshared(START + 10, 100);
        recent.record(server.answer(3));
        let retried = recent.unshared(START + 10, 100);
        assert_eq!(
            (retried.from, retried.to, users(&retried)),
            (Some(1), 3, vec![2, 3])
        );
    }

    #[test]
    fn a_share_carries_at_most_its_bound_and_the_next_goes_on_from_there() {
        let server = Server::new();
        let mut recent = RecentAnswers::bounded(10);
        for user in 1..=5 {
            recent.record(server.answer(user));
        }
        let first = recent.unshared(START + 10, 2);
        assert_eq!((first.from, first.to, users(&first)), (None, 2, vec![1, 2]));
        recent.shared(first.to, true);
        let second = recent.unshared(START + 10, 2);
        assert_eq!(
            (second.from, second.to, users(&second)),
            (Some(2), 4, vec![3, 4])
        );
    }

    #[test]
    fn orders_dropped_before_they_were_shared_leave_the_next_share_at_the_oldest_held() {
        let server = Server::new();
        let mut recent = RecentAnswers::bounded(3);
        recent.record(server.answer(1));
        let first = recent.unshared(START + 10, 100);
        recent.shared(first.to, true);
        for user in 2..=6 {
            recent.record(server.answer(user));
        }
        let next = recent.unshared(START + 10, 100);
        assert_eq!(
            (next.from, next.to, users(&next)),
            (Some(1), 6, vec![4, 5, 6])
        );
    }

    #[test]
    fn orders_older_than_it_keeps_are_dropped_at_a_share() {
        let server = Server::new();
        let mut recent = RecentAnswers::bounded(10);
        recent.record(server.answer(1));
        recent.record(server.answer(2));
        server.clock.advance(60_000);
        recent.record(server.answer(3));
        // Ten minutes after the second order was made: it is still held, the first is not.
        let now = START + 2 + KEPT_FOR_MS;
        let share = recent.unshared(now, 100);
        assert_eq!(users(&share), [2, 3]);
        assert_eq!(share.keep_since, now - KEPT_FOR_MS);
        assert_eq!((share.from, share.to), (None, 3));
        let later = recent.unshared(now + 60_000, 100);
        assert_eq!(users(&later), [3]);
        assert!(recent.unshared(now + 120_000, 100).orders.is_empty());
    }
}
