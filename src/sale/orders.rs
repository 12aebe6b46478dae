//! After the buy: reading orders, and the one way an order is cancelled (`cancel_now`), which
//! the buyer's cancel, the overdue sweep (`cancels.rs`) and a payment that lost its race use.
//! Paid-versus-cancelled races are settled by the store's conditional updates: whichever update
//! matches `status = 'awaiting_payment'` first wins, the other sees it lost.

use super::SaleService;
use crate::domain::{Order, OrderId, UserId};
use crate::payment::Trade;
use crate::store::StoreError;
use async_trait::async_trait;

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

impl OrderError {
    /// Whether this refuses a word nobody verified as the provider's: forged or altered, or
    /// sent to a server with no provider to verify it. Any client can send those at will;
    /// every other error is about a verified word, or on our side.
    pub fn is_unverified(&self) -> bool {
        matches!(self, Self::Untrusted(_) | Self::NotConfigured)
    }
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
