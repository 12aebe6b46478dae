//! Where the configuration comes from: the built-in defaults, then a TOML file, then the
//! `SECKILL_*` variables; and the [`Report`] `seckill config check` prints, every effective
//! value beside the layer it came from.

use super::{Config, Deployment};
use anyhow::Context;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

/// The variable that names the configuration file. The command line reads it; it is no
/// setting, so the environment layer leaves it out.
pub const FILE_VARIABLE: &str = "SECKILL_CONFIG";

impl Config {
    /// Reads defaults, then `file` if given, then the environment, and validates the result.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        Self::read(layers(file, process_variables()))
    }

    /// Reads the configuration as [`load`](Self::load) does, and tells where each value came
    /// from. A file that cannot be read or parsed is named in the error.
    pub fn check(file: Option<&Path>) -> anyhow::Result<Report> {
        Report::read(file, process_variables())
    }

    /// The configuration `builder`'s sources make, over the defaults, validated.
    pub(super) fn read(
        builder: config::ConfigBuilder<config::builder::DefaultState>,
    ) -> anyhow::Result<Self> {
        let config: Config = builder
            .build()
            .context("reading configuration")?
            .try_deserialize()
            .context("invalid configuration")?;
        config.validate()?;
        Ok(config)
    }
}

/// The file (if any) and then `variables`, the layers over the defaults.
fn layers(
    file: Option<&Path>,
    variables: config::Map<String, String>,
) -> config::ConfigBuilder<config::builder::DefaultState> {
    let mut builder = config::Config::builder();
    if let Some(file) = file {
        builder = builder.add_source(config::File::from(file).required(true));
    }
    builder.add_source(environment(variables))
}

/// The `SECKILL_*` settings among `variables` (all but [`FILE_VARIABLE`]), nested keys joined
/// with `__`.
pub(super) fn environment(mut variables: config::Map<String, String>) -> config::Environment {
    variables.remove(FILE_VARIABLE);
    config::Environment::with_prefix("SECKILL")
        .prefix_separator("_")
        .separator("__")
        .try_parsing(true)
        .source(Some(variables))
}

/// This process's environment: its variables whose names and values are text.
fn process_variables() -> config::Map<String, String> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}

/// The layer an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Nothing set it: the built-in default.
    Default,
    /// The configuration file.
    File,
    /// This `SECKILL_*` variable, which overrides the file.
    Variable(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File => f.write_str("file"),
            Self::Variable(name) => f.write_str(name),
        }
    }
}

/// The effective configuration, checked as `serve` checks it, with each setting's value as it
/// may be shown (secrets and URL credentials hidden) and its source.
pub struct Report {
    /// The configuration itself.
    pub config: Config,
    /// Each setting's dotted key, its value as shown, and where it came from.
    pub settings: Vec<(String, String, Source)>,
}

impl Report {
    fn read(file: Option<&Path>, variables: config::Map<String, String>) -> anyhow::Result<Self> {
        let in_file = match file {
            Some(path) => keys(config::Config::builder().add_source(config::File::from(path)))
                .with_context(|| format!("configuration file {}", path.display()))?,
            None => BTreeSet::new(),
        };
        let in_variables =
            keys(config::Config::builder().add_source(environment(variables.clone())))
                .context("SECKILL_* variables")?;
        let config = Config::read(layers(file, variables))?;
        let mut effective = Vec::new();
        flatten(
            String::new(),
            serde_json::to_value(&config)?,
            &mut effective,
        );
        let settings = effective
            .into_iter()
            .map(|(key, value)| {
                let source = if in_variables.contains(&key) {
                    Source::Variable(format!("SECKILL_{}", key.replace('.', "__").to_uppercase()))
                } else if in_file.contains(&key) {
                    Source::File
                } else {
                    Source::Default
                };
                (key, shown(&value), source)
            })
            .collect();
        Ok(Self { config, settings })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "deployment: {}", self.config.deployment())?;
        for link in self.config.links() {
            writeln!(
                f,
                "link {}: {} ({})",
                link.setting, link.protection, link.shown
            )?;
        }
        writeln!(f, "{:<44} {:<32} source", "setting", "value")?;
        for (key, value, source) in &self.settings {
            writeln!(f, "{key:<44} {value:<32} {source}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Deployment<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded => f.write_str("embedded (the stock gate in this process)"),
            Self::Cluster(urls) if urls.amqp_url.is_some() => {
                f.write_str("cluster (the stock gate in Redis, the outbox relayed by RabbitMQ)")
            }
            Self::Cluster(_) => f.write_str("cluster (the stock gate in Redis)"),
        }
    }
}

/// The dotted keys `builder`'s sources set.
fn keys(
    builder: config::ConfigBuilder<config::builder::DefaultState>,
) -> anyhow::Result<BTreeSet<String>> {
    let mut set = Vec::new();
    flatten(String::new(), builder.build()?.try_deserialize()?, &mut set);
    Ok(set.into_iter().map(|(key, _)| key).collect())
}

/// The leaves of `value`, each with its dotted key.
fn flatten(key: String, value: Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(table) => {
            for (name, value) in table {
                let key = if key.is_empty() {
                    name
                } else {
                    format!("{key}.{name}")
                };
                flatten(key, value, out);
            }
        }
        leaf => out.push((key, leaf)),
    }
}

/// A value as the report shows it: URLs without their credentials (secrets are written
/// redacted already).
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "(unset)".to_owned(),
        Value::String(text) if text.contains("://") => {
            Value::String(crate::redact::url(text)).to_string()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variables(pairs: &[(&str, &str)]) -> config::Map<String, String> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn the_variable_that_names_the_file_is_not_read_as_a_setting() {
        let config = Config::read(layers(None, variables(&[(FILE_VARIABLE, "seckill.toml")])));
        assert!(config.is_ok(), "{:#}", config.err().unwrap());
    }

    #[test]
    fn the_report_names_each_values_source_and_hides_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("seckill.toml");
        std::fs::write(
            &file,
            "max_batch = 100\ndatabase_url = \"postgres://app:hunter2@db/shop\"\n\
             [rate_limit]\nper_ip_per_sec = 7\n",
        )
        .unwrap();
        let report = Report::read(
            Some(&file),
            variables(&[
                ("SECKILL_MAX_BATCH", "200"),
                ("SECKILL_SECRET", &"s".repeat(32)),
                (
                    "SECKILL_REDIS_URL",
                    "rediss+sentinel://app:hunter3@s1:26379,s2:26379/shop",
                ),
            ]),
        )
        .unwrap();
        let source = |key: &str| {
            let (_, value, source) = report.settings.iter().find(|(k, ..)| k == key).unwrap();
            (value.as_str(), source.to_string())
        };
        assert_eq!(source("max_batch"), ("200", "SECKILL_MAX_BATCH".into()));
        assert_eq!(source("rate_limit.per_ip_per_sec"), ("7", "file".into()));
        assert_eq!(source("preheat_secs"), ("300", "default".into()));
        assert_eq!(source("secret").1, "SECKILL_SECRET");
        assert_eq!(source("redis_ca_file"), ("(unset)", "default".into()));
        assert_eq!(source("redis_url").1, "SECKILL_REDIS_URL");
        let shown = report.to_string();
        assert!(!shown.contains(&"s".repeat(32)), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("hunter3"), "{shown}");
        assert!(
            shown.contains(
                "link redis_url: TLS, the server's certificate verified \
                 (rediss+sentinel://s1:26379,s2:26379/shop)"
            ),
            "{shown}"
        );
    }

    /// The example configuration of the deployment guide, as installed on every host.
    const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/seckill.example.toml");

    /// `text` with its commented-out settings (`# key = value` lines) made settings, so that
    /// the keys an example names but leaves unset are read too.
    fn uncommented(text: &str) -> String {
        let is_key = |key: &str| {
            key.starts_with(|c: char| c.is_ascii_lowercase())
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        text.lines()
            .map(|line| {
                line.strip_prefix('#')
                    .map(str::trim_start)
                    .filter(|rest| rest.split_once(" = ").is_some_and(|(key, _)| is_key(key)))
                    .unwrap_or(line)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The example names every setting the configuration has, and nothing else; as shipped it
    /// loads through the loader `serve` uses into a cluster over RabbitMQ, with no secret in it;
    /// and every value it leaves commented out has its setting's type.
    #[test]
    fn the_example_configuration_loads_and_names_every_setting() {
        let mut leaves = Vec::new();
        let every_setting = serde_json::to_value(Config::default()).unwrap();
        flatten(String::new(), every_setting, &mut leaves);
        let every: BTreeSet<String> = leaves.into_iter().map(|(key, _)| key).collect();
        let text = std::fs::read_to_string(EXAMPLE).unwrap();
        let all_of_it = || {
            config::Config::builder().add_source(config::File::from_str(
                &uncommented(&text),
                config::FileFormat::Toml,
            ))
        };
        let named = keys(all_of_it()).unwrap();
        let missing: Vec<_> = every.difference(&named).collect();
        let unknown: Vec<_> = named.difference(&every).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "{EXAMPLE} does not name the settings {missing:?}, and names unknown ones {unknown:?}"
        );

        let config = Config::read(layers(Some(Path::new(EXAMPLE)), config::Map::new()))
            .unwrap_or_else(|e| panic!("{EXAMPLE}: {e:#}"));
        let Deployment::Cluster(urls) = config.deployment() else {
            panic!("{EXAMPLE} is not a cluster");
        };
        assert!(urls.amqp_url.is_some(), "{EXAMPLE} has no RabbitMQ");
        assert!(config.secret.is_none() && config.admin_token.is_none());
        assert!(config.alipay.private_key.is_none());
        for url in [
            config.database_url.as_str(),
            urls.redis_url,
            urls.amqp_url.unwrap(),
        ] {
            let authority = url.split_once("://").unwrap().1.split('/').next().unwrap();
            let user = authority.rsplit_once('@').map_or("", |(user, _)| user);
            let shown = crate::redact::url(url);
            assert!(!user.contains(':'), "{EXAMPLE} has a password in {shown}");
        }

        let typed = all_of_it().build().unwrap().try_deserialize::<Config>();
        typed.unwrap_or_else(|e| panic!("{EXAMPLE}, its commented-out settings included: {e:#}"));
    }
}
