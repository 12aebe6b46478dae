//! Order batches, payments and cancels on SQLite, written through SQLite's own API on the
//! caller's thread.
//!
//! sqlx runs every SQLite connection on a thread of its own and hands each statement over to
//! it and the answer back. A batch of orders is a handful of statements, so through sqlx it
//! would be a dozen thread switches, which cost more than SQLite's storing. Here a batch is one
//! call that runs its statements in place, each prepared once and kept.

use super::status_batches::StatusChange;
use crate::domain::{Millis, Order, OrderId, ProductId};
use crate::store::Persisted;
use crate::store::sql::rows::new_order_columns;
use crate::store::sql::{
    CANCEL_ORDER, CANCEL_PAID_ORDER, FREE_KEY, KEY_HOLDER, KeyHolders, MARK_PAID, RETURN_STOCK,
    TAKE_STOCK, settle_keys, units_of,
};
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How long a batch waits for the file's write lock while another process writes, as sqlx's
/// connections do. (This process's sqlx writer takes turns with it instead.)
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Skips an id stored already: a redelivered order is a duplicate, not an error. Only the key
/// conflict is skipped; any other broken constraint still fails the batch.
const INSERT: &str = concat!(
    "INSERT INTO orders (",
    new_order_columns!(),
    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
);
const REMOVE: &str = "DELETE FROM orders WHERE id = ?";
const UNITS_OF_ORDER: &str = "SELECT product_id, quantity FROM orders WHERE id = ?";

/// The connection that writes order batches, payments and cancels into one SQLite file, kept
/// for the life of the process.
pub struct SqliteOrders {
    conn: Mutex<Connection>,
}

impl SqliteOrders {
    /// Opens the database file at `path`, which the schema's migrations have made already.
    /// Commits write SQLite's log without syncing it: the caller waits for
    /// [`super::WalFlush`], as for every other write.
    pub fn open(path: &Path) -> rusqlite::Result<Self> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    /// Writes a batch in one transaction: each order is inserted unless its id is stored (or
    /// its idempotency key is another order's), then each product's new orders take their
    /// units in one guarded decrement rather than one per order. Taking the write lock first
    /// (`IMMEDIATE`) means a batch never fails halfway for a writer that came between its
    /// reads and its writes.
    pub fn insert(&self, orders: &[Order]) -> rusqlite::Result<Vec<Persisted>> {
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let taken = settle_batch_keys(&tx, orders)?;
        let new = insert_new(&tx, orders, &taken)?;
        let mut outcomes = take_units(&tx, orders, new)?;
        for i in taken {
            outcomes[i] = Persisted::KeyTaken;
        }
        tx.commit()?;
        Ok(outcomes)
    }

    /// Applies payments and cancels in one transaction, each in order: a conditional update
    /// that applies only to an order in the status it leaves, as on every database, and for a
    /// cancel its units back on sale. Whether each was applied.
    pub fn settle(&self, changes: &[StatusChange]) -> rusqlite::Result<Vec<bool>> {
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let applied = changes
            .iter()
            .map(|change| apply_one(&tx, *change))
            .collect::<rusqlite::Result<_>>()?;
        tx.commit()?;
        Ok(applied)
    }
}

fn apply_one(tx: &Transaction<'_>, change: StatusChange) -> rusqlite::Result<bool> {
    match change {
        StatusChange::Pay { id, at } => {
            let paid = tx
                .prepare_cached(MARK_PAID)?
                .execute(params![at, id.0, at])?;
            Ok(paid == 1)
        }
        StatusChange::Cancel { id, at } => cancel(tx, CANCEL_ORDER, id, at),
        StatusChange::CancelPaid { id, at } => cancel(tx, CANCEL_PAID_ORDER, id, at),
    }
}

/// Cancels an order with the conditional update `cancel_order` and, if it applied, puts the
/// order's units back on the product's stock.
fn cancel(
    tx: &Transaction<'_>,
    cancel_order: &str,
    id: OrderId,
    at: Millis,
) -> rusqlite::Result<bool> {
    let cancelled = tx
        .prepare_cached(cancel_order)?
        .execute(params![at, id.0])?;
    if cancelled == 0 {
        return Ok(false);
    }
    let (product, units): (i64, i64) = tx
        .prepare_cached(UNITS_OF_ORDER)?
        .query_row([id.0], |row| Ok((row.get(0)?, row.get(1)?)))?;
    tx.prepare_cached(RETURN_STOCK)?
        .execute(params![units, at, product])?;
    Ok(true)
}

/// Sees to the idempotency keys of a batch (see [`settle_keys`]): the orders whose key another
/// order holds, by index. A batch without keys reads nothing.
fn settle_batch_keys(tx: &Transaction<'_>, orders: &[Order]) -> rusqlite::Result<Vec<usize>> {
    if orders.iter().all(|o| o.idempotency_key.is_none()) {
        return Ok(Vec::new());
    }
    let mut holders = KeyHolders::new();
    let mut holder_of = tx.prepare_cached(KEY_HOLDER)?;
    for o in orders {
        let Some(key) = &o.idempotency_key else {
            continue;
        };
        let holder = holder_of
            .query_row(params![o.user_id.0, key.as_str()], |row| {
                Ok((OrderId(row.get(0)?), row.get(1)?))
            })
            .optional()?;
        if let Some(holder) = holder {
            holders.insert((o.user_id, key.as_str().to_owned()), holder);
        }
    }
    let (taken, expired) = settle_keys(orders, holders);
    for id in expired {
        tx.prepare_cached(FREE_KEY)?.execute([id.0])?;
    }
    Ok(taken)
}

/// Inserts each order whose id is not stored yet, but those of `skip`; where the new ones are
/// in `orders`, by product.
fn insert_new(
    tx: &Transaction<'_>,
    orders: &[Order],
    skip: &[usize],
) -> rusqlite::Result<BTreeMap<ProductId, Vec<usize>>> {
    let mut insert = tx.prepare_cached(INSERT)?;
    let mut new: BTreeMap<ProductId, Vec<usize>> = BTreeMap::new();
    for (i, o) in orders.iter().enumerate() {
        if skip.contains(&i) {
            continue;
        }
        let inserted = insert.execute(params![
            o.id.0,
            o.user_id.0,
            o.product_id.0,
            o.product_name,
            o.unit_price.cents(),
            units_of(o),
            o.total.cents(),
            o.status.as_str(),
            o.created_at,
            o.pay_before,
            o.idempotency_key.as_ref().map(|key| key.as_str()),
        ])?;
        if inserted == 1 {
            new.entry(o.product_id).or_default().push(i);
        }
    }
    Ok(new)
}

/// Takes the units of the `new` orders from their products' stock: all of a product's at once,
/// or order by order when it has too few for all, removing each order that finds none left.
/// Every order's outcome (those not new are duplicates).
fn take_units(
    tx: &Transaction<'_>,
    orders: &[Order],
    new: BTreeMap<ProductId, Vec<usize>>,
) -> rusqlite::Result<Vec<Persisted>> {
    let mut take_stock = tx.prepare_cached(TAKE_STOCK)?;
    let mut take = |product: ProductId, units: i64| {
        let taken = take_stock.execute(params![units, product.0, units])?;
        Ok::<_, rusqlite::Error>(taken == 1)
    };
    let mut outcomes = vec![Persisted::Duplicate; orders.len()];
    for (product, batch) in new {
        if take(product, batch.iter().map(|&i| units_of(&orders[i])).sum())? {
            for i in batch {
                outcomes[i] = Persisted::Inserted;
            }
            continue;
        }
        for i in batch {
            outcomes[i] = if take(product, units_of(&orders[i]))? {
                Persisted::Inserted
            } else {
                tx.prepare_cached(REMOVE)?.execute([orders[i].id.0])?;
                Persisted::OutOfStock
            };
        }
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{OrderId, OrderStatus};
    use crate::store::Store;
    use crate::store::sqlite::SqliteStore;
    use rusqlite::params_from_iter;
    use rusqlite::types::Null;

    const INSERT_PARAMETERS: usize = 11;

    /// A database made by migration 1 alone keeps its orders through migration 2 (which makes
    /// the orders table anew with its status check as comparisons), still refuses an unknown
    /// status, and builds no temporary index for each order it stores.
    #[tokio::test]
    async fn an_older_database_keeps_its_orders_and_its_status_rule_without_a_temporary_index() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shop.db");
        let first = dir.path().join("first");
        std::fs::create_dir(&first).unwrap();
        std::fs::write(
            first.join("0001_initial.sql"),
            include_str!("../../../migrations/sqlite/0001_initial.sql"),
        )
        .unwrap();
        let url = format!("sqlite://{}?mode=rwc", file.display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let migrator = sqlx::migrate::Migrator::new(first.as_path()).await.unwrap();
        migrator.run(&pool).await.unwrap();
        sqlx::query(
            "INSERT INTO orders (id, user_id, product_id, product_name, unit_price_cents, \
             quantity, total_cents, status, created_at, pay_before, paid_at) \
             VALUES (7, 1, 1, 'Kettle', 100, 1, 100, 'paid', 1, 2, 2)",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;

        let store = SqliteStore::open(&url, None).await.unwrap();
        let kept = store.order(OrderId(7)).await.unwrap().unwrap();
        assert_eq!((kept.status, kept.paid_at), (OrderStatus::Paid, Some(2)));

        let conn = Connection::open(&file).unwrap();
        let unknown = conn.execute("UPDATE orders SET status = 'lost' WHERE id = 7", []);
        assert!(unknown.is_err(), "an unknown status was stored");
        let mut plan = conn.prepare(&format!("EXPLAIN {INSERT}")).unwrap();
        let opcodes: Vec<String> = plan
            .query_map(params_from_iter(vec![Null; INSERT_PARAMETERS]), |row| {
                row.get(1)
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(opcodes.iter().any(|op| op == "Insert"));
        assert!(
            !opcodes.iter().any(|op| op == "OpenEphemeral"),
            "{opcodes:?}"
        );
    }
}
