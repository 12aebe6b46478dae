//! The shared limits as three servers of one Redis keep them: each counts in its own process
//! and syncs with the others every few milliseconds (`limits/redis/mod.rs`), so one buyer
//! buying through all three at once gets their limit once, above it at most the stated
//! overshoot; and with Redis stopped, each server holds the buyer to its share.

use crate::support::private_redis::{Persistence, PrivateRedis};
use crate::support::{Need, TestApp, TestDatabase, at_the_next_second, fresh_prefix, require};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use seckill::config::Config;
use seckill::limits::redis::{FALLBACK_AFTER, HEARTBEAT, SYNC_EVERY};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// The servers of each test.
const SERVERS: usize = 3;

/// Three servers sharing `db` and the Redis at `redis` under one prefix, each with `tweak`
/// applied, and a product they all know (made before the second starts); the `n`th server has
/// node id `n + 1` when `node_ids`.
async fn three_servers(
    db: &Arc<TestDatabase>,
    redis: &str,
    node_ids: bool,
    tweak: impl Fn(&mut Config) + Clone + Send + 'static,
) -> (Vec<Arc<TestApp>>, i64) {
    let prefix = fresh_prefix();
    let mut servers = Vec::new();
    let mut product = 0;
    for n in 0..SERVERS {
        let (redis, prefix, tweak) = (redis.to_owned(), prefix.clone(), tweak.clone());
        let server = TestApp::spawn_on(db.clone(), Arc::new(SystemClock), move |c| {
            c.redis_url = Some(redis);
            c.redis_key_prefix = prefix;
            c.run_worker = false;
            c.amqp_url = None;
            if node_ids {
                // A leased node id would be lost with Redis, and the process would exit.
                c.node_id = Some(n as u16 + 1);
            }
            c.rate_limit.per_ip_per_sec = 100_000;
            c.rate_limit.per_ip_burst = 100_000;
            tweak(c);
        })
        .await;
        if n == 0 {
            product = server.event_of_products(1, 1000).await[0];
        }
        servers.push(Arc::new(server));
    }
    (servers, product)
}

/// One buy's status.
async fn buy(server: &TestApp, token: &str, product: i64) -> StatusCode {
    server.buy_response(token, product, 1).await.status()
}

mod needs_redis_server {
    use super::*;

    /// A buyer's limit a second.
    const LIMIT: u32 = 20;

    /// Each server's requests of the buyer a second: one every 10 ms.
    const RATE: u32 = 100;

    /// How long the crowd buys: within one second's window.
    const BUYING: Duration = Duration::from_millis(500);

    /// The longest a sync's round trip, and the sync task's turn on a busy test machine, are
    /// taken to add to [`SYNC_EVERY`].
    const ROUND_TRIP: Duration = Duration::from_millis(25);

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn a_buyer_buying_through_three_servers_at_once_gets_their_limit_and_at_most_the_overshoot()
     {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let redis = crate::support::redis_url();
        let (servers, product) = three_servers(&db, &redis, false, |c| {
            c.rate_limit.per_user_per_sec = LIMIT;
            c.rate_limit.per_user_burst = 0;
        })
        .await;
        let token = servers[0].users(1).await.remove(0);

        // Each server is sent one buy of the buyer every 1/RATE s, whatever the answers take.
        at_the_next_second().await;
        let mut crowd = JoinSet::new();
        for server in &servers {
            let (server, token) = (server.clone(), token.clone());
            crowd.spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1) / RATE);
                let mut buys = JoinSet::new();
                let started = tokio::time::Instant::now();
                while started.elapsed() < BUYING {
                    tick.tick().await;
                    let (server, token) = (server.clone(), token.clone());
                    buys.spawn(async move { buy(&server, &token, product).await });
                }
                buys.join_all().await
            });
        }
        let answers: Vec<StatusCode> = crowd.join_all().await.into_iter().flatten().collect();
        let accepted = answers
            .iter()
            .filter(|s| **s == StatusCode::ACCEPTED)
            .count() as u32;
        let refused = answers
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count() as u32;
        assert_eq!(accepted + refused, answers.len() as u32, "{answers:?}");

        // The stated bound: servers × (1 + rate × (sync interval + round trip)).
        let unseen = (SYNC_EVERY + ROUND_TRIP).as_secs_f64();
        let each = 1 + (f64::from(RATE) * unseen).ceil() as u32;
        let overshoot = SERVERS as u32 * each;
        assert!(
            accepted >= LIMIT,
            "{accepted} accepted: the limit is {LIMIT}"
        );
        assert!(
            accepted <= LIMIT + overshoot,
            "{accepted} accepted of {} buys: the limit is {LIMIT}, the overshoot at most \
             {overshoot}; three servers counting apart would each take it, {} and more",
            answers.len(),
            SERVERS as u32 * LIMIT
        );
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn with_redis_stopped_each_of_three_servers_holds_a_buyer_to_its_share() {
        require(Need::RedisServer);
        const LIMIT: u32 = 9;
        let redis = PrivateRedis::start(Persistence::None).await;
        let db = Arc::new(TestDatabase::fresh().await);
        let (servers, product) = three_servers(&db, &redis.url(), true, |c| {
            // 9 buys in any 9 s: a third of it is 3.
            c.rate_limit.per_user_per_sec = 1;
            c.rate_limit.per_user_burst = LIMIT;
        })
        .await;
        let tokens = servers[0].users(2).await;
        // Every server buys once and syncs: each has seen the three alive.
        for server in &servers {
            assert_eq!(buy(server, &tokens[0], product).await, StatusCode::ACCEPTED);
        }
        tokio::time::sleep(3 * HEARTBEAT).await;
        redis.stop().await;
        tokio::time::sleep(2 * FALLBACK_AFTER).await;

        // Each server is sent the buyer's whole limit at once: the limiter decides before the
        // gate, whose Redis calls then fail (slowly, for the ones let through).
        let mut crowd = JoinSet::new();
        for (n, server) in servers.iter().enumerate() {
            for _ in 0..LIMIT {
                let (server, token) = (server.clone(), tokens[1].clone());
                crowd.spawn(async move { (n, buy(&server, &token, product).await) });
            }
        }
        let mut passed = [0; SERVERS];
        for (n, status) in crowd.join_all().await {
            // Let through, the buy fails at the gate; else it is refused for rate.
            if status != StatusCode::TOO_MANY_REQUESTS {
                passed[n] += 1;
            }
        }
        let share = LIMIT / SERVERS as u32;
        assert_eq!(
            passed, [share; SERVERS],
            "each server lets through a third of the buyer's {LIMIT}"
        );
    }
}
