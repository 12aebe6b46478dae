//! After the buy: reading, paying and cancelling orders, and cancelling those whose payment
//! window closed. Paid-versus-cancelled races are settled by the store's conditional updates:
//! whichever update matches `status = 'awaiting_payment'` first wins, the other sees it lost.

use super::SaleService;
use crate::domain::{Millis, Order, OrderId, OrderStatus, UserId};
use crate::store::StoreError;
use async_trait::async_trait;
use futures_util::{StreamExt, stream};

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
    /// Not in the database, but its id was made moments ago (cluster mode): it may still be on
    /// its way from the outbox.
    #[error("the order is still being recorded; try again in a moment")]
    Pending,
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The payment queue could not take a payment.
    #[error("payments are unavailable: {0}")]
    Unavailable(#[source] anyhow::Error),
}

/// What became of a payment.
#[derive(Debug)]
pub enum Payment {
    /// Applied: the order as it now stands.
    Paid(Order),
    /// The order is still on its way to the database: the payment waits in the paid queue and
    /// is applied once the order is stored.
    Queued(OrderId),
}

/// A payment to apply later, once its order is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedPayment {
    pub order: OrderId,
    pub user: UserId,
    /// When the buyer paid: the payment window is judged at this instant.
    pub at: Millis,
}

/// Where payments for orders not stored yet wait (RabbitMQ's paid queue).
#[async_trait]
pub trait PaymentQueue: Send + Sync + 'static {
    /// Hands a payment over durably (confirmed by the broker).
    async fn enqueue(&self, payment: QueuedPayment) -> anyhow::Result<()>;
}

/// How many overdue orders one sweep step reads at a time.
const SWEEP_BATCH: i64 = 500;

/// How many of them it cancels at once.
const SWEEP_CANCELS_AT_ONCE: usize = 64;

impl SaleService {
    /// One of `user`'s orders.
    pub async fn order_of(&self, user: UserId, id: OrderId) -> Result<Order, OrderError> {
        match self.store.order(id).await? {
            Some(order) if order.user_id == user => Ok(order),
            Some(_) => Err(OrderError::NotFound),
            None => Err(self.missing(id)),
        }
    }

    /// Why an order is not in the database: still on its way there if its id was made moments
    /// ago, else it does not exist.
    fn missing(&self, id: OrderId) -> OrderError {
        let age = self.now() - crate::ids::made_at(id.0);
        if (0..self.durability.in_flight_for_ms()).contains(&age) {
            OrderError::Pending
        } else {
            OrderError::NotFound
        }
    }

    /// All of `user`'s orders, newest first.
    pub async fn orders_of(&self, user: UserId) -> Result<Vec<Order>, OrderError> {
        Ok(self.store.orders_of_user(user).await?)
    }

    /// Pays an order (sandbox payment: the money is taken as given). Paying a paid order again
    /// is a no-op success, so a retried request is harmless. An order still on its way to the
    /// database is paid through the paid queue when there is one.
    pub async fn pay(&self, user: UserId, id: OrderId) -> Result<Payment, OrderError> {
        let at = self.now();
        match self.apply_payment(user, id, at).await {
            Err(OrderError::Pending) => {
                let Some(queue) = &self.payments else {
                    return Err(OrderError::Pending);
                };
                let payment = QueuedPayment {
                    order: id,
                    user,
                    at,
                };
                queue
                    .enqueue(payment)
                    .await
                    .map_err(OrderError::Unavailable)?;
                Ok(Payment::Queued(id))
            }
            paid => paid.map(Payment::Paid),
        }
    }

    /// Pays an order as of `at`, when the buyer paid: the window is judged at that instant, so
    /// a payment applied late from the queue counts when it was made.
    pub async fn apply_payment(
        &self,
        user: UserId,
        id: OrderId,
        at: Millis,
    ) -> Result<Order, OrderError> {
        let order = self.order_of(user, id).await?;
        match order.status {
            OrderStatus::Paid => return Ok(order),
            OrderStatus::Cancelled | OrderStatus::Refunded => return Err(OrderError::Cancelled),
            OrderStatus::AwaitingPayment => {}
        }
        if self.store.mark_paid(id, at).await? {
            // The update changed these two columns of the row just read, and nothing else.
            return Ok(Order {
                status: OrderStatus::Paid,
                paid_at: Some(at),
                ..order
            });
        }
        // Lost a race, or the window closed: look at what won.
        let order = self.order_of(user, id).await?;
        match order.status {
            OrderStatus::Paid => Ok(order),
            OrderStatus::Cancelled | OrderStatus::Refunded => Err(OrderError::Cancelled),
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
            OrderStatus::Cancelled | OrderStatus::Refunded => return Ok(order),
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
    ///
    /// A sale's unpaid orders fall due together, so many cancels run at once: on SQLite they
    /// share transactions and log syncs. Not more at once: on a database server each cancel
    /// holds a pooled connection that shoppers' requests wait for.
    pub async fn expire_overdue(&self) -> Result<usize, OrderError> {
        let now = self.now();
        let mut cancelled = 0;
        loop {
            let overdue = self.store.overdue_orders(now, SWEEP_BATCH).await?;
            let outcomes: Vec<_> = stream::iter(overdue.iter().copied())
                .map(|overdue| self.cancel_now(overdue.id))
                .buffer_unordered(SWEEP_CANCELS_AT_ONCE)
                .collect()
                .await;
            for outcome in outcomes {
                if outcome?.is_some() {
                    cancelled += 1;
                }
            }
            if (overdue.len() as i64) < SWEEP_BATCH {
                return Ok(cancelled);
            }
        }
    }

    /// Cancels one order if its payment window has closed: the fast path of deadlines (the
    /// delay queue), with the sweep as the backstop.
    pub async fn expire(&self, id: OrderId) -> Result<(), OrderError> {
        if let Some(order) = self.store.order(id).await?
            && order.is_overdue(self.now())
        {
            self.cancel_now(id).await?;
        }
        Ok(())
    }

    /// The one way an order gets cancelled: the conditional update, then (only for the caller
    /// that won it) the stock back to the gate. So the stock returns exactly once.
    async fn cancel_now(&self, id: OrderId) -> Result<Option<Order>, OrderError> {
        let Some(order) = self.store.cancel_order(id, self.now()).await? else {
            return Ok(None);
        };
        self.give_back(&order).await;
        // At debug: a sale's unpaid orders fall due by the thousand (the sweep logs how many),
        // and a crowd's cancels would each write a line; payments and buys log none either.
        tracing::debug!(
            order = order.id.0,
            product = order.product_id.0,
            "order cancelled"
        );
        Ok(Some(order))
    }
}
