//! Wiring: builds the backends of the configuration's [`Deployment`] into a [`Mode`], and hands
//! out the [`AppState`]. The only module that names concrete backends.

mod cluster;
mod payments;
mod sessions;

use crate::auth::TokenSigner;
use crate::auth::guard::GuardSigner;
use crate::auth::revocation::RevokedSessions;
use crate::clock::SharedClock;
use crate::config::{Config, Deployment, Protection, Secret};
use crate::gate::memory::MemoryGate;
use crate::http::api::guard::Guards;
use crate::http::extract::AuthKeys;
use crate::http::images::Images;
use crate::http::rate_limit::RateLimits;
use crate::http::readiness::{Check, Readiness};
use crate::http::{AppParts, AppState};
use crate::ids::Snowflake;
use crate::limits::Limiter;
use crate::limits::local::LocalLimiter;
use crate::payment::PaymentProvider;
use crate::payment::sandbox::Sandbox;
use crate::pipeline::leader::Leadership;
use crate::pipeline::ticker;
use crate::pipeline::worker::Worker;
use crate::pipeline::{GroupCommit, Outboxed};
use crate::sale::{SaleParts, SaleService, SaleSettings};
use crate::store::Store;
use anyhow::Context;
use argon2::password_hash::rand_core::{OsRng, RngCore};
use cluster::Cluster;
use payments::Payments;
pub use payments::check_payment_keys;
use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Opens the store, loading its schema, and nothing else: for `migrate` and `demo`.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    crate::store::open(&config.database_url, config.database_max_connections)
        .await
        .with_context(|| format!("opening the database {}", config.database_url.redacted()))
}

/// Names every link to a backend server with its protection, once at start: one line each, a
/// warning unless it is TLS with the server's certificate verified.
fn log_links(config: &Config) {
    for link in config.links() {
        let (setting, url, protection) = (link.setting, link.shown, link.protection);
        if protection == Protection::Verified {
            tracing::info!(setting, %url, "backend link: {protection}");
        } else {
            tracing::warn!(setting, %url, "backend link: {protection}");
        }
    }
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

/// The deployment mode, chosen once from the configuration. It owns what differs between
/// modes: the stock gate, how an accepted order is made durable, where payments for orders still
/// on their way wait, who runs the scheduler, and the cluster's background tasks.
pub enum Mode {
    /// One process: the gate in memory, each order committed before its buyer is answered.
    Embedded {
        /// The writer thread that commits accepted orders in batches: this mode's durability.
        commit: GroupCommit,
    },
    /// Processes sharing Redis (and maybe RabbitMQ): see [`Cluster`]. Boxed: it holds the
    /// Redis link, the largest of which (a Sentinel group's) would make every `Mode` that size.
    Cluster(Box<Cluster>),
}

impl Mode {
    /// Connects to the servers the deployment names, or starts the embedded parts.
    async fn build(config: &Config, store: &Arc<dyn Store>) -> anyhow::Result<Self> {
        Ok(match config.deployment() {
            Deployment::Cluster(urls) => {
                Self::Cluster(Box::new(Cluster::connect(config, urls).await?))
            }
            Deployment::Embedded => Self::Embedded {
                commit: GroupCommit::start(
                    store.clone(),
                    config.max_batch,
                    config.commit_queue_max_orders,
                )?,
            },
        })
    }

    /// The Snowflake node id of this process: leased in a cluster, unless configured.
    fn node_id(&self, config: &Config) -> u16 {
        match self {
            Self::Embedded { .. } => config.node_id.unwrap_or(0),
            Self::Cluster(cluster) => cluster.node_id,
        }
    }

    /// The parts the sale rules work through.
    fn sale_parts(
        &self,
        store: Arc<dyn Store>,
        provider: Option<Arc<dyn PaymentProvider>>,
        ids: Snowflake,
        clock: SharedClock,
    ) -> SaleParts {
        match self {
            Self::Embedded { commit } => SaleParts {
                store,
                gate: Arc::new(MemoryGate::new()),
                durability: Arc::new(commit.clone()),
                payments: None,
                provider,
                fleet: None,
                ids,
                clock,
            },
            Self::Cluster(cluster) => SaleParts {
                store,
                gate: cluster.gate(),
                durability: Arc::new(Outboxed),
                payments: cluster.payment_queue(),
                provider,
                fleet: Some(cluster.fleet()),
                ids,
                clock,
            },
        }
    }

    /// What counts requests against the rate limits: this process alone, or every server
    /// through Redis.
    fn limiter(&self) -> Arc<dyn Limiter> {
        match self {
            Self::Embedded { .. } => Arc::new(LocalLimiter::default()),
            Self::Cluster(cluster) => cluster.limiter(),
        }
    }

    /// This process's claim on the scheduler.
    fn leadership(&self) -> Leadership {
        match self {
            Self::Embedded { .. } => Leadership::Solo,
            Self::Cluster(cluster) => cluster.leadership(),
        }
    }
}

/// The parts every seckill process has, whether it serves HTTP or only works the pipeline:
/// the store, the sale service over the mode's parts, and (once started) the scheduler.
pub struct Core {
    /// The database, the source of truth: the commands that only read or seed it (`migrate`,
    /// `demo`, `bench`) and the HTTP state share this one pool.
    pub store: Arc<dyn Store>,
    /// The sale rules over this mode's gate and durability: every buy, payment and
    /// operator change goes through it.
    pub sale: Arc<SaleService>,
    /// What differs between embedded and cluster mode; kept to start the worker and the
    /// scheduler's leadership from, and to stop the cluster's tasks last.
    mode: Mode,
    /// The built-in sandbox gateway, when it is the payment provider: its routes are served
    /// beside the shop's.
    sandbox: Option<Arc<Sandbox>>,
    /// Tells the scheduler to stop between steps.
    stop: watch::Sender<bool>,
    /// The running scheduler, awaited at [`Core::stop`] so its step in hand finishes; `None`
    /// until started (`reconcile` never starts it).
    scheduler: Option<JoinHandle<()>>,
}

impl Core {
    /// Builds every backend from `config` and rebuilds the stock gate from the database.
    pub async fn build(config: &Config, clock: SharedClock) -> anyhow::Result<Self> {
        config.validate()?;
        log_links(config);
        let store = open_store(config).await?;
        let mode = Mode::build(config, &store).await?;
        let ids = Snowflake::new(mode.node_id(config), clock.clone())?;
        let settings = SaleSettings {
            payment_window_ms: (config.payment_window_secs * 1000) as i64,
            preheat_ms: (config.preheat_secs * 1000) as i64,
            default_per_user_limit: config.per_user_limit,
        };
        let payments = Payments::build(config, &*store, clock.clone()).await?;
        let parts = mode.sale_parts(store.clone(), payments.provider, ids, clock);
        let sale = SaleService::start(parts, settings)
            .await
            .context("rebuilding the stock gate from the database")?;
        Ok(Self {
            store,
            sale,
            mode,
            sandbox: payments.sandbox,
            stop: watch::channel(false).0,
            scheduler: None,
        })
    }

    /// Starts the scheduler: catalog refresh in this process, and preheat and the overdue
    /// sweep when this process leads.
    pub fn start_scheduler(&mut self) {
        if self.scheduler.is_none() {
            self.scheduler = Some(ticker::spawn(
                self.sale.clone(),
                self.mode.leadership(),
                Duration::from_secs(1),
                self.stop.subscribe(),
            ));
        }
    }

    /// Starts the pipeline's consumers in this process. Embedded mode has none: the buy
    /// itself commits its order.
    pub async fn start_worker(&self, config: &Config) -> anyhow::Result<Option<Worker>> {
        match &self.mode {
            Mode::Embedded { .. } => Ok(None),
            Mode::Cluster(cluster) => Ok(Some(
                cluster
                    .start_worker(config, self.sale.clone(), self.store.clone())
                    .await?,
            )),
        }
    }

    /// Starts checking, once a second each, what this process needs to do its job (the
    /// database and its migrations; in cluster mode Redis, and RabbitMQ where configured):
    /// the readiness `/readyz` answers from. The tasks run until aborted.
    fn check_readiness(&self, readiness: &Arc<Readiness>) -> Vec<JoinHandle<()>> {
        let store = self.store.clone();
        let mut checks = vec![Check {
            name: "database",
            probe: Box::new(move || {
                let store = store.clone();
                Box::pin(async move {
                    match store.missing_migrations().await? {
                        0 => Ok(()),
                        n => anyhow::bail!("{n} migrations not applied: run `seckill migrate`"),
                    }
                })
            }),
        }];
        if let Mode::Cluster(cluster) = &self.mode {
            checks.extend(cluster.checks());
        }
        readiness.spawn(checks)
    }

    /// Lets the scheduler finish its step, then stops it and the mode's background tasks; in
    /// embedded mode, waits until the group commit has written every order it holds.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Some(scheduler) = self.scheduler {
            let _ = scheduler.await;
        }
        match self.mode {
            Mode::Cluster(cluster) => cluster.stop(),
            Mode::Embedded { commit } => commit.flush().await,
        }
    }
}

/// A built server: the core, the HTTP state, and the worker when it runs here too.
pub struct App {
    /// The store, the sale service and the mode's parts, stopped after the last request.
    core: Core,
    /// What every handler sees: the sale service, auth keys, limits and settings.
    state: AppState,
    /// The body limit of every route but the image uploads, applied by the router.
    max_body_bytes: usize,
    /// Set when the admin token was generated by this start, so it can be shown once.
    generated_admin_token: Option<Secret>,
    /// The pipeline's consumers when `run_worker` puts them in this process, stopped after
    /// the server so the orders of the last buys are stored.
    worker: Option<Worker>,
    /// Housekeeping that holds no state worth finishing (idle limits, ended sessions, shared
    /// buy counts, the readiness checks): aborted at shutdown.
    tasks: Vec<JoinHandle<()>>,
    /// How the server drains when it is told to stop.
    drain: Drain,
}

/// How a server drains on SIGTERM or SIGINT: `/readyz` answers `draining` at once, the server
/// goes on serving for `grace` so load balancers move away, then stops accepting and gives
/// the requests in progress up to `timeout`.
#[derive(Debug, Clone, Copy)]
struct Drain {
    /// `shutdown_grace_secs`: serving on while load balancers notice.
    grace: Duration,
    /// `shutdown_timeout_secs`: how long the requests in progress may take once the server
    /// stops accepting.
    timeout: Duration,
}

impl Drain {
    fn new(config: &Config) -> Self {
        Self {
            grace: Duration::from_secs(config.shutdown_grace_secs),
            timeout: Duration::from_secs(config.shutdown_timeout_secs),
        }
    }
}

/// The HTTP state of a process over `core`: the auth keys (the configured or stored secret
/// and admin token), the limits, the images, the streams, and `readiness`. Also whether this
/// start generated the admin token, which the operator must then be told.
async fn http_state(
    config: &Config,
    core: &Core,
    clock: SharedClock,
    revoked: Arc<RevokedSessions>,
) -> anyhow::Result<(AppState, Option<Secret>)> {
    let store = core.store.clone();
    let (secret, _) = secret_setting(&*store, config.secret.as_ref(), TOKEN_SECRET).await?;
    let (admin_token, generated) =
        secret_setting(&*store, config.admin_token.as_ref(), ADMIN_TOKEN).await?;
    if !config.demo && (config.secret.is_none() || config.admin_token.is_none()) {
        tracing::warn!(
            "the token secret or the admin token is kept in the database, where whoever can \
             read it can use it: for a real sale set SECKILL_SECRET and SECKILL_ADMIN_TOKEN \
             in the environment (README, \"Secrets\")"
        );
    }
    let state = AppState::new(AppParts {
        sale: core.sale.clone(),
        images: Arc::new(Images::new(store.clone(), config.max_image_bytes)),
        store,
        auth: Arc::new(AuthKeys {
            tokens: TokenSigner::new(
                secret.expose().as_bytes(),
                (config.session_ttl_secs * 1000) as i64,
            ),
            admin_token: admin_token.clone(),
            clock,
            revoked,
        }),
        passwords: Arc::new(crate::auth::password::Hasher::per_core()?),
        limits: Arc::new(RateLimits::new(&config.rate_limit, core.mode.limiter())),
        guard: Arc::new(Guards {
            signer: GuardSigner::new(secret.expose().as_bytes()),
            settings: config.guard.clone(),
        }),
        streams: Default::default(),
        secure_cookies: config.secure_cookies,
        site: crate::http::origin::Site::new(config.public_url.as_deref()),
        demo: config.demo,
        client_ip_header: config.client_ip_header.clone(),
        readiness: Arc::default(),
    });
    Ok((state, generated.then_some(admin_token)))
}

impl App {
    /// Builds every part from `config`, rebuilding the stock gate from the database. With
    /// `run_worker`, cluster mode's consumers run in this process too.
    pub async fn build(config: &Config, clock: SharedClock) -> anyhow::Result<Self> {
        let mut core = Core::build(config, clock.clone()).await?;
        core.start_scheduler();
        let revoked = Arc::new(RevokedSessions::default());
        let (state, generated_admin_token) =
            http_state(config, &core, clock.clone(), revoked.clone()).await?;
        let worker = if config.run_worker {
            core.start_worker(config).await?
        } else {
            None
        };
        let mut tasks = vec![
            spawn_forget_idle(state.limits.clone()),
            sessions::spawn_sync(state.store.clone(), revoked, clock)
                .await
                .context("reading the ended sessions")?,
        ];
        if let Mode::Cluster(_) = core.mode {
            tasks.push(spawn_share_buys(core.sale.clone()));
        }
        tasks.extend(core.check_readiness(&state.readiness));
        Ok(Self {
            core,
            state,
            max_body_bytes: config.max_body_bytes,
            generated_admin_token,
            worker,
            tasks,
            drain: Drain::new(config),
        })
    }

    /// The sandbox gateway, when it takes the payments: tests replay its notifications.
    pub fn sandbox(&self) -> Option<&Arc<Sandbox>> {
        self.core.sandbox.as_ref()
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

    /// Serves HTTP on `listener` until `stop` completes (the first SIGTERM or SIGINT), then
    /// drains: `/readyz` answers `draining` at once, the server serves on for
    /// `shutdown_grace_secs` (cut short when `hurry` completes: a second signal), then stops
    /// accepting, ends the dashboard streams and lets the requests in progress finish within
    /// `shutdown_timeout_secs` (each buy answered only once its order is durable). Then a
    /// worker running here finishes its batches, the group commit writes what it holds, and
    /// the background tasks stop.
    pub async fn serve(
        self,
        listener: TcpListener,
        stop: impl Future<Output = ()> + Send + 'static,
        hurry: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let sandbox = self.core.sandbox.as_ref();
        let router = crate::http::router(self.state.clone(), self.max_body_bytes, sandbox);
        let Drain { grace, timeout } = self.drain;
        let (readiness, streams) = (self.state.readiness.clone(), self.state.streams.clone());
        let draining = async move {
            stop.await;
            readiness.drain();
            tracing::info!(
                grace_secs = grace.as_secs(),
                "shutting down: /readyz answers 503 draining; serving on through the grace"
            );
            tokio::select! {
                () = tokio::time::sleep(grace) => {}
                () = hurry => tracing::info!("shutting down: a second signal skips the grace"),
            }
            tracing::info!(
                timeout_secs = timeout.as_secs(),
                "shutting down: stopped accepting; dashboard streams ended; the requests in \
                 progress finish within the timeout"
            );
            streams.end_all();
        };
        crate::server::serve(listener, router)
            .head_refusal(crate::http::head_too_large(crate::server::MAX_HEAD_BYTES))
            .shutdown_timeout(timeout)
            .with_graceful_shutdown(draining)
            .await;
        tracing::info!("shutting down: connections closed; storing what is in hand");
        if let Some(worker) = self.worker {
            worker.stop().await;
        }
        self.core.stop().await;
        for task in &self.tasks {
            task.abort();
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// A worker process (`seckill worker`): the core, cluster mode's consumers, and, when it has
/// an address, the HTTP face an operator watches it by (`/healthz`, `/readyz`, `/metrics`).
pub struct WorkerApp {
    /// The store, the sale service and the mode's parts, stopped last.
    core: Core,
    /// The consumers: the outbox drain and RabbitMQ's queues.
    worker: Worker,
    /// Where the worker's routes are served, what they see (the admin token and its throttle,
    /// the readiness) and their body limit; `None` without an address, and then no readiness
    /// is checked either, since nobody could read it.
    http: Option<(TcpListener, AppState, usize)>,
    /// The readiness checks and the throttle's upkeep: aborted at shutdown.
    tasks: Vec<JoinHandle<()>>,
}

impl WorkerApp {
    /// Builds the core from `config` and starts the scheduler and the consumers; with a
    /// `listener`, also the state of the routes served on it and the readiness checks.
    pub async fn build(
        config: &Config,
        clock: SharedClock,
        listener: Option<TcpListener>,
    ) -> anyhow::Result<Self> {
        let mut core = Core::build(config, clock.clone()).await?;
        let mut tasks = Vec::new();
        let http = match listener {
            Some(listener) => {
                // Installed before the consumers start, so their first batches are counted too.
                crate::http::metrics::install();
                let revoked = Arc::new(RevokedSessions::default());
                let (state, _) = http_state(config, &core, clock, revoked).await?;
                tasks.push(spawn_forget_idle(state.limits.clone()));
                tasks.extend(core.check_readiness(&state.readiness));
                Some((listener, state, config.max_body_bytes))
            }
            None => None,
        };
        core.start_scheduler();
        let Some(worker) = core.start_worker(config).await? else {
            anyhow::bail!("no consumers to run");
        };
        Ok(Self {
            core,
            worker,
            http,
            tasks,
        })
    }

    /// Works until `stop` completes, serving the worker's routes if it has an address; then
    /// `/readyz` answers `draining`, the consumers finish or hand back the batches they hold,
    /// the listener closes and the background tasks stop.
    pub async fn run(self, stop: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let (stopped, serving) = watch::channel(false);
        let readiness = self
            .http
            .as_ref()
            .map(|(_, state, _)| state.readiness.clone());
        let server = self.http.map(|(listener, state, max_body_bytes)| {
            let router = crate::http::worker_router(state, max_body_bytes);
            let mut serving = serving.clone();
            tokio::spawn(
                crate::server::serve(listener, router)
                    .shutdown_timeout(Duration::from_secs(1))
                    .with_graceful_shutdown(async move {
                        let _ = serving.wait_for(|stopped| *stopped).await;
                    })
                    .into_future(),
            )
        });
        stop.await;
        if let Some(readiness) = readiness {
            readiness.drain();
            tracing::info!("shutting down: /readyz answers 503 draining");
        }
        tracing::info!("shutting down: finishing the batches in hand");
        self.worker.stop().await;
        let _ = stopped.send(true);
        if let Some(server) = server {
            let _ = server.await;
        }
        self.core.stop().await;
        for task in &self.tasks {
            task.abort();
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// Shares this server's buy counts with the cluster's other servers every second, so the
/// dashboard of each shows the buys of all.
fn spawn_share_buys(sale: Arc<SaleService>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_secs(1));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if let Err(e) = sale.share_buys().await {
                tracing::warn!(error = %e, "sharing the buy counts");
            }
        }
    })
}

/// Every minute: lets go of idle throttle keys, and reports the failed payment callbacks whose
/// log lines were left out.
fn spawn_forget_idle(limits: Arc<RateLimits>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_secs(60));
        loop {
            interval.tick().await;
            limits.forget_idle();
            limits.report_left_out_lines();
        }
    })
}
