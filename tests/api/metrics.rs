//! `/metrics`: the Prometheus text, for the admin token only. Counters are shared by every test
//! of the process, which run side by side, so a test checks the increases it caused at least;
//! gauges labelled by product may be set by another test's product of the same id meanwhile,
//! so a test scrapes until they show its own figures.

use crate::support::TestDatabase;
use crate::support::{ADMIN_TOKEN, TestApp, code, status_and_json};
use crate::support::{fresh_prefix, local_amqp, server_on_with};
use reqwest::StatusCode;
use seckill::clock::SystemClock;
use std::sync::Arc;

/// The value of the sample `name` whose labels include every one of `labels` (0 when there
/// is none yet).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<f64> = text
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| {
            labels
                .iter()
                .all(|(key, value)| line.contains(&format!("{key}=\"{value}\"")))
        })
        .map(|line| line.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {matching:?}"
    );
    matching.first().copied().unwrap_or(0.0)
}

async fn scrape(app: &TestApp) -> String {
    let response = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE].clone();
    assert!(content_type.to_str().unwrap().starts_with("text/plain"));
    response.text().await.unwrap()
}

#[tokio::test]
async fn metrics_count_the_buys_by_outcome_and_the_requests_by_route_and_status() {
    let app = TestApp::spawn().await;
    let product = app.live_product(3, 1).await;
    let tokens = app.users(4).await;
    let before = scrape(&app).await;

    assert_eq!(
        app.buy(&tokens[0], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    let (status, body) = app.buy(&tokens[0], product, 1).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "limit_reached")
    );
    assert_eq!(
        app.buy(&tokens[1], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        app.buy(&tokens[2], product, 1).await.0,
        StatusCode::ACCEPTED
    );
    let (status, body) = app.buy(&tokens[3], product, 1).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "sold_out"));
    app.product(product).await;
    app.settle().await;

    let after = scrape(&app).await;
    let increase = |name: &str, labels: &[(&str, &str)]| {
        sample(&after, name, labels) - sample(&before, name, labels)
    };
    let buys = |status| {
        [
            ("method", "POST"),
            ("route", "/api/v1/orders"),
            ("status", status),
        ]
    };
    assert!(
        increase("seckill_http_requests_total", &buys("202")) >= 3.0,
        "{after}"
    );
    assert!(
        increase("seckill_http_requests_total", &buys("409")) >= 2.0,
        "{after}"
    );
    assert!(increase("seckill_http_request_duration_seconds_count", &buys("202")) >= 3.0);
    let outcome = |outcome| increase("seckill_buys_total", &[("outcome", outcome)]);
    assert!(outcome("accepted") >= 3.0, "{after}");
    assert!(outcome("limit_reached") >= 1.0, "{after}");
    assert!(outcome("sold_out") >= 1.0, "{after}");
    // Embedded mode stores each accepted order by group commit, cluster mode by the worker
    // (this test server runs one).
    let clustered = crate::support::backends::backends().gate_in_redis;
    let stored = [("writer", if clustered { "worker" } else { "group_commit" })];
    assert!(
        increase("seckill_order_batch_size_sum", &stored) >= 3.0,
        "{after}"
    );
    if !clustered {
        assert!(after.contains("\nseckill_order_queue_depth "), "{after}");
    }
    assert!(sample(&after, "seckill_http_connections_open", &[]) >= 1.0);
    // The scrape itself read the outbox and the gate's drift.
    for gauge in [
        "seckill_outbox_depth",
        "seckill_outbox_dead",
        "seckill_gate_drift",
    ] {
        assert!(after.contains(&format!("\n{gauge}{{product=")), "{after}");
    }
    // The raw path never becomes a label: the route's pattern does.
    let shown = [("route", "/api/v1/products/{id}"), ("status", "200")];
    assert!(
        increase("seckill_http_requests_total", &shown) >= 1.0,
        "{after}"
    );
    assert!(
        !after.contains(&format!("/products/{product}\"")),
        "{after}"
    );
    app.stop().await;
}

#[tokio::test]
async fn metrics_need_the_admin_token() {
    let app = TestApp::spawn().await;
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    let (status, body) = status_and_json(response).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let response = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth("not-the-admin-token-0123")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let users = app.users(1).await;
    let response = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth(&users[0])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    app.stop().await;
}

#[tokio::test]
async fn metrics_count_payments_by_result_and_deadline_cancels() {
    let clock = TestApp::manual_clock();
    let app = TestApp::spawn_paying(clock.clone()).await;
    let product = app.live_product(2, 1).await;
    let tokens = app.users(2).await;
    let orders = app.buy_each(&tokens, product).await;
    let before = scrape(&app).await;

    let (token, order) = &orders[0];
    app.pay_url(token, order).await;
    app.open_checkout(token, order).await;
    let (status, page) = app.checkout(order, "pay").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    app.wait_for_status(token, order, "paid").await;
    // The other order is left unpaid until its deadline (the default payment window).
    clock.advance(15 * 60 * 1000);
    assert_eq!(app.state.sale.expire_overdue().await.unwrap(), 1);

    let after = scrape(&app).await;
    let increase = |name: &str, labels: &[(&str, &str)]| {
        sample(&after, name, labels) - sample(&before, name, labels)
    };
    let paid = [("result", "paid")];
    assert!(increase("seckill_payments_total", &paid) >= 1.0, "{after}");
    assert!(
        increase("seckill_deadline_cancels_total", &[]) >= 1.0,
        "{after}"
    );
    app.stop().await;
}

/// Scrapes `app` until `wanted` accepts the text, within 15 s.
async fn scrape_until(app: &TestApp, wanted: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let text = scrape(app).await;
        if wanted(&text) {
            return text;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

mod needs_redis_and_rabbitmq_servers {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs a Redis server and RabbitMQ, whatever the backends: run by scripts/test on mysql redis amqp and postgres cluster amqp"]
    async fn metrics_gauge_the_outbox_and_the_queues() {
        require(Need::RedisAndRabbitmqServers);
        let db = Arc::new(TestDatabase::fresh().await);
        let prefix = fresh_prefix();
        let (amqp_url, names) = local_amqp(&prefix);
        let spawn = |worker| {
            let amqp = Some((amqp_url.clone(), names.clone()));
            server_on_with(&db, &prefix, worker, amqp, |_| {})
        };
        // No worker yet: accepted orders wait in the outbox.
        let app = spawn(false).await;
        let product = app.sell_three_of_five().await;
        let id = product.to_string();
        let labels = [("product", id.as_str())];
        let orders = format!("{names}orders");
        let waiting = format!("{names}deadline.wait.900000ms");

        let text = scrape_until(&app, |t| sample(t, "seckill_outbox_depth", &labels) == 2.0).await;
        assert_eq!(sample(&text, "seckill_gate_drift", &labels), 0.0, "{text}");
        assert_eq!(sample(&text, "seckill_outbox_dead", &labels), 0.0, "{text}");
        assert!(
            text.contains(&format!("seckill_queue_depth{{queue=\"{orders}\"}} 0")),
            "{text}"
        );

        // A worker stores them; each stored order waits in the delay queue for its deadline.
        let _worker = spawn(true).await;
        let text = scrape_until(&app, |t| {
            sample(t, "seckill_outbox_depth", &labels) == 0.0
                && sample(t, "seckill_queue_depth", &[("queue", &waiting)]) == 2.0
        })
        .await;
        assert_eq!(
            sample(&text, "seckill_queue_depth", &[("queue", &orders)]),
            0.0,
            "{text}"
        );
        assert_eq!(sample(&text, "seckill_gate_drift", &labels), 0.0, "{text}");
    }
}

#[tokio::test]
async fn three_thousand_wrong_tokens_at_metrics_are_throttled_like_the_other_operator_routes() {
    // The default per-address limits, which the other tests open wide.
    let limits = seckill::config::Config::default().rate_limit;
    let (per_sec, burst) = (limits.per_ip_per_sec, limits.per_ip_burst);
    let app = TestApp::spawn_with(Arc::new(SystemClock), move |c| {
        c.rate_limit.per_ip_per_sec = per_sec;
        c.rate_limit.per_ip_burst = burst;
    })
    .await;
    let started = std::time::Instant::now();
    let (mut unauthorized, mut throttled) = (0u32, 0u32);
    for _ in 0..3_000 {
        let response = app
            .client
            .get(app.url("/metrics"))
            .bearer_auth("a-guessed-admin-token")
            .send()
            .await
            .unwrap();
        let (status, body) = status_and_json(response).await;
        match status {
            StatusCode::UNAUTHORIZED => unauthorized += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(code(&body), "rate_limited", "{body}");
                throttled += 1;
            }
            other => panic!("a wrong token at /metrics answered {other}: {body}"),
        }
    }
    let allowed = f64::from(burst) + f64::from(per_sec) * started.elapsed().as_secs_f64();
    assert!(throttled > 0, "3,000 wrong tokens, none throttled");
    assert!(
        f64::from(unauthorized) <= allowed + 1.0,
        "{unauthorized} wrong tokens looked at, the throttle allows {allowed:.0}"
    );
}
