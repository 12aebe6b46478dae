//! Wiring: reads the configuration, builds the backends, hands out the [`AppState`]. The only
//! module that names concrete backends.

use crate::auth::TokenSigner;
use crate::auth::extract::AuthKeys;
use crate::clock::SharedClock;
use crate::config::{Config, Secret};
use crate::gate::StockGate;
use crate::gate::memory::MemoryGate;
use crate::gate::redis::RedisGate;
use crate::http::AppState;
use crate::http::rate_limit::RateLimits;
use crate::ids::Snowflake;
use crate::lease;
use crate::pipeline::amqp::Topology;
use crate::pipeline::amqp::payments::AmqpPayments;
use crate::pipeline::amqp::publisher::Publisher;
use crate::pipeline::leader::Leadership;
use crate::pipeline::ticker;
use crate::pipeline::worker::{Worker, WorkerParts};
use crate::redis_link::RedisLink;
use crate::sale::{SaleService, SaleSettings};
use crate::store::Store;
use crate::store::sql::SqlStore;
use anyhow::Context;
use argon2::password_hash::rand_core::{OsRng, RngCore};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Opens the store, loading its schema, and nothing else: for `migrate` and `demo`.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let store = SqlStore::connect(&config.database_url, config.database_max_connections)
        .await
        .with_context(|| {
            format!(
                "opening the database {}",
                crate::redact::url(&config.database_url)
            )
        })?;
    Ok(Arc::new(store))
}

fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the generated session-signing secret is kept in the database.
pub(crate) const TOKEN_SECRET: &str = "token_secret";
/// Where the generated admin token is kept in the database.
pub(crate) const ADMIN_TOKEN: &str = "admin_token";

/// The configured secret, or the one generated on first start and kept in the database.
/// Returns whether this call generated it.
pub(crate) async fn secret_setting(
    store: &dyn Store,
    configured: Option<&Secret>,
    key: &str,
) -> anyhow::Result<(Secret, bool)> {
    if let Some(secret) = configured {
        return Ok((secret.clone(), false));
    }
    let proposed = random_secret();
    let stored = store.setting_or_insert(key, &proposed).await?;
    let generated = stored == proposed;
    Ok((Secret::new(stored), generated))
}

/// The parts every seckill process has, whether it serves HTTP or only works the pipeline:
/// the store, the sale service over the stock gate, and (once started) the scheduler.
pub struct Core {
    pub store: Arc<dyn Store>,
    pub sale: Arc<SaleService>,
    /// The shared Redis, in cluster mode.
    redis: Option<RedisLink>,
    node_id: u16,
    /// RabbitMQ's address and names, in cluster mode with RabbitMQ.
    amqp: Option<(String, Topology)>,
    leadership: Option<Leadership>,
    /// Tells the scheduler to stop between steps.
    stop: watch::Sender<bool>,
    scheduler: Option<JoinHandle<()>>,
    lease: Option<JoinHandle<()>>,
}

impl Core {
    /// Builds every backend from `config` and rebuilds the stock gate from the database.
    pub async fn build(config: &Config, clock: SharedClock) -> anyhow::Result<Self> {
        config.validate()?;
        let store = open_store(config).await?;
        let redis = match &config.redis_url {
            Some(url) => {
                let redis = crate::redis_link::connect(url).await?;
                crate::gate::redis::warn_unless_durable(&redis).await;
                Some(redis)
            }
            None => None,
        };
        let (node_id, lease) = match (config.node_id, &redis) {
            (Some(id), _) => (id, None),
            (None, Some(redis)) => {
                let lease = lease::acquire(redis.clone(), &config.redis_key_prefix, || {
                    // Another process may now make the same order ids: stop at once.
                    eprintln!("error: the Snowflake node id lease was lost; exiting");
                    std::process::exit(70);
                })
                .await?;
                (lease.node_id, Some(lease.renewal))
            }
            (None, None) => (0, None),
        };
        let ids = Snowflake::new(node_id, clock.clone())?;
        let (gate, leadership): (Arc<dyn StockGate>, _) = match &redis {
            Some(redis) => (
                Arc::new(RedisGate::new(redis.clone(), &config.redis_key_prefix)),
                Leadership::shared(redis.clone(), &config.redis_key_prefix),
            ),
            None => (Arc::new(MemoryGate::new()), Leadership::Solo),
        };
        let sale = SaleService::start(
            store.clone(),
            gate,
            ids,
            clock,
            SaleSettings {
                payment_window_ms: (config.payment_window_secs * 1000) as i64,
                preheat_ms: (config.preheat_secs * 1000) as i64,
                default_per_user_limit: config.per_user_limit,
                max_batch: config.max_batch,
            },
        )
        .await
        .context("rebuilding the stock gate from the database")?;
        let amqp = config.amqp_url.as_ref().map(|url| {
            let topology = Topology::new(&config.amqp_prefix, config.payment_window_secs * 1000)
                .expiring(config.amqp_queue_expiry_secs.map(|s| s * 1000));
            (url.clone(), topology)
        });
        if let Some((url, topology)) = &amqp {
            let publisher = Publisher::new(url, topology.clone());
            sale.queue_payments_with(Arc::new(AmqpPayments(publisher)));
        }
        Ok(Self {
            store,
            sale,
            redis,
            node_id,
            amqp,
            leadership: Some(leadership),
            stop: watch::channel(false).0,
            scheduler: None,
            lease,
        })
    }

    /// Starts the scheduler: catalog refresh in this process, and preheat and the overdue
    /// sweep when this process leads.
    pub fn start_scheduler(&mut self) {
        if let Some(leadership) = self.leadership.take() {
            self.scheduler = Some(ticker::spawn(
                self.sale.clone(),
                leadership,
                Duration::from_secs(1),
                self.stop.subscribe(),
            ));
        }
    }

    /// Starts the pipeline's consumers in this process. In embedded mode there are none: the
    /// buy itself commits its order.
    pub async fn start_worker(&self, config: &Config) -> anyhow::Result<Option<Worker>> {
        let Some(redis) = &self.redis else {
            return Ok(None);
        };
        let worker = Worker::start(WorkerParts {
            sale: self.sale.clone(),
            store: self.store.clone(),
            redis: redis.clone(),
            redis_key_prefix: config.redis_key_prefix.clone(),
            name: format!("node-{}-pid-{}", self.node_id, std::process::id()),
            max_batch: config.max_batch,
            claim_after: Duration::from_millis(config.claim_after_ms),
            amqp: self.amqp.clone(),
        })
        .await?;
        Ok(Some(worker))
    }

    /// Lets the scheduler finish its step, then stops it and the node lease.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Some(scheduler) = self.scheduler {
            let _ = scheduler.await;
        }
        if let Some(lease) = self.lease {
            lease.abort();
        }
    }
}

/// A built server: the core, the HTTP state, and the worker when it runs here too.
pub struct App {
    core: Core,
    state: AppState,
    max_body_bytes: usize,
    /// Set when the admin token was generated by this start, so it can be shown once.
    generated_admin_token: Option<Secret>,
    worker: Option<Worker>,
    tasks: Vec<JoinHandle<()>>,
}

impl App {
    /// Builds every part from `config`, rebuilding the stock gate from the database. With
    /// `run_worker`, cluster mode's consumers run in this process too.
    pub async fn build(config: &Config, clock: SharedClock) -> anyhow::Result<Self> {
        let mut core = Core::build(config, clock.clone()).await?;
        core.start_scheduler();
        let store = core.store.clone();
        let (secret, _) = secret_setting(&*store, config.secret.as_ref(), TOKEN_SECRET).await?;
        let (admin_token, generated) =
            secret_setting(&*store, config.admin_token.as_ref(), ADMIN_TOKEN).await?;
        let worker = if config.run_worker {
            core.start_worker(config).await?
        } else {
            None
        };
        let limits = Arc::new(RateLimits::new(&config.rate_limit));
        let tasks = vec![spawn_forget_idle(limits.clone())];
        let state = AppState {
            sale: core.sale.clone(),
            store,
            auth: Arc::new(AuthKeys {
                tokens: TokenSigner::new(
                    secret.expose().as_bytes(),
                    (config.session_ttl_secs * 1000) as i64,
                ),
                admin_token: admin_token.clone(),
                clock,
            }),
            passwords: Arc::new(crate::auth::password::Hasher::per_core()?),
            limits,
            secure_cookies: config.secure_cookies,
            client_ip_header: config
                .client_ip_header
                .as_deref()
                .map(axum::http::HeaderName::try_from)
                .transpose()?,
        };
        Ok(Self {
            core,
            state,
            max_body_bytes: config.max_body_bytes,
            generated_admin_token: generated.then_some(admin_token),
            worker,
            tasks,
        })
    }

    /// The state handlers see; tests use it to reach the sale service directly.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The admin token, when this start generated it (first start without
    /// `SECKILL_ADMIN_TOKEN`): the operator must be told it once.
    pub fn generated_admin_token(&self) -> Option<&Secret> {
        self.generated_admin_token.as_ref()
    }

    /// Serves HTTP on `listener` until `shutdown` completes, then lets requests in flight
    /// finish (each buy answered only once its order is durable), lets a worker running here
    /// finish its batches, and stops the background tasks.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let router = crate::http::router(self.state.clone(), self.max_body_bytes);
        crate::http::serve::serve(listener, router, shutdown).await;
        if let Some(worker) = self.worker {
            worker.stop().await;
        }
        self.core.stop().await;
        for task in &self.tasks {
            task.abort();
        }
        Ok(())
    }
}

fn spawn_forget_idle(limits: Arc<RateLimits>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_secs(60));
        loop {
            interval.tick().await;
            limits.forget_idle();
        }
    })
}
