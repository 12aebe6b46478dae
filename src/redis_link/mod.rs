//! One Redis connection type for every deployment: a single Redis (or a primary behind a
//! proxy), a Redis behind Sentinel (`sentinel.rs`: the link follows a promotion) and a Redis
//! Cluster.
//!
//! The rest of seckill talks to Redis through `redis::aio::ConnectionLike` only (commands,
//! pipelines, `redis::Script::invoke_async`), so it does not care which kind it got:
//! [`connect_with`] picks the kind (and TLS) from the URL and [`RedisLink`] hides the difference.
//!
//! Two things callers must still respect on a cluster:
//! - every key one command, script or pipeline touches must hash to the same slot: give such keys
//!   one hash tag (`seckill:{p:42}:sale`, `seckill:{p:42}:buyers`); the driver rejects a pipeline
//!   across slots (CROSSSLOT) before sending it;
//! - scripts are routed by their first key; `Script::invoke_async` loads the script on every
//!   primary when a node answers NOSCRIPT, so scripts survive failovers and restarts (a caller
//!   that sends `EVALSHA` itself, as the reserve call does, does the same with
//!   `Script::load_async`);
//! - every script starts with `#!lua`, which tells Redis it may write. The driver opens every
//!   cluster connection with `READONLY`, and Redis routes a script without that line as a read:
//!   after a failover, a killed master started again at its address as the new master's
//!   replica would run it and answer `READONLY` (which the driver does not follow) instead of
//!   redirecting it to the new master with `MOVED`.

mod sentinel;

use std::fmt;
use std::time::Duration;

use anyhow::{Context, bail};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::{
    ClientTlsConfig, Cmd, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisFuture,
    TlsCertificates, TlsMode, Value,
};

/// How long one attempt to open a TCP connection to a node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one reply may take. The driver's default of half a second would turn a busy moment
/// of the server (a slow script, a fork for a snapshot, a full run queue on our side) into
/// failed purchases.
/// Blocking reads (XREADGROUP BLOCK, BLPOP) need their own connection with a longer timeout.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The schemes that mark a comma-separated list of cluster seed nodes, plain and over TLS, with
/// the scheme of each seed's own URL.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// The schemes of a Sentinel group, plain and over TLS.
const SENTINEL_SCHEMES: [(&str, bool); 2] =
    [("redis+sentinel://", false), ("rediss+sentinel://", true)];

/// A cloneable, multiplexed connection to a single Redis, the master of a Sentinel group or a
/// Redis Cluster.
///
/// Cloning is cheap and every clone shares the same connection(s), so one `RedisLink` per process
/// is enough: hand out clones instead of opening more connections. Every kind reconnects on its
/// own after a lost connection (the single kind with backoff, the Sentinel kind to whichever
/// node the sentinels promote, the cluster kind per node, and it follows MOVED/ASK redirections
/// and topology changes).
#[derive(Clone)]
pub enum RedisLink {
    /// One Redis server, kept connected by the driver's connection manager.
    Single(ConnectionManager),
    /// The master of a Redis Sentinel group, wherever the sentinels promote it.
    Sentinel(sentinel::Follower),
    /// A Redis Cluster: commands are routed to the primary that owns their key's slot.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl RedisLink {
    /// Whether this is a cluster connection. Callers need it for what a cluster does not offer
    /// (more than database 0, commands whose keys span slots) and for logs.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisLink::Cluster(_))
    }
}

/// Shows the kind only, so structs holding a link can derive `Debug` (the driver's connection
/// types do not all implement it).
impl fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RedisLink::Single(_) => "RedisLink::Single",
            RedisLink::Sentinel(_) => "RedisLink::Sentinel",
            RedisLink::Cluster(_) => "RedisLink::Cluster",
        })
    }
}

/// Delegates to the connection inside, so `RedisLink` works wherever the driver takes a
/// connection: `Cmd::query_async`, `Pipeline::query_async`, `Script::invoke_async`, `AsyncCommands`.
impl ConnectionLike for RedisLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisLink::Single(connection) => connection.req_packed_command(cmd),
            RedisLink::Sentinel(connection) => connection.req_packed_command(cmd),
            RedisLink::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisLink::Single(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            RedisLink::Sentinel(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            RedisLink::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisLink::Single(connection) => connection.get_db(),
            RedisLink::Sentinel(connection) => connection.get_db(),
            RedisLink::Cluster(connection) => connection.get_db(),
        }
    }
}

/// What a TLS link to Redis trusts and presents, as PEM text (read from the files the
/// configuration names). Both unset: the system's roots, no client certificate.
#[derive(Clone, Default)]
pub struct Tls {
    /// The private CA that signed the servers' certificates, trusted instead of the system's
    /// roots.
    pub ca: Option<Vec<u8>>,
    /// The client certificate chain and its private key, for servers that ask for one.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    /// The driver's form, when anything is set (else the driver's defaults apply).
    fn certificates(&self) -> Option<TlsCertificates> {
        (self.ca.is_some() || self.client.is_some()).then(|| TlsCertificates {
            client_tls: self
                .client
                .clone()
                .map(|(client_cert, client_key)| ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
            root_cert: self.ca.clone(),
        })
    }
}

/// Connects to a Redis without client certificates or a private CA: see [`connect_with`].
pub async fn connect(url: &str) -> anyhow::Result<RedisLink> {
    connect_with(url, &Tls::default()).await
}

/// Connects to a single Redis, a Redis behind Sentinel or a Redis Cluster, chosen by the URL:
///
/// - `redis://[user:password@]host:port[/db]`: a single Redis (also `valkey://`, `redis+unix://`);
/// - `redis+sentinel://[user:password@]host:port[,host:port…]/NAME[/db]`: the master the
///   sentinels listed (port 26379 when left out; any answering one is enough) know as `NAME`,
///   followed when they promote another node. The credentials and the database are the
///   master's; the sentinels are asked without credentials;
/// - `redis+cluster://[user:password@]host:port,host:port,...`: a cluster, given seed nodes (any
///   reachable one is enough; the driver discovers the others);
/// - `redis://host:port,redis://host:port,...`: a cluster as well, the seeds as full URLs.
///
/// Each over TLS as `rediss://`, `rediss+sentinel://` (to the sentinels and to the master),
/// `rediss+cluster://` and a list of `rediss://` URLs, with `tls`'s CA and client certificate;
/// the driver's `#insecure` skips the certificate's check. A TLS URL never falls back to plain
/// text, and a certificate that does not verify fails the connection with the reason.
///
/// Every kind waits up to 5 s for a connection and 5 s for each reply. It fails when no node
/// answers (or no sentinel, or they know no master of that name), naming the URL without its
/// credentials, so a wrong `redis_url` stops the start-up instead of failing the first
/// purchase.
pub async fn connect_with(url: &str, tls: &Tls) -> anyhow::Result<RedisLink> {
    let shown = crate::redact::url(url);
    let certificates = tls.certificates();
    match parse(url).with_context(|| format!("invalid Redis URL {shown}"))? {
        Target::Single(node) => {
            let client = match certificates {
                Some(certificates) => redis::Client::build_with_tls(*node, certificates),
                None => redis::Client::open(*node),
            }
            .with_context(|| format!("invalid Redis URL {shown}"))?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT));
            let connection = ConnectionManager::new_with_config(client, config)
                .await
                .with_context(|| format!("cannot connect to Redis at {shown}"))?;
            Ok(RedisLink::Single(connection))
        }
        Target::Sentinel(group) => Ok(RedisLink::Sentinel(
            sentinel::Follower::connect(*group, tls, &shown).await?,
        )),
        Target::Cluster(nodes) => {
            let insecure = matches!(
                nodes[0].addr(),
                redis::ConnectionAddr::TcpTls { insecure: true, .. }
            );
            let mut builder = ClusterClientBuilder::new(nodes)
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT);
            if let Some(certificates) = certificates {
                // Given certificates, the builder assumes verified TLS: keep `#insecure`.
                if insecure {
                    builder = builder.tls(TlsMode::Insecure);
                }
                builder = builder.certs(certificates);
            }
            let client = builder
                .build()
                .with_context(|| format!("invalid Redis Cluster URL {shown}"))?;
            let connection = client
                .get_async_connection()
                .await
                .with_context(|| format!("cannot connect to the Redis Cluster at {shown}"))?;
            Ok(RedisLink::Cluster(connection))
        }
    }
}

/// A request that runs a script by its SHA: one `EVALSHA` command, or a pipeline whose first
/// command it is (a `WAIT` for the replicas after it, on the same connection).
#[derive(Clone, Copy)]
pub enum ScriptRequest<'a> {
    /// The `EVALSHA` alone.
    Alone(&'a Cmd),
    /// A pipeline led by the `EVALSHA`.
    Pipelined(&'a Pipeline),
}

impl ScriptRequest<'_> {
    /// Sends it over `redis` and reads the answer.
    pub async fn send<T: redis::FromRedisValue>(
        self,
        redis: &mut RedisLink,
    ) -> redis::RedisResult<T> {
        match self {
            Self::Alone(command) => command.query_async(redis).await,
            Self::Pipelined(pipeline) => pipeline.query_async(redis).await,
        }
    }
}

/// Sends `request`, an `EVALSHA` of `script` that the caller built in one buffer (where
/// `redis::ScriptInvocation` makes every argument a `Vec` of its own and copies it into the
/// command afterwards), alone or leading a pipeline. As `ScriptInvocation` does, a server that
/// does not know the script (restarted, failed over) is sent it, then the request again.
pub async fn evalsha<T: redis::FromRedisValue>(
    redis: &mut RedisLink,
    script: &redis::Script,
    request: ScriptRequest<'_>,
) -> redis::RedisResult<T> {
    match request.send(redis).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(redis).await?;
            request.send(redis).await
        }
        answer => answer,
    }
}

/// What a URL asks for, checked without any I/O (so start-up errors come before connecting).
#[derive(Debug)]
enum Target {
    /// Boxed: with TLS parameters, one node's settings are far larger than a list.
    Single(Box<ConnectionInfo>),
    Sentinel(Box<sentinel::Group>),
    Cluster(Vec<ConnectionInfo>),
}

/// Reads a Redis URL (see [`connect`] for the forms).
fn parse(url: &str) -> anyhow::Result<Target> {
    let url = url.trim();
    if url.is_empty() {
        bail!("the URL is empty");
    }
    let has_prefix = |prefix: &str| {
        url.get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    };
    for (scheme, tls) in SENTINEL_SCHEMES {
        if has_prefix(scheme) {
            let group = sentinel::Group::parse(tls, &url[scheme.len()..])?;
            return Ok(Target::Sentinel(Box::new(group)));
        }
    }
    for (cluster, node) in CLUSTER_SCHEMES {
        if has_prefix(cluster) {
            return parse_cluster_seeds(node, &url[cluster.len()..]).map(Target::Cluster);
        }
    }
    if url.contains(',') {
        let nodes = url
            .split(',')
            .map(|part| node(part.trim()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        return Ok(Target::Cluster(check_cluster_nodes(nodes)?));
    }
    let info = url
        .into_connection_info()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Target::Single(Box::new(info)))
}

/// Reads the part after `redis+cluster://` (or `rediss+cluster://`):
/// `[userinfo@]host:port,host:port,...[/0][#insecure]`. The credentials, if any, and TLS's
/// `#insecure` apply to every node (a cluster has one set of them); each seed becomes a
/// `scheme` URL.
fn parse_cluster_seeds(scheme: &str, rest: &str) -> anyhow::Result<Vec<ConnectionInfo>> {
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => rest.split_at(at + 1),
        None => ("", rest),
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, "insecure")) if scheme == "rediss://" => (rest, "#insecure"),
        _ => (rest, ""),
    };
    let (hosts, path) = match rest.find(['/', '?', '#']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if !matches!(path, "" | "/" | "/0") {
        bail!("a Redis Cluster has only database 0 and takes no options (found {path:?})");
    }
    let nodes = hosts
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .map(|host| {
            if host.contains(':') {
                node(&format!("{scheme}{userinfo}{host}{fragment}"))
            } else {
                bail!("seed node {host:?} has no port (write host:port)")
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    check_cluster_nodes(nodes)
}

/// Reads one seed node's URL.
fn node(url: &str) -> anyhow::Result<ConnectionInfo> {
    if url.is_empty() {
        bail!("empty seed node in the list (a stray comma?)");
    }
    url.into_connection_info()
        .map_err(|e| anyhow::anyhow!("seed node {}: {e}", crate::redact::url(url)))
}

/// Refuses what a cluster cannot do, before the driver gives a vaguer error.
fn check_cluster_nodes(nodes: Vec<ConnectionInfo>) -> anyhow::Result<Vec<ConnectionInfo>> {
    if nodes.is_empty() {
        bail!("no seed nodes given");
    }
    for node in &nodes {
        if matches!(node.addr(), redis::ConnectionAddr::Unix(_)) {
            bail!(
                "a Redis Cluster cannot be reached over a Unix socket (nodes announce TCP addresses)"
            );
        }
        if node.redis_settings().db() != 0 {
            bail!(
                "a Redis Cluster has only database 0 (seed node {} asks for another)",
                node.addr()
            );
        }
    }
    Ok(nodes)
}

/// The Redis unit tests use: `SECKILL_TEST_REDIS_URL`, else the local one. Those tests are
/// `#[ignore]`d (`scripts/test` runs them with `--ignored`); one run without it fails with the
/// reason.
#[cfg(test)]
pub(crate) async fn test_link() -> RedisLink {
    let url =
        std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    connect(&url).await.unwrap_or_else(|e| {
        panic!("this test needs Redis at {url} (start it with scripts/services redis): {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(nodes: &[ConnectionInfo]) -> Vec<String> {
        nodes.iter().map(|n| n.addr().to_string()).collect()
    }

    #[test]
    fn a_plain_url_is_a_single_redis() {
        let Ok(Target::Single(info)) = parse("redis://127.0.0.1:6379/3") else {
            panic!("expected a single target");
        };
        assert_eq!(info.addr().to_string(), "127.0.0.1:6379");
        assert_eq!(info.redis_settings().db(), 3);

        let Ok(Target::Single(info)) = parse("redis://:secret@localhost") else {
            panic!("expected a single target");
        };
        assert_eq!(info.addr().to_string(), "localhost:6379");
        assert_eq!(info.redis_settings().password(), Some("secret"));
    }

    #[test]
    fn the_cluster_scheme_lists_seed_nodes_sharing_credentials() {
        let url = "redis+cluster://app:p%40ss@10.0.0.1:7000, 10.0.0.2:7001,10.0.0.3:7002/";
        let Ok(Target::Cluster(nodes)) = parse(url) else {
            panic!("expected a cluster target");
        };
        assert_eq!(
            addrs(&nodes),
            ["10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"]
        );
        for node in &nodes {
            assert_eq!(node.redis_settings().username(), Some("app"));
            assert_eq!(node.redis_settings().password(), Some("p@ss"));
        }
        let Ok(Target::Cluster(nodes)) = parse("REDIS+CLUSTER://h:7000") else {
            panic!("expected a cluster target");
        };
        assert_eq!(addrs(&nodes), ["h:7000"]);
    }

    #[test]
    fn the_sentinel_schemes_name_a_group_in_any_case() {
        for url in [
            "REDIS+SENTINEL://h/shop",
            "rediss+sentinel://h:26380,h2/shop/2",
        ] {
            assert!(matches!(parse(url), Ok(Target::Sentinel(_))), "{url}");
        }
    }

    #[test]
    fn a_list_of_urls_is_a_cluster() {
        let Ok(Target::Cluster(nodes)) = parse("redis://a:7000,redis://b:7001") else {
            panic!("expected a cluster target");
        };
        assert_eq!(addrs(&nodes), ["a:7000", "b:7001"]);
    }

    /// Whether a node is reached over TLS, and whether its certificate is checked.
    fn tls(node: &ConnectionInfo) -> Option<bool> {
        match node.addr() {
            redis::ConnectionAddr::TcpTls { insecure, .. } => Some(!insecure),
            _ => None,
        }
    }

    #[test]
    fn every_form_works_over_tls_and_insecure_reaches_every_seed() {
        let Ok(Target::Single(info)) = parse("rediss://:pw@h:6380") else {
            panic!("expected a single target");
        };
        assert_eq!(tls(&info), Some(true));
        let Ok(Target::Cluster(nodes)) = parse("rediss+cluster://:pw@h:7000,h:7001#insecure")
        else {
            panic!("expected a cluster target");
        };
        assert_eq!(addrs(&nodes), ["h:7000", "h:7001"]);
        assert!(nodes.iter().all(|node| tls(node) == Some(false)));
        let Ok(Target::Cluster(nodes)) = parse("rediss://a:7000,rediss://b:7001") else {
            panic!("expected a cluster target");
        };
        assert!(nodes.iter().all(|node| tls(node) == Some(true)));
        let Ok(Target::Cluster(nodes)) = parse("redis+cluster://a:7000") else {
            panic!("expected a cluster target");
        };
        assert_eq!(tls(&nodes[0]), None);
    }

    #[test]
    fn refusals_never_show_credentials() {
        let message = match parse("redis://u:secret@a:7000,redis://u:secret@b:7001/5") {
            Ok(_) => panic!("a cluster URL with a database was accepted"),
            Err(e) => format!("{e:#}"),
        };
        assert!(!message.contains("secret"), "{message}");
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason() {
        let error = |url: &str| match parse(url) {
            Ok(target) => panic!("{url:?} was accepted as {target:?}"),
            Err(e) => format!("{e:#}"),
        };
        assert!(error("").contains("empty"));
        assert!(
            error("http://h:6379").contains("URL"),
            "{}",
            error("http://h:6379")
        );
        assert!(error("redis+cluster://").contains("no seed nodes"));
        assert!(error("redis+cluster://h1").contains("no port"));
        assert!(error("redis+cluster://h:7000/2").contains("only database 0"));
        assert!(error("redis://a:7000,redis://b:7001/1").contains("only database 0"));
        assert!(error("redis://a:7000,").contains("stray comma"));
    }
}
