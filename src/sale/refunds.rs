//! An operator's refunds: a paid order is cancelled, its stock goes back on sale once, and its
//! money goes back through the provider. The conditional update `paid → cancelled` decides
//! which of any number of refunds of one order returns the stock; the money goes back through
//! the same idempotent refund as money that arrived for a cancelled order, so a refund the
//! provider cannot take at once is among the refunds due, which the ticker makes. Each refund
//! is recorded in the audit log with the operator who asked for it.

use super::SaleService;
use super::orders::OrderError;
use crate::domain::{Operator, Order, OrderId, OrderStatus};
use crate::store::KeptPayment;

/// An order with the provider's words kept for it, as an operator looks at it.
#[derive(Debug, Clone)]
pub struct OrderRecord {
    pub order: Order,
    /// Oldest first, at most [`PAYMENT_WORDS`].
    pub payments: Vec<KeptPayment>,
}

impl OrderRecord {
    /// Money arrived for the order and has not gone back yet: cancelled, with a word of the
    /// provider's that says paid (the rule of [`crate::store::Store::refunds_due`]).
    pub fn refund_due(&self) -> bool {
        self.order.status == OrderStatus::Cancelled && self.payments.iter().any(|p| p.paid)
    }
}

/// What an operator's refund did.
#[derive(Debug)]
pub enum Refund {
    /// The money went back: the order is refunded.
    Made(Order),
    /// The order is cancelled and its stock back on sale, but the provider did not take the
    /// refund: it is due, and the ticker makes it (see [`SaleService::retry_refunds`]).
    Due(Order),
}

/// The most provider words read for one order: each change of a trade's state is one word,
/// so an order has a handful.
const PAYMENT_WORDS: i64 = 50;

impl SaleService {
    /// An order with the provider's words kept for it.
    pub async fn order_record(&self, id: OrderId) -> Result<OrderRecord, OrderError> {
        let order = self
            .store
            .order(id)
            .await?
            .ok_or_else(|| self.missing(id))?;
        self.record_of(order).await
    }

    /// `order` with the provider's words kept for it.
    pub async fn record_of(&self, order: Order) -> Result<OrderRecord, OrderError> {
        let payments = self.store.payments_of(order.id, PAYMENT_WORDS).await?;
        Ok(OrderRecord { order, payments })
    }

    /// Refunds a paid order for the operator `by`: the order is cancelled and its stock goes
    /// back on sale (once, however many refunds of it run at once; the buyer may buy again),
    /// then its money goes back through the provider. An order whose refund is due already is
    /// refunded now, its stock left alone.
    ///
    /// Every way an order gets paid keeps the provider's word first (`apply_word`), so an
    /// order cancelled here is among [`crate::store::Store::refunds_due`] until its refund is
    /// made.
    pub async fn refund_paid(&self, by: &Operator, id: OrderId) -> Result<Refund, OrderError> {
        let refund = self.cancel_and_refund(id).await?;
        let action = match &refund {
            Refund::Made(order) => format!("refunded order {}", order.id),
            Refund::Due(order) => format!(
                "refunded order {} (the payment provider's refund is pending)",
                order.id
            ),
        };
        self.record_change(by, action).await;
        Ok(refund)
    }

    /// [`Self::refund_paid`], unrecorded.
    async fn cancel_and_refund(&self, id: OrderId) -> Result<Refund, OrderError> {
        self.provider()?;
        let record = self.order_record(id).await?;
        match record.order.status {
            OrderStatus::Paid => {}
            OrderStatus::Refunded => return Err(OrderError::AlreadyRefunded),
            _ if record.refund_due() => return self.send_back(record.order).await,
            OrderStatus::AwaitingPayment | OrderStatus::Cancelled => {
                return Err(OrderError::NotPaid);
            }
        }
        let Some(cancelled) = self.store.cancel_paid_order(id, self.now()).await? else {
            // Another refund of it won the update: answer as the order stands now.
            return Box::pin(self.cancel_and_refund(id)).await;
        };
        self.give_back(&cancelled).await;
        tracing::info!(
            order = id.0,
            product = cancelled.product_id.0,
            "refunded by an operator: its stock is back on sale"
        );
        self.send_back(cancelled).await
    }

    /// Sends a cancelled order's money back, or leaves the refund due when the provider does
    /// not take it.
    async fn send_back(&self, order: Order) -> Result<Refund, OrderError> {
        match self.refund(order.clone()).await {
            Ok(refunded) => Ok(Refund::Made(refunded)),
            Err(OrderError::Unavailable(e)) => {
                tracing::warn!(order = order.id.0, error = %e, "the provider did not take a refund: it is retried every second");
                Ok(Refund::Due(order))
            }
            Err(e) => Err(e),
        }
    }
}
