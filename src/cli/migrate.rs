//! `seckill migrate`: bring the database schema up to date and exit.

use crate::config::Config;

/// Opens the database, which applies any pending migration.
pub async fn run(config: Config) -> anyhow::Result<()> {
    crate::app::open_store(&config).await?;
    println!("database {} is up to date", config.database_url.redacted());
    Ok(())
}
