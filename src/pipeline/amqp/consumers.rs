//! The RabbitMQ consumers of a worker: the order queue (store each batch, then start each
//! order's payment clock in the delay queue) and the deadline queue (cancel what is still
//! unpaid). One loop runs them all: take what the prefetch holds as a batch, handle it,
//! acknowledge what is done, dead-letter what can never be done, and on a failure put the batch
//! back and pause. The loop reconnects after losing the broker.

use super::link::confirming_channel;
use super::publisher::{Message, OUTBOX_ENTRY, publish_confirmed};
use super::{Broker, Topology};
use crate::domain::{Order, OrderId, ProductId};
use crate::gate::redis::Outbox;
use crate::pipeline::drain::{Fate, store_batch};
use crate::sale::SaleService;
use crate::store::Store;
use anyhow::ensure;
use async_trait::async_trait;
use futures_util::{FutureExt, StreamExt};
use lapin::Channel;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Handles one queue's messages.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// The fate of each message of a batch, in order. An error puts the whole batch back, to
    /// be tried again after a pause. `channel` is in confirm mode, for follow-up messages.
    async fn handle(&self, batch: &[Delivery], channel: &Channel) -> anyhow::Result<Vec<Fate>>;
}

/// Stores accepted orders, deletes their outbox entries, and starts each one's payment clock
/// in the delay queue.
pub struct StoreOrders {
    pub store: Arc<dyn Store>,
    pub outbox: Outbox,
    pub topology: Topology,
}

#[async_trait]
impl Handler for StoreOrders {
    async fn handle(&self, batch: &[Delivery], channel: &Channel) -> anyhow::Result<Vec<Fate>> {
        let decoded: Vec<_> = batch.iter().map(|d| Order::decode(&d.data)).collect();
        let orders: Vec<Order> = decoded
            .iter()
            .filter_map(|o| o.as_ref().ok().cloned())
            .collect();
        let mut stored = store_batch(&*self.store, &orders).await?.into_iter();
        let fates: Vec<Fate> = decoded
            .iter()
            .map(|order| match order {
                Ok(_) => stored.next(),
                Err(e) => Some(Fate::Dead(e.to_string())),
            })
            .collect::<Option<_>>()
            .ok_or_else(|| anyhow::anyhow!("the store lost track of its batch"))?;
        // Duplicates too: a worker may have died between storing and publishing.
        let deadlines: Vec<Message> = decoded
            .iter()
            .zip(&fates)
            .filter_map(|(order, fate)| order.as_ref().ok().filter(|_| *fate == Fate::Safe))
            .map(|order| Message {
                id: order.id.to_string(),
                body: order.id.to_string().into_bytes(),
                outbox_entry: None,
            })
            .collect();
        publish_confirmed(
            channel,
            &self.topology,
            &self.topology.wait_key(),
            &deadlines,
        )
        .await?;
        // Stored or dead-lettered, the order has left the outbox for good.
        let mut entries: HashMap<ProductId, Vec<String>> = HashMap::new();
        for (delivery, order) in batch.iter().zip(&decoded) {
            if let (Ok(order), Some(entry)) = (order, outbox_entry(delivery)) {
                entries.entry(order.product_id).or_default().push(entry);
            }
        }
        for (product, ids) in &entries {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            self.outbox.finish(*product, &ids).await?;
        }
        Ok(fates)
    }
}

/// The outbox entry a relayed order came from.
fn outbox_entry(delivery: &Delivery) -> Option<String> {
    let headers = delivery.properties.headers().as_ref()?;
    match headers.inner().get(OUTBOX_ENTRY)? {
        AMQPValue::LongString(entry) => String::from_utf8(entry.as_bytes().to_vec()).ok(),
        _ => None,
    }
}

/// Cancels orders whose payment window closed, if still unpaid, returning their stock.
pub struct CancelOverdue {
    pub sale: Arc<SaleService>,
}

#[async_trait]
impl Handler for CancelOverdue {
    async fn handle(&self, batch: &[Delivery], _channel: &Channel) -> anyhow::Result<Vec<Fate>> {
        let mut fates = Vec::with_capacity(batch.len());
        for delivery in batch {
            let id = std::str::from_utf8(&delivery.data)
                .ok()
                .and_then(|s| s.parse().ok());
            let Some(id) = id else {
                fates.push(Fate::Dead("not an order id".into()));
                continue;
            };
            // Not overdue yet (clocks differ) or already settled: the sweep is the backstop.
            self.sale.expire(OrderId(id)).await?;
            fates.push(Fate::Safe);
        }
        Ok(fates)
    }
}

/// Where a consumer reads, and how much it takes at once.
pub struct Consume {
    pub broker: Broker,
    pub topology: Topology,
    pub queue: String,
    pub max_batch: usize,
}

impl Consume {
    /// Consumes until `stop` turns true, reconnecting after failures.
    pub async fn run(self, handler: impl Handler, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            match self.session(&handler, &mut stop).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::error!(queue = self.queue, error = ?e, "consuming");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.changed() => {}
                    }
                }
            }
        }
    }

    async fn session(
        &self,
        handler: &impl Handler,
        stop: &mut watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let (_connection, channel) = confirming_channel(&self.broker, &self.topology).await?;
        let prefetch = u16::try_from(self.max_batch).unwrap_or(u16::MAX);
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        let mut consumer = channel
            .basic_consume(
                self.queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        loop {
            let first = tokio::select! {
                next = consumer.next() => next,
                _ = stop.changed() => return Ok(()),
            };
            let Some(first) = first else {
                anyhow::bail!("the broker cancelled the consumer");
            };
            let mut batch = vec![first?];
            while batch.len() < self.max_batch {
                match consumer.next().now_or_never() {
                    Some(Some(Ok(delivery))) => batch.push(delivery),
                    _ => break,
                }
            }
            self.settle(handler, &channel, batch).await?;
            if *stop.borrow() {
                return Ok(());
            }
        }
    }

    /// Handles a batch and answers the broker for each message.
    async fn settle(
        &self,
        handler: &impl Handler,
        channel: &Channel,
        batch: Vec<Delivery>,
    ) -> anyhow::Result<()> {
        match handler.handle(&batch, channel).await {
            Ok(fates) => {
                ensure!(
                    fates.len() == batch.len(),
                    "the handler lost track of its batch"
                );
                for (delivery, fate) in batch.iter().zip(fates) {
                    match fate {
                        Fate::Safe => delivery.ack(BasicAckOptions::default()).await?,
                        Fate::Dead(reason) => {
                            tracing::error!(queue = self.queue, reason, "dead-lettering a message");
                            delivery
                                .reject(BasicRejectOptions { requeue: false })
                                .await?
                        }
                    };
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!(queue = self.queue, error = ?e, "batch failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                for delivery in &batch {
                    delivery
                        .nack(BasicNackOptions {
                            requeue: true,
                            multiple: false,
                        })
                        .await?;
                }
                Ok(())
            }
        }
    }
}
