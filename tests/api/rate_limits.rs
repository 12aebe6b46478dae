//! Rate limits as a hostile client meets them: registrations from one address and from many,
//! buys of one sale event, order requests and the operator's routes, each refused with 429 and
//! `Retry-After` and changing nothing; two servers sharing Redis allowing a limit once; and a
//! Redis outage leaving each server its own limits.

use crate::support::TestDatabase;
use crate::support::private_redis::{Persistence, PrivateRedis};
use crate::support::{ADMIN_TOKEN, TestApp, at_the_next_second, status_and_json};
use crate::support::{fresh_prefix, server_on_with};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use seckill::config::Config;
use seckill::limits::redis::SYNC_EVERY;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// An answer's status, error code (empty for none) and `Retry-After` seconds.
type Answer = (StatusCode, String, Option<u64>);

async fn answer(response: reqwest::Response) -> Answer {
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let (status, body) = status_and_json(response).await;
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, code, retry_after)
}

/// Registers `name`, from the address `from` when the server reads it from `x-forwarded-for`.
async fn register(app: &TestApp, name: &str, from: Option<&str>) -> Answer {
    let mut request = app
        .client
        .post(app.url("/api/v1/users"))
        .json(&json!({ "username": name, "password": format!("{name}-password") }));
    if let Some(address) = from {
        request = request.header("x-forwarded-for", address);
    }
    answer(request.send().await.unwrap()).await
}

/// Accounts in the database.
async fn users_stored(app: &TestApp) -> i64 {
    let pool = app.pool().await;
    let count = sqlx::query_scalar("SELECT COUNT(*) FROM users")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    count
}

/// Asserts a refusal: 429, `code`, and a `Retry-After` of 1 to `most` seconds.
fn assert_refused(answer: &Answer, code: &str, most: u64) {
    assert_eq!(
        (answer.0, answer.1.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, code),
        "{answer:?}"
    );
    let secs = answer.2.expect("Retry-After");
    assert!((1..=most).contains(&secs), "Retry-After: {secs}");
}

/// Sorts answers into those that passed with `ok` and those refused with `code`, failing on
/// anything else.
fn tally(answers: &[Answer], ok: StatusCode, code: &str, most: u64) -> usize {
    let mut passed = 0;
    for answer in answers {
        if answer.0 == ok {
            passed += 1;
        } else {
            assert_refused(answer, code, most);
        }
    }
    passed
}

#[tokio::test]
async fn two_hundred_registrations_from_one_address_make_only_the_allowed_few() {
    let app = Arc::new(
        TestApp::spawn_with(Arc::new(SystemClock), |c| {
            c.rate_limit.registrations_per_ip_per_hour = 5;
        })
        .await,
    );
    let mut crowd = JoinSet::new();
    for i in 0..200 {
        let app = app.clone();
        crowd.spawn(async move { register(&app, &format!("bot{i}"), None).await });
    }
    let answers = crowd.join_all().await;
    let created = tally(
        &answers,
        StatusCode::CREATED,
        "too_many_registrations",
        2 * 3600,
    );
    assert_eq!(created, 5);
    assert_eq!(users_stored(&app).await, 5);
}

#[tokio::test]
async fn many_addresses_together_register_no_more_than_the_hourly_cap() {
    let app = TestApp::spawn_with(Arc::new(SystemClock), |c| {
        c.client_ip_header = Some("x-forwarded-for".parse().unwrap());
        c.rate_limit.registrations_per_ip_per_hour = 2;
        c.rate_limit.registrations_per_hour = 7;
    })
    .await;
    let mut answers = Vec::new();
    for i in 0..30 {
        let from = format!("10.1.{}.{}", i / 250, i % 250 + 1);
        answers.push(register(&app, &format!("botnet{i}"), Some(&from)).await);
    }
    let created = tally(
        &answers,
        StatusCode::CREATED,
        "too_many_registrations",
        2 * 3600,
    );
    assert_eq!(created, 7);
    assert_eq!(users_stored(&app).await, 7);
}

/// One buy of one unit of `product` by `token` at `server`.
async fn buy(server: &TestApp, token: &str, product: i64) -> Answer {
    answer(server.buy_response(token, product, 1).await).await
}

/// Longer than it takes a server to share a request with the others: a few sync intervals.
const SYNCED: Duration = Duration::from_millis(4 * SYNC_EVERY.as_millis() as u64);

/// Every buy of `buys` (server, token, product), one after the other, each after the servers
/// shared the one before.
async fn buy_in_turn(buys: Vec<(Arc<TestApp>, String, i64)>) -> Vec<Answer> {
    let mut answers = Vec::new();
    for (server, token, product) in buys {
        answers.push(buy(&server, &token, product).await);
        tokio::time::sleep(SYNCED).await;
    }
    answers
}

/// Every buy of `buys` (server, token, product) at once.
async fn buy_at_once(buys: Vec<(Arc<TestApp>, String, i64)>) -> Vec<Answer> {
    let mut crowd = JoinSet::new();
    for (server, token, product) in buys {
        crowd.spawn(async move { buy(&server, &token, product).await });
    }
    crowd.join_all().await
}

#[tokio::test]
async fn buys_of_one_sale_event_are_capped_across_its_products_and_buyers() {
    let app = Arc::new(
        TestApp::spawn_with(Arc::new(SystemClock), |c| {
            c.rate_limit.per_event_per_sec = 5;
        })
        .await,
    );
    let products = app.event_of_products(2, 100).await;
    let elsewhere = app.live_product(100, 1).await;
    let tokens = app.users(21).await;
    let buys = tokens[..20]
        .iter()
        .enumerate()
        .map(|(i, token)| (app.clone(), token.clone(), products[i % 2]))
        .collect();
    let answers = buy_at_once(buys).await;
    assert_eq!(tally(&answers, StatusCode::ACCEPTED, "rate_limited", 1), 5);
    let stored: i64 = [
        app.stored(products[0]).await.0,
        app.stored(products[1]).await.0,
    ]
    .iter()
    .sum();
    assert_eq!(stored, 5);
    // Another sale is not held back.
    assert_eq!(
        buy(&app, &tokens[20], elsewhere).await.0,
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn reading_paying_and_cancelling_orders_are_throttled_per_buyer_and_a_refusal_changes_nothing()
 {
    let app = TestApp::spawn_with(Arc::new(SystemClock), |c| {
        c.rate_limit.orders_per_user_per_sec = 1;
        c.rate_limit.orders_per_user_burst = 3;
    })
    .await;
    let product = app.live_product(10, 1).await;
    let tokens = app.users(2).await;
    let orders = app.buy_each(&tokens, product).await;
    let (token, order) = &orders[0];
    let read = |path: String| {
        let request = app.client.get(app.url(&path)).bearer_auth(token);
        async move { answer(request.send().await.unwrap()).await }
    };
    for _ in 0..3 {
        assert_eq!(
            read(format!("/api/v1/orders/{order}")).await.0,
            StatusCode::OK
        );
    }
    assert_refused(&read("/api/v1/orders".into()).await, "rate_limited", 1);
    for action in ["pay", "cancel"] {
        let request = app
            .client
            .post(app.url(&format!("/api/v1/orders/{order}/{action}")))
            .bearer_auth(token);
        assert_refused(
            &answer(request.send().await.unwrap()).await,
            "rate_limited",
            1,
        );
    }
    // The refused cancel cancelled nothing.
    assert_eq!(app.stored(product).await, (2, 2, 8));
    // The other buyer is not held back, and neither is buying.
    let (other, other_order) = &orders[1];
    let (status, body) = app.order_action(other, other_order, "cancel").await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    assert_eq!(app.buy(token, product, 1).await.0, StatusCode::CONFLICT);
    // A buyer who waits as told reads again within the window.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    loop {
        let (status, _, retry_after) = read(format!("/api/v1/orders/{order}")).await;
        if status == StatusCode::OK {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still refused");
        tokio::time::sleep(Duration::from_secs(retry_after.unwrap())).await;
    }
}

#[tokio::test]
async fn the_operators_routes_are_throttled_per_address_before_the_token_is_checked() {
    let app = TestApp::spawn_with(Arc::new(SystemClock), |c| {
        c.rate_limit.per_ip_per_sec = 1;
        c.rate_limit.per_ip_burst = 3;
    })
    .await;
    let get = |token: &'static str, path: &'static str| {
        let request = app.client.get(app.url(path)).bearer_auth(token);
        async move { answer(request.send().await.unwrap()).await }
    };
    for _ in 0..3 {
        assert_eq!(
            get("a-guessed-token", "/api/v1/admin/events").await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_refused(
        &get(ADMIN_TOKEN, "/api/v1/admin/events").await,
        "rate_limited",
        1,
    );
    assert_refused(&get(ADMIN_TOKEN, "/admin/login").await, "rate_limited", 1);
    // Shoppers from the same address are counted apart.
    assert_eq!(app.get_json("/api/v1/events").await.0, StatusCode::OK);
}

/// A server of a cluster sharing `db` and Redis under `prefix`, with `tweak` applied.
async fn cluster_server(
    db: &Arc<TestDatabase>,
    prefix: &str,
    tweak: impl FnOnce(&mut Config),
) -> Arc<TestApp> {
    Arc::new(server_on_with(db, prefix, true, None, tweak).await)
}

#[tokio::test]
async fn without_redis_each_server_keeps_its_own_limits_and_answers() {
    let redis = PrivateRedis::start(Persistence::None).await;
    let db = Arc::new(TestDatabase::fresh().await);
    let url = redis.url();
    let app = TestApp::spawn_on(db, Arc::new(SystemClock), move |c| {
        c.redis_url = Some(url);
        c.redis_key_prefix = fresh_prefix();
        c.run_worker = false;
        // A leased node id would be lost with Redis, and the process would exit.
        c.node_id = Some(1);
        c.amqp_url = None;
        c.rate_limit.registrations_per_ip_per_hour = 3;
    })
    .await;
    assert_eq!(register(&app, "before", None).await.0, StatusCode::CREATED);
    redis.stop().await;

    let started = tokio::time::Instant::now();
    let mut answers = Vec::new();
    for i in 0..8 {
        answers.push(register(&app, &format!("during{i}"), None).await);
    }
    let created = tally(
        &answers,
        StatusCode::CREATED,
        "too_many_registrations",
        2 * 3600,
    );
    assert_eq!(created, 2, "this server's own count still holds");
    assert_eq!(users_stored(&app).await, 3);
    // No request waits for Redis.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn two_servers_sharing_redis_allow_a_buyer_an_address_and_an_event_their_limit_once() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let tweak = |c: &mut Config| {
            c.client_ip_header = Some("x-forwarded-for".parse().unwrap());
            c.rate_limit.per_user_per_sec = 1;
            c.rate_limit.per_user_burst = 4;
            c.rate_limit.per_event_per_sec = 6;
            c.rate_limit.registrations_per_ip_per_hour = 3;
        };
        let first = cluster_server(&db, &prefix, tweak).await;
        let products = [
            first.event_of_products(1, 100).await[0],
            first.event_of_products(1, 100).await[0],
        ];
        // The second server starts once the products exist, so it knows them.
        let second = cluster_server(&db, &prefix, tweak).await;
        let servers = [first, second];
        let tokens = servers[0].users(9).await;

        // One buyer, every attempt on the other server than the one before.
        let buys = (0..8)
            .map(|i| (servers[i % 2].clone(), tokens[0].clone(), products[0]))
            .collect();
        // Refused early in a window that is full (its count weighs on as the previous one's),
        // the wait runs past the window's end: up to two windows of 4 s.
        let bought = tally(
            &buy_in_turn(buys).await,
            StatusCode::ACCEPTED,
            "rate_limited",
            8,
        );
        // A server decides on its last sync of a key: the other's request since may pass it one
        // above (`limits/redis/mod.rs`), where counting apart would pass 8.
        assert!(
            (4..=5).contains(&bought),
            "one buyer's limit of 4, counted once: {bought}"
        );

        // Eight buyers of another event, within one second: its cap of 6 a second, once.
        at_the_next_second().await;
        let buys = (1..9)
            .map(|i| (servers[i % 2].clone(), tokens[i].clone(), products[1]))
            .collect();
        // Early in a window that is full, the wait runs past its end (the window's count weighs
        // on as the previous one's): up to 2 s.
        let bought = tally(
            &buy_in_turn(buys).await,
            StatusCode::ACCEPTED,
            "rate_limited",
            2,
        );
        assert!(
            (6..=7).contains(&bought),
            "the event's cap of 6, counted once: {bought}"
        );

        // One address registering on both servers.
        let mut answers = Vec::new();
        for i in 0..10 {
            let server = &servers[i % 2];
            answers.push(register(server, &format!("shared{i}"), Some("10.2.0.1")).await);
            tokio::time::sleep(SYNCED).await;
        }
        let created = tally(
            &answers,
            StatusCode::CREATED,
            "too_many_registrations",
            2 * 3600,
        );
        assert!(
            (3..=4).contains(&created),
            "one address's registrations, 3, counted once: {created}"
        );
        assert_eq!(users_stored(&servers[0]).await, 9 + created as i64);
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn buys_a_server_answers_by_itself_are_not_counted_in_redis() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let app = cluster_server(&db, &prefix, |_| {}).await;
        let product = app.live_product(1, 1).await;
        let tokens = app.users(4).await;
        assert_eq!(buy(&app, &tokens[0], product).await.0, StatusCode::ACCEPTED);
        // The gate says sold out, and the server flags the product.
        assert_eq!(buy(&app, &tokens[1], product).await.1, "sold_out");
        assert_eq!(buy(&app, &tokens[2], product).await.1, "sold_out");
        assert_eq!(
            buy(&app, &tokens[3], product + 1000).await.1,
            "unknown_product"
        );

        // The buys' counts reach Redis with the server's next sync.
        tokio::time::sleep(SYNCED).await;
        let mut redis = seckill::redis_link::connect(&crate::support::redis_url())
            .await
            .unwrap();
        let hashes: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}{{limits}}:user:*"))
            .query_async(&mut redis)
            .await
            .unwrap();
        let mut buyers = 0;
        for hash in hashes {
            let counted: i64 = redis::cmd("HLEN")
                .arg(hash)
                .query_async(&mut redis)
                .await
                .unwrap();
            buyers += counted;
        }
        assert_eq!(
            buyers, 2,
            "only the buys that reached the gate are counted in Redis"
        );
    }
}
