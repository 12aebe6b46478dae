//! Faults during a live crowd, with `seckill serve` and `seckill worker` as processes of the real
//! binary (`support/processes.rs`): the database refusing connections, a server killed with buys in
//! flight, the deadlines' dead-letter target missing. After each: nothing oversold, every accepted
//! order stored exactly once, every process still up (or started again by the test, as an operator
//! would). `RELIABILITY.md` reports what each found.
//!
//! These tests are heavy, and the suite runs seven times over backend combinations: each is
//! ignored in a plain run, in a `needs_*` module named for the backends it needs, and
//! `scripts/test` runs it in the combinations its `#[ignore]` reason names.

use crate::support::TestDatabase;
use crate::support::crowd::{
    Crowd, Outcome, accepted_ids, assert_stored_exactly, crowd_client, try_buy,
};
use crate::support::processes::{Cluster, Sale};
use crate::support::proxies::Proxy;
use lapin::types::FieldTable;
use reqwest::StatusCode;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

mod needs_server_database_and_single_redis {
    use super::*;
    use crate::support::{Need, require};

    /// The database refusing connections for 10 s (its listener closed, every open connection
    /// dropped) in the middle of a crowd of 3,000 buyers of 1,500 units over two servers and a
    /// worker, which reach it through a proxy in the test. The sale goes on meanwhile (the gate
    /// and its outbox are in Redis); once the database is back, every accepted order is stored
    /// exactly once, each server reads from the database again, and no process needed a restart.
    ///
    /// It needs a database server: it runs where `SECKILL_TEST_DATABASE` is `postgres` with
    /// `SECKILL_TEST_REDIS=1` and no RabbitMQ (orders go straight from the outbox to the database),
    /// or `mysql` with `SECKILL_TEST_AMQP=1` (through RabbitMQ).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs a database server and the gate on a single Redis: run by scripts/test on postgres redis and mysql redis amqp"]
    async fn the_database_refusing_connections_for_ten_seconds_loses_no_accepted_order() {
        require(Need::ServerDatabaseAndSingleRedis);
        let db = Arc::new(TestDatabase::fresh().await);
        let (proxy, through) = Proxy::in_front_of(&db.url).await;
        let cluster = Cluster::new(db).with_database_url(through);
        let stock = 1_500;
        let mut sale = Sale::start(&cluster, stock, 3_000, &[]).await;
        let (observer, product) = (&sale.observer, sale.product);
        let servers = sale.urls();
        let client = crowd_client();

        let tokens = std::mem::take(&mut sale.tokens);
        let crowd = Crowd::start(&client, &servers, tokens, product, 32, false);
        crowd.wait_accepted(100).await;
        proxy.cut();
        let cut = Instant::now();
        let accepted_at_cut = crowd.accepted();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let accepted_while_down = crowd.accepted() - accepted_at_cut;
        proxy.restore();
        let restored = Instant::now();
        let answers = crowd.answers().await;
        assert!(
            accepted_while_down > 0,
            "no buy was accepted while the database was down: the sale stopped with it"
        );
        let accepted = accepted_ids(&answers);
        eprintln!(
            "database down {:?}: {} buys accepted, {accepted_while_down} while it was down",
            restored - cut,
            accepted.len()
        );

        // Each server reads from the database again within 15 s (its pool reconnects).
        for server in &servers {
            let deadline = restored + Duration::from_secs(15);
            loop {
                let answer = client
                    .get(format!("{server}/api/v1/orders"))
                    .bearer_auth(&sale.spare)
                    .send()
                    .await;
                if answer.is_ok_and(|a| a.status() == StatusCode::OK) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{server} still cannot read the database 15 s after it came back"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        assert_stored_exactly(observer, product, stock, &accepted).await;
        sale.assert_alive();
    }
}

mod needs_single_redis_no_amqp {
    use super::*;
    use crate::support::{Need, require};

    /// The Snowflake node id of an order id: which process made it.
    fn node_of(order: i64) -> i64 {
        (order >> 12) & 0x3ff
    }

    /// A server killed with SIGKILL in the middle of a crowd of 3,000 buyers of 1,500 units, each
    /// buy with an `Idempotency-Key`. Buys it had taken through the gate but not answered, and
    /// buys it never answered at all, are sent again with their keys to the other server, as a
    /// client retries: a buy the gate had decided gets its order (made by the dead server), and
    /// every stored order is one a buyer was answered with. The operator then starts a server
    /// again, and it sells.
    ///
    /// It runs where `SECKILL_TEST_REDIS=1` and `SECKILL_TEST_AMQP` is not set (`sqlite redis`,
    /// `postgres redis`): the keys live in the gate, whatever the pipeline after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a single Redis without RabbitMQ: run by scripts/test on sqlite redis and postgres redis"]
    async fn a_server_killed_between_the_gate_and_its_answers_costs_no_buyer_their_order() {
        require(Need::SingleRedisNoAmqp);
        let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
        let stock = 1_500;
        let mut sale = Sale::start(&cluster, stock, 3_000, &[]).await;
        let product = sale.product;
        let client = crowd_client();

        let tokens = std::mem::take(&mut sale.tokens);
        let crowd = Crowd::start(&client, &sale.urls(), tokens, product, 256, true);
        crowd.wait_accepted(300).await;
        let doomed = &mut sale.servers[0].0;
        doomed.start_kill().unwrap();
        doomed.wait().await.unwrap();
        let answers = crowd.answers().await;
        let accepted = accepted_ids(&answers);

        let doomed_node = answers
            .iter()
            .find_map(|b| match b.outcome {
                Outcome::Accepted(id) if b.server == 0 => Some(node_of(id)),
                _ => None,
            })
            .expect("the doomed server answered some buys before it was killed");
        let retried = answers.iter().filter(|b| b.tries > 1).count();
        let recovered = answers
            .iter()
            .filter(|b| {
                b.tries > 1
                    && matches!(b.outcome, Outcome::Accepted(id) if node_of(id) == doomed_node)
            })
            .count();
        eprintln!(
            "server killed: {} accepted, {retried} buys retried on the survivor, {recovered} of \
         them answered with the order the dead server had made",
            accepted.len()
        );
        assert!(
            retried > 0,
            "no buy was in flight at the kill: the test proved nothing"
        );
        assert_stored_exactly(&sale.observer, product, stock, &accepted).await;

        // The operator starts the server again; it answers buys at once.
        sale.servers[0] = cluster.server().await;
        let late_buy = try_buy(
            &client,
            &sale.servers[0].1,
            &sale.spare,
            product,
            Some("late"),
        )
        .await;
        assert!(
            matches!(late_buy, Outcome::Accepted(_) | Outcome::SoldOut),
            "{late_buy:?}"
        );
        sale.assert_alive();
    }
}

mod needs_amqp {
    use super::*;
    use crate::support::{Need, require};

    /// Whether the orders exchange under `names` routes a closed payment window anywhere: a
    /// mandatory publish on `channel` (in confirm mode) comes back when it does not. What it routes
    /// is an order id no order has, which a worker cancelling deadlines ignores.
    async fn routes_deadlines(channel: &lapin::Channel, names: &str) -> bool {
        let confirmation = channel
            .basic_publish(
                format!("{names}orders").into(),
                "deadline".into(),
                lapin::options::BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                b"1",
                lapin::BasicProperties::default(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        confirmation.take_message().is_none()
    }

    /// Payment deadlines expiring with their dead-letter target missing: the binding that routes
    /// an expired order from the delay queue to the `deadline` queue is removed (an operator's
    /// slip) before a crowd of 2,000 buyers buys 1,000 units with a 5-second payment window. RabbitMQ drops every expired message (its
    /// dead-lettering is at most once); the database sweep still cancels every order, once, and
    /// every unit is back on sale, in the gate and in the database.
    ///
    /// It runs where `SECKILL_TEST_AMQP=1` (`mysql redis amqp`, `postgres cluster amqp`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs RabbitMQ: run by scripts/test on mysql redis amqp and postgres cluster amqp"]
    async fn deadlines_whose_dead_letter_target_is_missing_are_still_cancelled_once_by_the_sweep() {
        require(Need::Amqp);
        let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
        let (url, names) = cluster.amqp().cloned().unwrap();
        let stock = 1_000;
        let window = [("SECKILL_PAYMENT_WINDOW_SECS", "5")];
        let mut sale = Sale::start(&cluster, stock, 2_000, &window).await;
        let (observer, product, servers) = (&sale.observer, sale.product, sale.urls());
        // One order through the pipeline first: every link to the broker is open (a link declares
        // the topology when it opens), and nothing declares it again while no connection fails.
        let client = crowd_client();
        let Outcome::Accepted(first_order) =
            try_buy(&client, &servers[0], &sale.spare, product, None).await
        else {
            panic!("the first buy was not accepted");
        };
        observer.settle().await;
        // Then the topology is broken (again, if a consumer still starting declared it meanwhile).
        let connection = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            channel
                .queue_unbind(
                    format!("{names}deadline").into(),
                    format!("{names}orders").into(),
                    "deadline".into(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            if !routes_deadlines(&channel, &names).await {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the topology was declared again and again"
            );
        }
        let tokens = std::mem::take(&mut sale.tokens);
        let crowd = Crowd::start(&client, &servers, tokens, product, 64, false);
        let answers = crowd.answers().await;
        // Units come back as windows close during the crowd, and sell again.
        let mut accepted = accepted_ids(&answers);
        accepted.insert(first_order);
        assert!(
            accepted.len() as i64 >= stock,
            "{} accepted",
            accepted.len()
        );
        // Every order expires unpaid; the sweep cancels them all.
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let (_, units, left) = observer.stored(product).await;
            if units == 0 {
                assert_eq!(left, stock, "each cancelled order's unit back exactly once");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{units} units still held by overdue orders after 40 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let pool = observer.pool().await;
        let stored: Vec<(i64, String)> = sqlx::query_as(
            observer
                .db
                .sql("SELECT id, status FROM orders WHERE product_id = ?"),
        )
        .bind(product)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        let ids: HashSet<i64> = stored.iter().map(|(id, _)| *id).collect();
        let lost = accepted.difference(&ids).count();
        assert_eq!(
            (lost, ids.len()),
            (0, accepted.len()),
            "accepted orders not stored, or stored orders nobody was answered"
        );
        assert!(stored.iter().all(|(_, status)| status == "cancelled"));
        // The target was still missing at the end: what expired had nowhere to go.
        assert!(
            !routes_deadlines(&channel, &names).await,
            "the deadline binding came back during the test: it proved nothing"
        );
        // Every unit is on sale again, in the gate too.
        let gate_deadline = Instant::now() + Duration::from_secs(10);
        while observer.product(product).await["remaining"] != stock {
            assert!(
                Instant::now() < gate_deadline,
                "the gate did not get every unit back"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
