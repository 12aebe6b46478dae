//! Publishing to RabbitMQ safely: persistent messages, `mandatory` (an unroutable message comes
//! back instead of vanishing), and publisher confirms awaited before anyone relies on them.

use super::link::Link;
use super::{Broker, Topology};
use anyhow::{Context, bail};
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel};
use std::time::Duration;

/// The header that names the outbox entry a relayed order came from, so the worker that stores
/// it can delete the entry.
pub(super) const OUTBOX_ENTRY: &str = "x-outbox-entry";

/// How long the broker may take to confirm a batch (it holds confirms under a memory or disk
/// alarm) before the publish counts as failed.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// One message to publish.
pub struct Message {
    /// The message id: the order id, so duplicates are recognisable in the broker's tools.
    pub id: String,
    pub body: Vec<u8>,
    /// The outbox entry of a relayed order.
    pub outbox_entry: Option<String>,
}

impl Message {
    fn properties(&self) -> BasicProperties {
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(self.id.clone()));
        match &self.outbox_entry {
            None => properties,
            Some(entry) => {
                let mut headers = FieldTable::default();
                headers.insert(
                    OUTBOX_ENTRY.into(),
                    AMQPValue::LongString(entry.as_str().into()),
                );
                properties.with_headers(headers)
            }
        }
    }
}

/// Publishes `messages` under `key` on `channel` (in confirm mode) and waits until the broker
/// has confirmed each. A message the broker refuses or cannot route fails the call.
pub(super) async fn publish_confirmed(
    channel: &Channel,
    topology: &Topology,
    key: &str,
    messages: &[Message],
) -> anyhow::Result<()> {
    let options = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    let confirmed = async {
        let mut confirms = Vec::with_capacity(messages.len());
        for message in messages {
            let confirm = channel
                .basic_publish(
                    topology.exchange().into(),
                    key.into(),
                    options,
                    &message.body,
                    message.properties(),
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
    };
    tokio::time::timeout(CONFIRM_TIMEOUT, confirmed)
        .await
        .context("RabbitMQ did not confirm in time")?
}

/// A publisher that keeps one confirming channel and reconnects after any failure.
pub struct Publisher(Link);

impl Publisher {
    /// A publisher to `broker`; connects on first use.
    pub fn new(broker: &Broker, topology: Topology) -> Self {
        Self(Link::new(broker, topology, true))
    }

    /// Publishes and waits for the confirms (see [`publish_confirmed`]).
    pub async fn publish(&self, key: &str, messages: &[Message]) -> anyhow::Result<()> {
        let topology = self.0.topology();
        self.0
            .run(
                |channel| async move { publish_confirmed(&channel, topology, key, messages).await },
            )
            .await
    }
}
