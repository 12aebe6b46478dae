//! The consumers of cluster mode, run by `seckill worker` (or by `seckill serve --worker`):
//! the outbox drain loops and, with RabbitMQ, the queue consumers, as the wiring chose them.
//! Stopping is graceful: each loop finishes the batch in hand, acknowledges it, and exits.

use std::future::Future;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Running consumer loops that stop together.
pub struct Worker {
    /// Turns true once, at [`Worker::stop`]: every loop watches it between batches, so one
    /// send stops them all without cutting a batch short.
    stop: watch::Sender<bool>,
    /// The running loops, awaited at [`Worker::stop`] so their last batches are acknowledged
    /// before the process exits.
    tasks: Vec<JoinHandle<()>>,
}

impl Worker {
    /// A worker with no loops yet.
    pub fn new() -> Self {
        Self {
            stop: watch::channel(false).0,
            tasks: Vec::new(),
        }
    }

    /// Starts a loop built from the stop signal: it must return once the signal turns true,
    /// after finishing its batch in hand.
    pub fn run<F>(&mut self, build: impl FnOnce(watch::Receiver<bool>) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tasks.push(tokio::spawn(build(self.stop.subscribe())));
    }

    /// Lets every loop finish and acknowledge the batch in hand, then returns.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

impl Default for Worker {
    fn default() -> Self {
        Self::new()
    }
}
