//! The server loop on raw sockets: idle keep-alive connections are parked and woken without a
//! byte lost, closed ones end, and a stop does not wait for parked ones.

use crate::helpers::TestApp;
use seckill::http::serve::{PARK_AFTER, listen};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::timeout;

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n";

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads one `/healthz` answer off `stream`, and returns it.
async fn healthy(stream: &mut TcpStream) -> String {
    healthy_times(stream, 1).await
}

/// Reads `n` `/healthz` answers off `stream`, all `200`, and returns them.
async fn healthy_times(stream: &mut TcpStream, n: usize) -> String {
    let body = b"{\"status\":\"ok\"}";
    let count =
        |bytes: &[u8], what: &[u8]| bytes.windows(what.len()).filter(|w| *w == what).count();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    while count(&answer, body) < n || !answer.ends_with(body) {
        let n = timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    assert_eq!(count(&answer, b"HTTP/1.1 200 OK"), n, "{text}");
    text
}

/// Long enough for the server to have parked an idle connection.
async fn idle() {
    tokio::time::sleep(PARK_AFTER * 5 / 2).await;
}

#[tokio::test]
async fn an_idle_connection_is_parked_and_serves_again() {
    let app = TestApp::spawn().await;
    let mut stream = connect(&app).await;
    for _ in 0..3 {
        stream.write_all(HEALTHZ).await.unwrap();
        healthy(&mut stream).await;
        idle().await;
    }
    // Two requests in one write, after parking.
    stream
        .write_all(&[HEALTHZ, HEALTHZ].concat())
        .await
        .unwrap();
    healthy_times(&mut stream, 2).await;
    app.stop().await;
}

#[tokio::test]
async fn a_request_that_trickles_in_is_not_cut_off() {
    let app = TestApp::spawn().await;
    let mut stream = connect(&app).await;
    for byte in HEALTHZ.chunks(HEALTHZ.len() / 8 + 1) {
        stream.write_all(byte).await.unwrap();
        tokio::time::sleep(PARK_AFTER / 3).await;
    }
    let answer = healthy(&mut stream).await;
    assert!(!answer.contains("connection: close"), "{answer}");
    stream.write_all(HEALTHZ).await.unwrap();
    healthy(&mut stream).await;
    app.stop().await;
}

#[tokio::test]
async fn connections_closed_by_their_clients_end() {
    let app = TestApp::spawn().await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for round in 0..2 {
        let mut streams = Vec::new();
        for _ in 0..100 {
            let mut stream = connect(&app).await;
            stream.write_all(HEALTHZ).await.unwrap();
            healthy(&mut stream).await;
            streams.push(stream);
        }
        if round == 1 {
            idle().await;
        }
        drop(streams);
    }
    // Background tasks (a worker's consumers, timers) come and go; 200 connections that
    // never ended would stand out.
    let slack = 25;
    let mut alive = metrics.num_alive_tasks();
    for _ in 0..50 {
        if alive <= before + slack {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        alive = metrics.num_alive_tasks();
    }
    assert!(
        alive <= before + slack,
        "{alive} tasks alive, {before} before"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_stop_does_not_wait_for_parked_connections() {
    let app = TestApp::spawn().await;
    let mut parked = connect(&app).await;
    parked.write_all(HEALTHZ).await.unwrap();
    healthy(&mut parked).await;
    let _never_used = connect(&app).await;
    idle().await;
    timeout(Duration::from_secs(5), app.stop())
        .await
        .expect("the server stops within 5 s");
    let mut rest = Vec::new();
    let closed = timeout(Duration::from_secs(5), parked.read_to_end(&mut rest)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the parked connection is closed"
    );
}

/// A crowd connects within the same second: the kernel queues every handshake for `accept`,
/// however far behind the server is, instead of dropping some for the shopper's system to retry
/// a second later. (The listener here never accepts: the queue alone must hold them.)
#[tokio::test]
async fn a_thousand_connections_arriving_at_once_all_get_through() {
    let listener = listen(([127, 0, 0, 1], 0).into()).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut connecting = JoinSet::new();
    for _ in 0..1000 {
        // A dropped handshake is retried after one second at the earliest.
        connecting.spawn(timeout(
            Duration::from_millis(900),
            TcpStream::connect(addr),
        ));
    }
    let mut connected = Vec::new();
    while let Some(attempt) = connecting.join_next().await {
        if let Ok(stream) = attempt.unwrap() {
            connected.push(stream.unwrap());
        }
    }
    let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap_or_default();
    assert_eq!(
        connected.len(),
        1000,
        "handshakes dropped (the kernel caps the queue at net.core.somaxconn = {})",
        somaxconn.trim()
    );
}
