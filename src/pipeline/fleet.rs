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
//!
//! The orders a server answered `202` lately are a sorted set per server,
//! `PREFIX{fleet}:answered:NODE`, a member `order:product:user:quantity` per order scored by when
//! it was made (its server's clock, which alone trims it), at most [`ANSWERS_HELD`] kept and none
//! older than [`ANSWERS_KEPT_FOR_MS`]; it expires that long after its server's last share. The
//! hash `PREFIX{fleet}:answering` holds, a field per node id, `STAMP|SEQ`: how far the server's
//! shares go (its count of orders answered), so a share that does not follow on what Redis holds
//! (Redis lost it, or a replica promoted without the last shares) is refused and the server
//! shares every order it holds instead. Members are the same for the same order, so a share
//! made again adds nothing twice.

use super::amqp::depths::QueueDepths;
use crate::domain::{OrderId, ProductId, Quantity, UserId};
use crate::redis_link::{RedisLink, ScriptRequest, evalsha};
use crate::sale::{
    ANSWERS_HELD, ANSWERS_KEPT_FOR_MS, Accepted, AcceptedShares, Answered, AnswersShared,
    AnswersToShare, BuyCounts, Fleet, SharedBuys,
};
use anyhow::Context;
use async_trait::async_trait;
use redis::Script;
use std::collections::HashMap;
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

/// Adds one server's orders answered `202` to its sorted set, if they follow on what Redis holds
/// of them, and forgets those too old or beyond the bound; forgets the servers that stopped
/// sharing long ago. KEYS[1] = the hash of how far each server's shares go, KEYS[2] = this
/// server's sorted set. ARGV = node id, the sequence number the share follows on (empty: it
/// follows on anything), the one it ends at, the oldest score kept, most members kept, how long
/// the keys live unrenewed (ms), then a score and a member per order. Returns 1 when added, 0
/// when the share does not follow on what Redis holds.
static SHARE_ANSWERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"#!lua
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
if ARGV[2] ~= '' then
  local held = redis.call('HGET', KEYS[1], ARGV[1])
  if not held or string.match(held, '|(%d+)$') ~= ARGV[2] then
    return 0
  end
end
-- A call adds up to 500 orders: each call has a fixed cost, and Lua's stack bounds one's arguments.
for i = 7, #ARGV, 1000 do
  redis.call('ZADD', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[5]) + 1))
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('HSET', KEYS[1], ARGV[1], now .. '|' .. ARGV[3])
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local stamp = tonumber(string.match(fields[i + 1], '^(%d+)|'))
  if stamp == nil or now - stamp > tonumber(ARGV[6]) then
    redis.call('HDEL', KEYS[1], fields[i])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
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
    /// The hash of how far each server's shared answers go.
    answering_key: String,
    /// The prefix of each server's sorted set of answers, before its node id.
    answered_prefix: String,
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
            answering_key: format!("{prefix}{{fleet}}:answering"),
            answered_prefix: format!("{prefix}{{fleet}}:answered:"),
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

    async fn share_answers(&self, answers: &AnswersToShare) -> anyhow::Result<bool> {
        // One buffer for the whole call, every order written straight into it: a call carries
        // each order answered in the last second.
        let orders = answers.orders.len();
        let mut call = redis::Cmd::with_capacity(11 + 2 * orders, 256 + 64 * orders);
        call.arg("EVALSHA")
            .arg(SHARE_ANSWERS.get_hash())
            .arg(2)
            .arg(&self.answering_key)
            .arg(format!("{}{}", self.answered_prefix, self.node))
            .arg(&self.node)
            .arg(
                answers
                    .from
                    .map_or_else(String::new, |from| from.to_string()),
            )
            .arg(answers.to)
            .arg(answers.keep_since)
            .arg(ANSWERS_HELD)
            .arg(ANSWERS_KEPT_FOR_MS);
        for answered in &answers.orders {
            call.arg(answered.made_at()).arg(encode_answered(answered));
        }
        let mut redis = self.redis.clone();
        let added: i64 = evalsha(&mut redis, &SHARE_ANSWERS, ScriptRequest::Alone(&call))
            .await
            .context("sharing the orders this server answered")?;
        Ok(added == 1)
    }

    async fn answered(&self) -> anyhow::Result<AnswersShared> {
        let mut redis = self.redis.clone();
        let answering: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&self.answering_key)
            .query_async(&mut redis)
            .await
            .context("reading which servers shared their answers")?;
        let servers: Vec<u16> = answering
            .keys()
            .filter_map(|node| node.parse().ok())
            .collect();
        let mut read = redis::pipe();
        for node in &servers {
            read.zrange(format!("{}{node}", self.answered_prefix), 0, -1);
        }
        let members: Vec<Vec<String>> = if servers.is_empty() {
            Vec::new()
        } else {
            read.query_async(&mut redis)
                .await
                .context("reading the orders the servers answered")?
        };
        Ok(AnswersShared {
            servers,
            orders: members
                .iter()
                .flatten()
                .filter_map(|member| decode_answered(member))
                .collect(),
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

/// `order:product:user:quantity`, the numbers written by `itoa` (one for each order answered
/// 202, so not through `format!`'s machinery).
fn encode_answered(answered: &Answered) -> String {
    let numbers = [
        answered.order.0,
        answered.product.0,
        answered.user.0,
        i64::from(answered.quantity.get()),
    ];
    let mut digits = itoa::Buffer::new();
    let mut text = String::with_capacity(64);
    for (at, number) in numbers.into_iter().enumerate() {
        if at > 0 {
            text.push(':');
        }
        text.push_str(digits.format(number));
    }
    text
}

/// An order answered as [`encode_answered`] wrote it; `None` when it does not read.
fn decode_answered(member: &str) -> Option<Answered> {
    let mut parts = member.split(':');
    let answered = Answered {
        order: OrderId(parts.next()?.parse().ok()?),
        product: ProductId(parts.next()?.parse().ok()?),
        user: UserId(parts.next()?.parse().ok()?),
        quantity: Quantity::parse(parts.next()?.parse().ok()?).ok()?,
    };
    parts.next().is_none().then_some(answered)
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

    #[test]
    fn answered_orders_read_back_and_a_bad_member_is_left_out() {
        let answered = Answered {
            order: OrderId(7_000_000_000_123),
            product: ProductId(3),
            user: UserId(42),
            quantity: Quantity::parse(2).unwrap(),
        };
        assert_eq!(encode_answered(&answered), "7000000000123:3:42:2");
        assert_eq!(decode_answered(&encode_answered(&answered)), Some(answered));
        for bad in ["", "1:2:3", "1:2:3:0", "1:2:3:101", "1:2:3:1:5", "x:2:3:1"] {
            assert_eq!(decode_answered(bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn answers_are_added_while_they_follow_on_and_shared_whole_once_lost() {
        let redis = crate::redis_link::test_link().await;
        let prefix = format!("seckill-unit:{}:answers:", std::process::id());
        let fleet = ClusterFleet::new(redis.clone(), &prefix, 4, None);
        let made = crate::ids::EPOCH_MS + 86_400_000;
        let order = |n: i64| Answered {
            // Made `n` ms after `made` by node 4.
            order: OrderId(((n + 86_400_000) << 22) | (4 << 12)),
            product: ProductId(9),
            user: UserId(n),
            quantity: Quantity::parse(1).unwrap(),
        };
        let share = |from, to, orders: Vec<Answered>| AnswersToShare {
            from,
            to,
            orders,
            keep_since: made,
        };
        let users = |shared: AnswersShared| {
            let mut users: Vec<i64> = shared.orders.iter().map(|a| a.user.0).collect();
            users.sort_unstable();
            (shared.servers, users)
        };
        // Nothing held yet: a share that follows on something is refused.
        assert!(
            !fleet
                .share_answers(&share(Some(2), 3, vec![order(3)]))
                .await
                .unwrap()
        );
        assert_eq!(users(fleet.answered().await.unwrap()), (vec![], vec![]));
        assert!(
            fleet
                .share_answers(&share(None, 2, vec![order(1), order(2)]))
                .await
                .unwrap()
        );
        assert!(
            fleet
                .share_answers(&share(Some(2), 3, vec![order(3)]))
                .await
                .unwrap()
        );
        assert_eq!(
            users(fleet.answered().await.unwrap()),
            (vec![4], vec![1, 2, 3])
        );
        // One that skips a share is refused; shared whole again, nothing is held twice.
        assert!(
            !fleet
                .share_answers(&share(Some(4), 5, vec![order(5)]))
                .await
                .unwrap()
        );
        assert!(
            fleet
                .share_answers(&share(None, 5, (1..=5).map(order).collect()))
                .await
                .unwrap()
        );
        assert_eq!(
            users(fleet.answered().await.unwrap()),
            (vec![4], vec![1, 2, 3, 4, 5])
        );
        // Orders made before the oldest kept are forgotten.
        assert!(
            fleet
                .share_answers(&AnswersToShare {
                    keep_since: made + 3,
                    ..share(Some(5), 5, vec![])
                })
                .await
                .unwrap()
        );
        assert_eq!(
            users(fleet.answered().await.unwrap()),
            (vec![4], vec![3, 4, 5])
        );
        // Redis lost them: the next share, following on what it held, is refused.
        let _: () = redis::cmd("DEL")
            .arg(&fleet.answering_key)
            .arg(format!("{}4", fleet.answered_prefix))
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        assert!(
            !fleet
                .share_answers(&share(Some(5), 5, vec![]))
                .await
                .unwrap()
        );
        // A share of more orders than one ZADD of the script adds: every one is held.
        assert!(
            fleet
                .share_answers(&share(None, 1_201, (1..=1_201).map(order).collect()))
                .await
                .unwrap()
        );
        assert_eq!(
            users(fleet.answered().await.unwrap()),
            (vec![4], (1..=1_201).collect())
        );
        let _: () = redis::cmd("DEL")
            .arg(&fleet.answering_key)
            .arg(format!("{}4", fleet.answered_prefix))
            .query_async(&mut redis.clone())
            .await
            .unwrap();
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
