//! A connection and channel to RabbitMQ kept open between uses and opened again after any
//! failure, for the parts of a process that use the broker now and then rather than in a loop
//! of their own: the publisher, and the dashboard's reading of the queues' depths.

use super::{Broker, Topology};
use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection};
use std::future::Future;
use tokio::sync::Mutex;

/// Opens a channel in confirm mode, with the topology declared.
pub(super) async fn confirming_channel(
    broker: &Broker,
    topology: &Topology,
) -> anyhow::Result<(Connection, Channel)> {
    let (connection, channel) = super::connect(broker, topology).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok((connection, channel))
}

/// One connection and channel, opened on first use (declaring the topology) and again after a
/// failure; its users take turns.
pub(super) struct Link {
    broker: Broker,
    topology: Topology,
    /// Whether the channel is in confirm mode, as a publisher's must be.
    confirms: bool,
    open: Mutex<Option<(Connection, Channel)>>,
}

impl Link {
    /// A link to `broker`; connects on first use.
    pub(super) fn new(broker: &Broker, topology: Topology, confirms: bool) -> Self {
        Self {
            broker: broker.clone(),
            topology,
            confirms,
            open: Mutex::new(None),
        }
    }

    /// The names of the deployment's exchanges and queues.
    pub(super) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Runs `work` on the channel, one caller at a time, opening it first when it is not open.
    /// A failure drops the channel (the broker may have closed it), so the next use opens a
    /// fresh one.
    pub(super) async fn run<T, F, W>(&self, work: W) -> anyhow::Result<T>
    where
        W: FnOnce(Channel) -> F,
        F: Future<Output = anyhow::Result<T>>,
    {
        let mut open = self.open.lock().await;
        let channel = match open.as_ref() {
            Some((_, channel)) if channel.status().connected() => channel.clone(),
            _ => {
                let (connection, channel) = if self.confirms {
                    confirming_channel(&self.broker, &self.topology).await?
                } else {
                    super::connect(&self.broker, &self.topology).await?
                };
                *open = Some((connection, channel.clone()));
                channel
            }
        };
        let result = work(channel).await;
        if result.is_err() {
            *open = None;
        }
        result
    }
}
