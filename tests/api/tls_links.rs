//! TLS to the backends: servers of the test's own that speak TLS only (see
//! `support/tls_servers.rs`), with certificates the test makes. A server sells over them as
//! over plain links; a certificate its CA does not sign, or a plain server behind a TLS URL,
//! stops the start with the reason instead of falling back to plain text.
//!
//! They bring their own servers, so they run in every combination, the embedded one included.

use crate::support::private_redis::{Persistence, PrivateRedis};
use crate::support::tls_servers::{Certificates, TlsMariadb, TlsPostgres, TlsRedis};
use crate::support::{TestApp, TestDatabase, fresh_prefix, test_config};
use reqwest::StatusCode;
use seckill::app::App;
use seckill::clock::SystemClock;
use seckill::config::Config;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A server whose gate is on the Redis `url` (with `tweak`'s TLS settings), running its worker.
async fn cluster_server(url: String, tweak: impl FnOnce(&mut Config)) -> TestApp {
    TestApp::spawn_with(Arc::new(SystemClock), |config| {
        config.redis_url = Some(url);
        config.redis_key_prefix = fresh_prefix();
        config.run_worker = true;
        tweak(config);
    })
    .await
}

/// Eight buyers of a product of five units, one each: exactly five are sold and stored.
async fn assert_sells_exactly_the_stock(app: &TestApp) {
    let product = app.live_product(5, 1).await;
    let tokens = app.users(8).await;
    let mut sold = 0;
    for token in &tokens {
        let (status, body) = app.buy(token, product, 1).await;
        match status {
            StatusCode::ACCEPTED => sold += 1,
            StatusCode::CONFLICT => {}
            other => panic!("a buy answered {other}: {body}"),
        }
    }
    assert_eq!(sold, 5);
    assert_eq!(app.stored(product).await, (5, 5, 0));
}

/// The reason the server refuses to start with `tweak` applied to the test configuration.
async fn start_refusal(tweak: impl FnOnce(&mut Config)) -> String {
    let db = TestDatabase::fresh().await;
    let mut config = test_config(&db);
    tweak(&mut config);
    match App::build(&config, Arc::new(SystemClock)).await {
        Ok(_) => panic!("the server started"),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn a_server_over_a_tls_only_redis_that_asks_for_client_certificates_sells_exactly_the_stock()
{
    let certs = Certificates::make(None);
    let redis = TlsRedis::single(&certs, &[], LOOPBACK, true).await;
    let app = cluster_server(redis.url(0), |config| {
        config.redis_ca_file = Some(certs.ca());
        config.redis_client_cert_file = Some(certs.file("client.pem"));
        config.redis_client_key_file = Some(certs.file("client.key"));
    })
    .await;
    assert_sells_exactly_the_stock(&app).await;
    app.stop().await;
}

#[tokio::test]
async fn a_redis_certificate_the_configured_ca_does_not_sign_stops_the_start() {
    let certs = Certificates::make(None);
    let stranger = Certificates::make(None);
    let redis = TlsRedis::single(&certs, &[], LOOPBACK, false).await;
    let refusal = start_refusal(|config| {
        config.redis_url = Some(redis.url(0));
        config.redis_ca_file = Some(stranger.ca());
    })
    .await;
    assert!(refusal.contains("Redis"), "{refusal}");
    assert!(refusal.contains("certificate"), "{refusal}");
    // Without a CA of its own, the system's roots do not know the test's CA either.
    let refusal = start_refusal(|config| config.redis_url = Some(redis.url(0))).await;
    assert!(refusal.contains("certificate"), "{refusal}");
}

#[tokio::test]
async fn a_tls_url_to_a_plain_redis_stops_the_start_instead_of_falling_back() {
    let plain = PrivateRedis::start(Persistence::None).await;
    let url = plain.url().replacen("redis://", "rediss://", 1);
    let refusal = start_refusal(|config| config.redis_url = Some(url)).await;
    // Refused by the handshake, not by the URL: TLS was tried, and plain text never was.
    assert!(refusal.contains("cannot connect to Redis"), "{refusal}");
}

#[tokio::test]
async fn a_server_over_a_tls_only_redis_cluster_sells_exactly_the_stock_in_both_url_forms() {
    let certs = Certificates::make(None);
    let redis = TlsRedis::cluster(&certs, &[], LOOPBACK, 3).await;
    let seeds = format!(
        "rediss+cluster://{LOOPBACK}:{},{LOOPBACK}:{}",
        redis.ports[0], redis.ports[1]
    );
    let list = format!("{},{}", redis.url(1), redis.url(2));
    for url in [seeds, list] {
        let app = cluster_server(url, |config| config.redis_ca_file = Some(certs.ca())).await;
        assert_sells_exactly_the_stock(&app).await;
        app.stop().await;
    }
}

/// An embedded server over the database `url` sells exactly the stock; the same URL with a CA
/// that did not sign the server's certificate, `stranger`, stops the start naming the cause.
async fn assert_database_tls(url: impl Fn(&Certificates) -> String, certs: &Certificates) {
    let stranger = Certificates::make(None);
    let refused = url(&stranger);
    let refusal = start_refusal(|config| config.database_url = refused.parse().unwrap()).await;
    assert!(refusal.contains("database"), "{refusal}");
    assert!(refusal.contains("certificate"), "{refusal}");
    let db = Arc::new(TestDatabase::on_own_server(url(certs)));
    let app = TestApp::spawn_on(db, Arc::new(SystemClock), |config| {
        // Embedded: each order is in the database before its buyer is answered.
        config.redis_url = None;
        config.amqp_url = None;
        config.run_worker = false;
    })
    .await;
    assert_sells_exactly_the_stock(&app).await;
    app.stop().await;
}

#[tokio::test]
async fn mariadb_over_verified_tls_works_and_a_stranger_ca_stops_the_start() {
    let certs = Certificates::make(None);
    let mariadb = TlsMariadb::start(&certs, &[], LOOPBACK).await;
    let url = |ca: &Certificates| {
        let options = format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.ca().display());
        mariadb.url("seckill", &options)
    };
    assert_database_tls(url, &certs).await;
}

#[tokio::test]
async fn postgres_over_verified_tls_works_and_a_stranger_ca_stops_the_start() {
    let certs = Certificates::make(None);
    let postgres = TlsPostgres::start(&certs, &[], LOOPBACK).await;
    let url = |ca: &Certificates| {
        let options = format!("sslmode=verify-full&sslrootcert={}", ca.ca().display());
        postgres.url("seckill", &options)
    };
    assert_database_tls(url, &certs).await;
}

mod needs_amqp {
    use super::*;
    use crate::support::redis_url;
    use crate::support::tls_servers::TlsRabbit;
    use crate::support::{Need, require};

    #[tokio::test]
    #[ignore = "needs RabbitMQ: run by scripts/test where the outbox is relayed through it"]
    async fn a_tls_only_rabbitmq_relays_exactly_the_stock_and_a_stranger_ca_stops_the_start() {
        require(Need::Amqp);
        let certs = Certificates::make(None);
        let stranger = Certificates::make(None);
        let rabbit = TlsRabbit::start(&certs, &[], LOOPBACK).await;
        let refusal = start_refusal(|config| {
            config.redis_url = Some(redis_url());
            config.redis_key_prefix = fresh_prefix();
            config.amqp_url = Some(rabbit.url());
            config.amqp_ca_file = Some(stranger.ca());
        })
        .await;
        assert!(refusal.contains("RabbitMQ"), "{refusal}");
        assert!(refusal.contains("certificate"), "{refusal}");
        let app = TestApp::spawn_with(Arc::new(SystemClock), |config| {
            config.amqp_url = Some(rabbit.url());
            config.amqp_ca_file = Some(certs.ca());
        })
        .await;
        assert_sells_exactly_the_stock(&app).await;
        app.stop().await;
    }
}

#[tokio::test]
async fn a_plain_link_is_named_with_a_warning_in_the_start_up_log() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let redis = PrivateRedis::start(Persistence::None).await;
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("seckill.db").display());
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("SECKILL_DATABASE_URL", database)
        .env("SECKILL_REDIS_URL", redis.url())
        .env("SECKILL_REDIS_KEY_PREFIX", fresh_prefix())
        .env("SECKILL_HTTP_ADDR", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let named = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("backend link") {
                return line;
            }
        }
        panic!("seckill serve ended without naming its links");
    })
    .await
    .expect("no line names the links within 30 s");
    for word in ["WARN", "plain text", "redis_url", &redis.url()] {
        assert!(named.contains(word), "{word:?} missing: {named}");
    }
    server.kill().await.unwrap();
}
