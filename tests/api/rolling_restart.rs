//! The deployment as shipped, across hosts: a backends host (PostgreSQL, Redis, RabbitMQ), two
//! server hosts and a worker host, made as network namespaces by the test, with HAProxy on the
//! test's side running `deploy/haproxy.cfg` unchanged and terminating the clients' TLS. A crowd
//! buys and reads its orders through it while each server in turn is stopped with SIGTERM and
//! started again, then the worker: no request may fail, no accepted order may be lost, and each
//! stopping server must turn unready, and be taken out by HAProxy, before it stops accepting.

mod needs_deployment {
    use crate::support::crowd::assert_stored_exactly;
    use crate::support::haproxy::Haproxy;
    use crate::support::hosts::{Host, Network, say};
    use crate::support::private_redis::free_port;
    use crate::support::probes;
    use crate::support::processes::Cluster;
    use crate::support::rolling::{Drain, Shoppers, watch_drain};
    use crate::support::tls_servers::{Certificates, TlsMariadb, TlsPostgres, TlsRabbit, TlsRedis};
    use crate::support::{ADMIN_TOKEN, Need, TestDatabase, require};
    use reqwest::StatusCode;
    use std::net::IpAddr;
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
        probes::signal(process, "TERM").await;
        let (_, clean) = probes::exits_within(process, Duration::from_secs(30)).await;
        assert!(clean, "the {name} did not exit 0 after SIGTERM");
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
        env: &[(&str, &str)],
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
        let env = [env, &[("SECKILL_HTTP_ADDR", addr.as_str())]].concat();
        *server = cluster.server_via(&host.prefix(), &env).await;
        haproxy
            .wait_up("seckill_ready", name, Duration::from_secs(30))
            .await;
        drain
    }

    /// Waits until the worker at `base` is ready (up to 10 s), then scrapes its metrics as a
    /// monitoring system would: with the admin token, its build among them.
    async fn scraped(client: &reqwest::Client, base: &str) {
        probes::readyz_turns(client, base, StatusCode::OK, Duration::from_secs(10)).await;
        let metrics = client
            .get(format!("{base}/metrics"))
            .bearer_auth(ADMIN_TOKEN);
        let metrics = metrics.send().await.unwrap();
        assert_eq!(metrics.status(), StatusCode::OK, "the worker's /metrics");
        let text = metrics.text().await.unwrap();
        assert!(text.contains("seckill_build_info{"), "{text}");
    }

    /// The database server on the backends host, TLS only.
    #[derive(Clone, Copy, Debug)]
    enum Database {
        /// PostgreSQL with `hostssl` lines only.
        Postgres,
        /// MariaDB with `require_secure_transport`.
        Mariadb,
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs root (network namespaces), haproxy, openssl, redis-server, RabbitMQ and PostgreSQL: run by scripts/test on postgres"]
    async fn a_rolling_restart_behind_haproxy_fails_no_request_and_loses_no_order() {
        rolling_restart(Database::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs root (network namespaces), haproxy, openssl, redis-server, RabbitMQ and MariaDB: run by scripts/test on postgres"]
    async fn a_rolling_restart_over_mariadb_fails_no_request_and_loses_no_order() {
        rolling_restart(Database::Mariadb).await;
    }

    /// The deployment over `database`, restarted process by process under a crowd.
    async fn rolling_restart(database: Database) {
        require(Need::Deployment);
        let began = Instant::now();
        let (_network, hosts) = Network::hosts(&["backends", "server1", "server2", "worker"]);
        let [backends, server1, server2, worker_host]: [Host; 4] = hosts.try_into().ok().unwrap();
        // TLS-only backends, each bound to the backends host's address only, with certificates
        // of the test's own (HAProxy shows the same server certificate, for 127.0.0.1).
        let certs = Certificates::make(Some(IpAddr::V4(backends.ip)));
        let ca = certs.ca().display().to_string();
        let on_backends = backends.prefix();
        let on_backends: Vec<&str> = on_backends.iter().map(String::as_str).collect();
        let bind = IpAddr::V4(backends.ip);
        let (rabbitmq, redis) = tokio::join!(
            TlsRabbit::start(&certs, &on_backends, bind),
            TlsRedis::single(&certs, &on_backends, bind, false),
        );
        // Kept until the test ends: dropping one stops its server.
        let (url, _postgres, _mariadb) = match database {
            Database::Postgres => {
                let postgres = TlsPostgres::start(&certs, &on_backends, bind).await;
                let options = format!("sslmode=verify-full&sslrootcert={ca}");
                (postgres.url("postgres", &options), Some(postgres), None)
            }
            Database::Mariadb => {
                let mariadb = TlsMariadb::start(&certs, &on_backends, bind).await;
                let options = format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}");
                (mariadb.url("seckill", &options), None, Some(mariadb))
            }
        };
        let db = Arc::new(TestDatabase::on_own_server(url));
        let cluster = Cluster::on_redis(db, redis.url(0)).with_amqp(rabbitmq.url());
        let observer = cluster
            .observer_with(|c| {
                c.redis_url = Some(redis.url(0));
                c.redis_ca_file = Some(certs.ca());
                c.amqp_ca_file = Some(certs.ca());
            })
            .await;
        let tls_env = [
            ("SECKILL_REDIS_CA_FILE", ca.as_str()),
            ("SECKILL_AMQP_CA_FILE", ca.as_str()),
        ];
        let product = observer.live_product(STOCK, 1).await;
        let tokens = observer.users(BUYERS).await;

        let addrs = [&server1, &server2].map(|host| format!("{}:{}", host.ip, free_port()));
        let mut servers = Vec::new();
        for (host, addr) in [&server1, &server2].into_iter().zip(&addrs) {
            let env = [&tls_env[..], &[("SECKILL_HTTP_ADDR", addr.as_str())]].concat();
            servers.push(cluster.server_via(&host.prefix(), &env).await);
        }
        // The worker's own /healthz, /readyz and /metrics.
        let worker_addr = format!("{}:{}", worker_host.ip, free_port());
        let worker_env = [
            &tls_env[..],
            &[("SECKILL_WORKER_ADDR", worker_addr.as_str())],
        ]
        .concat();
        let worker_base = format!("http://{worker_addr}");
        let (mut worker, _) = cluster
            .start_via(&worker_host.prefix(), "worker", &worker_env)
            .await;
        let mut haproxy = Haproxy::start(&addrs, &certs).await;
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
            let drain = restart(&cluster, &haproxy, host, &mut servers[i], &name, &tls_env).await;
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
            "{database:?}: {} requests answered, {} failed; {} orders accepted of {STOCK} units for {BUYERS} \
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
