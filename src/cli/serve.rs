//! `seckill serve`: run the server until SIGINT or SIGTERM, then drain and exit (a second signal
//! skips the drain's grace).

use crate::app::App;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, Deployment};
use std::net::SocketAddr;
use std::sync::Arc;

/// Options of `seckill serve`.
#[derive(clap::Args)]
pub struct Args {
    /// Listen here instead of the configured `http_addr` (e.g. 0.0.0.0:8080).
    #[arg(long)]
    addr: Option<SocketAddr>,
    /// Seed demo users and a sale that is live now (idempotent).
    #[arg(long)]
    demo: bool,
    /// Also run the worker's consumers in this process (cluster mode; same as
    /// `SECKILL_RUN_WORKER=true`).
    #[arg(long)]
    worker: bool,
}

/// Starts the server.
pub async fn run(mut config: Config, args: Args) -> anyhow::Result<()> {
    if let Some(addr) = args.addr {
        config.http_addr = addr;
    }
    config.run_worker |= args.worker;
    // Registered before any work starts (see `shutdown_signals`).
    let signals = super::shutdown_signals();
    raise_file_limit();
    config.demo = args.demo;
    if args.demo {
        let store = crate::app::open_store(&config).await?;
        crate::demo::seed(&store, SystemClock.now_ms()).await?;
        // The demo pays through the built-in sandbox gateway, unless a provider is configured.
        config
            .payment
            .provider
            .get_or_insert(crate::config::ProviderKind::Sandbox);
    }
    // Listening first, so the notify and return URLs can name the port actually taken.
    let listener = crate::server::listen(config.http_addr)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.http_addr))?;
    config.http_addr = listener.local_addr()?;
    let app = App::build(&config, Arc::new(SystemClock)).await?;
    let addr = listener.local_addr()?;
    println!(
        "seckill is selling at http://{addr}/  (database {})",
        config.database_url.redacted()
    );
    if let Deployment::Cluster(_) = config.deployment()
        && !config.run_worker
    {
        println!("cluster mode: accepted orders wait in the Redis outbox for `seckill worker`");
    }
    if let Some(token) = app.generated_admin_token() {
        println!(
            "admin token (generated, stored in the database): {}",
            token.expose()
        );
    }
    if args.demo {
        print_demo_logins();
    }
    app.serve(listener, signals.nth(1), signals.nth(2)).await
}

/// Lets the process open as many files as its hard limit allows: every client connection is
/// one, and the server caps connections below the limit it finds when it starts.
fn raise_file_limit() {
    match crate::server::raise_file_limit() {
        Ok(limit) => tracing::info!(
            soft = limit.soft,
            hard = limit.hard,
            max_connections = crate::server::default_max_connections(),
            "open-file limit"
        ),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
}

/// Prints the demo shoppers' logins.
pub fn print_demo_logins() {
    let logins: Vec<String> = crate::demo::DEMO_USERS
        .iter()
        .map(|(user, password)| format!("{user} / {password}"))
        .collect();
    println!("demo logins: {}", logins.join(", "));
}
