//! The deployment as shipped, across hosts: a backends host (PostgreSQL, Redis, RabbitMQ), two
//! server hosts and a worker host, made as network namespaces by the test, with HAProxy on the
//! test's side running `deploy/haproxy.cfg` unchanged and terminating the clients' TLS. A crowd
//! buys and reads its orders through it while each server in turn is stopped with SIGTERM and
//! started again, then the worker: no request may fail, no accepted order may be lost, and each
//! stopping server must turn unready, and be taken out by HAProxy, before it stops accepting.

mod needs_deployment {
    use crate::support::crowd::assert_stored_exactly;
    use crate::support::haproxy::Haproxy;
    use crate::support::host_backends::{HostPostgres, HostRabbitmq, HostRedis};
    use crate::support::hosts::{Host, Network, say};
    use crate::support::private_redis::free_port;
    use crate::support::processes::Cluster;
    use crate::support::rolling::{Drain, Shoppers, watch_drain};
    use crate::support::{ADMIN_TOKEN, Need, TestDatabase, require};
    use reqwest::StatusCode;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::process::Child;
    use tokio::time::Instant;

    /// Units on sale and buyers after them: demand exceeds the stock.
    const STOCK: i64 = 300;
    const BUYERS: usize = 400;
    /// Between two buyers' buys: the buys spread over 20 s, longer than the restarts.
    const SPACING: Duration = Duration::from_millis(50);

    /// Sends SIGTERM to `process` and waits until it exits; it must exit 0 within 30 s.
    async fn terminate(name: &str, process: &mut Child) {
        let pid = process.id().expect("a running process") as i32;
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGTERM) },
            0,
            "kill -TERM {pid}"
        );
        let exit = tokio::time::timeout(Duration::from_secs(30), process.wait())
            .await
            .unwrap_or_else(|_| panic!("the {name} did not exit within 30 s of SIGTERM"))
            .unwrap();
        assert!(
            exit.success(),
            "the {name} exited with {exit} after SIGTERM"
        );
    }

    /// Stops the server `name` (process and base URL) with SIGTERM, watching its own `/readyz`,
    /// and starts it again on `host` at the same address, once HAProxy sends it traffic again.
    /// It must have answered 503 before it refused connections, and HAProxy must have taken it
    /// out before it stopped. Returns when it answered 503 and refused, after SIGTERM.
    async fn restart(
        cluster: &Cluster,
        haproxy: &Haproxy,
        host: &Host,
        server: &mut (Child, String),
        name: &str,
    ) -> Drain {
        let drain = watch_drain(&server.1);
        terminate(&format!("server {name}"), &mut server.0).await;
        let drain = drain.await.unwrap();
        let unready_first = matches!(
            drain,
            Drain { unready: Some(unready), refused: Some(refused) } if unready < refused
        );
        assert!(
            unready_first,
            "{name}'s /readyz must answer 503 before it refuses connections: {drain:?}"
        );
        let (state, check) = haproxy.status("seckill_ready", name).await;
        assert!(
            state.starts_with("DOWN"),
            "HAProxy still sent traffic to {name} when it stopped: it is {state}, its last \
             health check {check}"
        );
        let addr = server.1.trim_start_matches("http://").to_owned();
        *server = cluster
            .server_via(&host.prefix(), &[("SECKILL_HTTP_ADDR", &addr)])
            .await;
        haproxy
            .wait_up("seckill_ready", name, Duration::from_secs(30))
            .await;
        drain
    }

    /// Waits until the worker at `base` is ready (up to 10 s), then scrapes its metrics as a
    /// monitoring system would: with the admin token, its build among them.
    async fn scraped(client: &reqwest::Client, base: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ready = client.get(format!("{base}/readyz")).send().await;
            let status = ready.map(|answer| answer.status());
            if status
                .as_ref()
                .is_ok_and(|status| *status == StatusCode::OK)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the worker's /readyz answers {status:?} 10 s after it started"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let metrics = client
            .get(format!("{base}/metrics"))
            .bearer_auth(ADMIN_TOKEN);
        let metrics = metrics.send().await.unwrap();
        assert_eq!(metrics.status(), StatusCode::OK, "the worker's /metrics");
        let text = metrics.text().await.unwrap();
        assert!(text.contains("seckill_build_info{"), "{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs root (network namespaces), haproxy, openssl, redis-server, RabbitMQ and PostgreSQL: run by scripts/test on postgres"]
    async fn a_rolling_restart_behind_haproxy_fails_no_request_and_loses_no_order() {
        require(Need::Deployment);
        let began = Instant::now();
        let (_network, hosts) = Network::hosts(&["backends", "server1", "server2", "worker"]);
        let [backends, server1, server2, worker_host]: [Host; 4] = hosts.try_into().ok().unwrap();
        // Plain links to the backends, each bound to the backends host's address only.
        let rabbitmq = HostRabbitmq::start(&backends);
        let postgres = HostPostgres::start(&backends).await;
        let redis = HostRedis::start(&backends).await;
        rabbitmq.wait_ready().await;
        let db = Arc::new(TestDatabase::created_on(&postgres.url).await);
        let cluster = Cluster::on_redis(db, redis.url.clone()).with_amqp(rabbitmq.url.clone());
        let observer = cluster
            .observer_with(|c| c.redis_url = Some(redis.url.clone()))
            .await;
        let product = observer.live_product(STOCK, 1).await;
        let tokens = observer.users(BUYERS).await;

        let addrs = [&server1, &server2].map(|host| format!("{}:{}", host.ip, free_port()));
        let mut servers = Vec::new();
        for (host, addr) in [&server1, &server2].into_iter().zip(&addrs) {
            let env = [("SECKILL_HTTP_ADDR", addr.as_str())];
            servers.push(cluster.server_via(&host.prefix(), &env).await);
        }
        // The worker's own /healthz, /readyz and /metrics (branch ready's `worker_addr`).
        let worker_addr = format!("{}:{}", worker_host.ip, free_port());
        let worker_env = [("SECKILL_WORKER_ADDR", worker_addr.as_str())];
        let worker_base = format!("http://{worker_addr}");
        let (mut worker, _) = cluster
            .start_via(&worker_host.prefix(), "worker", &worker_env)
            .await;
        let mut haproxy = Haproxy::start(&addrs).await;
        for name in ["s1", "s2"] {
            haproxy
                .wait_up("seckill_ready", name, Duration::from_secs(10))
                .await;
        }
        let ready_at = began.elapsed();

        let shoppers = Shoppers::start(&haproxy.client, &haproxy.url, tokens, product, SPACING);
        // Restarts under a crowd: a quarter of the buyers keep reading their orders by now.
        shoppers.wait_bought(BUYERS / 4).await;
        let restarts = Instant::now();
        let mut drains = Vec::new();
        for (i, host) in [&server1, &server2].into_iter().enumerate() {
            let name = format!("s{}", i + 1);
            let answered = shoppers.answered();
            let drain = restart(&cluster, &haproxy, host, &mut servers[i], &name).await;
            assert!(
                shoppers.answered() > answered,
                "no request was answered while {name} restarted: the test proved nothing"
            );
            drains.push((name, drain));
        }
        scraped(&observer.client, &worker_base).await;
        terminate("worker", &mut worker).await;
        let (_worker, _) = cluster
            .start_via(&worker_host.prefix(), "worker", &worker_env)
            .await;
        scraped(&observer.client, &worker_base).await;
        let restarted_in = restarts.elapsed();

        shoppers.wait_bought(BUYERS).await;
        let tally = shoppers.finish().await;
        haproxy.assert_running();
        say(&format!(
            "{} requests answered, {} failed; {} orders accepted of {STOCK} units for {BUYERS} \
             buyers; drains (since SIGTERM) {drains:?}; hosts and backends ready after \
             {ready_at:?}, restarts took {restarted_in:?}, {:?} in all",
            tally.answered,
            tally.failures.len(),
            tally.accepted.len(),
            began.elapsed()
        ));
        let errors = haproxy.errors();
        assert!(
            tally.failures.is_empty(),
            "{} of {} requests failed during the rolling restart, first ones:\n{}\n\
             HAProxy's log of its answers of 500 or more ({} lines), first ones:\n{}",
            tally.failures.len(),
            tally.answered + tally.failures.len(),
            tally
                .failures
                .iter()
                .take(20)
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            errors.len(),
            errors[..errors.len().min(20)].join("\n")
        );
        assert_eq!(
            tally.accepted.len() as i64,
            STOCK.min(BUYERS as i64),
            "sold = min(stock, demand)"
        );
        assert_stored_exactly(&observer, product, STOCK, &tally.accepted).await;
    }
}
