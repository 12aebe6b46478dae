//! Group commit: buys arrive one by one, but the database sees them in batches. One writer task
//! takes every order waiting in its queue (up to `max_batch`), writes them all in a single
//! transaction, and only then answers each buyer. Under load, hundreds of buys share one
//! commit and one fsync; with no load, a lone buy is committed at once without waiting to fill
//! a batch. A few batches are in flight at once, so on a database server the next one is
//! written while the last commits. (On SQLite the writer's thread also syncs the log, and the
//! buys that arrive meanwhile make the next batch: see `WalFlush`.)
//!
//! The queue is bounded: a slow database fills it, and a buy that finds it full is refused at
//! once (its units go back on sale) instead of waiting in a queue without end. At most the
//! queue's bound plus the batches in flight wait for the database.

use crate::domain::Order;
use crate::sale::{Durability, PersistError};
use crate::store::{Persisted, Store};
use async_trait::async_trait;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Why an order could not be made durable.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("writing the order batch failed: {0}")]
    Store(String),
    #[error("the order writer has stopped")]
    Stopped,
    /// The queue is at its bound: the database is behind.
    #[error("too many orders are waiting to be written")]
    Full,
}

struct Job {
    order: Order,
    done: oneshot::Sender<Result<Persisted, CommitError>>,
}

/// What the writer's queue carries: orders, and the requests to be told once every order
/// before them is written.
enum Message {
    Order(Job),
    Flush(oneshot::Sender<()>),
}

/// Handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct GroupCommit {
    jobs: mpsc::Sender<Message>,
}

impl GroupCommit {
    /// Starts the writer on a thread of its own, writing up to `max_batch` orders a
    /// transaction, with at most `max_waiting` orders queued behind the batches in flight. It
    /// stops once every handle is dropped and the queue is empty.
    ///
    /// A thread of its own, because a batch is several statements, each a hop to the
    /// database driver and back: as one task among the HTTP tasks, the writer would wait
    /// behind all of them after every hop.
    pub fn start(
        store: Arc<dyn Store>,
        max_batch: usize,
        max_waiting: usize,
    ) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel(max_waiting);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("seckill-commit".into())
            .spawn(move || runtime.block_on(write_batches(store, rx, max_batch)))?;
        Ok(Self { jobs })
    }

    /// Hands an order to the writer and waits until its batch is committed; refuses it at once
    /// when the queue is full.
    pub async fn commit(&self, order: Order) -> Result<Persisted, CommitError> {
        let (done, outcome) = oneshot::channel();
        self.jobs
            .try_send(Message::Order(Job { order, done }))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => CommitError::Full,
                mpsc::error::TrySendError::Closed(_) => CommitError::Stopped,
            })?;
        outcome.await.map_err(|_| CommitError::Stopped)?
    }

    /// Returns once every order handed over before this call is written (or its batch has
    /// failed): at shutdown, so that no order is left in the queue when the process exits,
    /// whether or not its buyer still waits for it.
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.jobs.send(Message::Flush(done)).await.is_ok() {
            let _ = flushed.await;
        }
    }
}

#[async_trait]
impl Durability for GroupCommit {
    async fn persist(&self, order: &Order) -> Result<Persisted, PersistError> {
        match self.commit(order.clone()).await {
            Ok(persisted) => Ok(persisted),
            Err(CommitError::Full) => Err(PersistError::Full),
            Err(e) => Err(PersistError::Failed(e.into())),
        }
    }

    /// The order is in the database before its buyer hears of it.
    fn in_flight_for_ms(&self) -> i64 {
        0
    }
}

/// Batches in flight at once: one being written while those before it commit, on a database
/// server, which runs them side by side.
const BATCHES_IN_FLIGHT: u32 = 2;

async fn write_batches(store: Arc<dyn Store>, mut rx: mpsc::Receiver<Message>, max_batch: usize) {
    let in_flight = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT as usize));
    loop {
        // A free slot first, then everything that queued up meanwhile: the batch is as large
        // as the wait for the disk allows.
        let Ok(slot) = Arc::clone(&in_flight).acquire_owned().await else {
            break;
        };
        let mut messages = Vec::with_capacity(max_batch);
        if rx.recv_many(&mut messages, max_batch).await == 0 {
            break;
        }
        metrics::gauge!("seckill_order_queue_depth").set(rx.len() as f64);
        let mut flushes = Vec::new();
        let batch: Vec<Job> = messages
            .into_iter()
            .filter_map(|message| match message {
                Message::Order(job) => Some(job),
                Message::Flush(done) => {
                    flushes.push(done);
                    None
                }
            })
            .collect();
        if batch.is_empty() {
            drop(slot);
        } else {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                write_batch(store.as_ref(), batch).await;
                drop(slot);
            });
        }
        if !flushes.is_empty() {
            // Every batch taken so far is written once every slot is free again.
            drop(in_flight.acquire_many(BATCHES_IN_FLIGHT).await);
            for done in flushes {
                let _ = done.send(());
            }
        }
    }
    // The runtime drops unfinished tasks when this returns: wait for the batches in flight.
    let _ = in_flight.acquire_many(BATCHES_IN_FLIGHT).await;
}

async fn write_batch(store: &dyn Store, batch: Vec<Job>) {
    let (orders, waiters): (Vec<Order>, Vec<_>) =
        batch.into_iter().map(|job| (job.order, job.done)).unzip();
    match store.insert_orders(&orders).await {
        Ok(outcomes) => {
            metrics::histogram!("seckill_order_batch_size", "writer" => "group_commit")
                .record(orders.len() as f64);
            for (waiter, outcome) in waiters.into_iter().zip(outcomes) {
                let _ = waiter.send(Ok(outcome));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, orders = orders.len(), "order batch failed");
            for waiter in waiters {
                let _ = waiter.send(Err(CommitError::Store(e.to_string())));
            }
        }
    }
}
