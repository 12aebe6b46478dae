//! Buys retried with an `Idempotency-Key`, answered as the first time. A buy with a key is kept
//! with its order in the gate's own atomic step, so a retry (the same buyer and key) is answered
//! with that order on any server, even when the server that took the first buy died before its
//! answer; the database keeps the key with the order, for a gate rebuilt from it. (A pay call
//! with a key: `payments.rs`.)
//!
//! A retry's answer is the first order as it is now: stored, with its status today (paid,
//! cancelled); not stored yet, as the gate kept it. It is given only once that order is durable:
//! a retry arriving while the first buy is still on its way waits for it in this process (in
//! embedded mode, the only process, the first buy is durable only once its batch is committed).
//!
//! The buy calls in here (`buy.rs`), never the other way: nothing here decides a buy.

use super::SaleService;
use super::buy::{Bought, BuyError};
use crate::domain::{Order, OrderId};
use crate::gate::Rejection;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::OwnedMutexGuard;

/// The keyed buys of this process between the gate and their end, by order id: a retry that
/// the gate answers with one of them waits for it. Bounded by the buys in flight.
#[derive(Default)]
pub(super) struct InFlight(Mutex<HashMap<OrderId, Arc<tokio::sync::Mutex<()>>>>);

/// A keyed buy on its way: while it lives, retries answered with its order wait.
pub(super) struct Deciding<'a> {
    in_flight: &'a InFlight,
    id: OrderId,
    /// Released after the entry is gone, when this is dropped.
    _held: OwnedMutexGuard<()>,
}

impl InFlight {
    /// Marks the buy of order `id` as on its way, until the guard is dropped.
    pub(super) fn start(&self, id: OrderId) -> Deciding<'_> {
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        let held = Arc::clone(&lock)
            .try_lock_owned()
            .expect("a new lock is free");
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, lock);
        Deciding {
            in_flight: self,
            id,
            _held: held,
        }
    }

    /// Waits until the buy of order `id` has ended, if it is on its way in this process.
    async fn settled(&self, id: OrderId) {
        let lock = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        if let Some(lock) = lock {
            drop(lock.lock().await);
        }
    }
}

impl Drop for Deciding<'_> {
    fn drop(&mut self) {
        self.in_flight
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl SaleService {
    /// A keyed buy of a product flagged sold out in this process: the order its key made, if
    /// the gate keeps one (the retry of the buy that took the last unit); else sold out.
    pub(super) async fn kept_or_sold_out(&self, order: &Order) -> Result<Bought, BuyError> {
        match self.gate.kept(order).await {
            Ok(Some(first)) if first.quantity == order.quantity => {
                self.replayed(first).await.map(Bought::Replayed)
            }
            Ok(Some(_)) => Err(Rejection::KeyReused.into()),
            Ok(None) => Err(Rejection::SoldOut { remaining: 0 }.into()),
            Err(e) => Err(e.into()),
        }
    }

    /// The answer to a retry the gate answered with `first`, the order its key made: once that
    /// buy has ended, the order as stored, or, not stored yet, as the gate still keeps it. A
    /// first buy that failed after the gate gave its key back: nothing was bought, and the
    /// buyer may try again.
    pub(super) async fn replayed(&self, first: Order) -> Result<Order, BuyError> {
        self.in_flight.settled(first.id).await;
        let stored = self.store.order(first.id).await;
        if let Some(order) = stored.map_err(|e| BuyError::Unavailable(e.into()))? {
            return Ok(order);
        }
        match self.gate.kept(&first).await {
            Ok(Some(kept)) if kept.id == first.id => Ok(first),
            Ok(_) => Err(BuyError::Unavailable(anyhow::anyhow!(
                "order {} of a retried buy was never made durable",
                first.id
            ))),
            Err(e) => Err(e.into()),
        }
    }
}
