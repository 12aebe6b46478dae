//! An operator's refunds and order search, through the admin API and the console: a paid order
//! is refunded at the sandbox gateway once, its stock goes back on sale once (its buyer may buy
//! again), however many refunds of it run at once; orders that are not paid are refused and
//! nothing changes; with the gateway unreachable the refund waits and the ticker makes it; the
//! search finds exactly the orders its filters name.

use crate::support::operator::{Operator, operator};
use crate::support::sandbox::{param, spawn_paying_behind_a_switch, trade};
use crate::support::{ADMIN_TOKEN, TestApp, code, status_and_json};
use reqwest::StatusCode;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

impl TestApp {
    /// `POST /api/v1/admin/orders/{id}/refund` with the admin token.
    async fn refund(&self, order: &str) -> (StatusCode, Value) {
        let url = self.url(&format!("/api/v1/admin/orders/{order}/refund"));
        let request = self.client.post(url).bearer_auth(ADMIN_TOKEN);
        status_and_json(request.send().await.unwrap()).await
    }

    /// The orders an admin search answers, asserting it succeeded.
    async fn search(&self, query: &str) -> Value {
        let (status, body) = self
            .get_json_as(ADMIN_TOKEN, &format!("/api/v1/admin/orders?{query}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        body
    }

    /// The audit log's actions, newest first.
    async fn audit_actions(&self) -> Vec<String> {
        let (_, log) = self.get_json_as(ADMIN_TOKEN, "/api/v1/admin/audit").await;
        let entries = log.as_array().unwrap();
        entries
            .iter()
            .map(|e| e["action"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Whether the stock gate and the database agree on every product (the reconcile audit).
    async fn balanced(&self) -> bool {
        self.settle().await;
        let audits = self.state.sale.audit().await.unwrap();
        audits.iter().all(|audit| audit.balances())
    }
}

/// The ids of a search's orders, in the order answered.
fn ids(page: &Value) -> Vec<String> {
    page["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["order_id"].as_str().unwrap().to_owned())
        .collect()
}

/// A product of `stock` units (one per buyer), and one paid order of it: (product, buyer's
/// token, order id).
async fn paid_order(app: &TestApp, stock: i64) -> (i64, String, String) {
    let product = app.live_product(stock, 1).await;
    let token = app.users(1).await.remove(0);
    let (_, order) = app
        .buy_each(std::slice::from_ref(&token), product)
        .await
        .remove(0);
    app.pay_at_sandbox(&token, &order).await;
    (product, token, order)
}

#[tokio::test]
async fn a_refund_sends_the_money_back_once_and_puts_the_unit_back_on_sale_for_anyone() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let product = app.live_product(2, 1).await;
    let buyers = app.users(3).await;
    let orders = app.buy_each(&buyers[..2], product).await;
    let (refunded, other) = (&orders[0].1, &orders[1].1);
    app.pay_at_sandbox(&buyers[0], refunded).await;
    let (status, body) = app.buy(&buyers[0], product, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "limit_reached")
    );

    let (status, body) = app.refund(refunded).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "refunded");
    assert_eq!(body["refund_pending"], false);
    assert_eq!(body["payments"][0]["trade_status"], "TRADE_SUCCESS");
    assert_eq!(app.order_status(&buyers[0], refunded).await, "refunded");
    assert_eq!(
        trade(&app, refunded),
        ("TRADE_CLOSED".into(), "49.99".into()),
        "refunded in full at the gateway"
    );
    assert_eq!(app.stored(product).await, (1, 1, 1));
    assert_eq!(app.product(product).await["remaining"], 1);
    assert!(app.balanced().await);
    let actions = app.audit_actions().await;
    assert_eq!(actions[0], format!("refunded order {refunded}"));

    // Refunding again changes nothing.
    let (status, body) = app.refund(refunded).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_refunded")
    );
    assert_eq!(app.stored(product).await, (1, 1, 1));
    assert_eq!(app.audit_actions().await, actions);

    // The unit is on sale again, for someone else; the refunded buyer's limit no longer
    // counts it (turned away for stock now, not for the limit), so they buy again once a unit
    // comes back.
    assert_eq!(
        app.buy(&buyers[2], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    let (status, body) = app.buy(&buyers[0], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
    app.order_action(&buyers[1], other, "cancel").await;
    assert_eq!(
        app.buy(&buyers[0], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(app.stored(product).await, (2, 2, 0));
    assert!(app.balanced().await);

    let (status, shown) = app
        .get_json_as(ADMIN_TOKEN, &format!("/api/v1/admin/orders/{refunded}"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["status"], "refunded");
    assert!(shown["user_id"].is_i64());
    let statuses: Vec<&str> = shown["payments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["trade_status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses[0], "TRADE_SUCCESS", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_refunds_of_one_order_at_once_refund_it_once_and_return_its_stock_once() {
    let app = Arc::new(TestApp::spawn_paying(TestApp::manual_clock()).await);
    let (product, token, order) = paid_order(&app, 3).await;
    let refunds = (0..50).map(|_| {
        let (app, order) = (app.clone(), order.clone());
        tokio::spawn(async move { app.refund(&order).await })
    });
    let answers = futures_util::future::join_all(refunds).await;
    let mut made = 0;
    for answer in answers {
        let (status, body) = answer.unwrap();
        match status {
            StatusCode::OK => {
                made += 1;
                assert_eq!(body["status"], "refunded", "{body}");
            }
            StatusCode::CONFLICT => assert_eq!(code(&body), "already_refunded"),
            other => panic!("{other}: {body}"),
        }
    }
    assert!(made >= 1);
    assert_eq!(app.order_status(&token, &order).await, "refunded");
    assert_eq!(trade(&app, &order), ("TRADE_CLOSED".into(), "49.99".into()));
    assert_eq!(app.stored(product).await, (0, 0, 3));
    assert_eq!(app.product(product).await["remaining"], 3);
    assert!(app.balanced().await);
    let refunded = format!("refunded order {order}");
    let logged = app.audit_actions().await;
    assert_eq!(logged.iter().filter(|a| **a == refunded).count(), made);
}

#[tokio::test]
async fn unpaid_cancelled_and_unknown_orders_are_not_refunded_and_nothing_changes() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let product = app.live_product(3, 1).await;
    let buyers = app.users(2).await;
    let orders = app.buy_each(&buyers, product).await;
    let (unpaid, cancelled) = (&orders[0].1, &orders[1].1);
    app.order_action(&buyers[1], cancelled, "cancel").await;

    for (order, status, expected) in [
        (unpaid.as_str(), StatusCode::CONFLICT, "not_paid"),
        (cancelled.as_str(), StatusCode::CONFLICT, "not_paid"),
        ("12345", StatusCode::NOT_FOUND, "order_not_found"),
        ("12x", StatusCode::NOT_FOUND, "not_found"),
    ] {
        let (answered, body) = app.refund(order).await;
        assert_eq!((answered, code(&body)), (status, expected), "{order}");
    }
    assert_eq!(
        app.order_status(&buyers[0], unpaid).await,
        "awaiting_payment"
    );
    assert_eq!(app.order_status(&buyers[1], cancelled).await, "cancelled");
    assert_eq!(app.stored(product).await, (1, 1, 2));
    assert!(app.balanced().await);
    assert!(
        app.audit_actions()
            .await
            .iter()
            .all(|a| !a.starts_with("refunded")),
    );
    let url = app.url(&format!("/api/v1/admin/orders/{unpaid}/refund"));
    let (status, body) = status_and_json(app.client.post(url).send().await.unwrap()).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );

    // Without a payment provider, nothing can go back.
    let unpaying = TestApp::spawn().await;
    let product = unpaying.live_product(1, 1).await;
    let buyer = unpaying.users(1).await;
    let order = unpaying.buy_each(&buyer, product).await.remove(0).1;
    let (status, body) = unpaying.refund(&order).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "payments_not_configured")
    );
    assert_eq!(unpaying.stored(product).await, (1, 1, 0));
}

#[tokio::test]
async fn with_the_gateway_unreachable_a_refund_waits_and_the_ticker_makes_it() {
    // The shop reaches its sandbox gateway (and the gateway the shop) through the switch.
    let (switch, app) = spawn_paying_behind_a_switch(TestApp::manual_clock()).await;
    let (product, token, order) = paid_order(&app, 1).await;

    switch.set(false);
    let (status, body) = app.refund(&order).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        (&body["status"], &body["refund_pending"]),
        (&"cancelled".into(), &true.into())
    );
    // The stock is back at once; the money is not yet.
    assert_eq!(app.stored(product).await, (0, 0, 1));
    assert_eq!(app.product(product).await["remaining"], 1);
    assert_eq!(trade(&app, &order).0, "TRADE_SUCCESS");
    assert!(app.audit_actions().await[0].contains("pending"));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(app.order_status(&token, &order).await, "cancelled");

    switch.set(true);
    app.wait_for_status(&token, &order, "refunded").await;
    assert_eq!(trade(&app, &order), ("TRADE_CLOSED".into(), "49.99".into()));
    assert_eq!(app.stored(product).await, (0, 0, 1));
    assert!(app.balanced().await);
    let (status, body) = app.refund(&order).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "already_refunded")
    );
}

/// The ticker makes every refund due, lowest order id first: one the gateway refuses for good,
/// first in line, must hold up none of those behind it.
#[tokio::test]
async fn a_refund_the_gateway_refuses_for_good_holds_up_none_of_the_others_due() {
    let (switch, app) = spawn_paying_behind_a_switch(TestApp::manual_clock()).await;
    let product = app.live_product(4, 1).await;
    let buyers = app.users(4).await;
    let orders = app.buy_each(&buyers, product).await;

    // First in line: a trade its buyer abandoned, then cancelled (the gateway closed it); a
    // word signed with the gateway's key says it was paid after all. The gateway refuses its
    // refund, and always will: the trade is closed.
    let (token, refused) = &orders[0];
    app.open_checkout(token, refused).await;
    let (status, body) = app.order_action(token, refused, "cancel").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let closed = app.sandbox_notification(refused);
    assert_eq!(param(&closed, "trade_status"), "TRADE_CLOSED");
    let word = app
        .signed_by_gateway(&closed, &[("trade_status", "TRADE_SUCCESS")])
        .await;
    assert_eq!(app.notify(&word).await, "failure", "the refund was refused");

    // Behind it: trades paid, then cancelled by their buyers before the gateway's word came,
    // which came while the gateway could not be reached for the refund.
    for (token, order) in &orders[1..] {
        app.open_checkout(token, order).await;
        let (status, page) = app.checkout(order, "pay_without_notice").await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let (status, body) = app.order_action(token, order, "cancel").await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    switch.set(false);
    for (_, order) in &orders[1..] {
        let paid = app.sandbox_notification(order);
        assert_eq!(
            app.notify(&paid).await,
            "failure",
            "the refund could not be made"
        );
    }
    switch.set(true);

    for (token, order) in &orders[1..] {
        app.wait_for_status(token, order, "refunded").await;
        assert_eq!(trade(&app, order), ("TRADE_CLOSED".into(), "49.99".into()));
    }
    assert_eq!(app.order_status(token, refused).await, "cancelled");
    assert_eq!(trade(&app, refused).0, "TRADE_CLOSED");
    assert_eq!(app.stored(product).await, (0, 0, 4));
}

#[tokio::test]
async fn the_console_refunds_a_paid_order_under_csrf_and_shows_the_outcome() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (product, token, order) = paid_order(&app, 1).await;
    let Operator { browser, csrf, .. } = operator(&app).await;
    let search = format!("/admin/orders?product={product}&status=paid");
    let page = browser.get(app.url(&search)).send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(
        page.contains(&format!(r#"data-refund="{order}""#)),
        "{page}"
    );

    let refund = |csrf: &str| {
        browser
            .post(app.url(&format!("/admin/orders/{order}/refund")))
            .form(&[
                ("csrf", csrf),
                ("order", ""),
                ("user", ""),
                ("product", &product.to_string()),
                ("status", "paid"),
                ("before", ""),
            ])
            .send()
    };
    let forged = refund("forged").await.unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(app.order_status(&token, &order).await, "paid");

    let done = refund(&csrf).await.unwrap();
    assert_eq!(done.status(), StatusCode::OK);
    assert_eq!(done.url().path(), "/admin/orders");
    let query = done.url().query().unwrap().to_owned();
    assert_eq!(
        query,
        format!("product={product}&status=paid&refunded={order}")
    );
    let page = done.text().await.unwrap();
    assert!(
        page.contains(&format!("Order {order} is refunded.")),
        "{page}"
    );
    assert!(
        !page.contains(&format!("<td>{order}</td>")),
        "no longer paid"
    );
    assert_eq!(app.order_status(&token, &order).await, "refunded");
    assert_eq!(app.stored(product).await, (0, 0, 1));
    assert_eq!(
        app.audit_actions().await[0],
        format!("refunded order {order}")
    );

    let again = refund(&csrf).await.unwrap();
    assert_eq!(again.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(again.text().await.unwrap().contains("already refunded"));
    assert_eq!(app.stored(product).await, (0, 0, 1));
}

#[tokio::test]
async fn the_search_finds_exactly_the_orders_of_a_product_a_status_and_a_buyer() {
    let app = TestApp::spawn_paying(TestApp::manual_clock()).await;
    let (kettle, phone) = (app.live_product(5, 1).await, app.live_product(5, 1).await);
    let buyers = app.users(5).await;
    let kettles: Vec<String> = app
        .buy_each(&buyers[..4], kettle)
        .await
        .into_iter()
        .map(|(_, order)| order)
        .collect();
    let phone_order = app.buy_each(&buyers[4..], phone).await.remove(0).1;
    let [paid, unpaid, cancelled, refunded] = kettles.clone().try_into().unwrap();
    app.pay_at_sandbox(&buyers[0], &paid).await;
    app.order_action(&buyers[2], &cancelled, "cancel").await;
    app.pay_at_sandbox(&buyers[3], &refunded).await;
    assert_eq!(app.refund(&refunded).await.0, StatusCode::OK);
    app.pay_at_sandbox(&buyers[4], &phone_order).await;

    let newest_first = |mut orders: Vec<String>| {
        orders.sort_by_key(|id| std::cmp::Reverse(id.parse::<i64>().unwrap()));
        orders
    };
    let app = &app;
    let found = |query: String| async move { ids(&app.search(&query).await) };
    assert_eq!(
        found(format!("product_id={kettle}")).await,
        newest_first(kettles.clone())
    );
    assert_eq!(
        found(format!("product_id={kettle}&status=paid")).await,
        [paid.as_str()]
    );
    assert_eq!(
        found("status=paid".into()).await,
        newest_first(vec![paid.clone(), phone_order.clone()])
    );
    assert_eq!(
        found("status=awaiting_payment".into()).await,
        [unpaid.as_str()]
    );
    assert_eq!(
        found(format!("product_id={kettle}&status=cancelled")).await,
        [cancelled.as_str()]
    );
    assert_eq!(found("status=refunded".into()).await, [refunded.as_str()]);
    let user = app
        .search(&format!("status=paid&product_id={kettle}"))
        .await["orders"][0]["user_id"]
        .clone();
    assert_eq!(found(format!("user_id={user}")).await, [paid.as_str()]);
    assert_eq!(
        found(format!("user_id={user}&product_id={phone}")).await,
        Vec::<String>::new()
    );

    // A page at a time, newest first.
    let first = app.search(&format!("product_id={kettle}&limit=3")).await;
    let second = app
        .search(&format!(
            "product_id={kettle}&limit=3&before={}",
            first["next_before"].as_str().unwrap()
        ))
        .await;
    let paged: Vec<String> = ids(&first).into_iter().chain(ids(&second)).collect();
    assert_eq!(paged, newest_first(kettles));
    assert!(second["next_before"].is_null(), "{second}");

    for (query, expected) in [
        ("status=lost", "invalid_status"),
        ("limit=0", "invalid_limit"),
        ("limit=201", "invalid_limit"),
        ("user_id=x", "invalid_query"),
        ("colour=red", "invalid_query"),
    ] {
        let (status, body) = app
            .get_json_as(ADMIN_TOKEN, &format!("/api/v1/admin/orders?{query}"))
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNPROCESSABLE_ENTITY, expected),
            "{query}"
        );
    }

    // The console's filters find the same.
    let browser = operator(app).await.browser;
    let console = |query: String| {
        let url = app.url(&format!("/admin/orders?{query}"));
        let browser = browser.clone();
        async move { browser.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let page = console(format!("product={kettle}&status=cancelled")).await;
    assert_eq!(page.matches("<td data-status>").count(), 1, "{page}");
    assert!(page.contains(&format!("<td>{cancelled}</td>")), "{page}");
    assert!(page.contains(&format!(r#"<option value="{kettle}" selected>"#)));
    assert!(page.contains(r#"<option value="cancelled" selected>"#));
    let page = console("status=paid".into()).await;
    assert_eq!(page.matches("<td data-status>").count(), 2, "{page}");
    assert!(page.contains(&format!(r#"data-refund="{paid}""#)));
    assert!(page.contains(&format!(r#"data-refund="{phone_order}""#)));
    let page = console(format!("user={user}&product={kettle}")).await;
    assert_eq!(page.matches("<td data-status>").count(), 1, "{page}");
    assert!(page.contains(&format!("<td>{paid}</td>")), "{page}");
    let page = console("status=lost".into()).await;
    assert!(page.contains("status must be awaiting_payment"), "{page}");
}
