//! The outbox relay: moves accepted orders from the Redis outbox to RabbitMQ's order queue. The
//! drain marks an outbox entry handed over only once the broker has confirmed it, so a relay
//! that dies mid-batch publishes some orders twice (workers ignore the repeat) and never loses
//! one. The entry stays in the outbox until the worker that stores the order deletes it.

use super::NEW;
use super::publisher::{Message, Publisher};
use crate::domain::{Order, ProductId};
use crate::gate::redis::Outbox;
use crate::pipeline::drain::{Fate, Sink};
use async_trait::async_trait;

/// The relay, a [`Sink`] for the outbox drain.
pub struct Relay(pub Publisher);

#[async_trait]
impl Sink for Relay {
    async fn put(&self, entries: &[String], orders: &[Order]) -> anyhow::Result<Vec<Fate>> {
        let messages: Vec<Message> = entries
            .iter()
            .zip(orders)
            .map(|(entry, order)| Message {
                id: order.id.to_string(),
                body: order.encode().into_bytes(),
                outbox_entry: Some(entry.clone()),
            })
            .collect();
        self.0.publish(NEW, &messages).await?;
        Ok(vec![Fate::Safe; orders.len()])
    }

    /// Confirmed by the broker, not stored yet: the entries stay until a worker stores them.
    async fn acknowledge(
        &self,
        outbox: &Outbox,
        product: ProductId,
        safe: &[&str],
    ) -> anyhow::Result<()> {
        outbox.hand_over(product, safe).await
    }
}
