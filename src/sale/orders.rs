//! After the buy: reading and cancelling orders, and cancelling those whose payment window
//! closed. Paid-versus-cancelled races are settled by the store's conditional updates:
//! whichever update matches `status = 'awaiting_payment'` first wins, the other sees it lost.

use super::SaleService;
use crate::domain::{Order, OrderId, OrderStatus, UserId};
use crate::payment::Trade;
use crate::store::{Overdue, StoreError};
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
    #[error("the payment window has closed")]
    WindowClosed,
    /// A refund of an order no money arrived for (awaiting payment, or cancelled unpaid).
    #[error("the order is not paid: there is nothing to refund")]
    NotPaid,
    #[error("the order is already refunded")]
    AlreadyRefunded,
    /// Not in the database, but its id was made moments ago (cluster mode): it may still be on
    /// its way from the outbox.
    #[error("the order is still being recorded; try again in a moment")]
    Pending,
    /// No payment provider is configured, so no payment is taken.
    #[error("payments are not configured on this server")]
    NotConfigured,
    /// A word said to be the provider's that is not: forged, altered, or for another merchant.
    #[error("not the payment provider's word: {0}")]
    Untrusted(#[source] crate::payment::Rejected),
    /// The provider's word disagrees with the order (the named field).
    #[error("the payment does not match the order: {0}")]
    Mismatch(&'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The payment provider or the paid queue could not be reached.
    #[error("payments are unavailable: {0}")]
    Unavailable(#[source] anyhow::Error),
    /// The idempotency key named a call for another order or channel within its lifetime.
    #[error("the idempotency key was used for another request")]
    KeyReused,
}

/// A paid trade whose order was still on its way to the database when the provider's word
/// came: it waits, already verified, and is applied once the order is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedPayment {
    pub trade: Trade,
    /// The word's audit key (see [`crate::store::PaymentRecord::key`]).
    pub key: String,
}

/// Where payments for orders not stored yet wait (RabbitMQ's paid queue).
#[async_trait]
pub trait PaymentQueue: Send + Sync + 'static {
    /// Hands a payment over durably (confirmed by the broker).
    async fn enqueue(&self, payment: &QueuedPayment) -> anyhow::Result<()>;
}

/// What the provider said about an overdue order.
pub(super) enum Asked {
    /// Not paid: the order may be cancelled.
    Unpaid,
    /// Paid after all, and settled so.
    Settled,
    /// Not known now (the gateway cannot be reached, or disagrees with the order).
    Unknown,
}

/// What became of one overdue order.
enum Expired {
    Cancelled,
    /// Already paid or cancelled by someone else.
    Settled,
    /// Left awaiting payment for the next sweep.
    Left,
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
    pub(super) fn missing(&self, id: OrderId) -> OrderError {
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
            if cancelled.pay_started_at.is_some() {
                self.close_trade(id).await;
            }
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
    /// holds a pooled connection that shoppers' requests wait for. An order whose buyer went
    /// to pay is first looked up at the provider; one it cannot be asked about stays for the
    /// next sweep, so a sweep stops when a whole step settled nothing.
    pub async fn expire_overdue(&self) -> Result<usize, OrderError> {
        let now = self.now();
        let mut cancelled = 0;
        loop {
            let overdue = self.store.overdue_orders(now, SWEEP_BATCH).await?;
            let outcomes: Vec<_> = stream::iter(overdue.iter().copied())
                .map(|overdue| self.expire_checked(overdue))
                .buffer_unordered(SWEEP_CANCELS_AT_ONCE)
                .collect()
                .await;
            let mut settled = 0;
            for outcome in outcomes {
                match outcome? {
                    Expired::Cancelled => cancelled += 1,
                    Expired::Settled => settled += 1,
                    Expired::Left => {}
                }
            }
            if (overdue.len() as i64) < SWEEP_BATCH || cancelled + settled == 0 {
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
            let pay_started = order.pay_started_at.is_some();
            self.expire_checked(Overdue { id, pay_started }).await?;
        }
        Ok(())
    }

    /// Cancels an overdue order, unless the provider says its buyer paid (then the payment is
    /// settled) or cannot be asked (then it is left).
    async fn expire_checked(&self, overdue: Overdue) -> Result<Expired, OrderError> {
        if overdue.pay_started {
            match self.ask_provider(overdue.id).await? {
                Asked::Unpaid => {}
                Asked::Settled => return Ok(Expired::Settled),
                Asked::Unknown => return Ok(Expired::Left),
            }
        }
        match self.cancel_now(overdue.id).await? {
            Some(_) => {
                metrics::counter!("seckill_deadline_cancels_total").increment(1);
                if overdue.pay_started {
                    self.close_trade(overdue.id).await;
                }
                Ok(Expired::Cancelled)
            }
            None => Ok(Expired::Settled),
        }
    }

    /// The one way an order gets cancelled: the conditional update, then (only for the caller
    /// that won it) the stock back to the gate. So the stock returns exactly once.
    pub(super) async fn cancel_now(&self, id: OrderId) -> Result<Option<Order>, OrderError> {
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
