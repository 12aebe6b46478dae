//! The database's address, parsed once where the configuration is read: the URL text the
//! drivers connect with, and the database family its scheme names, which picks the store and
//! its SQL dialect.

use super::sql::Dialect;
use std::fmt;
use std::str::FromStr;

/// A database URL whose scheme names a supported family (`sqlite://`, `postgres://`,
/// `mysql://`); being one of these is the proof that it does.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    /// The URL as given, credentials and options included, for the driver.
    text: String,
    /// The family the scheme names: which store opens it and which SQL it speaks.
    dialect: Dialect,
}

impl DatabaseUrl {
    /// The URL as given, for the driver that connects with it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The database family the URL names.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The URL as messages and logs may show it, without credentials or options.
    pub fn redacted(&self) -> String {
        crate::redact::url(&self.text)
    }
}

impl FromStr for DatabaseUrl {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        Self::try_from(text.to_owned())
    }
}

impl TryFrom<String> for DatabaseUrl {
    type Error = anyhow::Error;

    fn try_from(text: String) -> anyhow::Result<Self> {
        Ok(Self {
            dialect: Dialect::from_url(&text)?,
            text,
        })
    }
}

/// Shows the redacted URL, so a URL printed by mistake leaks no password.
impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({})", self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_carries_the_family_its_scheme_names_and_hides_its_password() {
        let url: DatabaseUrl = "postgres://app:hunter2@db/shop".parse().unwrap();
        assert_eq!(url.dialect(), Dialect::Postgres);
        assert_eq!(url.as_str(), "postgres://app:hunter2@db/shop");
        assert!(!format!("{url:?}").contains("hunter2"));
        assert!(!url.redacted().contains("hunter2"));
        assert!("oracle://db/shop".parse::<DatabaseUrl>().is_err());
    }
}
