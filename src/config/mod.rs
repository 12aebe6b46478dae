//! Configuration in layers: built-in defaults, then an optional TOML file (`--config`), then
//! `SECKILL_*` environment variables (nested keys with `__`, e.g.
//! `SECKILL_RATE_LIMIT__PER_IP_PER_SEC`). Everything is checked at start-up so a bad value
//! stops the process before the first request, with a message naming the key.
//!
//! Reading is parsing: a value the rest of the program needs in a typed form arrives in it
//! (the database URL with its dialect, the client address header's name), and the
//! [`Deployment`] is decided here from `redis_url` and `amqp_url`, so no other module looks at
//! those strings again. This module names no backend: the typed values it hands out are
//! defined where the layering lets it import them (`store::DatabaseUrl`).

mod deployment;
mod links;
mod load;
mod payment;

use anyhow::bail;
use axum::http::HeaderName;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use subtle::ConstantTimeEq;

pub use crate::store::DatabaseUrl;
pub use deployment::{ClusterUrls, Deployment};
pub use links::{Link, Protection, RedisTlsFiles};
pub use load::{FILE_VARIABLE, Report, Source};
pub use payment::{AlipayConfig, KeySource, PaymentConfig, ProviderKind};

/// The largest batch: one transaction, one RabbitMQ prefetch window, one outbox read.
pub const MAX_BATCH: usize = 4_096;

/// Most replicas a buy may wait for (`redis_wait_replicas`): more than any Redis deployment
/// runs per master.
const MAX_WAIT_REPLICAS: u32 = 16;

/// Longest wait for the replicas (`redis_wait_timeout_ms`): a buy's answer waits this long at
/// most, so it stays well under a shopper's patience and the server's shutdown timeout.
const MAX_WAIT_TIMEOUT_MS: u64 = 10_000;

/// The largest backlog bound (`outbox_max_orders`, `commit_queue_max_orders`): ten million
/// orders of a few hundred bytes each is already gigabytes of memory.
pub const MAX_BACKLOG: u64 = 10_000_000;

/// The largest `max_image_bytes`: an upload is held whole in memory and sent to the database
/// in one packet, and MariaDB refuses packets over 16 MiB unless told otherwise.
pub const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;

/// The most leading zero bits the guard's puzzle may ask for: 2^32 hashes is hours on a phone.
pub const MAX_CHALLENGE_DIFFICULTY: u8 = 32;

/// The longest a buy token may be handed out before a sale, or stay valid: a day.
const MAX_GUARD_SECS: u64 = 24 * 3600;

/// The longest duration a setting may name (ten years): every duration becomes milliseconds
/// added to a Unix time, which must stay far inside an `i64`.
pub const MAX_DURATION_SECS: u64 = 10 * 365 * 24 * 3600;

/// The whole configuration of one process.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the HTTP server listens (`SECKILL_HTTP_ADDR`).
    pub http_addr: SocketAddr,
    /// The database (`SECKILL_DATABASE_URL`): `sqlite://PATH`, `postgres://…` or
    /// `mysql://…` (MySQL and MariaDB). Parsed on reading, so it carries its dialect.
    #[serde(
        deserialize_with = "database_url",
        serialize_with = "database_url_text"
    )]
    pub database_url: DatabaseUrl,
    /// Most connections this process opens to the database
    /// (`SECKILL_DATABASE_MAX_CONNECTIONS`); unset, 8 for SQLite and 16 for servers.
    pub database_max_connections: Option<u32>,
    /// Redis for the stock gate (`SECKILL_REDIS_URL`, e.g. `redis://127.0.0.1:6379`, a Sentinel
    /// group's `redis+sentinel://HOST:26379,HOST:26379/MASTER_NAME` or a cluster's
    /// `redis+cluster://HOST:PORT,…`, each `rediss` for TLS): shared by every server process.
    /// Unset, the gate lives in the process (embedded mode).
    pub redis_url: Option<String>,
    /// Prefix of every Redis key (`SECKILL_REDIS_KEY_PREFIX`), so deployments can share a Redis.
    pub redis_key_prefix: String,
    /// Replicas of the Redis master that must have a buy before it is answered `202`
    /// (`SECKILL_REDIS_WAIT_REPLICAS`, 0 to 16): after each batch's buy script the master is
    /// asked to `WAIT` for them, and buys they did not acknowledge within
    /// `redis_wait_timeout_ms` are answered `503 unconfirmed`, so an accepted order survives a
    /// failover to a replica. 0: answered once the master has it, as a single Redis without
    /// replicas must be.
    pub redis_wait_replicas: u32,
    /// How long one `WAIT` for the replicas may take (`SECKILL_REDIS_WAIT_TIMEOUT_MS`, 1 to
    /// 10,000): the longest a buy waits for them before it is answered `503 unconfirmed`.
    pub redis_wait_timeout_ms: u64,
    /// The private CA (PEM) that signed a `rediss://` Redis's certificates
    /// (`SECKILL_REDIS_CA_FILE`). Unset, the system's roots are trusted, as for a managed Redis.
    pub redis_ca_file: Option<PathBuf>,
    /// The certificate chain (PEM) this process shows a `rediss://` Redis that asks for one
    /// (`SECKILL_REDIS_CLIENT_CERT_FILE`, with `redis_client_key_file`).
    pub redis_client_cert_file: Option<PathBuf>,
    /// The private key (PEM) of `redis_client_cert_file` (`SECKILL_REDIS_CLIENT_KEY_FILE`).
    pub redis_client_key_file: Option<PathBuf>,
    /// RabbitMQ (`SECKILL_AMQP_URL`, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`): the
    /// outbox is relayed to its order queue, and deadlines run through its delay queue. Unset,
    /// workers store orders straight from the Redis outbox stream.
    pub amqp_url: Option<String>,
    /// Prefix of every RabbitMQ exchange and queue name (`SECKILL_AMQP_PREFIX`).
    pub amqp_prefix: String,
    /// A private CA (PEM) that signed an `amqps://` RabbitMQ's certificate
    /// (`SECKILL_AMQP_CA_FILE`), trusted besides the system's roots.
    pub amqp_ca_file: Option<PathBuf>,
    /// Delete this deployment's RabbitMQ queues after they go unused this long
    /// (`SECKILL_AMQP_QUEUE_EXPIRY_SECS`): for test runs and other throwaway deployments only,
    /// since the delay queue has no consumers and expires with every deadline in it.
    pub amqp_queue_expiry_secs: Option<u64>,
    /// Declare this deployment's RabbitMQ queues as quorum queues (`SECKILL_AMQP_QUORUM_QUEUES`),
    /// replicated over the nodes of a RabbitMQ cluster (3.10 or later: the delay queue needs
    /// their message TTL), instead of classic queues, which live on one node. A queue's type
    /// is fixed when it is first declared: switching a deployment needs a new `amqp_prefix`.
    pub amqp_quorum_queues: bool,
    /// `seckill serve` also runs the worker's consumers (`SECKILL_RUN_WORKER`, or
    /// `serve --worker`). Cluster mode only: embedded mode has no separate consumers.
    pub run_worker: bool,
    /// Set by `serve --demo`, never by a file or the environment: the pages show the demo
    /// shoppers' sign-in.
    #[serde(skip)]
    pub demo: bool,
    /// An outbox entry that a worker took but did not hand on within this time is taken over by
    /// another worker (`SECKILL_CLAIM_AFTER_MS`): how long a dead worker's orders wait. (A dead
    /// worker's RabbitMQ messages go back to the queue at once, when its connection drops.)
    pub claim_after_ms: u64,
    /// Key that signs session tokens (`SECKILL_SECRET`, at least 32 bytes). Unset, a random
    /// one is generated on first start and kept in the database.
    pub secret: Option<Secret>,
    /// Bearer token of the admin API (`SECKILL_ADMIN_TOKEN`, at least 16 bytes). Unset, one is
    /// generated on first start, kept in the database and printed once.
    pub admin_token: Option<Secret>,
    /// How long a buyer has to pay before the order is cancelled (`SECKILL_PAYMENT_WINDOW_SECS`).
    pub payment_window_secs: u64,
    /// Units one user may hold of a product, unless the product says otherwise
    /// (`SECKILL_PER_USER_LIMIT`).
    pub per_user_limit: u32,
    /// This process's Snowflake node id, unique among processes sharing a database
    /// (`SECKILL_NODE_ID`, 0–1023). Unset: leased from Redis when there is one, else 0.
    pub node_id: Option<u16>,
    /// Lifetime of a session token (`SECKILL_SESSION_TTL_SECS`).
    pub session_ttl_secs: u64,
    /// Products are loaded into the stock gate this long before their sale starts
    /// (`SECKILL_PREHEAT_SECS`).
    pub preheat_secs: u64,
    /// Largest request body accepted (`SECKILL_MAX_BODY_BYTES`).
    pub max_body_bytes: usize,
    /// Largest product image an operator may upload (`SECKILL_MAX_IMAGE_BYTES`), at most
    /// [`MAX_IMAGE_BYTES`]; the upload routes take bodies this large instead of
    /// `max_body_bytes`.
    pub max_image_bytes: usize,
    /// Most orders written in one transaction, by group commit or a worker
    /// (`SECKILL_MAX_BATCH`). Group commit rarely fills a batch; a worker draining a backlog
    /// does, and larger batches spread each commit over more orders.
    pub max_batch: usize,
    /// Most accepted orders one product's outbox may hold before its buys are refused
    /// (`SECKILL_OUTBOX_MAX_ORDERS`), cluster mode: orders sold but not in the database yet,
    /// whether they wait in Redis or in RabbitMQ. Past it a buy gets `503 backlog_full` with
    /// `Retry-After` and nothing is taken, so a stalled database or worker costs Redis at most
    /// this many orders a product instead of growing until Redis runs out of memory.
    pub outbox_max_orders: u64,
    /// Most orders waiting for the group commit (`SECKILL_COMMIT_QUEUE_MAX_ORDERS`), embedded
    /// mode: past it a buy gets `503 backlog_full` with `Retry-After` and its units go back on
    /// sale, so a slow database pushes back on buyers instead of growing memory.
    pub commit_queue_max_orders: usize,
    /// Mark the session cookie `Secure` (serve over HTTPS) (`SECKILL_SECURE_COOKIES`).
    pub secure_cookies: bool,
    /// Behind a reverse proxy: the header it puts the client address in, e.g.
    /// `X-Forwarded-For` (`SECKILL_CLIENT_IP_HEADER`). Its last value is used. Unset, the TCP
    /// peer is the client; never set it without a proxy, or clients choose their own address.
    /// Parsed on reading, so each request looks the header up without checking its name.
    #[serde(deserialize_with = "header_name", serialize_with = "header_name_text")]
    pub client_ip_header: Option<HeaderName>,
    /// Request throttling (`SECKILL_RATE_LIMIT__*`).
    pub rate_limit: RateLimitConfig,
    /// Guarded sales' buy tokens and puzzles (`SECKILL_GUARD__*`).
    pub guard: GuardConfig,
    /// Where buyers' browsers and the payment provider reach this server
    /// (`SECKILL_PUBLIC_URL`, e.g. `https://shop.example`): the base of the notify and return
    /// URLs. Unset, the address `serve` listens on.
    pub public_url: Option<String>,
    /// Who takes the money (`SECKILL_PAYMENT__*`).
    pub payment: PaymentConfig,
    /// The shop's Alipay app (`SECKILL_ALIPAY__*`), for `payment.provider = "alipay"`.
    pub alipay: AlipayConfig,
    /// How log lines are written (`SECKILL_LOG_FORMAT`): `text` for people, `json` for a log
    /// collector.
    pub log_format: LogFormat,
    /// After SIGTERM or SIGINT, how long the server goes on serving while `/readyz` answers
    /// `503 draining` (`SECKILL_SHUTDOWN_GRACE_SECS`; 0 allowed), so load balancers stop
    /// sending it requests before it stops accepting them. A second signal skips it.
    pub shutdown_grace_secs: u64,
    /// Once the server stops accepting, how long the requests in progress may take to finish
    /// (`SECKILL_SHUTDOWN_TIMEOUT_SECS`); then their connections are closed, so no client
    /// holds the process.
    pub shutdown_timeout_secs: u64,
    /// Where `seckill worker` serves `/healthz`, `/readyz` and `/metrics`
    /// (`SECKILL_WORKER_ADDR`, or `worker --addr`). Unset, the worker listens nowhere.
    pub worker_addr: Option<SocketAddr>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One readable line per event, colored on a terminal.
    #[default]
    Text,
    /// One JSON object per line, its fields as keys.
    Json,
}

/// Request limits. A buyer clicking "buy" a few times a second is human; hundreds is a bot. A
/// rate with a burst allows the burst at once and then the rate; in cluster mode every limit is
/// shared by the servers, counted in Redis.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Buy attempts per second per user.
    pub per_user_per_sec: u32,
    /// Extra attempts a user may make at once.
    pub per_user_burst: u32,
    /// Requests per second per client IP address: buys, sign-ins, registrations, and the
    /// admin routes (counted apart). A shared office NAT is many users, so this is set far
    /// above the per-user limit.
    pub per_ip_per_sec: u32,
    /// Extra requests one address may make at once.
    pub per_ip_burst: u32,
    /// Order reads, pay and cancel requests per second per user.
    pub orders_per_user_per_sec: u32,
    /// Extra such requests a user may make at once.
    pub orders_per_user_burst: u32,
    /// Buys of one sale event per second, by everybody together (a product without an event
    /// is a sale of its own): what the stock gate is asked to take.
    pub per_event_per_sec: u32,
    /// Accounts one client address may register in an hour
    /// (`SECKILL_RATE_LIMIT__REGISTRATIONS_PER_IP_PER_HOUR`).
    pub registrations_per_ip_per_hour: u32,
    /// Accounts registered in an hour from all addresses together, so a botnet of addresses
    /// cannot make accounts without end.
    pub registrations_per_hour: u32,
}

/// What guarded sales ask of buyers: when buy tokens are handed out and how long they last,
/// and how hard the proof-of-work puzzle is.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GuardConfig {
    /// Buy tokens of a guarded sale are handed out from this long before its start
    /// (`SECKILL_GUARD__TOKEN_LEAD_SECS`): the page fetches one during the countdown, so the
    /// buy button works the second the sale opens.
    pub token_lead_secs: u64,
    /// A buy token is valid this long after the sale's start, or after it was handed out once
    /// the sale runs (`SECKILL_GUARD__TOKEN_TTL_SECS`).
    pub token_ttl_secs: u64,
    /// Leading zero bits the proof-of-work puzzle asks for (`SECKILL_GUARD__CHALLENGE_DIFFICULTY`,
    /// at most [`MAX_CHALLENGE_DIFFICULTY`]): each bit doubles the work of every buyer, and of
    /// every bot.
    pub challenge_difficulty: u8,
    /// Registering an account needs a solved puzzle too
    /// (`SECKILL_GUARD__REGISTRATION_CHALLENGE`).
    pub registration_challenge: bool,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            token_lead_secs: 60,
            token_ttl_secs: 60,
            challenge_difficulty: 17,
            registration_challenge: false,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database_url: "sqlite://seckill.db"
                .parse()
                .expect("the default database URL is a SQLite URL"),
            database_max_connections: None,
            redis_url: None,
            redis_key_prefix: "seckill:".into(),
            redis_wait_replicas: 0,
            redis_wait_timeout_ms: 100,
            redis_ca_file: None,
            redis_client_cert_file: None,
            redis_client_key_file: None,
            amqp_ca_file: None,
            secret: None,
            admin_token: None,
            payment_window_secs: 15 * 60,
            per_user_limit: 1,
            node_id: None,
            amqp_url: None,
            amqp_prefix: "seckill.".into(),
            amqp_queue_expiry_secs: None,
            amqp_quorum_queues: false,
            run_worker: false,
            demo: false,
            claim_after_ms: 15_000,
            session_ttl_secs: 7 * 24 * 3600,
            preheat_secs: 300,
            max_body_bytes: 16 * 1024,
            max_image_bytes: 2 * 1024 * 1024,
            max_batch: 2_048,
            outbox_max_orders: 100_000,
            commit_queue_max_orders: 16_384,
            secure_cookies: false,
            client_ip_header: None,
            rate_limit: RateLimitConfig::default(),
            guard: GuardConfig::default(),
            public_url: None,
            payment: PaymentConfig::default(),
            alipay: AlipayConfig::default(),
            log_format: LogFormat::default(),
            shutdown_grace_secs: 5,
            shutdown_timeout_secs: 10,
            worker_addr: None,
        }
    }
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            per_user_per_sec: 5,
            per_user_burst: 10,
            per_ip_per_sec: 200,
            per_ip_burst: 400,
            orders_per_user_per_sec: 10,
            orders_per_user_burst: 20,
            per_event_per_sec: 100_000,
            registrations_per_ip_per_hour: 5,
            registrations_per_hour: 2_000,
        }
    }
}

impl Config {
    /// Rejects values that would only fail later, at the worst moment.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(secret) = &self.secret
            && secret.0.len() < 32
        {
            bail!("secret (SECKILL_SECRET) must be at least 32 bytes");
        }
        if let Some(token) = &self.admin_token
            && token.0.len() < 16
        {
            bail!("admin_token (SECKILL_ADMIN_TOKEN) must be at least 16 bytes");
        }
        if self.database_max_connections == Some(0) {
            bail!("database_max_connections must be positive");
        }
        if self.payment_window_secs == 0 {
            bail!("payment_window_secs must be positive");
        }
        if self.per_user_limit == 0 {
            bail!("per_user_limit must be at least 1");
        }
        if self.node_id.is_some_and(|id| id > crate::ids::MAX_NODE_ID) {
            bail!("node_id must be at most {}", crate::ids::MAX_NODE_ID);
        }
        if self.max_batch == 0 || self.max_body_bytes == 0 || self.session_ttl_secs == 0 {
            bail!("max_batch, max_body_bytes and session_ttl_secs must be positive");
        }
        if !(1..=MAX_IMAGE_BYTES).contains(&self.max_image_bytes) {
            bail!("max_image_bytes must be 1 to {MAX_IMAGE_BYTES}");
        }
        if self.max_batch > MAX_BATCH {
            bail!("max_batch must be at most {MAX_BATCH}");
        }
        if self.redis_wait_replicas > MAX_WAIT_REPLICAS {
            bail!(
                "redis_wait_replicas (SECKILL_REDIS_WAIT_REPLICAS) must be 0 to {MAX_WAIT_REPLICAS}"
            );
        }
        if !(1..=MAX_WAIT_TIMEOUT_MS).contains(&self.redis_wait_timeout_ms) {
            bail!(
                "redis_wait_timeout_ms (SECKILL_REDIS_WAIT_TIMEOUT_MS) must be 1 to {MAX_WAIT_TIMEOUT_MS}"
            );
        }
        if !(1..=MAX_BACKLOG).contains(&self.outbox_max_orders) {
            bail!("outbox_max_orders (SECKILL_OUTBOX_MAX_ORDERS) must be 1 to {MAX_BACKLOG}");
        }
        if !(1..=MAX_BACKLOG as usize).contains(&self.commit_queue_max_orders) {
            bail!(
                "commit_queue_max_orders (SECKILL_COMMIT_QUEUE_MAX_ORDERS) must be 1 to {MAX_BACKLOG}"
            );
        }
        if let (Deployment::Embedded, Some(_)) = (self.deployment(), &self.amqp_url) {
            bail!("amqp_url (SECKILL_AMQP_URL) needs redis_url: RabbitMQ carries the Redis outbox");
        }
        if let (Deployment::Embedded, 1..) = (self.deployment(), self.redis_wait_replicas) {
            bail!(
                "redis_wait_replicas (SECKILL_REDIS_WAIT_REPLICAS) needs redis_url: without Redis, \
                 a buy is answered once its group commit is in the database"
            );
        }
        self.validate_tls()?;
        if self.claim_after_ms == 0 {
            bail!("claim_after_ms must be positive");
        }
        for (name, secs) in [
            ("payment_window_secs", Some(self.payment_window_secs)),
            ("session_ttl_secs", Some(self.session_ttl_secs)),
            ("preheat_secs", Some(self.preheat_secs)),
            ("amqp_queue_expiry_secs", self.amqp_queue_expiry_secs),
            ("claim_after_ms", Some(self.claim_after_ms / 1000)),
            ("shutdown_grace_secs", Some(self.shutdown_grace_secs)),
            ("shutdown_timeout_secs", Some(self.shutdown_timeout_secs)),
        ] {
            if secs.is_some_and(|secs| secs > MAX_DURATION_SECS) {
                bail!("{name} must be at most ten years");
            }
        }
        if let Some(url) = &self.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("public_url (SECKILL_PUBLIC_URL) must start with http:// or https://");
        }
        if self.payment.provider == Some(ProviderKind::Alipay) {
            if self.alipay.app_id.as_deref().is_none_or(str::is_empty) {
                bail!("payment.provider = alipay needs alipay.app_id (SECKILL_ALIPAY__APP_ID)");
            }
            if self.public_url.is_none() {
                bail!(
                    "payment.provider = alipay needs public_url (SECKILL_PUBLIC_URL): \
                     Alipay sends its notifications there"
                );
            }
            self.alipay.private_key_source()?;
            self.alipay.alipay_public_key_source()?;
        }
        let r = &self.rate_limit;
        if [
            r.per_user_per_sec,
            r.per_ip_per_sec,
            r.orders_per_user_per_sec,
            r.per_event_per_sec,
            r.registrations_per_ip_per_hour,
            r.registrations_per_hour,
        ]
        .contains(&0)
        {
            bail!("rate limits (rate_limit.*) must be positive");
        }
        let g = &self.guard;
        if g.token_lead_secs > MAX_GUARD_SECS || !(1..=MAX_GUARD_SECS).contains(&g.token_ttl_secs) {
            bail!(
                "guard.token_lead_secs must be at most {MAX_GUARD_SECS}, and guard.token_ttl_secs \
                 1 to {MAX_GUARD_SECS}"
            );
        }
        if g.challenge_difficulty > MAX_CHALLENGE_DIFFICULTY {
            bail!("guard.challenge_difficulty must be at most {MAX_CHALLENGE_DIFFICULTY}");
        }
        Ok(())
    }
}

/// Reads `database_url`, naming the setting when its scheme is not a supported database.
fn database_url<'de, D: Deserializer<'de>>(value: D) -> Result<DatabaseUrl, D::Error> {
    let text = String::deserialize(value)?;
    DatabaseUrl::try_from(text).map_err(|e| {
        serde::de::Error::custom(format!("database_url (SECKILL_DATABASE_URL): {e:#}"))
    })
}

fn database_url_text<S: Serializer>(url: &DatabaseUrl, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(url.as_str())
}

/// Reads `client_ip_header`, naming the setting when it is not a header name.
fn header_name<'de, D: Deserializer<'de>>(value: D) -> Result<Option<HeaderName>, D::Error> {
    let text = String::deserialize(value)?;
    HeaderName::try_from(text).map(Some).map_err(|_| {
        serde::de::Error::custom(
            "client_ip_header (SECKILL_CLIENT_IP_HEADER) is not a valid header name",
        )
    })
}

fn header_name_text<S: Serializer>(name: &Option<HeaderName>, out: S) -> Result<S::Ok, S::Error> {
    match name {
        Some(name) => out.serialize_some(name.as_str()),
        None => out.serialize_none(),
    }
}

/// A secret value: never printed, compared in constant time.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

/// Written as a mark, never the value, so a configuration shown whole shows no secret.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(REDACTED)
    }
}

/// What a secret is written as.
pub const REDACTED: &str = "(secret)";

impl Secret {
    /// Wraps a secret read from storage or generated.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The secret itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares with a presented value without leaking where they differ through timing.
    pub fn matches(&self, presented: &str) -> bool {
        self.0.as_bytes().ct_eq(presented.as_bytes()).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn a_short_secret_is_refused_at_start_up() {
        let config = Config {
            secret: Some(Secret::new("short".into())),
            ..Config::default()
        };
        assert!(config.validate().is_err());
    }

    #[test]
    fn the_image_limit_is_positive_and_at_most_what_the_databases_take() {
        let with = |max_image_bytes| {
            Config {
                max_image_bytes,
                ..Config::default()
            }
            .validate()
        };
        with(1).unwrap();
        with(MAX_IMAGE_BYTES).unwrap();
        assert!(with(0).is_err());
        assert!(with(MAX_IMAGE_BYTES + 1).is_err());
    }

    #[test]
    fn the_backlog_bounds_are_positive_and_at_most_the_largest() {
        let with = |outbox_max_orders, commit_queue_max_orders| {
            Config {
                outbox_max_orders,
                commit_queue_max_orders,
                ..Config::default()
            }
            .validate()
        };
        with(1, 1).unwrap();
        with(MAX_BACKLOG, MAX_BACKLOG as usize).unwrap();
        assert!(with(0, 1).is_err());
        assert!(with(1, 0).is_err());
        assert!(with(MAX_BACKLOG + 1, 1).is_err());
        assert!(with(1, MAX_BACKLOG as usize + 1).is_err());
    }

    #[test]
    fn waiting_for_redis_replicas_is_bounded_and_needs_redis() {
        let with = |redis_url: Option<&str>, redis_wait_replicas, redis_wait_timeout_ms| {
            Config {
                redis_url: redis_url.map(str::to_owned),
                redis_wait_replicas,
                redis_wait_timeout_ms,
                ..Config::default()
            }
            .validate()
        };
        let redis = Some("redis://127.0.0.1:6379");
        with(redis, MAX_WAIT_REPLICAS, MAX_WAIT_TIMEOUT_MS).unwrap();
        with(None, 0, 1).unwrap();
        assert!(with(redis, MAX_WAIT_REPLICAS + 1, 100).is_err());
        assert!(with(redis, 1, 0).is_err());
        assert!(with(redis, 1, MAX_WAIT_TIMEOUT_MS + 1).is_err());
        let embedded = with(None, 1, 100).unwrap_err().to_string();
        assert!(embedded.contains("needs redis_url"), "{embedded}");
    }

    #[test]
    fn the_guard_settings_are_bounded() {
        let with = |edit: fn(&mut GuardConfig)| {
            let mut config = Config::default();
            edit(&mut config.guard);
            config.validate()
        };
        with(|g| g.challenge_difficulty = MAX_CHALLENGE_DIFFICULTY).unwrap();
        with(|g| (g.token_lead_secs, g.token_ttl_secs) = (0, MAX_GUARD_SECS)).unwrap();
        assert!(with(|g| g.challenge_difficulty = MAX_CHALLENGE_DIFFICULTY + 1).is_err());
        assert!(with(|g| g.token_ttl_secs = 0).is_err());
        assert!(with(|g| g.token_ttl_secs = MAX_GUARD_SECS + 1).is_err());
        assert!(with(|g| g.token_lead_secs = u64::MAX).is_err());
    }

    #[test]
    fn alipay_needs_its_app_id_its_keys_and_a_public_url_at_start_up() {
        let alipay = |edit: fn(&mut Config)| {
            let mut config = Config::default();
            config.payment.provider = Some(ProviderKind::Alipay);
            config.public_url = Some("https://shop.example".into());
            config.alipay.app_id = Some("2021000000000001".into());
            config.alipay.private_key = Some(Secret::new("key".into()));
            config.alipay.alipay_public_key = Some("key".into());
            edit(&mut config);
            config.validate()
        };
        alipay(|_| {}).unwrap();
        for (why, edit) in [
            ("no app id", (|c| c.alipay.app_id = None) as fn(&mut Config)),
            ("no public url", |c| c.public_url = None),
            ("a relative public url", |c| {
                c.public_url = Some("shop.example".into())
            }),
            ("no private key", |c| c.alipay.private_key = None),
            ("two private keys", |c| {
                c.alipay.private_key_file = Some("app_key.pem".into())
            }),
            ("no Alipay key", |c| c.alipay.alipay_public_key = None),
        ] {
            assert!(alipay(edit).is_err(), "{why}");
        }
    }

    #[test]
    fn the_provider_is_read_by_name_and_an_unknown_one_is_refused() {
        let read = |text: &str| -> Result<PaymentConfig, _> {
            config::Config::builder()
                .add_source(config::File::from_str(text, config::FileFormat::Toml))
                .build()
                .and_then(|c| c.get::<PaymentConfig>("payment"))
        };
        let provider = |text| read(text).unwrap().provider;
        assert_eq!(
            provider("[payment]\nprovider = \"sandbox\""),
            Some(ProviderKind::Sandbox)
        );
        assert_eq!(
            provider("[payment]\nprovider = \"alipay\""),
            Some(ProviderKind::Alipay)
        );
        assert!(read("[payment]\nprovider = \"paypal\"").is_err());
    }

    #[test]
    fn the_log_format_is_read_by_name_and_an_unknown_one_is_refused() {
        let read = |text: &str| {
            config::Config::builder()
                .add_source(config::File::from_str(text, config::FileFormat::Toml))
                .build()
                .and_then(|c| c.try_deserialize::<Config>())
        };
        assert_eq!(read("").unwrap().log_format, LogFormat::Text);
        assert_eq!(
            read("log_format = \"json\"").unwrap().log_format,
            LogFormat::Json
        );
        assert!(read("log_format = \"xml\"").is_err());
    }

    #[test]
    fn the_registration_limit_is_read_from_its_variable() {
        let variables = [("SECKILL_RATE_LIMIT__REGISTRATIONS_PER_IP_PER_HOUR", "3")];
        let variables = variables.map(|(k, v)| (k.to_owned(), v.to_owned()));
        let config: Config = config::Config::builder()
            .add_source(load::environment(variables.into_iter().collect()))
            .build()
            .and_then(|c| c.try_deserialize())
            .unwrap();
        assert_eq!(config.rate_limit.registrations_per_ip_per_hour, 3);
        assert_eq!(
            Config::default().rate_limit.registrations_per_ip_per_hour,
            5
        );
    }

    #[test]
    fn secrets_compare_exactly_and_never_print() {
        let s = Secret::new("admin-token-123456".into());
        assert!(s.matches("admin-token-123456"));
        assert!(!s.matches("admin-token-12345"));
        assert!(!s.matches("admin-token-123457"));
        assert_eq!(format!("{s:?}"), "Secret(***)");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// The configuration a TOML text and `SECKILL_*` variables make, as [`Config::load`]
        /// reads a file and the environment.
        fn read(toml: &str, variables: Vec<(String, String)>) -> anyhow::Result<Config> {
            let variables = variables.into_iter().collect();
            Config::read(
                config::Config::builder()
                    .add_source(config::File::from_str(toml, config::FileFormat::Toml))
                    .add_source(load::environment(variables)),
            )
        }

        /// Settings of each kind: numbers that must be positive or bounded, text, addresses,
        /// nested tables.
        const KEYS: [&str; 16] = [
            "payment_window_secs",
            "session_ttl_secs",
            "preheat_secs",
            "claim_after_ms",
            "amqp_queue_expiry_secs",
            "max_batch",
            "max_body_bytes",
            "max_image_bytes",
            "per_user_limit",
            "node_id",
            "database_max_connections",
            "http_addr",
            "public_url",
            "client_ip_header",
            "rate_limit.per_ip_per_sec",
            "guard.challenge_difficulty",
        ];

        /// A TOML value of any type, shaped to hit the bounds.
        fn toml_value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                prop::sample::select(vec!["0", "-1", "1", "18446744073709551615", "1e400", "1.5"])
                    .prop_map(str::to_owned),
                ".{0,12}".prop_map(|s| format!("{s:?}")),
                any::<bool>().prop_map(|b| b.to_string()),
                Just("[1, 2]".to_owned()),
            ]
        }

        fn variable() -> impl Strategy<Value = (String, String)> {
            let name = prop::sample::select(KEYS.to_vec())
                .prop_map(|key| format!("SECKILL_{}", key.replace('.', "__").to_uppercase()));
            (
                name,
                prop_oneof![any::<u64>().prop_map(|n| n.to_string()), ".{0,12}"],
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Whatever a file and the environment say, reading them never panics: it makes a
            /// configuration whose durations fit in milliseconds of an `i64` after any Unix
            /// time, or refuses with a message.
            #[test]
            fn any_file_and_environment_make_a_sound_configuration_or_a_message(
                settings in prop::collection::vec((prop::sample::select(KEYS.to_vec()), toml_value()), 0..4),
                garbage in ".{0,40}",
                with_garbage in any::<bool>(),
                variables in prop::collection::vec(variable(), 0..3),
            ) {
                let mut toml = String::new();
                for (key, value) in &settings {
                    match key.split_once('.') {
                        Some((table, key)) => toml.push_str(&format!("[{table}]\n{key} = {value}\n")),
                        None => toml.insert_str(0, &format!("{key} = {value}\n")),
                    }
                }
                if with_garbage {
                    toml.push_str(&garbage);
                }
                match read(&toml, variables) {
                    Ok(config) => {
                        let year_9999 = 253_402_300_799_000i64;
                        for secs in [config.payment_window_secs, config.session_ttl_secs, config.preheat_secs] {
                            prop_assert!(i64::try_from(secs * 1000).is_ok_and(|ms| ms.checked_add(year_9999).is_some()));
                        }
                        prop_assert!(config.validate().is_ok());
                    }
                    Err(e) => {
                        let message = format!("{e:#}");
                        prop_assert!(!message.trim().is_empty());
                    }
                }
            }

            /// A duration too long to add to a time is refused, naming its setting.
            #[test]
            fn a_duration_past_ten_years_is_refused_by_name(
                key in prop::sample::select(KEYS[..4].to_vec()),
                secs in MAX_DURATION_SECS + 1..=i64::MAX as u64 / 1000,
            ) {
                let value = if key.ends_with("_ms") { secs * 1000 } else { secs };
                let refused = read(&format!("{key} = {value}"), Vec::new()).unwrap_err();
                let message = format!("{refused:#}");
                prop_assert!(message.contains(key), "{}", message);
            }
        }
    }
}
