//! Cluster mode's [`Fleet`]: the servers' buy counts and accepted units in Redis and the
//! queues' depths in RabbitMQ (when there is RabbitMQ).
//!
//! The counts are one hash, `PREFIX{fleet}:buys`, a field per server's Snowflake node id (unique
//! among the live processes: see `lease.rs`) holding `STAMP|outcome=count,…`. `STAMP` is Redis's
//! own clock at the share, so the servers' clocks need not agree; a reading drops the fields not
//! shared again within [`STALE_AFTER`] (their server stopped), and the hash itself expires when
//! every server has stopped. Counts are matched by outcome name, so servers of another version
//! with other outcomes add up as far as they agree.
//!
//! The accepted units are a second hash under the same hash tag, `PREFIX{fleet}:accepted`, a
//! field per node id holding `STAMP|SINCE|product=units,…` (`SINCE` the server's start, Unix
//! ms), and the field `born`: Redis's clock when the hash was made, so a reader knows how long
//! the shares have been collected since Redis last lost them.

use super::amqp::depths::QueueDepths;
use crate::domain::ProductId;
use crate::redis_link::RedisLink;
use crate::sale::{Accepted, AcceptedShares, BuyCounts, Fleet, SharedBuys};
use anyhow::Context;
use async_trait::async_trait;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

/// How long a server's shared counts count without being shared again: a few of its
/// once-a-second shares.
const STALE_AFTER: Duration = Duration::from_secs(3);

/// How long the accepted units' hash must have been collected before it is taken as complete:
/// every live server shares once a second, so after this each has shared at least twice since
/// Redis last lost the hash. No server can tell a hash made at the cluster's start from one made
/// again after Redis lost it, so each waits as long.
const COLLECTED_FOR: Duration = Duration::from_millis(2_500);

/// Stamps and stores one server's buy counts and accepted units. KEYS[1] = the buy counts'
/// hash, KEYS[2] = the accepted units' hash. ARGV = node id, buy counts, accepted units, how
/// long the hashes live unrenewed (ms).
static SHARE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"#!lua
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
redis.call('HSET', KEYS[1], ARGV[1], now .. '|' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('HSETNX', KEYS[2], 'born', now)
redis.call('HSET', KEYS[2], ARGV[1], now .. '|' .. ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
",
    )
});

/// How long ago (ms) the accepted units' hash was made, and the live servers' shares,
/// `node|STAMP|SINCE|units`, each shared within ARGV[1] ms; older fields are deleted.
/// KEYS[1] = the hash.
static ACCEPTED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"#!lua
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
local fields = redis.call('HGETALL', KEYS[1])
local born = now
local live = {}
for i = 1, #fields, 2 do
  if fields[i] == 'born' then
    born = tonumber(fields[i + 1]) or now
  else
    local stamp = tonumber(string.match(fields[i + 1], '^(%d+)|'))
    if stamp == nil or now - stamp > tonumber(ARGV[1]) then
      redis.call('HDEL', KEYS[1], fields[i])
    else
      table.insert(live, fields[i] .. '|' .. fields[i + 1])
    end
  end
end
return {now - born, live}
",
    )
});

/// The counts of the servers other than ARGV[2] shared within ARGV[1] ms; older fields are
/// deleted. KEYS[1] = the hash.
static OTHERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"#!lua
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
    /// The hash of the servers' accepted units.
    accepted_key: String,
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
            accepted_key: format!("{prefix}{{fleet}}:accepted"),
            node: node_id.to_string(),
            queues,
        }
    }
}

#[async_trait]
impl Fleet for ClusterFleet {
    async fn share_buys(&self, counts: &BuyCounts, accepted: &Accepted) -> anyhow::Result<()> {
        let (): () = SHARE
            .key(&self.key)
            .key(&self.accepted_key)
            .arg(&self.node)
            .arg(encode(counts))
            .arg(encode_accepted(accepted))
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

    async fn accepted(&self) -> anyhow::Result<AcceptedShares> {
        let (age, shared): (i64, Vec<String>) = ACCEPTED
            .key(&self.accepted_key)
            .arg(STALE_AFTER.as_millis() as u64)
            .invoke_async(&mut self.redis.clone())
            .await
            .context("reading the servers' accepted units")?;
        Ok(AcceptedShares {
            servers: shared
                .iter()
                .filter_map(|value| decode_accepted(value))
                .collect(),
            complete: Duration::from_millis(age.max(0) as u64) >= COLLECTED_FOR,
        })
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

/// `SINCE|product=units,…`.
fn encode_accepted(accepted: &Accepted) -> String {
    let units: Vec<String> = accepted
        .units
        .iter()
        .map(|(product, units)| format!("{}={units}", product.0))
        .collect();
    format!("{}|{}", accepted.since, units.join(","))
}

/// A share read back, `node|STAMP|SINCE|product=units,…`; `None` when it does not read (a piece
/// of the units list that does not read is left out).
fn decode_accepted(value: &str) -> Option<Accepted> {
    let mut parts = value.splitn(4, '|');
    let node = parts.next()?.parse().ok()?;
    let _stamp = parts.next()?;
    let since = parts.next()?.parse().ok()?;
    let units = parts
        .next()?
        .split(',')
        .filter_map(|pair| {
            let (product, units) = pair.split_once('=')?;
            Some((ProductId(product.parse().ok()?), units.parse().ok()?))
        })
        .collect();
    Some(Accepted { node, since, units })
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

    #[test]
    fn shared_accepted_units_read_back_and_a_bad_piece_is_left_out() {
        let accepted = Accepted {
            node: 7,
            since: 1_700_000_000_000,
            units: vec![(ProductId(3), 12), (ProductId(4), 1)],
        };
        let stored = format!("7|1700000000500|{}", encode_accepted(&accepted));
        assert_eq!(decode_accepted(&stored), Some(accepted));
        assert_eq!(
            decode_accepted("8|1|5|3=2,junk,x=1"),
            Some(Accepted {
                node: 8,
                since: 5,
                units: vec![(ProductId(3), 2)],
            })
        );
        assert_eq!(decode_accepted("8|1|"), None);
        assert_eq!(decode_accepted("8|1|5|").map(|a| a.units), Some(vec![]));
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_server_reads_the_live_others_and_forgets_the_stopped() {
        let redis = crate::redis_link::test_link().await;
        let prefix = format!("seckill-unit:{}:fleet:", std::process::id());
        let fleet = |node| ClusterFleet::new(redis.clone(), &prefix, node, None);
        let (me, other) = (fleet(1), fleet(2));
        let accepted = |node, units| Accepted {
            node,
            since: 1_700_000_000_000,
            units: vec![(ProductId(9), units)],
        };
        me.share_buys(&vec![("accepted", 5)], &accepted(1, 5))
            .await
            .unwrap();
        other
            .share_buys(&vec![("accepted", 7)], &accepted(2, 7))
            .await
            .unwrap();
        let read = me.accepted().await.unwrap();
        assert!(
            !read.complete,
            "a hash just made may miss a live server's share"
        );
        // Collected for long enough, it is complete.
        let _: () = redis::cmd("HSET")
            .arg(&me.accepted_key)
            .arg("born")
            .arg(0)
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        let read = me.accepted().await.unwrap();
        assert!(read.complete, "a hash collected for long is complete");
        let mut shares = read.servers;
        shares.sort_by_key(|share| share.node);
        assert_eq!(shares, [accepted(1, 5), accepted(2, 7)]);
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
            .arg(&me.accepted_key)
            .query_async(&mut redis.clone())
            .await
            .unwrap();
    }
}
