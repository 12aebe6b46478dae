//! Cluster mode's [`Fleet`]: the servers' buy counts in Redis and the queues' depths in
//! RabbitMQ (when there is RabbitMQ).
//!
//! The counts are one hash, `PREFIX{fleet}:buys`, a field per server's Snowflake node id (unique
//! among the live processes: see `lease.rs`) holding `STAMP|outcome=count,…`. `STAMP` is Redis's
//! own clock at the share, so the servers' clocks need not agree; a reading drops the fields not
//! shared again within [`STALE_AFTER`] (their server stopped), and the hash itself expires when
//! every server has stopped. Counts are matched by outcome name, so servers of another version
//! with other outcomes add up as far as they agree.

use super::amqp::depths::QueueDepths;
use crate::redis_link::RedisLink;
use crate::sale::{BuyCounts, Fleet, SharedBuys};
use anyhow::Context;
use async_trait::async_trait;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

/// How long a server's shared counts count without being shared again: a few of its
/// once-a-second shares.
const STALE_AFTER: Duration = Duration::from_secs(3);

/// Stamps and stores one server's counts. KEYS[1] = the hash. ARGV = node id, counts, how long
/// the hash lives unrenewed (ms).
static SHARE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
redis.call('HSET', KEYS[1], ARGV[1], now .. '|' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
",
    )
});

/// The counts of the servers other than ARGV[2] shared within ARGV[1] ms; older fields are
/// deleted. KEYS[1] = the hash.
static OTHERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
local fields = redis.call('HGETALL', KEYS[1])
local live = {}
for i = 1, #fields, 2 do
  local stamp = tonumber(string.match(fields[i + 1], '^(%d+)|'))
  if stamp == nil or now - stamp > tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], fields[i])
  elseif fields[i] ~= ARGV[2] then
    table.insert(live, fields[i + 1])
  end
end
return live
",
    )
});

/// The servers and queues of one cluster deployment.
pub struct ClusterFleet {
    redis: RedisLink,
    /// The hash of the servers' counts.
    key: String,
    /// This server's field in it.
    node: String,
    /// RabbitMQ's queues, when the deployment relays through it.
    queues: Option<QueueDepths>,
}

impl ClusterFleet {
    /// The fleet of the processes under `prefix`, this one being `node_id`.
    pub fn new(redis: RedisLink, prefix: &str, node_id: u16, queues: Option<QueueDepths>) -> Self {
        Self {
            redis,
            key: format!("{prefix}{{fleet}}:buys"),
            node: node_id.to_string(),
            queues,
        }
    }
}

#[async_trait]
impl Fleet for ClusterFleet {
    async fn share_buys(&self, counts: &BuyCounts) -> anyhow::Result<()> {
        let _: i64 = SHARE
            .key(&self.key)
            .arg(&self.node)
            .arg(encode(counts))
            .arg(STALE_AFTER.as_millis() as u64)
            .invoke_async(&mut self.redis.clone())
            .await
            .context("sharing this server's buy counts")?;
        Ok(())
    }

    async fn others_buys(&self) -> anyhow::Result<Vec<SharedBuys>> {
        let shared: Vec<String> = OTHERS
            .key(&self.key)
            .arg(STALE_AFTER.as_millis() as u64)
            .arg(&self.node)
            .invoke_async(&mut self.redis.clone())
            .await
            .context("reading the other servers' buy counts")?;
        Ok(shared.iter().map(|value| decode(value)).collect())
    }

    async fn queue_depths(&self) -> anyhow::Result<Vec<(String, u64)>> {
        match &self.queues {
            Some(queues) => queues.read().await,
            None => Ok(Vec::new()),
        }
    }
}

/// `outcome=count,…`.
fn encode(counts: &BuyCounts) -> String {
    counts
        .iter()
        .map(|(outcome, count)| format!("{outcome}={count}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The counts of `STAMP|outcome=count,…`; a piece that does not read is left out.
fn decode(value: &str) -> SharedBuys {
    let counts = value.split_once('|').map_or("", |(_, counts)| counts);
    counts
        .split(',')
        .filter_map(|pair| {
            let (outcome, count) = pair.split_once('=')?;
            Some((outcome.to_owned(), count.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_counts_read_back_and_a_bad_piece_is_left_out() {
        let counts: BuyCounts = vec![("accepted", 12), ("sold_out", 0), ("limit_reached", 3)];
        let stored = format!("1700000000000|{}", encode(&counts));
        assert_eq!(
            decode(&stored),
            [
                ("accepted".to_owned(), 12),
                ("sold_out".to_owned(), 0),
                ("limit_reached".to_owned(), 3)
            ]
        );
        assert_eq!(
            decode("1|accepted=2,junk,ended=-1,sold_out=4"),
            [("accepted".to_owned(), 2), ("sold_out".to_owned(), 4)]
        );
        assert!(decode("no stamp").is_empty());
    }

    #[tokio::test]
    async fn a_server_reads_the_live_others_and_forgets_the_stopped() {
        let redis = crate::redis_link::test_link().await;
        let prefix = format!("seckill-unit:{}:fleet:", std::process::id());
        let fleet = |node| ClusterFleet::new(redis.clone(), &prefix, node, None);
        let (me, other) = (fleet(1), fleet(2));
        me.share_buys(&vec![("accepted", 5)]).await.unwrap();
        other.share_buys(&vec![("accepted", 7)]).await.unwrap();
        assert_eq!(
            me.others_buys().await.unwrap(),
            [vec![("accepted".to_owned(), 7)]]
        );
        // A server that stopped sharing long ago counts no more, and is forgotten.
        let _: () = redis::cmd("HSET")
            .arg(&me.key)
            .arg("2")
            .arg("1000|accepted=7")
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        assert!(me.others_buys().await.unwrap().is_empty());
        let left: Vec<String> = redis::cmd("HKEYS")
            .arg(&me.key)
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        assert_eq!(left, ["1"]);
        let _: () = redis::cmd("DEL")
            .arg(&me.key)
            .query_async(&mut redis.clone())
            .await
            .unwrap();
    }
}
