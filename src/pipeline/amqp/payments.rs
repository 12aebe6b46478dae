//! The paid queue: a payment made while its order was still on its way from the outbox to the
//! database waits here and is applied by a worker once the order is stored. While the order is
//! still missing, the payment goes round the retry queue (a second each time); once the order's
//! id is too old to be in flight, or the order was cancelled before the payment, the payment is
//! dead-lettered for an operator (a payment for a cancelled order is a refund to make).

use super::publisher::Message;
use super::publisher::{Publisher, publish_confirmed};
use super::{PAID, PAID_RETRY, Topology};
use crate::domain::{OrderId, UserId};
use crate::pipeline::drain::Fate;
use crate::sale::{OrderError, PaymentQueue, QueuedPayment, SaleService};
use async_trait::async_trait;
use lapin::Channel;
use lapin::message::Delivery;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A payment as a queue message.
#[derive(Serialize, Deserialize)]
struct WirePayment {
    order: i64,
    user: i64,
    at: i64,
}

impl From<QueuedPayment> for WirePayment {
    fn from(p: QueuedPayment) -> Self {
        Self {
            order: p.order.0,
            user: p.user.0,
            at: p.at,
        }
    }
}

fn message(payment: QueuedPayment) -> Message {
    Message {
        id: payment.order.to_string(),
        body: serde_json::to_vec(&WirePayment::from(payment)).expect("a payment serializes"),
        outbox_entry: None,
    }
}

/// The [`PaymentQueue`] of a server process.
pub struct AmqpPayments(pub Publisher);

#[async_trait]
impl PaymentQueue for AmqpPayments {
    async fn enqueue(&self, payment: QueuedPayment) -> anyhow::Result<()> {
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
            let Ok(wire) = serde_json::from_slice::<WirePayment>(&delivery.data) else {
                fates.push(Fate::Dead("not a payment".into()));
                continue;
            };
            let payment = QueuedPayment {
                order: OrderId(wire.order),
                user: UserId(wire.user),
                at: wire.at,
            };
            let applied = self
                .sale
                .apply_payment(payment.user, payment.order, payment.at)
                .await;
            fates.push(match applied {
                Ok(_) => Fate::Safe,
                Err(OrderError::Pending) => {
                    retries.push(message(payment));
                    Fate::Safe
                }
                Err(OrderError::NotFound) => Fate::Dead("no such order of this buyer".into()),
                Err(OrderError::Cancelled | OrderError::WindowClosed) => {
                    tracing::warn!(order = wire.order, "paid after cancellation: refund it");
                    Fate::Dead("paid after the order was cancelled: refund needed".into())
                }
                Err(e) => return Err(e.into()),
            });
        }
        publish_confirmed(channel, &self.topology, PAID_RETRY, &retries).await?;
        Ok(fates)
    }
}
