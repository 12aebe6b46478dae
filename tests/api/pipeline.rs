//! The cluster pipeline's own promises: orders waiting in the outbox count when the gate is
//! rebuilt, an entry no worker can read is set aside without holding up the others, and
//! RabbitMQ's delay queue cancels an unpaid order by itself.

use crate::support::TestDatabase;
use crate::support::{TestApp, code};
use crate::support::{fresh_prefix, local_amqp, redis_url, server_on_with};
use reqwest::StatusCode;
use seckill::config::{Config, ProviderKind};
use std::sync::Arc;

async fn redis() -> seckill::redis_link::RedisLink {
    seckill::redis_link::connect(&redis_url()).await.unwrap()
}

/// A server over the local Redis (and RabbitMQ when `amqp`) that runs no worker, so orders stay
/// in the outbox until `worker` starts one over the same backends.
struct Stalled {
    db: Arc<TestDatabase>,
    prefix: String,
    amqp: bool,
}

impl Stalled {
    fn new(db: TestDatabase, amqp: bool) -> Self {
        Self {
            db: Arc::new(db),
            prefix: fresh_prefix(),
            amqp,
        }
    }

    async fn spawn(&self, worker: bool) -> TestApp {
        self.spawn_with(worker, |_| {}).await
    }

    async fn spawn_with(&self, worker: bool, tweak: impl FnOnce(&mut Config)) -> TestApp {
        let amqp = self.amqp.then(|| local_amqp(&self.prefix));
        server_on_with(&self.db, &self.prefix, worker, amqp, tweak).await
    }
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn orders_waiting_in_the_outbox_count_when_the_gate_is_rebuilt() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let spawn = |worker| server_on_with(&db, &prefix, worker, None, |_| {});
        let app = spawn(false).await;
        let product = app.live_product(3, 1).await;
        let tokens = app.users(4).await;
        for token in &tokens[..2] {
            assert_eq!(app.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
        }

        // The gate's counters vanish (evicted, or lost in a failover) while both orders still wait
        // in the outbox, not yet in the database.
        // (Two keys of one hash tag: one command on a cluster too.)
        let _: () = redis::cmd("DEL")
            .arg(format!("{prefix}{{p:{product}}}:sale"))
            .arg(format!("{prefix}{{p:{product}}}:buyers"))
            .query_async(&mut redis().await)
            .await
            .unwrap();
        app.assert_gate_knows_two_of_three_sold(product, &tokens)
            .await;

        let worker = spawn(true).await;
        assert_eq!(worker.stored(product).await, (3, 3, 0));
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn an_order_still_in_the_outbox_is_pending_not_missing() {
        require(Need::RedisServer);
        let stalled = Stalled::new(TestDatabase::fresh().await, false);
        let app = stalled.spawn(false).await;
        let product = app.live_product(5, 1).await;
        let tokens = app.users(1).await;
        let (_, order) = app.buy(&tokens[0], product, 1).await;
        let path = format!("/api/v1/orders/{}", order["order_id"].as_str().unwrap());
        let response = app
            .client
            .get(app.url(&path))
            .bearer_auth(&tokens[0])
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["retry-after"], "1");
        let (status, body) = crate::support::status_and_json(response).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::CONFLICT, "order_pending")
        );
        // An id that was never made (or long ago) is simply not found.
        let (status, body) = app.get_json_as(&tokens[0], "/api/v1/orders/12345").await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "order_not_found")
        );

        let worker = stalled.spawn(true).await;
        worker.settle().await;
        let (status, body) = app.get_json_as(&tokens[0], &path).await;
        assert_eq!(
            (status, body["status"].as_str()),
            (StatusCode::OK, Some("awaiting_payment"))
        );
    }

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn an_unreadable_outbox_entry_is_set_aside_and_the_orders_around_it_are_stored() {
        require(Need::RedisServer);
        let stalled = Stalled::new(TestDatabase::fresh().await, false);
        let app = stalled.spawn(false).await;
        let product = app.live_product(5, 1).await;
        let tokens = app.users(2).await;
        let key = |stream: &str| format!("{}{{p:{product}}}:{stream}", stalled.prefix);
        let mut redis = redis().await;
        assert_eq!(
            app.buy(&tokens[0], product, 1).await.0,
            StatusCode::ACCEPTED
        );
        let garbage: String = redis::cmd("XADD")
            .arg(key("outbox"))
            .arg("*")
            .arg("order")
            .arg("not an order")
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(
            app.buy(&tokens[1], product, 1).await.0,
            StatusCode::ACCEPTED
        );

        let worker = stalled.spawn(true).await;
        assert_eq!(worker.stored(product).await, (2, 2, 3));
        // The unreadable entry was buried before its batch's orders were handed on. (Their own
        // entries may linger a moment: through RabbitMQ, they leave once their consumer is done.)
        let still: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(key("outbox"))
            .arg(&garbage)
            .arg(&garbage)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(still.ids.is_empty(), "the unreadable entry left the outbox");
        let dead: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(key("dead"))
            .arg("-")
            .arg("+")
            .query_async(&mut redis)
            .await
            .unwrap();
        let [entry] = &dead.ids[..] else {
            panic!("one dead entry expected: {:?}", dead.ids);
        };
        assert_eq!(
            entry.get::<String>("order").as_deref(),
            Some("not an order")
        );
        assert!(entry.get::<String>("reason").is_some_and(|r| !r.is_empty()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn buys_batched_together_are_decided_one_by_one() {
        require(Need::RedisServer);
        use seckill::domain::{Order, OrderId, ProductId, SaleWindow, StockBuckets, UserId};
        use seckill::gate::{
            GateError, GateProduct, Rejection, Reserved, StockGate,
            redis::{RedisGate, Replicas},
        };
        use std::collections::{HashMap, HashSet};

        let outbox_max = Config::default().outbox_max_orders;
        let gate = Arc::new(RedisGate::new(
            redis().await,
            &fresh_prefix(),
            outbox_max,
            Replicas::NONE,
        ));
        let now = 1_800_000_000_000;
        let stock = [(ProductId(1), 30), (ProductId(2), 20)];
        for (id, remaining) in stock {
            gate.load(GateProduct {
                id,
                window: SaleWindow::new(now - 1_000, now + 60_000).unwrap(),
                paused: false,
                remaining,
                per_user_limit: 2,
                buckets: StockBuckets::ONE,
                holdings: vec![],
                released: vec![],
                kept: vec![],
            })
            .await
            .unwrap();
        }
        // 50 shoppers each try three single units of both products at once, so batches hold
        // buys of both products, of one shopper, and more than the stock.
        let mut buys = Vec::new();
        for user in 0..50 {
            for (product, _) in stock {
                for attempt in 0..3 {
                    let id = product.0 * 1000 + user * 3 + attempt;
                    buys.push(Order {
                        user_id: UserId(user),
                        created_at: now,
                        ..crate::support::orders::order(id, product.0, 1)
                    });
                }
            }
        }
        let barrier = Arc::new(tokio::sync::Barrier::new(buys.len()));
        let tasks: Vec<_> = buys
            .into_iter()
            .map(|order| {
                let (gate, barrier) = (gate.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let answer = gate.reserve(&order, now).await;
                    (order, answer)
                })
            })
            .collect();

        let mut taken: HashMap<ProductId, HashSet<OrderId>> = HashMap::new();
        let mut held: HashMap<(UserId, ProductId), usize> = HashMap::new();
        let mut left: HashMap<ProductId, Vec<i64>> = HashMap::new();
        for task in tasks {
            let (order, answer) = task.await.unwrap();
            match answer {
                Ok(Reserved::Taken { remaining }) => {
                    taken.entry(order.product_id).or_default().insert(order.id);
                    *held.entry((order.user_id, order.product_id)).or_default() += 1;
                    left.entry(order.product_id).or_default().push(remaining);
                }
                Err(GateError::Rejected(Rejection::LimitReached | Rejection::SoldOut { .. })) => {}
                other => panic!("order {}: {other:?}", order.id.0),
            }
        }
        assert!(held.values().all(|&units| units <= 2), "{held:?}");
        for (product, units) in stock {
            let outbox = gate.outbox(product).await.unwrap();
            assert_eq!(outbox.len(), units as usize);
            let outbox: HashSet<OrderId> = outbox.iter().map(|order| order.id).collect();
            assert_eq!(taken[&product].len(), units as usize);
            // Each buy taken saw the units its batch left after it: all different, all in stock.
            let mut left = left.remove(&product).unwrap();
            left.sort_unstable();
            assert_eq!(left, (0..units).collect::<Vec<_>>());
            assert_eq!(outbox, taken[&product]);
            assert_eq!(gate.remaining(product).await.unwrap(), Some(0));
        }
    }
}

mod needs_redis_and_rabbitmq_servers {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs a Redis server and RabbitMQ, whatever the backends: run by scripts/test on mysql redis amqp and postgres cluster amqp"]
    async fn the_delay_queue_alone_cancels_an_unpaid_order_when_its_window_closes() {
        require(Need::RedisAndRabbitmqServers);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        // Another process leads the scheduler, so this server's deadline sweep never runs: only
        // the delay queue can cancel.
        let _: () = redis::cmd("SET")
            .arg(format!("{prefix}{{leader}}"))
            .arg("another-process")
            .arg("EX")
            .arg(120)
            .query_async(&mut redis().await)
            .await
            .unwrap();
        let amqp = Some(local_amqp(&prefix));
        let app = server_on_with(&db, &prefix, true, amqp, |c| c.payment_window_secs = 1).await;
        let product = app.live_product(1, 1).await;
        let tokens = app.users(2).await;
        let order = app.buy_each(&tokens[..1], product).await.remove(0).1;
        assert_eq!(app.stored(product).await, (1, 1, 0));

        app.wait_for_status(&tokens[0], &order, "cancelled").await;
        assert_eq!(app.stored(product).await, (0, 0, 1));
        assert_eq!(
            app.buy(&tokens[1], product, 1).await.0,
            StatusCode::ACCEPTED
        );
    }

    #[tokio::test]
    #[ignore = "needs a Redis server and RabbitMQ, whatever the backends: run by scripts/test on mysql redis amqp and postgres cluster amqp"]
    async fn a_payment_for_an_order_still_in_the_outbox_waits_in_the_paid_queue() {
        require(Need::RedisAndRabbitmqServers);
        use seckill::payment::sandbox::{SANDBOX_APP_ID, SANDBOX_SELLER_ID};
        let stalled = Stalled::new(TestDatabase::fresh().await, true);
        let paying = |c: &mut Config| c.payment.provider = Some(ProviderKind::Sandbox);
        let app = stalled.spawn_with(false, paying).await;
        let product = app.live_product(5, 1).await;
        let tokens = app.users(1).await;
        let (_, order) = app.buy(&tokens[0], product, 1).await;
        let id = order["order_id"].as_str().unwrap();
        // The provider's word that it was paid, before any worker stored the order.
        let notification = app
            .signed_by_gateway(
                &Vec::new(),
                &[
                    ("app_id", SANDBOX_APP_ID),
                    ("seller_id", SANDBOX_SELLER_ID),
                    ("out_trade_no", id),
                    ("trade_no", "2026112422001400000000000002"),
                    ("total_amount", "49.99"),
                    ("trade_status", "TRADE_SUCCESS"),
                    ("notify_id", "while-in-the-outbox"),
                    ("sign_type", "RSA2"),
                ],
            )
            .await;
        assert_eq!(app.notify(&notification).await, "success");

        // The worker stores the order, and the queued payment (going round the retry queue until
        // then) pays it.
        let _worker = stalled.spawn_with(true, paying).await;
        app.wait_for_status(&tokens[0], id, "paid").await;
        assert_eq!(app.payment_records(id).await.len(), 1);
    }
}
