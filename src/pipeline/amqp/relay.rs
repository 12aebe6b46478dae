//! The outbox relay: moves accepted orders from the Redis outbox to RabbitMQ's order queue. The
//! drain acknowledges an outbox entry only after this sink returns, which it does only once the
//! broker has confirmed every message of the batch, so a relay that dies mid-batch publishes
//! some orders twice (workers ignore the repeat) and never loses one.

use super::{NEW, Topology, persistent};
use crate::domain::Order;
use crate::pipeline::drain::{Fate, Sink};
use anyhow::bail;
use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{Channel, Connection};
use tokio::sync::Mutex;

/// Publishes messages under `key` and waits until the broker has confirmed each. A message the
/// broker refuses or cannot route (`mandatory`: it comes back) fails the call.
pub(super) async fn publish_confirmed(
    channel: &Channel,
    topology: &Topology,
    key: &str,
    messages: Vec<(String, Vec<u8>)>,
) -> anyhow::Result<()> {
    let options = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    let mut confirms = Vec::new();
    for (id, body) in messages {
        let confirm = channel
            .basic_publish(
                topology.exchange().into(),
                key.into(),
                options,
                &body,
                persistent(id),
            )
            .await?;
        confirms.push(confirm);
    }
    for confirm in confirms {
        let confirmation = confirm.await?;
        if !confirmation.is_ack() {
            bail!("RabbitMQ refused a message (nack)");
        }
        if let Some(returned) = confirmation.take_message() {
            bail!(
                "RabbitMQ could not route a message to {key}: {}",
                returned.reply_text
            );
        }
    }
    Ok(())
}

/// Opens a channel in confirm mode, with the topology declared.
pub(super) async fn confirming_channel(
    url: &str,
    topology: &Topology,
) -> anyhow::Result<(Connection, Channel)> {
    let (connection, channel) = super::connect(url, topology).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok((connection, channel))
}

/// The relay, a [`Sink`] for the outbox drain. Reconnects after any failure.
pub struct Relay {
    url: String,
    topology: Topology,
    link: Mutex<Option<(Connection, Channel)>>,
}

impl Relay {
    /// A relay to the broker at `url`; connects on first use.
    pub fn new(url: &str, topology: Topology) -> Self {
        Self {
            url: url.to_owned(),
            topology,
            link: Mutex::new(None),
        }
    }
}

#[async_trait]
impl Sink for Relay {
    async fn put(&self, orders: &[Order]) -> anyhow::Result<Vec<Fate>> {
        let mut link = self.link.lock().await;
        if !link
            .as_ref()
            .is_some_and(|(_, channel)| channel.status().connected())
        {
            *link = Some(confirming_channel(&self.url, &self.topology).await?);
        }
        let Some((_, channel)) = link.as_ref() else {
            bail!("no RabbitMQ channel");
        };
        let messages = orders
            .iter()
            .map(|order| (order.id.to_string(), order.encode().into_bytes()))
            .collect();
        if let Err(e) = publish_confirmed(channel, &self.topology, NEW, messages).await {
            *link = None;
            return Err(e);
        }
        Ok(vec![Fate::Safe; orders.len()])
    }
}
