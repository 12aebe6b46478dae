//! Payments and cancels on SQLite, many to a transaction.
//!
//! SQLite has one writer. A payment or cancel holding it for a transaction of its own, taking
//! turns with whole order batches, would make every write under a crowd that buys, pays and
//! cancels queue behind one turn per payment. So each change waits here, and whichever caller
//! gets the turn first applies every change waiting in one transaction and answers the others.
//! No thread of its own: the caller that leads does the work, as with `WalFlush`'s syncs.

use crate::domain::{Millis, OrderId};
use crate::store::{StoreError, StoreResult};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

/// A change to a stored order's status, as a payment, a cancel or an operator's refund asks
/// for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusChange {
    /// awaiting_payment → paid, if the payment window is still open at `at`.
    Pay { id: OrderId, at: Millis },
    /// awaiting_payment → cancelled at `at`, the order's units back on the product's stock.
    Cancel { id: OrderId, at: Millis },
    /// paid → cancelled at `at` for a refund, the order's units back on the product's stock.
    CancelPaid { id: OrderId, at: Millis },
}

/// Whether a change was applied; a failed batch's error is shared by all of its changes.
type Outcome = Result<bool, Arc<StoreError>>;

/// Changes waiting for SQLite's writer, and the turn to apply them.
#[derive(Default)]
pub struct StatusBatches {
    waiting: Mutex<Vec<(StatusChange, oneshot::Sender<Outcome>)>>,
    turn: tokio::sync::Mutex<()>,
}

impl StatusBatches {
    /// Whether `change` was applied, once the transaction that held it has committed. `write`
    /// applies a batch in one transaction and says, change by change, which were applied.
    pub async fn settle<F, Fut>(&self, change: StatusChange, write: F) -> StoreResult<bool>
    where
        F: Fn(Vec<StatusChange>) -> Fut,
        Fut: Future<Output = StoreResult<Vec<bool>>>,
    {
        let mut settled = self.enqueue(change);
        loop {
            tokio::select! {
                biased;
                outcome = &mut settled => match outcome {
                    Ok(outcome) => return outcome.map_err(StoreError::Shared),
                    // The leader that took it went away before writing (its request was
                    // dropped while it waited for the writer): the change is still to apply.
                    Err(_) => settled = self.enqueue(change),
                },
                _turn = self.turn.lock() => self.lead(&write).await,
            }
        }
    }

    fn enqueue(&self, change: StatusChange) -> oneshot::Receiver<Outcome> {
        let (reply, settled) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((change, reply));
        settled
    }

    /// Applies everything waiting, with the turn held. Nothing is waiting when an earlier
    /// leader took this caller's change along.
    async fn lead<F, Fut>(&self, write: &F)
    where
        F: Fn(Vec<StatusChange>) -> Fut,
        Fut: Future<Output = StoreResult<Vec<bool>>>,
    {
        let batch =
            std::mem::take(&mut *self.waiting.lock().unwrap_or_else(PoisonError::into_inner));
        if batch.is_empty() {
            return;
        }
        let (changes, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        match write(changes).await {
            Ok(applied) => {
                for (reply, applied) in replies.into_iter().zip(applied) {
                    let _ = reply.send(Ok(applied));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for reply in replies {
                    let _ = reply.send(Err(Arc::clone(&e)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn pay(id: i64) -> StatusChange {
        StatusChange::Pay {
            id: OrderId(id),
            at: 0,
        }
    }

    /// Changes that arrive while a batch is being written share the next one, and each caller
    /// gets its own change's outcome.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn changes_waiting_together_share_one_write_and_each_gets_its_outcome() {
        let batches = Arc::new(StatusBatches::default());
        let writes = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..200)
            .map(|i| {
                let (batches, writes) = (Arc::clone(&batches), Arc::clone(&writes));
                tokio::spawn(async move {
                    let write = |changes: Vec<StatusChange>| {
                        let writes = Arc::clone(&writes);
                        async move {
                            writes.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                            // Even ids are applied, odd ones not.
                            Ok(changes
                                .iter()
                                .map(|c| matches!(c, StatusChange::Pay { id, .. } if id.0 % 2 == 0))
                                .collect())
                        }
                    };
                    (i, batches.settle(pay(i), write).await.unwrap())
                })
            })
            .collect();
        for caller in callers {
            let (i, applied) = caller.await.unwrap();
            assert_eq!(applied, i % 2 == 0, "change {i} got another's outcome");
        }
        let writes = writes.load(Ordering::SeqCst);
        assert!(writes < 50, "200 changes took {writes} writes");
    }

    #[tokio::test]
    async fn a_failed_write_fails_every_change_in_it() {
        let batches = StatusBatches::default();
        let write = |_| async { Err(StoreError::Sql(sqlx::Error::PoolClosed)) };
        let failed = batches.settle(pay(1), write).await;
        assert!(matches!(failed, Err(StoreError::Shared(_))), "{failed:?}");
    }

    /// A leader dropped while it waits for the writer leaves the changes it took to the next.
    /// On one thread, so each task's first poll (its change queued, then its place in line for
    /// the turn) ends before the next task runs: the first queued is the first in line.
    #[tokio::test]
    async fn changes_taken_by_a_leader_that_went_away_are_applied_by_the_next() {
        let batches = Arc::new(StatusBatches::default());
        let held = batches.turn.lock().await;
        let waiting = |n| {
            let batches = Arc::clone(&batches);
            async move {
                while batches.waiting.lock().unwrap().len() < n {
                    tokio::task::yield_now().await;
                }
            }
        };
        let (took, taken) = oneshot::channel::<usize>();
        let took = Mutex::new(Some(took));
        let leader = tokio::spawn({
            let batches = Arc::clone(&batches);
            async move {
                let stuck = |changes: Vec<StatusChange>| {
                    let _ = took.lock().unwrap().take().unwrap().send(changes.len());
                    std::future::pending::<StoreResult<Vec<bool>>>()
                };
                batches.settle(pay(1), stuck).await
            }
        });
        waiting(1).await;
        let follower = tokio::spawn({
            let batches = Arc::clone(&batches);
            async move {
                let write = |changes: Vec<StatusChange>| async move {
                    Ok(changes.iter().map(|c| *c == pay(2)).collect())
                };
                batches.settle(pay(2), write).await
            }
        });
        waiting(2).await;
        drop(held);
        assert_eq!(taken.await.unwrap(), 2, "the first in line took both");
        leader.abort();
        assert!(follower.await.unwrap().unwrap());
    }
}
