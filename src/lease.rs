//! Snowflake node ids leased from Redis, so two processes sharing a database never make the
//! same order id. A process takes the first free id among 1024 from a random start
//! (`SET … NX EX`), renews its lease every few seconds, and stops making ids if the lease is
//! ever lost, since another process may then hold the same id.
//!
//! A lease that is simply gone is not lost: Redis forgot it (restarted without persistence, or a
//! replica promoted without the data), and the process takes it again at its next renewal. Only
//! a lease held by another process, or one left unrenewed for almost its whole life (Redis
//! unreachable, so another process may take it once it expires), counts as lost.

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

/// Renews the lease while it is ours, and takes it again when it is gone: only another
/// process's lease on the key means ours is lost. KEYS[1] = the node's key. ARGV = our owner
/// string, the lease in seconds. Returns 1 renewed, 2 taken again, 0 held by another.
const KEEP: &str = r"#!lua
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 2
end
return 0
";

/// What one renewal found.
#[derive(Debug, PartialEq, Eq)]
enum Kept {
    /// The lease was ours and is extended.
    Renewed,
    /// The key was gone (Redis lost its data) and is ours again.
    Retaken,
    /// Another process holds the id.
    Lost,
}

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
    let slots = u64::from(MAX_NODE_ID) + 1;
    // Random, not a counter kept in Redis: a counter restarts when Redis loses its data, and
    // would send the first process started then to the id a running process is about to take
    // again (see [`KEEP`]).
    let start = rand::random::<u64>() % slots;
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
            .await
            .context("leasing a node id")?;
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
    let script = Script::new(KEEP);
    let mut interval = tokio::time::interval(RENEW_EVERY);
    interval.tick().await;
    let mut last_renewed = tokio::time::Instant::now();
    loop {
        interval.tick().await;
        // Unrenewed for (almost) the whole lease: another process may hold the id by now, and
        // may already have made ids with it, so taking it again would not be safe.
        if last_renewed.elapsed() >= Duration::from_secs(LEASE_SECS) - RENEW_EVERY {
            tracing::error!(key, "the node id lease could not be renewed in time");
            on_lost();
            return;
        }
        match keep(&script, &mut redis, &key, &owner).await {
            Ok(Kept::Renewed) => last_renewed = tokio::time::Instant::now(),
            Ok(Kept::Retaken) => {
                tracing::warn!(key, "Redis had forgotten the node id lease: taken again");
                last_renewed = tokio::time::Instant::now();
            }
            Ok(Kept::Lost) => {
                tracing::error!(key, "the node id lease was lost to another process");
                on_lost();
                return;
            }
            // Redis unreachable for a moment: the lease still has time left; try again.
            Err(e) => tracing::warn!(error = %e, "renewing the node id lease"),
        }
    }
}

/// One renewal of the lease on `key` held by `owner` (see [`KEEP`]).
async fn keep(
    script: &Script,
    redis: &mut RedisLink,
    key: &str,
    owner: &str,
) -> redis::RedisResult<Kept> {
    let kept: i64 = script
        .key(key)
        .arg(owner)
        .arg(LEASE_SECS)
        .invoke_async(redis)
        .await?;
    Ok(match kept {
        1 => Kept::Renewed,
        2 => Kept::Retaken,
        _ => Kept::Lost,
    })
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn holder(redis: &mut RedisLink, key: &str) -> Option<String> {
        redis::cmd("GET").arg(key).query_async(redis).await.unwrap()
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_lease_redis_forgot_is_taken_again_and_only_another_holder_means_lost() {
        let mut redis = crate::redis_link::test_link().await;
        let key = format!("seckill-unit:{}:node:7", std::process::id());
        let script = Script::new(KEEP);
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("me")
            .arg("EX")
            .arg(LEASE_SECS)
            .query_async(&mut redis)
            .await
            .unwrap();
        let kept = keep(&script, &mut redis, &key, "me").await.unwrap();
        assert_eq!(kept, Kept::Renewed);

        // Redis restarted empty: the key is gone, and no one else holds the id.
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut redis)
            .await
            .unwrap();
        let kept = keep(&script, &mut redis, &key, "me").await.unwrap();
        assert_eq!(kept, Kept::Retaken);
        assert_eq!(holder(&mut redis, &key).await.as_deref(), Some("me"));
        let ttl: i64 = redis::cmd("TTL")
            .arg(&key)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(ttl > 0 && ttl <= LEASE_SECS as i64, "ttl {ttl}");

        // Another process took the id meanwhile: lost, and its lease is left alone.
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("another")
            .query_async(&mut redis)
            .await
            .unwrap();
        let kept = keep(&script, &mut redis, &key, "me").await.unwrap();
        assert_eq!(kept, Kept::Lost);
        assert_eq!(holder(&mut redis, &key).await.as_deref(), Some("another"));

        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
}
