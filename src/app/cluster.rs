//! Cluster mode's parts: the shared Redis (stock gate, outbox, node-id lease, scheduler lock)
//! and, when configured, RabbitMQ (the relay, the delay queue and the paid queue).

use crate::config::RedisTlsFiles;
use crate::config::{ClusterUrls, Config};
use crate::gate::StockGate;
use crate::gate::redis::Outbox;
use crate::gate::redis::{RedisGate, Replicas};
use crate::http::readiness::Check;
use crate::lease;
use crate::limits::Limiter;
use crate::limits::redis::RedisLimiter;
use crate::pipeline::amqp::consumers::{CancelOverdue, Consume, StoreOrders};
use crate::pipeline::amqp::depths::QueueDepths;
use crate::pipeline::amqp::payments::{AmqpPayments, ApplyPayments};
use crate::pipeline::amqp::publisher::Publisher;
use crate::pipeline::amqp::relay::Relay;
use crate::pipeline::amqp::{Broker, Topology};
use crate::pipeline::drain::{Drain, Sink, StoreSink};
use crate::pipeline::fleet::ClusterFleet;
use crate::pipeline::leader::Leadership;
use crate::pipeline::worker::Worker;
use crate::redis_link::{RedisLink, Tls};
use crate::sale::{Fleet, PaymentQueue, SaleService};
use crate::store::Store;
use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The cluster's connections and this process's place among its processes.
pub struct Cluster {
    /// This process's one Redis connection, shared by the gate, the limiter, the outbox, the
    /// fleet and the scheduler lock.
    redis: RedisLink,
    /// `redis_key_prefix`: every key of this deployment starts with it, so deployments can
    /// share a Redis.
    prefix: String,
    /// This process's Snowflake node id: configured, or leased so no two processes make the
    /// same order ids.
    pub(super) node_id: u16,
    /// Keeps the leased node id, unless the id was configured.
    lease: Option<JoinHandle<()>>,
    /// The stock gate, handed to the sale service.
    gate: Arc<RedisGate>,
    /// The gate's and the outbox readers' connection: `redis` itself, or, when replicas are
    /// waited for, one of their own, since a `WAIT` holds up every command queued behind it
    /// on its connection, and the limits, leases and readiness checks must not queue behind
    /// a stalled replica.
    gate_redis: RedisLink,
    /// The replicas that must acknowledge the gate's changes and the outbox's reads.
    replicas: Replicas,
    /// RabbitMQ, when the outbox is relayed through it.
    amqp: Option<Amqp>,
}

/// RabbitMQ's address and this deployment's names on it.
struct Amqp {
    /// Where RabbitMQ listens, credentials included, and what its TLS link trusts: each
    /// publisher and consumer connects with it.
    broker: Broker,
    /// This deployment's exchange and queue names and their options (`amqp_prefix`, expiry,
    /// quorum queues).
    topology: Topology,
}

impl Amqp {
    /// RabbitMQ's broker and names, when configured, after one connection that declares the
    /// topology.
    async fn connect(config: &Config, urls: ClusterUrls<'_>) -> anyhow::Result<Option<Self>> {
        let Some(url) = urls.amqp_url else {
            return Ok(None);
        };
        let ca = match urls.amqp_ca_file {
            Some(file) => Some(
                String::from_utf8(pem_file(file, "amqp_ca_file")?)
                    .context("amqp_ca_file is not PEM text")?,
            ),
            None => None,
        };
        let amqp = Self {
            broker: Broker {
                url: url.to_owned(),
                ca,
            },
            topology: Topology::new(&config.amqp_prefix, config.payment_window_secs * 1000)
                .expiring(config.amqp_queue_expiry_secs.map(|s| s * 1000))
                .quorum(config.amqp_quorum_queues),
        };
        crate::pipeline::amqp::connect(&amqp.broker, &amqp.topology).await?;
        Ok(Some(amqp))
    }
}

impl Cluster {
    /// Connects to Redis, then to RabbitMQ once (so an unreachable broker or a certificate
    /// that does not verify stops the start instead of failing the first publish), and leases
    /// a node id (unless one is configured).
    pub(super) async fn connect(config: &Config, urls: ClusterUrls<'_>) -> anyhow::Result<Self> {
        let tls = redis_tls(urls.redis_tls)?;
        let redis = crate::redis_link::connect_with(urls.redis_url, &tls).await?;
        let replicas = Replicas {
            count: config.redis_wait_replicas,
            timeout_ms: config.redis_wait_timeout_ms,
        };
        let gate_redis = match replicas.count {
            0 => redis.clone(),
            _ => crate::redis_link::connect_with(urls.redis_url, &tls).await?,
        };
        replicas.warn_if_fewer(&gate_redis).await;
        let amqp = Amqp::connect(config, urls).await?;
        crate::gate::redis::warn_unless_durable(&redis).await;
        let prefix = config.redis_key_prefix.clone();
        let (node_id, lease) = match config.node_id {
            Some(id) => (id, None),
            None => {
                let lease = lease::acquire(redis.clone(), &prefix, || {
                    // Another process may now make the same order ids: stop at once.
                    eprintln!("error: the Snowflake node id lease was lost; exiting");
                    std::process::exit(70);
                })
                .await?;
                (lease.node_id, Some(lease.renewal))
            }
        };
        Ok(Self {
            gate: Arc::new(RedisGate::new(
                gate_redis.clone(),
                &prefix,
                config.outbox_max_orders,
                replicas,
            )),
            gate_redis,
            replicas,
            redis,
            prefix,
            node_id,
            lease,
            amqp,
        })
    }

    /// The stock gate in Redis, which appends every order it accepts to its outbox.
    pub(super) fn gate(&self) -> Arc<dyn StockGate> {
        self.gate.clone()
    }

    /// Rate limits shared with every server through Redis.
    pub(super) fn limiter(&self) -> Arc<dyn Limiter> {
        Arc::new(RedisLimiter::new(
            self.redis.clone(),
            &self.prefix,
            self.node_id,
        ))
    }

    /// RabbitMQ's paid queue, when there is RabbitMQ.
    pub(super) fn payment_queue(&self) -> Option<Arc<dyn PaymentQueue>> {
        self.amqp.as_ref().map(|amqp| {
            let publisher = Publisher::new(&amqp.broker, amqp.topology.clone());
            Arc::new(AmqpPayments(publisher)) as Arc<dyn PaymentQueue>
        })
    }

    /// The servers sharing this Redis and prefix, and RabbitMQ's queues, for the dashboard.
    pub(super) fn fleet(&self) -> Arc<dyn Fleet> {
        let queues = self
            .amqp
            .as_ref()
            .map(|amqp| QueueDepths::new(&amqp.broker, amqp.topology.clone()));
        Arc::new(ClusterFleet::new(
            self.redis.clone(),
            &self.prefix,
            self.node_id,
            queues,
        ))
    }

    /// One scheduler among the processes sharing this Redis and prefix.
    pub(super) fn leadership(&self) -> Leadership {
        Leadership::shared(self.redis.clone(), &self.prefix)
    }

    /// Starts the consumers: the outbox drained into the database, or relayed to RabbitMQ with
    /// RabbitMQ's queues consumed here too.
    pub(super) async fn start_worker(
        &self,
        config: &Config,
        sale: Arc<SaleService>,
        store: Arc<dyn Store>,
    ) -> anyhow::Result<Worker> {
        let outbox = Outbox::new(
            self.gate_redis.clone(),
            &self.prefix,
            format!("node-{}-pid-{}", self.node_id, std::process::id()),
            Duration::from_millis(config.claim_after_ms),
            self.replicas,
        );
        let mut worker = Worker::new();
        let sink: Arc<dyn Sink> = match &self.amqp {
            None => {
                tracing::info!("worker: draining the outbox into the database");
                Arc::new(StoreSink(store))
            }
            Some(amqp) => {
                let consume = |queue: String| Consume {
                    broker: amqp.broker.clone(),
                    topology: amqp.topology.clone(),
                    queue,
                    max_batch: config.max_batch,
                };
                let topology = &amqp.topology;
                let orders = StoreOrders {
                    store,
                    outbox: outbox.clone(),
                    topology: topology.clone(),
                };
                let deadlines = CancelOverdue { sale: sale.clone() };
                let payments = ApplyPayments {
                    sale: sale.clone(),
                    topology: topology.clone(),
                };
                let queue = consume(topology.orders_queue());
                worker.run(|stop| queue.run(orders, stop));
                let queue = consume(topology.deadline_queue());
                worker.run(|stop| queue.run(deadlines, stop));
                let queue = consume(topology.paid_queue());
                worker.run(|stop| queue.run(payments, stop));
                tracing::info!("worker: relaying the outbox to RabbitMQ and consuming its queues");
                Arc::new(Relay(Publisher::new(&amqp.broker, topology.clone())))
            }
        };
        let drain = Drain {
            outbox,
            sale,
            sink,
            max_batch: config.max_batch,
        };
        for _ in 0..Drain::LOOPS {
            let drain = drain.clone();
            worker.run(|stop| drain.run(stop));
        }
        Ok(worker)
    }

    /// The readiness checks of cluster mode's backends: a `PING` to Redis, and RabbitMQ's
    /// queues read over a connection of the check's own, where there is RabbitMQ.
    pub(super) fn checks(&self) -> Vec<Check> {
        let redis = self.redis.clone();
        let mut checks = vec![Check {
            name: "redis",
            probe: Box::new(move || {
                let mut redis = redis.clone();
                Box::pin(async move {
                    let _: String = redis::cmd("PING").query_async(&mut redis).await?;
                    Ok(())
                })
            }),
        }];
        if let Some(amqp) = &self.amqp {
            let queues = Arc::new(QueueDepths::new(&amqp.broker, amqp.topology.clone()));
            checks.push(Check {
                name: "amqp",
                probe: Box::new(move || {
                    let queues = queues.clone();
                    Box::pin(async move { queues.read().await.map(drop) })
                }),
            });
        }
        checks
    }

    /// Stops renewing the node-id lease: this process makes no more ids.
    pub(super) fn stop(self) {
        if let Some(lease) = self.lease {
            lease.abort();
        }
    }
}

/// The PEM text of the TLS files of a `rediss://` link.
fn redis_tls(files: RedisTlsFiles<'_>) -> anyhow::Result<Tls> {
    let client = match files.client {
        Some((cert, key)) => Some((
            pem_file(cert, "redis_client_cert_file")?,
            pem_file(key, "redis_client_key_file")?,
        )),
        None => None,
    };
    Ok(Tls {
        ca: files
            .ca
            .map(|ca| pem_file(ca, "redis_ca_file"))
            .transpose()?,
        client,
    })
}

/// A certificate or key file the setting `key` names, read at start so a missing one stops it.
fn pem_file(file: &Path, key: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("reading {key} {}", file.display()))
}
