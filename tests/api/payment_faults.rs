//! The payment faults of `RELIABILITY.md` at the scale of a sale, against the built-in sandbox
//! gateway: money notified eight times for hundreds of orders cancelled before it came, and
//! the gateway unreachable while the deadline sweep meets hundreds of orders whose buyers went
//! to pay. Each order ends settled once: paid, or cancelled with its unit back on sale once,
//! and its money back once if it came. Time is moved with a manual clock.
//!
//! They run in two runs of the suite: embedded (`sqlite`, no Redis: payments applied at once)
//! and `mysql redis amqp` (cluster mode, where a payment may wait in the paid queue).

use crate::support::TestApp;
use crate::support::sandbox::param;
use crate::support::sandbox::{WINDOW_MS, sold};
use crate::support::sandbox::{spawn_paying_behind_a_switch, trade};
use futures_util::{StreamExt, stream};
use reqwest::StatusCode;
use std::future::Future;

/// How many orders each test settles.
const ORDERS: usize = 300;

mod needs_sqlite_embedded_or_mysql_amqp {
    use super::*;
    use crate::support::{Need, require};

    /// Runs `step` for every (token, order), 32 at once.
    async fn for_each_order<F: Future<Output = ()>>(
        orders: &[(String, String)],
        step: impl Fn(String, String) -> F,
    ) {
        stream::iter(orders.iter().cloned())
            .map(|(token, order)| step(token, order))
            .buffer_unordered(32)
            .collect::<Vec<()>>()
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs embedded SQLite, or MySQL with RabbitMQ: run by scripts/test embedded and on mysql redis amqp"]
    async fn money_notified_eight_times_after_the_cancel_is_refunded_once_and_its_stock_returns_once()
     {
        require(Need::SqliteEmbeddedOrMysqlAmqp);
        let app = &TestApp::spawn_paying(TestApp::manual_clock()).await;
        let (product, orders) = sold(app, ORDERS as i64, ORDERS).await;
        // Every buyer pays, the notification is lost on its way, and the buyer cancels.
        for_each_order(&orders, |token, order| async move {
            app.open_checkout(&token, &order).await;
            let (status, page) = app.checkout(&order, "pay_without_notice").await;
            assert_eq!(status, StatusCode::OK, "{page}");
            let (status, body) = app.order_action(&token, &order, "cancel").await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["status"], "cancelled");
        })
        .await;
        assert_eq!(app.stored(product).await, (0, 0, ORDERS as i64));

        // The gateway's word comes now, eight times for each order, all at once.
        let words: Vec<_> = orders
            .iter()
            .flat_map(|(_, order)| std::iter::repeat_n(app.sandbox_notification(order), 8))
            .collect();
        let answers: Vec<String> = stream::iter(&words)
            .map(|word| app.notify(word))
            .buffer_unordered(64)
            .collect()
            .await;
        let failed = answers.iter().filter(|a| *a != "success").count();
        assert_eq!(failed, 0, "{failed} notifications not applied");

        for_each_order(&orders, |token, order| async move {
            app.wait_for_status(&token, &order, "refunded").await;
            assert_eq!(
                trade(app, &order),
                ("TRADE_CLOSED".into(), "49.99".into()),
                "{order}: refunded once, in full"
            );
            // The eight copies kept as one word (the refund's closing word may follow it).
            let records = app.payment_records(&order).await;
            let paid = records.iter().filter(|(_, s)| s == "TRADE_SUCCESS").count();
            assert_eq!(paid, 1, "{records:?}");
        })
        .await;
        // Each unit went back on sale once, at its cancel; no refund added it again.
        assert_eq!(app.stored(product).await, (0, 0, ORDERS as i64));
        assert_eq!(app.product(product).await["remaining"], ORDERS as i64);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs embedded SQLite, or MySQL with RabbitMQ: run by scripts/test embedded and on mysql redis amqp"]
    async fn with_the_gateway_unreachable_the_sweep_holds_paying_orders_and_settles_each_once_when_it_returns()
     {
        require(Need::SqliteEmbeddedOrMysqlAmqp);
        let clock = TestApp::manual_clock();
        let (switch, app) = spawn_paying_behind_a_switch(clock.clone()).await;
        let app = &app;
        let (product, orders) = sold(app, ORDERS as i64, ORDERS).await;
        // A third pay (the notification is lost), a third open the checkout and leave it, a
        // third never go to pay.
        let (paid, rest) = orders.split_at(ORDERS / 3);
        let (left, never) = rest.split_at(ORDERS / 3);
        for_each_order(paid, |token, order| async move {
            app.open_checkout(&token, &order).await;
            let (status, page) = app.checkout(&order, "pay_without_notice").await;
            assert_eq!(status, StatusCode::OK, "{page}");
        })
        .await;
        for_each_order(left, |token, order| async move {
            app.open_checkout(&token, &order).await;
        })
        .await;

        // Every window closes while the gateway cannot be reached.
        switch.set(false);
        clock.advance(WINDOW_MS);
        app.state.sale.expire_overdue().await.unwrap();
        for_each_order(never, |token, order| async move {
            app.wait_for_status(&token, &order, "cancelled").await;
        })
        .await;
        for (token, order) in paid.iter().chain(left) {
            assert_eq!(
                app.order_status(token, order).await,
                "awaiting_payment",
                "{order}: cancelled without asking the gateway"
            );
        }
        let held = (paid.len() + left.len()) as i64;
        assert_eq!(app.stored(product).await, (held, held, never.len() as i64));

        // The gateway comes back: the ticker's next sweeps ask it about each order once more.
        switch.set(true);
        for_each_order(paid, |token, order| async move {
            app.wait_for_status(&token, &order, "paid").await;
            let records = app.payment_records(&order).await;
            assert_eq!(records.len(), 1, "{records:?}");
            assert!(records[0].0.starts_with("query:"), "{records:?}");
        })
        .await;
        for_each_order(left, |token, order| async move {
            app.wait_for_status(&token, &order, "cancelled").await;
            let trade = app.sandbox_notification(&order);
            assert_eq!(param(&trade, "trade_status"), "TRADE_CLOSED", "{order}");
        })
        .await;
        let sold = paid.len() as i64;
        assert_eq!(
            app.stored(product).await,
            (sold, sold, ORDERS as i64 - sold)
        );
        assert_eq!(
            app.product(product).await["remaining"],
            ORDERS as i64 - sold
        );
    }
}
