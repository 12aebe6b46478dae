//! `seckill worker`: run cluster mode's consumers until SIGINT or SIGTERM, then finish the
//! batches in hand, acknowledge them and exit. With `--addr` (or `worker_addr`) it serves
//! `/healthz`, `/readyz` and `/metrics` there.

use crate::app::WorkerApp;
use crate::clock::SystemClock;
use crate::config::{Config, Deployment};
use anyhow::bail;
use std::net::SocketAddr;
use std::sync::Arc;

/// Options of `seckill worker`.
#[derive(clap::Args)]
pub struct Args {
    /// Serve `/healthz`, `/readyz` and `/metrics` here (e.g. 0.0.0.0:9090) instead of the
    /// configured `worker_addr`; neither set, the worker listens nowhere.
    #[arg(long)]
    addr: Option<SocketAddr>,
}

/// Runs the worker.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    if let Deployment::Embedded = config.deployment() {
        bail!(
            "`seckill worker` needs SECKILL_REDIS_URL: in embedded mode `seckill serve` stores \
             its orders itself"
        );
    }
    // Registered before any work starts: a SIGTERM that comes early still means "finish the
    // batches in hand", not an abrupt end.
    let signals = super::shutdown_signals();
    let listener = match args.addr.or(config.worker_addr) {
        Some(addr) => Some(
            crate::server::listen(addr)
                .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?,
        ),
        None => None,
    };
    let observed = match &listener {
        Some(listener) => format!(
            "; /healthz, /readyz and /metrics at http://{}/",
            listener.local_addr()?
        ),
        None => String::new(),
    };
    let worker = WorkerApp::build(&config, Arc::new(SystemClock), listener).await?;
    println!(
        "seckill worker is storing orders (database {}){observed}",
        config.database_url.redacted()
    );
    worker.run(signals.nth(1)).await
}
