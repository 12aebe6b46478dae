//! After the buy: reading, paying and cancelling orders, and cancelling those whose payment
//! window closed. Paid-versus-cancelled races are settled by the store's conditional updates:
//! whichever update matches `status = 'awaiting_payment'` first wins, the other sees it lost.

use super::SaleService;
use crate::domain::{Order, OrderId, OrderStatus, UserId};
use crate::store::StoreError;

/// Why an order operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// No such order, or not this user's (the two are indistinguishable on purpose).
    #[error("no such order")]
    NotFound,
    #[error("the order is already paid")]
    AlreadyPaid,
    #[error("the order was cancelled")]
    Cancelled,
    #[error("the payment window has closed; the order is cancelled")]
    WindowClosed,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How many overdue orders one sweep step reads at a time.
const SWEEP_BATCH: i64 = 500;

impl SaleService {
    /// One of `user`'s orders.
    pub async fn order_of(&self, user: UserId, id: OrderId) -> Result<Order, OrderError> {
        match self.store.order(id).await? {
            Some(order) if order.user_id == user => Ok(order),
            _ => Err(OrderError::NotFound),
        }
    }

    /// All of `user`'s orders, newest first.
    pub async fn orders_of(&self, user: UserId) -> Result<Vec<Order>, OrderError> {
        Ok(self.store.orders_of_user(user).await?)
    }

    /// Pays an order (sandbox payment: the money is taken as given). Paying a paid order again
    /// is a no-op success, so a retried request is harmless.
    pub async fn pay(&self, user: UserId, id: OrderId) -> Result<Order, OrderError> {
        let order = self.order_of(user, id).await?;
        match order.status {
            OrderStatus::Paid => return Ok(order),
            OrderStatus::Cancelled => return Err(OrderError::Cancelled),
            OrderStatus::AwaitingPayment => {}
        }
        let now = self.now();
        if self.store.mark_paid(id, now).await? {
            return self.order_of(user, id).await;
        }
        // Lost a race, or the window closed: look at what won.
        let order = self.order_of(user, id).await?;
        match order.status {
            OrderStatus::Paid => Ok(order),
            OrderStatus::Cancelled => Err(OrderError::Cancelled),
            OrderStatus::AwaitingPayment => {
                self.cancel_now(id).await?;
                Err(OrderError::WindowClosed)
            }
        }
    }

    /// Cancels an unpaid order at the buyer's request; the stock goes back on sale and the
    /// buyer may buy again. Cancelling a cancelled order again is a no-op success.
    pub async fn cancel(&self, user: UserId, id: OrderId) -> Result<Order, OrderError> {
        let order = self.order_of(user, id).await?;
        match order.status {
            OrderStatus::Paid => return Err(OrderError::AlreadyPaid),
            OrderStatus::Cancelled => return Ok(order),
            OrderStatus::AwaitingPayment => {}
        }
        if let Some(cancelled) = self.cancel_now(id).await? {
            return Ok(cancelled);
        }
        let order = self.order_of(user, id).await?;
        match order.status {
            OrderStatus::Paid => Err(OrderError::AlreadyPaid),
            _ => Ok(order),
        }
    }

    /// Cancels every order whose payment window has closed. Returns how many this call
    /// cancelled. Run by the ticker; tests call it after moving the clock.
    pub async fn expire_overdue(&self) -> Result<usize, OrderError> {
        let now = self.now();
        let mut cancelled = 0;
        loop {
            let overdue = self.store.overdue_orders(now, SWEEP_BATCH).await?;
            for id in &overdue {
                if self.cancel_now(*id).await?.is_some() {
                    cancelled += 1;
                }
            }
            if (overdue.len() as i64) < SWEEP_BATCH {
                return Ok(cancelled);
            }
        }
    }

    /// Cancels one order if its payment window has closed: the fast path of deadlines (the
    /// delay queue), with the sweep as the backstop. True when this call cancelled it.
    pub async fn expire(&self, id: OrderId) -> Result<bool, OrderError> {
        match self.store.order(id).await? {
            Some(order) if order.is_overdue(self.now()) => Ok(self.cancel_now(id).await?.is_some()),
            _ => Ok(false),
        }
    }

    /// The one way an order gets cancelled: the conditional update, then (only for the caller
    /// that won it) the stock back to the gate. So the stock returns exactly once.
    async fn cancel_now(&self, id: OrderId) -> Result<Option<Order>, OrderError> {
        let Some(order) = self.store.cancel_order(id, self.now()).await? else {
            return Ok(None);
        };
        self.give_back(&order).await;
        tracing::info!(
            order = order.id.0,
            product = order.product_id.0,
            "order cancelled"
        );
        Ok(Some(order))
    }
}
