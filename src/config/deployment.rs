//! The deployment, decided once from the configuration: embedded (one process, the stock gate
//! in memory) or cluster (processes sharing Redis, and maybe RabbitMQ). Everything that
//! differs between the two asks this value, never `redis_url` itself.

use super::Config;
use super::links::RedisTlsFiles;
use std::path::Path;

/// How this deployment's processes share a sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment<'a> {
    /// No `redis_url`: one process holds the stock gate and commits each order itself.
    Embedded,
    /// `redis_url` set: the stock gate and its outbox in Redis, shared by every process.
    Cluster(ClusterUrls<'a>),
}

/// The servers a cluster deployment shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterUrls<'a> {
    /// Redis: the stock gate, the outbox, the node-id lease and the scheduler lock.
    pub redis_url: &'a str,
    /// What a TLS link to Redis trusts and presents (unset for a plain `redis_url`).
    pub redis_tls: RedisTlsFiles<'a>,
    /// RabbitMQ, when the outbox is relayed through it rather than drained into the database.
    pub amqp_url: Option<&'a str>,
    /// The private CA of an `amqps://` RabbitMQ (`amqp_ca_file`), trusted besides the system's
    /// roots.
    pub amqp_ca_file: Option<&'a Path>,
}

impl Config {
    /// The deployment these settings make. `amqp_url` without `redis_url` is refused by
    /// [`validate`](Config::validate), so it is no deployment.
    pub fn deployment(&self) -> Deployment<'_> {
        match &self.redis_url {
            None => Deployment::Embedded,
            Some(redis_url) => Deployment::Cluster(ClusterUrls {
                redis_url,
                redis_tls: self.redis_tls_files(),
                amqp_url: self.amqp_url.as_deref(),
                amqp_ca_file: self.amqp_ca_file.as_deref(),
            }),
        }
    }
}
