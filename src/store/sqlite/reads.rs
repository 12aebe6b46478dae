//! Orders read from SQLite through its own API, in place.
//!
//! Through sqlx, reading one order goes to the pool, over to the connection's own thread and
//! back, which costs several times what SQLite spends finding the row; and every payment and
//! cancel reads its order. Here a read takes an idle connection of its own, runs on the
//! caller's thread and puts the connection back. A read by key takes microseconds, so it runs
//! on the async runtime's thread without handing the thread over; in WAL mode a reader never
//! waits for the writer.

use crate::domain::{Order, OrderId, UserId};
use crate::store::sql::rows::{self, Columns};
use crate::store::sql::{ORDER, ORDERS_OF_USER};
use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle connections kept: about as many as reads at once on a busy server's threads; a read
/// that finds none idle opens one.
const KEPT_IDLE: usize = 8;

/// This process's read connections to one SQLite file.
pub struct SqliteReads {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl SqliteReads {
    /// Reads from the database file at `path`, which the schema's migrations have made.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// One order.
    pub fn order(&self, id: OrderId) -> rusqlite::Result<Option<Order>> {
        self.with(|conn| {
            conn.prepare_cached(ORDER)?
                .query_row([id.0], |row| rows::order(row))
                .optional()
        })
    }

    /// A user's orders, newest first.
    pub fn orders_of_user(&self, user: UserId) -> rusqlite::Result<Vec<Order>> {
        self.with(|conn| {
            conn.prepare_cached(ORDERS_OF_USER)?
                .query_map([user.0], |row| rows::order(row))?
                .collect()
        })
    }

    fn with<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.open()?,
        };
        let read = read(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < KEPT_IDLE {
            idle.push(conn);
        }
        read
    }

    fn open(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // Opened for writing only so a reader never depends on who made the shared-memory
        // file; it never writes.
        conn.pragma_update(None, "query_only", true)?;
        // A reader waits only in rare moments (another process recovering the log), as long
        // as sqlx's connections do.
        conn.busy_timeout(BUSY_TIMEOUT)?;
        Ok(conn)
    }
}

/// SQLite's own rows, decoded by the same functions as sqlx's.
impl Columns for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn int(&self, at: usize) -> rusqlite::Result<i64> {
        self.get(at)
    }
    fn maybe_int(&self, at: usize) -> rusqlite::Result<Option<i64>> {
        self.get(at)
    }
    fn text(&self, at: usize) -> rusqlite::Result<String> {
        self.get(at)
    }
    fn maybe_text(&self, at: usize) -> rusqlite::Result<Option<String>> {
        self.get(at)
    }
    fn name(&self, at: usize) -> &str {
        self.as_ref().column_name(at).unwrap_or("")
    }
    fn invalid(&self, at: usize) -> rusqlite::Error {
        let reason = format!("invalid {} in database", self.name(at));
        rusqlite::Error::FromSqlConversionFailure(at, Type::Integer, reason.into())
    }
}
