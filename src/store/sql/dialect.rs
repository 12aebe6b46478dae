//! What differs in the SQL of SQLite, PostgreSQL and MySQL/MariaDB, kept to this one file: how a
//! database is recognised from its URL, its migrations, and the few spellings that differ
//! (placeholders, "insert unless it exists", "return the new id", integer casts). Everything
//! else is one SQL text for all three. How each connects is its store's business.

use anyhow::bail;
use sqlx::migrate::Migrator;

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("migrations/postgres");
static MYSQL_MIGRATIONS: Migrator = sqlx::migrate!("migrations/mysql");

/// A supported database family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The embedded file.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB, which speak the same protocol.
    MySql,
}

impl Dialect {
    /// The family a `SECKILL_DATABASE_URL` names.
    pub fn from_url(url: &str) -> anyhow::Result<Self> {
        let scheme = url.split(':').next().unwrap_or_default();
        Ok(match scheme {
            "sqlite" => Self::Sqlite,
            "postgres" | "postgresql" => Self::Postgres,
            "mysql" | "mariadb" => Self::MySql,
            other => bail!(
                "database URL scheme {other:?} is not supported: use sqlite://, postgres:// or mysql://"
            ),
        })
    }

    /// The migrations of this family.
    pub fn migrator(self) -> &'static Migrator {
        match self {
            Self::Sqlite => &SQLITE_MIGRATIONS,
            Self::Postgres => &POSTGRES_MIGRATIONS,
            Self::MySql => &MYSQL_MIGRATIONS,
        }
    }

    /// Whether new ids come back through `RETURNING id` (PostgreSQL, SQLite) rather than the
    /// driver's last-insert id (MySQL, which has no `RETURNING`).
    pub fn returns_ids(self) -> bool {
        self != Self::MySql
    }

    /// `INSERT INTO {rest}` that silently skips a row whose `key` already exists.
    pub fn insert_new(self, rest: &str, key: &str) -> String {
        match self {
            Self::MySql => format!("INSERT IGNORE INTO {rest}"),
            Self::Sqlite | Self::Postgres => {
                format!("INSERT INTO {rest} ON CONFLICT ({key}) DO NOTHING")
            }
        }
    }

    /// An `INSERT` that yields the new row's id in this dialect's way.
    pub fn insert_with_id(self, insert: &str) -> String {
        if self.returns_ids() {
            format!("{insert} RETURNING id")
        } else {
            insert.to_owned()
        }
    }

    /// `SUM(column)` as a 64-bit integer (PostgreSQL and MySQL sum into decimals).
    pub fn sum(self, column: &str) -> String {
        match self {
            Self::MySql => format!("CAST(SUM({column}) AS SIGNED)"),
            Self::Sqlite | Self::Postgres => format!("CAST(SUM({column}) AS BIGINT)"),
        }
    }

    /// The statement text with this dialect's placeholders: `?` stays `?`, except in
    /// PostgreSQL where the n-th `?` becomes `$n`. (No statement of ours has a `?` inside a
    /// string literal.)
    pub fn placeholders(self, sql: &str) -> String {
        if self != Self::Postgres {
            return sql.to_owned();
        }
        let mut out = String::with_capacity(sql.len() + 16);
        let mut n = 0;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(c);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_each_family_by_its_url() {
        assert_eq!(Dialect::from_url("sqlite://x.db").unwrap(), Dialect::Sqlite);
        assert_eq!(
            Dialect::from_url("postgres://h/db").unwrap(),
            Dialect::Postgres
        );
        assert_eq!(
            Dialect::from_url("postgresql://h/db").unwrap(),
            Dialect::Postgres
        );
        assert_eq!(Dialect::from_url("mysql://h/db").unwrap(), Dialect::MySql);
        assert_eq!(Dialect::from_url("mariadb://h/db").unwrap(), Dialect::MySql);
        assert!(Dialect::from_url("oracle://h/db").is_err());
    }

    #[test]
    fn postgres_numbers_its_placeholders() {
        let sql = "UPDATE t SET a = ? WHERE id = ? AND b >= ?";
        assert_eq!(
            Dialect::Postgres.placeholders(sql),
            "UPDATE t SET a = $1 WHERE id = $2 AND b >= $3"
        );
        assert_eq!(Dialect::MySql.placeholders(sql), sql);
    }
}
