//! The operator's console over HTTP, as a browser uses it: signing in with the admin token,
//! CSRF tokens on every form, creating a product and adding stock, the audit log, signing out,
//! and the live dashboard with its stream: units in flight and the outbox while no worker
//! stores them, the queues, the gate's drift from the database, every server's buys.

use crate::support::TestDatabase;
use crate::support::operator::{
    Operator, browser, browser_builder, csrf_of, operator, operator_with, sign_in,
};
use crate::support::{
    ADMIN_TOKEN, TestApp, TextOfAnswer, assert_form_refused, client_builder, rfc3339, within_spread,
};
use crate::support::{fresh_prefix, local_amqp, server_on_with};
use reqwest::{Client, StatusCode};
use std::sync::Arc;

/// A console time, `datetime-local` in UTC, `offset_ms` from the server's now.
fn form_time(app: &TestApp, offset_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(app.state.sale.now() + offset_ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M")
        .to_string()
}

#[tokio::test]
async fn a_wrong_token_is_refused_and_the_console_stays_closed() {
    let app = TestApp::spawn().await;
    app.live_product(5, 1).await;
    let browser = browser(&app);
    let refused = sign_in(&app, &browser, "not-the-admin-token").await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("not the admin token")
    );
    let page = browser
        .get(app.url("/admin/products"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.url().path(), "/admin/login");
    assert!(!page.text().await.unwrap().contains("Test phone"));
}

#[tokio::test]
async fn the_console_changes_the_catalog_under_csrf_and_keeps_an_audit_log() {
    let app = TestApp::spawn().await;
    let browser = browser(&app);
    let existing = app.live_product(5, 1).await;

    let listed = sign_in(&app, &browser, ADMIN_TOKEN).await;
    assert_eq!(listed.url().path(), "/admin/products");
    let listed = listed.text().await.unwrap();
    assert!(listed.contains(&format!("/admin/products/{existing}")));
    let csrf = csrf_of(&listed);

    let product_form = |csrf: Option<&str>| {
        let mut fields = vec![
            ("name", "Console kettle".to_owned()),
            ("original_price", "199".to_owned()),
            ("sale_price", "99.50".to_owned()),
            ("stock", "5".to_owned()),
            ("per_user_limit", "2".to_owned()),
            ("starts_at", form_time(&app, -120_000)),
            ("ends_at", form_time(&app, 3_600_000)),
        ];
        if let Some(csrf) = csrf {
            fields.push(("csrf", csrf.to_owned()));
        }
        browser.post(app.url("/admin/products")).form(&fields)
    };
    for forged in [None, Some("forged")] {
        let refused = product_form(forged).send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
    assert!(
        !browser
            .get(app.url("/admin/products"))
            .text_of_answer()
            .await
            .contains("Console kettle"),
        "a refused form changes nothing"
    );

    let created = product_form(Some(&csrf)).send().await.unwrap();
    assert_eq!(created.status(), StatusCode::OK);
    let id: i64 = created
        .url()
        .path()
        .strip_prefix("/admin/products/")
        .and_then(|id| id.parse().ok())
        .expect("the new product's page");
    let shown = app.product(id).await;
    assert_eq!(shown["name"], "Console kettle");
    assert_eq!(shown["sale_price_cents"], 9_950);
    assert_eq!(shown["remaining"], 5);

    let added = browser
        .post(app.url(&format!("/admin/products/{id}/stock")))
        .form(&[("quantity", "3"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), StatusCode::OK);
    assert!(
        added
            .text()
            .await
            .unwrap()
            .contains("<b data-remaining>8</b>")
    );
    assert_eq!(app.product(id).await["remaining"], 8);

    let log = browser.get(app.url("/admin/audit")).send().await.unwrap();
    let log = log.text().await.unwrap();
    let stock_at = log
        .find(&format!("added 3 units to product {id}"))
        .expect("the stock change");
    let created_at = log
        .find(&format!("created product {id} &#34;Console kettle&#34;"))
        .or_else(|| log.find(&format!("created product {id} &quot;Console kettle&quot;")))
        .expect("the new product");
    let api_at = log
        .find(&format!("created product {existing}"))
        .expect("the API's change");
    assert!(
        stock_at < created_at && created_at < api_at,
        "newest first: {log}"
    );

    let signed_out = browser
        .post(app.url("/admin/logout"))
        .form(&[("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.url().path(), "/admin/login");
    let after = browser.get(app.url("/admin/audit")).send().await.unwrap();
    assert_eq!(after.url().path(), "/admin/login");
}

#[tokio::test]
async fn the_console_finds_an_order_by_its_id_and_by_its_buyer() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let buyer = app.users(1).await.remove(0);
    let (status, placed) = app.buy(&buyer, product, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{placed}");
    let order = placed["order_id"].as_str().unwrap().to_owned();
    app.settle().await;
    let browser = operator(&app).await.browser;

    let find = |query: String| {
        let browser = browser.clone();
        let url = app.url(&format!("/admin/orders?{query}"));
        async move {
            let response = browser.get(url).send().await.unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    let (status, by_id) = find(format!("order={order}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(by_id.contains(&format!("<td>{order}</td>")), "{by_id}");
    assert!(by_id.contains("<td data-status>awaiting_payment</td>"));
    let start = by_id.find(&format!("<td>{order}</td><td>")).unwrap() + order.len() + 13;
    let user_id: i64 = by_id[start..].split('<').next().unwrap().parse().unwrap();

    let (status, by_user) = find(format!("user={user_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(by_user.contains(&format!("<td>{order}</td>")));
    let (_, someone_else) = find(format!("user={}", user_id + 1)).await;
    assert!(!someone_else.contains(&format!("<td>{order}</td>")));
    assert!(someone_else.contains("No such orders."));
    let (status, garbled) = find("order=12x".into()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(garbled.contains("An order id is a whole number."));
}

#[tokio::test]
async fn the_admin_api_lists_events_products_and_the_audit_log_for_the_admin_only() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let (status, event) = app
        .admin_post(
            "/api/v1/admin/events",
            serde_json::json!({ "title": "Night", "starts_at": rfc3339(now + 60_000), "ends_at": rfc3339(now + 120_000) }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    let product = app.live_product(5, 1).await;
    for path in [
        "/api/v1/admin/events",
        "/api/v1/admin/products",
        "/api/v1/admin/audit",
    ] {
        let (status, _) = app.get_json(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    let admin_get = |path: &'static str| app.get_json_as(ADMIN_TOKEN, path);
    let (status, events) = admin_get("/api/v1/admin/events").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(events, serde_json::json!([event]));
    let (_, products) = admin_get("/api/v1/admin/products").await;
    assert_eq!(products[0]["id"], product);
    assert_eq!(products[0]["remaining"], 5);
    let (_, log) = admin_get("/api/v1/admin/audit").await;
    let actions: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            format!("created product {product} \"Test phone\""),
            format!("created event {} \"Night\"", event["id"]),
        ]
    );
    let actor = log[0]["actor"].as_str().unwrap();
    assert!(actor.starts_with("token ") && actor.len() == 14, "{actor}");
    assert!(!actor.contains(ADMIN_TOKEN));
}

#[tokio::test]
async fn the_console_changes_a_product_and_explains_a_refused_change() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let Operator { browser, csrf, .. } = operator(&app).await;
    let change = |sale_price: &'static str| {
        browser
            .post(app.url(&format!("/admin/products/{product}")))
            .form(&[
                ("csrf", csrf.as_str()),
                ("name", "Renamed phone"),
                ("image_url", "/static/img/gift.svg"),
                ("original_price", "100.00"),
                ("sale_price", sale_price),
                ("per_user_limit", "3"),
                ("starts_at", ""),
                ("ends_at", ""),
            ])
            .send()
    };
    let refused = change("100.01").await.unwrap();
    assert_form_refused(refused, "cannot exceed the original price").await;
    assert_eq!(app.product(product).await["name"], "Test phone");

    let changed = change("39.9").await.unwrap();
    assert_eq!(changed.status(), StatusCode::OK);
    assert_eq!(changed.url().path(), format!("/admin/products/{product}"));
    let shown = app.product(product).await;
    assert_eq!(
        (
            &shown["name"],
            &shown["sale_price_cents"],
            &shown["per_user_limit"]
        ),
        (
            &serde_json::json!("Renamed phone"),
            &serde_json::json!(3_990),
            &serde_json::json!(3)
        )
    );
    let log = browser.get(app.url("/admin/audit")).text_of_answer().await;
    assert_eq!(
        log.matches(&format!("changed product {product}")).count(),
        1,
        "{log}"
    );
}

/// The events of a dashboard stream, read as they come.
struct Events {
    stream: reqwest::Response,
    /// Text received and not yet read as whole events.
    pending: String,
}

impl Events {
    /// Opens the dashboard's stream as `browser` (signed in).
    async fn open(app: &TestApp, browser: &Client) -> Self {
        let stream = browser
            .get(app.url("/admin/dashboard/stream"))
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), StatusCode::OK);
        Self {
            stream,
            pending: String::new(),
        }
    }

    /// The next event's `data:` as JSON.
    async fn next(&mut self) -> serde_json::Value {
        loop {
            if let Some((event, rest)) = self.pending.split_once("\n\n") {
                let data = event.lines().find_map(|l| l.strip_prefix("data:"));
                let data = data.map(|d| serde_json::from_str(d.trim()).unwrap());
                self.pending = rest.to_owned();
                match data {
                    Some(data) => return data,
                    None => continue,
                }
            }
            let chunk = self.stream.chunk().await.unwrap();
            let chunk = chunk.unwrap_or_else(|| panic!("the stream ended: {}", self.pending));
            self.pending.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The first `n` events, within 10 s.
    async fn take(&mut self, n: usize) -> Vec<serde_json::Value> {
        let read = async {
            let mut events = Vec::with_capacity(n);
            while events.len() < n {
                events.push(self.next().await);
            }
            events
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("the events within 10 s")
    }

    /// The first event `wanted` accepts, within 30 s (the last one seen in the panic): a
    /// reading a second, and some that must agree, on a machine that may be busy.
    async fn until(&mut self, wanted: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let mut last = serde_json::Value::Null;
        let read = async {
            loop {
                last = self.next().await;
                if wanted(&last) {
                    return last.clone();
                }
            }
        };
        match tokio::time::timeout(std::time::Duration::from_secs(30), read).await {
            Ok(event) => event,
            Err(_) => panic!("no such event within 30 s; the last: {last}"),
        }
    }
}

/// A product's line in a dashboard event (`Null` when it is not there).
fn line(event: &serde_json::Value, product: i64) -> serde_json::Value {
    event["products"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == product)
        .cloned()
        .unwrap_or_default()
}

/// The count of an outcome among a dashboard event's buys.
fn buys(event: &serde_json::Value, outcome: &str) -> Option<serde_json::Value> {
    event["buys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b[0] == outcome)
        .map(|b| b[1].clone())
}

#[tokio::test]
async fn the_dashboard_needs_a_session() {
    let app = TestApp::spawn().await;
    let browser = browser(&app);
    let page = browser
        .get(app.url("/admin/dashboard"))
        .send()
        .await
        .unwrap();
    assert!(
        page.url().path().ends_with("/admin/login"),
        "{}",
        page.url()
    );
    let stream = client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(app.url("/admin/dashboard/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::SEE_OTHER);
    app.stop().await;
}

#[tokio::test]
async fn the_dashboard_stream_counts_sold_and_refused_buys() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let buyers = app.users(2).await;
    let orders = app.buy_each(&buyers, product).await;
    let paid = seckill::domain::OrderId(orders[0].1.parse().unwrap());
    assert!(
        app.state
            .store
            .mark_paid(paid, app.state.sale.now())
            .await
            .unwrap()
    );
    let (status, _) = app.buy(&buyers[0], product, 1).await;
    assert_ne!(status, StatusCode::ACCEPTED);

    let browser = operator(&app).await.browser;
    let page = browser
        .get(app.url("/admin/dashboard"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains(&format!(r#"data-product="{product}""#)),
        "{html}"
    );
    assert!(html.contains(r#"src="/static/admin.js""#));

    let mut events = Events::open(&app, &browser).await;
    assert!(
        events.stream.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // Three events span two of the server's parking ticks: an open stream is never parked.
    let received = events.take(3).await;
    assert!(received[2]["at"].as_i64() > received[0]["at"].as_i64());
    let event = &received[0];
    let line = line(event, product);
    assert_eq!(line["sold"], 2, "{line}");
    assert_eq!(line["remaining"], 3, "{line}");
    assert_eq!(line["in_flight"], 0, "{line}");
    assert_eq!(line["outbox"], 0, "{line}");
    assert_eq!(line["dead"], 0, "{line}");
    assert_eq!(line["drift"], 0, "{line}");
    assert_eq!(line["paid"], 1, "{line}");
    assert_eq!(buys(event, "accepted"), Some(2.into()), "{event}");
    assert_eq!(buys(event, "limit_reached"), Some(1.into()), "{event}");
    let run = crate::support::backends::backends();
    let (from, queues) = match (run.gate_in_redis, run.relay_through_amqp) {
        (false, _) => ("this_server", 0),
        (true, false) => ("all_servers", 0),
        (true, true) => ("all_servers", 6),
    };
    assert_eq!(event["buys_from"], from, "{event}");
    assert_eq!(event["servers"], 1, "{event}");
    assert_eq!(event["queues"].as_array().unwrap().len(), queues, "{event}");

    let script = browser
        .get(app.url("/static/admin.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), StatusCode::OK);
    // A graceful stop waits for open streams.
    drop(events);
    app.stop().await;
}

#[tokio::test]
async fn the_console_pauses_resumes_and_ends_a_sale_and_ends_an_event() {
    let app = TestApp::spawn().await;
    let now = app.state.sale.now();
    let (status, event) = app
        .admin_post(
            "/api/v1/admin/events",
            serde_json::json!({ "title": "Noon", "starts_at": rfc3339(now - 1000), "ends_at": rfc3339(now + 3_600_000) }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    let (status, product) = app
        .admin_post(
            "/api/v1/admin/products",
            serde_json::json!({ "event_id": event["id"], "name": "Kettle",
                "original_price_cents": 100, "sale_price_cents": 50, "stock": 5 }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{product}");
    let (event, product) = (
        event["id"].as_i64().unwrap(),
        product["id"].as_i64().unwrap(),
    );
    let buyers = app.users(2).await;
    // A browser that shows each redirect instead of following it.
    let no_redirects = browser_builder(&app).redirect(reqwest::redirect::Policy::none());
    let Operator { browser, csrf, .. } = operator_with(&app, no_redirects).await;
    let page = |path: String| {
        let request = browser.get(app.url(&path));
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let product_page = format!("/admin/products/{product}");
    let shown = page(product_page.clone()).await;
    assert!(shown.contains("<b data-sale-status>live</b>"), "{shown}");
    assert!(!shown.contains("data-paused"));
    let press = |path: String, csrf: String| {
        let request = browser.post(app.url(&path)).form(&[("csrf", csrf)]);
        async move { request.send().await.unwrap() }
    };

    let forged = press(format!("{product_page}/pause"), "forged".into()).await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(app.product(product).await["paused"], false);

    let paused = press(format!("{product_page}/pause"), csrf.clone()).await;
    assert_eq!(paused.status(), StatusCode::SEE_OTHER);
    assert_eq!(paused.headers()["location"], product_page.as_str());
    let shown = page(product_page.clone()).await;
    assert!(shown.contains("<b data-paused>paused</b>"), "{shown}");
    assert!(shown.contains(&format!(r#"action="{product_page}/resume""#)));
    let (status, body) = app.buy(&buyers[0], product, 1).await;
    assert_eq!(
        (status, crate::support::code(&body)),
        (StatusCode::FORBIDDEN, "sale_paused")
    );

    let resumed = press(format!("{product_page}/resume"), csrf.clone()).await;
    assert_eq!(resumed.status(), StatusCode::SEE_OTHER);
    assert!(!page(product_page.clone()).await.contains("data-paused"));
    assert_eq!(
        app.buy(&buyers[0], product, 1).await.0,
        StatusCode::ACCEPTED
    );

    let ended = press(format!("{product_page}/end"), csrf.clone()).await;
    assert_eq!(ended.status(), StatusCode::SEE_OTHER);
    let shown = page(product_page.clone()).await;
    assert!(shown.contains("<b data-sale-status>ended</b>"), "{shown}");
    assert!(!shown.contains("/end\""), "an ended sale offers no end");
    let (status, body) = app.buy(&buyers[1], product, 1).await;
    assert_eq!(
        (status, crate::support::code(&body)),
        (StatusCode::FORBIDDEN, "ended")
    );

    let catalog = page("/admin/products".into()).await;
    let end_event = format!("/admin/events/{event}/end");
    assert!(
        catalog.contains(&format!(r#"action="{end_event}""#)),
        "{catalog}"
    );
    let ended = press(end_event.clone(), csrf.clone()).await;
    assert_eq!(ended.status(), StatusCode::SEE_OTHER);
    assert_eq!(ended.headers()["location"], "/admin/products");
    assert!(!page("/admin/products".into()).await.contains(&end_event));
    let (_, shown) = app.get_json(&format!("/api/v1/events/{event}")).await;
    assert_eq!(shown["status"], "ended", "{shown}");

    let log = page("/admin/audit".into()).await;
    let at = |action: String| {
        log.find(&action)
            .unwrap_or_else(|| panic!("{action}: {log}"))
    };
    assert!(at(format!("ended event {event}")) < at(format!("ended product {product}")));
    assert!(at(format!("ended product {product}")) < at(format!("resumed product {product}")));
    assert!(at(format!("resumed product {product}")) < at(format!("paused product {product}")));
}

#[tokio::test]
async fn the_dashboard_shows_a_drift_when_the_database_stock_changes_behind_the_gate() {
    let app = TestApp::spawn().await;
    let product = app.live_product(5, 1).await;
    let buyers = app.users(2).await;
    app.buy_each(&buyers, product).await;
    let browser = operator(&app).await.browser;
    let mut events = Events::open(&app, &browser).await;
    // No drift after the buys (a reading taken while the gate is rebuilt shows none at all).
    events.until(|e| line(e, product)["drift"] == 0).await;

    // Two units leave the database's stock by hand: the gate would sell units the database
    // does not have.
    let pool = app.pool().await;
    sqlx::query(
        app.db
            .sql("UPDATE products SET stock = stock - 2 WHERE id = ?"),
    )
    .bind(product)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let event = events.until(|e| line(e, product)["drift"] != 0).await;
    let drifted = line(&event, product);
    assert_eq!(drifted["drift"], -2, "{drifted}");
    assert_eq!(drifted["remaining"], 3, "{drifted}");
    // The page takes a reading of its own, which may be the next second's.
    let mut page = String::new();
    let shown = within_spread(async || {
        page = browser
            .get(app.url("/admin/dashboard"))
            .text_of_answer()
            .await;
        page.contains(r#"<td class="dash-off">-2</td>"#)
    })
    .await;
    assert!(shown, "{page}");
    drop(events);
    app.stop().await;
}

mod needs_redis_server {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs a Redis server, whatever the gate: run by scripts/test on postgres redis and postgres cluster amqp"]
    async fn the_dashboard_of_one_server_counts_the_buys_of_every_server() {
        require(Need::RedisServer);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let first = server_on_with(&db, &prefix, true, None, |_| {}).await;
        let product = first.live_product(5, 1).await;
        let second = server_on_with(&db, &prefix, false, None, |_| {}).await;
        let tokens = first.users(3).await;
        for token in &tokens[..2] {
            assert_eq!(first.buy(token, product, 1).await.0, StatusCode::ACCEPTED);
        }
        assert_eq!(
            second.buy(&tokens[2], product, 1).await.0,
            StatusCode::ACCEPTED
        );
        let (status, body) = second.buy(&tokens[0], product, 1).await;
        assert_eq!(
            (status, crate::support::code(&body)),
            (StatusCode::CONFLICT, "limit_reached")
        );

        let browser = operator(&first).await.browser;
        let mut events = Events::open(&first, &browser).await;
        let event = events
            .until(|e| buys(e, "accepted") == Some(3.into()))
            .await;
        assert_eq!(buys(&event, "limit_reached"), Some(1.into()), "{event}");
        assert_eq!(event["buys_from"], "all_servers", "{event}");
        assert_eq!(event["servers"], 2, "{event}");
        assert_eq!(line(&event, product)["sold"], 3, "{event}");
        let page = browser
            .get(first.url("/admin/dashboard"))
            .text_of_answer()
            .await;
        assert!(page.contains("all servers (2)"), "{page}");
    }
}

mod needs_redis_and_rabbitmq_servers {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs a Redis server and RabbitMQ, whatever the backends: run by scripts/test on mysql redis amqp and postgres cluster amqp"]
    async fn the_dashboard_shows_orders_in_the_outbox_until_a_worker_stores_them() {
        require(Need::RedisAndRabbitmqServers);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let spawn =
            |worker| server_on_with(&db, &prefix, worker, Some(local_amqp(&prefix)), |_| {});
        // No worker yet: accepted orders wait in the outbox.
        let app = spawn(false).await;
        let product = app.sell_three_of_five().await;

        let browser = operator(&app).await.browser;
        let page = browser
            .get(app.url("/admin/dashboard"))
            .text_of_answer()
            .await;
        assert!(page.contains("orders</td><td>0</td>"), "{page}");
        let mut events = Events::open(&app, &browser).await;
        let event = events.take(1).await.remove(0);
        let waiting = line(&event, product);
        assert_eq!(waiting["sold"], 3, "{waiting}");
        assert_eq!(waiting["remaining"], 2, "{waiting}");
        assert_eq!(waiting["in_flight"], 3, "{waiting}");
        assert_eq!(waiting["outbox"], 2, "{waiting}");
        assert_eq!(waiting["paid"], 0, "{waiting}");
        // The units in flight are accounted for: the gate and the database balance.
        assert_eq!(waiting["drift"], 0, "{waiting}");
        let queue = |event: &serde_json::Value, name: &str| {
            event["queues"]
                .as_array()
                .unwrap()
                .iter()
                .find(|q| q["name"].as_str().unwrap().ends_with(name))
                .map(|q| q["messages"].clone())
        };
        assert_eq!(queue(&event, "orders"), Some(0.into()), "{event}");

        // A worker stores them; each stored order waits in the delay queue for its deadline.
        let _worker = spawn(true).await;
        let event = events
            .until(|e| line(e, product)["outbox"] == 0 && line(e, product)["in_flight"] == 0)
            .await;
        let stored = line(&event, product);
        assert_eq!(
            (stored["sold"].clone(), stored["remaining"].clone()),
            (3.into(), 2.into())
        );
        assert_eq!(stored["drift"], 0, "{stored}");
        let event = events
            .until(|e| queue(e, "deadline.wait.900000ms") == Some(2.into()))
            .await;
        assert_eq!(queue(&event, "orders"), Some(0.into()), "{event}");
        assert_eq!(queue(&event, "dead"), Some(0.into()), "{event}");
    }
}
