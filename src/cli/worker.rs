//! `seckill worker`: run cluster mode's consumers until SIGINT or SIGTERM, then finish the
//! batches in hand, acknowledge them and exit.

use crate::app::Core;
use crate::clock::SystemClock;
use crate::config::{Config, Deployment};
use anyhow::bail;
use std::sync::Arc;

/// Runs the worker.
pub async fn run(config: Config) -> anyhow::Result<()> {
    if let Deployment::Embedded = config.deployment() {
        bail!(
            "`seckill worker` needs SECKILL_REDIS_URL: in embedded mode `seckill serve` stores \
             its orders itself"
        );
    }
    // Registered before any work starts: a SIGTERM that comes early still means "finish the
    // batches in hand", not an abrupt end.
    let stop = super::shutdown_signal();
    let mut core = Core::build(&config, Arc::new(SystemClock)).await?;
    core.start_scheduler();
    let Some(worker) = core.start_worker(&config).await? else {
        bail!("no consumers to run");
    };
    println!(
        "seckill worker is storing orders (database {})",
        config.database_url.redacted()
    );
    stop.await;
    worker.stop().await;
    core.stop().await;
    Ok(())
}
