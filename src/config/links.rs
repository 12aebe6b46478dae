//! How each link to a backend is protected, read from its URL as its ecosystem spells TLS
//! (`rediss://` and `#insecure`, `amqps://`, sqlx's `sslmode` / `ssl-mode`), and the TLS
//! settings checked against it, so a CA file given for a plain link is refused instead of
//! ignored. The wiring logs every link with its protection at start.

use super::{Config, Deployment};
use anyhow::bail;
use std::fmt;
use std::path::Path;

/// How a link to a backend is protected, as its URL and settings ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// No TLS: what crosses the link can be read and changed on the way.
    Plain,
    /// TLS if the server offers it, its certificate not checked, plain text if it does not
    /// (sqlx's default, `sslmode=prefer` / `ssl-mode=PREFERRED`): no better than plain
    /// against someone in the path.
    Opportunistic,
    /// TLS required, its certificate not checked (`#insecure`, `sslmode=require`,
    /// `ssl-mode=REQUIRED`): encrypted, but anyone in the path can pose as the server.
    Unverified,
    /// TLS required and the server's certificate verified (a private CA or the system's roots).
    Verified,
}

/// Written as the start-up log says it.
impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Plain => "plain text (no TLS)",
            Self::Opportunistic => {
                "TLS only if the server offers it, unverified (plain text otherwise)"
            }
            Self::Unverified => "TLS without verifying the server's certificate",
            Self::Verified => "TLS, the server's certificate verified",
        })
    }
}

/// One link of this process to a backend server, as the start-up log names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The setting that names the server (`database_url`, `redis_url`, `amqp_url`), so the
    /// log line says what to change.
    pub setting: &'static str,
    /// The server's URL without credentials or options.
    pub shown: String,
    /// How the link is protected.
    pub protection: Protection,
}

/// The files that make a TLS link to Redis: whom to trust and who we are, when the servers ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RedisTlsFiles<'a> {
    /// The private CA that signed the servers' certificates (`redis_ca_file`); unset, the
    /// system's roots.
    pub ca: Option<&'a Path>,
    /// The client certificate chain and its key (`redis_client_cert_file`,
    /// `redis_client_key_file`), for servers that ask for one.
    pub client: Option<(&'a Path, &'a Path)>,
}

impl Config {
    /// Every link this process opens to a server, with its protection: the database (unless
    /// SQLite, which is a file), Redis and RabbitMQ when configured.
    pub fn links(&self) -> Vec<Link> {
        let database = self.database_url.as_str();
        let mut links: Vec<Link> = database_protection(database)
            .map(|protection| Link {
                setting: "database_url",
                shown: self.database_url.redacted(),
                protection,
            })
            .into_iter()
            .collect();
        if let Deployment::Cluster(urls) = self.deployment() {
            links.push(Link {
                setting: "redis_url",
                shown: crate::redact::url(urls.redis_url),
                protection: redis_protection(urls.redis_url).unwrap_or(Protection::Plain),
            });
            if let Some(url) = urls.amqp_url {
                links.push(Link {
                    setting: "amqp_url",
                    shown: crate::redact::url(url),
                    protection: amqp_protection(url),
                });
            }
        }
        links
    }

    /// The files of a TLS link to Redis (all unset for a plain one: [`validate`] refuses them
    /// there).
    ///
    /// [`validate`]: Config::validate
    pub(super) fn redis_tls_files(&self) -> RedisTlsFiles<'_> {
        RedisTlsFiles {
            ca: self.redis_ca_file.as_deref(),
            client: self
                .redis_client_cert_file
                .as_deref()
                .zip(self.redis_client_key_file.as_deref()),
        }
    }

    /// Refuses TLS settings that would be ignored or half given, a Redis URL whose nodes
    /// disagree on TLS, and a client certificate for an unverified Sentinel master.
    pub(super) fn validate_tls(&self) -> anyhow::Result<()> {
        if self.redis_client_cert_file.is_some() != self.redis_client_key_file.is_some() {
            bail!(
                "redis_client_cert_file (SECKILL_REDIS_CLIENT_CERT_FILE) and \
                 redis_client_key_file (SECKILL_REDIS_CLIENT_KEY_FILE) go together: set both or neither"
            );
        }
        let redis = match &self.redis_url {
            Some(url) => redis_protection(url)?,
            None => Protection::Plain,
        };
        let redis_files = [
            (
                "redis_ca_file",
                "SECKILL_REDIS_CA_FILE",
                &self.redis_ca_file,
            ),
            (
                "redis_client_cert_file",
                "SECKILL_REDIS_CLIENT_CERT_FILE",
                &self.redis_client_cert_file,
            ),
        ];
        for (key, variable, file) in redis_files {
            if file.is_some() && redis == Protection::Plain {
                bail!(
                    "{key} ({variable}) is set but redis_url does not ask for TLS: \
                     write rediss://, rediss+sentinel://, rediss+cluster:// or a list of \
                     rediss:// URLs"
                );
            }
        }
        let sentinel = self
            .redis_url
            .as_deref()
            .is_some_and(|url| has_scheme(url.trim(), "rediss+sentinel://"));
        if sentinel && redis == Protection::Unverified && self.redis_client_cert_file.is_some() {
            // The driver's Sentinel support presents no client certificate to a master whose
            // certificate it does not check.
            bail!(
                "redis_client_cert_file (SECKILL_REDIS_CLIENT_CERT_FILE) cannot reach a Sentinel \
                 master reached with #insecure: drop #insecure and give its CA in redis_ca_file"
            );
        }
        let amqp_tls = self
            .amqp_url
            .as_deref()
            .is_some_and(|url| amqp_protection(url) == Protection::Verified);
        if self.amqp_ca_file.is_some() && !amqp_tls {
            bail!(
                "amqp_ca_file (SECKILL_AMQP_CA_FILE) is set but amqp_url does not ask for TLS: write amqps://"
            );
        }
        Ok(())
    }
}

/// Whether `url` starts with `scheme`, in any case.
fn has_scheme(url: &str, scheme: &str) -> bool {
    url.get(..scheme.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
}

/// A Redis URL's protection: each of its nodes (one URL, `rediss+cluster://` seeds, a
/// `rediss+sentinel://` group, whose sentinels and master are reached alike, or a
/// comma-separated list) must ask for the same, since a cluster's links are all alike.
fn redis_protection(url: &str) -> anyhow::Result<Protection> {
    let url = url.trim();
    let one_scheme = [
        "redis+cluster://",
        "rediss+cluster://",
        "redis+sentinel://",
        "rediss+sentinel://",
    ];
    if one_scheme.iter().any(|scheme| has_scheme(url, scheme)) {
        return Ok(redis_node_protection(url));
    }
    let mut nodes = url
        .split(',')
        .map(|node| redis_node_protection(node.trim()));
    let first = nodes.next().unwrap_or(Protection::Plain);
    if nodes.any(|node| node != first) {
        bail!(
            "redis_url (SECKILL_REDIS_URL) lists nodes that differ in TLS: every node must be \
             rediss:// (with or without #insecure) or every node redis://"
        );
    }
    Ok(first)
}

/// One Redis URL's protection: `rediss://` (or `valkeys://`, `rediss+cluster://`,
/// `rediss+sentinel://`) is TLS, unverified with the driver's `#insecure`.
fn redis_node_protection(url: &str) -> Protection {
    let tls = [
        "rediss://",
        "rediss+cluster://",
        "rediss+sentinel://",
        "valkeys://",
    ]
    .iter()
    .any(|scheme| has_scheme(url, scheme));
    match (tls, url.split_once('#')) {
        (false, _) => Protection::Plain,
        (true, Some((_, "insecure"))) => Protection::Unverified,
        (true, _) => Protection::Verified,
    }
}

/// `amqps://` is TLS with the certificate verified (lapin has no unverified mode).
fn amqp_protection(url: &str) -> Protection {
    if has_scheme(url.trim(), "amqps://") {
        Protection::Verified
    } else {
        Protection::Plain
    }
}

/// A database server URL's protection from sqlx's own parameter (`sslmode` for PostgreSQL,
/// `ssl-mode` for MySQL and MariaDB, either name for both), unset meaning sqlx's default,
/// prefer; `None` for SQLite, which is a file and no link.
fn database_protection(url: &str) -> Option<Protection> {
    if has_scheme(url, "sqlite:") {
        return None;
    }
    let query = url.split_once('?').map_or("", |(_, query)| query);
    let query = query.split('#').next().unwrap_or_default();
    let mode = form_urlencoded::parse(query.as_bytes())
        .filter(|(key, _)| matches!(key.as_ref(), "sslmode" | "ssl-mode"))
        .map(|(_, value)| value.to_ascii_lowercase())
        .last();
    Some(match mode.as_deref() {
        Some("disable" | "disabled") => Protection::Plain,
        Some("require" | "required") => Protection::Unverified,
        Some("verify-ca" | "verify-full" | "verify_ca" | "verify_identity") => Protection::Verified,
        // allow, prefer, preferred, unset (sqlx refuses anything else when it connects).
        _ => Protection::Opportunistic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn protection(edit: impl FnOnce(&mut Config)) -> Vec<(&'static str, Protection)> {
        let mut config = Config::default();
        edit(&mut config);
        config.validate().unwrap();
        config
            .links()
            .into_iter()
            .map(|link| (link.setting, link.protection))
            .collect()
    }

    #[test]
    fn each_backend_reads_tls_as_its_ecosystem_spells_it() {
        use Protection::*;
        assert_eq!(protection(|_| {}), []);
        let redis = |url: &str| {
            let url = url.to_owned();
            protection(move |c| c.redis_url = Some(url))[0]
        };
        assert_eq!(redis("redis://h:6379"), ("redis_url", Plain));
        assert_eq!(redis("rediss://h:6380"), ("redis_url", Verified));
        assert_eq!(
            redis("REDISS://h:6380/#insecure"),
            ("redis_url", Unverified)
        );
        assert_eq!(redis("rediss+cluster://h:1,h:2"), ("redis_url", Verified));
        assert_eq!(redis("rediss+cluster://h:1,h:2#insecure").1, Unverified);
        assert_eq!(redis("rediss://a:1, rediss://b:2").1, Verified);
        assert_eq!(redis("redis+cluster://h:1,h:2").1, Plain);
        assert_eq!(redis("redis+sentinel://h:1,h:2/shop").1, Plain);
        assert_eq!(redis("rediss+sentinel://u@h:1,h:2/shop/1").1, Verified);
        assert_eq!(
            redis("REDISS+SENTINEL://h:1,h:2/shop#insecure").1,
            Unverified
        );
        let database =
            |url: &'static str| protection(move |c| c.database_url = url.parse().unwrap())[0].1;
        assert_eq!(database("postgres://h/db"), Opportunistic);
        assert_eq!(database("postgres://h/db?sslmode=disable"), Plain);
        assert_eq!(database("postgres://h/db?sslmode=require"), Unverified);
        assert_eq!(
            database("postgres://h/db?sslmode=verify-full&sslrootcert=/ca.pem"),
            Verified
        );
        assert_eq!(
            database("mysql://h/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem"),
            Verified
        );
        assert_eq!(database("mysql://h/db?ssl-mode=REQUIRED"), Unverified);
        let amqp = protection(|c| {
            c.redis_url = Some("redis://h".into());
            c.amqp_url = Some("amqps://u:p@h:5671/%2f".into());
        });
        assert_eq!(amqp, [("redis_url", Plain), ("amqp_url", Verified)]);
    }

    #[test]
    fn tls_settings_a_link_would_ignore_are_refused_by_name() {
        let refusal = |edit: fn(&mut Config)| {
            let mut config = Config::default();
            edit(&mut config);
            format!("{:#}", config.validate().unwrap_err())
        };
        assert!(
            refusal(|c| c.redis_ca_file = Some("/ca.pem".into())).contains("redis_ca_file"),
            "a CA without Redis"
        );
        let plain_redis = refusal(|c| {
            c.redis_url = Some("redis://h".into());
            c.redis_ca_file = Some("/ca.pem".into());
        });
        assert!(plain_redis.contains("rediss://"), "{plain_redis}");
        let half = refusal(|c| {
            c.redis_url = Some("rediss://h".into());
            c.redis_client_cert_file = Some("/cert.pem".into());
        });
        assert!(half.contains("redis_client_key_file"), "{half}");
        let mixed = refusal(|c| c.redis_url = Some("rediss://a:1,redis://b:2".into()));
        assert!(mixed.contains("differ in TLS"), "{mixed}");
        let plain_sentinel = refusal(|c| {
            c.redis_url = Some("redis+sentinel://h:1,h:2/shop".into());
            c.redis_ca_file = Some("/ca.pem".into());
        });
        assert!(
            plain_sentinel.contains("rediss+sentinel://"),
            "{plain_sentinel}"
        );
        let unverified_master = refusal(|c| {
            c.redis_url = Some("rediss+sentinel://h:1/shop#insecure".into());
            c.redis_client_cert_file = Some("/cert.pem".into());
            c.redis_client_key_file = Some("/key.pem".into());
        });
        assert!(
            unverified_master.contains("#insecure"),
            "{unverified_master}"
        );
        let plain_amqp = refusal(|c| {
            c.redis_url = Some("redis://h".into());
            c.amqp_url = Some("amqp://h".into());
            c.amqp_ca_file = Some("/ca.pem".into());
        });
        assert!(plain_amqp.contains("amqps://"), "{plain_amqp}");
        let mut config = Config {
            redis_url: Some("rediss://h".into()),
            redis_ca_file: Some(PathBuf::from("/ca.pem")),
            redis_client_cert_file: Some("/c.pem".into()),
            redis_client_key_file: Some("/k.pem".into()),
            ..Config::default()
        };
        config.validate().unwrap();
        assert_eq!(
            config.redis_tls_files().client,
            Some((Path::new("/c.pem"), Path::new("/k.pem")))
        );
        config.redis_url = Some("rediss://h:1#insecure, rediss://h:2".into());
        assert!(
            config.validate().is_err(),
            "nodes differing in verification"
        );
    }
}
