//! The paid queue: a provider's verified word that an order was paid, which came while the
//! order was still on its way from the outbox to the database, waits here and is applied by a
//! worker once the order is stored (a payment for an order cancelled meanwhile is refunded
//! then). While the order is still missing, the payment goes round the retry queue (a second
//! each time); once the order's id is too old to be in flight, or the payment does not match
//! its order, it is dead-lettered for an operator.

use super::publisher::Message;
use super::publisher::{Publisher, publish_confirmed};
use super::{PAID, PAID_RETRY, Topology};
use crate::domain::{Money, OrderId};
use crate::payment::{Trade, TradeStatus};
use crate::pipeline::drain::Fate;
use crate::sale::{OrderError, PaymentQueue, QueuedPayment, SaleService};
use async_trait::async_trait;
use lapin::Channel;
use lapin::message::Delivery;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A payment as a queue message: the verified trade, paid.
#[derive(Serialize, Deserialize)]
struct WirePayment {
    order: i64,
    trade_no: String,
    total_cents: i64,
    paid_at: Option<i64>,
    key: String,
}

impl From<&QueuedPayment> for WirePayment {
    fn from(p: &QueuedPayment) -> Self {
        Self {
            order: p.trade.order.0,
            trade_no: p.trade.trade_no.clone(),
            total_cents: p.trade.total.cents(),
            paid_at: p.trade.paid_at,
            key: p.key.clone(),
        }
    }
}

impl WirePayment {
    /// The payment again, or `None` when the message is not one.
    fn payment(self) -> Option<QueuedPayment> {
        Some(QueuedPayment {
            trade: Trade {
                order: OrderId(self.order),
                trade_no: self.trade_no,
                total: Money::from_cents(self.total_cents).ok()?,
                status: TradeStatus::Success,
                paid_at: self.paid_at,
            },
            key: self.key,
        })
    }
}

fn message(payment: &QueuedPayment) -> Message {
    Message {
        id: payment.trade.order.to_string(),
        body: serde_json::to_vec(&WirePayment::from(payment)).expect("a payment serializes"),
        outbox_entry: None,
    }
}

/// The [`PaymentQueue`] of a server process.
pub struct AmqpPayments(pub Publisher);

#[async_trait]
impl PaymentQueue for AmqpPayments {
    async fn enqueue(&self, payment: &QueuedPayment) -> anyhow::Result<()> {
        self.0.publish(PAID, &[message(payment)]).await
    }
}

/// Applies queued payments.
pub struct ApplyPayments {
    pub sale: Arc<SaleService>,
    pub topology: Topology,
}

#[async_trait]
impl super::consumers::Handler for ApplyPayments {
    async fn handle(&self, batch: &[Delivery], channel: &Channel) -> anyhow::Result<Vec<Fate>> {
        let mut fates = Vec::with_capacity(batch.len());
        let mut retries = Vec::new();
        for delivery in batch {
            let Some(payment) = serde_json::from_slice::<WirePayment>(&delivery.data)
                .ok()
                .and_then(WirePayment::payment)
            else {
                fates.push(Fate::Dead("not a payment".into()));
                continue;
            };
            fates.push(match self.sale.apply_queued(&payment).await {
                Ok(_) => Fate::Safe,
                Err(OrderError::Pending) => {
                    retries.push(message(&payment));
                    Fate::Safe
                }
                Err(OrderError::NotFound) => Fate::Dead("no such order".into()),
                Err(e @ OrderError::Mismatch(_)) => Fate::Dead(e.to_string()),
                Err(e) => return Err(e.into()),
            });
        }
        publish_confirmed(channel, &self.topology, PAID_RETRY, &retries).await?;
        Ok(fates)
    }
}
