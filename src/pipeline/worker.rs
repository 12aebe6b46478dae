//! The consumers of cluster mode, run by `seckill worker` (or by `seckill serve --worker`):
//! the outbox drain, and with RabbitMQ the relay and the queue consumers. Stopping is
//! graceful: each loop finishes the batch in hand, acknowledges it, and exits.

use super::amqp::Topology;
use super::amqp::consumers::{CancelOverdue, Consume, StoreOrders};
use super::amqp::payments::ApplyPayments;
use super::amqp::publisher::Publisher;
use super::amqp::relay::Relay;
use super::drain::{Drain, Sink, StoreSink};
use crate::gate::outbox::Outbox;
use crate::redis_link::RedisLink;
use crate::sale::SaleService;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a worker needs from the process around it.
pub struct WorkerParts {
    pub sale: Arc<SaleService>,
    pub store: Arc<dyn Store>,
    pub redis: RedisLink,
    pub redis_key_prefix: String,
    /// This process's name among the outbox's readers; unique while it lives.
    pub name: String,
    pub max_batch: usize,
    pub claim_after: Duration,
    /// RabbitMQ, when the outbox is relayed through it.
    pub amqp: Option<(String, Topology)>,
}

/// Running consumers.
pub struct Worker {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Worker {
    /// Starts the consumers.
    pub async fn start(parts: WorkerParts) -> anyhow::Result<Self> {
        let (stop, stopped) = watch::channel(false);
        let outbox = Outbox::new(
            parts.redis,
            &parts.redis_key_prefix,
            parts.name,
            parts.claim_after,
        );
        let mut tasks = Vec::new();
        let sink: Arc<dyn Sink> = match parts.amqp {
            None => {
                tracing::info!("worker: draining the outbox into the database");
                Arc::new(StoreSink(parts.store))
            }
            Some((url, topology)) => {
                // Fail at start, not in a loop, if the broker is unreachable.
                super::amqp::connect(&url, &topology).await?;
                let consume = |queue: String| Consume {
                    url: url.clone(),
                    topology: topology.clone(),
                    queue,
                    max_batch: parts.max_batch,
                };
                let orders = StoreOrders {
                    store: parts.store,
                    outbox: outbox.clone(),
                    topology: topology.clone(),
                };
                let deadlines = CancelOverdue {
                    sale: parts.sale.clone(),
                };
                let payments = ApplyPayments {
                    sale: parts.sale.clone(),
                    topology: topology.clone(),
                };
                tasks.push(tokio::spawn(
                    consume(topology.orders_queue()).run(orders, stopped.clone()),
                ));
                tasks.push(tokio::spawn(
                    consume(topology.deadline_queue()).run(deadlines, stopped.clone()),
                ));
                tasks.push(tokio::spawn(
                    consume(topology.paid_queue()).run(payments, stopped.clone()),
                ));
                tracing::info!("worker: relaying the outbox to RabbitMQ and consuming its queues");
                Arc::new(Relay(Publisher::new(&url, topology)))
            }
        };
        let drain = Drain {
            outbox,
            sale: parts.sale,
            sink,
            max_batch: parts.max_batch,
        };
        for _ in 0..Drain::LOOPS {
            tasks.push(tokio::spawn(drain.clone().run(stopped.clone())));
        }
        Ok(Self { stop, tasks })
    }

    /// Lets every loop finish and acknowledge the batch in hand, then returns.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
