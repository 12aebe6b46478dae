//! `seckill demo`: seed demo users and a live demo sale, then exit.

use crate::clock::{Clock, SystemClock};
use crate::config::Config;

/// Seeds the configured database.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let store = crate::app::open_store(&config).await?;
    crate::demo::seed(&store, SystemClock.now_ms()).await?;
    println!("demo data is in {}", config.database_url.redacted());
    super::serve::print_demo_logins();
    Ok(())
}
