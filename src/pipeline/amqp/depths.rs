//! How many messages wait in each of the deployment's queues, for the dashboard and
//! `/metrics`: a passive declare of each queue answers its count of ready messages (those
//! delivered to a consumer and not acknowledged yet are not counted) without changing it.

use super::link::Link;
use super::{Broker, Topology};
use anyhow::Context;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

/// Reads the queues' depths over a connection of its own, kept between readings.
pub struct QueueDepths(Link);

impl QueueDepths {
    /// A reader of the queues of `topology` on `broker`; connects on first use.
    pub fn new(broker: &Broker, topology: Topology) -> Self {
        Self(Link::new(broker, topology, false))
    }

    /// Each queue's name and its ready messages.
    pub async fn read(&self) -> anyhow::Result<Vec<(String, u64)>> {
        let queues = self.0.topology().queues();
        self.0
            .run(|channel| async move {
                let passive = QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                };
                let mut depths = Vec::with_capacity(queues.len());
                for name in queues {
                    let queue = channel
                        .queue_declare(name.as_str().into(), passive, FieldTable::default())
                        .await
                        .with_context(|| format!("reading the depth of queue {name}"))?;
                    depths.push((name, u64::from(queue.message_count())));
                }
                Ok(depths)
            })
            .await
    }
}
