//! The throttles every server shares, off the request path: each server decides in this
//! process, against the last totals Redis answered plus its own requests since, and a task
//! sends its new requests to Redis every [`SYNC_EVERY`] and reads the totals back (`sync.lua`,
//! one script call per sync whatever the number of requests). A request never waits for Redis:
//! a buy costs Redis only its gate call.
//!
//! - This process's own requests pass a token bucket of the full quota first (in `counts.rs`,
//!   beside the shared counts), so no server ever lets a key through more than its quota by
//!   itself. A request refused by the bucket or the shared count takes nothing from either: a
//!   flood from one client costs the others nothing. A request this process answers by itself
//!   ([`Limiter::hit_here`]) is counted in the bucket only.
//! - **Overshoot.** A server decides on the totals of its own last sync of a key plus its own
//!   requests since: it misses what the others counted after that sync. Totals only grow within
//!   a window, so once the key's total in Redis has reached the quota, each server passes at
//!   most the requests it receives before its next sync of the key has answered, that is one
//!   (the request that starts the sync) and those of one [`SYNC_EVERY`] and round trip after
//!   it. With `S` servers each receiving a key's requests at `r` a second, at most
//!   `S × (1 + r × (SYNC_EVERY + round trip))` requests pass above the quota in a window: 3
//!   servers, a bot at 1,000 requests a second on each, a round trip of 1 ms:
//!   3 × (1 + 6) = 21 above the limit; a shopper clicking 10 times a second on each server:
//!   3. Never more than `(S − 1) × quota` (each server's own buckets hold it to the quota).
//! - **Without Redis.** When no sync has succeeded for [`FALLBACK_AFTER`], each server also
//!   holds its own requests of the window to its share, the quota divided by the servers it
//!   last saw alive (at least 1), so the fleet together stays within the quota; the shared
//!   count resumes with the next sync that succeeds. A warning is logged (at most one per
//!   [`WARN_EVERY`]) and `seckill_rate_limit_fallbacks_total` counts each request decided on
//!   the share. Until [`FALLBACK_AFTER`] has passed, a server decides against the totals it
//!   last had, as between two syncs.
//! - **Alive.** Each sync stamps this server (its node id) with Redis's clock in
//!   `PREFIX{limits}:servers`; a server whose last stamp is older than [`ALIVE_FOR`] is no
//!   longer counted. An idle server syncs every [`HEARTBEAT`] to stay counted.
//!
//! Keys: `PREFIX{limits}:SCOPE:WINDOW_MS:N`, a hash per limit and fixed window (the `N`th since
//! the epoch, by this server's clock), id → requests; one hash tag for all, so one script call
//! syncs every limit and the shard holding them receives at most one call per server and
//! [`SYNC_EVERY`], whatever the buy rate (spread over tags, a sync would be a call per shard).

mod counts;

use super::{Hit, Id, Limiter, Refused};
use crate::clock::LogEvery;
use crate::redis_link::{RedisLink, ScriptRequest};
use counts::{Counts, Group, Mode, Reach};
use redis::Script;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

/// How often a server sends its new requests and reads the totals back. The overshoot above a
/// quota grows with it (see the module's header) and Redis's work with its inverse: at 5 ms
/// a server makes at most 200 sync calls a second whatever its request rate, and passes a
/// quota by one request of a shopper's clicks, or seven of a bot's at 1,000 a second.
pub const SYNC_EVERY: Duration = Duration::from_millis(5);

/// How long a server with no new requests waits between syncs, so the others count it alive.
pub const HEARTBEAT: Duration = Duration::from_millis(100);

/// How long after its last sync a server is still counted alive: ten heartbeats.
pub const ALIVE_FOR: Duration = Duration::from_secs(1);

/// How long without a successful sync before a server holds its requests to its share of each
/// quota; also the most one sync call may take. Fifty syncs: a slow moment of Redis does not
/// cut every server's quota, an outage does within a quarter of a second.
pub const FALLBACK_AFTER: Duration = Duration::from_millis(250);

/// Most time between two warnings that the counts could not be shared.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Most ids of one limit's window: far more than the distinct clients of a sale within one
/// window (as embedded mode's buckets, `local::MAX_KEYS`).
const MAX_KEYS: usize = super::local::MAX_KEYS;

/// Most ids in one group of the script call: Lua's `unpack` takes a few thousand values.
const MAX_IDS: usize = 1000;

static SYNC: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("sync.lua")));

/// Throttles shared through Redis.
pub struct RedisLimiter {
    shared: Arc<Shared>,
}

/// What the requests and the sync task share.
struct Shared {
    counts: Counts,
    /// When a sync last succeeded (Unix ms, this server's clock).
    synced_ms: AtomicU64,
    /// The servers alive at the last sync, this one included.
    servers: AtomicU32,
    /// When the failed syncs were last reported.
    warned: LogEvery,
}

/// The sync task's own: where it sends, and as whom.
struct Sync {
    redis: RedisLink,
    /// The keys' common start, `PREFIX{limits}:`.
    keys: String,
    /// The servers' hash.
    servers_key: String,
    /// This server's field in it, its node id.
    node: String,
}

/// Unix ms by this server's clock.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

impl RedisLimiter {
    /// Counts for every server under `prefix`, this one being `node_id`. Starts the task that
    /// syncs the counts (it ends when this is dropped), so it must be called within a Tokio
    /// runtime.
    pub fn new(redis: RedisLink, prefix: &str, node_id: u16) -> Self {
        let (limiter, sync) = Self::unsynced(redis, prefix, node_id);
        tokio::spawn(sync_forever(sync, Arc::downgrade(&limiter.shared)));
        limiter
    }

    /// The limiter and its sync, not started.
    fn unsynced(redis: RedisLink, prefix: &str, node_id: u16) -> (Self, Sync) {
        let shared = Arc::new(Shared {
            counts: Counts::new(MAX_KEYS),
            synced_ms: AtomicU64::new(now_ms()),
            servers: AtomicU32::new(1),
            warned: LogEvery::new(WARN_EVERY),
        });
        let sync = Sync {
            redis,
            keys: format!("{prefix}{{limits}}:"),
            servers_key: format!("{prefix}{{limits}}:servers"),
            node: node_id.to_string(),
        };
        (Self { shared }, sync)
    }

    /// How requests are decided now: on the shared totals, or on this server's share.
    fn mode(&self, now_ms: u64) -> Mode {
        let synced = self.shared.synced_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(synced) > FALLBACK_AFTER.as_millis() as u64 {
            metrics::counter!("seckill_rate_limit_fallbacks_total").increment(1);
            Mode::Alone {
                servers: self.shared.servers.load(Ordering::Relaxed),
            }
        } else {
            Mode::Shared
        }
    }
}

impl Limiter for RedisLimiter {
    fn hit(&self, hits: &[Hit]) -> Result<(), Refused> {
        self.count(hits, Reach::Fleet)
    }

    fn hit_here(&self, hits: &[Hit]) -> Result<(), Refused> {
        self.count(hits, Reach::Here)
    }

    fn forget_idle(&self) {
        self.shared.counts.forget_old(now_ms());
    }
}

impl RedisLimiter {
    /// Counts one request against each of `hits`, in order, for `reach`, as [`Limiter::hit`]
    /// says.
    fn count(&self, hits: &[Hit], reach: Reach) -> Result<(), Refused> {
        let now = now_ms();
        let mode = self.mode(now);
        for (i, hit) in hits.iter().enumerate() {
            self.shared
                .counts
                .hit(hit.key.scope(), hit.quota, hit.key.id(), now, mode, reach)
                .map_err(|retry_after| Refused {
                    hit: i,
                    retry_after,
                })?;
        }
        Ok(())
    }
}

/// Syncs every [`SYNC_EVERY`] while there are new requests, every [`HEARTBEAT`] otherwise,
/// until the limiter is dropped.
async fn sync_forever(mut sync: Sync, shared: Weak<Shared>) {
    let mut tick = tokio::time::interval(SYNC_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let groups = shared.counts.take();
        if groups.is_empty() && last.elapsed() < HEARTBEAT {
            continue;
        }
        last = tokio::time::Instant::now();
        sync.once(&shared, groups).await;
    }
}

impl Sync {
    /// One script call sending `groups` (taken from `shared`'s counts), and its answer settled.
    async fn once(&mut self, shared: &Shared, groups: Vec<Group>) {
        let now = now_ms();
        let command = self.command(&groups, now);
        let call = crate::redis_link::evalsha::<String>(
            &mut self.redis,
            &SYNC,
            ScriptRequest::Alone(&command),
        );
        let expected = 1 + groups.iter().map(|g| g.ids.len()).sum::<usize>();
        let answer: anyhow::Result<Vec<u64>> =
            match tokio::time::timeout(FALLBACK_AFTER, call).await {
                Ok(Ok(text)) => numbers(&text, expected),
                Ok(Err(e)) => Err(anyhow::anyhow!("Redis: {e}")),
                Err(_) => Err(anyhow::anyhow!(
                    "Redis did not answer within {FALLBACK_AFTER:?}"
                )),
            };
        match answer {
            Ok(answers) => {
                let servers = u32::try_from(answers[0]).unwrap_or(u32::MAX).max(1);
                shared.servers.store(servers, Ordering::Relaxed);
                shared.counts.settle(groups, Some(&answers[1..]));
                shared.synced_ms.store(now, Ordering::Relaxed);
            }
            Err(error) => {
                shared.counts.settle(groups, None);
                if shared.warned.due() {
                    tracing::warn!(
                        error = format!("{error:#}"),
                        "shared rate limits unavailable: each server holds to its share"
                    );
                }
            }
        }
    }

    /// The script call of `groups` at `now` (Unix ms): a group's hash lives until its window's
    /// next one ends.
    fn command(&self, groups: &[Group], now: u64) -> redis::Cmd {
        let ids: usize = groups.iter().map(|g| g.ids.len()).sum();
        let chunks: usize = groups.iter().map(|g| g.ids.len().div_ceil(MAX_IDS)).sum();
        let mut command =
            redis::Cmd::with_capacity(5 + 3 * chunks + 2 * ids, 64 * chunks + 32 * ids);
        command.arg("EVALSHA").arg(SYNC.get_hash()).arg(1 + chunks);
        command.arg(&self.servers_key);
        for group in groups {
            let limit = &group.limit;
            let key = format!(
                "{}{}:{}:{}",
                self.keys, limit.scope, limit.window_ms, group.number
            );
            for _ in group.ids.chunks(MAX_IDS) {
                command.arg(&key);
            }
        }
        command.arg(&self.node).arg(ALIVE_FOR.as_millis() as u64);
        for group in groups {
            let window = group.limit.window_ms;
            let expire = ((group.number + 2) * window).saturating_sub(now).max(1);
            for chunk in group.ids.chunks(MAX_IDS) {
                command.arg(expire).arg(chunk.len());
                for (id, add) in chunk {
                    // A number as its digits, written without a `String` of its own.
                    match id {
                        Id::Number(number) => command.arg(*number),
                        other => command.arg(other.to_string()),
                    };
                    command.arg(*add);
                }
            }
        }
        command
    }
}

/// The sync's answer, `expected` numbers joined by commas (`sync.lua`).
fn numbers(text: &str, expected: usize) -> anyhow::Result<Vec<u64>> {
    let answers = text
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|e| {
            anyhow::anyhow!("the rate-limit sync answered a value that is not a count: {e}")
        })?;
    anyhow::ensure!(
        answers.len() == expected,
        "the rate-limit sync answered {} values for {expected}",
        answers.len()
    );
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{Key, Quota};

    /// A key prefix no other test uses.
    fn prefix() -> String {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        format!("seckill-unit:{}:limits{n}:", std::process::id())
    }

    /// A server's limiter (its own buckets and the shared count under `prefix`) and its sync,
    /// which the test runs itself.
    async fn server(prefix: &str, node: u16) -> (RedisLimiter, Sync) {
        let redis = crate::redis_link::test_link().await;
        RedisLimiter::unsynced(redis, prefix, node)
    }

    /// One sync of `server`.
    async fn sync((limiter, sync): &mut (RedisLimiter, Sync)) {
        let groups = limiter.shared.counts.take();
        sync.once(&limiter.shared, groups).await;
    }

    #[test]
    fn a_sync_answer_is_read_as_its_numbers_and_nothing_else() {
        assert_eq!(
            numbers("2,0,17,4294967296", 4).unwrap(),
            [2, 0, 17, 1 << 32]
        );
        assert!(numbers("2,0,17", 4).is_err(), "a value missing");
        assert!(numbers("2,0,17,1,1", 4).is_err(), "a value too many");
        assert!(
            numbers("2,0,1.5,1", 4).is_err(),
            "a value that is not a count"
        );
        assert!(numbers("", 1).is_err(), "nothing");
    }

    /// How many of `most` requests of `hits` pass `limiter`, stopping at the first refused.
    fn passes(limiter: &RedisLimiter, hits: &[Hit], most: usize) -> usize {
        let mut passed = 0;
        while passed < most && limiter.hit(hits).is_ok() {
            passed += 1;
        }
        passed
    }

    fn hit(key: &str, limit: u32, window: Duration) -> Hit {
        Hit {
            key: Key::new("test", key),
            quota: Quota::per_window(limit, window),
        }
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn two_servers_syncing_after_every_request_pass_a_key_at_most_one_above_its_quota() {
        let prefix = prefix();
        let mut servers = [server(&prefix, 1).await, server(&prefix, 2).await];
        let minute = Duration::from_secs(60);
        let mut passed = 0;
        for i in 0..20 {
            if servers[i % 2].0.hit(&[hit("k", 6, minute)]).is_ok() {
                passed += 1;
            }
            for server in &mut servers {
                sync(server).await;
            }
        }
        // Each decided on its last sync of the key, which missed the other's request since: the
        // last of them passes one above the quota.
        assert_eq!(passed, 7);
        // Refused by the shared count, not by the server's own bucket (4 of its 6 taken): the
        // window's 7 weigh on the next window as its previous one, so a request passes once 2/7
        // of the next has gone (7 × 5/7 + 1 = 6). The wait is the rest of this window and that.
        let refused = servers[0].0.hit(&[hit("k", 6, minute)]).unwrap_err();
        assert_eq!(refused.hit, 0);
        let weighed = minute * 2 / 7;
        assert!(
            refused.retry_after >= weighed
                && refused.retry_after <= minute + weighed + Duration::from_millis(1),
            "{refused:?}"
        );
        servers[1].0.hit(&[hit("other", 6, minute)]).unwrap();
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn a_server_decides_on_the_totals_of_its_last_sync_and_its_own_requests_since() {
        let prefix = prefix();
        let mut servers = [server(&prefix, 1).await, server(&prefix, 2).await];
        let quota = [hit("shared", 10, Duration::from_secs(60))];
        assert_eq!(passes(&servers[0].0, &quota, 3), 3);
        assert_eq!(passes(&servers[1].0, &quota, 3), 3);
        sync(&mut servers[0]).await;
        sync(&mut servers[1]).await;
        // The first server knew 3 at its sync; its next request's sync reads the 6.
        assert_eq!(passes(&servers[0].0, &quota, 1), 1);
        sync(&mut servers[0]).await;
        assert_eq!(passes(&servers[0].0, &quota, 10), 3, "7 counted, 3 left");
        // The second has not synced since it read 6: it lets 4 more through, the overshoot of
        // one sync interval.
        assert_eq!(passes(&servers[1].0, &quota, 10), 4);
        sync(&mut servers[1]).await;
        assert_eq!(passes(&servers[1].0, &quota, 10), 0);
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn each_sync_counts_the_servers_alive_and_alone_a_server_holds_to_its_share() {
        let prefix = prefix();
        let mut servers = [
            server(&prefix, 1).await,
            server(&prefix, 2).await,
            server(&prefix, 3).await,
        ];
        for server in &mut servers {
            sync(server).await;
        }
        sync(&mut servers[0]).await;
        assert_eq!(servers[0].0.shared.servers.load(Ordering::SeqCst), 3);
        // No sync for longer than the fallback: a third of the quota each.
        let limiter = &servers[0].0;
        let long_ago = now_ms() - 2 * FALLBACK_AFTER.as_millis() as u64;
        limiter.shared.synced_ms.store(long_ago, Ordering::SeqCst);
        let minute = Duration::from_secs(60);
        let mut passed = 0;
        while limiter.hit(&[hit("alone", 9, minute)]).is_ok() {
            passed += 1;
        }
        assert_eq!(passed, 3);
        // A sync that succeeds shares the quota again.
        sync(&mut servers[0]).await;
        servers[0].0.hit(&[hit("alone", 9, minute)]).unwrap();
    }

    #[tokio::test]
    #[ignore = "needs a Redis server: run by scripts/test (cargo test --lib -- --ignored)"]
    async fn the_previous_window_weighs_by_the_part_of_it_still_in_the_sliding_window() {
        let prefix = prefix();
        let mut server = server(&prefix, 1).await;
        let window = Duration::from_secs(3600);
        let limit = 1000;
        // The window before this one had its whole limit.
        let now = now_ms() as i64;
        let window_ms = window.as_millis() as i64;
        let previous = format!(
            "{prefix}{{limits}}:test:{window_ms}:{}",
            now / window_ms - 1
        );
        let mut redis = crate::redis_link::test_link().await;
        let _: () = redis::cmd("HSET")
            .arg(&previous)
            .arg("weighed")
            .arg(limit)
            .query_async(&mut redis)
            .await
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg(&previous)
            .arg(60_000)
            .query_async(&mut redis)
            .await
            .unwrap();
        // The first request is decided before the sync reads the previous window's count.
        let mut passed = 0;
        if server.0.hit(&[hit("weighed", limit, window)]).is_ok() {
            passed += 1;
        }
        sync(&mut server).await;
        while server.0.hit(&[hit("weighed", limit, window)]).is_ok() {
            passed += 1;
        }
        // Its requests count as if spread evenly: the part of it the sliding window still
        // covers is the part of this window not yet gone.
        let gone = (now % window_ms) as f64 / window_ms as f64;
        let expected = gone * f64::from(limit);
        assert!(
            (passed as f64 - expected).abs() <= 2.0,
            "{passed} for {expected}"
        );
    }
}
