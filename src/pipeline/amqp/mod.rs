//! RabbitMQ, when `SECKILL_AMQP_URL` is set: the outbox relay publishes accepted orders to it,
//! and workers consume them. The topology, all durable, under one prefix `P` (default
//! `seckill.`), one direct exchange `Porders` routing by key:
//!
//! | routing key | queue | what it holds |
//! | --- | --- | --- |
//! | `new` | `Porders` | accepted orders, stored by workers in batches |
//! | `wait.<ms>` | `Pdeadline.wait.<ms>ms` | one message per stored order; no consumer: each expires after the payment window (a queue-level TTL, so no short message waits behind a long one) and is dead-lettered to `deadline` |
//! | `deadline` | `Pdeadline` | orders whose payment window has closed, cancelled by workers if still unpaid |
//! | `paid` | `Ppaid` | payments made while their order was still on its way to the database, applied by workers |
//! | `paid.retry` | `Ppaid.retry` | such payments whose order is still not stored; no consumer: back to `paid` after a second |
//!
//! The queues are classic queues (on one node; persistent messages survive that node's
//! restart) unless `amqp_quorum_queues` makes them quorum queues (replicated over a cluster's
//! nodes, surviving the loss of a minority of them).
//!
//! Messages no worker can ever handle (unreadable, or refused by the database) are rejected and
//! dead-lettered to the fanout exchange `Pdead`, into the queue `Pdead`, for an operator.
//! Publishes are persistent, `mandatory` and confirmed: an unroutable message comes back and
//! counts as a failure. Consumers acknowledge manually, after the database has the change, with
//! a bounded prefetch; every handler is idempotent, since any message may come twice.

pub mod consumers;
pub mod depths;
mod link;
pub mod payments;
pub mod publisher;
pub mod relay;

use anyhow::Context;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::tcp::OwnedTLSConfig;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, DefaultConnectionBuilder, ExchangeKind};

/// Routing key of accepted orders.
const NEW: &str = "new";
/// Routing key of closed payment windows.
const DEADLINE: &str = "deadline";
/// Routing key of payments for orders not stored yet.
const PAID: &str = "paid";
/// Routing key of payments to try again in a second.
const PAID_RETRY: &str = "paid.retry";
/// How long a payment waits before it is tried again.
const PAID_RETRY_MS: i64 = 1_000;

/// The names of one deployment's exchanges and queues.
#[derive(Debug, Clone)]
pub struct Topology {
    prefix: String,
    /// The payment window, which names the delay queue.
    payment_window_ms: u64,
    /// Queues unused this long are deleted by the broker (throwaway deployments only).
    expiry_ms: Option<u64>,
    /// Quorum queues (replicated) rather than classic ones.
    quorum: bool,
}

impl Topology {
    /// The names under `prefix`, with a delay queue for `payment_window_ms`.
    pub fn new(prefix: &str, payment_window_ms: u64) -> Self {
        Self {
            prefix: prefix.to_owned(),
            payment_window_ms,
            expiry_ms: None,
            quorum: false,
        }
    }

    /// Declares quorum queues, replicated over a RabbitMQ cluster's nodes, when `on`.
    pub fn quorum(mut self, on: bool) -> Self {
        self.quorum = on;
        self
    }

    /// Lets the broker delete the queues once unused for `expiry_ms`.
    pub fn expiring(mut self, expiry_ms: Option<u64>) -> Self {
        self.expiry_ms = expiry_ms;
        self
    }

    pub(super) fn exchange(&self) -> String {
        format!("{}orders", self.prefix)
    }

    fn dead_exchange(&self) -> String {
        format!("{}dead", self.prefix)
    }

    /// The queue of accepted orders.
    pub fn orders_queue(&self) -> String {
        format!("{}orders", self.prefix)
    }

    pub(super) fn wait_key(&self) -> String {
        format!("wait.{}", self.payment_window_ms)
    }

    fn wait_queue(&self) -> String {
        format!("{}deadline.wait.{}ms", self.prefix, self.payment_window_ms)
    }

    /// The queue of closed payment windows.
    pub fn deadline_queue(&self) -> String {
        format!("{}deadline", self.prefix)
    }

    /// The queue of payments to apply.
    pub fn paid_queue(&self) -> String {
        format!("{}paid", self.prefix)
    }

    fn paid_retry_queue(&self) -> String {
        format!("{}paid.retry", self.prefix)
    }

    /// The dead-letter queue.
    pub fn dead_queue(&self) -> String {
        format!("{}dead", self.prefix)
    }

    /// Every queue of the deployment, in the order the orders go through them, then the
    /// dead-letter queue.
    pub fn queues(&self) -> [String; 6] {
        [
            self.orders_queue(),
            self.wait_queue(),
            self.deadline_queue(),
            self.paid_queue(),
            self.paid_retry_queue(),
            self.dead_queue(),
        ]
    }

    /// Declares everything (idempotent: every process does it at start).
    pub async fn declare(&self, channel: &Channel) -> anyhow::Result<()> {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        channel
            .exchange_declare(
                self.exchange().into(),
                ExchangeKind::Direct,
                durable,
                FieldTable::default(),
            )
            .await?;
        channel
            .exchange_declare(
                self.dead_exchange().into(),
                ExchangeKind::Fanout,
                durable,
                FieldTable::default(),
            )
            .await?;
        let to_dead = dead_letter_to(&self.dead_exchange(), None);
        self.queue(channel, &self.orders_queue(), NEW, to_dead.clone())
            .await?;
        self.queue(channel, &self.deadline_queue(), DEADLINE, to_dead.clone())
            .await?;
        self.queue(channel, &self.paid_queue(), PAID, to_dead)
            .await?;
        let mut retry = dead_letter_to(&self.exchange(), Some(PAID));
        retry.insert(
            "x-message-ttl".into(),
            AMQPValue::LongLongInt(PAID_RETRY_MS),
        );
        self.queue(channel, &self.paid_retry_queue(), PAID_RETRY, retry)
            .await?;
        let mut wait = dead_letter_to(&self.exchange(), Some(DEADLINE));
        wait.insert(
            "x-message-ttl".into(),
            AMQPValue::LongLongInt(self.payment_window_ms as i64),
        );
        self.queue(channel, &self.wait_queue(), &self.wait_key(), wait)
            .await?;
        channel
            .queue_declare(
                self.dead_queue().into(),
                durable_queue(),
                self.arguments(FieldTable::default()),
            )
            .await?;
        channel
            .queue_bind(
                self.dead_queue().into(),
                self.dead_exchange().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(())
    }

    async fn queue(
        &self,
        channel: &Channel,
        name: &str,
        key: &str,
        args: FieldTable,
    ) -> anyhow::Result<()> {
        channel
            .queue_declare(name.into(), durable_queue(), self.arguments(args))
            .await
            .with_context(|| format!("declaring queue {name}"))?;
        channel
            .queue_bind(
                name.into(),
                self.exchange().into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(())
    }

    /// `args` with what every queue of the deployment is declared with: its expiry, its type.
    fn arguments(&self, mut args: FieldTable) -> FieldTable {
        if let Some(ms) = self.expiry_ms {
            args.insert("x-expires".into(), AMQPValue::LongLongInt(ms as i64));
        }
        if self.quorum {
            args.insert(
                "x-queue-type".into(),
                AMQPValue::LongString("quorum".into()),
            );
        }
        args
    }
}

fn durable_queue() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn dead_letter_to(exchange: &str, routing_key: Option<&str>) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(exchange.into()),
    );
    if let Some(key) = routing_key {
        args.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(key.into()),
        );
    }
    args
}

/// Where RabbitMQ listens and what a TLS link to it trusts: every connection of a process is
/// opened from it. Not `Debug`: the URL holds the password.
#[derive(Clone)]
pub struct Broker {
    /// `amqp://` or `amqps://`, credentials and virtual host included.
    pub url: String,
    /// A private CA's certificates (PEM), trusted for `amqps://` besides the system's roots.
    pub ca: Option<String>,
}

/// Connects and declares the topology; returns the connection and a channel on it. An
/// `amqps://` URL never falls back to plain text, and a certificate that does not verify fails
/// with the reason.
pub async fn connect(
    broker: &Broker,
    topology: &Topology,
) -> anyhow::Result<(Connection, Channel)> {
    let tls = OwnedTLSConfig {
        identity: None,
        cert_chain: broker.ca.clone(),
    };
    let connection = DefaultConnectionBuilder::new()
        .context("starting RabbitMQ's client")?
        .with_uri_str(broker.url.clone())
        .with_tls_config(tls)
        .connect()
        .await
        .context("connecting to RabbitMQ (SECKILL_AMQP_URL)")?;
    let channel = connection.create_channel().await?;
    topology.declare(&channel).await?;
    Ok((connection, channel))
}
