//! `seckill worker --addr` is observable as a server is: `/healthz`, `/readyz` with its
//! backends' checks, and `/metrics` behind the admin token with its own batches, the build it
//! runs and the process's own figures; SIGTERM still ends it cleanly.

mod needs_single_redis {
    use crate::support::buy::request;
    use crate::support::probes::{exits_within, readyz_turns, signal};
    use crate::support::processes::{Cluster, base_url, launch};
    use crate::support::{ADMIN_TOKEN, Need, TestDatabase, require, status_and_json};
    use reqwest::StatusCode;
    use serde_json::json;
    use std::sync::Arc;
    use std::time::Duration;

    /// The value of the line of `metrics` that starts with `name` and its labels.
    fn sample<'a>(metrics: &'a str, name: &str) -> Option<&'a str> {
        metrics
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.rsplit(' ').next())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs the gate on a single Redis: run by scripts/test on sqlite redis, postgres redis and mysql redis amqp"]
    async fn a_worker_with_an_address_serves_its_health_readiness_and_metrics() {
        require(Need::SingleRedis);
        let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await));
        let observer = cluster.observer().await;
        let product = observer.live_product(5, 1).await;
        let token = observer.users(1).await.pop().unwrap();
        let (_server, server) = cluster.server().await;
        let mut command = cluster.command("worker", &[]);
        command.args(["--addr", "127.0.0.1:0"]);
        let (mut worker, line) = launch(command, "worker").await;
        let base = base_url(&line);
        let client = &observer.client;

        let bought = request(client, &server, &token, product, 1)
            .send()
            .await
            .unwrap();
        assert_eq!(bought.status(), StatusCode::ACCEPTED);
        assert_eq!(
            observer.live_order_ids(product).await.len(),
            1,
            "the worker stored it"
        );

        let healthz = client.get(format!("{base}/healthz")).send().await.unwrap();
        let (status, body) = status_and_json(healthz).await;
        assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));

        let (body, _) = readyz_turns(client, &base, StatusCode::OK, Duration::from_secs(5)).await;
        let mut expected = json!({"status": "ready", "checks": {"database": "ok", "redis": "ok"}});
        if cluster.amqp().is_some() {
            expected["checks"]["amqp"] = json!("ok");
        }
        assert_eq!(body, expected);

        let metrics = format!("{base}/metrics");
        let anonymous = client.get(&metrics).send().await.unwrap();
        assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
        let scraped = client.get(&metrics).bearer_auth(ADMIN_TOKEN).send().await;
        let scraped = scraped.unwrap();
        assert_eq!(scraped.status(), StatusCode::OK);
        let text = scraped.text().await.unwrap();
        let build = text
            .lines()
            .find(|line| line.starts_with("seckill_build_info{"))
            .unwrap_or_else(|| panic!("no seckill_build_info in\n{text}"));
        assert!(build.ends_with(" 1"), "{build}");
        assert!(build.contains(r#"version="0.1.0""#), "{build}");
        let commit = build.split(r#"commit=""#).nth(1).unwrap().split('"').next();
        let commit = commit.unwrap();
        assert!(
            commit == "unknown"
                || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{build}"
        );
        let resident: f64 = sample(&text, "process_resident_memory_bytes ")
            .unwrap_or_else(|| panic!("no process_resident_memory_bytes in\n{text}"))
            .parse()
            .unwrap();
        assert!(resident > 1e6, "{resident}");
        for name in ["process_cpu_seconds_total ", "process_open_fds "] {
            assert!(sample(&text, name).is_some(), "no {name} in\n{text}");
        }
        let batches = r#"seckill_order_batch_size_count{writer="worker"} "#;
        assert_eq!(sample(&text, batches), Some("1"), "{text}");

        signal(&worker, "TERM").await;
        let (_, clean) = exits_within(&mut worker, Duration::from_secs(10)).await;
        assert!(clean, "SIGTERM ends the observed worker with status 0");
    }
}
