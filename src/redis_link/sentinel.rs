//! A Redis behind Sentinel: the link to the master the sentinels name, which follows a
//! promotion without a restart.
//!
//! Every clone of a [`Follower`] shares one multiplexed connection to the current master. A
//! watcher task asks a sentinel `SENTINEL GET-MASTER-ADDR-BY-NAME` every [`WATCH_EVERY`], and
//! at once when a command fails on a lost connection or with `READONLY` (a master demoted to a
//! replica). When the sentinels name another node, or the connection was lost, it asks them for
//! the master through the driver's [`SentinelClient`] (which answers only with a node whose
//! `ROLE` says master, not marked down), connects, checks `ROLE` again over the new connection
//! and moves there; every clone takes the new connection on its next command. A lost
//! connection is never opened again to the same address without the sentinels naming it: a
//! killed master restarted empty before they demote it is never written to.
//!
//! A command is never sent again: one cut off by the failover returns its error, as on a single
//! Redis, since it may have run (a buy script must not run twice). A pipeline goes over the one
//! connection to the master, so a `WAIT` after a script covers that script's writes.

use super::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT, Tls};
use anyhow::{Context, anyhow, bail};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    Pipeline, RedisError, RedisFuture, RedisResult, Role, ServerErrorKind, TlsMode, Value,
};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// How often the watcher asks a sentinel where the master is, when no command failed.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// The least time between two questions to the sentinels, however many commands fail.
const ROUND_GAP: Duration = Duration::from_millis(100);

/// How long the watcher waits for a sentinel to accept a connection, and for its answer.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(1);

/// The port of a sentinel given without one (Redis Sentinel's own default).
const SENTINEL_PORT: u16 = 26379;

/// A Sentinel URL, read: `redis+sentinel://[user:password@]host:port[,host:port…]/NAME[/db]`,
/// or `rediss+sentinel://` with `#insecure` as the other forms.
pub(super) struct Group {
    /// The sentinels, reached without credentials, over TLS for `rediss+sentinel://`.
    sentinels: Vec<ConnectionInfo>,
    /// The name the sentinels know the master by.
    name: String,
    /// The master's user name (an ACL user), from the URL's userinfo.
    username: Option<String>,
    /// The master's password, from the URL's userinfo.
    password: Option<String>,
    /// The master's database.
    db: i64,
    /// TLS to the master: `None` plain, else whether its certificate is checked (shown as
    /// `Some(true)` when it is).
    tls: Option<TlsMode>,
}

/// Shows everything but the credentials.
impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sentinels: Vec<String> = self.sentinels.iter().map(|s| address(s.addr())).collect();
        f.debug_struct("Group")
            .field("sentinels", &sentinels)
            .field("name", &self.name)
            .field(
                "credentials",
                &(self.username.is_some() || self.password.is_some()),
            )
            .field("db", &self.db)
            .field("tls", &self.tls.map(|mode| mode == TlsMode::Secure))
            .finish()
    }
}

impl Group {
    /// Reads what follows the scheme: `[userinfo@]host[:port],…/NAME[/db][#insecure]` (`tls`:
    /// the scheme was `rediss+sentinel://`). A sentinel without a port is on 26379. A user
    /// name or password holding `/`, `@`, `#` or `,` is percent-encoded, as in every URL.
    pub(super) fn parse(tls: bool, rest: &str) -> anyhow::Result<Self> {
        let (rest, insecure) = match rest.split_once('#') {
            None => (rest, false),
            Some((rest, "insecure")) if tls => (rest, true),
            Some(_) => bail!(
                "a Redis Sentinel URL takes no fragment but #insecure, after rediss+sentinel://"
            ),
        };
        if rest.contains('?') {
            bail!("a Redis Sentinel URL takes no options (found ?…)");
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => authority.split_at(at + 1),
            None => ("", authority),
        };
        let mut parts = path.split('/');
        let name = parts.next().unwrap_or_default();
        if name.is_empty() {
            bail!(
                "no master name: write the name the sentinels know it by after them (…:26379/NAME)"
            );
        }
        let db = match parts.next() {
            None | Some("") => 0,
            Some(db) => match db.parse::<i64>() {
                Ok(db) if db >= 0 => db,
                _ => bail!("database {db:?} is not a number of 0 or more (write …/NAME/DB)"),
            },
        };
        if parts.any(|part| !part.is_empty()) {
            bail!("too many path segments: write …/NAME or …/NAME/DB");
        }
        let scheme = if tls { "rediss://" } else { "redis://" };
        let fragment = if insecure { "#insecure" } else { "" };
        let sentinels = hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(|host| {
                let port = if host
                    .rsplit_once(':')
                    .is_some_and(|(_, p)| !p.ends_with(']'))
                {
                    String::new()
                } else {
                    format!(":{SENTINEL_PORT}")
                };
                format!("{scheme}{host}{port}{fragment}")
                    .into_connection_info()
                    .map_err(|e| anyhow!("sentinel {host}: {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if sentinels.is_empty() {
            bail!("no sentinels given");
        }
        // The driver decodes the userinfo as for any URL; the host is a stand-in.
        let credentials = format!("redis://{userinfo}master/{db}")
            .into_connection_info()
            .map_err(|_| anyhow!("the user name or password is not valid URL text"))?;
        let settings = credentials.redis_settings();
        Ok(Self {
            sentinels,
            name: name.to_owned(),
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            db,
            tls: tls.then_some(if insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            }),
        })
    }

    /// The driver's client for the sentinels, which finds the master and checks its role:
    /// credentials, database and TLS (`tls`'s CA and client certificate) for the master, TLS for
    /// the sentinels.
    fn client(&self, tls: &Tls) -> RedisResult<SentinelClient> {
        let sentinels = self.sentinels.iter().map(|s| s.addr().clone());
        let mut builder =
            SentinelClientBuilder::new(sentinels, &self.name, SentinelServerType::Master)?
                .set_client_to_redis_db(self.db);
        if let Some(username) = &self.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(mode) = self.tls {
            builder = builder.set_client_to_redis_tls_mode(mode);
            if let Some(certificates) = tls.certificates() {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates);
            }
        }
        builder.build()
    }

    /// A client of each sentinel for the watcher's questions, with `tls`'s certificates.
    fn sentinel_clients(&self, tls: &Tls) -> RedisResult<Vec<redis::Client>> {
        self.sentinels
            .iter()
            .map(|sentinel| match (self.tls, tls.certificates()) {
                (Some(_), Some(certificates)) => {
                    redis::Client::build_with_tls(sentinel.clone(), certificates)
                }
                _ => redis::Client::open(sentinel.clone()),
            })
            .collect()
    }
}

/// `host:port` of a node, as the sentinels name it.
fn address(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => other.to_string(),
    }
}

/// The link to the master of a Sentinel group; cloning shares it (see the module's doc).
#[derive(Clone)]
pub struct Follower {
    /// What every clone shares: the current master's connection, and the watcher's bell.
    shared: Arc<Shared>,
    /// The generation of the connection this clone holds.
    generation: u64,
    /// This clone's handle on the master's connection of that generation.
    connection: MultiplexedConnection,
}

/// The state every clone of a [`Follower`] shares with the watcher.
struct Shared {
    /// The master's name at the sentinels, for the logs.
    name: String,
    /// The master's database.
    db: i64,
    /// Bumped on each move, after `current` changed: a clone with another generation takes the
    /// connection again.
    generation: AtomicU64,
    /// The master in use now.
    current: RwLock<Master>,
    /// Set when a command finds the connection lost: the watcher connects again, to the node
    /// the sentinels name.
    lost: AtomicBool,
    /// Rung when a command fails in a way a failover explains: the watcher asks the sentinels
    /// without waiting for its next round.
    wake: Notify,
}

/// The master a link uses.
struct Master {
    /// Its `host:port`, as the sentinels name it.
    address: String,
    /// How many moves came before it.
    generation: u64,
    /// The connection to it.
    connection: MultiplexedConnection,
}

impl Follower {
    /// Finds the master through the sentinels, connects to it and starts the watcher. Fails,
    /// naming `shown` (the URL without credentials), when no sentinel answers, when they know
    /// no master of that name, or when the master they name cannot be reached or is none.
    pub(super) async fn connect(group: Group, tls: &Tls, shown: &str) -> anyhow::Result<Self> {
        let name = group.name.clone();
        let mut sentinels = Sentinels {
            clients: group
                .sentinel_clients(tls)
                .with_context(|| format!("invalid Redis Sentinel URL {shown}"))?,
            connection: None,
            name: name.clone(),
        };
        let mut driver = group
            .client(tls)
            .with_context(|| format!("invalid Redis Sentinel URL {shown}"))?;
        let named = sentinels
            .master_address()
            .await
            .with_context(|| format!("no sentinel of {shown} answered"))?
            .ok_or_else(|| anyhow!("the sentinels of {shown} know no master named {name:?}"))?;
        let (address, connection) = discover(&mut driver).await.with_context(|| {
            format!(
                "cannot connect to the Redis master {name:?} at {named}, named by the sentinels \
                 of {shown}"
            )
        })?;
        tracing::info!(master = %name, %address, "Redis master found through the sentinels");
        let shared = Arc::new(Shared {
            name,
            db: group.db,
            generation: AtomicU64::new(0),
            current: RwLock::new(Master {
                address,
                generation: 0,
                connection: connection.clone(),
            }),
            lost: AtomicBool::new(false),
            wake: Notify::new(),
        });
        tokio::spawn(watch(Arc::downgrade(&shared), sentinels, driver));
        Ok(Self {
            shared,
            generation: 0,
            connection,
        })
    }

    /// The connection to the current master: this clone's own unless a move came since, one
    /// atomic load on the way.
    fn connection(&mut self) -> &mut MultiplexedConnection {
        if self.shared.generation.load(Ordering::Acquire) != self.generation {
            let current = self
                .shared
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            self.generation = current.generation;
            self.connection = current.connection.clone();
        }
        &mut self.connection
    }

    /// Wakes the watcher when `answer` is an error a failover explains, telling it when the
    /// connection was lost.
    fn check<T>(&self, answer: &RedisResult<T>) {
        let Err(e) = answer else {
            return;
        };
        // An error on the connection of an earlier generation is the move's, already made.
        if lost(e) && self.shared.generation.load(Ordering::Acquire) == self.generation {
            self.shared.lost.store(true, Ordering::Release);
        }
        if lost(e) || demoted(e) {
            self.shared.wake.notify_one();
        }
    }
}

/// Whether a command's error means its connection is lost (or timed out: it is opened again,
/// to whichever node the sentinels name).
fn lost(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() || e.is_timeout()
}

/// Whether the node no longer takes writes: `READONLY`, a demoted master; `MASTERDOWN`, a
/// replica cut from its master.
fn demoted(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    )
}

/// Sends over the current master's connection, never again after an error.
impl ConnectionLike for Follower {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let answer = self.connection().req_packed_command(cmd).await;
            self.check(&answer);
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let answer = self
                .connection()
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.check(&answer);
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.db
    }
}

/// Asks the sentinels for the master through the driver (a node whose `ROLE` says master, not
/// marked down), connects to it and checks `ROLE` again over that connection.
async fn discover(driver: &mut SentinelClient) -> anyhow::Result<(String, MultiplexedConnection)> {
    let client = driver.async_get_client().await.map_err(|e| {
        if e.kind() == ErrorKind::MasterNameNotFoundBySentinel {
            anyhow!("the sentinels name no master that is up and says it is one")
        } else {
            anyhow!(e)
        }
    })?;
    let address = address(client.get_connection_info().addr());
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let role: Role = redis::cmd("ROLE").query_async(&mut connection).await?;
    if !matches!(role, Role::Primary { .. }) {
        bail!("{address} is not a master");
    }
    Ok((address, connection))
}

/// The sentinels as the watcher asks them: one at a time, the one that answered last first.
struct Sentinels {
    /// A client of each sentinel.
    clients: Vec<redis::Client>,
    /// The connection to the sentinel that answered last, and its place in `clients`.
    connection: Option<(usize, MultiplexedConnection)>,
    /// The master's name at the sentinels.
    name: String,
}

impl Sentinels {
    /// Where the sentinels say the master is (`host:port`), `None` if the one that answered
    /// knows no master of that name; the last sentinel's error if none answered.
    async fn master_address(&mut self) -> RedisResult<Option<String>> {
        let mut question = redis::cmd("SENTINEL");
        question.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.name);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(SENTINEL_TIMEOUT))
            .set_response_timeout(Some(SENTINEL_TIMEOUT));
        let first = self.connection.as_ref().map_or(0, |(at, _)| *at);
        let mut last_error = None;
        for step in 0..self.clients.len() {
            let at = (first + step) % self.clients.len();
            let mut connection = match self.connection.take() {
                Some((cached, connection)) if cached == at => connection,
                _ => match self.clients[at]
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                {
                    Ok(connection) => connection,
                    Err(e) => {
                        last_error = Some(e);
                        continue;
                    }
                },
            };
            match question
                .query_async::<Option<(String, u16)>>(&mut connection)
                .await
            {
                Ok(named) => {
                    self.connection = Some((at, connection));
                    return Ok(named.map(|(host, port)| format!("{host}:{port}")));
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error
            .unwrap_or_else(|| RedisError::from((ErrorKind::Client, "no sentinel given"))))
    }
}

/// The watcher of one link: every [`WATCH_EVERY`] (sooner when a command failed, never more
/// often than every [`ROUND_GAP`]) asks a sentinel where the master is, and moves the link when
/// they name another node or its connection was lost. Ends once every clone of the link is
/// gone.
async fn watch(link: Weak<Shared>, mut sentinels: Sentinels, mut driver: SentinelClient) {
    let mut answering = true;
    loop {
        let Some(shared) = link.upgrade() else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep(WATCH_EVERY) => {}
            () = shared.wake.notified() => {}
        }
        let current = shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .address
            .clone();
        let named = match sentinels.master_address().await {
            Ok(named) => {
                if !answering {
                    tracing::info!(master = %shared.name, "the sentinels answer again");
                    answering = true;
                }
                named
            }
            Err(e) => {
                if answering {
                    tracing::warn!(master = %shared.name, error = %e, "no sentinel answers");
                    answering = false;
                }
                None
            }
        };
        let lost = shared.lost.swap(false, Ordering::AcqRel);
        if lost || named.is_some_and(|named| named != current) {
            match discover(&mut driver).await {
                Ok((address, connection)) if lost || address != current => {
                    shared.move_to(address, connection, &current);
                }
                Ok(_) => {}
                Err(e) => {
                    // Try again next round.
                    shared.lost.fetch_or(lost, Ordering::AcqRel);
                    tracing::debug!(
                        master = %shared.name,
                        error = %format!("{e:#}"),
                        "no master to move to yet"
                    );
                }
            }
        }
        drop(shared);
        tokio::time::sleep(ROUND_GAP).await;
    }
}

impl Shared {
    /// Makes `connection` to `address` the link's, for every clone.
    fn move_to(&self, address: String, connection: MultiplexedConnection, from: &str) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        current.generation += 1;
        current.connection = connection;
        self.generation.store(current.generation, Ordering::Release);
        if address == from {
            tracing::info!(master = %self.name, %address, "Redis master connected again");
        } else {
            tracing::warn!(
                master = %self.name,
                from,
                to = %address,
                "Redis master moved: following the sentinels' promotion"
            );
        }
        current.address = address;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(url: &str) -> Group {
        let (scheme, rest) = url.split_once("://").unwrap();
        Group::parse(scheme.starts_with("rediss"), rest).unwrap_or_else(|e| panic!("{url}: {e:#}"))
    }

    fn sentinels(group: &Group) -> Vec<String> {
        group.sentinels.iter().map(|s| address(s.addr())).collect()
    }

    /// Whether a sentinel is reached over TLS, and whether its certificate is checked.
    fn verified(info: &ConnectionInfo) -> Option<bool> {
        match info.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => Some(!insecure),
            _ => None,
        }
    }

    #[test]
    fn the_sentinels_the_master_name_and_its_database() {
        let plain = group("redis+sentinel://10.0.0.1:26379, 10.0.0.2:26380,sentinel-3/shop");
        assert_eq!(
            sentinels(&plain),
            ["10.0.0.1:26379", "10.0.0.2:26380", "sentinel-3:26379"]
        );
        assert_eq!((plain.name.as_str(), plain.db), ("shop", 0));
        assert!(plain.tls.is_none());
        assert!(plain.sentinels.iter().all(|s| verified(s).is_none()));
        let with_db = group("redis+sentinel://h/shop/3/");
        assert_eq!(
            (sentinels(&with_db), with_db.db),
            (vec!["h:26379".into()], 3)
        );
        let v6 = group("redis+sentinel://[::1]:26380,[::1]/shop");
        assert_eq!(v6.sentinels.len(), 2);
    }

    #[test]
    fn credentials_are_the_masters_and_never_shown() {
        let group = group("redis+sentinel://app:p%40ss%2Fw@h:1,h:2/shop");
        assert_eq!(group.username.as_deref(), Some("app"));
        assert_eq!(group.password.as_deref(), Some("p@ss/w"));
        for sentinel in &group.sentinels {
            let settings = sentinel.redis_settings();
            assert_eq!((settings.username(), settings.password()), (None, None));
        }
        let shown = format!("{group:?}");
        assert!(!shown.contains("p@ss") && !shown.contains("app"), "{shown}");
        let only_password = super::super::parse("redis+sentinel://:secret@h/shop");
        let shown = format!("{only_password:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn tls_reaches_the_sentinels_and_the_master() {
        let verified_tls = group("rediss+sentinel://h:1,h:2/shop");
        assert!(verified_tls.tls == Some(TlsMode::Secure));
        assert!(
            verified_tls
                .sentinels
                .iter()
                .all(|s| verified(s) == Some(true))
        );
        let insecure = group("rediss+sentinel://:pw@h:1,h:2/shop/1#insecure");
        assert!(insecure.tls == Some(TlsMode::Insecure) && insecure.db == 1);
        assert!(
            insecure
                .sentinels
                .iter()
                .all(|s| verified(s) == Some(false))
        );
    }

    #[test]
    fn bad_sentinel_urls_are_refused_with_the_reason_and_without_credentials() {
        let error = |url: &str| match super::super::parse(url) {
            Ok(target) => panic!("{url:?} was accepted as {target:?}"),
            Err(e) => format!("{e:#}"),
        };
        assert!(error("redis+sentinel://h:1").contains("no master name"));
        assert!(error("redis+sentinel://h:1/").contains("no master name"));
        assert!(error("redis+sentinel:///shop").contains("no sentinels"));
        assert!(error("redis+sentinel://h/shop/x").contains("not a number"));
        assert!(error("redis+sentinel://h/shop/-1").contains("not a number"));
        assert!(error("redis+sentinel://h/shop/1/2").contains("too many"));
        assert!(error("redis+sentinel://h/shop?password=secret").contains("no options"));
        assert!(error("redis+sentinel://h/shop#insecure").contains("#insecure"));
        assert!(error("redis+sentinel://h:port/shop").contains("sentinel h:port"));
        for url in [
            "redis+sentinel://u:secret@h/shop/x",
            "redis+sentinel://u:secret@h/shop?password=secret",
            "redis+sentinel://u:secret@h:port/shop",
            "rediss+sentinel://u:secret@h/shop#verify",
        ] {
            let message = error(url);
            assert!(!message.contains("secret"), "{message}");
        }
    }
}
