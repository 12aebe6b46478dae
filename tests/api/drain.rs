//! SIGTERM (or SIGINT) to a real `seckill serve` drains it as a load balancer needs: `/readyz`
//! answers `503 draining` at once while the server goes on serving through
//! `shutdown_grace_secs`; then it stops accepting, ends the dashboard streams, lets a request in
//! progress finish, closes the connections of clients that hold it past
//! `shutdown_timeout_secs`, and exits 0. A second signal skips the grace.

use crate::support::probes::{exits_within, readyz_turns, signal};
use crate::support::processes::embedded_server_with;
use crate::support::{ADMIN_TOKEN, TestDatabase, client_builder};
use reqwest::{Client, Response, StatusCode};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// `shutdown_grace_secs` of the drained server.
const GRACE: Duration = Duration::from_secs(3);
/// `shutdown_timeout_secs` of the drained server.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Room for a busy machine, on top of the bounds the test asserts.
const SLACK: Duration = Duration::from_secs(2);

/// A server of the real binary over a fresh database with `grace` and `timeout`; returns it,
/// its address, a client, and the database (kept as long as the server runs).
async fn server(
    grace: u64,
    timeout: u64,
) -> (tokio::process::Child, SocketAddr, Client, TestDatabase) {
    let db = TestDatabase::fresh().await;
    let (grace, timeout) = (grace.to_string(), timeout.to_string());
    let extra = [
        ("SECKILL_SHUTDOWN_GRACE_SECS", grace.as_str()),
        ("SECKILL_SHUTDOWN_TIMEOUT_SECS", timeout.as_str()),
    ];
    let (child, addr) = embedded_server_with(&db, None, &extra).await;
    let client = client_builder().build().unwrap();
    (child, addr.parse().unwrap(), client, db)
}

/// The operator's dashboard stream, signed in with the admin token, its first event read.
async fn dashboard_stream(base: &str) -> Response {
    let mut origin = reqwest::header::HeaderMap::new();
    origin.insert("origin", base.parse().unwrap());
    let browser = client_builder()
        .cookie_store(true)
        .default_headers(origin)
        .build()
        .unwrap();
    let signed_in = browser
        .post(format!("{base}/admin/login"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert!(signed_in.status().is_success(), "{}", signed_in.status());
    let mut stream = browser
        .get(format!("{base}/admin/dashboard/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let first = tokio::time::timeout(Duration::from_secs(5), stream.chunk()).await;
    assert!(
        matches!(first, Ok(Ok(Some(_)))),
        "the stream sends its first event"
    );
    stream
}

/// A sign-in whose head and first half of the body are sent: a request in progress. Returns
/// the connection and the rest of the body.
async fn half_sent_request(addr: SocketAddr) -> (TcpStream, &'static [u8]) {
    let body: &[u8] = br#"{"username": "nobody-at-all", "password": "not the password"}"#;
    let head = format!(
        "POST /api/v1/sessions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut connection = TcpStream::connect(addr).await.unwrap();
    connection.write_all(head.as_bytes()).await.unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    connection.write_all(first).await.unwrap();
    (connection, rest)
}

/// Sends SIGTERM to `server` at `base`, whose `/readyz` must answer 503 `draining` within a
/// second; returns its body and how long it took.
async fn terminated(
    server: &tokio::process::Child,
    client: &Client,
    base: &str,
) -> (serde_json::Value, Duration) {
    signal(server, "TERM").await;
    let (body, took) = readyz_turns(
        client,
        base,
        StatusCode::SERVICE_UNAVAILABLE,
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(body["status"], "draining", "{body}");
    (body, took)
}

/// A client that sends a body (within the body limit) a byte every 200 ms, for longer than
/// any test: never stalled, never done.
async fn trickle(addr: SocketAddr) {
    let Ok(mut connection) = TcpStream::connect(addr).await else {
        return;
    };
    let head = format!(
        "POST /api/v1/sessions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 10000\r\n\r\n{{"
    );
    if connection.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    while connection.write_all(b" ").await.is_ok() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_through_the_grace_and_exits_cleanly_within_the_timeout() {
    let (mut server, addr, client, _db) = server(GRACE.as_secs(), TIMEOUT.as_secs()).await;
    let base = format!("http://{addr}");
    readyz_turns(&client, &base, StatusCode::OK, Duration::from_secs(5)).await;
    let stream = dashboard_stream(&base).await;
    let (mut in_progress, rest) = half_sent_request(addr).await;
    // A client holding an idle connection, and one sending its body without end.
    let _idle = TcpStream::connect(addr).await.unwrap();
    let slow = tokio::spawn(trickle(addr));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let signalled = Instant::now();
    let (body, took) = terminated(&server, &client, &base).await;
    assert_eq!(body["checks"]["database"], "ok", "{body}");
    println!("/readyz answered 503 draining {took:?} after SIGTERM");

    // Through the grace, requests are served as before, on new connections too.
    let fresh = client_builder().build().unwrap();
    let events = fresh.get(format!("{base}/api/v1/events")).send().await;
    assert_eq!(events.unwrap().status(), StatusCode::OK);
    assert!(
        signalled.elapsed() < GRACE,
        "the checks took the whole grace: the test proved nothing"
    );

    // After the grace the server accepts no more, but the request in progress is answered.
    tokio::time::sleep_until(signalled + GRACE + Duration::from_millis(500)).await;
    in_progress.write_all(rest).await.unwrap();
    let mut answer = String::new();
    let read = tokio::time::timeout(TIMEOUT, in_progress.read_to_string(&mut answer)).await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "the request in progress is answered"
    );
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");

    // The dashboard stream has ended, with its last event saying why.
    let events = tokio::time::timeout(TIMEOUT, stream.text()).await;
    let events = events.expect("the dashboard stream ends").unwrap();
    assert!(events.contains("event: ended"), "{events}");

    // The idle and the slow client hold it no longer than the timeout; it exits cleanly.
    let (_, clean) = exits_within(&mut server, TIMEOUT + SLACK + SLACK).await;
    let stopped_after = signalled.elapsed();
    assert!(clean, "the drained server exits with status 0");
    assert!(
        stopped_after >= GRACE && stopped_after < GRACE + TIMEOUT + SLACK,
        "stopped {stopped_after:?} after SIGTERM: grace {GRACE:?}, timeout {TIMEOUT:?}"
    );
    slow.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_signal_skips_the_grace() {
    let grace = Duration::from_secs(60);
    let (mut server, addr, client, _db) = server(grace.as_secs(), TIMEOUT.as_secs()).await;
    let base = format!("http://{addr}");
    readyz_turns(&client, &base, StatusCode::OK, Duration::from_secs(5)).await;
    terminated(&server, &client, &base).await;
    let events = client.get(format!("{base}/api/v1/events")).send().await;
    assert_eq!(events.unwrap().status(), StatusCode::OK);
    signal(&server, "INT").await;
    let (took, clean) = exits_within(&mut server, TIMEOUT + SLACK).await;
    assert!(clean, "the server exits with status 0");
    println!("exited {took:?} after the second signal, with {grace:?} of grace left");
}
