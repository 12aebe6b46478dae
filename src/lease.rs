//! Snowflake node ids leased from Redis, so two processes sharing a database never make the
//! same order id. A process takes the first free id among 1024 (`SET … NX EX`), renews its lease
//! every few seconds, and stops making ids if the lease is ever lost, since another process may
//! then hold the same id.

use crate::ids::MAX_NODE_ID;
use crate::redis_link::RedisLink;
use anyhow::{Context, bail};
use redis::Script;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long a lease lives without renewal: a crashed process frees its id after this.
const LEASE_SECS: u64 = 30;
/// How often the lease is renewed.
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// Renews only a lease that is still ours.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// A leased node id and the task that keeps it.
pub struct NodeLease {
    pub node_id: u16,
    pub renewal: JoinHandle<()>,
}

/// Takes a free node id under `prefix` and keeps renewing it. `on_lost` runs if the lease is
/// lost; it must stop the process from making ids.
pub async fn acquire(
    mut redis: RedisLink,
    prefix: &str,
    on_lost: impl FnOnce() + Send + 'static,
) -> anyhow::Result<NodeLease> {
    let owner = format!("{}:{}", std::process::id(), now_nanos());
    let start: u64 = redis::cmd("INCR")
        .arg(format!("{prefix}node-seq"))
        .query_async(&mut redis)
        .await
        .context("leasing a node id")?;
    let slots = u64::from(MAX_NODE_ID) + 1;
    for offset in 0..slots {
        let node = ((start + offset) % slots) as u16;
        let key = format!("{prefix}node:{node}");
        let taken: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&owner)
            .arg("NX")
            .arg("EX")
            .arg(LEASE_SECS)
            .query_async(&mut redis)
            .await?;
        if taken.is_some() {
            let renewal = tokio::spawn(renew(redis, key, owner, on_lost));
            tracing::info!(node, "leased Snowflake node id");
            return Ok(NodeLease {
                node_id: node,
                renewal,
            });
        }
    }
    bail!("all {slots} Snowflake node ids are leased: too many processes share this Redis prefix")
}

async fn renew(
    mut redis: RedisLink,
    key: String,
    owner: String,
    on_lost: impl FnOnce() + Send + 'static,
) {
    let script = Script::new(RENEW);
    let mut interval = tokio::time::interval(RENEW_EVERY);
    interval.tick().await;
    let mut last_renewed = tokio::time::Instant::now();
    loop {
        interval.tick().await;
        // Unrenewed for (almost) the whole lease: another process may hold the id by now.
        if last_renewed.elapsed() >= Duration::from_secs(LEASE_SECS) - RENEW_EVERY {
            tracing::error!(key, "the node id lease could not be renewed in time");
            on_lost();
            return;
        }
        let renewed: Result<i64, _> = script
            .key(&key)
            .arg(&owner)
            .arg(LEASE_SECS)
            .invoke_async(&mut redis)
            .await;
        match renewed {
            Ok(1) => last_renewed = tokio::time::Instant::now(),
            Ok(_) => {
                tracing::error!(key, "the node id lease was lost to another process");
                on_lost();
                return;
            }
            // Redis unreachable for a moment: the lease still has time left; try again.
            Err(e) => tracing::warn!(error = %e, "renewing the node id lease"),
        }
    }
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}
